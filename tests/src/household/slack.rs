//! The household's people on Slack: the real `baaaht-slack`, run by the daemon in its container
//! (its Slack traffic through the daemon's egress), against the fake Slack workspace. People
//! write direct messages and share files as Slack delivers them (Socket Mode envelopes, sent
//! again when not acknowledged, as Slack does), and read what the bot posts and edits in their
//! conversation, as the Slack app shows it.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde_json::{json, Value};

use super::{Outcome, Sent, PATIENCE, SORRY};
use crate::fake_slack::{slack_options, FakeSlack};
use crate::DaemonOptions;

/// How long Slack waits for an envelope's ack before it sends the event again, and the pauses
/// before its retries (Slack's Events API: at once, after a minute, after five).
const ACK_WITHIN: Duration = Duration::from_secs(3);
const RETRY_AFTER: [Duration; 3] = [Duration::ZERO, Duration::from_secs(60), Duration::from_secs(300)];

/// The workspace and its people.
pub(super) struct Workspace {
    pub(super) fake: FakeSlack,
    /// The household indexes of the people on Slack.
    pub(super) people: Vec<usize>,
}

/// The Slack user of household person `index`, and their conversation with the bot.
fn slack_user(index: usize) -> (String, String) {
    let user = format!("UH{index:02}");
    (user.clone(), format!("D{user}"))
}

impl Workspace {
    /// The fake workspace, started before the daemon: `options` then hold the gateway's tokens
    /// and let its container reach the fake (on loopback) through the daemon's egress.
    pub(super) async fn start(options: &mut DaemonOptions) -> Result<Workspace> {
        let fake = FakeSlack::start("T0HOUSE").await?;
        options.env.extend(slack_options().env);
        let port =
            fake.api_url().split(':').nth(2).and_then(|rest| rest.split('/').next()).unwrap_or_default().to_string();
        super::allow_egress(options, &format!("127.0.0.1:{port}"));
        Ok(Workspace { fake, people: vec![] })
    }

    /// Registers the gateway, run by the daemon in a container, and waits for its connection.
    pub(super) async fn open(&mut self, host: &mut Client, people: impl Iterator<Item = usize>) -> Result<()> {
        let request = v1::AddGatewayRequest {
            kind: "slack".into(),
            name: "work".into(),
            team: self.fake.team(),
            mode: "container".into(),
            args: vec!["--api-url".into(), self.fake.api_url()],
            ..Default::default()
        };
        host.admin.add_gateway(request).await.context("AddGateway slack")?;
        let connected = self.fake.wait_for(Duration::from_secs(120), |fake| fake.open_connections() > 0).await;
        anyhow::ensure!(connected, "the Slack gateway's container did not connect within 120 s");
        self.people = people.collect();
        Ok(())
    }

    /// Delivers `event` as Slack does: again while no connection acknowledges it, up to
    /// Slack's three retries. Whether it was acknowledged.
    async fn deliver(&self, event: Value, event_id: &str) -> bool {
        for (attempt, pause) in RETRY_AFTER.iter().enumerate() {
            tokio::time::sleep(*pause).await;
            // With no connection open, Slack holds the event until its next try.
            let Some(envelope) = self.fake.push_event(event.clone(), event_id, attempt as u32) else { continue };
            let acked = self
                .fake
                .wait_for(ACK_WITHIN, |fake| fake.acks().iter().any(|ack| ack["envelope_id"] == envelope.as_str()))
                .await;
            if acked {
                return true;
            }
        }
        false
    }
}

/// What the bot's messages in `channel` show now, for each message it posted there after call
/// `since` (an edit of an earlier one, a late answer to an earlier message, is not this one's):
/// (ts, text, when it was last written).
fn shown(fake: &FakeSlack, channel: &str, since: usize) -> Vec<(String, String, Instant)> {
    let mut messages: Vec<(String, String, Instant)> = vec![];
    for call in fake.calls_since(since).into_iter().filter(|call| !call.limited && call.params["channel"] == channel) {
        let text = call.params["text"].as_str().unwrap_or_default().to_string();
        match call.method.as_str() {
            "chat.postMessage" => {
                messages.push((call.answer["ts"].as_str().unwrap_or_default().to_string(), text, call.at));
            }
            "chat.update" => {
                let ts = call.params["ts"].as_str().unwrap_or_default();
                if let Some(message) = messages.iter_mut().find(|(each, ..)| each == ts) {
                    (message.1, message.2) = (text, call.at);
                }
            }
            _ => {}
        }
    }
    messages
}

/// Whether `text` is an answer still being written: the placeholder, a status line, or the
/// text so far with its trailing ellipsis.
fn writing(text: &str) -> bool {
    text == "_…_"
        || text.ends_with(" …")
        || text.ends_with("…_")
        || text.lines().last().is_some_and(|l| l.starts_with('_'))
}

/// Sends `content` (with a file named after the token when `file`) as person `index` on Slack,
/// and follows it to its answer: what the person saw.
pub(super) async fn follow(workspace: &Workspace, index: usize, content: &str, file: bool, sent: &mut Sent) {
    let fake = &workspace.fake;
    let (user, channel) = slack_user(index);
    // A Slack ts: seconds and microseconds, unique per message.
    let number: u64 = sent.token.trim_start_matches("hh").parse().unwrap_or_default();
    let ts = format!("1760{number:06}.000100");
    let mut event =
        json!({"type": "message", "channel": channel, "channel_type": "im", "user": user, "text": content, "ts": ts});
    if file {
        let name = format!("{}.txt", sent.token);
        let shared =
            fake.add_file(&format!("F{}", sent.token), &name, "text/plain", format!("{content}\n").into_bytes());
        event["subtype"] = json!("file_share");
        event["files"] = json!([shared]);
    }
    let since = fake.call_count();
    let asked = Instant::now();
    if !workspace.deliver(event, &format!("Ev{}", sent.token)).await {
        sent.outcome = Outcome::Lost("Slack could not deliver it: no connection acknowledged it".into());
        return;
    }
    let deadline = asked + PATIENCE;
    loop {
        for (_, text, at) in shown(fake, &channel, since) {
            if sent.first_word.is_none() && text != "_…_" && !text.starts_with('_') {
                sent.first_word = Some(at.duration_since(asked));
            }
            if writing(&text) {
                continue;
            }
            // A turn that did not finish says why after what it wrote.
            if let Some(why) = text.split(":warning: ").nth(1).or_else(|| text.split(":hourglass: ").nth(1)) {
                sent.outcome = Outcome::Refused(why.to_string());
                return;
            }
            if text.starts_with(SORRY) && text.contains(&sent.token) {
                sent.outcome = Outcome::Refused(text);
                return;
            }
            if super::answers(sent.kind, &text, &sent.token) {
                sent.outcome = Outcome::Answered;
                return;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            sent.outcome = Outcome::Lost(format!("no answer in Slack within {} s", PATIENCE.as_secs()));
            return;
        }
        let seen = fake.call_count();
        fake.wait_for(left.min(Duration::from_secs(1)), |fake| fake.call_count() != seen).await;
    }
}
