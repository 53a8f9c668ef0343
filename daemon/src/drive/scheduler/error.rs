//! What goes wrong with a task: a request's field that does not read (each message names the
//! field and says what would do), a task that is not there or cannot change, the file.

use super::schedule::ScheduleError;
use super::{MOST_PROMPT, MOST_TASKS_PER_CONTEXT};
use crate::base::state::StateError;

#[derive(Debug, thiserror::Error)]
pub enum SchedulerError {
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Schedule(#[from] ScheduleError),
    #[error("there is no task {0}; `baaaht tasks list` shows the tasks")]
    NotFound(String),
    #[error("{0} already has {MOST_TASKS_PER_CONTEXT} tasks; cancel some first (`baaaht tasks list`)")]
    TooMany(String),
    #[error("task {id}: it is {status} and will not run again; nothing to pause")]
    Over { id: String, status: String },
    #[error("task {id}: it is {status} and will not run again; schedule a new task instead of changing it")]
    Finished { id: String, status: String },
    #[error("task {id}: it ran already and has no slot to come")]
    RanAlready { id: String },
    #[error("task {id}: its schedule does not read; schedule it again")]
    Unreadable { id: String },
    #[error("task {id}: it has no slot to come")]
    NoSlot { id: String },
    #[error(transparent)]
    State(#[from] StateError),
    #[error("type: heartbeats come from HEARTBEAT.md; edit it instead")]
    HeartbeatType,
    #[error("type: system tasks are the daemon's own")]
    SystemType,
    #[error("type: `{0}` is not a task type; use scheduled")]
    Type(String),
    #[error("prompt: say what the agent should do when the task runs")]
    NoPrompt,
    #[error("prompt: {0} bytes is too long; keep it under {MOST_PROMPT}")]
    LongPrompt(usize),
    #[error("schedule: give one of cron (\"0 9 * * 1\"), interval_seconds, once (RFC 3339 with offset) or cadence")]
    NoSchedule,
    #[error(
        "schedule.once: `{text}` is not an RFC 3339 time with its UTC offset (e.g. 2026-03-01T08:00:00+01:00 or \
         2026-03-01T07:00:00Z)"
    )]
    Once {
        text: String,
        #[source]
        source: jiff::Error,
    },
    #[error("context_mode: `{0}` is not session, isolated or silent")]
    ContextMode(String),
    #[error(
        "notification.channel: `{0}` is not a channel; use tui, web, slack, slack/dm, slack/CHANNEL, telegram, matrix, \
         email or none (empty: the user's preferred channel)"
    )]
    Channel(String),
    #[error("concurrency: `{0}` is not forbid or allow")]
    Concurrency(String),
    #[error("agent: `{0}` cannot run tasks; use worker, researcher, coder or heartbeat")]
    Agent(String),
    /// A task a container asked for whose request id is another context's task.
    #[error("id: task {0} belongs to another context")]
    OtherContext(String),
    /// A task that could do more than the agent that asked for it.
    #[error(transparent)]
    Policy(#[from] crate::sandbox::policy::PolicyError),
}
