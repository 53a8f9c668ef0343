//! Reading a transcript ([`v1::SessionTranscript`]) as the clients show it: one branch of its
//! tree, with what its people were shown beside its messages ([`v1::ActivityEntry`]: approvals,
//! notices) each after the entry it came after.

use std::collections::{HashMap, HashSet};

use crate::v1;
use v1::session_entry::Entry;

/// Whether `entry` is an activity (on no branch).
pub fn is_activity(entry: &v1::SessionEntry) -> bool {
    matches!(entry.entry, Some(Entry::Activity(_)))
}

/// The branch ending at `leaf` (at the newest entry when `None`; nothing when `leaf` is not
/// one), root first, each entry followed by the activities that came after it. Activities
/// that came before the first message lead.
pub fn branch<'e>(entries: &'e [v1::SessionEntry], leaf: Option<&str>) -> Vec<&'e v1::SessionEntry> {
    let by_id: HashMap<&str, &v1::SessionEntry> =
        entries.iter().filter(|entry| !is_activity(entry)).map(|entry| (entry.id.as_str(), entry)).collect();
    let mut at = match leaf {
        Some(leaf) => by_id.get(leaf).copied(),
        None => entries.iter().rev().find(|entry| !is_activity(entry)),
    };
    let mut path: Vec<&v1::SessionEntry> = vec![];
    let mut seen = HashSet::new();
    while let Some(entry) = at {
        // A parent seen already would be a cycle in a damaged log: stop there.
        if !seen.insert(entry.id.as_str()) {
            break;
        }
        path.push(entry);
        at = by_id.get(entry.parent.as_str()).copied();
    }
    path.reverse();
    let mut after: HashMap<&str, Vec<&v1::SessionEntry>> = HashMap::new();
    let mut first = vec![];
    for entry in entries {
        if let Some(Entry::Activity(activity)) = &entry.entry {
            if by_id.contains_key(activity.after.as_str()) {
                after.entry(activity.after.as_str()).or_default().push(entry);
            } else if leaf.is_none() || !path.is_empty() {
                first.push(entry); // after the session's root
            }
        }
    }
    let mut shown = first;
    for entry in path {
        shown.push(entry);
        shown.extend(after.remove(entry.id.as_str()).unwrap_or_default());
    }
    shown
}

/// The event an activity kept.
pub fn activity_event(activity: &v1::ActivityEntry) -> Option<&v1::orchestrator_event::Event> {
    activity.event.as_ref()?.event.as_ref()
}

/// The approvals of `entries` still waiting for an answer (as the daemon said when it gave the
/// transcript: an approval's `expires_in_seconds` is what is left of its wait), none answered.
pub fn waiting_approvals(entries: &[v1::SessionEntry]) -> Vec<&v1::ApprovalRequest> {
    use v1::orchestrator_event::Event;
    let events = || {
        entries.iter().filter_map(|entry| match &entry.entry {
            Some(Entry::Activity(activity)) => activity_event(activity),
            _ => None,
        })
    };
    let settled: HashSet<&str> = events()
        .filter_map(|event| match event {
            Event::ApprovalSettled(settled) => Some(settled.id.as_str()),
            _ => None,
        })
        .collect();
    events()
        .filter_map(|event| match event {
            Event::Approval(asked) if asked.expires_in_seconds > 0 && !settled.contains(asked.id.as_str()) => {
                Some(asked)
            }
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(id: &str, parent: &str) -> v1::SessionEntry {
        v1::SessionEntry {
            id: id.into(),
            parent: parent.into(),
            timestamp: "2026-11-29T10:00:00Z".into(),
            entry: Some(Entry::Message(v1::MessageEntry::default())),
        }
    }

    fn settled(id: &str, after: &str, decision: &str, by: &str) -> v1::SessionEntry {
        let event = v1::OrchestratorEvent {
            event: Some(v1::orchestrator_event::Event::ApprovalSettled(v1::ApprovalSettled {
                id: "a1".into(),
                decision: decision.into(),
                by: by.into(),
            })),
            ..Default::default()
        };
        let activity = v1::ActivityEntry { after: after.into(), event: Some(event) };
        v1::SessionEntry { id: id.into(), entry: Some(Entry::Activity(activity)), ..Default::default() }
    }

    fn ids(entries: Vec<&v1::SessionEntry>) -> Vec<&str> {
        entries.into_iter().map(|entry| entry.id.as_str()).collect()
    }

    #[test]
    fn a_branch_carries_the_activities_of_its_entries_only() {
        let entries = [
            settled("x0", "s1", "deny", "nobody"),
            message("a", "s1"),
            message("b", "a"),
            settled("x1", "b", "once", "Alice"),
            message("c", "a"),
            message("d", "c"),
            settled("x2", "c", "deny", "Bob"),
        ];
        assert_eq!(ids(branch(&entries, None)), ["x0", "a", "c", "x2", "d"], "the newest message's, not an activity's");
        assert_eq!(ids(branch(&entries, Some("b"))), ["x0", "a", "b", "x1"]);
        assert!(branch(&entries, Some("x1")).is_empty(), "no branch ends at an activity");
        assert!(branch(&entries, Some("nope")).is_empty());
        let asked = |id: &str, left: u32| {
            let event = v1::OrchestratorEvent {
                event: Some(v1::orchestrator_event::Event::Approval(v1::ApprovalRequest {
                    id: id.into(),
                    expires_in_seconds: left,
                    ..Default::default()
                })),
                ..Default::default()
            };
            let activity = v1::ActivityEntry { after: "a".into(), event: Some(event) };
            v1::SessionEntry { id: format!("x-{id}"), entry: Some(Entry::Activity(activity)), ..Default::default() }
        };
        let waiting =
            [message("a", "s1"), asked("a1", 90), asked("a2", 90), asked("a3", 0), settled("x9", "a", "once", "Al")];
        let ids: Vec<&str> = waiting_approvals(&waiting).into_iter().map(|asked| asked.id.as_str()).collect();
        assert_eq!(ids, ["a2"], "a1 was answered (settled names it), a3 waits no more");
        let Some(Entry::Activity(activity)) = &entries[3].entry else { unreachable!() };
        assert!(matches!(activity_event(activity), Some(v1::orchestrator_event::Event::ApprovalSettled(_))));
    }
}
