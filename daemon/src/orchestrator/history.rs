//! What the Assistant sees of its session (the branch up to the new message, a compaction in
//! place of what it summarised), and compaction: a summary written by the model.

use super::*;

pub(super) fn message_chars(message: &v1::LlmMessage) -> usize {
    message
        .content
        .iter()
        .map(|block| match &block.block {
            Some(v1::content_block::Block::Text(text)) => text.len(),
            _ => 0,
        })
        .sum()
}

/// The context window (tokens) of `model` ("provider/model"), as far as the name tells.
pub fn context_window(model: &str) -> usize {
    let name = model.rsplit('/').next().unwrap_or(model);
    if name.starts_with("claude") {
        200_000
    } else if name.starts_with("gpt-4.1") {
        1_000_000
    } else if name.starts_with("gpt-") || name.starts_with("o1") || name.starts_with("o3") || name.starts_with("o4") {
        128_000
    } else if name.starts_with("gemini") {
        1_000_000
    } else {
        32_000
    }
}

const SUMMARY_REQUEST: &str = "Summarize the conversation so far for your own later use: who said what that still \
    matters, facts learnt, decisions, open questions and tasks in progress, names, paths and numbers. Write the \
    summary only, in plain sentences.";

/// Asks `model` (through the LLM gateway) for a summary of `branch`.
pub(super) async fn summarize(
    shared: &Arc<Shared>,
    record: &SessionRecord,
    branch: &[Entry],
    model: &str,
    correlation_id: &str,
) -> Result<String, OrchestratorError> {
    let names = sender_names(shared);
    let mut messages = history(branch, record.group_id.is_some().then_some(&names as &(dyn Fn(&str) -> String + Sync)));
    if messages.is_empty() {
        return Err(OrchestratorError::Invalid("the session has nothing to compact yet".into()));
    }
    let ask = v1::ContentBlock { block: Some(v1::content_block::Block::Text(SUMMARY_REQUEST.into())) };
    match messages.last_mut() {
        Some(last) if last.role == "user" => last.content.push(ask),
        _ => messages.push(v1::LlmMessage { role: "user".into(), content: vec![ask] }),
    }
    let request = v1::LlmRequest {
        model: model.to_string(),
        system: "You write faithful, compact summaries of conversations.".into(),
        messages,
        max_tokens: Some(2048),
        ..v1::LlmRequest::default()
    };
    let completion = v1::LlmCompletionRequest {
        request: Some(request),
        session_id: record.id.clone(),
        user_id: record.context().to_string(),
        correlation_id: correlation_id.to_string(),
    };
    let (mut client, _) = shared.llm.client(None).await.map_err(|error| OrchestratorError::Model(error.to_string()))?;
    let mut events = client
        .stream_completion(completion)
        .await
        .map_err(|status| OrchestratorError::Model(status.message().to_string()))?
        .into_inner();
    let mut summary = String::new();
    while let Some(event) =
        events.message().await.map_err(|status| OrchestratorError::Model(status.message().to_string()))?
    {
        use v1::llm_event::Event;
        match event.event.and_then(|event| event.event) {
            Some(Event::TextDelta(delta)) => summary.push_str(&delta.text),
            Some(Event::Error(error)) => return Err(OrchestratorError::Model(error.message)),
            _ => {}
        }
    }
    if summary.trim().is_empty() {
        return Err(OrchestratorError::Model("the summary came back empty".into()));
    }
    Ok(summary.trim().to_string())
}

/// Compacts session `id` on request: its current branch becomes a summary (a compaction
/// entry; the history stays in the tree). Waits for a turn in progress to end.
pub async fn compact(shared: &Arc<Shared>, id: &str) -> Result<String, OrchestratorError> {
    let record = shared.sessions.get(id).ok_or_else(|| SessionError::NotFound(id.to_string()))?;
    if record.status == SessionStatus::Archived {
        return Err(SessionError::Archived(id.to_string()).into());
    }
    let _no_turn_meanwhile = shared.turns.session_lock(id).lock_owned().await;
    let record = shared.sessions.get(id).unwrap_or(record);
    let leaf = record
        .leaf
        .clone()
        .ok_or_else(|| OrchestratorError::Invalid("the session has nothing to compact yet".into()))?;
    let branch = shared.sessions.read(id)?.branch(&leaf).map_err(SessionError::from)?;
    let model = record.model.clone().unwrap_or_else(|| agent_settings(shared, Role::Assistant).model.0);
    let summary = summarize(shared, &record, &branch, &model, &uuid::Uuid::new_v4().to_string()).await?;
    let compacted = branch.iter().skip(1).map(|entry| entry.id().to_string()).collect();
    let entry = shared.sessions.append(id, Some(&leaf), NewEntry::Compaction { summary, compacted })?;
    tracing::info!(session = id, entry = %entry, "session compacted");
    Ok(entry)
}

/// How a group's messages name their senders: the user's name, else the id the message
/// carries.
pub(super) fn sender_names(shared: &Shared) -> impl Fn(&str) -> String + Sync + '_ {
    move |sender| {
        shared
            .identities
            .user(sender)
            .map(|user| user.name)
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| sender.to_string())
    }
}

/// The conversation the Assistant sees for a branch (root → the new user message): user
/// messages, its own replies and its delegations (task and result, never the delegated
/// agent's own steps). A compaction on the branch replaces what it summarised. In a group
/// (`names` given) each user message starts with who wrote it.
pub fn history(branch: &[Entry], names: Option<&(dyn Fn(&str) -> String + Sync)>) -> Vec<v1::LlmMessage> {
    let compaction = branch.iter().rev().find_map(|entry| match entry {
        Entry::Compaction { summary, compacted_entry_ids, .. } => Some((summary.clone(), compacted_entry_ids.clone())),
        _ => None,
    });
    let mut turns: Vec<(&'static str, String)> = vec![];
    let skipped = compaction.as_ref().map(|(_, ids)| ids.as_slice()).unwrap_or_default();
    if let Some((summary, _)) = &compaction {
        turns.push(("user", format!("(A summary of the earlier conversation.)\n{summary}")));
    }
    for entry in branch {
        if skipped.iter().any(|id| id == entry.id()) {
            continue;
        }
        match entry {
            Entry::Message { message, .. } if message.role == "user" => {
                let text = match (&message.sender_id, names) {
                    (Some(sender), Some(names)) => format!("{}: {}", names(sender), message.content),
                    _ => message.content.clone(),
                };
                turns.push(("user", text));
            }
            Entry::Message { message, .. } if message.role == "assistant" => {
                turns.push(("assistant", message.content.clone()))
            }
            Entry::Delegate { agent, task, result, is_error, .. } => {
                let outcome = if *is_error { "failed" } else { "answered" };
                turns.push((
                    "assistant",
                    format!("(I delegated to the {agent}: {task})\n(The {agent} {outcome}: {result})"),
                ));
            }
            _ => {}
        }
    }
    // Consecutive texts of one side become one message; the model sees user first and last.
    let mut messages: Vec<v1::LlmMessage> = vec![];
    for (role, text) in turns {
        let block = v1::ContentBlock { block: Some(v1::content_block::Block::Text(text)) };
        if messages.is_empty() && role == "assistant" {
            continue;
        }
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.push(block),
            _ => messages.push(v1::LlmMessage { role: role.into(), content: vec![block] }),
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sessions::log::Message;

    fn message(id: &str, parent: &str, role: &str, content: &str, sender: Option<&str>) -> Entry {
        Entry::Message {
            id: id.into(),
            parent: parent.into(),
            timestamp: "t".into(),
            message: Message {
                role: role.into(),
                content: content.into(),
                channel_type: None,
                sender_id: sender.map(str::to_string),
            },
        }
    }

    fn texts(messages: &[v1::LlmMessage]) -> Vec<(String, Vec<String>)> {
        messages
            .iter()
            .map(|m| {
                let texts = m
                    .content
                    .iter()
                    .filter_map(|b| match &b.block {
                        Some(v1::content_block::Block::Text(text)) => Some(text.clone()),
                        _ => None,
                    })
                    .collect();
                (m.role.clone(), texts)
            })
            .collect()
    }

    #[test]
    fn history_keeps_delegations_and_names_group_senders() {
        let branch = vec![
            message("m1", "s", "user", "fix the build", Some("alice")),
            Entry::Delegate {
                id: "d1".into(),
                parent: "m1".into(),
                timestamp: "t".into(),
                agent: "coder".into(),
                task: "fix it".into(),
                result: "fixed".into(),
                is_error: false,
            },
            message("m2", "d1", "assistant", "Done.", None),
            message("x", "m2", "system", "The reply was interrupted", None),
            message("m3", "x", "user", "thanks", Some("bob")),
        ];
        let got = texts(&history(&branch, Some(&|sender: &str| sender.to_string())));
        assert_eq!(
            got,
            vec![
                ("user".to_string(), vec!["alice: fix the build".to_string()]),
                (
                    "assistant".to_string(),
                    vec![
                        "(I delegated to the coder: fix it)\n(The coder answered: fixed)".to_string(),
                        "Done.".to_string()
                    ]
                ),
                ("user".to_string(), vec!["bob: thanks".to_string()]),
            ]
        );
    }

    #[test]
    fn history_starts_from_the_last_compaction() {
        let branch = vec![
            message("m1", "s", "user", "old question", None),
            message("m2", "m1", "assistant", "old answer", None),
            Entry::Compaction {
                id: "c1".into(),
                parent: "m2".into(),
                timestamp: "t".into(),
                summary: "they talked about old things".into(),
                compacted_entry_ids: vec!["m1".into(), "m2".into()],
            },
            message("m3", "c1", "user", "new question", None),
        ];
        let got = texts(&history(&branch, None));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.len(), 2);
        assert!(got[0].1[0].contains("they talked about old things"));
        assert_eq!(got[0].1[1], "new question");
    }
}
