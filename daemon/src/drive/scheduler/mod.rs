//! The scheduler (spec §15, DESIGN.md §9.4): heartbeats, scheduled tasks and system tasks,
//! kept in `data/state/scheduler.json`, each run claimed in its task's ledger before it starts.
//!
//! Exactly once: a tick claims every due slot in the ledger (fsync) and only then moves the
//! task's `nextRun` and starts its run. A daemon that dies after a claim finds it on restart
//! (the ledger wins over a `nextRun` it did not get to save) and marks the run interrupted,
//! retrying it once if the task says so; a slot that was due but not claimed runs after the
//! restart, under the task's catch-up policy. Peers' double fires came from moving `nextRun`
//! after the run instead of claiming before it.
//!
//! By noun: `schedule.rs` computes slots, `heartbeat.rs` reads HEARTBEAT.md, `ledger.rs` keeps
//! the runs, `execute.rs` runs a task in the daemon (agents, delivery, system jobs), `error.rs`
//! says what went wrong; this file holds the tasks, the tick and the loop.

mod error;
pub mod execute;
pub mod heartbeat;
pub mod ledger;
mod request;
pub mod schedule;
pub mod watch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::base::auth::{Context, ContextKind};
use crate::base::lifetime::{Subsystem, Work};
use crate::base::state::{self, StateError};
pub use error::SchedulerError;
pub use ledger::{Outcome, RunEvent, RunRecord, RunRow};
pub use request::{
    agent_may_schedule, changed_task, new_task, schedule_requested, AgentScheduling, Every, TaskChange, TaskRequest,
};
use schedule::{Schedule, ScheduleError, ScheduleSpec};

const SCHEDULER_FILE: &str = "scheduler.json";
/// Tasks one context may hold (heartbeats included).
pub const MOST_TASKS_PER_CONTEXT: usize = 200;
/// The longest prompt a task may carry.
pub const MOST_PROMPT: usize = 8 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskKind {
    Heartbeat,
    Scheduled,
    System,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContextMode {
    /// The context's most recent session: history and memory loaded.
    Session,
    /// A fresh session for the run, archived after it.
    Isolated,
    /// No conversation and no notification: logged only.
    Silent,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TaskStatus {
    Active,
    Paused,
    Completed,
    Failed,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CreatedBy {
    User,
    System,
}

/// What happens to a slot that comes due while the task's previous run still goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Concurrency {
    /// The slot is skipped (recorded in the ledger).
    #[default]
    Forbid,
    /// It runs beside the other.
    Allow,
}

/// What runs for slots missed while the daemon was down (systemd's `Persistent=`, Kubernetes'
/// `startingDeadlineSeconds`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum CatchUp {
    /// One run for all the missed slots.
    #[default]
    Once,
    /// None: the next slot is the next run.
    Skip,
    /// One run if the last missed slot is at most this many seconds old.
    Within(u64),
}

impl TryFrom<String> for CatchUp {
    type Error = ScheduleError;

    fn try_from(text: String) -> Result<CatchUp, ScheduleError> {
        let trimmed = text.trim();
        let lower = trimmed.to_ascii_lowercase();
        match lower.as_str() {
            "" | "once" => Ok(CatchUp::Once),
            "skip" => Ok(CatchUp::Skip),
            _ => {
                let duration = lower
                    .strip_prefix("within")
                    .map(|rest| rest.trim_start_matches([':', ' ']).trim())
                    .ok_or_else(|| ScheduleError::CatchUp(trimmed.to_string()))?;
                let seconds =
                    duration_seconds(duration).ok_or_else(|| ScheduleError::CatchUpDuration(duration.to_string()))?;
                if seconds < 1 {
                    return Err(ScheduleError::CatchUpTooShort(duration.to_string()));
                }
                Ok(CatchUp::Within(seconds))
            }
        }
    }
}

/// Whole seconds of `text`: `90s`, `30m`, `2h`, `1h 30m`, `PT2H`, or days (`1d`, 24 hours each).
fn duration_seconds(text: &str) -> Option<u64> {
    if let Some(days) =
        text.strip_suffix('d').or_else(|| text.strip_suffix(" days")).or_else(|| text.strip_suffix(" day"))
    {
        return days.trim().parse::<u64>().ok()?.checked_mul(86_400);
    }
    let parsed: SignedDuration = text.parse().ok()?;
    (!parsed.is_negative()).then(|| parsed.as_secs() as u64)
}

impl From<CatchUp> for String {
    fn from(catch_up: CatchUp) -> String {
        match catch_up {
            CatchUp::Once => "once".into(),
            CatchUp::Skip => "skip".into(),
            CatchUp::Within(seconds) => format!("within: {:#}", SignedDuration::from_secs(seconds as i64)),
        }
    }
}

/// Where a run's result goes (spec §15.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Notification {
    /// `tui`, `web`, `slack`, `slack/dm`, `slack/{channel}`, `none`; empty: the user's
    /// preferred channel.
    #[serde(default)]
    pub channel: String,
    #[serde(default)]
    pub on_success: bool,
    #[serde(default)]
    pub on_failure: bool,
}

/// The daemon's own upkeep, run as tasks so that their runs show like the others'.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SystemJob {
    /// Idles and archives quiet sessions (`sessions.archival`).
    ArchiveSessions,
    /// Removes memories past their TTL.
    ExpireMemories,
    /// Prunes run records and container logs past `scheduler.retention`.
    PruneRecords,
}

/// The system tasks: each job, every how many seconds, and what it does.
pub const SYSTEM_JOBS: [(SystemJob, u64, &str); 3] = [
    (SystemJob::ArchiveSessions, 60, "Idle and archive quiet sessions"),
    (SystemJob::ExpireMemories, 300, "Remove memories past their TTL"),
    (SystemJob::PruneRecords, 86_400, "Prune old run records and container logs"),
];

impl SystemJob {
    pub fn id(self) -> &'static str {
        match self {
            SystemJob::ArchiveSessions => "system-archive-sessions",
            SystemJob::ExpireMemories => "system-expire-memories",
            SystemJob::PruneRecords => "system-prune-records",
        }
    }
}

/// A task (spec §15.2, stored as in §15.8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskRecord {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: TaskKind,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub user_id: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub group_id: String,
    pub schedule: ScheduleSpec,
    /// IANA name; empty: `system.timezone`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub timezone: String,
    pub agent: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub prompt: String,
    pub context_mode: ContextMode,
    #[serde(default)]
    pub notification: Notification,
    pub status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run: Option<Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_run: Option<Timestamp>,
    #[serde(default)]
    pub failure_count: u32,
    pub created_at: Timestamp,
    pub created_by: CreatedBy,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub catch_up: CatchUp,
    #[serde(default)]
    pub concurrency: Concurrency,
    /// A run interrupted by a crash is run again, once.
    #[serde(default)]
    pub retry_interrupted: bool,
    /// Seconds a run may take; 0: the agent's own timeout.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub timeout: u64,
    /// Heartbeats: the HEARTBEAT.md section (its heading) this task comes from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_job: Option<SystemJob>,
}

fn is_zero(value: &u64) -> bool {
    *value == 0
}

impl TaskRecord {
    /// The context the task belongs to (none for system tasks).
    pub fn context(&self) -> Option<Context> {
        if !self.group_id.is_empty() {
            Some(Context::group(&self.group_id))
        } else if !self.user_id.is_empty() {
            Some(Context::user(&self.user_id))
        } else {
            None
        }
    }

    fn is_of(&self, context: &Context) -> bool {
        self.context().as_ref() == Some(context)
    }
}

/// A stored task: one that reads, or its JSON as it was.
#[derive(Debug, Serialize, Deserialize)]
#[serde(untagged)]
enum Stored {
    Task(Box<TaskRecord>),
    Unreadable(serde_json::Value),
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct SchedulerFile {
    #[serde(default)]
    version: u32,
    /// Each record on its own, so that one that does not read costs that record, not the file.
    #[serde(default)]
    tasks: Vec<Stored>,
    /// `user:ID`/`group:ID` → `sha256:…` of the HEARTBEAT.md the heartbeats come from.
    #[serde(default)]
    heartbeat_hashes: BTreeMap<String, String>,
}

/// Where the scheduler's time comes from: the system clock, or tokio's (paused in tests, so
/// that days pass in milliseconds).
#[derive(Debug, Clone)]
pub enum Clock {
    System,
    Tokio { wall: Timestamp, at: tokio::time::Instant },
}

impl Clock {
    /// A clock that reads `wall` now and follows tokio's time from here.
    pub fn tokio(wall: Timestamp) -> Clock {
        Clock::Tokio { wall, at: tokio::time::Instant::now() }
    }

    pub fn now(&self) -> Timestamp {
        match self {
            Clock::System => Timestamp::now(),
            Clock::Tokio { wall, at } => {
                let elapsed = SignedDuration::try_from(at.elapsed()).unwrap_or(SignedDuration::MAX);
                wall.saturating_add(elapsed).unwrap_or(*wall)
            }
        }
    }
}

/// The scheduler's settings, from `config.yaml`.
#[derive(Debug, Clone)]
pub struct Settings {
    /// `system.timezone`.
    pub timezone: String,
    /// `scheduler.error_handling.max_consecutive_failures`.
    pub max_failures: u32,
    /// The longest wait between two looks at the tasks (`orchestrator.poll_intervals.scheduler`).
    pub poll: Duration,
    /// How late a slot may be and still count as on time (not missed).
    pub grace: Duration,
}

impl Settings {
    pub fn from_config(config: &crate::base::config::Config) -> Settings {
        Settings {
            timezone: config.system.timezone.clone(),
            max_failures: config.scheduler.error_handling.max_consecutive_failures.max(1),
            poll: Duration::from_millis(config.orchestrator.poll_intervals.scheduler.max(100)),
            grace: Duration::from_secs(config.scheduler.grace.max(1)),
        }
    }
}

/// A run the scheduler has claimed and wants carried out.
#[derive(Debug, Clone)]
pub struct Claim {
    pub task: TaskRecord,
    pub run: String,
    pub slot: Timestamp,
    pub attempt: u32,
}

/// Why a run did not give a result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The agent's container did not start (retried once at once).
    Start(String),
    /// It ran past its time and was stopped.
    Timeout(String),
    /// It answered with an error.
    Error(String),
}

impl Failure {
    fn outcome(&self) -> Outcome {
        match self {
            Failure::Start(_) => Outcome::StartFailed,
            Failure::Timeout(_) => Outcome::TimedOut,
            Failure::Error(_) => Outcome::Failed,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            Failure::Start(message) | Failure::Timeout(message) | Failure::Error(message) => message,
        }
    }
}

/// What a run came to.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    pub result: Result<String, Failure>,
    pub container: Option<String>,
    pub session: Option<String>,
    pub tokens: u64,
}

impl RunOutcome {
    pub fn ok(result: impl Into<String>) -> RunOutcome {
        RunOutcome { result: Ok(result.into()), container: None, session: None, tokens: 0 }
    }

    pub fn failed(failure: Failure) -> RunOutcome {
        RunOutcome { result: Err(failure), container: None, session: None, tokens: 0 }
    }
}

/// What the owner (or the admins) are told after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// A run's non-empty result.
    Result { run: String, content: String, session: Option<String> },
    /// A run failed (the task asks to hear of failures).
    Failed { run: String, error: String },
    /// The task was paused after too many failures in a row.
    Paused { failures: u32, error: String },
}

/// Carries out runs: the daemon's agents and system jobs; a recording double in tests.
#[async_trait::async_trait]
pub trait Execute: Send + Sync + 'static {
    async fn run(&self, claim: &Claim) -> RunOutcome;
    async fn deliver(&self, task: &TaskRecord, delivery: Delivery);
}

#[derive(Debug)]
struct Entry {
    record: TaskRecord,
    /// None when the stored schedule no longer reads (its time zone went away).
    schedule: Option<Schedule>,
    running: u32,
    /// The latest slot claimed in the ledger.
    last_claimed: Option<Timestamp>,
}

#[derive(Debug, Default)]
struct Book {
    tasks: BTreeMap<String, Entry>,
    hashes: BTreeMap<String, String>,
    /// Claims the previous daemon left without an end: (task, run, slot, attempt).
    unfinished: Vec<(String, String, Timestamp, u32)>,
    /// Stored tasks that do not read, saved back as they are.
    unreadable: Vec<serde_json::Value>,
}

/// scheduler.json as written: the tasks straight from the book, the unreadable ones after.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct FileOut<'a> {
    version: u32,
    tasks: TasksOut<'a>,
    heartbeat_hashes: &'a BTreeMap<String, String>,
}

struct TasksOut<'a>(&'a Book);

impl Serialize for TasksOut<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeSeq as _;
        let book = self.0;
        let mut seq = serializer.serialize_seq(Some(book.tasks.len() + book.unreadable.len()))?;
        for entry in book.tasks.values() {
            seq.serialize_element(&entry.record)?;
        }
        for raw in &book.unreadable {
            seq.serialize_element(raw)?;
        }
        seq.end()
    }
}

/// The scheduler.
#[derive(Debug)]
pub struct Scheduler {
    path: PathBuf,
    ledger: ledger::Ledger,
    clock: Clock,
    settings: Settings,
    default_zone: jiff::tz::TimeZone,
    book: Mutex<Book>,
    /// Taken while scheduler.json is written, so that a newer state is never overwritten by
    /// an older one.
    saving: Mutex<()>,
    /// A tick changed tasks that are not saved yet.
    dirty: std::sync::atomic::AtomicBool,
    /// The last tick could not write its claims: the loop waits a moment before the next.
    claim_failed: std::sync::atomic::AtomicBool,
    /// Where runs are counted (`baaaht_task_runs_total`), once the daemon sets it.
    metrics: std::sync::OnceLock<Arc<crate::base::metrics::Metrics>>,
    /// What a task's prompt and description pass before they are kept (none in tests).
    redact: Option<crate::guard::redact::Redact>,
    wake: tokio::sync::Notify,
}

/// The time zone `record`'s schedule is read in: its own, else `default`.
fn zone_for(record: &TaskRecord, default: &jiff::tz::TimeZone) -> Result<jiff::tz::TimeZone, ScheduleError> {
    if record.timezone.is_empty() {
        Ok(default.clone())
    } else {
        schedule::zone(&record.timezone)
    }
}

/// The `user_id`/`group_id` pair a task of `context` carries.
pub fn owner_ids(context: &Context) -> (String, String) {
    match context.kind {
        ContextKind::User => (context.id.clone(), String::new()),
        ContextKind::Group => (String::new(), context.id.clone()),
    }
}

fn new_id(prefix: &str) -> String {
    let simple = uuid::Uuid::new_v4().simple().to_string();
    format!("{prefix}{}", &simple[..12])
}

/// What [`Scheduler::sync_heartbeats`] changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct HeartbeatChanges {
    pub added: usize,
    pub updated: usize,
    pub removed: usize,
    pub kept: usize,
}

/// Which tasks [`Scheduler::list`] returns.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    /// Only this context's (None: every context's, system tasks included).
    pub context: Option<Context>,
    pub kind: Option<TaskKind>,
    pub status: Option<TaskStatus>,
}

impl Scheduler {
    /// Opens `state_dir/scheduler.json` and the run ledgers; claims a previous daemon left
    /// unfinished are remembered for [`Scheduler::run`] to mark.
    pub fn open(state_dir: &Path, settings: Settings, clock: Clock) -> Result<Scheduler, SchedulerError> {
        let default_zone = schedule::zone(&settings.timezone)?;
        let path = state_dir.join(SCHEDULER_FILE);
        let file: SchedulerFile = state::read_json_or_set_aside(&path, SchedulerFile::default);
        let ledger = ledger::Ledger::new(state_dir.join("runs"));
        let mut book = Book { hashes: file.heartbeat_hashes, ..Book::default() };
        for stored in file.tasks {
            let record = match stored {
                Stored::Task(record) => *record,
                Stored::Unreadable(raw) => {
                    // Kept as it is (saved back untouched) for a person to mend; it does not run.
                    let error = serde_json::from_value::<TaskRecord>(raw.clone()).err().map(|e| e.to_string());
                    tracing::error!(error, task = %raw["id"], "a stored task does not read; it is kept but does not run");
                    book.unreadable.push(raw);
                    continue;
                }
            };
            let schedule = match zone_for(&record, &default_zone).and_then(|zone| Schedule::new(&record.schedule, zone))
            {
                Ok(schedule) => Some(schedule),
                Err(error) => {
                    tracing::error!(task = %record.id, %error, "a stored task's schedule does not read; it will not run");
                    None
                }
            };
            let mut entry = Entry { record, schedule, running: 0, last_claimed: None };
            let mut open: Vec<(String, Timestamp, u32)> = vec![];
            for run in ledger.read(&entry.record.id) {
                match run.event {
                    RunEvent::Claimed => {
                        entry.last_claimed = entry.last_claimed.max(Some(run.slot));
                        open.push((run.run, run.slot, run.attempt));
                    }
                    RunEvent::Finished | RunEvent::Interrupted => open.retain(|(id, _, _)| *id != run.run),
                    RunEvent::Skipped => entry.last_claimed = entry.last_claimed.max(Some(run.slot)),
                }
            }
            // The ledger wins: a slot claimed (or skipped) is never due again, even when
            // scheduler.json was not saved after the claim.
            if let (Some(claimed), Some(next), Some(schedule)) =
                (entry.last_claimed, entry.record.next_run, entry.schedule.as_ref())
            {
                if next <= claimed {
                    entry.record.next_run = schedule.next_after(claimed);
                    // A one-shot whose run was claimed: completed if that run ended; else
                    // `recover` decides (interrupted: failed, or retried).
                    if entry.record.next_run.is_none() && entry.record.status == TaskStatus::Active && open.is_empty() {
                        entry.record.status = TaskStatus::Completed;
                    }
                }
            }
            for (run, slot, attempt) in open {
                book.unfinished.push((entry.record.id.clone(), run, slot, attempt));
            }
            book.tasks.insert(entry.record.id.clone(), entry);
        }
        Ok(Scheduler {
            path,
            ledger,
            clock,
            settings,
            default_zone,
            book: Mutex::new(book),
            saving: Mutex::new(()),
            dirty: std::sync::atomic::AtomicBool::new(false),
            claim_failed: std::sync::atomic::AtomicBool::new(false),
            metrics: std::sync::OnceLock::new(),
            redact: None,
            wake: tokio::sync::Notify::new(),
        })
    }

    /// This scheduler, every task's prompt and description cleaned by `redact` before they
    /// are kept (scheduler.json holds no secret).
    pub fn redacting(self, redact: crate::guard::redact::Redact) -> Scheduler {
        Scheduler { redact: Some(redact), ..self }
    }

    fn cleaned(&self, text: String) -> String {
        crate::guard::redact::state_field(self.redact.as_ref(), text)
    }

    /// Counts runs in `metrics` from now on.
    pub fn count_runs_in(&self, metrics: Arc<crate::base::metrics::Metrics>) {
        // silent-ok: set once by the daemon; a second call changes nothing.
        drop(self.metrics.set(metrics));
    }

    fn count_outcomes(&self, records: &[RunRecord]) {
        let Some(metrics) = self.metrics.get() else { return };
        let book = self.lock();
        for record in records {
            let Some(outcome) = record.outcome else { continue };
            let kind = match book.tasks.get(&record.task).map(|entry| entry.record.kind) {
                Some(TaskKind::Heartbeat) => "heartbeat",
                Some(TaskKind::System) => "system",
                _ => "scheduled",
            };
            metrics.record_task_run(kind, outcome.as_str());
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Writes scheduler.json (atomically) with the tasks as they are now.
    fn save(&self) -> Result<(), StateError> {
        let _saving = self.saving.lock().unwrap_or_else(PoisonError::into_inner);
        let bytes = {
            let book = self.lock();
            let file = FileOut { version: 1, tasks: TasksOut(&book), heartbeat_hashes: &book.hashes };
            // silent-ok: plain data always serializes.
            serde_json::to_vec(&file).unwrap_or_default()
        };
        state::write_atomic(&self.path, &bytes, 0o600)
    }

    fn save_logged(&self) {
        if let Err(error) = self.save() {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot save the scheduler's tasks");
        }
    }

    fn zone_of(&self, record: &TaskRecord) -> Result<jiff::tz::TimeZone, ScheduleError> {
        zone_for(record, &self.default_zone)
    }

    /// The time zone to show `record`'s times in: its own, else `system.timezone` (also when
    /// its own no longer reads).
    pub fn display_zone(&self, record: &TaskRecord) -> jiff::tz::TimeZone {
        self.zone_of(record).unwrap_or_else(|_gone| self.default_zone.clone())
    }

    /// `system.timezone`.
    pub fn default_zone(&self) -> &jiff::tz::TimeZone {
        &self.default_zone
    }

    /// Checks and stores a new task; its id, status, times and counts are the scheduler's to
    /// set. On disk when this returns.
    pub fn add(&self, mut record: TaskRecord) -> Result<TaskRecord, SchedulerError> {
        record.prompt = self.cleaned(std::mem::take(&mut record.prompt));
        record.description = self.cleaned(std::mem::take(&mut record.description));
        let now = self.now();
        let (schedule, next_run) = self.to_come(&record, now)?;
        if record.id.is_empty() {
            record.id = new_id(match record.kind {
                TaskKind::Heartbeat => "hb-",
                TaskKind::System => "system-",
                TaskKind::Scheduled => "task-",
            });
        }
        record.status = TaskStatus::Active;
        record.next_run = Some(next_run);
        record.last_run = None;
        record.failure_count = 0;
        record.created_at = now;
        {
            let mut book = self.lock();
            if let Some(context) = record.context() {
                let count = book.tasks.values().filter(|entry| entry.record.is_of(&context)).count();
                if count >= MOST_TASKS_PER_CONTEXT {
                    return Err(SchedulerError::TooMany(context.to_string()));
                }
            }
            if book.tasks.contains_key(&record.id) {
                return Err(SchedulerError::Invalid(format!("id: a task {} exists already", record.id)));
            }
            book.tasks.insert(
                record.id.clone(),
                Entry { record: record.clone(), schedule: Some(schedule), running: 0, last_claimed: None },
            );
        }
        if let Err(error) = self.save() {
            self.lock().tasks.remove(&record.id);
            return Err(error.into());
        }
        tracing::info!(task = %record.id, kind = ?record.kind, next_run = %next_run, "task scheduled");
        self.wake.notify_one();
        Ok(record)
    }

    /// `record`'s schedule read in its zone, and its first run after `now`; a schedule with no
    /// time to come is refused.
    fn to_come(&self, record: &TaskRecord, now: Timestamp) -> Result<(Schedule, Timestamp), SchedulerError> {
        let schedule = Schedule::new(&record.schedule, self.zone_of(record)?)?;
        if let Some(once) = record.schedule.once {
            if once <= now {
                return Err(ScheduleError::Once(format!(
                    "{once} is in the past (it is {} now); give a time to come, with its offset",
                    now.strftime("%Y-%m-%dT%H:%M:%SZ")
                ))
                .into());
            }
        }
        let next_run = schedule.next_after(now).ok_or_else(|| {
            SchedulerError::Invalid("schedule: it has no time to come; nothing would ever run".into())
        })?;
        Ok((schedule, next_run))
    }

    /// Stores `changed` (from [`request::changed_task`]) over its task: its prompt, description,
    /// time zone and schedule; its id, status and runs stay. A paused task stays paused.
    pub fn update(&self, changed: TaskRecord) -> Result<TaskRecord, SchedulerError> {
        let now = self.now();
        let (schedule, next_run) = self.to_come(&changed, now)?;
        let (prompt, description) = (self.cleaned(changed.prompt), self.cleaned(changed.description));
        let record = self.change(&changed.id, |entry, _| {
            if entry.record.kind != TaskKind::Scheduled {
                return Err(SchedulerError::Invalid(format!("task {}: only scheduled tasks change", changed.id)));
            }
            entry.record.prompt = prompt;
            entry.record.description = description;
            entry.record.timezone = changed.timezone;
            entry.record.schedule = changed.schedule;
            entry.record.next_run = Some(next_run);
            entry.schedule = Some(schedule);
            Ok(())
        })?;
        tracing::info!(task = %record.id, next_run = %next_run, "task changed");
        Ok(record)
    }

    pub fn get(&self, id: &str) -> Option<TaskRecord> {
        self.lock().tasks.get(id).map(|entry| entry.record.clone())
    }

    /// The tasks `filter` names, by next run (the soonest first).
    pub fn list(&self, filter: &Filter) -> Vec<TaskRecord> {
        let book = self.lock();
        let mut found: Vec<TaskRecord> = book
            .tasks
            .values()
            .map(|entry| &entry.record)
            .filter(|record| filter.context.as_ref().is_none_or(|context| record.is_of(context)))
            .filter(|record| filter.kind.is_none_or(|kind| record.kind == kind))
            .filter(|record| filter.status.is_none_or(|status| record.status == status))
            .cloned()
            .collect();
        found.sort_by(|a, b| {
            a.next_run.is_none().cmp(&b.next_run.is_none()).then(a.next_run.cmp(&b.next_run)).then(a.id.cmp(&b.id))
        });
        found
    }

    /// How many tasks there are.
    pub fn count(&self) -> usize {
        self.lock().tasks.len()
    }

    /// The next `count` runs of task `id`.
    pub fn upcoming(&self, id: &str, count: usize) -> Result<Vec<Timestamp>, SchedulerError> {
        let book = self.lock();
        let entry = book.tasks.get(id).ok_or_else(|| SchedulerError::NotFound(id.to_string()))?;
        if entry.record.status != TaskStatus::Active {
            return Ok(vec![]);
        }
        let (Some(schedule), Some(next)) = (&entry.schedule, entry.record.next_run) else { return Ok(vec![]) };
        let mut runs = vec![next];
        runs.extend(schedule.upcoming(next, count.saturating_sub(1)));
        runs.truncate(count);
        Ok(runs)
    }

    /// The runs of task `id`, newest first.
    pub fn runs(&self, id: &str, limit: usize) -> Vec<RunRow> {
        self.ledger.rows(id, limit)
    }

    /// Pauses task `id`: it does not run until resumed.
    pub fn pause(&self, id: &str) -> Result<TaskRecord, SchedulerError> {
        self.change(id, |entry, _| match entry.record.status {
            TaskStatus::Active | TaskStatus::Paused => {
                entry.record.status = TaskStatus::Paused;
                Ok(())
            }
            status => Err(SchedulerError::Over { id: id.to_string(), status: format!("{status:?}").to_lowercase() }),
        })
    }

    /// Resumes task `id` from now on (missed slots are not made up); its failure count starts
    /// again from zero.
    pub fn resume(&self, id: &str) -> Result<TaskRecord, SchedulerError> {
        let now = self.now();
        self.change(id, |entry, _| {
            if entry.record.status == TaskStatus::Completed {
                return Err(SchedulerError::RanAlready { id: id.to_string() });
            }
            let schedule = entry.schedule.as_ref().ok_or_else(|| SchedulerError::Unreadable { id: id.to_string() })?;
            let next = schedule.next_after(now).ok_or_else(|| SchedulerError::NoSlot { id: id.to_string() })?;
            entry.record.status = TaskStatus::Active;
            entry.record.failure_count = 0;
            entry.record.next_run = Some(next);
            Ok(())
        })
    }

    fn change(
        &self,
        id: &str,
        change: impl FnOnce(&mut Entry, Timestamp) -> Result<(), SchedulerError>,
    ) -> Result<TaskRecord, SchedulerError> {
        let now = self.now();
        let record = {
            let mut book = self.lock();
            let entry = book.tasks.get_mut(id).ok_or_else(|| SchedulerError::NotFound(id.to_string()))?;
            change(entry, now)?;
            entry.record.clone()
        };
        self.save()?;
        self.wake.notify_one();
        Ok(record)
    }

    /// Removes task `id`; a run in progress finishes. Its ledger stays until pruned.
    pub fn cancel(&self, id: &str) -> Result<TaskRecord, SchedulerError> {
        let removed = self.lock().tasks.remove(id).ok_or_else(|| SchedulerError::NotFound(id.to_string()))?;
        self.save()?;
        tracing::info!(task = id, "task cancelled");
        Ok(removed.record)
    }

    /// Makes `context`'s heartbeat tasks those of `sections` (its HEARTBEAT.md, hashed
    /// `hash`): a section whose cadence and active hours are unchanged keeps its task and its
    /// jitter; a changed one draws a new time; a removed one's task goes. Nothing changes
    /// when `hash` is the one stored. Other contexts' tasks are untouched.
    pub fn sync_heartbeats(
        &self,
        context: &Context,
        hash: &str,
        sections: &[heartbeat::Section],
        draw: &mut dyn FnMut(u32) -> u32,
    ) -> Result<HeartbeatChanges, SchedulerError> {
        let key = context.to_string();
        let now = self.now();
        let mut changes = HeartbeatChanges::default();
        {
            let mut book = self.lock();
            if book.hashes.get(&key).map(String::as_str) == Some(hash) {
                return Ok(changes);
            }
            let existing: Vec<String> = book
                .tasks
                .values()
                .filter(|entry| entry.record.kind == TaskKind::Heartbeat && entry.record.is_of(context))
                .map(|entry| entry.record.id.clone())
                .collect();
            let mut unused: Vec<String> = existing.clone();
            for section in sections {
                let title = self.cleaned(section.title.clone());
                let found = existing.iter().find(|id| {
                    book.tasks
                        .get(*id)
                        .and_then(|entry| entry.record.section.as_deref())
                        .is_some_and(|kept| kept.eq_ignore_ascii_case(&title))
                });
                let description = format!("{title} (from HEARTBEAT.md)");
                let prompt = self.cleaned(section.prompt.clone());
                if let Some(id) = found.cloned() {
                    unused.retain(|other| *other != id);
                    let Some(entry) = book.tasks.get_mut(&id) else { continue };
                    let same_time = entry.record.schedule.cadence == Some(section.cadence)
                        && entry.record.schedule.active_hours == section.active_hours;
                    if same_time && entry.record.prompt == prompt && entry.record.description == description {
                        changes.kept += 1;
                        continue;
                    }
                    entry.record.prompt = prompt;
                    entry.record.description = description;
                    entry.record.section = Some(title);
                    if !same_time {
                        let spec = schedule::cadence_schedule(section.cadence, section.active_hours.as_deref(), draw);
                        let zone = self.zone_of(&entry.record)?;
                        let schedule = Schedule::new(&spec, zone)?;
                        entry.record.next_run = schedule.next_after(now);
                        entry.record.schedule = spec;
                        entry.schedule = Some(schedule);
                    }
                    changes.updated += 1;
                    continue;
                }
                let spec = schedule::cadence_schedule(section.cadence, section.active_hours.as_deref(), draw);
                let schedule = Schedule::new(&spec, self.default_zone.clone())?;
                let (user_id, group_id) = owner_ids(context);
                let record = TaskRecord {
                    id: new_id("hb-"),
                    kind: TaskKind::Heartbeat,
                    user_id,
                    group_id,
                    next_run: schedule.next_after(now),
                    schedule: spec,
                    timezone: String::new(),
                    agent: "heartbeat".into(),
                    prompt,
                    context_mode: ContextMode::Session,
                    notification: Notification { channel: String::new(), on_success: true, on_failure: false },
                    status: TaskStatus::Active,
                    last_run: None,
                    failure_count: 0,
                    created_at: now,
                    created_by: CreatedBy::System,
                    description,
                    catch_up: CatchUp::Once,
                    concurrency: Concurrency::Forbid,
                    retry_interrupted: false,
                    timeout: 0,
                    section: Some(title),
                    system_job: None,
                };
                book.tasks.insert(
                    record.id.clone(),
                    Entry { record, schedule: Some(schedule), running: 0, last_claimed: None },
                );
                changes.added += 1;
            }
            for id in &unused {
                book.tasks.remove(id);
                changes.removed += 1;
            }
            book.hashes.insert(key, hash.to_string());
        }
        self.save()?;
        self.wake.notify_one();
        Ok(changes)
    }

    /// The stored hash of `context`'s HEARTBEAT.md.
    pub fn heartbeat_hash(&self, context: &Context) -> Option<String> {
        self.lock().hashes.get(&context.to_string()).cloned()
    }

    /// Makes sure each system job is a task running every `interval` seconds.
    pub fn ensure_system(&self, jobs: &[(SystemJob, u64, &str)]) -> Result<(), SchedulerError> {
        let now = self.now();
        let mut changed = false;
        {
            let mut book = self.lock();
            for (job, interval, description) in jobs {
                let spec = ScheduleSpec {
                    interval: Some(*interval),
                    anchor: Some(Timestamp::UNIX_EPOCH),
                    ..ScheduleSpec::default()
                };
                if let Some(entry) = book.tasks.get_mut(job.id()) {
                    if entry.record.schedule == spec {
                        continue;
                    }
                    let schedule = Schedule::new(&spec, jiff::tz::TimeZone::UTC)?;
                    entry.record.next_run = schedule.next_after(now);
                    entry.record.schedule = spec;
                    entry.schedule = Some(schedule);
                    changed = true;
                    continue;
                }
                let schedule = Schedule::new(&spec, jiff::tz::TimeZone::UTC)?;
                let record = TaskRecord {
                    id: job.id().to_string(),
                    kind: TaskKind::System,
                    user_id: String::new(),
                    group_id: String::new(),
                    next_run: schedule.next_after(now),
                    schedule: spec,
                    timezone: "UTC".into(),
                    agent: String::new(),
                    prompt: String::new(),
                    context_mode: ContextMode::Silent,
                    notification: Notification { channel: "none".into(), on_success: false, on_failure: false },
                    status: TaskStatus::Active,
                    last_run: None,
                    failure_count: 0,
                    created_at: now,
                    created_by: CreatedBy::System,
                    description: (*description).to_string(),
                    catch_up: CatchUp::Once,
                    concurrency: Concurrency::Forbid,
                    retry_interrupted: false,
                    timeout: 0,
                    section: None,
                    system_job: Some(*job),
                };
                book.tasks.insert(
                    record.id.clone(),
                    Entry { record, schedule: Some(schedule), running: 0, last_claimed: None },
                );
                changed = true;
            }
        }
        if changed {
            self.save()?;
        }
        Ok(())
    }

    /// Claims every due slot at `now` (ledger first, fsync) and returns the runs to start.
    /// Slots missed beyond the grace follow each task's catch-up policy; a slot due while the
    /// task's run still goes is skipped unless the task allows overlap. The tasks' new
    /// `nextRun`s are saved by [`Scheduler::save_after_tick`]: the ledger already holds what a
    /// restart needs (it wins over an older `nextRun`).
    pub fn tick(&self, now: Timestamp) -> Vec<Claim> {
        // No save may write the moved `nextRun`s before their claims are on disk.
        let _saving = self.saving.lock().unwrap_or_else(PoisonError::into_inner);
        let grace = SignedDuration::try_from(self.settings.grace).unwrap_or(SignedDuration::ZERO);
        let mut claims = vec![];
        let mut records = vec![];
        {
            let mut book = self.lock();
            for entry in book.tasks.values_mut() {
                if entry.record.status != TaskStatus::Active {
                    continue;
                }
                let (Some(next), Some(schedule)) = (entry.record.next_run, entry.schedule.as_ref()) else { continue };
                let Some((slot, count)) = schedule.last_due(next, now) else { continue };
                let late = now.duration_since(slot);
                let runs = late <= grace
                    || match entry.record.catch_up {
                        CatchUp::Once => true,
                        CatchUp::Skip => false,
                        CatchUp::Within(seconds) => late <= SignedDuration::from_secs(seconds as i64),
                    };
                let busy = entry.running > 0 && entry.record.concurrency == Concurrency::Forbid;
                entry.record.next_run = schedule.next_after(now.max(slot));
                entry.last_claimed = Some(slot);
                let id = entry.record.id.clone();
                if runs && !busy {
                    let run = new_id("run-");
                    let mut record = RunRecord::new(&id, &run, RunEvent::Claimed, slot, 1, now);
                    record.missed = count - 1;
                    records.push(record);
                    entry.running += 1;
                    entry.record.last_run = Some(now);
                    claims.push(Claim { task: entry.record.clone(), run, slot, attempt: 1 });
                } else {
                    let mut record = RunRecord::new(&id, &new_id("run-"), RunEvent::Skipped, slot, 0, now);
                    record.outcome = Some(Outcome::Skipped);
                    record.missed = count;
                    record.error = Some(if busy {
                        "the previous run was still going (concurrency: forbid)".into()
                    } else {
                        format!(
                            "missed by {} while baaahtd was not running (catch_up: {})",
                            friendly(late),
                            String::from(entry.record.catch_up)
                        )
                    });
                    tracing::info!(task = %id, slot = %slot, missed = count, busy, "slot skipped");
                    records.push(record);
                }
                if entry.record.next_run.is_none() && (busy || !runs) {
                    entry.record.status = TaskStatus::Completed;
                }
            }
        }
        if records.is_empty() {
            return claims;
        }
        // The claims are on disk before any run starts; a failure here starts nothing.
        if let Err(error) = self.ledger.append(&records) {
            self.claim_failed.store(true, std::sync::atomic::Ordering::Release);
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot claim due runs; they are not started");
            let mut book = self.lock();
            for claim in &claims {
                if let Some(entry) = book.tasks.get_mut(&claim.task.id) {
                    entry.running = entry.running.saturating_sub(1);
                    entry.record.next_run = Some(claim.slot);
                    entry.last_claimed = None;
                }
            }
            return vec![];
        }
        self.dirty.store(true, std::sync::atomic::Ordering::Release);
        drop(_saving);
        self.count_outcomes(&records);
        claims
    }

    /// Saves scheduler.json if a tick changed it.
    pub fn save_after_tick(&self) {
        if self.dirty.swap(false, std::sync::atomic::Ordering::AcqRel) {
            self.save_logged();
        }
    }

    /// When the next slot of any active task is due.
    fn next_due(&self) -> Option<Timestamp> {
        self.lock()
            .tasks
            .values()
            .filter(|entry| entry.record.status == TaskStatus::Active && entry.schedule.is_some())
            .filter_map(|entry| entry.record.next_run)
            .min()
    }

    /// Records what a run came to and updates its task. Returns a retry to carry out (a start
    /// failure on the first attempt) or what to tell people.
    fn finish(&self, claim: &Claim, outcome: &RunOutcome) -> (Option<Claim>, Vec<Delivery>) {
        let now = self.now();
        let mut record = RunRecord::new(&claim.task.id, &claim.run, RunEvent::Finished, claim.slot, claim.attempt, now);
        record.container = outcome.container.clone();
        record.session = outcome.session.clone();
        record.tokens = outcome.tokens;
        match &outcome.result {
            Ok(result) => {
                record.outcome = Some(Outcome::Ok);
                record.result = (!result.trim().is_empty()).then(|| result.clone());
            }
            Err(failure) => {
                record.outcome = Some(failure.outcome());
                record.error = Some(failure.message().to_string());
            }
        }
        let retry = matches!(outcome.result, Err(Failure::Start(_))) && claim.attempt == 1;
        let mut records = vec![record];
        let retry_claim = retry.then(|| {
            let run = new_id("run-");
            records.push(RunRecord::new(&claim.task.id, &run, RunEvent::Claimed, claim.slot, 2, now));
            Claim { task: claim.task.clone(), run, slot: claim.slot, attempt: 2 }
        });
        if let Err(error) = self.ledger.append(&records) {
            tracing::error!(task = %claim.task.id, error = %baaaht_proto::error_chain(&error), "cannot record a run's end");
        }
        self.count_outcomes(&records);
        if let Some(retry) = retry_claim {
            tracing::warn!(task = %claim.task.id, run = %claim.run, "the agent did not start; retrying once");
            return (Some(retry), vec![]);
        }
        let mut deliveries = vec![];
        {
            let mut book = self.lock();
            let Some(entry) = book.tasks.get_mut(&claim.task.id) else {
                // Cancelled while it ran: its result still reaches its owner.
                if let Ok(result) = &outcome.result {
                    if wants_result(&claim.task, result) {
                        deliveries.push(Delivery::Result {
                            run: claim.run.clone(),
                            content: result.clone(),
                            session: outcome.session.clone(),
                        });
                    }
                }
                return (None, deliveries);
            };
            entry.running = entry.running.saturating_sub(1);
            match &outcome.result {
                Ok(result) => {
                    entry.record.failure_count = 0;
                    if wants_result(&entry.record, result) {
                        deliveries.push(Delivery::Result {
                            run: claim.run.clone(),
                            content: result.clone(),
                            session: outcome.session.clone(),
                        });
                    }
                    if entry.record.next_run.is_none() && entry.record.status == TaskStatus::Active {
                        entry.record.status = TaskStatus::Completed;
                    }
                }
                Err(failure) => {
                    entry.record.failure_count += 1;
                    tracing::warn!(
                        task = %claim.task.id,
                        run = %claim.run,
                        failures = entry.record.failure_count,
                        error = failure.message(),
                        "a task's run failed"
                    );
                    if entry.record.notification.on_failure && entry.record.context_mode != ContextMode::Silent {
                        deliveries
                            .push(Delivery::Failed { run: claim.run.clone(), error: failure.message().to_string() });
                    }
                    if entry.record.next_run.is_none() && entry.record.status == TaskStatus::Active {
                        entry.record.status = TaskStatus::Failed;
                    } else if entry.record.failure_count >= self.settings.max_failures
                        && entry.record.status == TaskStatus::Active
                    {
                        entry.record.status = TaskStatus::Paused;
                        tracing::error!(task = %claim.task.id, failures = entry.record.failure_count, "task paused after failing in a row");
                        deliveries.push(Delivery::Paused {
                            failures: entry.record.failure_count,
                            error: failure.message().to_string(),
                        });
                    }
                }
            }
        }
        self.save_logged();
        (None, deliveries)
    }

    /// Marks the claims a previous daemon left unfinished as interrupted; returns the retries
    /// of those whose task asks for one.
    fn recover(&self) -> Vec<Claim> {
        let now = self.now();
        let unfinished = self.lock().unfinished.clone();
        if unfinished.is_empty() {
            return vec![];
        }
        let mut records = vec![];
        let mut retries = vec![];
        let mut failed = vec![];
        {
            let book = self.lock();
            for (task, run, slot, attempt) in &unfinished {
                let mut record = RunRecord::new(task, run, RunEvent::Interrupted, *slot, *attempt, now);
                record.outcome = Some(Outcome::Interrupted);
                record.error = Some("baaahtd stopped while it ran".into());
                records.push(record);
                tracing::warn!(task, run, %slot, "a run interrupted by a restart");
                let Some(entry) = book.tasks.get(task) else { continue };
                if entry.record.retry_interrupted && *attempt == 1 && entry.record.status != TaskStatus::Paused {
                    let retry = new_id("run-");
                    records.push(RunRecord::new(task, &retry, RunEvent::Claimed, *slot, 2, now));
                    retries.push(Claim { task: entry.record.clone(), run: retry, slot: *slot, attempt: 2 });
                } else if entry.record.next_run.is_none() && entry.record.status == TaskStatus::Active {
                    // A one-shot whose only run was cut short: it did not complete.
                    failed.push(task.clone());
                }
            }
        }
        if let Err(error) = self.ledger.append(&records) {
            tracing::error!(error = %baaaht_proto::error_chain(&error), "cannot record interrupted runs; they wait for the next start");
            return vec![];
        }
        self.count_outcomes(&records);
        {
            let mut book = self.lock();
            book.unfinished.clear();
            for claim in &retries {
                if let Some(entry) = book.tasks.get_mut(&claim.task.id) {
                    entry.running += 1;
                }
            }
            for task in &failed {
                if let Some(entry) = book.tasks.get_mut(task) {
                    entry.record.status = TaskStatus::Failed;
                }
            }
        }
        self.save_logged();
        retries
    }

    /// Prunes the ledgers: records older than `days` go, and each ledger keeps its newest
    /// `most`; ledgers of tasks that are gone and empty are removed. Returns records removed.
    pub fn prune_runs(&self, days: u64, most: usize) -> usize {
        let cutoff = self.now().saturating_sub(SignedDuration::from_hours(24 * days as i64)).unwrap_or(Timestamp::MIN);
        let mut removed = 0;
        for task in self.ledger.tasks() {
            match self.ledger.prune(&task, cutoff, most) {
                Ok(count) => removed += count,
                Err(error) => {
                    tracing::warn!(task, error = %baaaht_proto::error_chain(&error), "cannot prune a run ledger")
                }
            }
            if self.get(&task).is_none() && self.ledger.read(&task).is_empty() {
                self.ledger.remove(&task);
            }
        }
        removed
    }

    /// Runs the scheduler until `cancel`: claims due slots and carries their runs out with
    /// `executor`, each under `tracker`.
    pub async fn run(self: Arc<Self>, executor: Arc<dyn Execute>, cancel: CancellationToken, tracker: TaskTracker) {
        for claim in self.recover() {
            tracker.spawn(self.clone().carry_out(claim, executor.clone(), cancel.clone()));
        }
        loop {
            let now = self.now();
            for claim in self.tick(now) {
                tracker.spawn(self.clone().carry_out(claim, executor.clone(), cancel.clone()));
            }
            if self.dirty.load(std::sync::atomic::Ordering::Acquire) {
                let saver = self.clone();
                // silent-ok: a failed save is logged inside; the ledger covers a lost one.
                drop(tokio::task::spawn_blocking(move || saver.save_after_tick()).await);
            }
            let failed = self.claim_failed.swap(false, std::sync::atomic::Ordering::AcqRel);
            let wait = match self.next_due() {
                _ if failed => Duration::from_secs(5),
                Some(due) if due > now => {
                    let until = now.duration_until(due);
                    Duration::try_from(until).unwrap_or(Duration::ZERO).min(self.settings.poll)
                }
                Some(_) => Duration::from_millis(10),
                None => self.settings.poll,
            };
            tokio::select! {
                () = cancel.cancelled() => return,
                () = tokio::time::sleep(wait) => {}
                () = self.wake.notified() => {}
            }
        }
    }

    async fn carry_out(self: Arc<Self>, mut claim: Claim, executor: Arc<dyn Execute>, cancel: CancellationToken) {
        loop {
            let outcome = executor.run(&claim).await;
            if cancel.is_cancelled() {
                // The daemon is stopping and took the run's agent with it: its claim stays
                // open, and the next start marks it interrupted (and retries it if asked).
                tracing::warn!(task = %claim.task.id, run = %claim.run, "run cut short by shutdown; left for the next start");
                return;
            }
            let (retry, deliveries) = self.finish(&claim, &outcome);
            if let Some(retry) = retry {
                claim = retry;
                continue;
            }
            for delivery in deliveries {
                executor.deliver(&claim.task, delivery).await;
            }
            self.wake.notify_one();
            return;
        }
    }
}

/// Whether a run's result is told: non-empty, the task wants it, and not silent.
fn wants_result(task: &TaskRecord, result: &str) -> bool {
    !result.trim().is_empty()
        && task.notification.on_success
        && task.context_mode != ContextMode::Silent
        && task.notification.channel != "none"
}

/// A duration for people: `3d 2h`, `45m`.
fn friendly(duration: SignedDuration) -> String {
    let seconds = duration.as_secs().max(0);
    let (days, hours, minutes) = (seconds / 86_400, seconds % 86_400 / 3600, seconds % 3600 / 60);
    match (days, hours, minutes) {
        (0, 0, minutes) => format!("{}m", minutes.max(1)),
        (0, hours, minutes) => format!("{hours}h {minutes}m"),
        (days, hours, _) => format!("{days}d {hours}h"),
    }
}

#[cfg(test)]
mod executed_tests;
/// The scheduler's loop ([`Scheduler::run`]) with what it runs its tasks with, as a subsystem.
pub struct Running {
    pub scheduler: Arc<Scheduler>,
    pub executor: Arc<dyn Execute>,
    pub tracker: TaskTracker,
}

impl Subsystem for Running {
    fn name(&self) -> &'static str {
        "scheduler"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(self.scheduler.clone().run(self.executor.clone(), shutdown, self.tracker.clone()))
    }
}

#[cfg(test)]
mod tests;
