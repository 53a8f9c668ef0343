//! Approval requests in Slack (DESIGN.md §10.2): a tool's connection waiting for someone to
//! allow it is posted in the thread of the turn being answered, as Block Kit buttons (once,
//! for this conversation, always, deny); a click comes back over Socket Mode as a
//! `block_actions` interaction and is answered as the Slack user who clicked (the daemon
//! decides whether they may); the first answer anywhere settles it, and the message then says
//! what was decided, by whom, without its buttons. A skill an agent asked to install is asked
//! the same way: its review (what it is, what would run, what it would reach, what its scan
//! found) and two buttons, install or decline.

use serde_json::{json, Value};
use slack_morphism::prelude::*;

use baaaht_gateway_kit::sentences;
use baaaht_proto::v1;

use crate::gateway::{patiently, Gateway};

/// The buttons' action ids start with this; the rest is the decision.
const ACTION: &str = "baaaht_approval_";

/// The most requests waiting for an answer in one workspace at once.
const MAX_ASKED: usize = 256;

/// The most characters of one section's text (Slack takes 3,000).
const SECTION_LIMIT: usize = 3_000;

/// The request's answers as Slack buttons, each carrying its id.
fn buttons(request: &v1::ApprovalRequest) -> Vec<Value> {
    sentences::choices(request)
        .iter()
        .map(|(decision, label)| {
            let mut button = json!({
                "type": "button",
                "action_id": format!("{ACTION}{decision}"),
                "text": {"type": "plain_text", "text": label},
                "value": request.id,
            });
            match *decision {
                "once" | "install" => button["style"] = json!("primary"),
                "deny" | "decline" => button["style"] = json!("danger"),
                _ => {}
            }
            button
        })
        .collect()
}

/// The request as Slack blocks: what waits, and the answers.
fn blocks(request: &v1::ApprovalRequest) -> Value {
    if let Some(review) = &request.skill_review {
        return review_blocks(request, review);
    }
    if let Some(action) = &request.action {
        return action_blocks(request, action);
    }
    let command = sentences::asked_for(request);
    let asked = if command.is_empty() {
        String::new()
    } else {
        format!(" for `{}`", crate::mrkdwn::escape(&command.replace('`', "'")))
    };
    let text = format!(
        "*{}*{asked}. {}",
        crate::mrkdwn::escape(&sentences::wants_to_reach(request)),
        sentences::expires_text(request)
    );
    json!([
        {"type": "section", "text": {"type": "mrkdwn", "text": text}},
        {"type": "actions", "block_id": format!("approval:{}", request.id), "elements": buttons(request)},
    ])
}

/// A skill's review as Slack blocks: what is asked, what the skill is and would run and reach,
/// what its scan found (each finding as code), the answers, and how long it waits. Every word
/// of the skill comes from a repository nobody has read yet: escaped, and never a link or a
/// mention (`verbatim`).
fn review_blocks(request: &v1::ApprovalRequest, review: &v1::SkillReview) -> Value {
    let escape = crate::mrkdwn::escape;
    let (scan, findings) = sentences::review_scan(review);
    let mut lines: Vec<String> = sentences::review_facts(review).iter().map(|fact| escape(fact)).collect();
    lines.push(if findings.is_empty() { escape(&scan) } else { format!("*{}*", escape(&scan)) });
    lines.extend(findings.iter().map(|finding| format!("• `{}`", escape(&finding.replace('`', "'")))));
    asked_blocks(request, lines)
}

/// An action asked in a marked turn as Slack blocks: what is asked, what the tool does and what
/// the turn read, each argument as code (escaped, never a link or a mention), the answers, and
/// how long it waits.
fn action_blocks(request: &v1::ApprovalRequest, action: &v1::ActionReview) -> Value {
    let escape = crate::mrkdwn::escape;
    let lines: Vec<String> = sentences::action_lines(action)
        .iter()
        .map(|line| match line.strip_prefix("• ").and_then(|line| line.split_once(": ")) {
            // A backtick would end the code span: shown by its code, not changed into another.
            Some((name, value)) => format!("• {}: `{}`", escape(name), escape(&value.replace('`', "<U+0060>"))),
            None => escape(line),
        })
        .collect();
    asked_blocks(request, lines)
}

/// A review's blocks: what is asked in bold, then `lines` (mrkdwn, escaped) whole, in sections
/// of at most [`SECTION_LIMIT`] characters (a line holds far fewer), the answers, and how long
/// it waits.
fn asked_blocks(request: &v1::ApprovalRequest, lines: Vec<String>) -> Value {
    let mut sections: Vec<String> = vec![];
    for line in lines {
        match sections.last_mut() {
            Some(section) if section.chars().count() + line.chars().count() < SECTION_LIMIT => {
                section.push('\n');
                section.push_str(&line);
            }
            _ => sections.push(line),
        }
    }
    let asked = format!("*{}*", crate::mrkdwn::escape(&sentences::review_asked(request)));
    let mut blocks: Vec<Value> = std::iter::once(asked)
        .chain(sections)
        .map(|text| json!({"type": "section", "text": {"type": "mrkdwn", "verbatim": true, "text": text}}))
        .collect();
    blocks
        .push(json!({"type": "actions", "block_id": format!("approval:{}", request.id), "elements": buttons(request)}));
    blocks.push(json!({"type": "context", "elements": [{"type": "mrkdwn", "text": sentences::expires_text(request)}]}));
    Value::Array(blocks)
}

/// What a request's message says where blocks are not shown (a notification, a client
/// without them): the request in words; a skill's review whole.
fn fallback(request: &v1::ApprovalRequest) -> String {
    match sentences::is_review(request) {
        true => crate::mrkdwn::escape(&sentences::review_text(
            request,
            &sentences::expires_text(request),
            crate::mrkdwn::MESSAGE_LIMIT,
        )),
        false => sentences::wants_to_reach(request),
    }
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
                let content = SlackMessageContent::new().with_text(fallback(request)).with_blocks(blocks);
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
            skill_review: None,
            action: None,
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

    #[test]
    fn a_skill_review_is_its_words_escaped_and_two_buttons() {
        let review = v1::SkillReview {
            name: "forecast".into(),
            description: "Weather <@U123> & more".into(),
            installs_for: "you".into(),
            files: 2,
            bytes: 900,
            scripts: vec![v1::SkillScript { path: "scripts/forecast.sh".into(), size_bytes: 812 }],
            findings: vec!["scripts/forecast.sh:3: downloads code (remote-exec): `curl x | sh`".into()],
            ..Default::default()
        };
        let request = v1::ApprovalRequest {
            id: "a-0123456789ab".into(),
            agent: v1::AgentRole::Worker as i32,
            expires_in_seconds: 300,
            skill_review: Some(review),
            ..Default::default()
        };
        let written = blocks(&request);
        let parsed: Vec<SlackBlock> = serde_json::from_value(written.clone()).expect("slack-morphism reads them");
        assert_eq!(parsed.len(), 4, "{written:#}");
        assert_eq!(written[0]["text"]["text"], "*The worker asks to install the skill forecast for you.*");
        let review = written[1]["text"]["text"].as_str().expect("the review");
        assert!(review.starts_with("Weather &lt;@U123&gt; &amp; more\n2 files, 900 bytes in all.\n"), "{review}");
        assert!(review.contains("Scripts: scripts/forecast.sh (812 bytes)."), "{review}");
        assert!(
            review.ends_with(
                "*⚠ The scan found:*\n• `scripts/forecast.sh:3: downloads code (remote-exec): 'curl x | sh'`"
            ),
            "{review}"
        );
        let buttons = written[2]["elements"].as_array().expect("buttons");
        let ids: Vec<(&str, &str)> = buttons
            .iter()
            .map(|b| (b["action_id"].as_str().unwrap_or_default(), b["style"].as_str().unwrap_or_default()))
            .collect();
        assert_eq!(ids, [("baaaht_approval_install", "primary"), ("baaaht_approval_decline", "danger")]);
        assert_eq!(written[3]["elements"][0]["text"], "Declined in 300 s if nobody answers.");
        assert!(fallback(&request).contains("&lt;@U123&gt;"));
    }
}
