//! Test support shared by the end-to-end tests and `baaaht-bench`: run the real `baaahtd` on a
//! temporary data dir, know when it is ready (systemd's READY=1 on a notify socket we own, so
//! nothing sleeps to synchronise), talk to it, and stop it with a signal.
#![recursion_limit = "256"]

pub mod agentdojo;
pub mod browser_site;
pub mod channels;
pub mod fake_cloud;
pub mod fake_provider;
pub mod fake_slack;
pub mod fake_telegram;
pub mod gateway;
pub mod household;
pub mod mail;
pub mod matrix_person;
pub mod oidc;
pub mod push;
pub mod scenario;
pub mod synapse;
pub mod tls;
pub mod tmux;
pub mod voice;
pub mod web;

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

/// A child process, killed on drop, whose output goes to `log`.
pub struct Running {
    child: Child,
    pub log: PathBuf,
}

impl Running {
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Whether it has exited (e.g. it could not bind its port).
    pub fn has_exited(&mut self) -> bool {
        self.child.try_wait().is_ok_and(|status| status.is_some())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // silent-ok: it may have exited already.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `command` with its standard output and error in `log`.
pub fn spawn(mut command: Command, log: &Path) -> Result<Running> {
    let output = std::fs::File::create(log)?;
    let child = command
        .stdin(Stdio::null())
        .stdout(output.try_clone()?)
        .stderr(output)
        .spawn()
        .with_context(|| format!("start {command:?}"))?;
    Ok(Running { child, log: log.to_path_buf() })
}

/// A binary of this workspace, from the target folder the tests run in. `scripts/test`
/// builds every binary before the tests run.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary knows its path");
    // target/{profile}/deps/test-hash or target/{profile}/baaaht-bench
    let mut dir = exe.parent().expect("exe has a folder").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: build the workspace's binaries first (cargo build --workspace --bins)",
        path.display()
    );
    path
}

/// A running `baaahtd` on its own temporary data dir.
pub struct TestDaemon {
    pub child: Child,
    pub data_dir: PathBuf,
    pub log: PathBuf,
    /// Keeps the temporary folder alive.
    pub temp: tempfile::TempDir,
    notify: UnixDatagram,
    /// Killed with SIGKILL by [`TestDaemon::crash`]: its mounts are the next daemon's to adopt.
    crashed: bool,
}

/// An agent container of a [`TestDaemon`] kept alive by `baaaht doctor --linger`, whose socket
/// and token a test uses to call the daemon exactly as that agent would. Dropping it ends the
/// container.
pub struct LingeringAgent {
    pub name: String,
    pub socket: PathBuf,
    pub token: String,
    doctor: Child,
}

impl LingeringAgent {
    /// Connect options carrying this agent's token.
    pub fn options(&self) -> baaaht_proto::client::ConnectOptions {
        baaaht_proto::client::ConnectOptions { token: Some(self.token.clone()), ..Default::default() }
    }
}

impl Drop for LingeringAgent {
    fn drop(&mut self) {
        // silent-ok: the container may be gone with its daemon already.
        let _ = docker(&["kill", &self.name]);
        let _ = self.doctor.kill();
        let _ = self.doctor.wait();
    }
}

/// How to start a [`TestDaemon`].
#[derive(Debug, Default, Clone)]
pub struct DaemonOptions {
    /// Extra environment, e.g. `BAAAHT__…` overrides.
    pub env: Vec<(String, String)>,
    /// Files to write under the data dir before start, e.g. `config/config.yaml`.
    pub files: Vec<(String, String)>,
    pub args: Vec<String>,
    /// Reuse this data dir (e.g. to measure a restart) instead of a fresh one.
    pub data_dir: Option<PathBuf>,
}

impl TestDaemon {
    /// Starts the daemon and waits (up to 30 s) for READY=1.
    pub fn start(options: DaemonOptions) -> Result<TestDaemon> {
        TestDaemon::start_via(options, Duration::from_secs(30), |data_dir, notify, options| {
            daemon_command(data_dir, notify, options)
        })
    }

    /// As [`TestDaemon::start`], with the command `make` returns for the data dir and notify
    /// socket (e.g. `scripts/up`, which ends by running the daemon), waiting up to `limit`.
    pub fn start_via(
        options: DaemonOptions,
        limit: Duration,
        make: impl FnOnce(&Path, &Path, &DaemonOptions) -> Command,
    ) -> Result<TestDaemon> {
        let temp = tempfile::Builder::new().prefix("baaaht-").tempdir()?;
        let data_dir = options.data_dir.clone().unwrap_or_else(|| temp.path().join("d"));
        for (relative, text) in &options.files {
            let path = data_dir.join(relative);
            std::fs::create_dir_all(path.parent().context("file has a folder")?)?;
            std::fs::write(&path, text)?;
        }
        let notify_path = temp.path().join("notify");
        let notify = UnixDatagram::bind(&notify_path)?;
        let log = temp.path().join("daemon.log");
        let child = make(&data_dir, &notify_path, &options)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .context("spawn baaahtd")?;
        let mut daemon = TestDaemon { child, data_dir, log, temp, notify, crashed: false };
        daemon.wait_ready(limit)?;
        Ok(daemon)
    }

    /// Waits for the daemon's READY=1, failing early if it exits.
    pub fn wait_ready(&mut self, limit: Duration) -> Result<Duration> {
        let started = Instant::now();
        self.notify.set_read_timeout(Some(Duration::from_millis(100)))?;
        let mut buffer = [0u8; 512];
        loop {
            match self.notify.recv(&mut buffer) {
                Ok(n) if buffer[..n].split(|b| *b == b'\n').any(|line| line == b"READY=1") => {
                    return Ok(started.elapsed());
                }
                Ok(_) => {}
                Err(error) if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                }
                Err(error) => return Err(error.into()),
            }
            if let Some(status) = self.child.try_wait()? {
                bail!("baaahtd exited with {status} before it was ready:\n{}", self.log_text());
            }
            if started.elapsed() > limit {
                bail!("baaahtd was not ready within {limit:?}:\n{}", self.log_text());
            }
        }
    }

    /// Every message the daemon sends to its notify socket within `window`.
    pub fn notifications(&mut self, window: Duration) -> Result<Vec<String>> {
        self.notify.set_read_timeout(Some(Duration::from_millis(50)))?;
        let started = Instant::now();
        let mut messages = vec![];
        let mut buffer = [0u8; 4096];
        while started.elapsed() < window {
            match self.notify.recv(&mut buffer) {
                Ok(n) => messages.push(String::from_utf8_lossy(&buffer[..n]).into_owned()),
                Err(error) if matches!(error.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                }
                Err(error) => return Err(error.into()),
            }
        }
        Ok(messages)
    }

    /// As [`TestDaemon::start`], for a daemon that may hold `descriptors` file descriptors at
    /// most (soft and hard), as one under systemd's default soft limit of 1,024.
    pub fn start_with_descriptors(options: DaemonOptions, descriptors: u64) -> Result<TestDaemon> {
        TestDaemon::start_via(options, Duration::from_secs(30), |data_dir, notify, options| {
            let mut command = Command::new("prlimit");
            command.arg(format!("--nofile={descriptors}:{descriptors}")).arg("--").arg(bin("baaahtd"));
            daemon_environment(&mut command, data_dir, notify, options);
            command
        })
    }

    /// The file descriptors the daemon has open now.
    pub fn open_descriptors(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.pid())).map(Iterator::count).unwrap_or_default()
    }

    /// The audit records of `kind` (`baaaht audit --kind KIND --json`).
    pub fn audit(&self, kind: &str) -> Vec<serde_json::Value> {
        let output = Command::new(bin("baaaht"))
            .args(["audit", "--kind", kind, "--json"])
            .env("BAAAHT_SOCKET", self.socket())
            .output()
            .expect("baaaht audit runs");
        assert!(output.status.success(), "baaaht audit: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).lines().map(|line| serde_json::from_str(line).expect("JSON")).collect()
    }

    /// `baaaht ARGS` against this daemon, which must succeed: what it printed.
    pub fn cli(&self, args: &[&str]) -> String {
        let output =
            Command::new(bin("baaaht")).args(args).env("BAAAHT_SOCKET", self.socket()).output().expect("baaaht runs");
        assert!(output.status.success(), "baaaht {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    pub fn socket(&self) -> PathBuf {
        self.data_dir.join("data/ipc/orchestrator.sock")
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_else(|error| format!("(no log: {error})"))
    }

    /// The audit records of `kind`, as `baaaht audit --kind KIND --json` prints them.
    pub fn audit_records(&self, kind: &str) -> Vec<serde_json::Value> {
        let audit = Command::new(bin("baaaht"))
            .args(["audit", "--kind", kind, "--json"])
            .env("BAAAHT_SOCKET", self.socket())
            .output()
            .expect("baaaht audit");
        String::from_utf8_lossy(&audit.stdout).lines().map(|line| serde_json::from_str(line).expect("JSON")).collect()
    }

    /// Sends `signal` (e.g. "TERM") to the daemon.
    pub fn signal(&self, signal: &str) -> Result<()> {
        let status = Command::new("kill").arg(format!("-{signal}")).arg(self.pid().to_string()).status()?;
        if !status.success() {
            bail!("kill -{signal} {} failed: {status}", self.pid());
        }
        Ok(())
    }

    /// Waits for the daemon to exit, up to `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Result<ExitStatus> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status);
            }
            if started.elapsed() > limit {
                bail!("baaahtd did not exit within {limit:?}:\n{}", self.log_text());
            }
            // Polling a child's state is the only portable way to wait with a deadline.
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `kill -9`: the daemon dies as in a crash, leaving its containers and mounts for the
    /// next daemon on the same data dir to find (dropping it then unmounts nothing).
    pub fn crash(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        self.crashed = true;
        Ok(())
    }

    /// SIGTERM, then wait for exit.
    pub fn stop(mut self) -> Result<ExitStatus> {
        self.signal("TERM")?;
        self.wait_exit(Duration::from_secs(20))
    }

    /// Names of the containers this daemon's inventory records (`data/state/containers.json`).
    pub fn recorded_containers(&self) -> Vec<String> {
        self.inventory_names(|_| true)
    }

    /// Names of the inventory's entries `keep` keeps.
    pub fn inventory_names(&self, keep: impl Fn(&serde_json::Value) -> bool) -> Vec<String> {
        let path = self.data_dir.join("data/state/containers.json");
        let Ok(text) = std::fs::read_to_string(path) else { return vec![] };
        let Ok(inventory) = serde_json::from_str::<serde_json::Value>(&text) else { return vec![] };
        inventory["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|entry| keep(entry))
            .filter_map(|entry| entry["name"].as_str().map(str::to_string))
            .collect()
    }

    /// Names of the containers the inventory records as pooled (bound to no session yet) whose
    /// names start with `prefix`, e.g. `baaaht-assistant-`.
    pub fn pooled_containers(&self, prefix: &str) -> Vec<String> {
        self.inventory_names(|entry| {
            entry["sessionId"].as_str() == Some("")
                && entry["name"].as_str().is_some_and(|name| name.starts_with(prefix))
        })
    }

    /// Waits up to `limit` until this daemon's warm pools hold at least `wanted` ready
    /// containers of each role (`baaaht status --json`'s `pools`).
    pub fn wait_for_pools(&self, wanted: &[(&str, u64)], limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            let status: serde_json::Value = serde_json::from_str(&self.cli(&["status", "--json"]))?;
            if wanted.iter().all(|(role, count)| status["pools"][role].as_u64().unwrap_or(0) >= *count) {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the pools did not fill within {} s: {}", limit.as_secs(), status["pools"]);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The memory (MiB) this daemon's pooled containers (no session claimed them) use now, as
    /// the engine reports it.
    pub fn pooled_memory_mib(&self) -> Result<f64> {
        let mut total = 0.0;
        for name in self.pooled_containers("baaaht-") {
            let used = docker(&["stats", "--no-stream", "--format", "{{.MemUsage}}", &name])?;
            let used = used.split('/').next().unwrap_or("").trim().to_string();
            let (number, unit) = used.split_at(used.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(used.len()));
            let number: f64 = number.trim().parse().with_context(|| format!("docker stats said {used:?}"))?;
            total += match unit {
                "GiB" => number * 1024.0,
                "KiB" => number / 1024.0,
                "B" => number / (1024.0 * 1024.0),
                _ => number,
            };
        }
        Ok(total)
    }

    /// Waits up to `limit` for a running self-test container of this daemon (`baaaht doctor`)
    /// whose name starts with `prefix`, e.g. `baaaht-coder-`.
    pub fn wait_for_self_test(&self, prefix: &str, limit: Duration) -> Result<String> {
        self.wait_for_container(prefix, &[], None, limit)
    }

    /// Starts a lingering self-test container of `role` (in `session`, default `self-test`) and
    /// returns it once it runs; `taken` names containers of this role already in use.
    pub fn lingering_agent(&self, role: &str, session: Option<&str>, taken: &[String]) -> Result<LingeringAgent> {
        let mut command = Command::new(bin("baaaht"));
        command.args(["doctor", "--role", role, "--linger", "600"]);
        if let Some(session) = session {
            command.args(["--session", session]);
        }
        let doctor = command.env("BAAAHT_SOCKET", self.socket()).stdout(Stdio::null()).stderr(Stdio::null()).spawn()?;
        // Only the session's: an agent of a real session may run with the same role.
        let wanted = session.unwrap_or("self-test");
        let name = self.wait_for_container(&format!("baaaht-{role}-"), taken, Some(wanted), Duration::from_secs(60))?;
        let (socket, token) = self.container_credentials(&name)?;
        Ok(LingeringAgent { name, socket, token, doctor })
    }

    /// As [`TestDaemon::wait_for_self_test`], for a container not among `taken`.
    pub fn wait_for_another_self_test(&self, prefix: &str, taken: &[String], limit: Duration) -> Result<String> {
        self.wait_for_container(prefix, taken, None, limit)
    }

    /// A running container of this daemon named `prefix…`, not among `taken`, of `session`
    /// (any but the image check's `system` when `None`).
    fn wait_for_container(
        &self,
        prefix: &str,
        taken: &[String],
        session: Option<&str>,
        limit: Duration,
    ) -> Result<String> {
        let deadline = Instant::now() + limit;
        loop {
            // Self-test containers of any session, not the daemon's own image check (session system).
            let running = docker(&["ps", "--format", "{{.Names}}\t{{.Label \"baaaht.session\"}}"])?;
            let found = self.recorded_containers().into_iter().find(|name| {
                name.starts_with(prefix)
                    && !taken.contains(name)
                    && running.lines().any(|line| {
                        line.split_once('\t').is_some_and(|(n, s)| {
                            n == name && s != "system" && session.is_none_or(|wanted| s == wanted)
                        })
                    })
            });
            if let Some(name) = found {
                return Ok(name);
            }
            if Instant::now() > deadline {
                bail!("no running {prefix}… container within {limit:?}:\n{}", self.log_text());
            }
            // Polling the engine against a deadline: containers announce nothing.
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The socket and bearer token the daemon gave container `name`: what that container
    /// holds, so a test can call the daemon exactly as it would.
    pub fn container_credentials(&self, name: &str) -> Result<(PathBuf, String)> {
        let env = docker(&["inspect", "--format", "{{range .Config.Env}}{{println .}}{{end}}", name])?;
        let prefix = format!("{}=", baaaht_proto::CONTAINER_TOKEN_ENV);
        let token = env.lines().find_map(|line| line.strip_prefix(&prefix)).context("the container has a token")?;
        Ok((self.data_dir.join("data/run").join(name).join("daemon.sock"), token.to_string()))
    }

    /// The daemon's Prometheus metrics, scraped from the address `baaaht status` reports.
    pub fn metrics(&self) -> Result<String> {
        use std::io::{Read as _, Write as _};
        let output =
            Command::new(bin("baaaht")).args(["status", "--json"]).env("BAAAHT_SOCKET", self.socket()).output()?;
        let status: serde_json::Value = serde_json::from_slice(&output.stdout).context("status --json is JSON")?;
        let address = status["metrics_address"].as_str().context("metrics are served")?;
        let mut stream = std::net::TcpStream::connect(address)?;
        stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")?;
        let mut text = String::new();
        stream.read_to_string(&mut text)?;
        Ok(text)
    }

    /// The daemon's resident memory in KiB, from /proc.
    pub fn rss_kib(&self) -> Result<u64> {
        rss_kib(self.pid())
    }
}

impl Drop for TestDaemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            // The test is over (or failed): stop the daemon the way systemd would, so it removes
            // its containers; one that does not stop in time is killed so it cannot leak.
            // silent-ok: each step is best effort; the kill below is the backstop.
            let _ = self.signal("TERM");
            let _ = self.wait_exit(Duration::from_secs(15));
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        // A daemon that was killed leaves its workspace filesystems mounted; a crashed one's are
        // for the daemon that took its place.
        if !self.crashed {
            unmount_below(&self.data_dir);
        }
    }
}

/// The file `relative` in a session's workspace, as its tool containers see it at
/// `/workspace/{relative}`: read from the folder while the workspace is mounted or plain,
/// else from its ext4 image (`debugfs`, without mounting it). `None` when it is not there.
pub fn workspace_file(data_dir: &Path, session: &str, relative: &str) -> Option<Vec<u8>> {
    let folder = data_dir.join("sessions").join(session);
    if let Ok(bytes) = std::fs::read(folder.join("data").join(relative)) {
        return Some(bytes);
    }
    let image = folder.join("workspace.img");
    if !image.exists() {
        return None;
    }
    let output = Command::new("debugfs").arg("-R").arg(format!("cat /{relative}")).arg(&image).output().ok()?;
    let missing = String::from_utf8_lossy(&output.stderr).contains("not found");
    (output.status.success() && !missing).then_some(output.stdout)
}

/// Unmounts (lazily) every mount below `folder`, deepest first: the workspace filesystems a
/// killed daemon left, so that its temporary folder can go.
pub fn unmount_below(folder: &Path) {
    let Ok(mounts) = std::fs::read_to_string("/proc/self/mountinfo") else { return };
    let folder = std::fs::canonicalize(folder).unwrap_or_else(|_| folder.to_path_buf()); // silent-ok: compared as given
    let mut below: Vec<PathBuf> = mounts
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|point| PathBuf::from(point.replace("\\040", " ")))
        .filter(|point| point.starts_with(&folder))
        .collect();
    below.sort_by_key(|point| std::cmp::Reverse(point.components().count()));
    for point in below {
        // silent-ok: best effort, for the temporary folder's sake.
        let _ = Command::new("umount").arg("-l").arg(&point).status();
    }
}

/// The command that starts `baaahtd` on `data_dir`, notifying `notify`.
pub fn daemon_command(data_dir: &Path, notify: &Path, options: &DaemonOptions) -> Command {
    let mut command = Command::new(bin("baaahtd"));
    daemon_environment(&mut command, data_dir, notify, options);
    command
}

/// Gives `command` the arguments and the environment (and only those) a test daemon runs with.
pub fn daemon_environment(command: &mut Command, data_dir: &Path, notify: &Path, options: &DaemonOptions) {
    command
        .args(&options.args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", data_dir.parent().unwrap_or(data_dir))
        .env("BAAAHT_DATA", data_dir)
        .env("NOTIFY_SOCKET", notify)
        // Parallel tests must not fight over the default metrics port.
        .env("BAAAHT__METRICS__LISTEN", "127.0.0.1:0")
        // The host's disk is every test daemon's: how full it is must not tell each one's
        // admins or turn work away (the disk's own test gives the marks back, on a disk of its own).
        .env("BAAAHT__ORCHESTRATOR__DISK__WARN_PERCENT", "99")
        .env("BAAAHT__ORCHESTRATOR__DISK__CRITICAL_PERCENT", "100")
        // Containers start when a test asks for them, not ahead (the pools' own tests and the
        // benchmarks turn the pools on): what a test counts is what it made.
        .env("BAAAHT__CONTAINER__POOLS", NO_POOLS)
        .envs(options.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
}

pub use baaaht_daemon::base::config::NO_POOLS;

/// The runtime the tests and benchmarks drive their async clients and servers with: two
/// workers, so a server keeps answering while the test thread blocks.
pub fn runtime() -> tokio::runtime::Runtime {
    // As every binary does: this process's TLS is ring's.
    baaaht_proto::lifecycle::use_ring_for_tls();
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime")
}

/// The address of the engine's default bridge on this machine, where containers with egress
/// reach the host.
pub fn bridge_address() -> Result<std::net::IpAddr> {
    network_host_address("bridge")
}

/// The host's IPv4 address on the engine's network `network`: the gateway its IPAM config
/// records, else the address of its bridge interface, else the first host of its subnet. An
/// engine may leave the gateway out (Debian's dockerd does for the default bridge), so nothing
/// here depends on that field alone.
pub fn network_host_address(network: &str) -> Result<std::net::IpAddr> {
    let text = docker(&["network", "inspect", network])?;
    let found: serde_json::Value = serde_json::from_str(&text).context("docker network inspect prints JSON")?;
    let info = found.get(0).with_context(|| format!("the engine has no network {network}"))?;
    let configs = info["IPAM"]["Config"].as_array().cloned().unwrap_or_default();
    let v4 = |text: &str| text.split('/').next().and_then(|ip| ip.parse::<std::net::Ipv4Addr>().ok());
    if let Some(gateway) = configs.iter().filter_map(|config| config["Gateway"].as_str()).find_map(v4) {
        return Ok(gateway.into());
    }
    let interface = match info["Options"]["com.docker.network.bridge.name"].as_str() {
        Some(name) => name.to_string(),
        None => format!("br-{}", info["Id"].as_str().unwrap_or_default().chars().take(12).collect::<String>()),
    };
    let output = Command::new("ip").args(["-4", "-o", "addr", "show", "dev", &interface]).output();
    let listed = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    if let Some(address) = listed.split_whitespace().skip_while(|word| *word != "inet").nth(1).and_then(v4) {
        return Ok(address.into());
    }
    let subnet = configs
        .iter()
        .filter_map(|config| config["Subnet"].as_str())
        .find(|subnet| v4(subnet).is_some())
        .with_context(|| format!("network {network} has no IPv4 gateway, interface address or subnet"))?;
    let base = v4(subnet).context("an IPv4 subnet")?;
    Ok(std::net::Ipv4Addr::from(u32::from(base) + 1).into())
}

/// Runs the docker CLI (scripts/test installs the engine) and returns its stdout.
pub fn docker(args: &[&str]) -> Result<String> {
    let output = Command::new("docker").args(args).output().context("run the docker CLI")?;
    if !output.status.success() {
        bail!("docker {} failed: {}", args.join(" "), String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// Resident memory of a process in KiB.
pub fn rss_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|line| line.starts_with("VmRSS:")).context("no VmRSS line")?;
    let kib = line.split_whitespace().nth(1).context("VmRSS has a value")?.parse()?;
    Ok(kib)
}

/// Median of `values` (sorted in place); 0 for none.
pub fn median(values: &mut [f64]) -> f64 {
    percentile(values, 50.0)
}

/// The `p`th percentile (nearest rank) of `values`, sorted in place.
pub fn percentile(values: &mut [f64], p: f64) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * values.len() as f64).ceil().max(1.0) as usize;
    values[rank.min(values.len()) - 1]
}

/// The processes of `binary` (a gateway's) that the daemon of `data_dir` runs.
pub fn gateway_pids(data_dir: &Path, binary: &str) -> Vec<u32> {
    let needle = data_dir.join("data/gateways").display().to_string();
    let Ok(entries) = std::fs::read_dir("/proc") else { return vec![] };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            (cmdline.contains(binary) && cmdline.contains(&needle)).then_some(pid)
        })
        .collect()
}

/// Three host folders of the containers' uid and the `mount-allowlist.json` that lets them in:
/// `site`, the self-test user's project mounted read-write at `/project/site` (it holds
/// `index.html`); `reference`, everyone's, read-only at `/project/reference`; and `shared`, a
/// project shared with everyone at `/project/shared` (read-write for administrators only).
/// The folders go when this is dropped.
pub struct Projects {
    _dir: tempfile::TempDir,
    pub site: PathBuf,
    pub reference: PathBuf,
    pub shared: PathBuf,
    /// The allowlist's JSON.
    pub allowlist: String,
}

impl Projects {
    pub fn new() -> Result<Projects> {
        let dir = tempfile::tempdir()?;
        let (site, reference, shared) =
            (dir.path().join("site"), dir.path().join("reference"), dir.path().join("shared"));
        for folder in [&site, &reference, &shared] {
            std::fs::create_dir(folder)?;
            std::os::unix::fs::chown(folder, Some(1000), Some(1000)).context("chown to the containers' uid")?;
        }
        std::fs::write(site.join("index.html"), "<h1>site</h1>\n")?;
        let allowlist = serde_json::json!({"allowedMounts": [
            {"hostPath": site, "containerPath": "/project/site", "options": "rw", "type": "project", "owner": "user:baaaht-self-test"},
            {"hostPath": reference, "containerPath": "/project/reference", "options": "ro", "type": "reference", "owner": "everyone"},
            {"hostPath": shared, "containerPath": "/project/shared", "options": "rw", "type": "project", "owner": "everyone"},
        ]})
        .to_string();
        Ok(Projects { _dir: dir, site, reference, shared, allowlist })
    }
}

/// Runs `git args` in `dir` as a test's author; panics when it fails.
pub fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.org", "-c", "init.defaultBranch=main"])
        .args(args)
        .current_dir(dir)
        .status()
        .expect("git runs");
    assert!(status.success(), "git {args:?}");
}

/// A git repository holding `files` (path, text), committed.
pub fn repository(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for (path, text) in files {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("folders");
        std::fs::write(path, text).expect("write");
    }
    git(dir.path(), &["init", "-q"]);
    git(dir.path(), &["add", "-A"]);
    git(dir.path(), &["commit", "-qm", "skill"]);
    dir
}

/// A git server over TLS (`tests/git-https-server.py`: Python's http.server in front of the real
/// `git http-backend`) serving the bare repositories under `root` with the certificate and key
/// `tls`; `env` may set BIND (its address, else loopback) and AUTH (the Basic credentials it
/// demands). The running server and its port.
pub fn git_server(
    root: &Path,
    tls: (&Path, &Path),
    redirect: Option<&str>,
    log: &Path,
    env: &[(&str, &str)],
) -> (Running, u16) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("git-https-server.py");
    let portfile = root.join("port");
    let mut command = Command::new("python3");
    command.arg(script).arg(root).arg(tls.0).arg(tls.1).arg(&portfile).args(redirect);
    command.envs(env.iter().copied());
    let server = spawn(command, log).expect("git server starts");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(port) = std::fs::read_to_string(&portfile).map(|text| text.trim().parse().expect("a port")) {
            return (server, port);
        }
        assert!(std::time::Instant::now() < deadline, "the git server did not start: {}", server.log_text());
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Skill repositories served over TLS by [`git_server`] from `dir`: each `(name, files)` as
/// `https://127.0.0.1:{port}/{name}.git`. The server, its port and the certificate it uses (for
/// a daemon's `SSL_CERT_FILE`: a skill fetch's container trusts what the daemon trusts).
pub fn skill_server(dir: &Path, repositories: &[(&str, &[(&str, &str)])]) -> (Running, u16, PathBuf) {
    let (cert, key) = web::self_signed(dir).expect("certificate");
    let root = dir.join("repos");
    std::fs::create_dir_all(&root).expect("root");
    for (name, files) in repositories {
        let repository = repository(files);
        let bare = root.join(format!("{name}.git")).display().to_string();
        git(dir, &["clone", "-q", "--bare", &repository.path().display().to_string(), &bare]);
    }
    let (server, port) = git_server(&root, (&cert, &key), None, &dir.join("git-server.log"), &[]);
    (server, port, cert)
}

/// A plain HTTP server on the host's end of the container bridge ("the internet" for these
/// tests): it answers each request with its request line, so a test sees what arrived, and
/// closes the connection.
pub fn bridge_server() -> (std::net::IpAddr, u16) {
    request_line_server(false)
}

/// [`bridge_server`] keeping its connections open: each request answered, the next one read on.
pub fn keep_alive_bridge_server() -> (std::net::IpAddr, u16) {
    request_line_server(true)
}

fn request_line_server(keep_alive: bool) -> (std::net::IpAddr, u16) {
    use std::io::{BufRead as _, Write as _};
    let bridge = bridge_address().expect("bridge address");
    let listener = std::net::TcpListener::bind((bridge, 0)).expect("listen on the bridge");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = std::io::BufReader::new(stream);
                loop {
                    let mut first = String::new();
                    if reader.read_line(&mut first).map_or(true, |n| n == 0) {
                        return;
                    }
                    let mut line = String::new();
                    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                        line.clear();
                    }
                    let body = format!("arrived: {}", first.trim());
                    let connection = if keep_alive { "keep-alive" } else { "close" };
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: {connection}\r\n\r\n{body}",
                        body.len()
                    );
                    // A client that went away gets nothing.
                    if reader.get_mut().write_all(answer.as_bytes()).is_err() || !keep_alive {
                        return;
                    }
                }
            });
        }
    });
    (bridge, port)
}

/// Runs `python3 urllib` GET http://`target`/x in `coder`'s container, in the background.
pub fn fetch_in_background(coder: &LingeringAgent, target: String) -> std::thread::JoinHandle<String> {
    let (socket, options) = (coder.socket.clone(), coder.options());
    std::thread::spawn(move || {
        runtime().block_on(async move {
            let mut agent = baaaht_proto::client::connect(&socket, options).await.expect("connect");
            let command = format!(
                "python3 -c \"import urllib.request, urllib.error\ntry: print(urllib.request.urlopen('http://{target}/x', timeout=30).read().decode())\nexcept urllib.error.HTTPError as e: print(e.code, e.read().decode())\""
            );
            let request = baaaht_proto::v1::ToolRequest {
                tool: "exec".into(),
                params_json: serde_json::json!({ "command": command }).to_string(),
                ..baaaht_proto::v1::ToolRequest::default()
            };
            agent.agents.request_tool_execution(request).await.expect("exec").into_inner().content
        })
    })
}

/// A small, fixed pseudo-random sequence (xorshift) for corpora and simulated people: the same
/// numbers from the same seed, and no dependency for it.
pub struct Dice(pub u64);

impl Dice {
    pub fn roll(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.roll() % n as u64) as usize
    }

    /// A number in `0.0..1.0`.
    pub fn unit(&mut self) -> f64 {
        (self.roll() % 1_000_000) as f64 / 1_000_000.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles() {
        let mut values = vec![5.0, 1.0, 3.0, 2.0, 4.0];
        assert_eq!(median(&mut values), 3.0);
        assert_eq!(percentile(&mut values, 99.0), 5.0);
        assert_eq!(percentile(&mut values, 0.0), 1.0);
        assert_eq!(median(&mut []), 0.0);
    }
}
