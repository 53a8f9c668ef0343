//! Uploads (spec §10.2): a file a user shares through a gateway lands in the session's
//! `uploads/` (`sessions/{id}/data/uploads/`, `/workspace/uploads/` in its tool containers),
//! and the message that shares it names it for the agents.
//!
//! The bytes stream into a hidden temporary file beside the final one, which is synced and then
//! renamed into place without replacing anything (`report.pdf` exists: `report-2.pdf`). The
//! name is cut down to letters, digits, `.`, `-` and `_`; the type is read from the bytes
//! (`infer`), not taken from the sender. Every folder is opened without following links
//! ([`crate::sandbox::shared_dirs`]): the tool containers write in `data/` too.
//!
//! A picture the models can take is also kept, as sent, in the session's `pictures/` (beside
//! `data/`, never mounted into a container): what a turn shows the model is what the user
//! shared, whatever the agents do to `uploads/`, and a fork shows it too.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use rustix::fs::{Mode, OFlags, RenameFlags};
use rustix::io::Errno;

use crate::sandbox::shared_dirs::{self, Owner};
use crate::sandbox::workspace::{Kept, Workspaces};

/// The folder in a session's workspace.
pub const FOLDER: &str = "uploads";
/// The longest name kept, in bytes.
/// Picture types both the Anthropic and the OpenAI APIs take.
pub const PICTURE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/gif", "image/webp"];
/// The largest picture kept for the models (Anthropic takes 5 MB of base64 per image).
pub const MAX_PICTURE_BYTES: u64 = 3_750_000;
/// Recording types a voice note may be heard from (what `sniff` calls OGG and WebM).
pub const RECORDING_TYPES: &[&str] = &["audio/ogg", "audio/opus", "audio/webm", "video/webm"];
/// The largest recording kept to be heard (what one message to the speech container holds).
pub const MAX_RECORDING_BYTES: u64 = 32 << 20;

#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("the file is larger than the {} allowed (sessions.max_upload_bytes)", human_size(*.0))]
    TooLarge(u64),
    #[error("the session's workspace is full: delete files from it, or ask an admin to raise container.resource_limits.disk")]
    Full,
    #[error("cannot store the upload: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Workspace(#[from] crate::sandbox::workspace::WorkspaceError),
}

/// A stored upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stored {
    /// The name in `uploads/`.
    pub name: String,
    pub mime_type: String,
    pub size: u64,
}

impl Stored {
    /// Its path within the session's data folder, as attachments give it.
    pub fn path(&self) -> String {
        format!("{FOLDER}/{}", self.name)
    }
}

pub use baaaht_proto::files::{safe_name, split_extension};

/// Whether `path` is what [`Stored::path`] gives: `uploads/` and a safe name.
pub fn is_upload_path(path: &str) -> bool {
    path.strip_prefix(FOLDER).and_then(|rest| rest.strip_prefix('/')).is_some_and(|name| safe_name(name) == name)
}

/// The type of a file that starts with `head`: what its bytes say, else text when they read as
/// UTF-8 (the declared `text/…` type, or `text/plain`), else `application/octet-stream`.
pub fn sniff(head: &[u8], declared: &str) -> String {
    if let Some(kind) = infer::get(head) {
        return kind.mime_type().to_string();
    }
    let text = match std::str::from_utf8(head) {
        Ok(_) => true,
        // A multi-byte character cut at the end of the head is still text.
        Err(error) => error.error_len().is_none(),
    };
    if !text {
        return "application/octet-stream".into();
    }
    let declared = declared.trim().to_ascii_lowercase();
    let plain = declared.split(';').next().unwrap_or_default().trim();
    if plain.starts_with("text/") && plain.chars().all(|c| c.is_ascii_alphanumeric() || "/.+-".contains(c)) {
        plain.to_string()
    } else {
        "text/plain".into()
    }
}

pub use baaaht_proto::human_size;

/// How a note of an attached file begins ([`mention`]).
pub const MENTION_START: &str = "[attached: ";

/// The line a message gets for each file it shares: what the agents read. The type is the
/// sender's to give, so only a type's characters of it are kept.
pub fn mention(path: &str, mime_type: &str, size: u64) -> String {
    let mime_type: String =
        mime_type.chars().filter(|c| c.is_ascii_alphanumeric() || "/.+-".contains(*c)).take(100).collect();
    let mime_type = if mime_type.is_empty() { "unknown type".to_string() } else { mime_type };
    format!("{MENTION_START}{path} ({mime_type}, {}) in the session's workspace]", human_size(size))
}

/// How many bytes of a file [`sniff`] looks at.
const HEAD: usize = 8192;

/// An upload being written: a hidden temporary file in `uploads/`, removed unless
/// [`Upload::finish`] renames it into place. The session's workspace is held (mounted, where
/// it is a filesystem of its own) until then.
pub struct Upload {
    workspaces: Arc<Workspaces>,
    session: String,
    /// `uploads/`, open until the workspace is released.
    folder: Option<OwnedFd>,
    temp: OsString,
    file: Option<std::fs::File>,
    head: Vec<u8>,
    written: u64,
    max: u64,
    /// What the workspace's cap leaves, when no filesystem enforces it.
    room: Option<u64>,
    released: bool,
}

impl std::fmt::Debug for Upload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upload").field("session", &self.session).field("written", &self.written).finish()
    }
}

impl Upload {
    /// Starts an upload of at most `max` bytes into `session`'s `uploads/`. Blocking: it may
    /// mount the workspace.
    pub fn begin(workspaces: Arc<Workspaces>, session: &str, max: u64) -> Result<Upload, UploadError> {
        let prepared = workspaces.acquire(session)?;
        // Where no filesystem holds the workspace to its cap, the upload gets what is left.
        let room = prepared.checked_cap.map(|cap| cap.saturating_sub(bytes_in(&prepared.path)));
        if room == Some(0) {
            workspaces.release(session);
            return Err(UploadError::Full);
        }
        match temporary_file(&prepared.path) {
            Ok((folder, temp, file)) => Ok(Upload {
                workspaces,
                session: session.to_string(),
                folder: Some(folder),
                temp,
                file: Some(file),
                head: Vec::new(),
                written: 0,
                max,
                room,
                released: false,
            }),
            Err(error) => {
                workspaces.release(session);
                Err(error.into())
            }
        }
    }

    /// Appends `bytes`; past the limit the upload is refused.
    pub fn write(&mut self, bytes: &[u8]) -> Result<(), UploadError> {
        self.written += bytes.len() as u64;
        if self.written > self.max {
            return Err(UploadError::TooLarge(self.max));
        }
        if self.room.is_some_and(|room| self.written > room) {
            return Err(UploadError::Full);
        }
        if self.head.len() < HEAD {
            let take = (HEAD - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
        }
        let file = self.file.as_mut().ok_or_else(|| std::io::Error::other("the upload is closed"))?;
        file.write_all(bytes).map_err(|error| self.full_or_io(error))
    }

    /// A failed write's error: the workspace is full when a filesystem of its own holds it to
    /// its cap; where the cap is only checked (`room`), no space is the data disk's, which the
    /// caller tells as a full disk.
    fn full_or_io(&self, error: std::io::Error) -> UploadError {
        if self.room.is_none() && crate::base::state::is_disk_full(&error) {
            UploadError::Full
        } else {
            UploadError::Io(error)
        }
    }

    /// Syncs the file and renames it to `name` (made safe), or `name-2` … when that is taken.
    /// Blocking.
    pub fn finish(mut self, name: &str, declared: &str) -> Result<Stored, UploadError> {
        let mut file = self.file.take().ok_or_else(|| std::io::Error::other("the upload is closed"))?;
        file.sync_all().map_err(|error| self.full_or_io(error))?;
        let mime_type = sniff(&self.head, declared);
        // A picture or a recording is read back from this very file: nothing a container does
        // meanwhile counts.
        let kept = if PICTURE_TYPES.contains(&mime_type.as_str()) && self.written <= MAX_PICTURE_BYTES {
            Some(Kept::Picture)
        } else if RECORDING_TYPES.contains(&mime_type.as_str()) && self.written <= MAX_RECORDING_BYTES {
            Some(Kept::Recording)
        } else {
            None
        };
        let kept = match kept {
            Some(kept) => {
                use std::io::{Read as _, Seek as _};
                let mut bytes = Vec::with_capacity(self.written as usize);
                file.seek(std::io::SeekFrom::Start(0))?;
                (&mut file).take(self.written).read_to_end(&mut bytes)?;
                Some((kept, bytes))
            }
            None => None,
        };
        drop(file);
        let name = safe_name(name);
        let (stem, extension) = split_extension(&name);
        let folder = self.folder.take().ok_or_else(|| std::io::Error::other("the upload is closed"))?;
        let mut chosen = None;
        for attempt in 1..=1000 {
            let candidate = if attempt == 1 { name.clone() } else { format!("{stem}-{attempt}{extension}") };
            match rustix::fs::renameat_with(
                &folder,
                self.temp.as_os_str(),
                &folder,
                candidate.as_str(),
                RenameFlags::NOREPLACE,
            ) {
                Ok(()) => {
                    chosen = Some(candidate);
                    break;
                }
                Err(Errno::EXIST) => continue,
                Err(errno) => {
                    // silent-ok: the hidden file is removed with the session at worst.
                    let _ = shared_dirs::remove(&folder, &self.temp);
                    return Err(std::io::Error::from(errno).into());
                }
            }
        }
        let Some(name) = chosen else {
            // silent-ok: as above.
            let _ = shared_dirs::remove(&folder, &self.temp);
            return Err(std::io::Error::other(format!("a thousand files are named like {name}")).into());
        };
        self.temp.clear();
        // silent-ok: the rename is done; a failed directory sync only weakens durability.
        let _ = rustix::fs::fsync(&folder);
        drop(folder);
        self.release();
        if let Some((kept, bytes)) = kept {
            if let Err(error) = self.workspaces.keep_shared(&self.session, kept, &name, &bytes) {
                tracing::warn!(session = %self.session, name, %error, ?kept, "cannot keep the shared file for the daemon");
            }
        }
        Ok(Stored { name, mime_type, size: self.written })
    }

    /// Lets go of the workspace; the file and the folder are closed first, or its filesystem
    /// could not be unmounted.
    fn release(&mut self) {
        self.file = None;
        self.folder = None;
        if !self.released {
            self.released = true;
            self.workspaces.release(&self.session);
        }
    }

    /// [`Upload::release`] off the runtime's threads when dropped on one: letting go of the
    /// workspace may unmount it.
    fn release_when_dropped(&mut self) {
        self.file = None;
        self.folder = None;
        if self.released {
            return;
        }
        self.released = true;
        let (workspaces, session) = (self.workspaces.clone(), std::mem::take(&mut self.session));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn_blocking(move || workspaces.release(&session));
            }
            Err(_) => workspaces.release(&session),
        }
    }
}

impl Drop for Upload {
    fn drop(&mut self) {
        self.file = None;
        if let (false, Some(folder)) = (self.temp.is_empty(), &self.folder) {
            // silent-ok: a temporary file left behind is hidden and removed with the session.
            let _ = shared_dirs::remove(folder, &self.temp);
        }
        self.release_when_dropped();
    }
}

/// `uploads/` in the workspace `data` (made when missing) and a new hidden file in it, the
/// containers' to read.
fn temporary_file(data: &std::path::Path) -> std::io::Result<(OwnedFd, OsString, std::fs::File)> {
    let session_dir = data.parent().ok_or_else(|| std::io::Error::other("a workspace without a session folder"))?;
    let session_dir = shared_dirs::open_trusted(session_dir)?;
    let data = shared_dirs::ensure_dir(&session_dir, OsStr::new("data"), Owner::Containers)?;
    let folder = shared_dirs::ensure_dir(&data, OsStr::new(FOLDER), Owner::Containers)?;
    let mut random = [0u8; 8];
    getrandom::fill(&mut random).map_err(|error| std::io::Error::other(error.to_string()))?;
    let temp: String =
        std::iter::once(".upload-".to_string()).chain(random.iter().map(|byte| format!("{byte:02x}"))).collect();
    // Read and write: a picture is read back from it.
    let flags = OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&folder, temp.as_str(), flags, Mode::from_raw_mode(0o600))?;
    if let Err(error) = shared_dirs::hand_over_file(&fd) {
        // silent-ok: the hidden file is empty; the error says what went wrong.
        let _ = shared_dirs::remove(&folder, OsStr::new(&temp));
        return Err(error);
    }
    Ok((folder, temp.into(), std::fs::File::from(fd)))
}

/// The bytes of the regular files under `folder`, links not followed (the runner's way of
/// counting a workspace against its cap).
fn bytes_in(folder: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![folder.to_path_buf()];
    while let Some(folder) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else { continue };
        for entry in entries.flatten() {
            match entry.metadata() {
                Ok(metadata) if metadata.is_dir() => pending.push(entry.path()),
                Ok(metadata) if metadata.is_file() => total += metadata.len(),
                _ => {}
            }
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_keep_only_safe_characters_and_never_climb_out() {
        assert_eq!(safe_name("report.pdf"), "report.pdf");
        assert_eq!(safe_name("../../etc/passwd"), "passwd");
        assert_eq!(safe_name("C:\\Users\\me\\photo 1.JPG"), "photo_1.JPG");
        assert_eq!(safe_name(".bashrc"), "bashrc");
        assert_eq!(safe_name(".."), "upload");
        assert_eq!(safe_name(""), "upload");
        assert_eq!(safe_name("naïve résumé.txt"), "na_ve_r_sum_.txt");
        assert_eq!(safe_name("a\u{0}b\nc.txt"), "a_b_c.txt");
        let long = format!("{}.tar.gz", "x".repeat(300));
        let cut = safe_name(&long);
        assert_eq!(cut.len(), baaaht_proto::files::MAX_NAME);
        assert!(cut.ends_with("x.gz"), "{cut}");
    }

    #[test]
    fn only_upload_paths_with_safe_names_are_attachments() {
        assert!(is_upload_path("uploads/photo.png"));
        assert!(!is_upload_path("uploads/../secrets"));
        assert!(!is_upload_path("uploads/a/b.png"));
        assert!(!is_upload_path("/etc/passwd"));
        assert!(!is_upload_path("uploads/"));
        assert!(!is_upload_path("uploadsx/photo.png"));
    }

    #[test]
    fn the_bytes_decide_the_type() {
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR";
        assert_eq!(sniff(png, "text/plain"), "image/png");
        assert_eq!(sniff(b"%PDF-1.7\n", "image/png"), "application/pdf");
        assert_eq!(sniff(b"hello, world\n", "text/markdown; charset=utf-8"), "text/markdown");
        assert_eq!(sniff(b"hello", "image/png"), "text/plain");
        assert_eq!(sniff(b"caf\xc3", ""), "text/plain");
        assert_eq!(sniff(b"\xff\xfe\x00\x01garbage\x00", "text/plain"), "application/octet-stream");
    }

    #[test]
    fn sizes_read_as_people_say_them() {
        assert_eq!(human_size(512), "512 bytes");
        assert_eq!(human_size(12_345), "12.3 KB");
        assert_eq!(human_size(25 * 1024 * 1024), "26.2 MB");
    }

    /// A file lands under its safe name, a second one with the same name beside it, and a file
    /// past the limit leaves nothing behind.
    #[test]
    fn uploads_land_without_replacing_anything() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sessions = dir.path().join("sessions");
        let workspaces =
            Arc::new(Workspaces::new(sessions.clone(), 1 << 30, crate::base::config::WorkspaceLimit::Checked, 64));
        let mut first = Upload::begin(workspaces.clone(), "s-1", 1024).expect("begin");
        first.write(b"%PDF-1.7\n").expect("write");
        first.write(b"rest").expect("write");
        let stored = first.finish("../My Report.pdf", "application/octet-stream").expect("finish");
        assert_eq!(stored, Stored { name: "My_Report.pdf".into(), mime_type: "application/pdf".into(), size: 13 });
        assert_eq!(stored.path(), "uploads/My_Report.pdf");
        let folder = sessions.join("s-1/data/uploads");
        assert_eq!(std::fs::read(folder.join("My_Report.pdf")).expect("read"), b"%PDF-1.7\nrest");

        let mut second = Upload::begin(workspaces.clone(), "s-1", 1024).expect("begin");
        second.write(b"other").expect("write");
        assert_eq!(second.finish("My Report.pdf", "").expect("finish").name, "My_Report-2.pdf");

        let mut big = Upload::begin(workspaces, "s-1", 4).expect("begin");
        assert!(matches!(big.write(b"12345"), Err(UploadError::TooLarge(4))));
        drop(big);
        let mut names: Vec<_> =
            std::fs::read_dir(&folder).expect("list").map(|entry| entry.expect("entry").file_name()).collect();
        names.sort();
        assert_eq!(names, ["My_Report-2.pdf", "My_Report.pdf"]);
        assert!(!sessions.join("s-1/pictures").exists(), "no picture among them");
    }

    /// A picture is also kept for the models, out of the containers' reach.
    #[test]
    fn a_picture_is_kept_beside_the_workspace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sessions = dir.path().join("sessions");
        let workspaces =
            Arc::new(Workspaces::new(sessions.clone(), 1 << 30, crate::base::config::WorkspaceLimit::Checked, 64));
        let png = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR-and-the-rest".to_vec();
        let mut upload = Upload::begin(workspaces.clone(), "s-1", 1024).expect("begin");
        upload.write(&png).expect("write");
        let stored = upload.finish("cat.png", "application/octet-stream").expect("finish");
        assert_eq!(stored.mime_type, "image/png");
        std::fs::write(sessions.join("s-1/data/uploads/cat.png"), b"changed by an agent").expect("overwrite");
        assert_eq!(
            workspaces.shared("s-1", Kept::Picture, "uploads/cat.png", MAX_PICTURE_BYTES).expect("read"),
            Some(png)
        );
        assert_eq!(workspaces.shared("s-1", Kept::Picture, "uploads/dog.png", MAX_PICTURE_BYTES).expect("read"), None);
        assert_eq!(workspaces.shared("s-2", Kept::Picture, "uploads/cat.png", MAX_PICTURE_BYTES).expect("read"), None);
    }

    /// Where the cap is only checked, an upload gets what the workspace has left.
    #[test]
    fn an_upload_past_the_workspaces_cap_is_refused_as_full() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspaces = Arc::new(Workspaces::new(
            dir.path().join("sessions"),
            10,
            crate::base::config::WorkspaceLimit::Checked,
            64,
        ));
        let mut first = Upload::begin(workspaces.clone(), "s-1", 1024).expect("begin");
        first.write(b"12345678").expect("write");
        first.finish("a.txt", "").expect("finish");
        let mut second = Upload::begin(workspaces.clone(), "s-1", 1024).expect("begin");
        assert!(matches!(second.write(b"123"), Err(UploadError::Full)));
    }

    /// No space on a workspace the daemon only checks is the data disk's, not the workspace's:
    /// raising the workspace's cap would not help.
    #[test]
    fn no_space_is_the_workspaces_only_where_a_filesystem_holds_it_to_its_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let workspaces = Arc::new(Workspaces::new(
            dir.path().join("sessions"),
            1024,
            crate::base::config::WorkspaceLimit::Checked,
            64,
        ));
        let mut upload = Upload::begin(workspaces, "s-1", 1024).expect("begin");
        let no_space = || std::io::Error::from_raw_os_error(Errno::NOSPC.raw_os_error());
        let checked = upload.full_or_io(no_space());
        assert!(matches!(checked, UploadError::Io(_)), "{checked}");
        assert!(crate::base::state::is_disk_full(&checked), "told as a full disk: {checked}");
        upload.room = None;
        assert!(matches!(upload.full_or_io(no_space()), UploadError::Full));
        let other = upload.full_or_io(std::io::Error::from_raw_os_error(Errno::IO.raw_os_error()));
        assert!(matches!(other, UploadError::Io(_)));
    }
}
