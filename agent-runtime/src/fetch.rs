//! `baaaht-agent fetch-skill`: clones a skill's repository inside a one-shot tool container
//! that has no network, so no `git` of the host ever talks to a repository a person or an agent
//! named. The only way out is the daemon's egress socket mounted in (`CONNECT host:port`, each
//! target checked by the daemon's filter and audited); `git` reaches it through a CONNECT proxy
//! on the container's loopback ([`baaaht_proto::egress::local_proxy`]) and runs by
//! [`baaaht_proto::git`]'s rules, into the container's size-capped `/tmp`, so a repository
//! cannot fill the host's disk. What it leaves in the output folder (on the host's disk): only
//! the skill's folder, checked first (no links, at most so many files and bytes), as `skill/`,
//! and `commit`. The daemon reads them after the container is gone.
//!
//! Exit codes: 0 fetched; 3 the clone failed; 4 the commit could not be read; 5 the proxy
//! could not start; 6 the output could not be written; 7 the skill's folder may not be
//! installed (stderr says why, in our words); 8 there is no such folder. `git`'s own words go
//! to stderr, which the daemon logs and never shows to whoever asked (they may quote a remote
//! server).

use std::path::{Path, PathBuf};
use std::time::Duration;

use baaaht_proto::egress::{local_proxy, Egress};

/// How long the clone may take.
const CLONE_TIMEOUT: Duration = Duration::from_secs(120);

/// What to fetch, and where.
#[derive(Debug, Clone)]
pub struct Fetch {
    pub url: String,
    /// A branch or tag; empty: the default branch.
    pub git_ref: String,
    /// The folder inside the repository that holds SKILL.md; empty: its root.
    pub path: String,
    /// The most files and bytes the skill's folder may hold.
    pub most: (usize, u64),
    /// The daemon's egress socket.
    pub socket: PathBuf,
    /// The folder `skill/` and `commit` go in.
    pub out: PathBuf,
}

/// Why a fetch failed, with its exit code.
#[derive(Debug)]
pub struct Failed {
    pub code: u8,
    pub why: String,
}

fn failed(code: u8, why: impl Into<String>) -> Failed {
    Failed { code, why: why.into() }
}

/// Fetches `fetch.url` into `fetch.out`.
pub async fn run(fetch: &Fetch) -> Result<(), Failed> {
    // What is written is the daemon's group's too (a daemon without root removes it after).
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o002));
    let inside = Path::new(&fetch.path);
    if inside.components().any(|part| !matches!(part, std::path::Component::Normal(_))) {
        return Err(failed(7, format!("path `{}` is not a folder inside the repository", fetch.path)));
    }
    let egress = Egress::Tunnel(std::sync::Arc::new(fetch.socket.clone()));
    let proxy = local_proxy(egress)
        .await
        .map_err(|error| failed(5, format!("cannot open the proxy on loopback: {error}")))?
        .ok_or_else(|| failed(5, "no proxy for a tunnel"))?;
    let home = std::env::temp_dir();
    let mut clone = vec!["clone", "--depth", "1", "--no-tags", "--single-branch"];
    if !fetch.git_ref.is_empty() {
        clone.extend(["--branch", fetch.git_ref.as_str()]);
    }
    clone.extend(["--", fetch.url.as_str(), "repo"]);
    // A server that dribbles is given up on, not waited for the whole two minutes.
    let settings = [("http.proxy", proxy.as_str()), ("http.lowSpeedLimit", "1000"), ("http.lowSpeedTime", "20")];
    let mut command = baaaht_proto::git::command(&clone, &home, &home, "https", &settings);
    let output = tokio::time::timeout(CLONE_TIMEOUT, command.output())
        .await
        .map_err(|_elapsed| failed(3, format!("no answer within {} s", CLONE_TIMEOUT.as_secs())))?
        .map_err(|error| failed(3, format!("cannot run git: {error}")))?;
    if !output.status.success() {
        let said = last_line(&output.stderr);
        let all = String::from_utf8_lossy(&output.stderr);
        if all.contains("No space left on device") || all.contains("checkout failed") {
            // The room a fetch has is its container's /tmp: the repository is larger.
            return Err(failed(
                7,
                "the repository is larger than a skill's fetch may hold (a skill holds at most 10 MB)",
            ));
        }
        return Err(failed(3, said));
    }
    let repo = home.join("repo");
    let mut head = baaaht_proto::git::command(&["rev-parse", "HEAD"], &repo, &home, "file", &[]);
    let output = head.output().await.map_err(|error| failed(4, format!("cannot run git: {error}")))?;
    let commit = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !output.status.success() || commit.is_empty() || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(failed(4, last_line(&output.stderr)));
    }
    let folder = repo.join(inside);
    if !std::fs::symlink_metadata(&folder).is_ok_and(|meta| meta.is_dir()) {
        return Err(failed(8, "no such folder in the repository"));
    }
    let mut counted = (0usize, 0u64);
    check(&folder, Path::new(""), fetch.most, &mut counted)?;
    copy(&folder, &fetch.out.join("skill"))?;
    write(&fetch.out.join("commit"), &commit)
}

/// Checks the tree `dir` (`shown`, relative to the skill's folder): no link, nothing but files
/// and folders, at most `most` files and bytes in all (`counted` so far). `.git` is not the
/// skill's.
fn check(dir: &Path, shown: &Path, most: (usize, u64), counted: &mut (usize, u64)) -> Result<(), Failed> {
    let entries =
        std::fs::read_dir(dir).map_err(|error| failed(6, format!("cannot read {}: {error}", dir.display())))?;
    for entry in entries.flatten() {
        if entry.file_name() == ".git" {
            continue;
        }
        let path = shown.join(entry.file_name());
        let meta = std::fs::symlink_metadata(entry.path())
            .map_err(|error| failed(6, format!("cannot inspect {}: {error}", path.display())))?;
        if meta.file_type().is_symlink() {
            return Err(failed(7, format!("`{}` is a symbolic link", path.display())));
        } else if meta.is_dir() {
            check(&entry.path(), &path, most, counted)?;
        } else if meta.is_file() {
            counted.0 += 1;
            counted.1 += meta.len();
            if counted.0 > most.0 || counted.1 > most.1 {
                return Err(failed(7, format!("it holds more than {} files or {} bytes", most.0, most.1)));
            }
        } else {
            return Err(failed(7, format!("`{}` is not a regular file", path.display())));
        }
    }
    Ok(())
}

/// Copies the checked tree `from` to `to` (without `.git`).
fn copy(from: &Path, to: &Path) -> Result<(), Failed> {
    let cannot = |error: std::io::Error| failed(6, format!("cannot copy the skill: {error}"));
    std::fs::create_dir(to).map_err(cannot)?;
    for entry in std::fs::read_dir(from).map_err(cannot)?.flatten() {
        if entry.file_name() == ".git" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().map_err(cannot)?.is_dir() {
            copy(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(cannot)?;
        }
    }
    Ok(())
}

fn write(path: &Path, text: &str) -> Result<(), Failed> {
    std::fs::write(path, text).map_err(|error| failed(6, format!("cannot write {}: {error}", path.display())))
}

fn last_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr).trim().lines().last().unwrap_or("failed").to_string()
}
