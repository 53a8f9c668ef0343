//! `baaaht-agent fetch-skill`: clones a skill's repository inside a one-shot tool container
//! that has no network, so no `git` of the host ever talks to a repository a person or an agent
//! named. The only way out is the daemon's egress socket mounted in (`CONNECT host:port`, each
//! target checked by the daemon's filter and audited); `git` reaches it through a CONNECT proxy
//! on the container's loopback ([`baaaht_proto::egress::local_proxy`]) and runs by
//! [`baaaht_proto::git`]'s rules. What it leaves in the output folder: `repo/` (without `.git`)
//! and `commit`. The daemon reads them after the container is gone.
//!
//! Exit codes: 0 fetched; 3 the clone failed; 4 the commit could not be read; 5 the proxy
//! could not start; 6 the output could not be written. `git`'s own words go to stderr, which
//! the daemon logs and never shows to whoever asked (they may quote a remote server).

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
    /// The daemon's egress socket.
    pub socket: PathBuf,
    /// The folder `repo/` and `commit` go in.
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
    let settings = [("http.proxy", proxy.as_str())];
    let mut command = baaaht_proto::git::command(&clone, &fetch.out, &home, "https", &settings);
    let output = tokio::time::timeout(CLONE_TIMEOUT, command.output())
        .await
        .map_err(|_elapsed| failed(3, format!("no answer within {} s", CLONE_TIMEOUT.as_secs())))?
        .map_err(|error| failed(3, format!("cannot run git: {error}")))?;
    if !output.status.success() {
        return Err(failed(3, last_line(&output.stderr)));
    }
    let repo = fetch.out.join("repo");
    let mut head = baaaht_proto::git::command(&["rev-parse", "HEAD"], &repo, &home, "file", &[]);
    let output = head.output().await.map_err(|error| failed(4, format!("cannot run git: {error}")))?;
    let commit = String::from_utf8_lossy(&output.stdout).trim().to_string();
    if !output.status.success() || commit.is_empty() || !commit.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(failed(4, last_line(&output.stderr)));
    }
    std::fs::remove_dir_all(repo.join(".git")).map_err(|error| failed(6, format!("cannot remove .git: {error}")))?;
    write(&fetch.out.join("commit"), &commit)
}

fn write(path: &Path, text: &str) -> Result<(), Failed> {
    std::fs::write(path, text).map_err(|error| failed(6, format!("cannot write {}: {error}", path.display())))
}

fn last_line(stderr: &[u8]) -> String {
    String::from_utf8_lossy(stderr).trim().lines().last().unwrap_or("failed").to_string()
}
