//! A session's entries and the daemon's events as the blocks the screen shows.

use baaaht_gateway_kit::sentences;
use baaaht_proto::v1;

use super::*;

/// The entries of the branch ending at `leaf` (the last entry written when None), root first,
/// with the approvals and notices shown beside them.
pub fn branch_of(entries: &[v1::SessionEntry], leaf: Option<&str>) -> Vec<v1::SessionEntry> {
    baaaht_proto::transcript::branch(entries, leaf).into_iter().cloned().collect()
}

/// The blocks of `history` (the session now) after the last message `shown` also holds, less
/// the ones shown after it already: what the session gained while the screen was away.
pub(super) fn missed(shown: &[Block], history: Vec<Block>) -> Vec<Block> {
    let common = shown.iter().enumerate().rev().filter(|(_, block)| matches!(block, Block::User { .. })).find_map(
        |(at_shown, block)| history.iter().rposition(|each| each == block).map(|at_history| (at_shown, at_history)),
    );
    let Some((at_shown, at_history)) = common else {
        // Nothing in common: the screen showed none of it (or the history was cut short).
        return vec![];
    };
    let after = &shown[at_shown + 1..];
    history.into_iter().skip(at_history + 1).filter(|block| !after.contains(block)).collect()
}

/// A session's entries as the screen shows them.
pub fn blocks_of(entries: &[v1::SessionEntry]) -> Vec<Block> {
    use v1::session_entry::Entry;
    let mut blocks = vec![];
    for entry in entries {
        match &entry.entry {
            Some(Entry::Message(message)) => blocks.push(match message.role.as_str() {
                "user" => Block::User {
                    sender: message.sender_id.clone(),
                    channel: channel_name(message.channel),
                    text: message.content.clone(),
                },
                "assistant" => Block::Assistant { text: message.content.clone(), thinking: String::new() },
                _ => Block::Info { text: message.content.clone() },
            }),
            Some(Entry::Delegate(delegate)) => {
                let task = delegate.task.lines().next().unwrap_or_default();
                blocks.push(Block::Activity { text: format!("→ {}: {task}", sentences::agent(delegate.agent)) });
            }
            Some(Entry::Compaction(_)) => {
                blocks.push(Block::Info { text: "(earlier messages were summarized)".into() })
            }
            Some(Entry::ModelChange(change)) => {
                blocks.push(Block::Info { text: format!("model: {} → {}", change.previous_model, change.new_model) })
            }
            // As it was shown when it happened.
            Some(Entry::Activity(activity)) => {
                blocks.extend(baaaht_proto::transcript::activity_event(activity).and_then(activity_block))
            }
            None => {}
        }
    }
    blocks
}

/// The prompt's line for an approval request: whose tools want what, for the command's first
/// words; or which skill an agent asks to install, answered install or decline.
pub(super) fn asking_of(request: &v1::ApprovalRequest) -> Asking {
    if request.skill_review.is_some() {
        return Asking { id: request.id.clone(), what: sentences::review_asked(request), choices: REVIEW_ANSWERS };
    }
    if request.action.is_some() {
        return Asking { id: request.id.clone(), what: sentences::review_asked(request), choices: ACTION_ANSWERS };
    }
    let title = sentences::wants_to_reach(request);
    let mut command: String = request.asked_by.split_whitespace().collect::<Vec<_>>().join(" ");
    if command.chars().count() > 48 {
        command = command.chars().take(47).collect::<String>() + "…";
    }
    let what = if command.is_empty() { title } else { format!("{title} for `{command}`") };
    Asking { id: request.id.clone(), what, choices: ANSWERS }
}

/// An approval, its answer, a turn that read content from outside, or a message, as the screen
/// shows it, live or from the session's log (the same block both ways: a screen that comes
/// back finds it shown already).
pub(super) fn activity_block(event: &v1::orchestrator_event::Event) -> Option<Block> {
    use v1::orchestrator_event::Event;
    Some(match event {
        Event::Approval(request @ v1::ApprovalRequest { skill_review: Some(review), .. }) => {
            let mut lines = sentences::review_lines(review);
            lines.push(format!(
                "Install it? Press i twice (install) or d (decline); declined in {} s without an answer. Approval {}.",
                request.expires_in_seconds, request.id
            ));
            Block::Notice {
                title: sentences::review_asked(request),
                text: lines.join("\n"),
                error: !review.findings.is_empty(),
            }
        }
        Event::Approval(request @ v1::ApprovalRequest { action: Some(_), .. }) => {
            let mut lines = sentences::review_lines_of(request);
            lines.push(format!(
                "Do it? Press o (once) or d (deny); denied in {} s without an answer. Approval {}.",
                request.expires_in_seconds, request.id
            ));
            Block::Notice { title: sentences::review_asked(request), text: lines.join("\n"), error: true }
        }
        Event::Approval(request) => {
            let title = sentences::wants_to_reach(request);
            let command = sentences::asked_for(request);
            let asked = if command.is_empty() { String::new() } else { format!(" for `{command}`") };
            let text = format!(
                "Allow it? Press o (once), s (this session), a twice (always: a rule) or d (deny); denied in {} s \
                 without an answer. Approval {}{asked}.",
                request.expires_in_seconds, request.id
            );
            Block::Notice { title, text, error: false }
        }
        Event::Message(message) => {
            // Its files by name (a screenshot, a report): the terminal cannot show them.
            let files = message.attachments.iter().map(|file| format!("\n\n{}", sentences::file_sent(file)));
            Block::Assistant {
                text: format!("{}{}", message.content, files.collect::<String>()),
                thinking: String::new(),
            }
        }
        Event::Tainted(_) => Block::Activity { text: format!("! {}", sentences::activity(event)?) },
        Event::ApprovalSettled(_) => Block::Activity { text: format!("· {}", sentences::activity(event)?) },
        _ => return None,
    })
}
