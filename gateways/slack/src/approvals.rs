//! Approval requests in Slack (DESIGN.md §10.2): a tool's connection waiting for someone to
//! allow it is posted in the thread of the turn being answered, as Block Kit buttons (once,
//! for this conversation, always, deny); a click comes back over Socket Mode as a
//! `block_actions` interaction and is answered as the Slack user who clicked (the daemon
//! decides whether they may); the first answer anywhere settles it, and the message then says
//! what was decided, by whom, without its buttons.

use serde_json::{json, Value};
use slack_morphism::prelude::*;

use baaaht_gateway_kit::sentences;
use baaaht_proto::v1;

use crate::gateway::{patiently, Gateway};

/// The buttons' action ids start with this; the rest is the decision.
const ACTION: &str = "baaaht_approval_";

/// The most requests waiting for an answer in one workspace at once.
const MAX_ASKED: usize = 256;

/// The request as Slack blocks: what waits, and the answers.
fn blocks(request: &v1::ApprovalRequest) -> Value {
    let command = sentences::asked_for(request);
    let asked = if command.is_empty() {
        String::new()
    } else {
        format!(" for `{}`", crate::mrkdwn::escape(&command.replace('`', "'")))
    };
    let text = format!(
        "*{}*{asked}. {}",
        crate::mrkdwn::escape(&sentences::wants_to_reach(request)),
        sentences::denied_in(request.expires_in_seconds)
    );
    let buttons: Vec<Value> = sentences::CHOICES
        .iter()
        .map(|(decision, label)| {
            let mut button = json!({
                "type": "button",
                "action_id": format!("{ACTION}{decision}"),
                "text": {"type": "plain_text", "text": label},
                "value": request.id,
            });
            match *decision {
                "once" => button["style"] = json!("primary"),
                "deny" => button["style"] = json!("danger"),
                _ => {}
            }
            button
        })
        .collect();
    json!([
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {"type": "actions", "block_id": format!("approval:{}", request.id), "elements": buttons},
    ])
}

impl Gateway {
    /// Shows an approval request (posts its buttons) or its answer (updates its message).
    pub(crate) async fn approval_event(
        &self,
        event: &v1::orchestrator_event::Event,
        channel: &SlackChannelId,
        thread: Option<&SlackTs>,
    ) {
        use v1::orchestrator_event::Event;
        let session = self.slack.open_session(&self.bot_token);
        match event {
            Event::Approval(request) => {
                {
                    // Posted once, however many turns of the context are following it; what
                    // was never settled here goes once it has expired.
                    let mut asked = self.asked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    asked.retain(|_, (.., until)| *until > std::time::Instant::now());
                    if asked.contains_key(&request.id) || asked.len() >= MAX_ASKED {
                        return;
                    }
                }
                let blocks: Vec<SlackBlock> = match serde_json::from_value(blocks(request)) {
                    Ok(blocks) => blocks,
                    Err(error) => return tracing::warn!(%error, "an approval request could not be written as blocks"),
                };
                let text = sentences::wants_to_reach(request);
                let content = SlackMessageContent::new().with_text(text).with_blocks(blocks);
                let post = SlackApiChatPostMessageRequest::new(channel.clone(), content).opt_thread_ts(thread.cloned());
                match patiently("chat.postMessage", || session.chat_post_message(&post)).await {
                    Ok(posted) => {
                        let until = std::time::Instant::now()
                            + std::time::Duration::from_secs(u64::from(request.expires_in_seconds) + 60);
                        let mut asked = self.asked.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                        asked.insert(request.id.clone(), (channel.clone(), posted.ts, until));
                    }
                    Err(error) => tracing::warn!(%error, "an approval request could not be posted"),
                }
            }
            Event::ApprovalSettled(settled) => {
                let posted = self.asked.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&settled.id);
                let Some((channel, ts, _)) = posted else { return };
                let text = sentences::settled(&settled.decision, &settled.by);
                let blocks = vec![SlackBlock::Section(SlackSectionBlock::new().with_text(md!("{}", text)))];
                let content = SlackMessageContent::new().with_text(text).with_blocks(blocks);
                let update = SlackApiChatUpdateRequest::new(channel, content, ts);
                if let Err(error) = patiently("chat.update", || session.chat_update(&update)).await {
                    tracing::warn!(%error, "an approval's answer could not be shown");
                }
            }
            _ => {}
        }
    }

    /// A `block_actions` interaction: a click on an approval's button, answered as the Slack
    /// user who clicked. What went wrong is told to them alone (chat.postEphemeral).
    pub async fn interact(&self, payload: &Value) {
        if payload["type"] != "block_actions" {
            return;
        }
        let user = payload["user"]["id"].as_str().unwrap_or_default();
        let team = payload["user"]["team_id"].as_str().or(payload["team"]["id"].as_str()).unwrap_or_default();
        if user.is_empty() || team != self.team {
            tracing::warn!(team, "an interaction from another workspace is ignored");
            return;
        }
        let identity = format!("slack:{team}:{user}");
        for action in payload["actions"].as_array().into_iter().flatten() {
            let Some(decision) = action["action_id"].as_str().and_then(|id| id.strip_prefix(ACTION)) else { continue };
            let id = action["value"].as_str().unwrap_or_default().to_string();
            let answer = v1::ApprovalAnswer { id: id.clone(), decision: decision.to_string() };
            let mut daemon = self.daemon.clone();
            if let Err(status) = daemon.sessions.answer_approval(self.person(&identity, user).request(answer)).await {
                tracing::info!(approval = %id, message = %status.message(), "an approval's answer was refused");
                let channel = payload["channel"]["id"].as_str().unwrap_or_default().to_string();
                let text = format!(":warning: {}", sentences::for_users(&status));
                let content = SlackMessageContent::new().with_text(text);
                let request = SlackApiChatPostEphemeralRequest::new(
                    SlackChannelId::new(channel),
                    SlackUserId::new(user.to_string()),
                    content,
                );
                let session = self.slack.open_session(&self.bot_token);
                if let Err(error) = session.chat_post_ephemeral(&request).await {
                    tracing::warn!(%error, "cannot tell the Slack user their answer was refused");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_is_a_section_and_four_buttons_carrying_its_id() {
        let request = v1::ApprovalRequest {
            id: "a-0123456789ab".into(),
            host: "pypi.org".into(),
            port: 443,
            asked_by: "exec: pip download <x>\nmore".into(),
            expires_in_seconds: 120,
            agent: v1::AgentRole::Coder as i32,
        };
        let written = blocks(&request);
        let parsed: Vec<SlackBlock> = serde_json::from_value(written.clone()).expect("slack-morphism reads them");
        assert_eq!(parsed.len(), 2);
        let text = written[0]["text"]["text"].as_str().expect("text");
        assert!(
            text.starts_with("*The coder's tools want to reach pypi.org:443* for `exec: pip download &lt;x&gt;`"),
            "{text}"
        );
        let ids: Vec<&str> = written[1]["elements"]
            .as_array()
            .expect("buttons")
            .iter()
            .map(|b| b["action_id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            ids,
            ["baaaht_approval_once", "baaaht_approval_session", "baaaht_approval_always", "baaaht_approval_deny"]
        );
        assert!(written[1]["elements"].as_array().expect("buttons").iter().all(|b| b["value"] == "a-0123456789ab"));
    }
}
