//! Installing a skill from a git repository (spec §9): cloned on the host with git (no hooks
//! run, symlinks checked out as plain files), its SKILL.md parsed, its files checked (no
//! symlinks, bounded size), its scripts syntax-checked inside a tool container (the
//! repository is untrusted: nothing of it runs on the host), then copied into the context's
//! `skills/{name}/` in one rename, and recorded in `data/state/skill-installs.json`.

use std::path::{Component, Path};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::auth::{Context, ContextKind, Role};
use crate::container::manager::{ContainerManager, RunRequest};
use crate::container::MountSpec;
use crate::state;

/// The most files and bytes a skill may hold.
const MAX_FILES: usize = 500;
const MAX_BYTES: u64 = 10 * 1024 * 1024;
const GIT_TIMEOUT: Duration = Duration::from_secs(120);
const RECORD: &str = "skill-installs.json";

/// What to install.
#[derive(Debug, Clone)]
pub struct InstallRequest {
    pub context: Context,
    pub source: String,
    pub path: String,
    pub git_ref: String,
    pub replace: bool,
}

/// What was installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    pub name: String,
    pub description: String,
    /// Relative to the data dir.
    pub installed_to: String,
    pub commit: String,
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("source `{0}` is not a git URL (https://, http://, git://, file://) or an absolute path to a repository")]
    BadSource(String),
    #[error("{0}")]
    BadArgument(String),
    #[error("git could not fetch the repository: {0}")]
    Git(String),
    #[error("there is no SKILL.md in {0}")]
    NoSkill(String),
    #[error("the skill is refused: {0}")]
    Invalid(String),
    #[error("a skill named `{name}` is installed already ({path}); pass --replace to replace it")]
    Exists { name: String, path: String },
    #[error("the skill's files did not pass the check in a tool container: {0}")]
    Validation(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> InstallError {
    let what = what.into();
    move |source| InstallError::Io { what, source }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct Record {
    installs: Vec<Install>,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Install {
    name: String,
    context: String,
    source: String,
    path: String,
    git_ref: String,
    commit: String,
    at: String,
}

fn check_request(request: &InstallRequest) -> Result<(), InstallError> {
    let source = request.source.as_str();
    let url = ["https://", "http://", "git://", "file://"].iter().any(|scheme| source.starts_with(scheme));
    let clean = !source.is_empty() && !source.chars().any(|c| c.is_whitespace() || c.is_control());
    if !clean || !(url || source.starts_with('/')) {
        return Err(InstallError::BadSource(source.to_string()));
    }
    if Path::new(&request.path).components().any(|part| !matches!(part, Component::Normal(_) | Component::CurDir)) {
        return Err(InstallError::BadArgument(format!(
            "path `{}` must be a folder inside the repository, without `..`",
            request.path
        )));
    }
    let git_ref = request.git_ref.as_str();
    if git_ref.starts_with('-') || !git_ref.chars().all(|c| c.is_ascii_alphanumeric() || "._/-".contains(c)) {
        return Err(InstallError::BadArgument(format!("ref `{git_ref}` is not a branch or tag name")));
    }
    Ok(())
}

async fn git(args: &[&str], dir: &Path) -> Result<String, InstallError> {
    let mut command = tokio::process::Command::new("git");
    command
        .args(["-c", "protocol.file.allow=always", "-c", "core.symlinks=false", "-c", "core.hooksPath=/dev/null"])
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(GIT_TIMEOUT, command.output())
        .await
        .map_err(|_elapsed| InstallError::Git(format!("no answer within {} s", GIT_TIMEOUT.as_secs())))?
        .map_err(|error| InstallError::Git(format!("cannot run git ({error}); install it on the host")))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(InstallError::Git(stderr.trim().lines().last().unwrap_or("failed").to_string()));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

/// Checks every file below `folder` (but `.git`): no symlink, at most [`MAX_FILES`] files and
/// [`MAX_BYTES`] bytes.
fn check_files(folder: &Path) -> Result<(), InstallError> {
    let (mut files, mut bytes) = (0usize, 0u64);
    let mut pending = vec![folder.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(io(format!("cannot read {}", dir.display())))? {
            let entry = entry.map_err(io(format!("cannot read {}", dir.display())))?;
            if entry.file_name() == ".git" {
                continue;
            }
            let meta = std::fs::symlink_metadata(entry.path()).map_err(io("cannot inspect a file"))?;
            let shown = entry.path().strip_prefix(folder).unwrap_or(&entry.path()).display().to_string();
            if meta.file_type().is_symlink() {
                return Err(InstallError::Invalid(format!("`{shown}` is a symbolic link; skills may not hold links")));
            }
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                files += 1;
                bytes += meta.len();
            } else {
                return Err(InstallError::Invalid(format!("`{shown}` is not a regular file")));
            }
        }
    }
    if files > MAX_FILES || bytes > MAX_BYTES {
        return Err(InstallError::Invalid(format!(
            "it holds {files} files, {bytes} bytes; a skill may hold at most {MAX_FILES} files, {MAX_BYTES} bytes"
        )));
    }
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> Result<(), InstallError> {
    std::fs::create_dir_all(to).map_err(io(format!("cannot create {}", to.display())))?;
    for entry in std::fs::read_dir(from).map_err(io(format!("cannot read {}", from.display())))? {
        let entry = entry.map_err(io("cannot read the skill"))?;
        if entry.file_name() == ".git" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().map_err(io("cannot inspect a file"))?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target).map_err(io(format!("cannot copy to {}", target.display())))?;
        }
    }
    Ok(())
}

/// Syntax-checks the skill's shell and Python files in a tool container without network.
const CHECK: &str = r#"set -e
test -r SKILL.md
find . -name '*.sh' -type f | while read -r f; do sh -n "$f" || { echo "shell syntax error in $f" >&2; exit 1; }; done
if command -v python3 >/dev/null; then
  find . -name '*.py' -type f | while read -r f; do
    python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$f" || { echo "Python syntax error in $f" >&2; exit 1; }
  done
fi
echo checked"#;

/// Installs the skill `request` names into its context's skills; see the module's text.
pub async fn install(
    root: &Path,
    containers: &ContainerManager,
    request: InstallRequest,
) -> Result<Installed, InstallError> {
    check_request(&request)?;
    let staging = root.join("data/tmp").join(format!("skill-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&staging).map_err(io(format!("cannot create {}", staging.display())))?;
    let outcome = install_from(root, containers, &request, &staging).await;
    if let Err(error) = std::fs::remove_dir_all(&staging) {
        tracing::warn!(path = %staging.display(), %error, "cannot remove the staging folder");
    }
    match &outcome {
        Ok(installed) => tracing::info!(
            target: "baaaht_daemon::skills::audit",
            skill = %installed.name, context = %request.context, source = %request.source, commit = %installed.commit,
            "skill installed"
        ),
        Err(error) => tracing::warn!(
            target: "baaaht_daemon::skills::audit",
            context = %request.context, source = %request.source, %error,
            "skill refused"
        ),
    }
    outcome
}

async fn install_from(
    root: &Path,
    containers: &ContainerManager,
    request: &InstallRequest,
    staging: &Path,
) -> Result<Installed, InstallError> {
    let mut clone = vec!["clone", "--depth", "1", "--no-tags", "--single-branch"];
    if !request.git_ref.is_empty() {
        clone.extend(["--branch", request.git_ref.as_str()]);
    }
    clone.extend(["--", request.source.as_str(), "repo"]);
    git(&clone, staging).await?;
    let repo = staging.join("repo");
    let commit = git(&["rev-parse", "HEAD"], &repo).await?;
    let folder = if request.path.is_empty() { repo.clone() } else { repo.join(&request.path) };
    let shown =
        if request.path.is_empty() { "the repository's root".to_string() } else { format!("`{}`", request.path) };
    let text = match std::fs::read_to_string(folder.join("SKILL.md")) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Err(InstallError::NoSkill(shown)),
        Err(error) => return Err(io("cannot read SKILL.md")(error)),
    };
    let skill = super::parse_unplaced(&text).map_err(|error| InstallError::Invalid(error.to_string()))?;
    check_files(&folder)?;

    let kind = match request.context.kind {
        ContextKind::User => "users",
        ContextKind::Group => "groups",
    };
    let own = crate::datadir::DataDir::new(root).context_dir(&request.context);
    let destination = own.join("skills").join(&skill.name);
    let relative = format!("{kind}/{}/skills/{}", request.context.id, skill.name);
    if destination.exists() && !request.replace {
        return Err(InstallError::Exists { name: skill.name, path: relative });
    }

    // A skill that needs packages gets its layer now (cached by the package set), and is
    // checked in it, its `verify` commands included.
    let layer = super::layer(containers.image(), &skill.addons.packages).map_err(InstallError::Invalid)?;
    if let Some((tag, dockerfile)) = &layer {
        containers
            .ensure_image(tag, dockerfile)
            .await
            .map_err(|error| InstallError::Validation(format!("the skill layer {tag} could not be built: {error}")))?;
    }
    let verifies: Vec<(String, String)> = skill
        .addons
        .packages
        .iter()
        .filter_map(|package| package.verify.clone())
        .enumerate()
        .map(|(index, verify)| (format!("BAAAHT_VERIFY_{index}"), verify))
        .collect();
    let mut script = CHECK.replace("echo checked", "");
    for (name, _) in &verifies {
        script.push_str(&format!(
            "sh -c \"${name}\" >/dev/null 2>&1 || {{ echo \"verify failed: ${name}\" >&2; exit 1; }}\n"
        ));
    }
    script.push_str("echo checked");
    let check = RunRequest {
        role: Role::Tool,
        session_id: "skill-install".into(),
        context: request.context.clone(),
        command: vec!["sh".into(), "-c".into(), script],
        mounts: vec![MountSpec { host: folder.clone(), target: "/skill".into(), read_only: true }],
        env: verifies,
        timeout: Duration::from_secs(60),
        daemon_socket: false,
        working_dir: Some("/skill".into()),
        image: layer.as_ref().map(|(tag, _)| tag.clone()),
    };
    let outcome = containers.run(check).await.map_err(|error| InstallError::Validation(error.to_string()))?;
    if !outcome.succeeded() {
        let why = outcome.stderr_tail(3);
        return Err(InstallError::Validation(if why.trim().is_empty() { outcome.status.to_string() } else { why }));
    }

    // Copy next to the destination, then one rename: never a half-installed skill.
    let skills_dir = own.join("skills");
    std::fs::create_dir_all(&skills_dir).map_err(io(format!("cannot create {}", skills_dir.display())))?;
    let incoming = skills_dir.join(format!(".incoming-{}", uuid::Uuid::new_v4().simple()));
    copy_tree(&folder, &incoming)?;
    if destination.exists() {
        let old = staging.join("replaced");
        std::fs::rename(&destination, &old).map_err(io("cannot move the old skill aside"))?;
    }
    std::fs::rename(&incoming, &destination).map_err(io(format!("cannot install into {}", destination.display())))?;
    std::fs::File::open(&skills_dir).and_then(|dir| dir.sync_all()).map_err(io("cannot sync the skills folder"))?;

    let record_path = root.join("data/state").join(RECORD);
    let mut record: Record = state::read_json_or_set_aside(&record_path, Record::default);
    record.installs.push(Install {
        name: skill.name.clone(),
        context: request.context.to_string(),
        source: request.source.clone(),
        path: request.path.clone(),
        git_ref: request.git_ref.clone(),
        commit: commit.clone(),
        at: state::now_rfc3339(),
    });
    if let Err(error) = state::write_json(&record_path, &record) {
        tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot record the installed skill");
    }
    Ok(Installed { name: skill.name, description: skill.description, installed_to: relative, commit })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(source: &str, path: &str, git_ref: &str) -> InstallRequest {
        InstallRequest {
            context: Context::user("alice"),
            source: source.into(),
            path: path.into(),
            git_ref: git_ref.into(),
            replace: false,
        }
    }

    #[test]
    fn sources_paths_and_refs_are_checked_before_git_runs() {
        assert!(check_request(&request("https://example.org/skills.git", "", "")).is_ok());
        assert!(check_request(&request("/srv/skills", "tools/pdf", "v1.2")).is_ok());
        for bad in ["--upload-pack=touch /tmp/x", "ext::sh -c id", "relative/repo", "ssh://h/r", ""] {
            assert!(matches!(check_request(&request(bad, "", "")), Err(InstallError::BadSource(_))), "{bad}");
        }
        assert!(check_request(&request("/srv/skills", "../etc", "")).is_err());
        assert!(check_request(&request("/srv/skills", "", "--orphan")).is_err());
    }

    #[test]
    fn links_and_oversized_skills_are_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("SKILL.md"), "x").expect("write");
        assert!(check_files(dir.path()).is_ok());
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("passwd")).expect("link");
        let refused = check_files(dir.path()).expect_err("a link");
        assert!(refused.to_string().contains("`passwd` is a symbolic link"), "{refused}");
    }
}
