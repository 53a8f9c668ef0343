//! The Slack gateway against a fake Slack workspace and the real daemon. The fake's wire format
//! is proved first: Slack's official Python SDK (`slack_sdk` 3.47.0 from PyPI) talks to it —
//! the Web API (including a 429 with Retry-After, which the SDK waits out) and Socket Mode (an
//! event delivered, acknowledged, and a `disconnect` that makes the SDK reconnect).

use std::time::Duration;

use baaaht_tests::fake_slack::FakeSlack;
use serde_json::json;

/// Drives the fake with slack_sdk; prints one line per step.
const SDK_CLIENT: &str = r#"
import json, sys, threading
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.socket_mode import SocketModeClient
from slack_sdk.socket_mode.response import SocketModeResponse

web = WebClient(token="xoxb-sdk", base_url=sys.argv[1] + "/")
web.retry_handlers.append(RateLimitErrorRetryHandler(max_retry_count=1))
me = web.auth_test()
print("AUTH", me["team_id"], me["user_id"], flush=True)
posted = web.chat_postMessage(channel="C1", text="hello", thread_ts="1760000000.000001")
print("POSTED", posted["ts"], flush=True)
web.chat_update(channel="C1", ts=posted["ts"], text="hello again")
print("USER", web.users_info(user="U7")["user"]["profile"]["display_name"], flush=True)

seen = []
got = threading.Event()
def on_request(client, request):
    client.send_socket_mode_response(SocketModeResponse(envelope_id=request.envelope_id))
    seen.append(request.payload["event_id"])
    print("EVENT", request.payload["event_id"], request.payload["event"]["text"], flush=True)
    if len(seen) == 2:
        got.set()

socket = SocketModeClient(app_token="xapp-sdk", web_client=web)
socket.socket_mode_request_listeners.append(on_request)
socket.connect()
print("CONNECTED", flush=True)
if not got.wait(60):
    print("TIMEOUT", seen, flush=True)
    sys.exit(1)
socket.close()
print("DONE", flush=True)
"#;

#[test]
fn the_fake_slack_speaks_the_wire_format_of_slacks_own_sdk() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    fake.rate_limit_once("chat.postMessage", 1);
    let sdk = std::process::Command::new("python3")
        .args(["-c", SDK_CLIENT, &fake.api_url()])
        .env_remove("HTTPS_PROXY")
        .env_remove("HTTP_PROXY")
        .env_remove("https_proxy")
        .env_remove("http_proxy")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 with slack_sdk (scripts/test installs it)");
    rt.block_on(async {
        let connected = fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() == 1).await;
        assert!(connected, "the SDK opened no Socket Mode connection: {:#?}", fake.calls());
        let event = |text: &str| json!({"type": "message", "channel": "D1", "user": "U7", "text": text, "ts": "1760000001.000100", "channel_type": "im"});
        let first = fake.push_event(event("first"), "Ev001", 0).expect("sent");
        assert!(fake.wait_for(Duration::from_secs(30), |fake| fake.acks().iter().any(|ack| ack["envelope_id"] == first.as_str())).await);
        // Slack recycles the connection: the SDK opens a new one, and the next event arrives there.
        assert!(fake.disconnect("refresh_requested"));
        let reconnected = fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() == 2).await;
        assert!(reconnected, "the SDK did not reconnect after `disconnect`");
        let second = fake.push_event(event("second"), "Ev002", 0).expect("sent");
        assert!(fake.wait_for(Duration::from_secs(30), |fake| fake.acks().iter().any(|ack| ack["envelope_id"] == second.as_str())).await);
    });
    let output = sdk.wait_with_output().expect("the SDK's output");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[0], "AUTH T0FAKE UBOT");
    assert!(lines[1].starts_with("POSTED 1760000000."), "{printed}");
    assert_eq!(lines[2], "USER user-u7");
    assert_eq!(&lines[3..], ["CONNECTED", "EVENT Ev001 first", "EVENT Ev002 second", "DONE"]);
    // The 429 was waited out and the message sent once more; every call carried its token.
    let posts = fake.calls_of("chat.postMessage");
    assert_eq!(posts.iter().map(|call| call.limited).collect::<Vec<_>>(), [true, false]);
    assert_eq!(posts[1].params["thread_ts"], "1760000000.000001");
    assert_eq!(fake.calls_of("chat.update")[0].params["text"], "hello again");
    let opens = fake.calls_of("apps.connections.open");
    assert!(opens.len() >= 2 && opens.iter().all(|call| call.token == "xapp-sdk"), "{opens:#?}");
    assert!(fake.calls_of("auth.test").iter().all(|call| call.token == "xoxb-sdk"));
}
