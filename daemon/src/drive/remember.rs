//! What a turn or a person asks to be remembered (WriteMemory): whose words it is (in a group, the
//! member whose turn wrote it), whether the turn that asks read untrusted content (then it waits
//! in quarantine for the context's people, DESIGN.md §10.3), and what the agent and the user are
//! told when a memory was not kept or another made room for it.

use crate::base::auth::{Caller, Context, ContextKind, Live};
use crate::net::taint::{MemoryWrite, Taints};
use crate::store::events::{Event, EventBus, Kind};
use crate::store::memory::{Kept, Memories, MemoryError, Metadata, Origin};

#[derive(Debug, thiserror::Error)]
pub enum RememberError {
    /// The turn may not remember this (the sentence says why).
    #[error("{0}")]
    Refused(String),
    #[error(transparent)]
    Memory(#[from] MemoryError),
}

/// What is to be remembered.
#[derive(Debug)]
pub struct Note {
    pub key: String,
    pub content: String,
    pub tags: Vec<String>,
    pub ttl: Option<u64>,
    pub importance: Option<f64>,
    /// The message it came from.
    pub message_id: Option<String>,
}

/// What remembering works with.
#[derive(Debug, Clone, Copy)]
pub struct Remembering<'a> {
    pub memory: &'a Memories,
    pub taints: &'a Taints,
    pub events: &'a EventBus,
}

/// Remembers `note` in `context` for `caller` (working on `live`, for an agent), and says what
/// happened in a sentence for the caller.
pub fn remember(
    below: &Remembering<'_>,
    caller: &Caller,
    live: Option<&Live>,
    context: &Context,
    note: Note,
) -> Result<String, RememberError> {
    let (session, source) = match caller {
        Caller::Container(identity) => (Some(identity.session_id.clone()), format!("agent:{}", identity.role)),
        Caller::Host(peer) => (None, format!("host:uid {}", peer.uid)),
        Caller::Gateway(call) => {
            let user = call.user.as_ref().map(|user| user.id.as_str()).unwrap_or("?");
            (None, format!("user:{user} via gateway {}", call.gateway))
        }
    };
    let live = match caller {
        Caller::Container(_) => live,
        _ => None,
    };
    // Whose words it is: in a user's context, that user; in a group's, the member whose turn
    // wrote it (what no one member said is the group's, untrusted for each of them).
    let user = match (&context.kind, caller) {
        (ContextKind::User, _) => Some(context.id.clone()),
        (ContextKind::Group, Caller::Container(_)) => live.and_then(|live| live.asker.clone()),
        (ContextKind::Group, Caller::Gateway(call)) => call.user.as_ref().map(|user| user.id.clone()),
        (ContextKind::Group, Caller::Host(_)) => None,
    };
    // Whose words: the person's own through a client; an agent's inference, or from outside
    // when its turn read untrusted content.
    let verdict = match (caller, live) {
        (Caller::Container(_), Some(live)) => below.taints.memory_write(live),
        (Caller::Container(_), None) => MemoryWrite::Keep,
        _ => MemoryWrite::Keep,
    };
    let (origin, came_from) = match (&verdict, caller) {
        (MemoryWrite::Quarantine(source), _) => (Origin::Untrusted, Some(source.clone())),
        (_, Caller::Container(_)) => (Origin::Inferred, None),
        _ => (Origin::User, None),
    };
    let metadata = Metadata {
        source: Some(source),
        tags: note.tags,
        ttl: note.ttl,
        importance: note.importance,
        session_id: session,
        message_id: note.message_id,
        user_id: user,
        origin: Some(origin),
        came_from,
        confirmed_by: None,
        sources: vec![],
    };
    let key = note.key.clone();
    let tell = |kind: crate::store::events::Kind| {
        let session = live.map(|live| (live.session.as_str(), live.user_turn.as_str(), live.correlation_id.as_str()));
        let (session, turn, correlation) = session.unwrap_or_default();
        below.events.publish(context, Event::of_turn(session, turn, correlation, kind));
    };
    let written = match &verdict {
        MemoryWrite::Refuse(why) => return Err(RememberError::Refused(why.clone())),
        MemoryWrite::Quarantine(_) => {
            below.memory.put_aside(context, &note.key, &note.content, metadata).map(|()| Kept::New)
        }
        MemoryWrite::Keep => below.memory.write(context, &note.key, &note.content, metadata),
    };
    let kept = match written {
        Ok(kept) => kept,
        Err(error) => {
            if matches!(error, MemoryError::Full(_)) {
                tell(Kind::message(format!("A memory (`{key}`) was not kept: {error}")));
            }
            return Err(RememberError::Memory(error));
        }
    };
    if let MemoryWrite::Quarantine(source) = &verdict {
        tracing::info!(context = %context, key = %key, %source, "memory put aside for review");
        tell(Kind::memory_review(&note.key, source));
        return Ok(format!(
            "`{key}` is kept aside for the user's review, not remembered: this turn read content from outside \
             ({source}). Tell the user it waits for them in memory review."
        ));
    }
    let message = match kept {
        Kept::SameAs(existing) => {
            tracing::info!(context = %context, key = %key, existing = %existing, "memory told again");
            format!(
                "`{existing}` says this already: it was updated (told again, its importance and sources) instead \
                 of adding `{key}`"
            )
        }
        Kept::MadeRoom(gone) => {
            let said: String = gone.content.chars().take(80).collect();
            tell(Kind::message(format!(
                "Memory keeps at most {} entries: to remember `{key}`, the least important and oldest one, `{}` \
                 (“{said}”), was forgotten. Raise memory.max_entries to keep more.",
                below.memory.most(),
                gone.key
            )));
            format!("remembered `{key}`; `{}` was forgotten to make room (the user was told)", gone.key)
        }
        Kept::New | Kept::Replaced => {
            tracing::info!(context = %context, key = %key, "memory written");
            format!("remembered `{key}`")
        }
    };
    Ok(message)
}
