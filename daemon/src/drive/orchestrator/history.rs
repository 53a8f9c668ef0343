//! What the Assistant sees of its session (the branch up to the new message, a compaction in
//! place of what it summarised), and compaction: a summary written by the model.

use super::*;

use baaaht_llm::model::{Block, Message, Request, Role as Side};

pub(super) fn message_chars(message: &Message) -> usize {
    message
        .content
        .iter()
        .map(|block| match block {
            Block::Text(text) => text.len(),
            Block::Image { .. } => baaaht_proto::IMAGE_TOKENS * 4,
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

/// Whether `model` ("provider/model") takes images, as far as the name tells: Claude 3 and
/// later, GPT-4o, GPT-4.1 and later, the o-series but its text-only minis and previews, Gemini,
/// and open models named for vision.
pub(super) fn sees_images(model: &str) -> bool {
    let name = model.rsplit('/').next().unwrap_or(model).to_ascii_lowercase();
    let starts = |prefixes: &[&str]| prefixes.iter().any(|prefix| name.starts_with(prefix));
    let has = |parts: &[&str]| parts.iter().any(|part| name.contains(part));
    let text_only = starts(&["claude-2", "claude-instant", "o1-mini", "o1-preview", "o3-mini", "gpt-4-turbo-preview"]);
    let known = starts(&["claude", "gpt-4o", "gpt-4.1", "gpt-4-turbo", "gpt-5", "o1", "o3", "o4", "chatgpt-4o"])
        || starts(&["gemini", "grok-4", "llava", "bakllava", "pixtral", "gemma3", "llama4", "moondream", "minicpm-v"])
        || has(&["vision", "-vl", "vl-", "qwen2.5vl", "qwen3-vl", "mistral-small-3.1", "mistral-small-3.2"])
        || has(&["mistral-medium"]);
    known && !text_only
}

/// The most images a turn shows the model: the newest of its last [`RECENT_TURNS`].
pub(super) const MAX_IMAGES: usize = 4;
/// The user messages whose pictures are shown: older ones are named in their text only, so a
/// picture is not paid for on every turn forever, nor one a provider refuses sent forever.
pub(super) const RECENT_TURNS: usize = 3;

/// Images shared on the branch, read for the model (type and bytes), or why one cannot be
/// shown, by their `uploads/…` path.
pub type Images = std::collections::HashMap<String, Result<(String, Vec<u8>), PictureError>>;

/// Why a picture shared on the branch is not shown to the model (it is told so, in a sentence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PictureError {
    #[error("it is not a PNG, JPEG, GIF or WebP picture")]
    NotAPicture,
    #[error(
        "only PNG, JPEG, GIF and WebP pictures of at most {} are shown",
        baaaht_proto::human_size(crate::store::uploads::MAX_PICTURE_BYTES)
    )]
    TooLarge,
    #[error("it could not be read")]
    Unreadable,
}

/// The entries the model sees of `branch`: all, or a compaction's summary and what came after.
fn visible(branch: &[Entry]) -> (Option<&str>, Vec<&Entry>) {
    let compaction = branch.iter().rev().find_map(|entry| match entry {
        Entry::Compaction { summary, compacted_entry_ids, .. } => Some((summary.as_str(), compacted_entry_ids)),
        _ => None,
    });
    let skipped = compaction.map(|(_, ids)| ids.as_slice()).unwrap_or_default();
    let shown = branch.iter().filter(|entry| !skipped.iter().any(|id| id == entry.id())).collect();
    (compaction.map(|(summary, _)| summary), shown)
}

/// The pictures of `branch` a turn shows the model: the newest [`MAX_IMAGES`] shared with its
/// last [`RECENT_TURNS`] user messages (each is then read and checked, [`Images`]).
pub(super) fn wanted_images(branch: &[Entry]) -> Vec<crate::store::sessions::log::Attachment> {
    let (_, shown) = visible(branch);
    shown
        .iter()
        .rev()
        .filter_map(|entry| match entry {
            Entry::Message { message, .. } if message.role == "user" => Some(message.attachments.iter().rev()),
            _ => None,
        })
        .take(RECENT_TURNS)
        .flatten()
        .filter(|attachment| attachment.mime_type.starts_with("image/"))
        .take(MAX_IMAGES)
        .cloned()
        .collect()
}

const SUMMARY_REQUEST: &str = "Summarize the conversation so far for your own later use: who said what that still \
    matters, facts learnt, decisions, open questions and tasks in progress, names, paths and numbers. Write the \
    summary only, in plain sentences.";

/// The context window of `model` in tokens: as the LLM gateway tells it (providers.yaml, or
/// the server itself), else as the name tells.
pub(super) async fn window_of(orchestrator: &Orchestrator, model: &str) -> usize {
    match orchestrator.llm.context_window(model).await {
        Some(window) => window,
        None => context_window(model),
    }
}

/// Asks `model` (through the LLM gateway) for a summary of `branch`, of what fits half its
/// context `window` (the newest messages; the rest is dropped), answered in at most a quarter.
pub(super) async fn summarize(
    orchestrator: &Arc<Orchestrator>,
    record: &SessionRecord,
    branch: &[Entry],
    model: &str,
    correlation_id: &str,
    window: usize,
) -> Result<String, OrchestratorError> {
    let names = sender_names(orchestrator);
    let group = record.group_id.is_some().then_some(&names as &(dyn Fn(&str) -> String + Sync));
    // A summary request offers no tools, and may drop its oldest messages: a delegation is
    // told in words there (a provider refuses a tool call without its tool, or a result
    // without its call).
    let mut messages = history(branch, group, &Images::new());
    for message in &mut messages {
        for block in &mut message.content {
            let told = match block {
                Block::ToolUse { input, .. } => {
                    format!(
                        "[delegated to the {}: {}]",
                        input["agent"].as_str().unwrap_or("agent"),
                        input["task"].as_str().unwrap_or("")
                    )
                }
                Block::ToolResult { content, is_error, .. } => {
                    format!("[{}: {content}]", if *is_error { "it failed" } else { "its answer" })
                }
                _ => continue,
            };
            *block = Block::Text(told);
        }
    }
    if messages.is_empty() {
        return Err(OrchestratorError::Invalid("the session has nothing to compact yet".into()));
    }
    let fits = |messages: &[Message]| messages.iter().map(message_chars).sum::<usize>() / 4 <= window / 2;
    let mut dropped = 0;
    while messages.len() > 1 && !fits(&messages) {
        messages.remove(0);
        dropped += 1;
    }
    if dropped > 0 {
        tracing::info!(dropped, window, "the oldest messages do not fit the summary request and are left out");
        // A conversation begins with the user, and its roles take turns.
        if messages[0].role != Side::User {
            let cut = "(The beginning of the conversation is left out.)";
            messages.insert(0, Message { role: Side::User, content: vec![Block::Text(cut.into())] });
        }
    }
    let ask = Block::Text(SUMMARY_REQUEST.into());
    match messages.last_mut() {
        Some(last) if last.role == Side::User => last.content.push(ask),
        _ => messages.push(Message { role: Side::User, content: vec![ask] }),
    }
    let request = Request {
        model: model.to_string(),
        system: "You write faithful, compact summaries of conversations.".into(),
        messages,
        max_tokens: Some((window / 4).clamp(256, 2048) as u32),
        ..Request::default()
    };
    // The summary is a model call of the context's like any other: within its budget, counted
    // in its usage.
    let payer = crate::model::llm::call::Payer {
        principal: "daemon:compaction".into(),
        context: record.context(),
        session: record.id.clone(),
        correlation_id: correlation_id.to_string(),
    };
    orchestrator.calls.complete(&payer, request).await.map_err(|error| match error {
        crate::model::llm::call::CallError::Budget(sentence) => OrchestratorError::Budget(sentence),
        other => OrchestratorError::Model(other.to_string()),
    })
}

/// Compacts session `id` on request: its current branch becomes a summary (a compaction
/// entry; the history stays in the tree). Waits for a turn in progress to end.
pub async fn compact(orchestrator: &Arc<Orchestrator>, id: &str) -> Result<String, OrchestratorError> {
    let record = orchestrator.sessions.get(id).ok_or_else(|| SessionError::NotFound(id.to_string()))?;
    if record.status == SessionStatus::Archived {
        return Err(SessionError::Archived(id.to_string()).into());
    }
    let _no_turn_meanwhile = orchestrator.turns.session_lock(id).lock_owned().await;
    let record = orchestrator.sessions.get(id).unwrap_or(record);
    let leaf = record
        .leaf
        .clone()
        .ok_or_else(|| OrchestratorError::Invalid("the session has nothing to compact yet".into()))?;
    let branch = orchestrator.sessions.read(id)?.branch(&leaf).map_err(SessionError::from)?;
    let model = record.model.clone().unwrap_or_else(|| agent_settings(orchestrator, Role::Assistant).model.0);
    let window = window_of(orchestrator, &model).await;
    let summary = summarize(orchestrator, &record, &branch, &model, &uuid::Uuid::new_v4().to_string(), window).await?;
    let compacted = branch.iter().skip(1).map(|entry| entry.id().to_string()).collect();
    let entry = NewEntry::Compaction { summary, compacted, senders: senders(&branch) };
    let entry = orchestrator.sessions.append(id, Some(&leaf), entry)?;
    tracing::info!(session = id, entry = %entry, "session compacted");
    Ok(entry)
}

/// The senders, other than the one of `asked` (the turn's message), of the user messages the
/// Assistant sees on `branch`; `None` when there are none (DESIGN.md §10.3: their words are
/// not the asker's).
pub(super) fn other_senders(branch: &[Entry], asked: &str) -> Option<Vec<String>> {
    let asker = asker(branch, asked)?;
    let others: Vec<String> = senders(branch).into_iter().filter(|sender| *sender != asker).collect();
    (!others.is_empty()).then_some(others)
}

/// The sender of the message `asked` on `branch`.
pub(super) fn asker(branch: &[Entry], asked: &str) -> Option<String> {
    branch.iter().find_map(|entry| match entry {
        Entry::Message { id, message, .. } if id == asked => message.sender_id.clone(),
        _ => None,
    })
}

/// Whose words the Assistant sees on `branch`: the senders of its user messages, and of those
/// a compaction it sees summarised (a summary carries their words), first seen first.
pub(super) fn senders(branch: &[Entry]) -> Vec<String> {
    let summarised = branch.iter().rev().find_map(|entry| match entry {
        Entry::Compaction { senders, .. } => Some(senders.clone()),
        _ => None,
    });
    let mut found: Vec<String> = summarised.unwrap_or_default();
    let (_, shown) = visible(branch);
    for entry in shown {
        if let Entry::Message { message, .. } = entry {
            let sender = message.sender_id.as_ref().filter(|_| message.role == "user");
            if let Some(sender) = sender.filter(|sender| !found.contains(sender)) {
                found.push(sender.clone());
            }
        }
    }
    found
}

/// How a group's messages name their senders: the user's name, else the id the message
/// carries.
pub(super) fn sender_names(orchestrator: &Orchestrator) -> impl Fn(&str) -> String + Sync + '_ {
    move |sender| {
        orchestrator
            .identities
            .user(sender)
            .map(|user| user.name)
            .filter(|name| !name.trim().is_empty())
            .unwrap_or_else(|| sender.to_string())
    }
}

/// The result of a delegation whose answer was the reply (the reply follows it).
const DELEGATE_REPLIED: &str = "Its answer was given to the person as your reply.";

/// What stands first in a conversation the Assistant began (models want a user message first).
const OPENED_BY_YOU: &str = "(This conversation began with your message below, not with mine.)";

/// The conversation the Assistant sees for a branch (root → the new user message): user
/// messages (with the `images` shared with them), its own replies and its delegations (task
/// and result, never the delegated agent's own steps). A compaction on the branch replaces
/// what it summarised. In a group (`names` given) each user message starts with who wrote it.
pub fn history(branch: &[Entry], names: Option<&(dyn Fn(&str) -> String + Sync)>, images: &Images) -> Vec<Message> {
    let (summary, shown) = visible(branch);
    let text = Block::Text;
    let mut turns: Vec<(Side, Block)> = vec![];
    if let Some(summary) = summary {
        turns.push((Side::User, text(format!("(A summary of the earlier conversation.)\n{summary}"))));
    }
    for entry in shown {
        match entry {
            Entry::Message { message, .. } if message.role == "user" => {
                let written = match (&message.sender_id, names) {
                    (Some(sender), Some(names)) => format!("{}: {}", names(sender), message.content),
                    _ => message.content.clone(),
                };
                turns.push((Side::User, text(written)));
                for attachment in &message.attachments {
                    match images.get(&attachment.path) {
                        Some(Ok((media_type, data))) => {
                            let image = Block::Image { media_type: media_type.clone(), data: data.clone() };
                            turns.push((Side::User, image));
                        }
                        Some(Err(why)) => turns.push((
                            Side::User,
                            text(format!("(The picture {} cannot be shown to you: {why}.)", attachment.path)),
                        )),
                        None => {}
                    }
                }
            }
            Entry::Message { message, .. } if message.role == "assistant" => {
                turns.push((Side::Assistant, text(message.content.clone())))
            }
            // A delegation is what it was, a call of the `delegate` tool and its result: words of
            // ours in the Assistant's own voice would be copied into its answers by small models.
            // An answer that was the reply is in the reply after it: not shown twice.
            Entry::Delegate { id, agent, task, result, is_error, returned, .. } => {
                let call = format!("toolu_{}", id.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_"));
                let input = serde_json::json!({"agent": agent, "task": task});
                turns.push((Side::Assistant, Block::ToolUse { id: call.clone(), name: "delegate".into(), input }));
                let content = if *returned { DELEGATE_REPLIED.to_string() } else { result.clone() };
                turns.push((Side::User, Block::ToolResult { tool_use_id: call, content, is_error: *is_error }));
            }
            _ => {}
        }
    }
    // Consecutive blocks of one side become one message; the model sees user first and last.
    // A conversation its Assistant began (a scheduled task's result, then the person's reply)
    // keeps that beginning, after a line that says so.
    if turns.first().is_some_and(|(side, _)| *side == Side::Assistant) {
        turns.insert(0, (Side::User, text(OPENED_BY_YOU.into())));
    }
    let mut messages: Vec<Message> = vec![];
    for (role, block) in turns {
        match messages.last_mut() {
            Some(last) if last.role == role => last.content.push(block),
            _ => messages.push(Message { role, content: vec![block] }),
        }
    }
    messages
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sessions::log::Message;

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
                attachments: vec![],
            },
        }
    }

    fn texts(messages: &[baaaht_llm::model::Message]) -> Vec<(String, Vec<String>)> {
        messages
            .iter()
            .map(|m| {
                let texts = m
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        Block::Text(text) => Some(text.clone()),
                        Block::ToolUse { name, input, .. } => {
                            Some(format!("{name} {}: {}", input["agent"], input["task"]))
                        }
                        Block::ToolResult { content, .. } => Some(format!("result: {content}")),
                        _ => None,
                    })
                    .collect();
                let role = if m.role == Side::User { "user" } else { "assistant" };
                (role.to_string(), texts)
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
                returned: false,
            },
            message("m2", "d1", "assistant", "Done.", None),
            message("x", "m2", "system", "The reply was interrupted", None),
            message("m3", "x", "user", "thanks", Some("bob")),
        ];
        let got = texts(&history(&branch, Some(&|sender: &str| sender.to_string()), &Images::new()));
        assert_eq!(
            got,
            vec![
                ("user".to_string(), vec!["alice: fix the build".to_string()]),
                ("assistant".to_string(), vec!["delegate \"coder\": \"fix it\"".to_string()]),
                ("user".to_string(), vec!["result: fixed".to_string()]),
                ("assistant".to_string(), vec!["Done.".to_string()]),
                ("user".to_string(), vec!["bob: thanks".to_string()]),
            ]
        );
    }

    #[test]
    fn a_summary_carries_the_words_of_whom_it_summarised() {
        let before = vec![
            message("m1", "s", "user", "bring the cake", Some("u-bob")),
            message("m2", "m1", "assistant", "noted", None),
            message("m3", "m2", "user", "and candles", Some("u-alice")),
        ];
        assert_eq!(senders(&before), vec!["u-bob".to_string(), "u-alice".to_string()]);
        assert_eq!(other_senders(&before, "m3"), Some(vec!["u-bob".to_string()]));
        // Compacted, Bob's words are in the summary: Alice's next turn still reads them.
        let after = vec![
            before[0].clone(),
            before[1].clone(),
            before[2].clone(),
            Entry::Compaction {
                id: "c1".into(),
                parent: "m3".into(),
                timestamp: "t".into(),
                summary: "Bob asked for a cake; Alice for candles.".into(),
                compacted_entry_ids: vec!["m1".into(), "m2".into(), "m3".into()],
                senders: senders(&before),
            },
            message("m4", "c1", "user", "what did we plan?", Some("u-alice")),
        ];
        assert_eq!(other_senders(&after, "m4"), Some(vec!["u-bob".to_string()]));
        let alone = vec![message("m5", "s", "user", "hi", Some("u-alice"))];
        assert_eq!(other_senders(&alone, "m5"), None);
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
                senders: vec![],
            },
            message("m3", "c1", "user", "new question", None),
        ];
        let got = texts(&history(&branch, None, &Images::new()));
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].1.len(), 2);
        assert!(got[0].1[0].contains("they talked about old things"));
        assert_eq!(got[0].1[1], "new question");
    }

    #[test]
    fn an_answer_returned_directly_is_shown_once() {
        let branch = vec![
            message("m1", "s", "user", "run it", None),
            Entry::Delegate {
                id: "d1".into(),
                parent: "m1".into(),
                timestamp: "t".into(),
                agent: "coder".into(),
                task: "run it".into(),
                result: "It printed: a long output".into(),
                is_error: false,
                returned: true,
            },
            message("m2", "d1", "assistant", "It printed: a long output", None),
        ];
        let messages = history(&branch, None, &Images::new());
        let got = texts(&messages);
        assert_eq!(got[1].1, ["delegate \"coder\": \"run it\""]);
        assert_eq!(got[2].1, [format!("result: {DELEGATE_REPLIED}")]);
        assert_eq!(got[3], ("assistant".to_string(), vec!["It printed: a long output".to_string()]));
        // The call and its result pair up, as a provider requires.
        let (Block::ToolUse { id, .. }, Block::ToolResult { tool_use_id, .. }) =
            (&messages[1].content[0], &messages[2].content[0])
        else {
            panic!("{messages:?}")
        };
        assert_eq!(id, tool_use_id);
        assert_eq!(id, "toolu_d1");
    }

    #[test]
    fn a_conversation_the_assistant_began_keeps_its_beginning() {
        // A scheduled task's result, then the person's reply to it.
        let branch = vec![
            message("m1", "s", "assistant", "Water the plants\n\nThe basil is dry.", None),
            message("m2", "m1", "user", "Done, thank you", None),
        ];
        let got = texts(&history(&branch, None, &Images::new()));
        assert_eq!(
            got,
            [
                ("user".to_string(), vec![OPENED_BY_YOU.to_string()]),
                ("assistant".to_string(), vec!["Water the plants\n\nThe basil is dry.".to_string()]),
                ("user".to_string(), vec!["Done, thank you".to_string()]),
            ]
        );
    }

    fn sharing(id: &str, parent: &str, content: &str, files: &[(&str, &str, u64)]) -> Entry {
        let mut entry = message(id, parent, "user", content, None);
        if let Entry::Message { message, .. } = &mut entry {
            message.attachments = files
                .iter()
                .map(|(path, mime_type, size_bytes)| crate::store::sessions::log::Attachment {
                    session: "s".into(),
                    path: (*path).into(),
                    mime_type: (*mime_type).into(),
                    size_bytes: *size_bytes,
                })
                .collect();
        }
        entry
    }

    #[test]
    fn the_newest_pictures_go_to_the_model_after_the_words_they_came_with() {
        let mut branch = vec![
            sharing("e1", "s", "old ones", &[("uploads/a.png", "image/png", 10), ("uploads/b.png", "image/png", 10)]),
            message("e2", "e1", "assistant", "nice", None),
            sharing(
                "e3",
                "e2",
                "new ones",
                &[
                    ("uploads/c.jpg", "image/jpeg", 10),
                    ("uploads/notes.txt", "text/plain", 10),
                    ("uploads/huge.png", "image/png", crate::store::uploads::MAX_PICTURE_BYTES + 1),
                    ("uploads/d.webp", "image/webp", 10),
                    ("uploads/e.gif", "image/gif", 10),
                ],
            ),
        ];
        let paths = |branch: &[Entry]| -> Vec<String> { wanted_images(branch).into_iter().map(|a| a.path).collect() };
        let wanted = paths(&branch);
        assert_eq!(wanted, ["uploads/e.gif", "uploads/d.webp", "uploads/huge.png", "uploads/c.jpg"]);
        let mut images: Images =
            wanted.iter().map(|path| (path.clone(), Ok(("image/png".to_string(), vec![1, 2])))).collect();
        images.insert("uploads/huge.png".into(), Err(PictureError::TooLarge));
        let messages = history(&branch, None, &images);
        let kinds = |message: &baaaht_llm::model::Message| -> Vec<String> {
            message
                .content
                .iter()
                .map(|block| match block {
                    Block::Text(text) => text.clone(),
                    Block::Image { .. } => "[image]".into(),
                    _ => "?".into(),
                })
                .collect()
        };
        assert_eq!(kinds(&messages[0]), ["old ones"], "a.png and b.png are not among the newest four");
        assert_eq!(
            kinds(&messages[2]),
            [
                "new ones",
                "[image]",
                "(The picture uploads/huge.png cannot be shown to you: only PNG, JPEG, GIF and WebP pictures of at most 3.8 MB are shown.)",
                "[image]",
                "[image]"
            ]
        );
        // Three user messages later, the pictures are named in their text only.
        for (index, id) in ["e4", "e5", "e6"].iter().enumerate() {
            let parent = branch.last().map(|entry| entry.id().to_string()).unwrap_or_default();
            branch.push(message(id, &parent, "user", &format!("more {index}"), None));
        }
        assert!(paths(&branch).is_empty(), "{:?}", paths(&branch));
        // What a compaction summarised is not shown again, its pictures neither.
        let mut compacted = branch[..3].to_vec();
        compacted.push(Entry::Compaction {
            id: "e4".into(),
            parent: "e3".into(),
            timestamp: "t".into(),
            summary: "pictures were orchestrator".into(),
            compacted_entry_ids: vec!["e1".into(), "e2".into(), "e3".into()],
            senders: vec![],
        });
        assert!(paths(&compacted).is_empty());
    }

    #[test]
    fn vision_is_known_from_the_models_name() {
        for model in [
            "anthropic/claude-sonnet-4-20250514",
            "openai/gpt-4o-mini",
            "openai/gpt-4.1",
            "openai/o3",
            "ollama/llava:13b",
            "openrouter/qwen/qwen2.5-vl-72b-instruct",
            "google/gemini-2.5-pro",
        ] {
            assert!(sees_images(model), "{model}");
        }
        for model in [
            "openai/gpt-3.5-turbo",
            "ollama/llama3.1:8b",
            "deepseek/deepseek-chat",
            "anthropic/claude-2.1",
            "groq/mixtral-8x7b",
        ] {
            assert!(!sees_images(model), "{model}");
        }
    }
}
