//! A terminal the tests can type into and read: a tmux server of their own (`-L`, no user
//! configuration) with one pane running a plain shell, driven by send-keys and read by
//! capture-pane, as a person at a terminal would.

use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

/// A private tmux server with one window; killed when dropped.
pub struct Tmux {
    server: String,
}

impl Tmux {
    /// A `width`×`height` terminal running `bash` with the prompt `$ ` and `env` set.
    pub fn start(width: u16, height: u16, env: &[(&str, String)]) -> Result<Tmux> {
        let server = format!("baaaht-test-{}-{}", std::process::id(), uuid_like());
        let tmux = Tmux { server };
        let mut shell = String::from("env");
        for (key, value) in env {
            shell.push_str(&format!(" {key}={}", shell_quote(value)));
        }
        shell.push_str(" PS1='$ ' TERM=xterm-256color bash --norc --noprofile");
        tmux.run(&[
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-s",
            "t",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            &shell,
        ])?;
        tmux.run(&["set-option", "-g", "status", "off"])?;
        tmux.wait_for("$", Duration::from_secs(10))?;
        Ok(tmux)
    }

    fn run(&self, args: &[&str]) -> Result<String> {
        let output = Command::new("tmux").arg("-L").arg(&self.server).args(args).output().context("run tmux")?;
        if !output.status.success() {
            bail!("tmux {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Types `text` literally.
    pub fn type_text(&self, text: &str) -> Result<()> {
        self.run(&["send-keys", "-t", "t", "-l", text]).map(drop)
    }

    /// Presses keys by tmux's names: `Enter`, `Escape`, `C-c`, `Up`…
    pub fn press(&self, keys: &[&str]) -> Result<()> {
        let mut args = vec!["send-keys", "-t", "t"];
        args.extend_from_slice(keys);
        self.run(&args).map(drop)
    }

    /// What the screen shows now, line by line.
    pub fn screen(&self) -> Result<String> {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }

    /// Waits until the screen shows `needle`; the screen then.
    pub fn wait_for(&self, needle: &str, limit: Duration) -> Result<String> {
        self.wait_until(|screen| screen.contains(needle), limit).with_context(|| format!("waiting for {needle:?}"))
    }

    /// Waits until `ready` holds of the screen.
    pub fn wait_until(&self, ready: impl Fn(&str) -> bool, limit: Duration) -> Result<String> {
        let deadline = Instant::now() + limit;
        loop {
            let screen = self.screen()?;
            if ready(&screen) {
                return Ok(screen);
            }
            if Instant::now() > deadline {
                bail!("not on the screen within {limit:?}; it shows:\n{screen}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        // silent-ok: a server already gone has nothing left to kill.
        let _ = self.run(&["kill-server"]);
    }
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
    format!("{nanos:x}")
}

/// `value` quoted for a POSIX shell.
pub fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', "'\\''"))
}
