//! The tool runner is its container's init (PID 1 of the PID namespace): every process whose
//! parent exits becomes its child, and a child nobody waits for stays a zombie that counts
//! towards the container's `pids.max`. This module owns waiting for children in the runner:
//!
//! - [`reap`] waits for every exited child (`waitpid(-1, WNOHANG)` until none is left); the
//!   runner calls it on each SIGCHLD ([`active`] turns that on), after each call and while a
//!   tool waits;
//! - a tool that waits for its own child ([`spawn`], e.g. `exec`'s shell) gets that child's
//!   status from here, because a reap of "any child" would otherwise take it away;
//! - [`sweep`] kills every other process of the namespace after a call, and reaps them.
//!
//! Outside a container (tests, or a runner that is not PID 1) nothing reaps but the tools
//! themselves, each its own child, as a normal program does.

use std::collections::HashMap;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, WaitOptions};

/// Whether this process reaps every child (it is a container's init).
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Children a tool waits for → their raw wait status once reaped.
static WATCHED: Mutex<Option<HashMap<i32, Option<i32>>>> = Mutex::new(None);
static REAPED: Condvar = Condvar::new();

/// How long a sweep keeps killing before it gives up on a process that keeps forking.
const SWEEP_LIMIT: Duration = Duration::from_secs(5);

fn watched() -> MutexGuard<'static, Option<HashMap<i32, Option<i32>>>> {
    WATCHED.lock().unwrap_or_else(PoisonError::into_inner)
}

/// From now on this process reaps every child: call it once, as PID 1, before anything is
/// spawned, and then call [`reap`] on every SIGCHLD.
pub fn activate() {
    ACTIVE.store(true, Ordering::SeqCst);
}

/// Set for the init's second image: its token is on its standard input.
const TOKEN_ON_STDIN_ENV: &str = "BAAAHT_TOKEN_ON_STDIN";

/// What a container's init (the tool runner, an MCP server's relay) does first: nothing the
/// commands it runs start may read it through /proc (environ, mem, fd); the container's token.
///
/// The token comes in the environment, and /proc/1/environ keeps the environment a process
/// started with. Non-dumpable closes it under runc, but gVisor's kernel (2022) shows it to
/// every process of the uid. So, as PID 1, the init starts itself again (execve: the same
/// PID, the same arguments) without the token in its environment and with the token on its
/// standard input (a pipe), which it reads to the end before anything else runs.
pub fn init_token(what: &str) -> Result<String, String> {
    use std::os::unix::process::CommandExt as _;
    rustix::process::set_dumpable_behavior(rustix::process::DumpableBehavior::NotDumpable)
        .map_err(|errno| format!("cannot make the {what} non-dumpable: {errno}"))?;
    if std::env::var_os(TOKEN_ON_STDIN_ENV).is_some() {
        let mut token = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut token)
            .map_err(|error| format!("cannot read the {what}'s token from its standard input: {error}"))?;
        return Ok(token);
    }
    let token = std::env::var(baaaht_proto::CONTAINER_TOKEN_ENV)
        .map_err(|_unset| format!("{} is not set", baaaht_proto::CONTAINER_TOKEN_ENV))?;
    if std::process::id() != 1 {
        return Ok(token);
    }
    let handing = |error: String| format!("cannot hand the {what} its token: {error}");
    let (reader, writer) = rustix::pipe::pipe().map_err(|errno| handing(errno.to_string()))?;
    // The token is far smaller than a pipe's buffer: the write does not wait for a reader.
    std::io::Write::write_all(&mut std::fs::File::from(writer), token.as_bytes())
        .map_err(|error| handing(error.to_string()))?;
    let mut args = std::env::args_os();
    let error = std::process::Command::new("/proc/self/exe")
        .arg0(args.next().unwrap_or_default())
        .args(args)
        .env_remove(baaaht_proto::CONTAINER_TOKEN_ENV)
        .env(TOKEN_ON_STDIN_ENV, "1")
        .stdin(std::process::Stdio::from(reader))
        .exec();
    Err(format!("cannot start the {what} again without its token in the environment: {error}"))
}

/// As PID 1 (the container's init), every orphan of the container is ours to reap (or
/// pids.max fills up): turns reaping on and reaps on each SIGCHLD. Runs inside the runtime.
pub fn reap_as_init() -> Result<(), String> {
    if std::process::id() != 1 {
        return Ok(());
    }
    let mut exited = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())
        .map_err(|error| format!("cannot watch SIGCHLD: {error}"))?;
    activate();
    tokio::spawn(async move {
        while exited.recv().await.is_some() {
            reap();
        }
    });
    Ok(())
}

/// Whether [`activate`] was called.
pub fn active() -> bool {
    ACTIVE.load(Ordering::SeqCst)
}

/// Waits for every child that has exited, without blocking; the status of one a tool waits for
/// is kept for it. Returns how many were reaped. Does nothing unless [`active`].
pub fn reap() -> usize {
    if !active() {
        return 0;
    }
    // Held across the waits: a tool registers its child under the same lock right after
    // spawning it, so no status can be taken before its owner is known.
    let mut guard = watched();
    let mut reaped = 0;
    while let Ok(Some((pid, status))) = rustix::process::wait(WaitOptions::NOHANG) {
        reaped += 1;
        if let Some(slot) = guard.as_mut().and_then(|map| map.get_mut(&pid.as_raw_nonzero().get())) {
            *slot = Some(status.as_raw());
        }
    }
    drop(guard);
    if reaped > 0 {
        REAPED.notify_all();
    }
    reaped
}

/// A child a tool started with [`spawn`] and waits for with [`Spawned::wait_timeout`].
#[derive(Debug)]
pub struct Spawned {
    pub child: Child,
    watched: bool,
}

/// Starts `command`; when this process reaps every child, its status is kept for the caller.
pub fn spawn(command: &mut Command) -> std::io::Result<Spawned> {
    if !active() {
        return command.spawn().map(|child| Spawned { child, watched: false });
    }
    let mut guard = watched();
    let child = command.spawn()?;
    guard.get_or_insert_with(HashMap::new).insert(child.id() as i32, None);
    Ok(Spawned { child, watched: true })
}

impl Spawned {
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Waits up to `limit` for the child to exit; `None` if it still runs.
    pub fn wait_timeout(&mut self, limit: Duration) -> std::io::Result<Option<ExitStatus>> {
        let deadline = Instant::now() + limit;
        if !self.watched {
            loop {
                if let Some(status) = self.child.try_wait()? {
                    return Ok(Some(status));
                }
                if Instant::now() >= deadline {
                    return Ok(None);
                }
                // std has no wait with a timeout; a short poll is what it leaves.
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        let pid = self.child.id() as i32;
        loop {
            reap();
            let guard = watched();
            if let Some(raw) = guard.as_ref().and_then(|map| map.get(&pid).copied().flatten()) {
                return Ok(Some(ExitStatus::from_raw(raw)));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            // SIGCHLD makes the runner reap and notify; the short wait also covers a signal
            // that arrived between the reap above and this wait.
            let wait = (deadline - now).min(Duration::from_millis(20));
            drop(REAPED.wait_timeout(guard, wait).unwrap_or_else(PoisonError::into_inner));
        }
    }
}

impl Drop for Spawned {
    fn drop(&mut self) {
        if self.watched {
            if let Some(map) = watched().as_mut() {
                map.remove(&(self.child.id() as i32));
            }
        }
    }
}

/// Kills every process of this PID namespace but this one, and reaps them; returns how many
/// were killed. Keeps going while anything is left (a fork bomb forks while it is killed), for
/// at most [`SWEEP_LIMIT`].
pub fn sweep() -> usize {
    let me = std::process::id();
    let started = Instant::now();
    let mut killed = 0;
    loop {
        let mut found = 0;
        if let Ok(entries) = std::fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Some(pid) = entry.file_name().to_str().and_then(|name| name.parse::<u32>().ok()) else { continue };
                if pid == me || is_zombie(pid) {
                    continue;
                }
                found += 1;
                if let Some(pid) = Pid::from_raw(pid as i32) {
                    // silent-ok: it may have exited since it was listed.
                    let _ = rustix::process::kill_process(pid, Signal::KILL);
                }
            }
        }
        reap();
        if found == 0 || started.elapsed() > SWEEP_LIMIT {
            break;
        }
        killed += found;
        // Give the kernel a moment to deliver the kills before the next pass.
        std::thread::sleep(Duration::from_millis(1));
    }
    reap();
    killed
}

/// A zombie only waits to be reaped (one that is gone counts as one).
fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(')').map(|(_, rest)| rest.trim_start().starts_with('Z')))
        .unwrap_or(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spawned_child_is_waited_for_with_a_deadline() {
        let mut quick = spawn(Command::new("/bin/sh").args(["-c", "exit 3"])).expect("spawn");
        let status = quick.wait_timeout(Duration::from_secs(10)).expect("wait").expect("exited");
        assert_eq!(status.code(), Some(3));
        let mut slow = spawn(Command::new("/bin/sleep").arg("5")).expect("spawn");
        assert!(slow.wait_timeout(Duration::from_millis(50)).expect("wait").is_none());
        slow.child.kill().expect("kill");
        assert!(slow.wait_timeout(Duration::from_secs(10)).expect("wait").is_some());
    }
}
