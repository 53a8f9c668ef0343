//! `exec`: `sh -c COMMAND` in the workspace, or a skill's script (`script`, `args`) run by
//! itself, with a clean environment (nothing of the runner's, so no token), its own process
//! group, a timeout, and stdout and stderr each capped with a truncation marker. The runner
//! kills whatever the command left behind after each call ([`crate::runner`]); here the
//! process group is killed at the timeout.
//!
//! What the daemon sends with a call (a skill's `addons.env`) goes only to a run of that
//! skill's script, never to a shell command: the script is run by path, with its arguments
//! as arguments, so nothing else can run in its process.

use std::io::Read;

use rustix::fs::{OFlags, ResolveFlags};
use std::os::unix::process::CommandExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::paths::Mounts;
use super::{Params, ToolError, ToolOutput};

/// Bytes kept of stdout and of stderr each.
pub const OUTPUT_CAP: usize = 32 << 10;

/// The environment every command gets, and nothing else.
const ENVIRONMENT: &[(&str, &str)] = &[
    ("PATH", "/usr/local/bin:/usr/bin:/bin"),
    ("HOME", "/tmp"),
    ("TMPDIR", "/tmp"),
    ("LANG", "C.UTF-8"),
    ("TERM", "dumb"),
];

/// The variables of the runner's own environment every command and MCP server keeps: the
/// library the daemon preloads under gVisor (`LD_PRELOAD`, set only there).
pub fn kept_env() -> impl Iterator<Item = (&'static str, String)> {
    ["LD_PRELOAD"].into_iter().filter_map(|name| std::env::var(name).ok().map(|value| (name, value)))
}

/// Reads a stream to its end, keeping the first `cap` bytes and counting the rest.
fn drain(mut stream: impl Read + Send + 'static, cap: usize) -> std::thread::JoinHandle<(Vec<u8>, usize)> {
    std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut dropped = 0;
        let mut buffer = [0u8; 8192];
        loop {
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let room = cap.saturating_sub(kept.len());
                    kept.extend_from_slice(&buffer[..n.min(room)]);
                    dropped += n.saturating_sub(room);
                }
            }
        }
        (kept, dropped)
    })
}

/// What a program says when it tried the network without the proxy.
const OFFLINE_SIGNS: [&str; 7] = [
    "network is unreachable",
    // gVisor's kernel, with no network of its own, says this of a connect.
    "no route to host",
    "could not resolve host",
    "temporary failure in name resolution",
    "name or service not known",
    "name resolution",
    "no address associated with hostname",
];

/// Told after such a failure, so the model knows what does work.
const OFFLINE_NOTE: &str = "note: this container has no network of its own. Only HTTP and HTTPS reach out, through \
                            baaaht's proxy (HTTPS_PROXY, set for curl, git, pip and npm); raw TCP, ssh and DNS are \
                            not offered (git: use the https URL). Each host must be allowed for you.\n";

fn section(out: &mut String, name: &str, (bytes, dropped): (Vec<u8>, usize)) {
    if bytes.is_empty() && dropped == 0 {
        return;
    }
    out.push_str(&format!("--- {name} ---\n"));
    out.push_str(&String::from_utf8_lossy(&bytes));
    if !out.ends_with('\n') {
        out.push('\n');
    }
    if dropped > 0 {
        out.push_str(&format!("[{name} truncated: {dropped} more bytes not shown]\n"));
    }
}

/// Adds to a command's `out` the connections baaaht's egress proxy refused it, and why (its
/// client, git or curl, shows only "CONNECT tunnel failed, response 403").
pub fn refused(out: &mut String, refusals: &[String]) {
    if refusals.is_empty() {
        return;
    }
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    out.push_str("--- refused by baaaht's egress proxy ---\n");
    for refusal in refusals {
        out.push_str(refusal);
        out.push('\n');
    }
}

/// Runs `exec` with `params`; `max_timeout` is the configured limit for this tool; `extra_env`
/// is what the daemon gives this command only (a skill's `addons.env`).
pub fn exec(
    params: &Params<'_>,
    mounts: &Mounts,
    max_timeout: Duration,
    extra_env: &std::collections::HashMap<String, String>,
    proxy_env: &[(&'static str, String)],
    placeholders: &std::collections::HashMap<String, String>,
) -> Result<ToolOutput, ToolError> {
    let mut command = match (params.optional_string("command")?, params.optional_string("script")?) {
        (Some(command), None) => {
            if command.trim().is_empty() {
                return Err(ToolError::Param { name: "command", problem: "is empty".into() });
            }
            if !extra_env.is_empty() {
                return Err(ToolError::Failed(
                    "a skill's secrets go only to a run of its script (exec with `script`), never to a command".into(),
                ));
            }
            let mut shell = Command::new("/bin/sh");
            shell.arg("-c").arg(command);
            shell
        }
        (None, Some(script)) => skill_script(script, &strings(params, "args")?)?,
        (Some(_), Some(_)) => {
            return Err(ToolError::Param { name: "command", problem: "give either command or script, not both".into() })
        }
        (None, None) => return Err(ToolError::Param { name: "command", problem: "is required (or script)".into() }),
    };
    let timeout = params
        .optional_u64("timeout")?
        .map_or(max_timeout, |seconds| Duration::from_secs(seconds.max(1)).min(max_timeout));
    let workspace = mounts.default_root().ok_or_else(|| ToolError::Failed("no workspace is mounted".into()))?;
    let started = Instant::now();
    let program = command.get_program().to_string_lossy().into_owned();
    let mut spawned = crate::reaper::spawn(
        command
            .current_dir(&workspace.at)
            .env_clear()
            // First, so a credential named like a variable the runner sets does not replace it.
            .envs(placeholders)
            .envs(ENVIRONMENT.iter().copied())
            .envs(kept_env())
            .envs(proxy_env.iter().map(|(name, value)| (name, value)))
            .envs(extra_env)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0),
    )
    .map_err(|error| ToolError::Failed(format!("cannot start {program}: {error}")))?;
    let group = spawned.id();
    let stdout =
        drain(spawned.child.stdout.take().ok_or_else(|| ToolError::Failed("no stdout pipe".into()))?, OUTPUT_CAP);
    let stderr =
        drain(spawned.child.stderr.take().ok_or_else(|| ToolError::Failed("no stderr pipe".into()))?, OUTPUT_CAP);
    let kill_group = || {
        if let Some(pid) = rustix::process::Pid::from_raw(group as i32) {
            // silent-ok: the group may have exited on its own just now.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
    };
    let mut timed_out = false;
    let status = match spawned.wait_timeout(timeout) {
        Ok(Some(status)) => Some(status),
        Ok(None) => {
            timed_out = true;
            kill_group();
            spawned.wait_timeout(Duration::from_secs(10)).ok().flatten()
        }
        Err(_) => None,
    };
    // Whatever still holds the pipes open (a detached child) is killed by the runner's sweep;
    // outside a container, the process group is the limit.
    kill_group();
    if crate::reaper::active() {
        crate::reaper::sweep();
    }
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let code = status.and_then(|status| status.code());
    let mut out = String::new();
    match (timed_out, code) {
        (true, _) => out.push_str(&format!("killed after {} s (timeout)\n", timeout.as_secs())),
        (false, Some(code)) => out.push_str(&format!("exit code {code}\n")),
        (false, None) => out.push_str("killed by a signal\n"),
    }
    let offline = code != Some(0) && {
        let said = String::from_utf8_lossy(&stderr.0).to_ascii_lowercase();
        OFFLINE_SIGNS.iter().any(|sign| said.contains(sign))
    };
    section(&mut out, "stdout", stdout);
    section(&mut out, "stderr", stderr);
    if offline {
        out.push_str(OFFLINE_NOTE);
    }
    Ok(ToolOutput {
        content: out,
        is_error: timed_out || code != Some(0),
        metadata: vec![
            ("exit_code".into(), code.map_or("none".into(), |c| c.to_string())),
            ("duration_ms".into(), started.elapsed().as_millis().to_string()),
        ],
    })
}

/// The strings of parameter `name` (an array of strings), none when it is absent.
fn strings(params: &Params<'_>, name: &'static str) -> Result<Vec<String>, ToolError> {
    match params.0.get(name) {
        None | Some(serde_json::Value::Null) => Ok(vec![]),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|item| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| ToolError::Param { name, problem: format!("must hold strings, not {item}") })
            })
            .collect(),
        Some(other) => Err(ToolError::Param { name, problem: format!("must be a list of strings, not {other}") }),
    }
}

/// The command that runs skill script `path` with `args`: by the interpreter its `#!` line
/// names (else `/bin/sh`), the script's own path and no shell between. `path` must be a
/// skill's script (`/skills/{skill}/scripts/…`, read-only in the container) and no part of it
/// a link.
fn skill_script(path: &str, args: &[String]) -> Result<Command, ToolError> {
    let not_a_script = |problem: String| ToolError::Param { name: "script", problem };
    if baaaht_proto::skill_of_script(path).is_none() {
        return Err(not_a_script(format!("`{path}` is not a skill's script (/skills/NAME/scripts/FILE)")));
    }
    // Opened beneath `/` with no link followed on the way and without blocking (a FIFO or a
    // device is refused below), as every file a tool reads (`paths.rs`).
    let root = rustix::fs::open("/", OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, rustix::fs::Mode::empty())
        .map_err(|errno| not_a_script(format!("cannot open `/`: {errno}")))?;
    let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC;
    let relative = std::path::Path::new(path.trim_start_matches('/'));
    let script = super::paths::open_beneath(&root, relative, flags, ResolveFlags::NO_SYMLINKS | ResolveFlags::BENEATH)
        .map_err(|errno| match errno {
            rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => {
                not_a_script(format!("`{path}` passes through a link"))
            }
            other => not_a_script(format!("cannot read `{path}`: {other}")),
        })?;
    let regular = rustix::fs::fstat(&script)
        .is_ok_and(|stat| rustix::fs::FileType::from_raw_mode(stat.st_mode) == rustix::fs::FileType::RegularFile);
    if !regular {
        return Err(not_a_script(format!("`{path}` is not a file")));
    }
    let (head, _) = super::paths::read_capped(&script, 256)
        .map_err(|error| not_a_script(format!("cannot read `{path}`: {error}")))?;
    let read = head.len();
    let first_line = head[..read].split(|byte| *byte == b'\n').next().unwrap_or_default();
    let interpreter: Vec<String> = match first_line.strip_prefix(b"#!") {
        Some(line) => String::from_utf8_lossy(line).split_whitespace().map(str::to_string).collect(),
        None => vec![],
    };
    let (program, leading) = match interpreter.split_first() {
        Some((program, leading)) => (program.clone(), leading.to_vec()),
        None => ("/bin/sh".to_string(), vec![]),
    };
    let mut command = Command::new(program);
    command.args(leading).arg(path).args(args);
    Ok(command)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn run(command: &str, timeout: u64) -> ToolOutput {
        let temp = tempfile::tempdir().expect("tempdir");
        let mounts = Mounts::open(&[(temp.path().to_path_buf(), true)]).expect("mounts");
        let params = json!({"command": command});
        exec(&Params(&params), &mounts, Duration::from_secs(timeout), &Default::default(), &[], &Default::default())
            .expect("runs")
    }

    #[test]
    fn the_daemons_env_never_reaches_a_command_and_a_script_must_be_a_skills() {
        let temp = tempfile::tempdir().expect("tempdir");
        let mounts = Mounts::open(&[(temp.path().to_path_buf(), true)]).expect("mounts");
        let params = json!({"command": "echo \"key=[$GH_TOKEN]\""});
        let env = [("GH_TOKEN".to_string(), "ghp_x".to_string())].into_iter().collect();
        let refused = exec(&Params(&params), &mounts, Duration::from_secs(5), &env, &[], &Default::default())
            .expect_err("a command");
        assert!(refused.to_string().contains("never to a command"), "{refused}");
        assert!(run("echo \"key=[$GH_TOKEN]\"", 5).content.contains("key=[]"));
        for script in ["/workspace/x.sh", "/skills/w/scripts/../../tmp/x.sh", "/skills/w/x.sh"] {
            let params = json!({"script": script});
            let refused = exec(&Params(&params), &mounts, Duration::from_secs(5), &env, &[], &Default::default())
                .expect_err(script);
            assert!(refused.to_string().contains("is not a skill's script"), "{refused}");
        }
        let both = json!({"script": "/skills/w/scripts/x.sh", "command": "id"});
        assert!(exec(&Params(&both), &mounts, Duration::from_secs(5), &env, &[], &Default::default()).is_err());
    }

    #[test]
    fn output_exit_code_and_a_clean_environment() {
        let output = run("echo out; echo err >&2; echo \"token=[$BAAAHT_CONTAINER_TOKEN] pwd=$(pwd)\"; exit 3", 10);
        assert!(output.is_error);
        assert!(output.content.starts_with("exit code 3\n--- stdout ---\nout\ntoken=[] pwd=/"), "{}", output.content);
        assert!(output.content.contains("--- stderr ---\nerr\n"), "{}", output.content);
    }

    #[test]
    fn a_command_that_tried_the_network_alone_is_told_what_reaches_out() {
        let output = run("echo 'curl: (6) Could not resolve host: example.org' >&2; exit 6", 10);
        assert!(output.is_error);
        assert!(output.content.ends_with(OFFLINE_NOTE), "{}", output.content);
        let fine = run("echo 'could not resolve host' >&2", 10);
        assert!(!fine.content.contains("note:"), "only after a failure: {}", fine.content);
    }

    #[test]
    fn output_is_capped_with_a_marker() {
        let output = run("head -c 100000 /dev/zero | tr '\\0' a", 10);
        assert!(!output.is_error, "{}", output.content);
        assert!(
            output.content.contains("[stdout truncated: 67232 more bytes not shown]"),
            "{}",
            &output.content[output.content.len() - 80..]
        );
    }

    #[test]
    fn a_command_past_its_timeout_is_killed_with_its_group() {
        let started = Instant::now();
        let output = run("sleep 30 & sleep 30", 1);
        assert!(output.is_error);
        assert!(output.content.starts_with("killed after 1 s (timeout)"), "{}", output.content);
        assert!(started.elapsed() < Duration::from_secs(10), "the pipes were released: {:?}", started.elapsed());
    }
}
