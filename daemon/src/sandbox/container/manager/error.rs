//! What a container's start, run or removal can fail with, as the callers tell it.

use std::path::PathBuf;
use std::time::Duration;

use super::RunStatus;
use crate::base::state::StateError;
use crate::sandbox::container::RuntimeError;
use crate::sandbox::sockets::ListenerError;

#[derive(Debug, thiserror::Error)]
pub enum ContainerError {
    /// The sentence callers get while no engine is usable.
    #[error("{0}")]
    Unavailable(String),
    /// `container.isolation` asks for a tier the engine does not have.
    #[error("{0}")]
    Isolation(String),
    #[error("the container did not start after {attempts} attempts: {message}")]
    StartFailed { attempts: u32, message: String },
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    #[error("cannot give the container its daemon socket")]
    Socket(#[source] ListenerError),
    /// A pooled container could not be bound to the session that claimed it.
    #[error("cannot hand a pooled container to its session: {0}")]
    Claim(String),
    #[error("cannot record the container inventory")]
    Inventory(#[source] StateError),
    #[error("cannot keep the container's logs in {}", path.display())]
    Logs {
        path: PathBuf,
        #[source]
        source: StateError,
    },
    #[error(
        "all {max} container slots (container.max_concurrent) stayed busy for {} s; try again when a session \
         finishes, or raise container.max_concurrent",
        waited.as_secs()
    )]
    Busy { max: u32, waited: Duration },
    /// gVisor could not make a sandbox: the cause found on the host (see `gvisor::cause`).
    #[error("{0}")]
    GvisorDown(String),
    #[error("a sandbox started but `true` in it exited with code {0}")]
    ProbeExit(i64),
    /// The why is said in the message and is no source: a chain printed would say it twice.
    #[error("a sandbox started but could not be waited for: {0}")]
    ProbeWait(RuntimeError),
    #[error("image {0} is missing: run `baaahtd images build`")]
    ImageMissing(String),
    #[error(
        "{} is missing: build it (cargo build --release -p baaaht-agent) or set container.binaries_dir",
        .0.display()
    )]
    AgentMissing(PathBuf),
    #[error("{} does not run in {image} ({status}: {stderr}); {}", binary.display(), agent_hint(stderr))]
    AgentFails { binary: PathBuf, image: String, status: RunStatus, stderr: String },
}

/// What to do about baaaht's binaries that do not run in the image, by what they wrote.
fn agent_hint(stderr: &str) -> &'static str {
    if stderr.contains("GLIBC") {
        "the binaries were built against a newer glibc than the image has: build baaaht on Debian 12 (bookworm), \
         or rebuild the image from a newer base (baaahtd images build)"
    } else {
        "check that the binaries were built for this machine"
    }
}

impl ContainerError {
    /// Whether the engine is away: none, unreachable or hung (not the container's fault).
    pub fn engine_away(&self) -> bool {
        matches!(
            self,
            ContainerError::Unavailable(_)
                | ContainerError::Runtime(RuntimeError::Unreachable { .. } | RuntimeError::Hung { .. })
        )
    }

    /// The error as a caller passes it on (an MCP server's or a skill layer's start, the LLM
    /// gateway's), its causes in the log (they name the data dir's files): a full disk as the
    /// daemon's sentence, anything else in its own words.
    pub fn told(&self) -> String {
        if crate::base::state::is_disk_full(self) {
            tracing::error!(error = %baaaht_proto::error_chain(self), "the data dir's disk is full");
            return crate::base::state::DISK_FULL_WORK.to_string();
        }
        tracing::warn!(error = %baaaht_proto::error_chain(self), "a container did not start");
        self.to_string()
    }
}
