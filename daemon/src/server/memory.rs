//! WriteMemory, SearchMemory, DeleteMemory: a context's long-term memory (spec §14.3). A
//! container reaches only its own context's store; every entry records the session and user
//! it came from.

use baaaht_proto::v1;
use tonic::{Request, Response, Status};

use std::sync::Arc;

use crate::auth::{Caller, Context, ContextKind, Operation};

use super::{check, context_of, own_context};
use crate::memory::{MemoryEntry, MemoryError, Metadata};
use crate::Shared;

impl From<MemoryError> for Status {
    fn from(error: MemoryError) -> Status {
        match error {
            MemoryError::BadKey(_) | MemoryError::BadContent => Status::invalid_argument(error.to_string()),
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
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
        Caller::Gateway(call) => {
            let user = call.user.as_ref().map(|user| user.id.as_str()).unwrap_or("?");
            (None, format!("user:{user} via gateway {}", call.gateway))
        }
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
    shared.memory.write(&context, &request.key, &request.content, metadata)?;
    tracing::info!(context = %context, key = %request.key, "memory written");
    Ok(Response::new(v1::Ack { message: format!("remembered `{}`", request.key) }))
}

pub(super) fn search(
    shared: &Shared,
    context: &Context,
    query: v1::MemoryQuery,
) -> Result<Response<v1::MemoryList>, Status> {
    let limit = if query.limit == 0 { 20 } else { query.limit.min(200) as usize };
    let store = shared.memory.store(context);
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
    if shared.memory.delete(context, key)? {
        tracing::info!(context = %context, key, "memory deleted");
        Ok(Response::new(v1::Ack { message: format!("forgot `{key}`") }))
    } else {
        Err(Status::not_found(format!("no memory `{key}` in {context}")))
    }
}

/// The `Memory` service.
#[derive(Debug, Clone)]
pub(super) struct MemoryService {
    pub(super) shared: Arc<Shared>,
}

#[tonic::async_trait]
impl v1::memory_server::Memory for MemoryService {
    async fn write_memory(&self, request: Request<v1::WriteMemoryRequest>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::WriteMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        write(&self.shared, &caller, context, request.into_inner())
    }

    async fn search_memory(&self, request: Request<v1::MemoryQuery>) -> Result<Response<v1::MemoryList>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::SearchMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        search(&self.shared, &context, request.into_inner())
    }

    async fn delete_memory(&self, request: Request<v1::MemoryKey>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::DeleteMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        delete(&self.shared, &context, &request.into_inner().key)
    }
}
