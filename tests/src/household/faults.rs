//! The faults a household run injects on a schedule (`--faults`), and the small filesystem its
//! data dir lives on.

use std::path::PathBuf;
use std::process::Command;
use std::sync::PoisonError;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use super::{Household, ModelFault, Plan};
use crate::{docker, DaemonOptions, TestDaemon};

/// The loop-mounted filesystem the data dir lives on, unmounted and removed on drop.
pub struct SmallDisk {
    pub mount: PathBuf,
    _folder: tempfile::TempDir,
}

impl SmallDisk {
    pub fn new(mib: u64) -> Result<SmallDisk> {
        let folder = tempfile::Builder::new().prefix("baaaht-household-").tempdir()?;
        let image = folder.path().join("disk.img");
        let mount = folder.path().join("mnt");
        std::fs::create_dir(&mount)?;
        std::fs::File::create(&image)?.set_len(mib << 20)?;
        // No blocks reserved for root: the daemon runs as root and must see the disk full.
        run_program("mkfs.ext4", &["-q", "-F", "-m", "0", &image.to_string_lossy()])?;
        run_program("mount", &["-o", "loop", &image.to_string_lossy(), &mount.to_string_lossy()])?;
        Ok(SmallDisk { mount, _folder: folder })
    }

    /// Fills it (but for a few KiB) with one file; removing the file frees it.
    pub(super) fn fill(&self) -> Result<PathBuf> {
        let filler = self.mount.join("filler");
        // The daemon writes meanwhile: what df said may be gone by the fallocate; ask again.
        let mut last = None;
        for _ in 0..5 {
            let free = run_program("df", &["-B1", "--output=avail", &self.mount.to_string_lossy()])?;
            let free: u64 = free.lines().nth(1).context("df prints a value")?.trim().parse()?;
            let size = free.saturating_sub(64 << 10).to_string();
            match run_program("fallocate", &["-l", &size, &filler.to_string_lossy()]) {
                Ok(_) => return Ok(filler),
                Err(error) => last = Some(error),
            }
        }
        Err(last.context("fallocate was tried")?)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        // The workspaces a crashed daemon left, then the filesystem itself (lazily, if busy);
        // the folder with its image goes after.
        crate::unmount_below(&self.mount);
    }
}

pub(super) fn run_program(program: &str, args: &[&str]) -> Result<String> {
    let output = Command::new(program).args(args).output().with_context(|| format!("run {program}"))?;
    if !output.status.success() {
        bail!("{program} {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The faults of a run, as fractions of it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Fault {
    KillContainers,
    ModelFailing(u16),
    ModelStalling,
    CrashDaemon,
    DiskFull,
    /// The web gateway's upstream, its sign-in provider, away.
    ProviderAway,
    RestartDockerd,
}

pub(super) fn schedule(plan: &Plan) -> Vec<(f64, Fault)> {
    if !plan.faults {
        return vec![];
    }
    // Each begins at its fraction of the run or when the one before it ended, whichever is
    // later (a long outage in a short run pushes the rest back), so the run's end shows how it
    // came back.
    let mut faults = vec![
        (0.10, Fault::KillContainers),
        (0.18, Fault::ModelFailing(500)),
        (0.28, Fault::CrashDaemon),
        (0.38, Fault::ModelFailing(429)),
        (0.46, Fault::ModelStalling),
        (0.54, Fault::DiskFull),
    ];
    if plan.web_people > 0 {
        faults.push((0.64, Fault::ProviderAway));
    }
    if plan.restart_dockerd {
        faults.push((0.70, Fault::RestartDockerd));
    }
    faults
}

/// The daemons of a run: the one serving now, and the crashed ones (kept for their logs).
pub(super) struct Daemons {
    pub(super) now: TestDaemon,
    pub(super) crashed: Vec<TestDaemon>,
    pub(super) options: DaemonOptions,
}

impl Daemons {
    pub(super) fn logs(&self) -> String {
        let mut logs = String::new();
        for daemon in self.crashed.iter().chain([&self.now]) {
            logs.push_str(&format!("--- baaahtd pid {}\n{}\n", daemon.pid(), daemon.log_text()));
        }
        logs
    }
}

/// Injects `fault`; returns what it did.
pub(super) async fn inject(
    house: &Household,
    daemons: &mut Daemons,
    disk: &SmallDisk,
    site: Option<&super::web::Site>,
    fault: Fault,
) -> Result<String> {
    let plan = &house.plan;
    let window = (plan.run_for / 12).clamp(Duration::from_secs(5), Duration::from_secs(60));
    let model_fault = |fault: ModelFault, name: String| async move {
        house.set_fault(Some(name.clone()));
        *house.model.lock().unwrap_or_else(PoisonError::into_inner) = fault;
        tokio::time::sleep(window).await;
        *house.model.lock().unwrap_or_else(PoisonError::into_inner) = ModelFault::None;
        house.set_fault(None);
        Ok(format!("{name} for {} s", window.as_secs()))
    };
    match fault {
        Fault::KillContainers => {
            let mut killed = vec![];
            // Some are running at any moment of a household's day; wait up to 20 s for one.
            for _ in 0..100 {
                let running = docker(&["ps", "--format", "{{.Names}}"])?;
                let ours = daemons.now.recorded_containers();
                for prefix in ["baaaht-tool-", "baaaht-assistant-", "baaaht-coder-", "baaaht-mcp-", "baaaht-gateway-"] {
                    let found =
                        ours.iter().find(|name| name.starts_with(prefix) && running.lines().any(|l| l == *name));
                    if let Some(name) = found {
                        docker(&["kill", name])?;
                        killed.push(name.clone());
                    }
                }
                if !killed.is_empty() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok(format!("docker kill {}", if killed.is_empty() { "(none running)".into() } else { killed.join(" ") }))
        }
        Fault::ModelFailing(code) => {
            model_fault(ModelFault::Failing(code), format!("the model answering {code}")).await
        }
        Fault::ModelStalling => model_fault(ModelFault::Stalling, "the model stalling".into()).await,
        Fault::CrashDaemon => {
            house.set_fault(Some("baaahtd killed".into()));
            daemons.now.crash()?;
            // systemd's RestartSec.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let options = daemons.options.clone();
            let restarted = tokio::task::spawn_blocking(move || TestDaemon::start(options)).await??;
            let crashed = std::mem::replace(&mut daemons.now, restarted);
            let pid = crashed.pid();
            daemons.crashed.push(crashed);
            house.set_fault(None);
            Ok(format!("kill -9 baaahtd (pid {pid}), restarted in 2 s as pid {}", daemons.now.pid()))
        }
        Fault::DiskFull => {
            house.set_fault(Some("the data dir's filesystem full".into()));
            let filler = disk.fill()?;
            tokio::time::sleep(plan.outage).await;
            std::fs::remove_file(&filler)?;
            house.set_fault(None);
            Ok(format!("the data dir's filesystem full for {} s", plan.outage.as_secs()))
        }
        Fault::ProviderAway => {
            let Some(site) = site else { bail!("no web site to take the provider of") };
            house.set_fault(Some("the web's sign-in provider away".into()));
            site.provider_away(true)?;
            tokio::time::sleep(plan.outage).await;
            site.provider_away(false)?;
            house.set_fault(None);
            Ok(format!("the web's sign-in provider away (SIGSTOP) for {} s", plan.outage.as_secs()))
        }
        Fault::RestartDockerd => {
            house.set_fault(Some("dockerd restarted".into()));
            let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../scripts/lib.sh");
            let restart = format!(
                "source {script} && pid=$(pgrep -xo dockerd) && kill -TERM $pid && \
                 while kill -0 $pid 2>/dev/null; do sleep 0.2; done && ensure_container_engine"
            );
            let took = Instant::now();
            tokio::task::spawn_blocking(move || run_program("bash", &["-c", &restart])).await??;
            house.set_fault(None);
            Ok(format!("dockerd restarted ({:.1} s)", took.elapsed().as_secs_f64()))
        }
    }
}
