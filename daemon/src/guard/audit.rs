//! The audit log (spec §13, §18): every security-relevant event as one JSON line in
//! `data/logs/audit/YYYY-MM-DD.jsonl` (UTC days), appended and fsynced by one writer thread,
//! kept for `audit.retention_days`. Recording never blocks the caller on the disk: a record is
//! queued, and the writer syncs each batch it takes from the queue. Secrets appear by name,
//! never by value.

use std::io::Write as _;
use std::io::{Read as _, Seek as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};

use serde::{Deserialize, Serialize};

use crate::base::auth::{Caller, Context};
use crate::base::config::LoadedConfig;
use crate::base::lifetime::{Subsystem, Work};
use crate::base::metrics::Metrics;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A command run by `exec` in a tool container.
    Exec,
    /// A request through the egress proxy, allowed or refused.
    Egress,
    /// A tool call or command refused by policy.
    Policy,
    /// A caller that could not authenticate, or was not allowed what it asked.
    Auth,
    /// A secret read from the store, by name.
    Secret,
    /// A skill installed.
    Skill,
    /// An MCP server installed.
    Mcp,
    /// The configuration the daemon runs with changed.
    Config,
    /// A model call refused by a budget.
    Budget,
    /// An admin's request.
    Admin,
    /// A principal stopped at a resource limit (connections, uploads, sessions).
    Limit,
    /// A secret or credential replaced in what the daemon persisted or sent (where, and which
    /// secret's name or rule's id; never the value).
    Redaction,
    /// A capability withheld from a turn that read untrusted content.
    Taint,
}

impl Kind {
    pub const ALL: &'static [Kind] = &[
        Kind::Exec,
        Kind::Egress,
        Kind::Policy,
        Kind::Auth,
        Kind::Secret,
        Kind::Skill,
        Kind::Mcp,
        Kind::Config,
        Kind::Budget,
        Kind::Admin,
        Kind::Limit,
        Kind::Redaction,
        Kind::Taint,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Exec => "exec",
            Kind::Egress => "egress",
            Kind::Policy => "policy",
            Kind::Auth => "auth",
            Kind::Secret => "secret",
            Kind::Skill => "skill",
            Kind::Mcp => "mcp",
            Kind::Config => "config",
            Kind::Budget => "budget",
            Kind::Admin => "admin",
            Kind::Limit => "limit",
            Kind::Redaction => "redaction",
            Kind::Taint => "taint",
        }
    }

    pub fn named(name: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|kind| kind.as_str() == name)
    }
}

/// One audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// RFC 3339, UTC.
    pub time: String,
    pub kind: Kind,
    /// Who: `host:uid=1000`, `container:coder:{name}`, `gateway:{name}`, `gateway:{name}/user:{id}`,
    /// `daemon`, or for a caller that never authenticated, what is known of it.
    pub principal: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub context: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub session: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub correlation_id: String,
    /// `ok`, `failed`, `allowed`, `refused`, …
    pub outcome: String,
    /// The event's particulars (a command, a host, a secret's name, an RPC method).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub detail: serde_json::Map<String, serde_json::Value>,
}

/// The time a record carries: now, to the millisecond, RFC 3339 in UTC.
fn now() -> String {
    // silent-ok: rounding a current time cannot overflow.
    jiff::Timestamp::now().round(jiff::Unit::Millisecond).unwrap_or_else(|_| jiff::Timestamp::now()).to_string()
}

impl Record {
    /// This record (a template kept for a container's or a gateway's events) for an event that
    /// happens now: it carries the time of its own event, not the template's.
    pub fn at_now(mut self) -> Record {
        self.time = now();
        self
    }

    /// A record of `kind` by `principal`, now.
    pub fn new(kind: Kind, principal: impl Into<String>, outcome: impl Into<String>) -> Record {
        Record {
            time: now(),
            kind,
            principal: principal.into(),
            context: String::new(),
            session: String::new(),
            correlation_id: String::new(),
            outcome: outcome.into(),
            detail: serde_json::Map::new(),
        }
    }

    /// By `caller`, with its context and session when it is a container.
    pub fn by(kind: Kind, caller: &Caller, outcome: impl Into<String>) -> Record {
        let mut record = Record::new(kind, principal(caller), outcome);
        if let Caller::Container(identity) = caller {
            record.context = identity.context.to_string();
            record.session.clone_from(&identity.session_id);
        }
        record
    }

    pub fn context(mut self, context: &Context) -> Record {
        self.context = context.to_string();
        self
    }

    pub fn session(mut self, session: &str) -> Record {
        self.session = session.to_string();
        self
    }

    pub fn correlation(mut self, id: &str) -> Record {
        self.correlation_id = id.to_string();
        self
    }

    pub fn detail(mut self, key: &str, value: impl Into<serde_json::Value>) -> Record {
        self.detail.insert(key.to_string(), value.into());
        self
    }

    /// The UTC day of the record, `YYYY-MM-DD`: the file it goes to.
    fn day(&self) -> &str {
        self.time.get(..10).unwrap_or("unknown")
    }

    /// Whether the record concerns `user` (an id like `u-…` or `alice`): in its context (a
    /// container's is set) or as a gateway's end user.
    fn concerns_user(&self, user: &str) -> bool {
        let needle = format!("user:{user}");
        self.context == needle || self.principal.split('/').any(|part| part == needle)
    }
}

/// How `caller` appears in the log.
pub fn principal(caller: &Caller) -> String {
    match caller {
        Caller::Host(peer) => format!("host:uid={}", peer.uid),
        Caller::Container(identity) => format!("container:{}:{} ({})", identity.role, identity.name, identity.context),
        Caller::Gateway(call) => match &call.user {
            Some(user) => format!("gateway:{}/user:{}", call.gateway, user.id),
            None => format!("gateway:{}", call.gateway),
        },
    }
}

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot read the audit log in {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
}

enum Command {
    Write(Box<Record>),
    /// Answers once every record queued before it is on disk.
    Flush(mpsc::Sender<()>),
}

/// What cleans a record's particulars before they are written: the redactor
/// (`redact::Shield`), which answers what it replaced.
pub trait Cleaner: Send + Sync {
    fn clean(&self, value: &mut serde_json::Value) -> Vec<String>;
}

/// The audit log's handle: cheap to clone, safe to use from any thread.
#[derive(Clone)]
pub struct Audit {
    dir: PathBuf,
    queue: Option<mpsc::Sender<Command>>,
    metrics: Arc<Metrics>,
    /// What the writer cleans each record's particulars with (`redact`), once the daemon has it.
    shield: Arc<std::sync::OnceLock<Arc<dyn Cleaner>>>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit").field("dir", &self.dir).field("enabled", &self.queue.is_some()).finish()
    }
}

impl Audit {
    /// The log in `dir`, written by a thread of its own; with `enabled: false` nothing is
    /// written (and searches find what earlier runs wrote).
    pub fn open(dir: PathBuf, enabled: bool, retention_days: u32, metrics: Arc<Metrics>) -> Audit {
        let shield = Arc::new(std::sync::OnceLock::new());
        let queue = enabled.then(|| {
            let (sender, receiver) = mpsc::channel();
            let writer = Writer { dir: dir.clone(), retention_days, file: None, shield: shield.clone() };
            let spawned = std::thread::Builder::new().name("audit".into()).spawn(move || writer.run(receiver));
            match spawned {
                Ok(_) => Some(sender),
                Err(error) => {
                    tracing::error!(%error, "cannot start the audit writer: nothing will be audited");
                    None
                }
            }
        });
        Audit { dir, queue: queue.flatten(), metrics, shield }
    }

    /// From now on every record's particulars are cleaned by `shield` before they are written;
    /// what it replaced is named in the record's `redacted`.
    pub fn shield_with(&self, shield: Arc<dyn Cleaner>) {
        // silent-ok: set once, when the daemon is put together.
        let _ = self.shield.set(shield);
    }

    /// Queues `record` for the log.
    pub fn record(&self, record: Record) {
        if record.kind == Kind::Egress {
            self.metrics.record_egress(&record.outcome, &record.detail);
        }
        let Some(queue) = &self.queue else { return };
        self.metrics.record_audit(record.kind.as_str());
        if queue.send(Command::Write(Box::new(record))).is_err() {
            tracing::error!("the audit writer stopped; an audit record is lost");
        }
    }

    /// Records in the audit log that the configuration changed since the last start, naming the
    /// sections that did (the last one is kept in `data/state/config-last.json`, beside the rest of
    /// the daemon's state; the log holds section names only, never values).
    pub fn config_changed(&self, loaded: &LoadedConfig, state_dir: &std::path::Path) {
        let path = state_dir.join("config-last.json");
        let Ok(now) = serde_json::to_value(&loaded.config) else { return };
        let before: Option<serde_json::Value> = match crate::base::state::read_json(&path) {
            Ok(before) => before,
            Err(error) => {
                tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot read the last configuration");
                None
            }
        };
        let changed: Vec<String> = match (&before, &now) {
            (Some(serde_json::Value::Object(before)), serde_json::Value::Object(now)) => {
                now.iter().filter(|(key, value)| before.get(*key) != Some(value)).map(|(key, _)| key.clone()).collect()
            }
            _ => vec!["all (first start)".to_string()],
        };
        if changed.is_empty() {
            return;
        }
        self.record(Record::new(Kind::Config, "daemon", "changed").detail("sections", changed));
        if let Err(error) = crate::base::state::write_json(&path, &now) {
            tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot keep the configuration for the next start");
        }
    }

    /// Returns once everything recorded before is on disk (at shutdown, in tests).
    pub fn flush(&self) {
        let Some(queue) = &self.queue else { return };
        let (done, wait) = mpsc::channel();
        if queue.send(Command::Flush(done)).is_ok() {
            // silent-ok: a writer that died has nothing more to flush.
            let _ = wait.recv();
        }
    }

    /// Records since `since` (RFC 3339 or none), of `kind`, concerning `user`, oldest first,
    /// the last `limit` of them.
    pub fn search(&self, query: &Query) -> Result<Vec<Record>, AuditError> {
        self.flush();
        search(&self.dir, query)
    }
}

/// What [`Audit::search`] looks for.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub since: Option<jiff::Timestamp>,
    pub user: Option<String>,
    pub kind: Option<Kind>,
    pub limit: usize,
}

fn search(dir: &Path, query: &Query) -> Result<Vec<Record>, AuditError> {
    let mut days: Vec<(String, PathBuf)> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                let day = name.strip_suffix(".jsonl")?.to_string();
                Some((day, entry.path()))
            })
            .collect(),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(source) => return Err(AuditError::Read { path: dir.to_path_buf(), source }),
    };
    days.sort();
    let first_day = query.since.map(|since| since.strftime("%Y-%m-%d").to_string());
    let mut found = vec![];
    for (day, path) in days {
        if first_day.as_ref().is_some_and(|first| &day < first) {
            continue;
        }
        let text = std::fs::read_to_string(&path).map_err(|source| AuditError::Read { path: path.clone(), source })?;
        for line in text.lines() {
            // A line cut short by a crash mid-write is skipped, not fatal.
            let Ok(record) = serde_json::from_str::<Record>(line) else { continue };
            if query.kind.is_some_and(|kind| kind != record.kind) {
                continue;
            }
            if query.user.as_deref().is_some_and(|user| !record.concerns_user(user)) {
                continue;
            }
            if let Some(since) = query.since {
                match record.time.parse::<jiff::Timestamp>() {
                    Ok(time) if time >= since => {}
                    _ => continue,
                }
            }
            found.push(record);
        }
    }
    // A record is written when its event is over (a connection, once closed, with its bytes):
    // shown, they are in the order the events began.
    found.sort_by_key(|record| record.time.parse::<jiff::Timestamp>().ok());
    let limit = if query.limit == 0 { usize::MAX } else { query.limit };
    let skip = found.len().saturating_sub(limit);
    Ok(found.split_off(skip))
}

/// The writer thread's state.
struct Writer {
    dir: PathBuf,
    retention_days: u32,
    /// The open day file and its day.
    file: Option<(String, std::fs::File)>,
    shield: Arc<std::sync::OnceLock<Arc<dyn Cleaner>>>,
}

impl Writer {
    fn run(mut self, queue: mpsc::Receiver<Command>) {
        self.expire();
        while let Ok(first) = queue.recv() {
            let mut flushes = vec![];
            let mut wrote = false;
            for command in std::iter::once(first).chain(std::iter::from_fn(|| queue.try_recv().ok())) {
                match command {
                    Command::Write(mut record) => {
                        self.clean(&mut record);
                        if let Err(error) = self.write(&record) {
                            tracing::error!(%error, dir = %self.dir.display(), "cannot write the audit log; a record is lost");
                        }
                        wrote = true;
                    }
                    Command::Flush(done) => flushes.push(done),
                }
            }
            if wrote {
                if let Some((_, file)) = &self.file {
                    if let Err(error) = file.sync_data() {
                        tracing::error!(%error, "cannot sync the audit log");
                    }
                }
            }
            for done in flushes {
                // silent-ok: the asker may have given up waiting.
                let _ = done.send(());
            }
        }
    }

    /// `record`'s particulars with no secret left in them.
    fn clean(&self, record: &mut Record) {
        let Some(shield) = self.shield.get() else { return };
        let mut detail = serde_json::Value::Object(std::mem::take(&mut record.detail));
        let names = shield.clean(&mut detail);
        if let serde_json::Value::Object(detail) = detail {
            record.detail = detail;
        }
        if !names.is_empty() {
            record.detail.insert("redacted".into(), names.into());
        }
    }

    fn write(&mut self, record: &Record) -> std::io::Result<()> {
        let day = record.day().to_string();
        if self.file.as_ref().is_none_or(|(open, _)| *open != day) {
            if let Some((_, previous)) = self.file.take() {
                previous.sync_data()?;
            }
            crate::base::state::private_dir(&self.dir)?;
            let file = std::fs::OpenOptions::new()
                .create(true)
                .read(true)
                .append(true)
                .mode(0o600)
                .open(self.dir.join(format!("{day}.jsonl")))?;
            // A line cut short by a crash gets its end, so the next record starts a line of its own.
            let mut reader = &file;
            if reader.seek(std::io::SeekFrom::End(-1)).is_ok() {
                let mut last = [0u8];
                reader.read_exact(&mut last)?;
                if last[0] != b'\n' {
                    (&file).write_all(b"\n")?;
                }
            }
            self.file = Some((day, file));
            self.expire();
        }
        let mut line = serde_json::to_vec(record).map_err(std::io::Error::other)?;
        line.push(b'\n');
        match &mut self.file {
            // One write per line: with O_APPEND a line is never interleaved with another.
            Some((_, file)) => file.write_all(&line),
            None => Ok(()),
        }
    }

    /// Removes day files older than the retention.
    fn expire(&self) {
        if self.retention_days == 0 {
            return;
        }
        let cutoff = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(24 * i64::from(self.retention_days));
        let cutoff = cutoff.strftime("%Y-%m-%d").to_string();
        let Ok(entries) = std::fs::read_dir(&self.dir) else { return };
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(day) = name.strip_suffix(".jsonl") else { continue };
            if day < cutoff.as_str() {
                match std::fs::remove_file(entry.path()) {
                    Ok(()) => tracing::info!(file = %name, "removed an audit file past its retention"),
                    Err(error) => tracing::warn!(file = %name, %error, "cannot remove an old audit file"),
                }
            }
        }
    }
}

impl Subsystem for Audit {
    fn name(&self) -> &'static str {
        "audit"
    }

    /// Everything recorded is on disk before the daemon exits.
    fn drain(self: Arc<Self>) -> Work {
        Box::pin(async move {
            if let Err(error) = tokio::task::spawn_blocking(move || self.flush()).await {
                tracing::error!(%error, "the audit log could not be flushed at shutdown");
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn audit(dir: &Path) -> Audit {
        Audit::open(dir.to_path_buf(), true, 0, Arc::new(Metrics::default()))
    }

    #[test]
    fn records_are_appended_as_json_lines_and_found_again() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = audit(dir.path());
        log.record(
            Record::new(Kind::Exec, "container:coder:c1 (user:alice)", "ok")
                .context(&Context::user("alice"))
                .session("s1")
                .detail("command", "ls -la")
                .detail("exit_code", 0),
        );
        log.record(
            Record::new(Kind::Egress, "container:worker:c2 (user:bob)", "refused").context(&Context::user("bob")),
        );
        log.record(Record::new(Kind::Auth, "host:uid=1000", "refused"));
        log.flush();
        let files: Vec<_> = std::fs::read_dir(dir.path()).expect("read").flatten().collect();
        assert_eq!(files.len(), 1);
        let text = std::fs::read_to_string(files[0].path()).expect("read");
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.contains("\"command\":\"ls -la\""), "{text}");
        let mode = files[0].metadata().expect("stat").permissions();
        assert_eq!(std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777, 0o600);

        let all = log.search(&Query::default()).expect("search");
        assert_eq!(all.len(), 3);
        let alice = log.search(&Query { user: Some("alice".into()), ..Query::default() }).expect("search");
        assert_eq!(alice.len(), 1);
        assert_eq!(alice[0].detail["exit_code"], 0);
        let egress = log.search(&Query { kind: Some(Kind::Egress), ..Query::default() }).expect("search");
        assert_eq!(egress[0].outcome, "refused");
        let later = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(1);
        assert!(log.search(&Query { since: Some(later), ..Query::default() }).expect("search").is_empty());
        let last = log.search(&Query { limit: 1, ..Query::default() }).expect("search");
        assert_eq!(last[0].kind, Kind::Auth);
    }

    #[test]
    fn a_torn_line_is_skipped_and_old_days_expire() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("2001-01-01.jsonl"), "{}\n").expect("write");
        let today = jiff::Timestamp::now().strftime("%Y-%m-%d").to_string();
        std::fs::write(dir.path().join(format!("{today}.jsonl")), "{\"time\":\"20").expect("write");
        let log = Audit::open(dir.path().to_path_buf(), true, 30, Arc::new(Metrics::default()));
        log.record(Record::new(Kind::Admin, "host:uid=0", "ok"));
        log.flush();
        assert!(!dir.path().join("2001-01-01.jsonl").exists());
        log.record(Record::new(Kind::Admin, "host:uid=0", "ok"));
        let found = log.search(&Query::default()).expect("search");
        assert_eq!(found.len(), 2, "the torn line is skipped, no record is lost: {found:?}");
    }

    #[test]
    fn a_disabled_log_writes_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = Audit::open(dir.path().join("audit"), false, 0, Arc::new(Metrics::default()));
        log.record(Record::new(Kind::Admin, "host:uid=0", "ok"));
        log.flush();
        assert!(!dir.path().join("audit").exists());
    }
}
