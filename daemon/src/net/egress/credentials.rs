//! Secrets bound to hosts, swapped in at the edge (DESIGN.md §10.2): `config/credentials.yaml`
//! (everyone's tools) and `users/{id}/credentials.yaml`, `groups/{id}/credentials.yaml`:
//!
//! ```yaml
//! credentials:
//!   - name: GITHUB_TOKEN          # a secret in the store (`baaahtd secrets set GITHUB_TOKEN`)
//!     hosts: [github.com, api.github.com]
//! ```
//!
//! A tool command never sees a secret's value: its variable (`GITHUB_TOKEN`) holds a
//! placeholder made for its session ([`Placeholders`]), and the daemon, which terminates TLS
//! for the bound hosts only (`egress::edge`), puts the value in place of the placeholder in
//! what is sent there. A user's or group's own file may bind only the secrets an admin listed
//! in `secrets.user_usable`; an LLM provider's key is never bound.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use crate::base::auth::Context;
use crate::base::datadir::DataDir;
use crate::guard::secrets::Referrer;
use crate::net::egress::policy::{pattern, Pattern, PatternError};

/// The file's name in `config/` and in a context's folder.
pub const FILE: &str = "credentials.yaml";

/// One secret and the hosts it is sent to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    pub name: String,
    pub hosts: Vec<Pattern>,
    /// Whose file binds it: everyone's (an admin's) or the context's own.
    pub referrer: Referrer,
    /// `path:line`.
    pub at: String,
}

impl Binding {
    pub fn covers(&self, host: &str, port: u16) -> bool {
        self.hosts.iter().any(|pattern| pattern.matches(host, port))
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    credentials: Vec<Written>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Written {
    name: String,
    hosts: Vec<String>,
}

/// Why a secret could not be bound or unbound ([`change`]). An I/O error is in the sentence, as
/// it always was, and so not a `#[source]` as well (a chain printer would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum CredentialsError {
    #[error(
        "`{name}` is not a credential's name: write it as a variable is named, e.g. GITHUB_TOKEN (capitals, digits \
         and _, at most 64)"
    )]
    Name { name: String },
    #[error(transparent)]
    Host(#[from] PatternError),
    #[error("cannot read {}: {error}", path.display())]
    Read { path: PathBuf, error: std::io::Error },
    #[error("{} has problems; fix them first:\n{}", path.display(), problems.join("\n"))]
    Problems { path: PathBuf, problems: Vec<String> },
    #[error("{} binds no `{name}`", path.display())]
    Unbound { path: PathBuf, name: String },
    #[error(transparent)]
    Yaml(#[from] serde_yaml::Error),
    /// What was about to be written does not read back (each problem as `path:line: what`).
    #[error("{}", problems.join("\n"))]
    Unreadable { problems: Vec<String> },
    #[error("cannot make {}: {error}", path.display())]
    Folder { path: PathBuf, error: std::io::Error },
    #[error(transparent)]
    Write(#[from] crate::base::state::StateError),
}

/// Whether `name` can be a secret's and a variable's name.
fn check_name(name: &str) -> Result<(), CredentialsError> {
    let mut chars = name.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_uppercase() || c == '_');
    if !first_ok || !name.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_') || name.len() > 64 {
        return Err(CredentialsError::Name { name: name.to_string() });
    }
    Ok(())
}

/// The bindings of `text` (read from `path`, written by `referrer`), or every problem, each as
/// `path:line: what`.
pub fn parse(text: &str, path: &Path, referrer: Referrer) -> Result<Vec<Binding>, Vec<String>> {
    let shown = path.display();
    let file: File = match serde_yaml::from_str::<Option<File>>(text) {
        Ok(file) => file.unwrap_or_default(),
        Err(error) => {
            let at = error.location().map_or(String::new(), |at| format!("{}:{}:", at.line(), at.column()));
            return Err(vec![format!("{shown}:{at} {error}; see `credentials:` with `- name: …` and `hosts: [...]`")]);
        }
    };
    let (mut bindings, mut problems) = (vec![], vec![]);
    let mut from = 0;
    for written in file.credentials {
        let line = text
            .lines()
            .enumerate()
            .skip(from)
            .find(|(_, line)| line.contains("name:") && line.contains(written.name.as_str()))
            .map_or(0, |(index, _)| index + 1);
        from = line;
        let mut hosts = vec![];
        let mut problem = check_name(&written.name).err().map(|why| why.to_string());
        if written.hosts.is_empty() {
            problem.get_or_insert(format!("`{}` names no hosts to be sent to", written.name));
        }
        for host in &written.hosts {
            match pattern(host) {
                Ok(pattern) => hosts.push(pattern),
                Err(why) => {
                    problem.get_or_insert_with(|| why.to_string());
                }
            }
        }
        match problem {
            Some(why) => problems.push(format!("{shown}:{line}: {why}")),
            None => bindings.push(Binding { name: written.name, hosts, referrer, at: format!("{shown}:{line}") }),
        }
    }
    if problems.is_empty() {
        Ok(bindings)
    } else {
        Err(problems)
    }
}

/// The bindings of the file at `path` (none when there is none), or its problems.
pub fn load(path: &Path, referrer: Referrer) -> Result<Vec<Binding>, Vec<String>> {
    match std::fs::read_to_string(path) {
        Ok(text) => parse(&text, path, referrer),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(vec![]),
        Err(error) => Err(vec![format!("{}: cannot be read: {error}", path.display())]),
    }
}

/// Where `context`'s bindings are: everyone's, then its own.
pub fn files(data_dir: &DataDir, context: &Context) -> [(PathBuf, Referrer); 2] {
    [
        (data_dir.config_dir().join(FILE), Referrer::System),
        (data_dir.context_dir(context).join(FILE), Referrer::Context),
    ]
}

/// Every binding that applies to `context`'s tools; a file with problems is logged and binds
/// nothing (no secret goes anywhere by mistake).
pub fn bindings(data_dir: &DataDir, context: &Context) -> Vec<Binding> {
    files(data_dir, context)
        .into_iter()
        .flat_map(|(path, referrer)| {
            load(&path, referrer).unwrap_or_else(|problems| {
                for problem in problems {
                    tracing::warn!(%problem, "a credentials file has a problem; it binds nothing until it is fixed");
                }
                vec![]
            })
        })
        .collect()
}

/// Binds `name` to `hosts` in the file at `path` (none: unbinds it), atomically; the bindings
/// as they are now, or why not.
pub fn change(path: &Path, name: &str, hosts: Option<&[String]>, by: &str) -> Result<Vec<Binding>, CredentialsError> {
    check_name(name)?;
    let text = match std::fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(error) => return Err(CredentialsError::Read { path: path.to_path_buf(), error }),
    };
    parse(&text, path, Referrer::Context)
        .map_err(|problems| CredentialsError::Problems { path: path.to_path_buf(), problems })?;
    let mut file: File = serde_yaml::from_str::<Option<File>>(&text).ok().flatten().unwrap_or_default();
    let before = file.credentials.len();
    file.credentials.retain(|written| written.name != name);
    match hosts {
        Some(hosts) => {
            for host in hosts {
                pattern(host)?;
            }
            file.credentials.push(Written { name: name.to_string(), hosts: hosts.to_vec() });
        }
        None if file.credentials.len() == before => {
            return Err(CredentialsError::Unbound { path: path.to_path_buf(), name: name.to_string() })
        }
        None => {}
    }
    let when = jiff::Timestamp::now().strftime("%Y-%m-%d %H:%M UTC");
    let body = serde_yaml::to_string(&file)?;
    let written = format!(
        "# Secrets swapped in at the edge for these hosts only (`baaaht egress credential`); last changed by {by}, \
         {when}.\n{body}"
    );
    let bindings =
        parse(&written, path, Referrer::Context).map_err(|problems| CredentialsError::Unreadable { problems })?;
    if let Some(folder) = path.parent() {
        std::fs::create_dir_all(folder)
            .map_err(|error| CredentialsError::Folder { path: folder.to_path_buf(), error })?;
    }
    crate::base::state::write_atomic(path, written.as_bytes(), 0o644)?;
    Ok(bindings)
}

/// Every credentials file in the data dir and its problems (`baaahtd config check`).
pub fn check_all(data_dir: &DataDir) -> Vec<String> {
    let mut paths = vec![(data_dir.config_dir().join(FILE), Referrer::System)];
    for kind in crate::base::datadir::CONTEXT_KINDS {
        let Ok(entries) = std::fs::read_dir(data_dir.contexts_dir(kind)) else { continue };
        let mut found: Vec<PathBuf> = entries.flatten().map(|entry| entry.path().join(FILE)).collect();
        found.sort();
        paths.extend(found.into_iter().map(|path| (path, Referrer::Context)));
    }
    paths.iter().flat_map(|(path, referrer)| load(path, *referrer).err().unwrap_or_default()).collect()
}

/// The placeholders of each session: what its tool commands find in a bound secret's variable.
/// Made when first needed, forgotten when the session's tools are released; never written down.
#[derive(Debug, Default)]
pub struct Placeholders {
    by_session: Mutex<HashMap<String, HashMap<String, String>>>,
}

/// How every placeholder starts: recognisable in a log, worthless anywhere else.
pub const PREFIX: &str = "baaaht-placeholder-";

impl Placeholders {
    /// `session`'s placeholders for `names`, by name.
    pub fn of(&self, session: &str, names: impl IntoIterator<Item = String>) -> HashMap<String, String> {
        let mut sessions = self.by_session.lock().unwrap_or_else(PoisonError::into_inner);
        let made = sessions.entry(session.to_string()).or_default();
        names
            .into_iter()
            .map(|name| {
                let placeholder = made
                    .entry(name.clone())
                    .or_insert_with(|| format!("{PREFIX}{}", uuid::Uuid::new_v4().simple()))
                    .clone();
                (name, placeholder)
            })
            .collect()
    }

    /// What `session`'s placeholders stand for: placeholder → name.
    pub fn made(&self, session: &str) -> HashMap<String, String> {
        let sessions = self.by_session.lock().unwrap_or_else(PoisonError::into_inner);
        sessions.get(session).map_or_else(HashMap::new, |made| {
            made.iter().map(|(name, placeholder)| (placeholder.clone(), name.clone())).collect()
        })
    }

    pub fn forget(&self, session: &str) {
        self.by_session.lock().unwrap_or_else(PoisonError::into_inner).remove(session);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_names_a_secret_and_real_hosts_and_is_written_atomically() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join(FILE);
        let hosts = vec!["github.com".to_string(), "*.githubusercontent.com".to_string()];
        let bound = change(&path, "GITHUB_TOKEN", Some(&hosts), "host:uid=0").expect("bound");
        assert_eq!(bound.len(), 1);
        assert!(bound[0].covers("github.com", 443) && bound[0].covers("raw.githubusercontent.com", 443));
        assert!(!bound[0].covers("api.github.com", 443) && !bound[0].covers("github.com.evil.example", 443));
        let text = std::fs::read_to_string(&path).expect("written");
        assert!(text.starts_with("# Secrets swapped in") && text.contains("host:uid=0"), "{text}");
        // Bound again, in place of the old binding; unbound, gone; unbound again, said so.
        let bound = change(&path, "GITHUB_TOKEN", Some(&["api.github.com".to_string()]), "me").expect("rebound");
        assert_eq!(bound.len(), 1);
        assert_eq!(change(&path, "GITHUB_TOKEN", None, "me").expect("unbound"), vec![]);
        let none = change(&path, "GITHUB_TOKEN", None, "me").expect_err("none");
        assert!(matches!(none, CredentialsError::Unbound { .. }), "{none}");
        assert!(none.to_string().contains("binds no `GITHUB_TOKEN`"), "{none}");

        for (name, hosts, says) in [
            ("github_token", vec!["github.com"], "is not a credential's name"),
            ("TOKEN", vec!["*"], "`*`"),
            ("TOKEN", vec!["*.com"], "*.com"),
        ] {
            let hosts: Vec<String> = hosts.into_iter().map(str::to_string).collect();
            let why = change(&path, name, Some(&hosts), "me").expect_err(name);
            assert!(why.to_string().contains(says), "{name} {hosts:?}: {why}");
        }
        let problems = parse("credentials:\n  - name: TOKEN\n    hosts: []\n", Path::new("c.yaml"), Referrer::Context)
            .expect_err("no hosts");
        assert_eq!(problems, vec!["c.yaml:2: `TOKEN` names no hosts to be sent to".to_string()]);
    }

    #[test]
    fn a_sessions_placeholders_are_its_own_and_stay_until_forgotten() {
        let placeholders = Placeholders::default();
        let first = placeholders.of("s1", ["TOKEN".to_string()]);
        assert!(first["TOKEN"].starts_with(PREFIX));
        assert_eq!(placeholders.of("s1", ["TOKEN".to_string()]), first);
        assert_ne!(placeholders.of("s2", ["TOKEN".to_string()])["TOKEN"], first["TOKEN"]);
        assert_eq!(placeholders.made("s1").get(&first["TOKEN"]).map(String::as_str), Some("TOKEN"));
        placeholders.forget("s1");
        assert!(placeholders.made("s1").is_empty());
    }
}
