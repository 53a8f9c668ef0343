//! WriteMemory, SearchMemory, DeleteMemory, ConfirmMemory: a context's long-term memory (spec
//! §14.3). A container reaches only its own context's store; every entry records the session
//! and user it came from, and whose words it is (DESIGN.md §10.3): an agent's write in a turn
//! that read untrusted content waits in quarantine for the context's people. A refused write
//! (memory full, or withheld) is told to the agent and to the user.

use baaaht_proto::v1;
use tonic::{Request, Response, Status};

use std::sync::Arc;

use crate::base::auth::{Caller, Context, ContextKind, Live, Operation};

use super::Shared;
use super::{check, context_of, own_context};
use crate::drive::remember::{remember, Note, RememberError, Remembering};
use crate::store::memory::{MemoryEntry, MemoryError};

impl From<MemoryError> for Status {
    fn from(error: MemoryError) -> Status {
        match error {
            MemoryError::BadKey(_) | MemoryError::BadContent => Status::invalid_argument(error.to_string()),
            MemoryError::Full(_) => Status::resource_exhausted(error.to_string()),
            MemoryError::NotQuarantined(_) => Status::not_found(error.to_string()),
            other => Status::internal(baaaht_proto::error_chain(&other)),
        }
    }
}

fn record(entry: MemoryEntry, quarantined: bool) -> v1::MemoryRecord {
    let metadata = entry.metadata;
    let sources = if metadata.sources.is_empty() { vec![metadata.provenance()] } else { metadata.sources.clone() };
    v1::MemoryRecord {
        sources,
        score: 0.0,
        key: entry.key,
        content: entry.content,
        tags: metadata.tags,
        ttl_seconds: metadata.ttl.unwrap_or(0),
        importance: metadata.importance.unwrap_or(0.0),
        session_id: metadata.session_id.unwrap_or_default(),
        message_id: metadata.message_id.unwrap_or_default(),
        user_id: metadata.user_id.unwrap_or_default(),
        source: metadata.source.unwrap_or_default(),
        created_at: crate::base::state::rfc3339(entry.created_at),
        updated_at: crate::base::state::rfc3339(entry.updated_at),
        origin: metadata.origin.map(|origin| origin.as_str().to_string()).unwrap_or_default(),
        came_from: metadata.came_from.unwrap_or_default(),
        quarantined,
        confirmed_by: metadata.confirmed_by.unwrap_or_default(),
    }
}

pub(super) fn write(
    shared: &Shared,
    caller: &Caller,
    live: Option<&Live>,
    context: Context,
    request: v1::WriteMemoryRequest,
) -> Result<Response<v1::Ack>, Status> {
    let note = Note {
        key: request.key,
        content: request.content,
        tags: request.tags,
        ttl: (request.ttl_seconds > 0).then_some(request.ttl_seconds),
        importance: (request.importance > 0.0).then_some(request.importance),
        message_id: (!request.message_id.is_empty()).then_some(request.message_id),
    };
    let below = Remembering { memory: &shared.memory, taints: &shared.taints, events: &shared.events };
    let message = remember(&below, caller, live, &context, note).map_err(|error| match error {
        RememberError::Refused(why) => Status::permission_denied(why),
        RememberError::Memory(error) => error.into(),
    })?;
    Ok(Response::new(v1::Ack { message }))
}

/// A context's memory: ranked by the search index for a query (the quarantine, which is never
/// indexed, by its words); listed newest first without one.
pub(super) async fn search(
    shared: &Shared,
    context: &Context,
    query: v1::MemoryQuery,
) -> Result<Response<v1::MemoryList>, Status> {
    let limit = super::search::limit(query.limit, 20);
    let quarantined = query.quarantined;
    let tag = (!query.tag.is_empty()).then(|| query.tag.clone());
    let filter = super::search::filter(&query.since, &query.until, tag.clone(), None)?;
    let store = if quarantined { shared.memory.quarantine(context) } else { shared.memory.store(context) };
    let entries: Vec<(MemoryEntry, f64)> = if !query.key.is_empty() {
        store.read(&query.key)?.into_iter().map(|entry| (entry, 0.0)).collect()
    } else if query.query.trim().is_empty() {
        let mut all = store.list(tag.as_deref())?;
        all.retain(|entry| {
            filter.since.is_none_or(|since| entry.updated_at >= since)
                && filter.until.is_none_or(|until| entry.updated_at < until)
        });
        all.sort_by_key(|entry| std::cmp::Reverse(entry.updated_at));
        all.truncate(limit);
        all.into_iter().map(|entry| (entry, 0.0)).collect()
    } else if quarantined {
        store.search(&query.query, limit)?.into_iter().map(|entry| (entry, 0.0)).collect()
    } else {
        super::search::memories(shared, context, query.query.clone(), filter, limit).await?
    };
    let entries = entries.into_iter().map(|(entry, score)| v1::MemoryRecord { score, ..record(entry, quarantined) });
    Ok(Response::new(v1::MemoryList { entries: entries.collect() }))
}

/// An agent's turn that found memories not of its asker's words (kept from outside, or in a
/// group from other members') read them: it is marked (DESIGN.md §10.3).
fn mark_foreign(shared: &Shared, live: &Live, context: &Context, found: &[v1::MemoryRecord]) {
    let group = context.kind == ContextKind::Group;
    let store = shared.memory.store(context);
    let foreign = found.iter().find_map(|record| match store.read(&record.key) {
        // The entry as kept, not as the wire carries it: its origin and whose words.
        Ok(Some(entry)) => entry.foreign_to(group, live.asker.as_deref(), true),
        _ => Some(format!("the memory `{}`, whose origin cannot be read back", record.key)),
    });
    if let Some(source) = foreign {
        shared.taints.taint(live, &format!("memory_search found {source}"));
    }
}

pub(super) fn delete(
    shared: &Shared,
    context: &Context,
    key: &str,
    quarantined: bool,
) -> Result<Response<v1::Ack>, Status> {
    if quarantined {
        shared.memory.drop_quarantined(context, key)?;
        tracing::info!(context = %context, key, "quarantined memory dropped");
        return Ok(Response::new(v1::Ack { message: format!("dropped `{key}`; it was never used") }));
    }
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
        let live = super::live_turn(&request);
        write(&self.shared, &caller, live.as_ref(), context, request.into_inner())
    }

    async fn search_memory(&self, request: Request<v1::MemoryQuery>) -> Result<Response<v1::MemoryList>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::SearchMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        if request.get_ref().quarantined && matches!(caller, Caller::Container(_)) {
            return Err(Status::permission_denied(
                "what waits in quarantine is for the context's people, not its agents",
            ));
        }
        let live = super::live_turn(&request);
        let found = search(&self.shared, &context, request.into_inner()).await?;
        if let Some(live) = &live {
            mark_foreign(&self.shared, live, &context, &found.get_ref().entries);
        }
        Ok(found)
    }

    async fn delete_memory(&self, request: Request<v1::MemoryKey>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::DeleteMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        let key = request.into_inner();
        if key.quarantined && matches!(caller, Caller::Container(_)) {
            return Err(Status::permission_denied(
                "what waits in quarantine is for the context's people, not its agents",
            ));
        }
        delete(&self.shared, &context, &key.key, key.quarantined)
    }

    async fn confirm_memory(&self, request: Request<v1::MemoryKey>) -> Result<Response<v1::Ack>, Status> {
        let context = context_of(request.get_ref().context.as_ref(), "context")?;
        let caller = check(&self.shared, &request, Operation::ConfirmMemory, context.as_ref(), None)?;
        let context = own_context(&caller, context)?;
        let key = request.into_inner().key;
        let by = crate::guard::audit::principal(&caller);
        let entry = self.shared.memory.confirm(&context, &key, &by)?;
        let record =
            crate::guard::audit::Record::by(crate::guard::audit::Kind::Taint, &caller, "confirmed").context(&context);
        let came_from = entry.metadata.came_from.unwrap_or_default();
        self.shared.audit.record(record.detail("memory", key.as_str()).detail("came_from", came_from));
        tracing::info!(context = %context, key = %key, "quarantined memory confirmed");
        Ok(Response::new(v1::Ack { message: format!("`{key}` is remembered from now on") }))
    }
}
