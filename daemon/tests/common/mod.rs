//! Runs the daemon in-process on a temp data dir, for component tests.
#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::sync::Arc;

use baaaht_daemon::base::config::{self, ConfigPaths};
use baaaht_daemon::base::datadir::DataDir;
use baaaht_daemon::Daemon;
use tokio::sync::oneshot;

pub struct Running {
    pub shared: Arc<baaaht_daemon::server::Shared>,
    pub data_dir: DataDir,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), baaaht_daemon::DaemonError>>,
    lifetime: (tokio_util::sync::CancellationToken, tokio_util::task::TaskTracker),
    _temp: Option<tempfile::TempDir>,
}

/// The folder holding the workspace's binaries (target/{profile}), from the test's own path.
pub fn binaries_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test exe");
    let dir = exe.parent().and_then(|deps| deps.parent()).expect("target/{profile}").to_path_buf();
    assert!(
        dir.join("baaaht-agent").is_file(),
        "{} is missing: build the binaries first (cargo build --workspace --bins), as scripts/test does",
        dir.join("baaaht-agent").display()
    );
    dir
}

/// Starts the daemon on a fresh temp data dir with `env` overrides.
pub async fn start(env: &[(&str, &str)]) -> Running {
    let temp = tempfile::tempdir().expect("tempdir");
    let data_dir = DataDir::new(temp.path().join("d"));
    let mut running = start_on(data_dir, env).await;
    running._temp = Some(temp);
    running
}

/// Starts the daemon on `data_dir` (e.g. again after a simulated crash).
pub async fn start_on(data_dir: DataDir, env: &[(&str, &str)]) -> Running {
    if let Ok(filter) = std::env::var("BAAAHT_TEST_LOG") {
        // silent-ok: another test of this binary installed it first.
        let _ = tracing_subscriber::fmt().with_env_filter(filter).with_test_writer().try_init();
    }
    let paths =
        ConfigPaths { config_file: None, config_dir: data_dir.config_dir(), data_dir: data_dir.root().to_path_buf() };
    let mut vars: Vec<(String, String)> = vec![
        ("BAAAHT__METRICS__ENABLED".into(), "false".into()),
        ("BAAAHT__CONTAINER__BINARIES_DIR".into(), binaries_dir().display().to_string()),
        // Containers start when a test asks for them: what a test counts is what it made.
        ("BAAAHT__CONTAINER__POOLS".into(), config::NO_POOLS.into()),
    ];
    vars.extend(env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let loaded = config::load(&paths, vars).expect("config");
    let bound = baaaht_daemon::server::bind::bind(&data_dir, &loaded).expect("bind");
    let daemon = Daemon::new(loaded, data_dir.clone(), bound).expect("daemon");
    let shared = daemon.shared();
    let lifetime = daemon.lifetime();
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(daemon.run(async move {
        // silent-ok: a dropped sender also means stop.
        let _ = stopped.await;
    }));
    Running { shared, data_dir, stop: Some(stop), task, lifetime, _temp: None }
}

impl Running {
    /// A clean stop: SIGTERM's path.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            stop.send(()).expect("daemon still running");
        }
        self.task.await.expect("join").expect("clean exit");
    }

    /// A crash: the daemon stops at once, cleaning nothing up (its lock is released as the
    /// kernel would release it). Returns the temp dir so the data dir outlives the daemon.
    pub async fn crash(mut self) -> Option<tempfile::TempDir> {
        self.task.abort();
        // silent-ok: an aborted task ends with a cancellation error, which is the point.
        let _ = (&mut self.task).await;
        // A dead process has no background tasks either: stop them and let any engine call
        // they were in finish, so none of them writes state after the "restart".
        let (cancel, tracker) = &self.lifetime;
        cancel.cancel();
        tracker.close();
        tokio::time::timeout(std::time::Duration::from_secs(60), tracker.wait()).await.expect("tasks stop");
        self._temp.take()
    }
}

/// Fails loudly when no container engine answers: these tests need one.
pub async fn require_engine() {
    let engine = baaaht_daemon::sandbox::container::probe(baaaht_daemon::base::config::RuntimeChoice::Auto).await;
    assert!(
        engine.runtime.is_some(),
        "these tests need a container engine and the base image: {} (scripts/test installs and starts dockerd \
         and runs `baaahtd images build`)",
        engine.status.degraded_reason().unwrap_or_default()
    );
}
