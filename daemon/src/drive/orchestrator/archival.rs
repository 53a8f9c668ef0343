//! Archival (the Memory agent first, then the session's containers go) and the supervision
//! loop: sessions idle and archived after inactivity, idle agents removed, memories expired.

use super::*;
use crate::base::lifetime::{Subsystem, Work};

/// Archives session `id`: no new message is taken from now on; then, with
/// `sessions.archival.memory_extraction`, the context's Memory agent reads the conversation and
/// saves what is worth keeping (in the background); the session's agent containers go.
pub async fn archive(orchestrator: &Arc<Orchestrator>, id: &str) -> Result<SessionRecord, SessionError> {
    let record = orchestrator.sessions.set_status(id, SessionStatus::Archived)?;
    if orchestrator.loaded.config.sessions.archival.memory_extraction {
        let (archiving, record) = (orchestrator.clone(), record.clone());
        let span = tracing::info_span!("archival", session = %record.id);
        orchestrator.lifetime.spawn(
            async move {
                extract_memories(&archiving, &record).await;
                archiving.agents.reap_idle(std::slice::from_ref(&record.id)).await;
                archiving.tools.release(&record.id).await;
            }
            .instrument(span),
        );
    } else {
        orchestrator.agents.reap_idle(std::slice::from_ref(&record.id)).await;
        orchestrator.tools.release(&record.id).await;
    }
    Ok(record)
}

/// The most of a conversation the Memory agent reads at archival (its end is kept).
const MOST_TRANSCRIPT: usize = 100 * 1024;

async fn extract_memories(orchestrator: &Arc<Orchestrator>, record: &SessionRecord) {
    let read = match orchestrator.sessions.read(&record.id) {
        Ok(read) => read,
        Err(error) => {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot read the session for memory extraction");
            return;
        }
    };
    let branch = match &record.leaf {
        Some(leaf) => read.branch(leaf).unwrap_or_else(|_| read.entries.clone()),
        None => read.entries.clone(),
    };
    let mut transcript = String::new();
    for entry in &branch {
        match entry {
            Entry::Message { id, message, .. } if message.role != "system" => {
                let who = match &message.sender_id {
                    Some(sender) if message.role == "user" => format!("{} ({sender})", message.role),
                    _ => message.role.clone(),
                };
                transcript.push_str(&format!("[{id}] {who}: {}\n", message.content));
            }
            Entry::Delegate { agent, task, result, .. } => {
                transcript.push_str(&format!("(the assistant asked the {agent}: {task} → {result})\n"));
            }
            _ => {}
        }
    }
    let said_something =
        branch.iter().any(|entry| matches!(entry, Entry::Message { message, .. } if message.role == "user"));
    if !said_something {
        return;
    }
    if transcript.len() > MOST_TRANSCRIPT {
        let mut cut = transcript.len() - MOST_TRANSCRIPT;
        while !transcript.is_char_boundary(cut) {
            cut += 1;
        }
        transcript = format!("(earlier part left out)\n{}", &transcript[cut..]);
    }
    let whom = if record.group_id.is_some() { "group" } else { "user" };
    let text = format!(
        "This conversation is being archived. Save what is worth remembering long-term about the {whom} — \
         preferences, facts, decisions, ongoing projects — with memory_write, one fact per key. Search first \
         (memory_search) so that you do not repeat what is remembered already. Save nothing if nothing is \
         worth keeping. Answer with one line saying what you saved.\n\nThe conversation:\n{transcript}"
    );
    let correlation_id = uuid::Uuid::new_v4().to_string();
    let task = Task {
        live: Live {
            session: record.id.clone(),
            context: record.context(),
            role: Role::Memory,
            turn_id: String::new(),
            correlation_id,
            user_turn: format!("archive-{}", record.id),
            entry: String::new(),
            asker: None,
            speaks: false,
        },
        role: Role::Memory,
        text,
        summary: "memory extraction at archival".into(),
    };
    // What it keeps of a conversation that read content from outside is kept from that
    // content (its memories wait for review); in a group, from every member's words.
    if let Some(source) = orchestrator.taints.carried(branch.iter().map(Entry::id)) {
        orchestrator.taints.taint(&task.live, &format!("{}{source}", crate::net::taint::EARLIER));
    }
    let (result, is_error, elapsed) = run_task(orchestrator, &task).await;
    if is_error {
        tracing::warn!(%result, "memory extraction failed");
    } else {
        tracing::info!(%result, elapsed_ms = elapsed.as_millis() as u64, "memories extracted");
    }
}

/// Idles quiet sessions and archives those past `sessions.archival.inactivity_timeout` (the
/// scheduler's `system-archive-sessions` task), or, `early` (a disk nearly full), every one that
/// is idle; returns how many were idled and archived.
pub async fn archive_quiet(orchestrator: &Arc<Orchestrator>, early: bool) -> (usize, usize) {
    let sessions = &orchestrator.loaded.config.sessions;
    let inactivity = if early { sessions.idle_after } else { sessions.archival.inactivity_timeout };
    let swept = orchestrator.sessions.sweep(state::now_seconds(), sessions.idle_after, inactivity);
    let (idled, due) = match swept {
        Ok((idled, due)) => {
            for session in &idled {
                tracing::info!(session, "session idle");
            }
            (idled.len(), due)
        }
        Err(error) => {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot update session states");
            (0, vec![])
        }
    };
    let mut archived = 0;
    for session in &due {
        match archive(orchestrator, session).await {
            Ok(_) => {
                archived += 1;
                tracing::info!(session, "session archived after inactivity");
            }
            Err(error) => tracing::warn!(session, error = %baaaht_proto::error_chain(&error), "cannot archive"),
        }
    }
    (idled, archived)
}

/// Removes agent containers past their keep-warm window, every 5 s until `cancel` (session
/// archival and memory expiry are system tasks of the scheduler).
pub async fn supervise(orchestrator: Arc<Orchestrator>, cancel: tokio_util::sync::CancellationToken) {
    let every = Duration::from_secs(5);
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            () = tokio::time::sleep(every) => {}
        }
        orchestrator.agents.reap_idle(&[]).await;
    }
}

/// The sessions' upkeep ([`supervise`]): idle sessions archived, old ones compacted.
impl Subsystem for Orchestrator {
    fn name(&self) -> &'static str {
        "sessions"
    }

    fn run_until(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) -> Work {
        Box::pin(supervise(self, shutdown))
    }
}
