//! What the suite needs of a channel: its service's fake and its real gateway, started against
//! a [`FakeDaemon`], and what a person does and sees in their own chat with the bot. Each
//! channel's adapter implements [`Channel`] once; [`crate::channel_compliance!`] then runs every
//! case of [`crate::cases`] against it.

use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

pub use baaaht_gateway_kit::daemon::File;

use crate::FakeDaemon;

/// A channel under the suite. The cases speak as one person, in their own chat with the bot.
pub trait Channel: Sized + Send + Sync + 'static {
    /// What the person wrote, as the service would deliver it again.
    type Written: Send + Sync;

    /// The most characters one message of the channel holds (`usize::MAX`: any length).
    const LIMIT: usize;

    /// The channel's name as the scheduler addresses its notices (`telegram`).
    const NAME: &'static str;

    /// The gateway's credentials, as the daemon's secrets store gives them.
    fn secrets() -> HashMap<String, String>;

    /// Starts the service's fake and the channel's real gateway on `daemon`'s socket, its
    /// health served on `health`; returns once the gateway listens to the service.
    fn start(daemon: &FakeDaemon, health: &Path) -> impl Future<Output = Result<Self, String>> + Send;

    /// Who the gateway says the person is (their identity in its namespace).
    fn identity(&self) -> String;

    /// The person writes `text`, with `files`, in their chat with the bot.
    fn write(&self, text: &str, files: &[File]) -> impl Future<Output = Self::Written> + Send;

    /// The service delivers `written` again, as it does when the gateway's acknowledgement was
    /// lost.
    fn redeliver(&self, written: &Self::Written) -> impl Future<Output = ()> + Send;

    /// The person's chat now: each message the bot wrote there as it shows now, in order.
    fn shown(&self) -> Vec<String>;

    /// The files the bot put in the person's chat, in order.
    fn files(&self) -> Vec<File>;

    /// The person answers the approval request their chat shows with `decision` (once,
    /// session, always or deny; install or decline for a skill's review), the way the channel
    /// lets them (a button, a reply).
    fn answer_approval(&self, decision: &str) -> impl Future<Output = Result<(), String>> + Send;

    /// The service goes away (every connection and call refused), or comes back.
    fn set_offline(&self, offline: bool);

    /// Waits until `check` holds of the channel, at most `wait`; whether it did.
    fn wait_for(
        &self,
        wait: Duration,
        check: impl Fn(&Self) -> bool + Send + Sync,
    ) -> impl Future<Output = bool> + Send;

    /// The gateway's log, for a case that failed.
    fn log(&self) -> String;
}
