//! Default agent identities (SOUL.md + IDENTITY.md per role) and bundled skills, embedded at
//! build time from `config/` and installed into the data dir.
//!
//! A file the user edited is never overwritten: `data/state/defaults.json` records the hash of
//! what was installed, and only a file still equal to that hash is updated to a newer default.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::base::state::{self, StateError};

include!(concat!(env!("OUT_DIR"), "/default_files.rs"));

const MANIFEST: &str = "data/state/defaults.json";

#[derive(Debug, Default, Serialize, Deserialize)]
struct Manifest {
    /// Path relative to the data dir → sha256 of the contents installed there.
    installed: BTreeMap<String, String>,
}

/// What [`install`] did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct InstallReport {
    pub installed: usize,
    pub updated: usize,
    /// Files the user changed, left as they are.
    pub kept: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum DefaultsError {
    #[error("cannot install default file {path}")]
    Write {
        path: String,
        #[source]
        source: StateError,
    },
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create folder for {path}")]
    Folder {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot record installed defaults")]
    Manifest(#[source] StateError),
}

fn digest(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().map(|byte| format!("{byte:02x}")).collect();
    format!("sha256:{hex}")
}

/// Installs missing defaults and refreshes unedited ones under `root`, and says so in the log.
pub fn install(root: &Path) -> Result<InstallReport, DefaultsError> {
    let report = install_files(root, DEFAULT_FILES)?;
    tracing::info!(
        installed = report.installed,
        updated = report.updated,
        kept_user_edits = report.kept,
        "default identities and skills checked"
    );
    Ok(report)
}

fn install_files(root: &Path, files: &[(&str, &[u8])]) -> Result<InstallReport, DefaultsError> {
    let manifest_path = root.join(MANIFEST);
    let mut manifest: Manifest = state::read_json(&manifest_path).map_err(DefaultsError::Manifest)?.unwrap_or_default();
    let before = manifest.installed.clone();
    let mut report = InstallReport::default();
    for (relative, contents) in files {
        let path = root.join(relative);
        let wanted = digest(contents);
        let on_disk = match fs::read(&path) {
            Ok(bytes) => Some(digest(&bytes)),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(DefaultsError::Read { path: relative.to_string(), source }),
        };
        let recorded = manifest.installed.get(*relative);
        match on_disk {
            Some(current) if current == wanted => {}
            // Unchanged since we installed it: safe to bring up to date.
            Some(current) if recorded == Some(&current) => {
                write(root, relative, contents)?;
                report.updated += 1;
            }
            Some(_) => {
                report.kept += 1;
                continue;
            }
            None => {
                write(root, relative, contents)?;
                report.installed += 1;
            }
        }
        manifest.installed.insert(relative.to_string(), wanted);
    }
    if manifest.installed != before {
        state::write_json(&manifest_path, &manifest).map_err(DefaultsError::Manifest)?;
    }
    Ok(report)
}

fn write(root: &Path, relative: &str, contents: &[u8]) -> Result<(), DefaultsError> {
    let path = root.join(relative);
    if let Some(parent) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(parent)
            .map_err(|source| DefaultsError::Folder { path: relative.to_string(), source })?;
    }
    state::write_atomic(&path, contents, 0o644)
        .map_err(|source| DefaultsError::Write { path: relative.to_string(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ships_every_role_identity_and_the_bundled_skills() {
        let names: Vec<&str> = DEFAULT_FILES.iter().map(|(name, _)| *name).collect();
        for role in ["assistant", "worker", "researcher", "coder", "memory", "heartbeat"] {
            for file in ["SOUL.md", "IDENTITY.md"] {
                let path = format!("agents/{role}/{file}");
                assert!(names.contains(&path.as_str()), "{path} missing");
            }
        }
        for skill in ["code-review", "github", "summarize", "skill-creator", "web-research"] {
            let path = format!("skills/{skill}/SKILL.md");
            assert!(names.contains(&path.as_str()), "{path} missing");
        }
    }

    #[test]
    fn installs_updates_unedited_files_and_keeps_edited_ones() {
        let root = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(root.path().join("data/state")).expect("state dir");
        let v1: &[(&str, &[u8])] = &[("agents/a/SOUL.md", b"one"), ("agents/b/SOUL.md", b"one")];
        let report = install_files(root.path(), v1).expect("first install");
        assert_eq!(report, InstallReport { installed: 2, updated: 0, kept: 0 });

        // The user edits b; a new release changes both.
        fs::write(root.path().join("agents/b/SOUL.md"), "mine").expect("edit");
        let v2: &[(&str, &[u8])] = &[("agents/a/SOUL.md", b"two"), ("agents/b/SOUL.md", b"two")];
        let report = install_files(root.path(), v2).expect("second install");
        assert_eq!(report, InstallReport { installed: 0, updated: 1, kept: 1 });
        assert_eq!(fs::read_to_string(root.path().join("agents/a/SOUL.md")).expect("a"), "two");
        assert_eq!(fs::read_to_string(root.path().join("agents/b/SOUL.md")).expect("b"), "mine");

        // Deleting a file brings the default back; running again changes nothing.
        fs::remove_file(root.path().join("agents/a/SOUL.md")).expect("rm");
        assert_eq!(install_files(root.path(), v2).expect("third").installed, 1);
        assert_eq!(
            install_files(root.path(), v2).expect("fourth"),
            InstallReport { installed: 0, updated: 0, kept: 1 }
        );
    }
}
