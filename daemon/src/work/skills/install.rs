//! Installing a skill (spec §9) from an `https://` git repository, or, for the host's own
//! clients, from a repository in a folder on the host. `git` runs on the host with no hooks,
//! no configuration but ours, symlinks checked out as plain files and one protocol allowed
//! (`https`, or `file` for a host folder). An https clone reaches the network only through a
//! CONNECT proxy the daemon serves on loopback for this one install (a random credential;
//! every target resolved once, checked by the web proxy's address filter and audited,
//! [`crate::net::egress::tunnel`]), so a source cannot lead the daemon to loopback,
//! private or metadata addresses, nor to anything but https. A failed fetch is told in the
//! daemon's own words (what the filter refused, or that no repository answered), never with
//! what the far end said. The skill's SKILL.md is then parsed, its files checked (no
//! symlinks, bounded size), scanned for the patterns of malicious skills ([`super::scan`]:
//! what it finds is told and audited), its scripts syntax-checked inside a tool container (the
//! repository is untrusted: nothing of it runs on the host), then copied into the context's
//! `skills/{name}/` in one rename, and recorded in `data/state/skill-installs.json`.

use std::path::{Component, Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::base::auth::{Context, Role};
use crate::base::state;
use crate::sandbox::container::manager::{ContainerManager, RunRequest};
use crate::sandbox::container::MountSpec;

/// The most files and bytes a skill may hold.
const MAX_FILES: usize = 500;
const MAX_BYTES: u64 = 10 * 1024 * 1024;
const GIT_TIMEOUT: Duration = Duration::from_secs(120);
const RECORD: &str = "skill-installs.json";

/// Where a skill comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An `https://` URL of a git repository.
    Https(String),
    /// A git repository in a folder on the host (for the host's own clients).
    HostFolder(PathBuf),
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Https(url) => f.write_str(url),
            Source::HostFolder(path) => write!(f, "{}", path.display()),
        }
    }
}

/// What to install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallRequest {
    pub context: Context,
    pub source: Source,
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
    /// What the scan of its files found ([`super::scan`]).
    pub findings: Vec<super::scan::Finding>,
}

#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error(
        "source `{0}` is not an https:// URL of a git repository (http://, git://, ssh:// and file:// are never \
         fetched; the host's own clients may install from a folder on the host with --local)"
    )]
    BadSource(String),
    #[error("folder `{0}` is not an absolute path on the host")]
    BadFolder(String),
    #[error("{0}")]
    BadArgument(String),
    #[error("{0}")]
    Git(String),
    #[error("there is no SKILL.md in {0}")]
    NoSkill(String),
    #[error("the skill is refused: {0}")]
    Invalid(String),
    #[error("a skill named `{name}` is installed already ({path}); pass --replace to replace it")]
    Exists { name: String, path: String },
    #[error("the skill's files did not pass the check in a tool container: {0}")]
    Validation(String),
    /// An agent's install from a turn that read content from outside.
    #[error("{0}")]
    Withheld(String),
    #[error("the skill was not installed: {by} declined it")]
    Declined { by: String },
    #[error("the skill was not installed: {0}")]
    NotAnswered(String),
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
    /// Who approved its review, when an agent asked for it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    approved_by: String,
}

fn clean(text: &str) -> bool {
    !text.is_empty() && !text.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn check_request(request: &InstallRequest) -> Result<(), InstallError> {
    match &request.source {
        Source::Https(url) => {
            let host = url.strip_prefix("https://").map(|rest| rest.split(['/', '?', '#']).next().unwrap_or_default());
            // A user name before the host (`https://github.com@elsewhere.example/…`) shows one
            // host to a reviewer and fetches from another: refused.
            if !clean(url) || host.is_none_or(|host| host.is_empty() || host.contains('@')) {
                return Err(InstallError::BadSource(url.clone()));
            }
        }
        Source::HostFolder(path) => {
            let text = path.to_string_lossy();
            if !clean(&text) || !path.is_absolute() {
                return Err(InstallError::BadFolder(text.into_owned()));
            }
        }
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

pub use super::fetch::Egress;

/// Why `git` failed, for the caller to put in words.
enum GitFailure {
    /// It ran and failed; its last line of stderr (never shown to a remote caller).
    Failed(String),
    Timeout,
    Spawn(std::io::Error),
}

/// Runs `git args` in `dir` by [`baaaht_proto::git`]'s rules, only `protocol` allowed.
async fn git(args: &[&str], dir: &Path, protocol: &str) -> Result<String, GitFailure> {
    let mut command = baaaht_proto::git::command(args, dir, dir, protocol, &[]);
    let output = tokio::time::timeout(GIT_TIMEOUT, command.output())
        .await
        .map_err(|_elapsed| GitFailure::Timeout)?
        .map_err(GitFailure::Spawn)?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(GitFailure::Failed(stderr.trim().lines().last().unwrap_or("failed").to_string()));
    }
    Ok(String::from_utf8_lossy(&output.stdout).trim().to_string())
}

impl GitFailure {
    /// The failure in the daemon's words; `far_end` says whether git's own may be shown (it
    /// may quote what a remote server answered, so only for a folder on the host).
    fn into_error(self, what: &str, far_end: bool) -> InstallError {
        match self {
            GitFailure::Timeout => InstallError::Git(format!("{what}: no answer within {} s", GIT_TIMEOUT.as_secs())),
            GitFailure::Spawn(error) => InstallError::Git(format!("cannot run git ({error}); install it on the host")),
            GitFailure::Failed(line) if far_end => InstallError::Git(format!("{what}: {line}")),
            GitFailure::Failed(line) => {
                tracing::info!(%line, "git's own account of a failed skill fetch (not shown to the caller)");
                InstallError::Git(format!(
                    "{what}: no git repository could be read there (check the URL and the ref, and that the \
                     repository is public)"
                ))
            }
        }
    }
}

/// Clones the host folder `path` into `staging/repo` with the host's git (a host client's
/// install only); the commit.
async fn clone_folder(path: &Path, git_ref: &str, staging: &Path) -> Result<String, InstallError> {
    let mut clone = vec!["clone", "--depth", "1", "--no-tags", "--single-branch"];
    if !git_ref.is_empty() {
        clone.extend(["--branch", git_ref]);
    }
    let path = path.to_string_lossy();
    clone.extend(["--", path.as_ref(), "repo"]);
    let what = format!("cannot clone {path}");
    git(&clone, staging, "file").await.map_err(|failure| failure.into_error(&what, true))?;
    git(&["rev-parse", "HEAD"], &staging.join("repo"), "file")
        .await
        .map_err(|failure| failure.into_error("cannot read the cloned commit", true))
}

/// Checks every file below `folder` (but `.git`): no symlink, at most [`MAX_FILES`] files and
/// [`MAX_BYTES`] bytes.
fn check_files(folder: &Path) -> Result<(usize, u64), InstallError> {
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
    Ok((files, bytes))
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

/// Installs the skill `request` names into its context's skills (see the module's text) for
/// one who asked themselves (no review card: the caller is the person), and records in the
/// audit log, as `record` (of kind skill), what was installed or why not.
pub async fn install(
    root: &Path,
    containers: &ContainerManager,
    egress: &Egress,
    request: InstallRequest,
    record: crate::guard::audit::Record,
) -> Result<Installed, InstallError> {
    let outcome = match stage(root, containers, egress, request.clone()).await {
        Ok(staged) => commit(root, containers, staged, "").await,
        Err(error) => Err(error),
    };
    audit(egress, &request, record, &outcome);
    outcome
}

/// Logs and audits (as `record`) how the install of `request` ended.
pub(super) fn audit(
    egress: &Egress,
    request: &InstallRequest,
    record: crate::guard::audit::Record,
    outcome: &Result<Installed, InstallError>,
) {
    match outcome {
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
    let record = record.detail("source", request.source.to_string()).detail("path", request.path.as_str());
    egress.audit.record(match outcome {
        Ok(installed) => {
            let classes: std::collections::BTreeSet<&str> = installed.findings.iter().map(|f| f.class).collect();
            let classes = classes.into_iter().collect::<Vec<_>>().join(",");
            record
                .detail("name", installed.name.as_str())
                .detail("commit", installed.commit.as_str())
                .detail("findings", classes)
        }
        Err(error) => {
            let mut failed = record.detail("reason", error.to_string());
            failed.outcome = "failed".into();
            failed
        }
    });
}

/// The folder `path` of a repository, as a sentence names it.
fn shown(path: &str) -> String {
    if path.is_empty() {
        "the repository's root".to_string()
    } else {
        format!("`{path}`")
    }
}

/// A staging folder of one install, in `data/tmp/`: removed when dropped.
#[derive(Debug)]
struct Staging(PathBuf);

impl Drop for Staging {
    fn drop(&mut self) {
        if let Err(error) = std::fs::remove_dir_all(&self.0) {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(path = %self.0.display(), %error, "cannot remove the staging folder");
            }
        }
    }
}

/// The prefix of every staging folder's name in `data/tmp/`.
const STAGING_PREFIX: &str = "skill-";

/// Removes the staging folders a daemon that stopped mid-install left in `root`'s `data/tmp/`.
pub fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root.join("data/tmp")) else { return };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with(STAGING_PREFIX) {
            drop(Staging(entry.path()));
        }
    }
}

/// A skill fetched, checked and surveyed, in a staging folder of the daemon's own, waiting to
/// be committed (or dropped, and its folder with it). What is committed is this copy: what was
/// reviewed is what is installed.
#[derive(Debug)]
pub struct Staged {
    _staging: Staging,
    pub request: InstallRequest,
    pub skill: super::Skill,
    folder: PathBuf,
    pub commit: String,
    pub survey: super::scan::Survey,
    files: (usize, u64),
}

/// Fetches and checks `request`'s skill into a staging folder of its own: nothing of it runs.
pub async fn stage(
    root: &Path,
    containers: &ContainerManager,
    egress: &Egress,
    request: InstallRequest,
) -> Result<Staged, InstallError> {
    check_request(&request)?;
    let tmp = root.join("data/tmp");
    std::fs::create_dir_all(&tmp).map_err(io(format!("cannot create {}", tmp.display())))?;
    let staging = Staging(tmp.join(format!("{STAGING_PREFIX}{}", uuid::Uuid::new_v4().simple())));
    std::fs::create_dir(&staging.0).map_err(io(format!("cannot create {}", staging.0.display())))?;
    let (commit, folder) = match &request.source {
        Source::HostFolder(path) => {
            let commit = clone_folder(path, &request.git_ref, &staging.0).await?;
            let repo = staging.0.join("repo");
            (commit, if request.path.is_empty() { repo } else { repo.join(&request.path) })
        }
        Source::Https(url) => {
            let wanted = super::fetch::Wanted {
                url,
                git_ref: &request.git_ref,
                path: &request.path,
                context: &request.context,
                most: (MAX_FILES, MAX_BYTES),
            };
            let commit = super::fetch::fetch(containers, egress, &wanted, &staging.0).await.map_err(|error| {
                use super::fetch::FetchError;
                match error {
                    FetchError::Refused(why) => InstallError::Git(why),
                    FetchError::NoSkill => InstallError::NoSkill(shown(&request.path)),
                    FetchError::Invalid(why) => InstallError::Invalid(why),
                    FetchError::Io(what, source) => InstallError::Io { what: what.into(), source },
                }
            })?;
            (commit, staging.0.join(super::fetch::SKILL))
        }
    };
    let shown = shown(&request.path);
    if !folder.is_dir() {
        return Err(InstallError::NoSkill(shown));
    }
    let files = check_files(&folder)?;
    let text = match std::fs::read_to_string(folder.join("SKILL.md")) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Err(InstallError::NoSkill(shown)),
        Err(error) => return Err(io("cannot read SKILL.md")(error)),
    };
    let skill = super::parse_unplaced(&text).map_err(|error| InstallError::Invalid(error.to_string()))?;
    super::layer(containers.image(), &skill.addons.packages)
        .map_err(|error| InstallError::Invalid(error.to_string()))?;
    let survey = super::scan::survey(&folder);
    for finding in &survey.findings {
        tracing::warn!(target: "baaaht_daemon::skills::audit", skill = %skill.name, %finding, "the skill's scan found");
    }
    Ok(Staged { _staging: staging, request, skill, folder, commit, survey, files })
}

/// The most scripts, packages, secrets and findings a review lists, and the longest line.
const REVIEW_LIST: usize = 20;
const REVIEW_LINE: usize = 300;

impl Staged {
    /// Where it would be installed, absolute and relative to the data dir.
    fn destination(&self, root: &Path) -> (PathBuf, String) {
        let context = &self.request.context;
        let own = crate::base::datadir::DataDir::new(root).context_dir(context);
        let kind = crate::base::datadir::context_folder(context.kind);
        (own.join("skills").join(&self.skill.name), format!("{kind}/{}/skills/{}", context.id, self.skill.name))
    }

    /// What a person is shown before saying install or decline.
    pub fn review(&self, root: &Path) -> crate::store::sessions::log::SkillReview {
        let request = &self.request;
        let mut source = request.source.to_string();
        if !request.path.is_empty() {
            source.push_str(&format!(", folder {}", request.path));
        }
        if !request.git_ref.is_empty() {
            source.push_str(&format!(", at {}", request.git_ref));
        }
        let installs_for = match request.context.kind {
            crate::base::auth::ContextKind::Group => format!("the group {}", request.context.id),
            _ => "you".to_string(),
        };
        let line = |text: &str| match text.char_indices().nth(REVIEW_LINE) {
            Some((end, _)) => format!("{}…", &text[..end]),
            None => text.to_string(),
        };
        let list = |items: Vec<String>| -> Vec<String> {
            let more = items.len().saturating_sub(REVIEW_LIST);
            let mut listed: Vec<String> = items.iter().take(REVIEW_LIST).map(|item| line(item)).collect();
            if more > 0 {
                listed.push(format!("and {more} more"));
            }
            listed
        };
        let packages = self
            .skill
            .addons
            .packages
            .iter()
            .map(|package| format!("{} {}", format!("{:?}", package.source).to_lowercase(), package.name))
            .collect();
        // Every script (a skill holds at most 500 files): the channels say how many they leave out.
        let scripts = self.survey.scripts.iter().map(|(path, size)| (line(path), *size)).collect();
        let hides_system_skill = root.join("skills").join(&self.skill.name).join("SKILL.md").is_file();
        crate::store::sessions::log::SkillReview {
            name: self.skill.name.clone(),
            description: line(&self.skill.description),
            source: line(&source),
            commit: self.commit.clone(),
            installs_for,
            replaces: self.destination(root).0.exists(),
            files: u32::try_from(self.files.0).unwrap_or(u32::MAX),
            bytes: self.files.1,
            scripts,
            packages: list(packages),
            secrets: list(self.skill.addons.env.clone()),
            hosts: list(self.survey.hosts.clone()),
            findings: list(self.survey.findings.iter().map(ToString::to_string).collect()),
            always_loaded: self.skill.always_loaded,
            hides_system_skill,
        }
    }
}

/// Installs the staged skill (`answered_by`: who approved its review; empty when the caller
/// asked themselves): its layer built and its scripts checked in a tool container without
/// network (package managers run code: never before the yes), then copied into place in one
/// rename and recorded.
pub async fn commit(
    root: &Path,
    containers: &ContainerManager,
    staged: Staged,
    answered_by: &str,
) -> Result<Installed, InstallError> {
    let (destination, relative) = staged.destination(root);
    let Staged { request, skill, folder, commit, survey, _staging: staging, .. } = staged;
    // Checked again now: another install may have come first while this one was reviewed.
    if destination.exists() && !request.replace {
        return Err(InstallError::Exists { name: skill.name, path: relative });
    }

    // A skill that needs packages gets its layer now (cached by the package set), and is
    // checked in it, its `verify` commands included.
    let layer = super::layer(containers.image(), &skill.addons.packages)
        .map_err(|error| InstallError::Invalid(error.to_string()))?;
    if let Some((tag, dockerfile)) = &layer {
        containers.ensure_image(tag, dockerfile).await.map_err(|error| {
            InstallError::Validation(format!("the skill layer {tag} could not be built: {}", error.told()))
        })?;
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
        limits: None,
    };
    let outcome = containers.run(check).await.map_err(|error| InstallError::Validation(error.told()))?;
    if !outcome.succeeded() {
        let why = outcome.stderr_tail(3);
        return Err(InstallError::Validation(if why.trim().is_empty() { outcome.status.to_string() } else { why }));
    }

    // Copy next to the destination, then one rename: never a half-installed skill.
    let skills_dir = destination.parent().map(Path::to_path_buf).unwrap_or_default();
    std::fs::create_dir_all(&skills_dir).map_err(io(format!("cannot create {}", skills_dir.display())))?;
    let incoming = skills_dir.join(format!(".incoming-{}", uuid::Uuid::new_v4().simple()));
    if let Err(error) = copy_tree(&folder, &incoming) {
        // silent-ok: the copy's own failure is what is told; a part left is removed if it can be.
        let _ = std::fs::remove_dir_all(&incoming);
        return Err(error);
    }
    if destination.exists() {
        let old = staging.0.join("replaced");
        std::fs::rename(&destination, &old).map_err(io("cannot move the old skill aside"))?;
    }
    std::fs::rename(&incoming, &destination).map_err(io(format!("cannot install into {}", destination.display())))?;
    std::fs::File::open(&skills_dir).and_then(|dir| dir.sync_all()).map_err(io("cannot sync the skills folder"))?;

    let record_path = root.join("data/state").join(RECORD);
    let mut record: Record = state::read_json_or_set_aside(&record_path, Record::default);
    record.installs.push(Install {
        name: skill.name.clone(),
        context: request.context.to_string(),
        source: request.source.to_string(),
        path: request.path.clone(),
        git_ref: request.git_ref.clone(),
        commit: commit.clone(),
        at: state::now_rfc3339(),
        approved_by: answered_by.to_string(),
    });
    if let Err(error) = state::write_json(&record_path, &record) {
        tracing::warn!(error = %baaaht_proto::error_chain(&error), "cannot record the installed skill");
    }
    Ok(Installed {
        name: skill.name,
        description: skill.description,
        installed_to: relative,
        commit,
        findings: survey.findings,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(source: Source, path: &str, git_ref: &str) -> InstallRequest {
        InstallRequest {
            context: Context::user("alice"),
            source,
            path: path.into(),
            git_ref: git_ref.into(),
            replace: false,
        }
    }

    fn https(url: &str) -> Source {
        Source::Https(url.into())
    }

    #[test]
    fn sources_paths_and_refs_are_checked_before_git_runs() {
        assert!(check_request(&request(https("https://example.org/skills.git"), "", "")).is_ok());
        let folder = Source::HostFolder("/srv/skills".into());
        assert!(check_request(&request(folder.clone(), "tools/pdf", "v1.2")).is_ok());
        for bad in [
            "--upload-pack=touch /tmp/x",
            "ext::sh -c id",
            "relative/repo",
            "ssh://h/r",
            "",
            "http://127.0.0.1:8080/x.git",
            "git://127.0.0.1/x",
            "file:///root/repo",
            "https://",
            "https:///etc",
            "https://example.org/a b",
            "https://github.com@evil.example/x.git",
        ] {
            assert!(matches!(check_request(&request(https(bad), "", "")), Err(InstallError::BadSource(_))), "{bad}");
        }
        let relative = Source::HostFolder("srv/skills".into());
        assert!(matches!(check_request(&request(relative, "", "")), Err(InstallError::BadFolder(_))));
        assert!(check_request(&request(folder.clone(), "../etc", "")).is_err());
        assert!(check_request(&request(folder, "", "--orphan")).is_err());
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
