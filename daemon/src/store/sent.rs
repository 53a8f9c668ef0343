//! Files the agents send to people: the `message` tool's `files` (DESIGN.md §10.4). The runner
//! copies each into its IPC folder beside the message (`messages/{id}.files/NAME`); the daemon
//! keeps them in the session's `sent/` (beside `data/`, only the daemon's: a container cannot
//! change one after it was sent), names them in the message's event as `sent/NAME`, and gives
//! them to whoever may read the conversation (DownloadFile), so each channel shows them its own
//! way.

use std::ffi::OsStr;
use std::os::fd::AsFd;

use baaaht_proto::{SENT_FILES_MAX, SENT_FILE_MAX_BYTES};

use crate::sandbox::shared_dirs;
use crate::sandbox::workspace::{Workspaces, SENT};
use crate::store::sessions::log::Attachment;

/// Why a message's files cannot be kept: the message is set aside with it, for the log.
///
/// Each message carries its cause's text, so none is a `source` (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
pub enum SentError {
    #[error("it sends {0} files, more than the {SENT_FILES_MAX} a message may")]
    TooMany(usize),
    #[error("the file name `{0}` is not a safe one")]
    UnsafeName(String),
    #[error("the file `{0}` is not there (or not a regular file)")]
    Missing(String),
    /// The message holds the cause too: it is set aside with this sentence alone.
    #[error("the file `{name}` cannot be read: {error}")]
    Read { name: String, error: std::io::Error },
    #[error("the file `{name}` cannot be kept: {error}")]
    Keep { name: String, error: std::io::Error },
}

/// How the daemon names an answer it spoke (`spoken-{turn}.ogg`), a voice note on the channels.
pub const SPOKEN_PREFIX: &str = "spoken-";

/// Whether a file sent at `path` (`sent/NAME`) of type `mime_type` is a voice note the channels
/// play as one: an answer the daemon spoke.
pub fn is_voice_note(path: &str, mime_type: &str) -> bool {
    matches!(mime_type, "audio/ogg" | "audio/opus")
        && name_of(path).is_some_and(|name| name.starts_with(SPOKEN_PREFIX) && name.ends_with(".ogg"))
}

/// The name in `sent/` an attachment's `path` (`sent/NAME`) gives, when it is one.
pub fn name_of(path: &str) -> Option<&str> {
    let name = path.strip_prefix(SENT)?.strip_prefix('/')?;
    (crate::store::uploads::safe_name(name) == name).then_some(name)
}

/// What the file `name` is: what its bytes say, else what its name says of a text file.
pub fn mime_of(name: &str, bytes: &[u8]) -> String {
    crate::store::uploads::sniff(&bytes[..bytes.len().min(8192)], declared(name))
}

/// What a file's name says it is when its bytes do not (text files, mostly).
fn declared(name: &str) -> &'static str {
    let (_, extension) = crate::store::uploads::split_extension(name);
    match extension.to_ascii_lowercase().as_str() {
        ".csv" => "text/csv",
        ".md" | ".markdown" => "text/markdown",
        ".html" | ".htm" => "text/html",
        ".ics" => "text/calendar",
        ".vcf" => "text/vcard",
        _ => "text/plain",
    }
}

/// Keeps the files `names` of the folder `files` (a message's, in a container's IPC folder) in
/// `session`'s `sent/`: their attachments, or why the message cannot be delivered (for the log).
pub fn keep(
    workspaces: &Workspaces,
    session: &str,
    files: impl AsFd,
    names: &[String],
) -> Result<Vec<Attachment>, SentError> {
    if names.len() > SENT_FILES_MAX {
        return Err(SentError::TooMany(names.len()));
    }
    let mut attachments = vec![];
    for name in names {
        if crate::store::uploads::safe_name(name) != *name {
            return Err(SentError::UnsafeName(name.clone()));
        }
        let bytes = match shared_dirs::read_regular(&files, OsStr::new(name), SENT_FILE_MAX_BYTES) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => return Err(SentError::Missing(name.clone())),
            Err(error) => return Err(SentError::Read { name: name.clone(), error }),
        };
        let kept = workspaces
            .keep_sent(session, name, &bytes)
            .map_err(|error| SentError::Keep { name: name.clone(), error })?;
        attachments.push(Attachment {
            path: format!("{SENT}/{kept}"),
            session: session.to_string(),
            mime_type: mime_of(&kept, &bytes),
            size_bytes: bytes.len() as u64,
        });
    }
    Ok(attachments)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_safe_name_in_sent_is_a_sent_path() {
        assert_eq!(name_of("sent/chart.png"), Some("chart.png"));
        for refused in ["sent/../data/x", "sent/.hidden", "uploads/chart.png", "sent/", "sent/a/b", "sentx/a"] {
            assert_eq!(name_of(refused), None, "{refused}");
        }
    }

    #[test]
    fn files_are_kept_once_each_under_a_unique_name_with_their_type_and_links_are_refused() {
        let temp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(temp.path().join("sessions")).expect("sessions");
        let workspaces =
            Workspaces::new(temp.path().join("sessions"), 1 << 20, crate::base::config::WorkspaceLimit::Checked, 1);
        let files = temp.path().join("m1.files");
        std::fs::create_dir_all(&files).expect("mkdir");
        std::fs::write(files.join("chart.png"), b"\x89PNG\r\n\x1a\n0000").expect("write");
        std::fs::write(files.join("notes.csv"), b"a,b\n1,2\n").expect("write");
        std::os::unix::fs::symlink("/etc/passwd", files.join("passwd")).expect("link");
        let dir = shared_dirs::open_trusted(&files).expect("open");
        let kept = keep(&workspaces, "s1", &dir, &["chart.png".into(), "notes.csv".into()]).expect("kept");
        assert_eq!(kept[0].path, "sent/chart.png");
        assert_eq!(kept[0].mime_type, "image/png");
        assert_eq!((kept[1].path.as_str(), kept[1].mime_type.as_str()), ("sent/notes.csv", "text/csv"));
        let again = keep(&workspaces, "s1", &dir, &["chart.png".into()]).expect("kept again");
        assert_eq!(again[0].path, "sent/chart-2.png", "an earlier file of that name stays as it was");
        assert_eq!(
            workspaces.sent("s1", "chart.png", 1 << 20).expect("read").as_deref(),
            Some(&b"\x89PNG\r\n\x1a\n0000"[..])
        );
        assert_eq!(workspaces.sent("s2", "chart.png", 1 << 20).expect("read"), None, "another session has none");
        let refused = keep(&workspaces, "s1", &dir, &["passwd".into()]).expect_err("a link").to_string();
        assert!(refused.contains("a symlink, not a file"), "{refused}");
        let refused = keep(&workspaces, "s1", &dir, &["../m1.files/chart.png".into()]).expect_err("a path").to_string();
        assert!(refused.contains("not a safe one"), "{refused}");
    }
}
