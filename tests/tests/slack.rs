//! The Slack gateway (`baaaht-slack`, the real binary) against a fake Slack workspace and the
//! real daemon. The fake's wire format is proved first: Slack's official Python SDK (`slack_sdk` 3.47.0 from PyPI) talks to it —
//! the Web API (including a 429 with Retry-After, which the SDK waits out) and Socket Mode (an
//! event delivered, acknowledged, and a `disconnect` that makes the SDK reconnect).

use std::time::Duration;

use baaaht_proto::v1;
use baaaht_tests::fake_slack::{gateway_for, gateway_with, shown_in, slack_options, FakeSlack, SIGNING_SECRET};
use baaaht_tests::scenario;
use serde_json::{json, Value};

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
stream = web.chat_startStream(channel="C1", thread_ts="1760000000.000001", recipient_team_id="T0FAKE", recipient_user_id="U7")
web.chat_appendStream(channel="C1", ts=stream["ts"], markdown_text="streamed ")
web.chat_stopStream(channel="C1", ts=stream["ts"], chunks=[{"type": "markdown_text", "text": "answer"}])
print("STREAMED", stream["ts"], flush=True)
shared = web.files_upload_v2(channel="C1", content=b"month,cost\nMay,12\n", filename="report.csv", thread_ts="1760000000.000001")
print("SHARED", len(shared["files"]), flush=True)

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
    fake.offer_streaming();
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
    let stream = lines[3].strip_prefix("STREAMED ").expect("a stream");
    assert_eq!(fake.streamed_text(stream), "streamed answer");
    assert_eq!(&lines[4..], ["SHARED 1", "CONNECTED", "EVENT Ev001 first", "EVENT Ev002 second", "DONE"]);
    // A file as the SDK shares it (an upload address, its bytes there, one completion).
    let shared = fake.shared_files();
    let report = baaaht_tests::fake_slack::SharedFile {
        name: "report.csv".into(),
        bytes: b"month,cost\nMay,12\n".to_vec(),
        channel: "C1".into(),
        thread: Some("1760000000.000001".into()),
    };
    assert_eq!(shared, [report], "{:#?}", fake.calls());
    // The 429 was waited out and the message sent once more; every call carried its token.
    let posts = fake.calls_of("chat.postMessage");
    assert_eq!(posts.iter().map(|call| call.limited).collect::<Vec<_>>(), [true, false]);
    assert_eq!(posts[1].params["thread_ts"], "1760000000.000001");
    assert_eq!(fake.calls_of("chat.update")[0].params["text"], "hello again");
    let opens = fake.calls_of("apps.connections.open");
    assert!(opens.len() >= 2 && opens.iter().all(|call| call.token == "xapp-sdk"), "{opens:#?}");
    assert!(fake.calls_of("auth.test").iter().all(|call| call.token == "xoxb-sdk"));
}

fn dm(user: &str, text: &str, ts: &str) -> Value {
    json!({"type": "message", "channel": format!("D{user}"), "channel_type": "im", "user": user, "text": text, "ts": ts})
}

#[test]
fn a_dm_is_answered_in_the_dm_a_429_is_waited_out_and_a_redelivery_after_a_reconnect_is_dropped() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), slack_options()).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    rt.block_on(async {
        let connected = fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await;
        assert!(connected, "no Socket Mode connection\n{}\n{:#?}", gateway.log_text(), fake.calls());
        // Slack answers the first update with 429: the gateway waits it out.
        fake.rate_limit_once("chat.update", 1);
        let envelope = fake.push_event(dm("U7", "hello from slack", "1760000100.000100"), "EvDM1", 0).expect("sent");
        let acked = fake
            .wait_for(Duration::from_secs(10), |fake| {
                fake.acks().iter().any(|ack| ack["envelope_id"] == envelope.as_str())
            })
            .await;
        assert!(acked, "not acknowledged\n{}", gateway.log_text());
        let answered = fake
            .wait_for(Duration::from_secs(120), |fake| {
                shown_in(fake, "DU7").iter().any(|text| text == "echo: hello from slack")
            })
            .await;
        assert!(
            answered,
            "no answer in the DM: {:#?}\n{}\n{}",
            shown_in(&fake, "DU7"),
            gateway.log_text(),
            daemon.log_text()
        );
        // Slack recycles the connection; the gateway opens a new one, and the same event arrives
        // again there (a retry after a lost ack): acknowledged, not answered again.
        assert!(fake.disconnect("refresh_requested"));
        let reconnected = fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 2).await;
        assert!(reconnected, "no new connection after `disconnect`\n{}", gateway.log_text());
        let again = fake.push_event(dm("U7", "hello from slack", "1760000100.000100"), "EvDM1", 1).expect("sent");
        let acked = fake
            .wait_for(Duration::from_secs(10), |fake| {
                fake.acks().iter().any(|ack| ack["envelope_id"] == again.as_str())
            })
            .await;
        assert!(acked);
    });
    // The repeat was dropped before its ack (the gateway decides before it acknowledges), so
    // nothing more was posted for it.
    assert!(gateway.log_text().contains("a delivery seen before is dropped"), "{}", gateway.log_text());
    let posts = fake.calls_of("chat.postMessage");
    assert_eq!(posts.len(), 1, "{posts:#?}\n{}", gateway.log_text());
    assert!(!gateway.log_text().contains("a turn from Slack failed"), "{}", gateway.log_text());
    assert!(posts.iter().all(|call| call.token == "xoxb-1-work"));
    let updates = fake.calls_of("chat.update");
    assert!(updates.first().is_some_and(|call| call.limited), "the first update was refused: {updates:#?}");
    let waited = updates[1].at.duration_since(updates[0].at);
    assert!(waited >= Duration::from_millis(950), "Retry-After: 1 was not waited out ({waited:?})");
    assert_eq!(updates.last().map(|call| call.params["text"].clone()), Some(json!("echo: hello from slack")));
}

fn in_channel(user: &str, text: &str, ts: &str, thread_ts: Option<&str>) -> Value {
    let mut event =
        json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": user, "text": text, "ts": ts});
    if let Some(thread) = thread_ts {
        event["thread_ts"] = json!(thread);
    }
    event
}

/// The final text of each answer the bot posted in `channel`'s thread `thread`: the last
/// update of each posted message (by its ts).
fn thread_answers(fake: &FakeSlack, channel: &str, thread: &str) -> Vec<String> {
    let calls = fake.calls();
    calls
        .iter()
        .filter(|call| {
            call.method == "chat.postMessage" && call.params["channel"] == channel && call.params["thread_ts"] == thread
        })
        .filter_map(|posted| {
            let ts = posted.answer["ts"].as_str()?;
            let updates = calls.iter().filter(|call| call.method == "chat.update" && call.params["ts"] == ts);
            updates.filter_map(|call| call.params["text"].as_str()).next_back().map(str::to_string)
        })
        .collect()
}

#[test]
fn a_channel_mention_is_answered_in_its_thread_and_the_channel_shares_a_group_while_dms_stay_apart() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), slack_options()).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    // In a group the model reads who wrote each message, so the echo is `echo: NAME: text`.
    let shown = |fake: &FakeSlack, text: &str| {
        let ends =
            |call: &baaaht_tests::fake_slack::Call| call.params["text"].as_str().is_some_and(|t| t.ends_with(text));
        fake.calls().iter().any(|call| call.method == "chat.update" && ends(call))
    };
    rt.block_on(async {
        assert!(
            fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await,
            "{}",
            gateway.log_text()
        );
        // Chatter without a mention is not for the bot.
        fake.push_event(in_channel("U7", "lunch anyone?", "1760000200.000100", None), "EvC0", 0).expect("sent");
        // U7 mentions the bot: the answer goes in the thread of that message.
        fake.push_event(in_channel("U7", "<@UBOT> what's up?", "1760000200.000200", None), "EvC1", 0).expect("sent");
        let answered = fake.wait_for(Duration::from_secs(120), |fake| shown(fake, "what's up?")).await;
        assert!(answered, "{:#?}\n{}", fake.calls(), gateway.log_text());
        // U8 follows up in that thread with no mention.
        fake.push_event(in_channel("U8", "and you?", "1760000200.000300", Some("1760000200.000200")), "EvC2", 0)
            .expect("sent");
        let followed = fake.wait_for(Duration::from_secs(120), |fake| shown(fake, "and you?")).await;
        assert!(followed, "{:#?}\n{}", fake.calls(), gateway.log_text());
        // Their DMs are their own.
        fake.push_event(dm("U7", "my secret plan", "1760000300.000100"), "EvD7", 0).expect("sent");
        fake.push_event(dm("U8", "my other plan", "1760000300.000200"), "EvD8", 0).expect("sent");
        let both = fake
            .wait_for(Duration::from_secs(120), |fake| {
                shown(fake, "echo: my secret plan") && shown(fake, "echo: my other plan")
            })
            .await;
        assert!(both, "{:#?}\n{}", fake.calls(), gateway.log_text());
    });
    assert_eq!(
        thread_answers(&fake, "C1", "1760000200.000200"),
        ["echo: user-u7: what's up?", "echo: user-u8: and you?"],
        "answered in the thread, each message named by its writer's Slack name"
    );
    assert!(!shown_in(&fake, "C1").iter().any(|text| text.contains("lunch")), "chatter was answered");
    assert_eq!(shown_in(&fake, "DU7").last().map(String::as_str), Some("echo: my secret plan"));
    assert_eq!(shown_in(&fake, "DU8").last().map(String::as_str), Some("echo: my other plan"));
    assert!(!shown_in(&fake, "DU7").iter().any(|text| text.contains("other plan")));
    // The daemon's side: one group for the channel, one session holding both users' messages;
    // each DM in its own user's context.
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host");
        let group =
            host.admin.show_group(v1::GroupRef { id: "slack-T0FAKE-C1".into() }).await.expect("the channel's group");
        assert_eq!(group.into_inner().id, "slack-T0FAKE-C1");
        let filter = v1::SessionFilter {
            group_id: "slack-T0FAKE-C1".into(),
            context_type: v1::ContextType::Group as i32,
            ..Default::default()
        };
        let sessions = host.sessions.list_sessions(filter).await.expect("sessions").into_inner().sessions;
        assert_eq!(sessions.len(), 1, "{sessions:#?}");
        let read = v1::ReadSessionRequest { session_id: sessions[0].id.clone(), ..Default::default() };
        let transcript = format!("{:?}", host.sessions.read_session(read).await.expect("read").into_inner());
        assert!(transcript.contains("what's up?") && transcript.contains("and you?"), "{transcript}");
        // Each message names its writer: the users the two Slack identities are.
        for slack_user in ["slack:T0FAKE:U7", "slack:T0FAKE:U8"] {
            let user =
                host.admin.show_user(v1::UserRef { user: slack_user.into() }).await.expect("the user").into_inner();
            assert!(
                transcript.contains(&format!("sender_id: \"{}\"", user.id)),
                "{slack_user} ({}): {transcript}",
                user.id
            );
            assert_eq!(user.name, format!("user-{}", slack_user.rsplit(':').next().unwrap_or_default().to_lowercase()));
        }
        assert!(!transcript.contains("secret plan"), "a DM leaked into the channel's session");

        // As the gateway: U8 cannot read U7's DM session, and no identity outside the
        // workspace's namespace can be named at all.
        let u7 = host.admin.show_user(v1::UserRef { user: "slack:T0FAKE:U7".into() }).await.expect("U7").into_inner();
        let filter = v1::SessionFilter {
            user_id: u7.id.clone(),
            context_type: v1::ContextType::User as i32,
            ..Default::default()
        };
        let dms = host.sessions.list_sessions(filter).await.expect("U7's sessions").into_inner().sessions;
        assert_eq!(dms.len(), 1, "{dms:#?}");
        let options = baaaht_proto::client::ConnectOptions { token: Some(gateway.token.clone()), ..Default::default() };
        let mut as_gateway =
            baaaht_proto::client::connect(std::path::Path::new(&gateway.socket), options).await.expect("connect");
        let as_user = |identity: &str, message: v1::ReadSessionRequest| {
            let mut request = tonic::Request::new(message);
            request.metadata_mut().insert(baaaht_proto::USER_HEADER, identity.parse().expect("ascii"));
            request
        };
        let read = v1::ReadSessionRequest { session_id: dms[0].id.clone(), ..Default::default() };
        let own = as_gateway.sessions.read_session(as_user("slack:T0FAKE:U7", read.clone())).await;
        assert!(
            own.is_ok_and(|own| format!("{:?}", own.into_inner()).contains("secret plan")),
            "U7 reads their own DM"
        );
        let other = as_gateway.sessions.read_session(as_user("slack:T0FAKE:U8", read.clone())).await.expect_err("U8");
        assert_eq!(other.code(), tonic::Code::PermissionDenied, "{other:?}");
        let outside = as_gateway.sessions.read_session(as_user("slack:T0OTHER:U7", read)).await.expect_err("outside");
        assert!(outside.message().contains("T0FAKE"), "the refusal names the gateway's namespace: {outside:?}");
    });
}

/// A text file shared in a DM lands in the session's `uploads/` and the agents are told of it;
/// a file past the daemon's limit is refused with a sentence the user reads in Slack.
#[test]
fn a_file_shared_with_the_bot_reaches_the_sessions_uploads_and_a_file_an_agent_sends_is_shared_back() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let mut options = slack_options();
    options.env.push(("BAAAHT__SESSIONS__MAX_UPLOAD_BYTES".into(), "4096".into()));
    let brain = scenario::report_sending_brain(scenario::echo_brain());
    let (_provider, daemon) = scenario::start(&rt, brain, options).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    let notes = b"groceries: apples, bread\n".to_vec();
    let file = fake.add_file("F1", "my notes.txt", "text/plain", notes.clone());
    let big = fake.add_file("F2", "big.bin", "application/octet-stream", vec![7u8; 5000]);
    rt.block_on(async {
        assert!(fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await);
        let mut shared = dm("U7", "what is on the list?", "1760000300.000100");
        shared["subtype"] = json!("file_share");
        shared["files"] = json!([file]);
        fake.push_event(shared, "EvFile1", 0).expect("sent");
        let mention = "[attached: uploads/my_notes.txt (text/plain, 25 bytes) in the session's workspace]";
        let answered = fake
            .wait_for(Duration::from_secs(120), |fake| shown_in(fake, "DU7").iter().any(|text| text.contains(mention)))
            .await;
        assert!(answered, "{:#?}\n{}\n{}", shown_in(&fake, "DU7"), gateway.log_text(), daemon.log_text());
        let mut too_big = dm("U7", "", "1760000301.000100");
        too_big["subtype"] = json!("file_share");
        too_big["files"] = json!([big]);
        fake.push_event(too_big, "EvFile2", 0).expect("sent");
        let refused = fake
            .wait_for(Duration::from_secs(60), |fake| {
                shown_in(fake, "DU7").iter().any(|text| text.contains("larger than the 4.1 KB allowed"))
            })
            .await;
        assert!(refused, "{:#?}\n{}", shown_in(&fake, "DU7"), gateway.log_text());

        // The Worker sends a file: its message is posted in the DM and the file shared there.
        fake.push_event(dm("U7", scenario::ASK_FOR_REPORT, "1760000302.000100"), "EvFile3", 0).expect("sent");
        let shared = fake.wait_for(Duration::from_secs(120), |fake| !fake.shared_files().is_empty()).await;
        assert!(shared, "{:#?}\n{}\n{}", fake.calls(), gateway.log_text(), daemon.log_text());
        let shared = fake.shared_files();
        assert_eq!(shared.len(), 1, "{shared:#?}");
        assert_eq!((shared[0].name.as_str(), shared[0].bytes.as_slice()), (scenario::REPORT_NAME, scenario::REPORT));
        assert_eq!(shared[0].channel, "DU7");
        assert!(
            shown_in(&fake, "DU7").iter().any(|text| text == "Here is the *May* report."),
            "{:#?}",
            shown_in(&fake, "DU7")
        );
    });
    let downloads: Vec<_> = fake.calls().into_iter().filter(|call| call.method.starts_with("files/")).collect();
    assert!(downloads.iter().all(|call| call.token == "xoxb-1-work"), "{downloads:#?}");
    let sessions = std::fs::read_dir(daemon.data_dir.join("sessions")).expect("sessions");
    let stored: Vec<Vec<u8>> = sessions
        .filter_map(|entry| entry.ok())
        .filter_map(|entry| {
            let session = entry.file_name().to_string_lossy().to_string();
            baaaht_tests::workspace_file(&daemon.data_dir, &session, "uploads/my_notes.txt")
        })
        .collect();
    assert_eq!(stored, [notes], "the file is in exactly one session's uploads");
    let big_stored = std::fs::read_dir(daemon.data_dir.join("sessions")).expect("sessions").any(|entry| {
        let session = entry.expect("entry").file_name().to_string_lossy().to_string();
        baaaht_tests::workspace_file(&daemon.data_dir, &session, "uploads/big.bin").is_some()
    });
    assert!(!big_stored, "a refused file left nothing behind");
}

#[test]
fn a_picture_shared_with_the_bot_reaches_the_model_as_an_image() {
    use base64::Engine as _;
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let (provider, daemon) = scenario::start(&rt, scenario::echo_brain(), slack_options()).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    // A PNG by its bytes (its name and Slack's type could say anything).
    let mut png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR".to_vec();
    png.extend(std::iter::repeat_n(42u8, 200));
    let picture = fake.add_file("F9", "cat picture.png", "image/png", png.clone());
    let wanted = ("image/png".to_string(), base64::engine::general_purpose::STANDARD.encode(&png));
    rt.block_on(async {
        assert!(fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await);
        let mut shared = dm("U7", "what is in this picture?", "1760000500.000100");
        shared["subtype"] = json!("file_share");
        shared["files"] = json!([picture]);
        fake.push_event(shared, "EvPic1", 0).expect("sent");
        let shown = fake
            .wait_for(Duration::from_secs(120), |fake| {
                shown_in(fake, "DU7").iter().any(|text| text.contains("what is in this picture?"))
            })
            .await;
        assert!(shown, "{:#?}\n{}\n{}", shown_in(&fake, "DU7"), gateway.log_text(), daemon.log_text());
        assert_eq!(
            baaaht_tests::fake_provider::images_sent(&provider),
            std::slice::from_ref(&wanted),
            "the picture goes to the model as an image block"
        );
        // A follow-up in the same conversation: the model still sees the picture.
        answered(&fake, &daemon, "and its colour?", "EvPic2", "1760000500.000200").await;
        assert_eq!(baaaht_tests::fake_provider::images_sent(&provider), [wanted]);
    });
}

/// Slack's side of the Events API over HTTP, signed by slack_sdk's own SignatureVerifier: a
/// URL check, an event, the same event with a bad signature, a stale one, and Slack's retry.
const SDK_EVENTS: &str = r#"
import json, sys, time, urllib.request, urllib.error
from slack_sdk.signature import SignatureVerifier

url, secret = sys.argv[1], sys.argv[2]
signer = SignatureVerifier(secret)

def post(name, payload, age=0, bad=False, retry=None):
    body = json.dumps(payload)
    stamp = str(int(time.time()) - age)
    signature = signer.generate_signature(timestamp=stamp, body=body)
    if bad:
        signature = signature[:-1] + ("1" if signature[-1] == "0" else "0")
    headers = {"Content-Type": "application/json", "X-Slack-Request-Timestamp": stamp, "X-Slack-Signature": signature}
    if retry is not None:
        headers["X-Slack-Retry-Num"] = str(retry)
        headers["X-Slack-Retry-Reason"] = "http_timeout"
    request = urllib.request.Request(url, data=body.encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            print(name, response.status, response.read().decode(), flush=True)
    except urllib.error.HTTPError as error:
        print(name, error.code, flush=True)

post("CHECK", {"token": "x", "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P", "type": "url_verification"})
event = {"type": "message", "channel": "DU7", "channel_type": "im", "user": "U7", "text": "hello over http", "ts": "1760000400.000100"}
callback = {"token": "x", "team_id": "T0FAKE", "api_app_id": "A1", "type": "event_callback", "event_id": "EvHttp1", "event_time": int(time.time()), "event": event}
forged = dict(callback, event_id="EvHttp2", event=dict(event, text="forged"))
post("FORGED", forged, bad=True)
post("STALE", dict(callback, event_id="EvHttp3", event=dict(event, text="stale")), age=600)
post("EVENT", callback)
post("RETRY", callback, retry=1)
"#;

#[test]
fn the_events_api_over_http_takes_signed_fresh_events_only() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), slack_options()).expect("daemon");
    let gateway = gateway_with(&rt, &daemon, &fake, &["--events", "http", "--listen", "127.0.0.1:0"]);
    let address = rt.block_on(async {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let log = gateway.log_text();
            if let Some(line) = log.lines().find(|line| line.contains("serving the Events API")) {
                let address = line.split("address=").nth(1).and_then(|rest| rest.split_whitespace().next());
                break address.expect("the address in the log line").to_string();
            }
            assert!(std::time::Instant::now() < deadline, "the Events API was not served\n{log}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let output = std::process::Command::new("python3")
        .args(["-c", SDK_EVENTS, &format!("http://{address}/slack/events"), SIGNING_SECRET])
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()
        .expect("python3 with slack_sdk");
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}{}", String::from_utf8_lossy(&output.stderr));
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(
        lines,
        [
            r#"CHECK 200 {"challenge":"3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}"#,
            "FORGED 401",
            "STALE 401",
            "EVENT 200 {}",
            "RETRY 200 {}",
        ]
    );
    rt.block_on(async {
        let answered = fake
            .wait_for(Duration::from_secs(120), |fake| {
                shown_in(fake, "DU7").iter().any(|text| text == "echo: hello over http")
            })
            .await;
        assert!(answered, "{:#?}\n{}", shown_in(&fake, "DU7"), gateway.log_text());
    });
    // The retry was the same event: answered once; the forged and stale ones not at all.
    assert_eq!(fake.calls_of("chat.postMessage").len(), 1, "{}", gateway.log_text());
    let shown = shown_in(&fake, "DU7").join("\n");
    assert!(!shown.contains("forged") && !shown.contains("stale"), "{shown}");
    assert!(fake.connections_opened() == 0, "no Socket Mode connection with --events http");
}

/// Where the workspace has Slack's streaming API, a channel's answer is one streamed message
/// in the thread, addressed to the asker, with no message posted and updated.
#[test]
fn where_slack_streams_the_answer_is_a_streamed_message_in_the_thread() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    fake.offer_streaming();
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), slack_options()).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    let asked = "1760000500.000100";
    rt.block_on(async {
        assert!(fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await);
        fake.push_event(in_channel("U7", "<@UBOT> stream this", asked, None), "EvStream1", 0).expect("sent");
        let stopped =
            fake.wait_for(Duration::from_secs(120), |fake| !fake.calls_of("chat.stopStream").is_empty()).await;
        assert!(stopped, "{:#?}\n{}", fake.calls(), gateway.log_text());
    });
    let started = fake.calls_of("chat.startStream");
    assert_eq!(started.len(), 1, "{started:#?}");
    let params = &started[0].params;
    assert_eq!((&params["channel"], &params["thread_ts"]), (&json!("C1"), &json!(asked)));
    assert_eq!((&params["recipient_user_id"], &params["recipient_team_id"]), (&json!("U7"), &json!("T0FAKE")));
    let ts = started[0].answer["ts"].as_str().expect("the stream's ts");
    // In a group the agents read who wrote each message.
    assert_eq!(fake.streamed_text(ts), "echo: user-u7: stream this");
    assert!(fake.calls_of("chat.postMessage").is_empty() && fake.calls_of("chat.update").is_empty());
}

/// Registers the Slack gateway `work` for the fake's workspace, run by the daemon in `mode`
/// with `args`; the registration's answer.
fn run_by_daemon(
    rt: &tokio::runtime::Runtime,
    daemon: &baaaht_tests::TestDaemon,
    fake: &FakeSlack,
    mode: &str,
    args: &[&str],
) -> v1::AddGatewayResponse {
    rt.block_on(async {
        let mut host = scenario::host_client(daemon).await.expect("host client");
        let mut all = vec!["--api-url".to_string(), fake.api_url()];
        all.extend(args.iter().map(|arg| arg.to_string()));
        let request = v1::AddGatewayRequest {
            kind: "slack".into(),
            name: "work".into(),
            team: fake.team(),
            mode: mode.into(),
            args: all,
            ..Default::default()
        };
        host.admin.add_gateway(request).await.expect("AddGateway").into_inner()
    })
}

/// Pushes a DM and waits for its answer.
async fn answered(fake: &FakeSlack, daemon: &baaaht_tests::TestDaemon, text: &str, event_id: &str, ts: &str) {
    fake.push_event(dm("U7", text, ts), event_id, 0).expect("sent");
    let wanted = format!("echo: {text}");
    let shown = fake.wait_for(Duration::from_secs(120), |fake| shown_in(fake, "DU7").contains(&wanted)).await;
    assert!(shown, "no answer to `{text}`: {:#?}\n{}", shown_in(fake, "DU7"), daemon.log_text());
}

async fn gateway_state(daemon: &baaaht_tests::TestDaemon) -> v1::GatewayInfo {
    let mut host = scenario::host_client(daemon).await.expect("host client");
    let list = host.admin.list_gateways(v1::ListGatewaysRequest {}).await.expect("ListGateways").into_inner();
    list.gateways.into_iter().find(|info| info.name == "work").expect("gateway work")
}

#[test]
fn the_daemon_runs_the_gateway_and_restarts_it_when_it_dies_or_fails_its_health_checks() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let mut options = slack_options();
    options.env.extend([
        ("BAAAHT__ORCHESTRATOR__HEALTH_CHECK__INTERVAL".into(), "200".into()),
        ("BAAAHT__ORCHESTRATOR__HEALTH_CHECK__TIMEOUT".into(), "500".into()),
    ]);
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("daemon");
    let added = run_by_daemon(&rt, &daemon, &fake, "process", &["--unhealthy-after", "4"]);
    assert!(added.token.is_empty(), "a gateway the daemon runs needs no token of its own");
    assert_eq!(added.gateway.as_ref().map(|info| info.mode.as_str()), Some("process"));
    rt.block_on(async {
        let connected = fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await;
        assert!(connected, "the daemon's gateway did not connect\n{}", daemon.log_text());
        answered(&fake, &daemon, "first", "EvP1", "1760000200.000100").await;
        assert_eq!(gateway_state(&daemon).await.state, "running");

        // The process dies: the daemon starts another, which answers.
        let pids = baaaht_tests::gateway_pids(&daemon.data_dir, "baaaht-slack");
        assert_eq!(pids.len(), 1, "{pids:?}\n{}", daemon.log_text());
        let killed = std::process::Command::new("kill").args(["-9", &pids[0].to_string()]).status().expect("kill");
        assert!(killed.success());
        let back = fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 2).await;
        assert!(back, "the gateway was not restarted\n{}", daemon.log_text());
        answered(&fake, &daemon, "second", "EvP2", "1760000200.000200").await;
        assert!(daemon.log_text().contains("the gateway process exited"), "{}", daemon.log_text());

        // Slack goes away: the gateway says it is unhealthy, and after 3 failed checks the
        // daemon restarts it; the new one connects once Slack is back.
        let before = fake.calls_of("auth.test").len();
        let logged = daemon.log_text().len();
        fake.set_offline(true);
        let restarted = fake.wait_for(Duration::from_secs(60), |fake| fake.calls_of("auth.test").len() > before).await;
        assert!(restarted, "no restart after failed health checks\n{}", daemon.log_text());
        let since = daemon.log_text().split_off(logged);
        assert!(since.contains("3 checks in a row") && since.contains("no connection to Slack for"), "{since}");
        fake.set_offline(false);
        let back = fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 3).await;
        assert!(back, "no connection after Slack came back\n{}", daemon.log_text());
        answered(&fake, &daemon, "third", "EvP3", "1760000200.000300").await;
        let pids = baaaht_tests::gateway_pids(&daemon.data_dir, "baaaht-slack");
        assert_eq!(pids.len(), 1, "one gateway process at a time: {pids:?}");
    });
    // No Slack token is in the gateway's environment: it asked the daemon for them.
    let pid = *baaaht_tests::gateway_pids(&daemon.data_dir, "baaaht-slack").first().expect("a gateway process");
    let environ = std::fs::read(format!("/proc/{pid}/environ")).expect("environ");
    let environ = String::from_utf8_lossy(&environ);
    assert!(!environ.contains("xoxb-") && !environ.contains("xapp-"), "{environ}");
    assert!(fake.calls_of("chat.postMessage").iter().all(|call| call.token == "xoxb-1-work"));
}

#[test]
fn in_its_container_the_gateway_reaches_slack_only_through_the_daemon() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let port = fake.api_url().split(':').nth(2).and_then(|rest| rest.split('/').next()).unwrap_or_default().to_string();
    let mut options = slack_options();
    // The fake is on loopback, which the egress filter lets in only when told to.
    options.env.push(("BAAAHT__TOOLS__WEB_PROXY__ALLOW".into(), format!("[\"127.0.0.1:{port}\"]")));
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("daemon");
    let added = run_by_daemon(&rt, &daemon, &fake, "container", &[]);
    assert_eq!(added.gateway.as_ref().map(|info| info.mode.as_str()), Some("container"));
    rt.block_on(async {
        let connected = fake.wait_for(Duration::from_secs(120), |fake| fake.connections_opened() >= 1).await;
        assert!(connected, "the gateway's container did not connect\n{}", daemon.log_text());
        answered(&fake, &daemon, "from a container", "EvC1", "1760000300.000100").await;
        assert_eq!(gateway_state(&daemon).await.state, "running");
    });
    let container = baaaht_tests::gateway::only_container(&daemon);
    assert!(baaaht_tests::gateway_pids(&daemon.data_dir, "baaaht-slack").is_empty(), "no gateway on the host");
    // From inside, the egress socket opens Slack's hosts only.
    let refused = baaaht_tests::gateway::egress_from_inside(&container, baaaht_tests::gateway::EGRESS_SOCKET);
    assert!(refused.starts_with("HTTP/1.1 403 Forbidden"), "{refused}");
    assert!(refused.contains("example.com:443 is not a host gateway work needs"), "{refused}");
    rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("host client");
        let query = v1::AuditQuery { kind: "egress".into(), ..Default::default() };
        let records = host.admin.search_audit(query).await.expect("SearchAudit").into_inner().records;
        let tunnels: Vec<_> = records.iter().filter(|record| record.principal == "gateway:work").collect();
        assert!(!tunnels.is_empty(), "{records:#?}");
        assert!(tunnels.iter().any(|record| record.outcome == "allowed"), "{tunnels:#?}");
        assert!(
            tunnels.iter().any(|record| record.outcome == "refused" && record.detail_json.contains("example.com")),
            "{tunnels:#?}"
        );
        // Removed: the container goes, and so does its connection.
        host.admin.remove_gateway(v1::GatewayRef { name: "work".into() }).await.expect("RemoveGateway");
    });
    let running = baaaht_tests::docker(&["ps", "--format", "{{.Names}}"]).expect("docker ps");
    assert!(!running.contains(&container), "{running}");
    let closed = rt.block_on(fake.wait_for(Duration::from_secs(10), |fake| fake.open_connections() == 0));
    assert!(closed, "the removed gateway's Socket Mode connection is still open");
}

/// slack_sdk's own Block Kit models read the blocks the gateway posted: prints each block's
/// class, then each button's action id and value.
const SDK_BLOCKS: &str = r#"
import json, sys
from slack_sdk.models.blocks import Block, ActionsBlock, ButtonElement
blocks = Block.parse_all(json.loads(sys.argv[1]))
for block in blocks:
    print(type(block).__name__)
    if isinstance(block, ActionsBlock):
        for element in block.elements:
            assert isinstance(element, ButtonElement), element
            element.validate_json()
            print(element.action_id, element.value, element.style or "")
"#;

/// A tool's connection waiting for approval during a Slack turn is posted in the thread as
/// Block Kit buttons (read back by slack_sdk's models); a click, delivered as Slack delivers
/// it (a `block_actions` interaction over Socket Mode), answers it as the Slack user who
/// clicked, and the message then says what was decided, without its buttons.
#[test]
fn an_approval_request_is_slack_buttons_and_a_click_answers_it() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    let (bridge, port) = baaaht_tests::bridge_server();
    // The Slack user U7 is the user whose tools the test's Coder runs for.
    let mut options = slack_options();
    options.files.push(scenario::linked_identities(&[("slack:T0FAKE:U7", "baaaht-self-test", "Seven")]));
    options
        .files
        .push(("config/config.yaml".into(), format!("tools:\n  web_proxy:\n    allow: ['{bridge}:{port}']\n")));
    // The turn takes a while, as a real model's would: the request comes while it runs.
    let brain = scenario::paced_echo_brain(Duration::from_secs(3));
    let (_provider, daemon) = scenario::start(&rt, brain, options).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    let coder = daemon.lingering_agent("coder", None, &[]).expect("coder");
    let logs = || format!("{}\n{}\n{:#?}", gateway.log_text(), daemon.log_text(), fake.calls());
    let posted_buttons = |fake: &FakeSlack| {
        fake.calls_of("chat.postMessage")
            .into_iter()
            .find(|call| call.params["blocks"].to_string().contains("baaaht_approval_"))
    };
    rt.block_on(async {
        assert!(fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await, "{}", logs());
        fake.push_event(dm("U7", "take your time", "1760000300.000100"), "EvAP1", 0).expect("sent");
        let answering = fake.wait_for(Duration::from_secs(30), |fake| !shown_in(fake, "DU7").is_empty()).await;
        assert!(answering, "the turn did not start\n{}", logs());
    });
    let fetching = baaaht_tests::fetch_in_background(&coder, format!("{bridge}:{port}"));
    let posted = rt.block_on(async {
        let asked = fake.wait_for(Duration::from_secs(30), |fake| posted_buttons(fake).is_some()).await;
        assert!(asked, "no buttons\n{}", logs());
        posted_buttons(&fake).expect("posted")
    });
    assert_eq!(posted.params["channel"], "DU7");
    let blocks = posted.params["blocks"].clone();
    let read = std::process::Command::new("python3")
        .args(["-c", SDK_BLOCKS, &blocks.to_string()])
        .output()
        .expect("python3 with slack_sdk");
    let printed = String::from_utf8_lossy(&read.stdout).into_owned();
    assert!(read.status.success(), "{printed}{}", String::from_utf8_lossy(&read.stderr));
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines[..2], ["SectionBlock", "ActionsBlock"], "{printed}");
    let id = lines[2].split_whitespace().nth(1).expect("the request's id").to_string();
    assert!(id.starts_with("a-"), "{printed}");
    assert_eq!(
        lines[2..].iter().map(|line| line.split_whitespace().next().unwrap_or_default()).collect::<Vec<_>>(),
        ["baaaht_approval_once", "baaaht_approval_session", "baaaht_approval_always", "baaaht_approval_deny"]
    );
    let ts = posted.answer["ts"].as_str().unwrap_or_default().to_string();

    // U7 clicks "For this conversation".
    let click = json!({
        "envelope_id": "env-click-1",
        "type": "interactive",
        "accepts_response_payload": false,
        "payload": {
            "type": "block_actions",
            "user": {"id": "U7", "username": "seven", "team_id": "T0FAKE"},
            "team": {"id": "T0FAKE", "domain": "fake"},
            "api_app_id": "A0FAKE",
            "container": {"type": "message", "message_ts": ts, "channel_id": "DU7", "is_ephemeral": false},
            "channel": {"id": "DU7", "name": "directmessage"},
            "message": {"ts": ts, "text": "approval"},
            "trigger_id": "1.2.3",
            "actions": [{
                "type": "button", "action_id": "baaaht_approval_session", "block_id": format!("approval:{id}"),
                "text": {"type": "plain_text", "text": "For this conversation"}, "value": id, "action_ts": "1760000301.000200",
            }],
        },
    });
    assert!(fake.send(&click), "a connection to send the click on");
    let fetched = fetching.join().expect("fetch");
    assert!(fetched.contains("arrived: GET /x"), "{fetched}\n{}", logs());
    rt.block_on(async {
        let settled = fake
            .wait_for(Duration::from_secs(30), |fake| {
                fake.calls_of("chat.update").iter().any(|call| {
                    call.params["ts"] == ts.as_str()
                        && call.params["text"]
                            .as_str()
                            .is_some_and(|text| text.starts_with("Allowed for this conversation, by "))
                        && !call.params["blocks"].to_string().contains("baaaht_approval_")
                })
            })
            .await;
        assert!(settled, "the message was not settled\n{}", logs());
        // Slack asks for the ack within 3 s; the gateway sends it beside the answer, not after it.
        let acked = fake
            .wait_for(Duration::from_secs(3), |fake| fake.acks().iter().any(|ack| ack["envelope_id"] == "env-click-1"))
            .await;
        assert!(acked, "the click was not acknowledged: {:?}\n{}", fake.acks(), logs());
    });
    let answers = daemon.audit_records("egress");
    let answered: Vec<_> = answers.iter().filter(|record| record["outcome"] == "answered").collect();
    assert_eq!(answered.len(), 1, "{answered:#?}");
    assert!(answered[0]["principal"].as_str().is_some_and(|p| p.starts_with("gateway:work")), "{answered:#?}");
    drop(coder);
}

#[test]
fn with_notify_channel_slack_an_admin_is_told_of_a_restart_on_slack() {
    let rt = baaaht_tests::runtime();
    let fake = rt.block_on(FakeSlack::start("T0FAKE")).expect("fake slack");
    // The Slack user U7 is the admin u-admin; health notices go to Slack.
    let mut options = slack_options();
    options.files.push(scenario::linked_identities(&[("slack:T0FAKE:U7", "u-admin", "Seven")]));
    options.files.push((
        "config/config.yaml".into(),
        "system:\n  admin_users: [u-admin]\norchestrator:\n  health_check:\n    interval: 200\n    timeout: 200\n    \
         failure_threshold: 3\n    notify_channel: slack\n"
            .into(),
    ));
    let (_provider, daemon) = scenario::start(&rt, scenario::echo_brain(), options).expect("daemon");
    let gateway = gateway_for(&rt, &daemon, &fake);
    let logs = || format!("{}\n{}\n{:#?}", gateway.log_text(), daemon.log_text(), fake.calls());
    rt.block_on(async {
        assert!(fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await, "{}", logs());
        // The admin writes to the bot once: the gateway follows them from then on.
        fake.push_event(dm("U7", "hello", "1760000400.000100"), "EvNC1", 0).expect("sent");
        let answered = fake
            .wait_for(Duration::from_secs(120), |fake| shown_in(fake, "DU7").iter().any(|text| text == "echo: hello"))
            .await;
        assert!(answered, "no answer\n{}", logs());
    });
    // Their Assistant hangs (paused): it is restarted, and they are told on Slack.
    let filters = ["--filter", "name=^baaaht-assistant-", "--filter", "label=baaaht.context=user:u-admin"];
    let assistant = baaaht_tests::docker(&[&["ps"][..], &filters, &["--format", "{{.Names}}"]].concat())
        .expect("docker ps")
        .lines()
        .next()
        .expect("the admin's Assistant waits")
        .to_string();
    baaaht_tests::docker(&["pause", &assistant]).expect("docker pause");
    rt.block_on(async {
        let told = fake
            .wait_for(Duration::from_secs(60), |fake| {
                shown_in(fake, "DU7").iter().any(|text| text.contains("assistant container restarted"))
            })
            .await;
        assert!(told, "not told on Slack: {:#?}\n{}", shown_in(&fake, "DU7"), logs());
    });
    let told = shown_in(&fake, "DU7").into_iter().find(|text| text.contains("restarted")).unwrap_or_default();
    assert!(told.contains(&assistant) && told.contains("failed 3 health checks in a row"), "{told}");
    // Told there, not kept again in the inbox.
    let inbox = rt.block_on(async {
        let mut host = scenario::host_client(&daemon).await.expect("client");
        let request =
            v1::InboxRequest { context: Some(scenario::user("u-admin")), unread_only: false, mark_read: false };
        host.sessions.list_inbox(request).await.expect("inbox").into_inner().items
    });
    assert!(inbox.iter().all(|item| !item.content.contains(&assistant)), "{inbox:?}");
}
