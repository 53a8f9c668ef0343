//! SKILL.md (spec §9, the Agent Skills specification): YAML front matter between `---` lines,
//! then the instructions. The specification's keys (`name`, `description`, `license`,
//! `compatibility`, `metadata`, `allowed-tools`) and baaaht's own (`addons`, `always-loaded`)
//! are accepted; anything else is an error naming the key, the line and what is allowed.

use std::collections::BTreeMap;

use serde::Deserialize;

pub mod asked;
mod fetch;
pub mod install;
pub mod scan;

/// The longest name, description and compatibility note the specification allows.
pub const MAX_NAME: usize = 64;
pub const MAX_DESCRIPTION: usize = 1024;
pub const MAX_COMPATIBILITY: usize = 500;

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FrontMatter {
    name: String,
    description: String,
    #[serde(default)]
    license: Option<String>,
    #[serde(default)]
    compatibility: Option<String>,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    #[serde(default)]
    allowed_tools: Option<String>,
    #[serde(default)]
    addons: Addons,
    #[serde(default)]
    always_loaded: bool,
}

/// What a skill needs in its tool containers (spec §9.1.2).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Addons {
    #[serde(default)]
    pub packages: Vec<Package>,
    /// Secrets injected into this skill's tool containers only.
    #[serde(default)]
    pub env: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Package {
    pub name: String,
    pub source: PackageSource,
    #[serde(default)]
    pub verify: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PackageSource {
    Apt,
    Apk,
    Npm,
    Pip,
}

/// A parsed skill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skill {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    pub compatibility: Option<String>,
    pub metadata: BTreeMap<String, String>,
    pub allowed_tools: Option<String>,
    pub addons: Addons,
    /// Its whole body goes into every agent's context, not only its description.
    pub always_loaded: bool,
    /// The instructions after the front matter.
    pub body: String,
}

/// What is wrong with a SKILL.md, with the line when there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SKILL.md{}: {message}", line.map(|l| format!(":{l}")).unwrap_or_default())]
pub struct SkillError {
    pub line: Option<usize>,
    pub message: String,
}

fn error(line: Option<usize>, message: impl Into<String>) -> SkillError {
    SkillError { line, message: message.into() }
}

/// What is wrong with a skill's name, said after it ("name `X` must be …").
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("must be 1 to {MAX_NAME} characters")]
    Length,
    #[error("may use only lowercase letters, digits and `-`")]
    Characters,
    #[error("must not start or end with `-`")]
    EdgeHyphen,
    #[error("must not contain `--`")]
    DoubleHyphen,
}

/// Whether `name` follows the specification: 1-64 lowercase letters, digits and hyphens, not
/// starting or ending with a hyphen, no two hyphens in a row.
pub fn valid_name(name: &str) -> Result<(), NameError> {
    if name.is_empty() || name.len() > MAX_NAME {
        return Err(NameError::Length);
    }
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(NameError::Characters);
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err(NameError::EdgeHyphen);
    }
    if name.contains("--") {
        return Err(NameError::DoubleHyphen);
    }
    Ok(())
}

/// Parses a SKILL.md found in folder `folder` (whose name the skill's name must equal).
pub fn parse(text: &str, folder: &str) -> Result<Skill, SkillError> {
    let skill = parse_unplaced(text)?;
    if skill.name != folder {
        return Err(error(Some(2), format!("name `{}` must equal its folder's name `{folder}`", skill.name)));
    }
    Ok(skill)
}

/// Parses a SKILL.md that has no folder yet (a skill being installed goes into one named
/// after it).
pub fn parse_unplaced(text: &str) -> Result<Skill, SkillError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let Some(rest) = text.strip_prefix("---\n").or_else(|| text.strip_prefix("---\r\n")) else {
        return Err(error(Some(1), "it must start with a `---` line and YAML front matter (name, description)"));
    };
    let Some(end) = rest.find("\n---").filter(|end| matches!(rest[end + 4..].chars().next(), None | Some('\n' | '\r')))
    else {
        return Err(error(None, "the front matter has no closing `---` line"));
    };
    let yaml = &rest[..end + 1];
    let body = rest[end + 4..].trim_start_matches(['\r', '\n']).to_string();
    let front: FrontMatter = serde_yaml::from_str(yaml).map_err(|problem| {
        // The front matter starts on line 2.
        let line = problem.location().map(|location| location.line() + 1);
        let message = problem.to_string();
        let message = message.split(" at line ").next().unwrap_or(&message).to_string();
        let hint = if message.contains("unknown field") {
            "; allowed: name, description, license, compatibility, metadata, allowed-tools, addons, always-loaded"
        } else {
            ""
        };
        error(line, format!("{message}{hint}"))
    })?;
    valid_name(&front.name).map_err(|why| error(Some(2), format!("name `{}` {why}", front.name)))?;
    let description = front.description.trim();
    if description.is_empty() || description.len() > MAX_DESCRIPTION {
        return Err(error(
            None,
            format!(
                "description must be 1 to {MAX_DESCRIPTION} characters: say what the skill does and when to use it"
            ),
        ));
    }
    if front.compatibility.as_ref().is_some_and(|c| c.len() > MAX_COMPATIBILITY) {
        return Err(error(None, format!("compatibility must be at most {MAX_COMPATIBILITY} characters")));
    }
    for variable in &front.addons.env {
        if variable.is_empty() || !variable.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(error(None, format!("addons.env: `{variable}` is not an environment variable name")));
        }
    }
    Ok(Skill {
        name: front.name,
        description: description.to_string(),
        license: front.license,
        compatibility: front.compatibility,
        metadata: front.metadata,
        allowed_tools: front.allowed_tools,
        addons: front.addons,
        always_loaded: front.always_loaded,
        body,
    })
}

/// Where a skill was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    System,
    User,
    Group,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::System => "system",
            Scope::User => "user",
            Scope::Group => "group",
        }
    }
}

/// A skill a context can see.
#[derive(Debug, Clone)]
pub struct Found {
    pub skill: Skill,
    pub scope: Scope,
    pub folder: std::path::PathBuf,
}

/// The folders skills of `context` come from, lowest precedence first: the system's
/// (`skills/` and `extra`), then the context's own (`users/{id}/skills` or `groups/{id}/skills`).
fn roots(
    data_root: &std::path::Path,
    extra: &[String],
    context: &crate::base::auth::Context,
) -> Vec<(Scope, std::path::PathBuf)> {
    let mut roots = vec![(Scope::System, data_root.join("skills"))];
    roots.extend(extra.iter().map(|dir| (Scope::System, std::path::PathBuf::from(dir))));
    let scope = match context.kind {
        crate::base::auth::ContextKind::User => Scope::User,
        crate::base::auth::ContextKind::Group => Scope::Group,
    };
    roots.push((scope, crate::base::datadir::DataDir::new(data_root).context_dir(context).join("skills")));
    roots
}

/// Every skill `context` can see — the system's and its own, never another context's — and,
/// for each SKILL.md that does not parse, why. A context's skill hides a system skill of the
/// same name.
pub fn discover(
    data_root: &std::path::Path,
    extra: &[String],
    context: &crate::base::auth::Context,
) -> (Vec<Found>, Vec<String>) {
    let mut found: BTreeMap<String, Found> = BTreeMap::new();
    let mut problems = vec![];
    for (scope, root) in roots(data_root, extra, context) {
        let Ok(entries) = std::fs::read_dir(&root) else { continue };
        for entry in entries.flatten() {
            let folder = entry.path();
            // A symlinked skill could point anywhere on the host: only real folders count.
            if !std::fs::symlink_metadata(&folder).is_ok_and(|m| m.is_dir()) {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            let file = folder.join("SKILL.md");
            let text = match std::fs::read_to_string(&file) {
                Ok(text) => text,
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue,
                Err(error) => {
                    problems.push(format!("{}: {error}", file.display()));
                    continue;
                }
            };
            match parse(&text, &name) {
                Ok(skill) => {
                    found.insert(skill.name.clone(), Found { skill, scope, folder });
                }
                Err(error) => problems.push(format!("{}: {}", folder.display(), error)),
            }
        }
    }
    (found.into_values().collect(), problems)
}

/// [`discover`], logging the skills that do not parse.
pub fn manifest(data_root: &std::path::Path, extra: &[String], context: &crate::base::auth::Context) -> Vec<Found> {
    let (found, problems) = discover(data_root, extra, context);
    for problem in problems {
        tracing::warn!(%problem, "skipping a skill");
    }
    found
}

/// The `addons.env` of the skill whose script `script` is (`/skills/{name}/scripts/…`, one of
/// `skills`, those `context` sees): the secrets its scope may name, handed out by `secrets`
/// for `caller`. The runner gives them to that script's run only: a shell command never gets
/// any. A variable refused or missing is left out, with a warning, and said in
/// [`ScriptEnv::unmet`]: the script still runs (spec §9.1, a progressive skill's fallback),
/// and the agent is told why it may fall short.
pub fn script_env(
    skills: &[Found],
    script: &str,
    secrets: &crate::guard::secrets::Handout,
    caller: &crate::base::auth::Caller,
    correlation_id: &str,
) -> ScriptEnv {
    let mut given = ScriptEnv::default();
    let Some(name) = baaaht_proto::skill_of_script(script) else { return given };
    let Some(found) = skills.iter().find(|found| found.skill.name == name) else { return given };
    let referrer = match found.scope {
        Scope::System => crate::guard::secrets::Referrer::System,
        Scope::User | Scope::Group => crate::guard::secrets::Referrer::Context,
    };
    let asker = crate::guard::secrets::Asker { caller, correlation_id, consumer: ("skill", name) };
    for variable in &found.skill.addons.env {
        match secrets.resolve(asker, referrer, &format!("${{{variable}}}")) {
            Ok(value) => {
                given.env.insert(variable.clone(), value.to_string());
            }
            Err(why) => {
                tracing::warn!(skill = %name, variable = %variable, %why, "a skill's addons.env variable is not given");
                given.unmet.push(why.to_string());
            }
        }
    }
    if !given.unmet.is_empty() {
        given.unmet.insert(0, name.to_string());
    }
    given
}

/// What a skill's script run is given, and what it asked for and was not.
#[derive(Debug, Default)]
pub struct ScriptEnv {
    pub env: std::collections::HashMap<String, String>,
    /// The skill's name, then why each variable it names was not given; empty when all were.
    pub unmet: Vec<String>,
}

impl ScriptEnv {
    /// The note a tool result ends with when the skill's script ran without what it needs.
    pub fn note(&self) -> Option<String> {
        let (skill, why) = self.unmet.split_first()?;
        Some(format!(
            "\n\n(The skill {skill} ran without what it asks for, so it may fall short: {}. Tell the person; \
             only an admin can change this.)",
            why.join("; ")
        ))
    }
}

/// A package a skill's addons (or an MCP server's `install`) name that cannot go into a layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayerError {
    #[error("addons.packages: `{0}` is not a package name")]
    NotAPackage(String),
    #[error("addons.packages: `{0}` comes from apk (Alpine), but baaaht's base image is Debian: use `source: apt`")]
    Apk(String),
}

/// The skill layer for `packages` (of one or more skills) on `base`: its tag (named by a hash
/// of the base and the sorted package list, so it is built once per set) and its Dockerfile.
/// `None` when there is nothing to add. Only the packages' names reach the Dockerfile, checked;
/// a skill's `verify` commands run later, in a hardened container without network.
pub fn layer<'a>(
    base: &str,
    packages: impl IntoIterator<Item = &'a Package>,
) -> Result<Option<(String, String)>, LayerError> {
    layer_trusting(base, packages, &host_ca_certificates())
}

/// Where Debian keeps the certificate authorities an admin added to the host.
const HOST_CA_DIR: &str = "/usr/local/share/ca-certificates";

/// The certificate authorities the host's admin added (PEM texts, sorted by file name): a layer
/// that installs from pip or npm trusts them too, so installs work behind a TLS-inspecting
/// proxy as they do on the host. What is not a plain PEM certificate is left out.
pub fn host_ca_certificates() -> Vec<String> {
    let mut files: Vec<std::path::PathBuf> = std::fs::read_dir(HOST_CA_DIR)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "crt"))
        .collect();
    files.sort();
    files.iter().filter_map(|path| std::fs::read_to_string(path).ok()).filter(|text| is_pem_certificate(text)).collect()
}

/// A PEM certificate with nothing else in it: safe to write into a Dockerfile's `printf`.
fn is_pem_certificate(text: &str) -> bool {
    let text = text.trim();
    text.len() < 16 * 1024
        && text.starts_with("-----BEGIN CERTIFICATE-----")
        && text.ends_with("-----END CERTIFICATE-----")
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b"+/=- \r\n".contains(&b))
}

/// [`layer`], trusting the certificate authorities `cas` (PEM) for pip and npm installs.
pub fn layer_trusting<'a>(
    base: &str,
    packages: impl IntoIterator<Item = &'a Package>,
    cas: &[String],
) -> Result<Option<(String, String)>, LayerError> {
    use sha2::Digest as _;
    let mut by_source: BTreeMap<&'static str, std::collections::BTreeSet<&str>> = BTreeMap::new();
    for package in packages {
        let name = package.name.as_str();
        let valid = !name.is_empty()
            && name.len() <= 200
            && !name.starts_with('-')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || "._+-@/=:~".contains(c));
        if !valid {
            return Err(LayerError::NotAPackage(name.to_string()));
        }
        let source = match package.source {
            PackageSource::Apt => "apt",
            PackageSource::Pip => "pip",
            PackageSource::Npm => "npm",
            PackageSource::Apk => return Err(LayerError::Apk(name.to_string())),
        };
        by_source.entry(source).or_default().insert(name);
    }
    if by_source.is_empty() {
        return Ok(None);
    }
    let join = |source: &str| by_source.get(source).map(|names| names.iter().copied().collect::<Vec<_>>().join(" "));
    let mut apt: Vec<String> = join("apt").into_iter().collect();
    if by_source.contains_key("pip") {
        apt.push("python3-pip".into());
    }
    if by_source.contains_key("npm") {
        apt.push("nodejs npm".into());
    }
    let cas: Vec<&String> = cas.iter().filter(|ca| is_pem_certificate(ca)).collect();
    let trust = !cas.is_empty() && (by_source.contains_key("pip") || by_source.contains_key("npm"));
    if trust {
        apt.push("ca-certificates".into());
    }
    let mut dockerfile = format!("FROM {base}\nUSER root\n");
    if !apt.is_empty() {
        dockerfile.push_str(&format!(
            "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {} \\\n    && rm -rf /var/lib/apt/lists/*\n",
            apt.join(" ")
        ));
    }
    if trust {
        let writes: Vec<String> = cas
            .iter()
            .enumerate()
            .map(|(index, pem)| {
                let escaped = pem.trim().replace("\r", "").replace('\n', "\\n");
                // `%b`: the text starts with `-`, which printf would take for an option.
                format!("printf '%b' '{escaped}\\n' > /usr/local/share/ca-certificates/baaaht-host-{index}.crt")
            })
            .collect();
        dockerfile.push_str(&format!("RUN {} && update-ca-certificates\n", writes.join(" && ")));
        dockerfile.push_str(
            "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt NODE_EXTRA_CA_CERTS=/etc/ssl/certs/ca-certificates.crt\n",
        );
    }
    if let Some(pip) = join("pip") {
        dockerfile.push_str(&format!("RUN pip3 install --no-cache-dir --break-system-packages {pip}\n"));
    }
    if let Some(npm) = join("npm") {
        dockerfile.push_str(&format!("RUN npm install --global {npm}\n"));
    }
    dockerfile.push_str("USER 1000\n");
    let hash = sha2::Sha256::digest(dockerfile.as_bytes());
    let hex: String = hash.iter().take(8).map(|byte| format!("{byte:02x}")).collect();
    Ok(Some((format!("baaaht/skill-layer:{hex}"), dockerfile)))
}

/// The largest file GetSkillContent returns.
pub const MAX_CONTENT: u64 = 256 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum ContentError {
    #[error("no skill `{0}` is visible here")]
    NoSkill(String),
    #[error("path `{path}` is refused: {reason}")]
    Refused { path: String, reason: &'static str },
    #[error("`{0}` does not exist in the skill")]
    NotFound(String),
    #[error("`{path}` is {size} bytes; the most a skill file may be is {MAX_CONTENT}")]
    TooLarge { path: String, size: u64 },
    #[error("`{path}` cannot be read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// A file of skill `name` as `context` sees it: `path` relative to the skill's folder (empty:
/// SKILL.md), never outside it — `..`, absolute paths and symlinks leading out are refused.
pub fn content(
    data_root: &std::path::Path,
    extra: &[String],
    context: &crate::base::auth::Context,
    name: &str,
    path: &str,
) -> Result<(String, String), ContentError> {
    let found = manifest(data_root, extra, context)
        .into_iter()
        .find(|found| found.skill.name == name)
        .ok_or_else(|| ContentError::NoSkill(name.to_string()))?;
    let relative = if path.is_empty() { "SKILL.md" } else { path };
    let refused = |reason| ContentError::Refused { path: relative.to_string(), reason };
    if relative.contains('\0') {
        return Err(refused("it contains a NUL byte"));
    }
    let candidate = std::path::Path::new(relative);
    if candidate.is_absolute() {
        return Err(refused("give a path relative to the skill's folder"));
    }
    if candidate
        .components()
        .any(|part| !matches!(part, std::path::Component::Normal(_) | std::path::Component::CurDir))
    {
        return Err(refused("`..` is not allowed"));
    }
    let base = found.folder.canonicalize().map_err(|source| ContentError::Io { path: relative.into(), source })?;
    let full = match base.join(candidate).canonicalize() {
        Ok(full) => full,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            return Err(ContentError::NotFound(relative.into()))
        }
        Err(source) => return Err(ContentError::Io { path: relative.into(), source }),
    };
    if !full.starts_with(&base) {
        return Err(refused("it leads out of the skill's folder"));
    }
    let size = std::fs::metadata(&full).map_err(|source| ContentError::Io { path: relative.into(), source })?.len();
    if size > MAX_CONTENT {
        return Err(ContentError::TooLarge { path: relative.into(), size });
    }
    let bytes = std::fs::read(&full).map_err(|source| ContentError::Io { path: relative.into(), source })?;
    Ok((relative.to_string(), String::from_utf8_lossy(&bytes).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_installs_the_checked_packages_once_per_set() {
        let package = |name: &str, source| Package { name: name.into(), source, verify: None };
        let (tag, dockerfile) =
            layer("baaaht/base:latest", &[package("jq", PackageSource::Apt), package("requests", PackageSource::Pip)])
                .expect("valid")
                .expect("a layer");
        assert!(dockerfile.starts_with("FROM baaaht/base:latest\nUSER root\n"), "{dockerfile}");
        assert!(dockerfile.contains("apt-get install -y --no-install-recommends jq python3-pip"), "{dockerfile}");
        assert!(dockerfile.contains("pip3 install --no-cache-dir --break-system-packages requests"), "{dockerfile}");
        assert!(dockerfile.ends_with("USER 1000\n"));
        let (same, _) =
            layer("baaaht/base:latest", &[package("requests", PackageSource::Pip), package("jq", PackageSource::Apt)])
                .expect("valid")
                .expect("a layer");
        assert_eq!(tag, same, "the order of the list does not matter");
        assert!(layer("baaaht/base:latest", &[]).expect("valid").is_none());
        // The host's own certificate authorities are trusted for pip and npm installs.
        let pem = "-----BEGIN CERTIFICATE-----\nMIIBsz+/=\nAbC\n-----END CERTIFICATE-----\n".to_string();
        let (_, dockerfile) =
            layer_trusting("b", &[package("requests", PackageSource::Pip)], std::slice::from_ref(&pem))
                .expect("valid")
                .expect("a layer");
        assert!(dockerfile.contains("printf '%b' '-----BEGIN CERTIFICATE-----\\nMIIBsz+/=\\nAbC\\n-----END CERTIFICATE-----\\n' > /usr/local/share/ca-certificates/baaaht-host-0.crt && update-ca-certificates"), "{dockerfile}");
        assert!(
            dockerfile.contains("ENV PIP_CERT=") && dockerfile.contains("ca-certificates python3-pip")
                || dockerfile.contains("python3-pip ca-certificates"),
            "{dockerfile}"
        );
        let apt_only =
            layer_trusting("b", &[package("jq", PackageSource::Apt)], &[pem]).expect("valid").expect("layer");
        assert!(!apt_only.1.contains("printf"), "apt needs no CA: {}", apt_only.1);
        assert!(!is_pem_certificate("-----BEGIN CERTIFICATE-----\n'; rm -rf /\n-----END CERTIFICATE-----"));
        let injected = layer("b", &[package("jq; curl evil", PackageSource::Apt)]).expect_err("refused").to_string();
        assert!(injected.contains("is not a package name"), "{injected}");
        let apk = layer("b", &[package("gh", PackageSource::Apk)]).expect_err("apk").to_string();
        assert!(apk.contains("use `source: apt`"), "{apk}");
    }

    #[test]
    fn the_bundled_skills_parse() {
        for name in ["code-review", "summarize", "skill-creator", "web-research"] {
            let path = format!("{}/../config/skills/{name}/SKILL.md", env!("CARGO_MANIFEST_DIR"));
            let text = std::fs::read_to_string(&path).expect("bundled skill");
            let skill = parse(&text, name).unwrap_or_else(|problem| panic!("{path}: {problem}"));
            assert_eq!(skill.metadata.get("author").map(String::as_str), Some("baaaht"));
            assert!(skill.body.starts_with('#'), "{name}: the body follows the front matter");
        }
    }

    #[test]
    fn the_specs_github_example_with_addons_parses() {
        let text = "---\nname: github\ndescription: GitHub repository operations (issues, PRs, releases, etc.)\nmetadata:\n  author: baaaht-core\n  version: \"1.0\"\naddons:\n  packages:\n    - name: gh\n      source: apt\n      verify: \"gh --version\"\n  env:\n    - GH_TOKEN\n---\n# GitHub\n";
        let skill = parse(text, "github").expect("parses");
        assert_eq!(skill.addons.packages[0].source, PackageSource::Apt);
        assert_eq!(skill.addons.env, ["GH_TOKEN"]);
        assert_eq!(skill.body, "# GitHub\n");
    }

    #[test]
    fn mistakes_are_named_with_their_line() {
        for (text, folder, expected) in [
            ("# no front matter", "x", "SKILL.md:1: it must start with a `---` line"),
            ("---\nname: x\ndescription: d\n", "x", "SKILL.md: the front matter has no closing `---` line"),
            (
                "---\nname: Code_Review\ndescription: d\n---\n",
                "Code_Review",
                "SKILL.md:2: name `Code_Review` may use only lowercase",
            ),
            ("---\nname: -x\ndescription: d\n---\n", "-x", "must not start or end with `-`"),
            ("---\nname: a--b\ndescription: d\n---\n", "a--b", "must not contain `--`"),
            ("---\nname: abc\ndescription: d\n---\n", "other", "name `abc` must equal its folder's name `other`"),
            ("---\nname: abc\ndescription: \"\"\n---\n", "abc", "description must be 1 to 1024 characters"),
            ("---\nname: abc\ndescription: d\nauthor: me\n---\n", "abc", "SKILL.md:4: unknown field `author`"),
            ("---\nname: abc\n---\n", "abc", "missing field `description`"),
            (
                "---\nname: abc\ndescription: d\naddons:\n  packages:\n    - name: gh\n      source: brew\n---\n",
                "abc",
                "unknown variant `brew`",
            ),
        ] {
            let problem = parse(text, folder).expect_err(text).to_string();
            assert!(problem.contains(expected), "{text:?}: {problem}");
        }
        let unknown =
            parse("---\nname: abc\ndescription: d\nauthor: me\n---\n", "abc").expect_err("unknown").to_string();
        assert!(unknown.contains("allowed: name, description, license"), "{unknown}");
    }
}
