//! Slack in the compliance suite: `baaaht-slack` over Socket Mode against the fake workspace,
//! the person U7 in their direct messages with the bot.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baaaht_gateway_compliance::channel::File;
use baaaht_gateway_compliance::{Channel, FakeDaemon};
use serde_json::{json, Value};

use crate::fake_slack::FakeSlack;

const TEAM: &str = "T0FAKE";
/// The person, and their direct messages with the bot.
const PERSON: &str = "U7";
const DM: &str = "DU7";

pub struct Slack {
    fake: FakeSlack,
    gateway: crate::Running,
    /// The last event, file and message number given out.
    next: AtomicU64,
}

impl Slack {
    fn next(&self) -> u64 {
        self.next.fetch_add(1, Ordering::SeqCst) + 1
    }
}

impl Channel for Slack {
    /// The event as Slack delivered it, and its id.
    type Written = (Value, String);

    /// The most characters Slack shows of a message's text before it cuts it.
    const LIMIT: usize = 4000;
    const NAME: &'static str = "slack";

    fn secrets() -> HashMap<String, String> {
        HashMap::from([
            ("app_token".to_string(), "xapp-1-work".to_string()),
            ("bot_token".to_string(), "xoxb-1-work".to_string()),
        ])
    }

    async fn start(daemon: &FakeDaemon, health: &Path) -> Result<Slack, String> {
        let fake = FakeSlack::start(TEAM).await.map_err(|error| format!("the fake workspace: {error}"))?;
        let api = fake.api_url();
        let gateway = super::start_gateway(daemon, "baaaht-slack", health, &["--api-url", &api])?;
        let connected = fake.wait_for(Duration::from_secs(60), |fake| fake.connections_opened() >= 1).await;
        if !connected {
            return Err(format!("the gateway never opened a Socket Mode connection\n{}", gateway.log_text()));
        }
        Ok(Slack { fake, gateway, next: AtomicU64::new(0) })
    }

    fn identity(&self) -> String {
        format!("slack:{TEAM}:{PERSON}")
    }

    async fn write(&self, text: &str, files: &[File]) -> (Value, String) {
        let n = self.next();
        let mut event = json!({"type": "message", "channel": DM, "channel_type": "im", "user": PERSON, "text": text,
            "ts": format!("1760000100.{n:06}")});
        if !files.is_empty() {
            let shared: Vec<Value> = files
                .iter()
                .enumerate()
                .map(|(at, file)| {
                    self.fake.add_file(&format!("F{n}-{at}"), &file.name, &file.mime_type, file.bytes.clone())
                })
                .collect();
            event["subtype"] = json!("file_share");
            event["files"] = json!(shared);
        }
        let id = format!("Ev{n}");
        let sent = self.fake.push_event(event.clone(), &id, 0);
        assert!(sent.is_some(), "no Socket Mode connection to deliver on\n{}", self.gateway.log_text());
        (event, id)
    }

    async fn redeliver(&self, (event, id): &(Value, String)) {
        let sent = self.fake.push_event(event.clone(), id, 1);
        assert!(sent.is_some(), "no Socket Mode connection to deliver on\n{}", self.gateway.log_text());
    }

    fn shown(&self) -> Vec<String> {
        // Each message by its ts, as posted and then updated.
        let mut shown: Vec<(String, String)> = vec![];
        for call in self.fake.calls().into_iter().filter(|call| !call.limited && call.params["channel"] == DM) {
            let text = call.params["text"].as_str().unwrap_or_default().to_string();
            match call.method.as_str() {
                "chat.postMessage" => shown.push((call.answer["ts"].as_str().unwrap_or_default().into(), text)),
                "chat.update" => {
                    let ts = call.params["ts"].as_str().unwrap_or_default();
                    if let Some(message) = shown.iter_mut().find(|(posted, _)| posted == ts) {
                        message.1 = text;
                    }
                }
                _ => {}
            }
        }
        // As a Slack client renders mrkdwn's three escapes (`&lt;` is read as `<`).
        let rendered = |text: String| text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&");
        shown.into_iter().map(|(_, text)| rendered(text)).collect()
    }

    fn files(&self) -> Vec<File> {
        self.fake
            .shared_files()
            .into_iter()
            .filter(|shared| shared.channel == DM)
            .map(|shared| File { name: shared.name, mime_type: String::new(), bytes: shared.bytes, voice: false })
            .collect()
    }

    async fn answer_approval(&self, decision: &str) -> Result<(), String> {
        let asked = self.fake.calls_of("chat.postMessage").into_iter().rev().find(|call| {
            call.params["channel"] == DM && call.params["blocks"].to_string().contains("baaaht_approval_")
        });
        let Some(asked) = asked else { return Err("no message with buttons in the DM".into()) };
        let action = format!("baaaht_approval_{decision}");
        let blocks = match &asked.params["blocks"] {
            Value::String(text) => serde_json::from_str(text).unwrap_or(Value::Null),
            other => other.clone(),
        };
        let button = blocks
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|block| block["elements"].as_array().into_iter().flatten())
            .find(|element| element["action_id"] == action.as_str())
            .cloned();
        let Some(button) = button else { return Err(format!("no {action} button: {blocks}")) };
        let ts = asked.answer["ts"].clone();
        let n = self.next();
        let click = json!({
            "envelope_id": format!("env-click-{n}"),
            "type": "interactive",
            "accepts_response_payload": false,
            "payload": {
                "type": "block_actions",
                "user": {"id": PERSON, "username": "seven", "team_id": TEAM},
                "team": {"id": TEAM, "domain": "fake"},
                "api_app_id": crate::fake_slack::APP_ID,
                "container": {"type": "message", "message_ts": ts, "channel_id": DM, "is_ephemeral": false},
                "channel": {"id": DM, "name": "directmessage"},
                "message": {"ts": ts, "text": "approval"},
                "trigger_id": format!("{n}.2.3"),
                "actions": [{
                    "type": "button", "action_id": action, "block_id": format!("approval:{}", button["value"].as_str().unwrap_or_default()),
                    "text": button["text"], "value": button["value"], "action_ts": format!("1760000301.{n:06}"),
                }],
            },
        });
        if self.fake.send(&click) {
            Ok(())
        } else {
            Err("no Socket Mode connection to click on".into())
        }
    }

    fn set_offline(&self, offline: bool) {
        self.fake.set_offline(offline);
    }

    async fn wait_for(&self, wait: Duration, check: impl Fn(&Slack) -> bool + Send + Sync) -> bool {
        self.fake.wait_for(wait, |_| check(self)).await
    }

    fn log(&self) -> String {
        self.gateway.log_text()
    }
}
