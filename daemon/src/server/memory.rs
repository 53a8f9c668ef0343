//! WriteMemory, SearchMemory, DeleteMemory: a context's long-term memory (spec §14.3). A
//! container reaches only its own context's store; every entry records the session and user
//! it came from.

use baaaht_proto::v1;
use tonic::{Response, Status};

use crate::auth::{Caller, Context, ContextKind};
use crate::memory::{MemoryEntry, MemoryError, MemoryStore, Metadata};
use crate::Shared;

impl From<MemoryError> for Status {
    fn from(error: MemoryError) -> Status {
        match error {
            MemoryError::BadKey(_) | MemoryError::BadContent => Status::invalid_argument(error.to_string()),
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
}

/// The memory store of `context`: `users/{id}/memory` or `groups/{id}/memory`.
pub(crate) fn store(shared: &Shared, context: &Context) -> MemoryStore {
    let kind = match context.kind {
        ContextKind::User => "users",
        ContextKind::Group => "groups",
    };
    MemoryStore::new(shared.data_dir.root().join(kind).join(&context.id).join("memory"))
}

fn record(entry: MemoryEntry) -> v1::MemoryRecord {
    let metadata = entry.metadata;
    v1::MemoryRecord {
        key: entry.key,
        content: entry.content,
        tags: metadata.tags,
        ttl_seconds: metadata.ttl.unwrap_or(0),
        importance: metadata.importance.unwrap_or(0.0),
        session_id: metadata.session_id.unwrap_or_default(),
        message_id: metadata.message_id.unwrap_or_default(),
        user_id: metadata.user_id.unwrap_or_default(),
        source: metadata.source.unwrap_or_default(),
        created_at: crate::state::rfc3339(entry.created_at),
        updated_at: crate::state::rfc3339(entry.updated_at),
    }
}

pub(super) fn write(
    shared: &Shared,
    caller: &Caller,
    context: Context,
    request: v1::WriteMemoryRequest,
) -> Result<Response<v1::Ack>, Status> {
    let (session, source) = match caller {
        Caller::Container(identity) => (Some(identity.session_id.clone()), format!("agent:{}", identity.role)),
        Caller::Host(peer) => (None, format!("host:uid {}", peer.uid)),
    };
    // Who the session's messages came from: in a user's context, that user.
    let user = match (&context.kind, &session) {
        (ContextKind::User, _) => Some(context.id.clone()),
        (ContextKind::Group, Some(session)) => shared.sessions.get(session).map(|record| record.user_id),
        (ContextKind::Group, None) => None,
    };
    let metadata = Metadata {
        source: Some(source),
        tags: request.tags,
        ttl: (request.ttl_seconds > 0).then_some(request.ttl_seconds),
        importance: (request.importance > 0.0).then_some(request.importance),
        session_id: session,
        message_id: (!request.message_id.is_empty()).then_some(request.message_id),
        user_id: user,
    };
    let _one_writer = shared.memory_writes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    store(shared, &context).write(&request.key, &request.content, metadata, crate::state::now_seconds())?;
    tracing::info!(context = %context, key = %request.key, "memory written");
    Ok(Response::new(v1::Ack { message: format!("remembered `{}`", request.key) }))
}

pub(super) fn search(
    shared: &Shared,
    context: &Context,
    query: v1::MemoryQuery,
) -> Result<Response<v1::MemoryList>, Status> {
    let limit = if query.limit == 0 { 20 } else { query.limit.min(200) as usize };
    let store = store(shared, context);
    let entries = if query.query.trim().is_empty() {
        let mut all = store.list((!query.tag.is_empty()).then_some(query.tag.as_str()))?;
        all.sort_by_key(|entry| std::cmp::Reverse(entry.updated_at));
        all.truncate(limit);
        all
    } else {
        store.search(&query.query, limit)?
    };
    Ok(Response::new(v1::MemoryList { entries: entries.into_iter().map(record).collect() }))
}

pub(super) fn delete(shared: &Shared, context: &Context, key: &str) -> Result<Response<v1::Ack>, Status> {
    let _one_writer = shared.memory_writes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if store(shared, context).delete(key)? {
        tracing::info!(context = %context, key, "memory deleted");
        Ok(Response::new(v1::Ack { message: format!("forgot `{key}`") }))
    } else {
        Err(Status::not_found(format!("no memory `{key}` in {context}")))
    }
}

/// Removes expired memories of every context; returns how many.
pub fn expire_all(shared: &Shared) -> usize {
    let mut removed = 0;
    for kind in ["users", "groups"] {
        let Ok(contexts) = std::fs::read_dir(shared.data_dir.root().join(kind)) else { continue };
        for context in contexts.flatten() {
            let folder = context.path().join("memory");
            if !folder.is_dir() {
                continue;
            }
            let _one_writer = shared.memory_writes.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            match MemoryStore::new(folder.clone()).expire(crate::state::now_seconds()) {
                Ok(keys) => {
                    for key in &keys {
                        tracing::info!(folder = %folder.display(), key, "memory expired");
                    }
                    removed += keys.len();
                }
                Err(error) => {
                    tracing::warn!(folder = %folder.display(), error = %baaaht_proto::error_chain(&error), "cannot expire memories")
                }
            }
        }
    }
    removed
}
