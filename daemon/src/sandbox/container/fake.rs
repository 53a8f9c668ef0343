//! A container engine in memory, for the unit tests of what starts containers (the agent pool,
//! the tool runners): a container is created and runs at once, stops when told, and every
//! start is announced on a channel, so a test can play what the container would do (connect as
//! an agent and take turns) without Docker.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{mpsc, watch};

use super::{
    ContainerInfo, ContainerRuntime, ContainerSpec, Engine, EngineInfo, EngineKind, EngineStatus, ExecResult, ExitInfo,
    HealthStatus, Output, RuntimeError, Usage,
};

/// One container the fake engine holds.
#[derive(Debug, Clone)]
struct Held {
    spec: ContainerSpec,
    running: bool,
}

/// The fake engine: its containers by id, and who hears of each start.
#[derive(Debug)]
pub struct FakeRuntime {
    info: EngineInfo,
    containers: Mutex<BTreeMap<String, Held>>,
    next: Mutex<u64>,
    started: mpsc::UnboundedSender<ContainerSpec>,
    /// Set on every stop or removal, for the waits.
    changed: watch::Sender<u64>,
}

impl FakeRuntime {
    /// A fake engine, and the specs of the containers it starts, as they start.
    pub fn new() -> (Arc<FakeRuntime>, mpsc::UnboundedReceiver<ContainerSpec>) {
        let (started, starts) = mpsc::unbounded_channel();
        let info = EngineInfo {
            kind: EngineKind::Docker,
            socket: PathBuf::from("/fake/docker.sock"),
            version: "fake".into(),
            api_version: "1.41".into(),
            gvisor: Err(super::GvisorError::NoRunsc),
            gvisor_program: None,
            data_root: None,
        };
        let runtime = FakeRuntime {
            info,
            containers: Mutex::default(),
            next: Mutex::new(1),
            started,
            changed: watch::channel(0).0,
        };
        (Arc::new(runtime), starts)
    }

    /// The engine as the daemon sees it, ready with this runtime.
    pub fn engine(self: &Arc<Self>) -> Engine {
        Engine { status: EngineStatus::Ready(self.info.clone()), runtime: Some(self.clone()) }
    }

    /// The names of the containers that run now.
    pub fn running(&self) -> Vec<String> {
        let containers = self.containers.lock().unwrap_or_else(PoisonError::into_inner);
        containers.values().filter(|held| held.running).map(|held| held.spec.name.clone()).collect()
    }

    fn with<T>(&self, id: &str, change: impl FnOnce(&mut Held) -> T) -> Result<T, RuntimeError> {
        let mut containers = self.containers.lock().unwrap_or_else(PoisonError::into_inner);
        let held = containers.get_mut(id).ok_or_else(|| RuntimeError::NotFound(id.to_string()))?;
        Ok(change(held))
    }

    fn stopped(&self, id: &str) -> Result<(), RuntimeError> {
        self.with(id, |held| held.running = false)?;
        self.changed.send_modify(|count| *count += 1);
        Ok(())
    }
}

#[async_trait::async_trait]
impl ContainerRuntime for FakeRuntime {
    fn engine(&self) -> &EngineInfo {
        &self.info
    }

    async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let mut next = self.next.lock().unwrap_or_else(PoisonError::into_inner);
        let id = format!("fake{:060}", *next);
        *next += 1;
        let held = Held { spec: spec.clone(), running: false };
        self.containers.lock().unwrap_or_else(PoisonError::into_inner).insert(id.clone(), held);
        Ok(id)
    }

    async fn start(&self, id: &str) -> Result<(), RuntimeError> {
        let spec = self.with(id, |held| {
            held.running = true;
            held.spec.clone()
        })?;
        // silent-ok: a test that does not listen to starts does not play the containers.
        let _ = self.started.send(spec);
        Ok(())
    }

    async fn stop(&self, id: &str, _grace: Duration) -> Result<(), RuntimeError> {
        self.stopped(id)
    }

    async fn kill(&self, id: &str) -> Result<(), RuntimeError> {
        self.stopped(id)
    }

    async fn remove(&self, id: &str) -> Result<(), RuntimeError> {
        self.containers.lock().unwrap_or_else(PoisonError::into_inner).remove(id);
        self.changed.send_modify(|count| *count += 1);
        Ok(())
    }

    async fn wait(&self, id: &str) -> Result<ExitInfo, RuntimeError> {
        let mut changes = self.changed.subscribe();
        loop {
            let running =
                self.containers.lock().unwrap_or_else(PoisonError::into_inner).get(id).is_some_and(|held| held.running);
            if !running {
                return Ok(ExitInfo { code: 0, oom_killed: false });
            }
            if changes.changed().await.is_err() {
                return Ok(ExitInfo { code: 0, oom_killed: false });
            }
        }
    }

    async fn list_by_label(&self, labels: &[(&str, &str)]) -> Result<Vec<ContainerInfo>, RuntimeError> {
        let containers = self.containers.lock().unwrap_or_else(PoisonError::into_inner);
        let listed = containers
            .iter()
            .map(|(id, held)| {
                let labels = held.spec.labels.pairs().into_iter().collect();
                ContainerInfo {
                    id: id.clone(),
                    name: held.spec.name.clone(),
                    running: held.running,
                    ended: false,
                    labels,
                }
            })
            .filter(|info| labels.iter().all(|(key, value)| info.labels.get(*key).is_some_and(|v| v == value)))
            .collect();
        Ok(listed)
    }

    async fn inspect_health(&self, id: &str) -> Result<HealthStatus, RuntimeError> {
        let running = self.with(id, |held| held.running)?;
        Ok(HealthStatus { status: "none".into(), failing_streak: 0, last_output: String::new(), running })
    }

    async fn usage(&self, _id: &str) -> Result<Usage, RuntimeError> {
        Ok(Usage::default())
    }

    async fn logs(&self, _id: &str, _cap: usize) -> Result<Output, RuntimeError> {
        Ok(Output::default())
    }

    async fn exec(&self, _id: &str, _command: &[String]) -> Result<ExecResult, RuntimeError> {
        Ok(ExecResult { exit_code: 0, output: Output::default() })
    }

    async fn image_exists(&self, _image: &str) -> Result<bool, RuntimeError> {
        Ok(true)
    }

    async fn build_image(&self, _tag: &str, _dockerfile: &str) -> Result<(), RuntimeError> {
        Ok(())
    }
}
