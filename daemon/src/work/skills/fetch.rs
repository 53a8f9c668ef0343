//! Fetching a skill's `https://` repository without the host's `git`: a one-shot tool
//! container with no network runs `baaaht-agent fetch-skill`, whose `git` reaches the outside
//! only through an egress socket this install serves for it (`CONNECT host:port`, every
//! target resolved once, checked by the web proxy's address filter and audited,
//! [`crate::net::egress::tunnel`]), so a source can lead neither the daemon nor the container
//! to loopback, private or metadata addresses, nor to anything but https. The container clones
//! into its size-capped `/tmp` and leaves only the skill's folder, checked against the caps,
//! and `commit` in a folder it writes; the daemon reads them after it is gone, by
//! descriptor and never through a link ([`crate::sandbox::shared_dirs::copy_out`]), into a
//! folder of its own. A failed fetch is told in the daemon's words (what the filter refused,
//! or that no repository answered), never with what the far end said.

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::base::auth::{Context, Role};
use crate::guard::audit::Audit;
use crate::net::egress::proxy::WebProxy;
use crate::net::egress::tunnel::{Listener, Reach, Tunnels};
use crate::sandbox::container::manager::{ContainerManager, RunRequest, RunStatus, BINARIES_MOUNT};
use crate::sandbox::container::MountSpec;
use crate::sandbox::shared_dirs::{self, Owner};

/// How the install's fetch reaches the network: the web proxy, the audit log, what its audit
/// records say of who asked, and what the fetch's container trusts (the daemon's roots).
pub struct Egress {
    pub web: Arc<WebProxy>,
    pub audit: Audit,
    /// Principal, context and correlation id of the one who asked.
    pub record: crate::guard::audit::Record,
    /// The certificate bundle tool containers trust (`net::egress::authority`); none: the
    /// image's own.
    pub trust: Option<std::path::PathBuf>,
}

/// What to fetch: the repository, a branch or tag (empty: the default), the skill's folder in
/// it (empty: its root), for whom, and the most files and bytes the skill may hold.
pub(super) struct Wanted<'a> {
    pub url: &'a str,
    pub git_ref: &'a str,
    pub path: &'a str,
    pub context: &'a Context,
    pub most: (usize, u64),
}

/// Why a fetch failed, in the daemon's words.
#[derive(Debug)]
pub(super) enum FetchError {
    /// Nothing could be fetched: what the filter refused, or that no repository answered.
    Refused(String),
    /// The folder named holds no skill.
    NoSkill,
    /// What was fetched may not be installed (a link, too much).
    Invalid(String),
    Io(&'static str, std::io::Error),
}

/// The contexts fetching a skill now: one fetch at a time each, so one person's (or one
/// model's) fetches never hold the container slots everyone else needs. A process-wide set,
/// as the container slots are.
static FETCHING: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<Context>>> =
    std::sync::LazyLock::new(Default::default);

/// A context's turn to fetch, given back when dropped.
struct Fetching(Context);

impl Fetching {
    fn take(context: &Context) -> Option<Fetching> {
        let mut fetching = FETCHING.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        fetching.insert(context.clone()).then(|| Fetching(context.clone()))
    }
}

impl Drop for Fetching {
    fn drop(&mut self) {
        FETCHING.lock().unwrap_or_else(std::sync::PoisonError::into_inner).remove(&self.0);
    }
}

/// How long the fetch's container may take: git's two minutes and its start.
const FETCH_TIMEOUT: Duration = Duration::from_secs(150);

/// The skill's folder in the staging folder, once fetched.
pub(super) const SKILL: &str = "skill";
/// Where the container finds the egress socket, and where it writes.
const WAY_IN_CONTAINER: &str = "/run/baaaht/way";
const OUT_IN_CONTAINER: &str = "/out";
const SOCKET: &str = "egress.sock";

/// Fetches `wanted.url` in a container and copies the skill's folder of it into
/// `staging/skill`; the commit.
pub(super) async fn fetch(
    containers: &ContainerManager,
    egress: &Egress,
    wanted: &Wanted<'_>,
    staging: &Path,
) -> Result<String, FetchError> {
    let url = wanted.url;
    let Some(_turn) = Fetching::take(wanted.context) else {
        return Err(FetchError::Refused(format!(
            "another skill is being fetched for {} now; ask again once it is done",
            wanted.context
        )));
    };
    let shared = |error: std::io::Error| FetchError::Io("cannot prepare the fetch's folders", error);
    let staging_fd = shared_dirs::open_trusted(staging).map_err(shared)?;
    shared_dirs::ensure_dir(&staging_fd, OsStr::new("out"), Owner::Containers).map_err(shared)?;
    shared_dirs::ensure_dir(&staging_fd, OsStr::new("way"), Owner::DaemonReadable).map_err(shared)?;
    let socket = staging.join("way").join(SOCKET);
    let listener = tokio::net::UnixListener::bind(&socket)
        .map_err(|error| FetchError::Io("cannot open the fetch's egress socket", error))?;
    shared_dirs::share_socket(&socket).map_err(shared)?;

    let mut tunnels = Tunnels::new(
        egress.record.principal.clone(),
        "the skill install".into(),
        Reach::AnyHost,
        egress.web.clone(),
        egress.audit.clone(),
    );
    tunnels.record = egress.record.clone().detail("purpose", "skill install");
    tunnels.max_open = 8;
    let tunnels = Arc::new(tunnels);
    let (cancel, tracker) = (tokio_util::sync::CancellationToken::new(), tokio_util::task::TaskTracker::new());
    tunnels.clone().serve(Listener::Unix(listener), cancel.clone(), &tracker);

    let agent = format!("{BINARIES_MOUNT}/baaaht-agent");
    let (max_files, max_bytes) = (wanted.most.0.to_string(), wanted.most.1.to_string());
    let command = [
        agent.as_str(),
        "fetch-skill",
        "--url",
        url,
        "--ref",
        wanted.git_ref,
        "--path",
        wanted.path,
        "--max-files",
        &max_files,
        "--max-bytes",
        &max_bytes,
        "--socket",
        &format!("{WAY_IN_CONTAINER}/{SOCKET}"),
        "--out",
        OUT_IN_CONTAINER,
    ];
    let mounts = [
        MountSpec { host: staging.join("out"), target: OUT_IN_CONTAINER.into(), read_only: false },
        MountSpec { host: staging.join("way"), target: WAY_IN_CONTAINER.into(), read_only: true },
    ]
    .into_iter()
    .chain(egress.trust.as_ref().map(|trust| MountSpec {
        host: trust.clone(),
        target: crate::net::egress::edge::TRUST_IN_CONTAINER.into(),
        read_only: true,
    }))
    .collect();
    let run = RunRequest {
        role: Role::Tool,
        session_id: "skill-install".into(),
        context: wanted.context.clone(),
        command: command.iter().map(ToString::to_string).collect(),
        mounts,
        env: vec![],
        timeout: FETCH_TIMEOUT,
        daemon_socket: false,
        working_dir: Some(OUT_IN_CONTAINER.into()),
        image: None,
        limits: None,
    };
    let outcome = containers.run(run).await;
    cancel.cancel();
    tracker.close();
    tracker.wait().await;
    let outcome =
        outcome.map_err(|error| FetchError::Refused(format!("cannot run the fetch's container: {}", error.told())))?;
    let what = format!("cannot fetch {url}");
    if !outcome.succeeded() {
        let told = outcome.stderr_tail(2);
        tracing::info!(%told, status = %outcome.status, "the skill fetch's own account of its failure (not shown to the caller)");
        return Err(FetchError::Refused(match (tunnels.first_problem(), &outcome.status) {
            (Some(problem), _) => format!("{what}: {problem}"),
            (None, RunStatus::TimedOut(after)) => format!("{what}: no answer within {} s", after.as_secs()),
            (None, RunStatus::Exited(7)) => {
                return Err(FetchError::Invalid(told.lines().last().map_or_else(
                    || "it may not be installed".to_string(),
                    |line| line.trim_start_matches("baaaht-agent fetch-skill: ").to_string(),
                )))
            }
            (None, RunStatus::Exited(8)) => return Err(FetchError::NoSkill),
            (None, RunStatus::Exited(3 | 4)) => format!(
                "{what}: no git repository could be read there (check the URL and the ref, and that the \
                 repository is public)"
            ),
            (None, status) => format!("{what}: the fetch's container failed ({status})"),
        }));
    }
    tracing::info!(container = %outcome.name, %url, "the skill was fetched in a container without network");
    // The container is gone: nothing changes under what is read now.
    let out = shared_dirs::open_dir(&staging_fd, "out")
        .map_err(shared)?
        .ok_or_else(|| FetchError::Refused(format!("{what}: the fetch's folder is gone")))?;
    let commit = shared_dirs::read_regular(&out, OsStr::new("commit"), 64)
        .ok()
        .flatten()
        .map(|bytes| String::from_utf8_lossy(&bytes).trim().to_string())
        .filter(|commit| !commit.is_empty() && commit.chars().all(|c| c.is_ascii_hexdigit()))
        .ok_or_else(|| FetchError::Refused(format!("{what}: the fetch named no commit")))?;
    let copied = shared_dirs::copy_out(&out, Path::new(SKILL), &staging.join(SKILL), wanted.most.0, wanted.most.1);
    // silent-ok: the staging folder goes as a whole when the install ends.
    let _ = shared_dirs::remove_tree(&staging_fd, OsStr::new("out"));
    match copied {
        Ok(Some(_)) => Ok(commit),
        Ok(None) => Err(FetchError::NoSkill),
        Err(shared_dirs::CopyOut::Refused(why)) => Err(FetchError::Invalid(why)),
        Err(shared_dirs::CopyOut::Io(error)) => Err(FetchError::Io("cannot copy the fetched skill", error)),
    }
}
