//! SearchSessions, and SearchMemory's ranked search: a context's search index (`crate::store::recall`)
//! asked, off the async workers (a context's first search may bring its index up to date with
//! the files first). What is found is the context's own: the caller was checked for it, and an
//! index holds one context only.

use baaaht_proto::v1;
use tonic::Status;

use super::Shared;
use crate::base::auth::Context;
use crate::store::recall::{Filter, IndexError};

/// The most characters of a message a hit carries.
const HIT_CHARS: usize = 1_000;

impl From<IndexError> for Status {
    fn from(error: IndexError) -> Status {
        Status::internal(baaaht_proto::error_chain(&error))
    }
}

/// The seconds since the epoch `text` (RFC 3339) names, for the request's `field`.
fn time(text: &str, field: &str) -> Result<Option<u64>, Status> {
    if text.trim().is_empty() {
        return Ok(None);
    }
    let at: jiff::Timestamp = text.trim().parse().map_err(|error| {
        Status::invalid_argument(format!(
            "{field}: `{text}` is not a time ({error}); give one like 2026-11-27T09:00:00Z"
        ))
    })?;
    Ok(Some(at.as_second().max(0) as u64))
}

/// The filter a request's times, tag and session make.
pub(super) fn filter(since: &str, until: &str, tag: Option<String>, session: Option<String>) -> Result<Filter, Status> {
    Ok(Filter { tag, session, since: time(since, "since")?, until: time(until, "until")? })
}

/// At most `asked` (0: `default`), never more than 200.
pub(super) fn limit(asked: u32, default: usize) -> usize {
    if asked == 0 {
        default
    } else {
        (asked as usize).min(200)
    }
}

/// `context`'s memories matching `text`, best first: each entry as its file holds it, with
/// its score.
pub(super) async fn memories(
    shared: &Shared,
    context: &Context,
    text: String,
    filter: Filter,
    limit: usize,
) -> Result<Vec<(crate::store::memory::MemoryEntry, f64)>, Status> {
    let (recall, memory, searched) = (shared.recall.clone(), shared.memory.clone(), context.clone());
    let found = tokio::task::spawn_blocking(move || {
        let found = recall.search_memories(&searched, &text, &filter, limit)?;
        let store = memory.store(&searched);
        let mut entries = vec![];
        for hit in found {
            // The file is the truth: an entry forgotten meanwhile is not shown.
            match store.read(&hit.doc.key) {
                Ok(Some(entry)) => entries.push((entry, hit.score)),
                Ok(None) => {}
                Err(error) => return Err(Status::from(error)),
            }
        }
        Ok(entries)
    })
    .await
    .map_err(|error| Status::internal(format!("the search stopped: {error}")))??;
    Ok(found)
}

/// `context`'s messages matching `query`, best first.
pub(super) async fn sessions(
    shared: &Shared,
    context: &Context,
    query: v1::SessionQuery,
) -> Result<v1::SessionHits, Status> {
    let session = (!query.session_id.is_empty()).then(|| query.session_id.clone());
    if let Some(session) = &session {
        super::valid_id(session, "session_id")?;
    }
    let filter = filter(&query.since, &query.until, None, session)?;
    let limit = limit(query.limit, 10);
    let (recall, searched, text) = (shared.recall.clone(), context.clone(), query.query);
    let found = tokio::task::spawn_blocking(move || recall.search_messages(&searched, &text, &filter, limit))
        .await
        .map_err(|error| Status::internal(format!("the search stopped: {error}")))??;
    let hits = found
        .into_iter()
        .map(|hit| {
            let title = shared.sessions.get(&hit.doc.session).and_then(|record| record.title).unwrap_or_default();
            v1::SessionHit {
                session_id: hit.doc.session,
                session_title: title,
                entry_id: hit.doc.entry,
                role: hit.doc.role,
                content: hit.doc.body.chars().take(HIT_CHARS).collect(),
                at: crate::base::state::rfc3339(hit.doc.at),
                score: hit.score,
            }
        })
        .collect();
    Ok(v1::SessionHits { hits })
}

/// Which of a group's `hits` are not the words of `asker`, in a sentence (none: all are): an
/// answer of the assistant (it answered someone, with what they said), a message of another
/// member, or one whose sender cannot be read back.
pub(super) fn others_words(shared: &Shared, hits: &[v1::SessionHit], asker: Option<&str>) -> Option<String> {
    use crate::store::sessions::Entry;
    let mut read: std::collections::HashMap<&str, Vec<Entry>> = std::collections::HashMap::new();
    for hit in hits {
        if hit.role != "user" || asker.is_none() {
            return Some("the assistant's answers in the group's conversations".into());
        }
        let entries = read.entry(hit.session_id.as_str()).or_insert_with(|| {
            shared.sessions.read(&hit.session_id).map(|read| read.entries).unwrap_or_else(|error| {
                tracing::warn!(%error, session = %hit.session_id, "cannot read a session a search found");
                vec![]
            })
        });
        let sender = entries.iter().find_map(|entry| match entry {
            Entry::Message { id, message, .. } if *id == hit.entry_id => Some(message.sender_id.clone()),
            _ => None,
        });
        if sender.flatten().as_deref() != asker {
            return Some("messages of other members of the group".into());
        }
    }
    None
}

/// What the marked messages before `hits` read, if one of them follows one (DESIGN.md
/// §10.3): a reply or a result said after a turn read content from outside carries it.
pub(super) fn carried(shared: &Shared, hits: &[v1::SessionHit]) -> Option<String> {
    let mut read: std::collections::HashMap<&str, Option<crate::store::sessions::Read>> =
        std::collections::HashMap::new();
    hits.iter().find_map(|hit| {
        let session = read.entry(hit.session_id.as_str()).or_insert_with(|| {
            shared
                .sessions
                .read(&hit.session_id)
                .inspect_err(
                    |error| tracing::warn!(%error, session = %hit.session_id, "cannot read a session a search found"),
                )
                .ok()
        });
        // A hit that cannot be traced back is taken as marked: nothing says it is not.
        let Some(branch) = session.as_ref().and_then(|session| session.branch(&hit.entry_id).ok()) else {
            return Some("a conversation that cannot be read back".to_string());
        };
        // A person's message that was marked is their own words, written before its turn read
        // anything; one written after it may quote what was read.
        let before = match hit.role.as_str() {
            "user" => &branch[..branch.len().saturating_sub(1)],
            _ => &branch[..],
        };
        let source = shared.taints.carried(before.iter().map(crate::store::sessions::Entry::id))?;
        Some(format!("what was said after a turn that read {source}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_and_limits_are_read_or_refused_with_what_to_give() {
        assert_eq!(time("", "since").expect("none"), None);
        assert_eq!(time("1970-01-01T00:01:00Z", "since").expect("a time"), Some(60));
        let refused = time("yesterday", "until").expect_err("not a time");
        assert!(refused.message().starts_with("until: `yesterday` is not a time"), "{}", refused.message());
        assert_eq!((limit(0, 10), limit(5, 10), limit(5000, 10)), (10, 5, 200));
    }
}
