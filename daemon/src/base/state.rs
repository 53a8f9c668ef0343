//! Atomic state files: every file the daemon owns is replaced whole (temp file in the same
//! folder, fsync, rename, fsync of the folder), so a crash leaves the old or the new version,
//! never a torn one.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::Serialize;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot write {}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}; the file is left as it is: fix or move it aside", path.display())]
    Corrupt { path: PathBuf, line: usize, column: usize, message: String },
    #[error("cannot encode state for {}", path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },
}

/// What a person is told when the daemon cannot keep their words because its disk is full
/// (the operator's log has the file and the error).
pub const DISK_FULL: &str = "baaaht cannot save anything right now: the disk it keeps its data on is full. \
                             Nothing was kept; try again once the person who runs baaaht has made room.";

/// What a person is told when their message was kept but the reply to it could not be.
pub const DISK_FULL_REPLY: &str = "baaaht could not save its reply: the disk it keeps its data on is full. \
                                   Your message is kept; ask again once the person who runs baaaht has made room.";

/// What a person is told when their message was kept but no agent could start to answer it.
pub const DISK_FULL_TURN: &str = "baaaht could not answer: the disk it keeps its data on is full. \
                                  Your message is kept; ask again once the person who runs baaaht has made room.";

/// What a caller is told (a model, through a tool's error) when work cannot start for want of
/// space.
pub const DISK_FULL_WORK: &str = "the disk baaaht keeps its data on is full; \
                                  try again once the person who runs baaaht has made room";

/// Whether `error` (or one of its sources) is a write that failed for want of space.
pub fn is_disk_full(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(io) = error.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::StorageFull || io.kind() == std::io::ErrorKind::QuotaExceeded {
                return true;
            }
        }
        next = error.source();
    }
    false
}

/// Creates folder `path` and the folders above it that are missing, each 0700 (what the data
/// dir holds is its owner's alone, whichever command makes it first).
pub fn private_dir(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    fs::DirBuilder::new().recursive(true).mode(0o700).create(path)
}

/// Replaces `path` with `bytes` atomically and durably; the file gets `mode`.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> Result<(), StateError> {
    let error = |source| StateError::Write { path: path.to_path_buf(), source };
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("state");
    let mut suffix = [0u8; 6];
    getrandom::fill(&mut suffix).map_err(|source| error(std::io::Error::other(source)))?;
    let suffix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    let temp = dir.join(format!(".{name}.tmp-{suffix}"));
    let result = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).mode(mode).open(&temp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        fs::rename(&temp, path)?;
        File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        // silent-ok: the temp file may not exist; the write error below is what matters.
        let _ = fs::remove_file(&temp);
    }
    result.map_err(error)
}

/// Appends `bytes` to `path` (made 0600 when new) and syncs them: on disk when this returns.
/// A write that fails part way is cut off again, so the file never keeps half a record.
pub fn append_synced(path: &Path, bytes: &[u8]) -> Result<(), StateError> {
    let error = |source| StateError::Write { path: path.to_path_buf(), source };
    let mut file = OpenOptions::new().create(true).append(true).mode(0o600).open(path).map_err(error)?;
    let before = file.metadata().map_err(error)?.len();
    if let Err(failed) = file.write_all(bytes).and_then(|()| file.sync_data()) {
        // silent-ok: the write's own error is the one to report.
        let _ = file.set_len(before);
        return Err(error(failed));
    }
    if before == 0 {
        // A new file: its name in the folder is made durable too.
        let dir = path.parent().unwrap_or(Path::new("."));
        File::open(dir).and_then(|dir| dir.sync_all()).map_err(error)?;
    }
    Ok(())
}

/// Changes to a state file kept as synced lines beside it (`{name}.journal`) until there are
/// enough to fold them into the file: a change costs one short appended line, not the whole
/// file written again. The owner keeps the file in memory, applies each change to it, and
/// writes it whole when [`Journal::keep`] says so; a journal whose folding a crash cut short
/// is replayed on a file that has some of it, so changes must be idempotent.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    lines: usize,
    fold_after: usize,
}

impl Journal {
    /// The journal at `path` and its changes, oldest first; a last line a crash cut short is
    /// dropped with a warning (its change was never acknowledged).
    pub fn open<C: DeserializeOwned>(path: PathBuf, fold_after: usize) -> Result<(Journal, Vec<C>), StateError> {
        let text = match fs::read_to_string(&path) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(StateError::Read { path, source }),
        };
        let mut changes = vec![];
        for line in text.lines() {
            match serde_json::from_str::<C>(line) {
                Ok(change) => changes.push(change),
                Err(error) => tracing::warn!(%error, journal = %path.display(), "a cut line in a journal is dropped"),
            }
        }
        let lines = text.lines().count();
        Ok((Journal { path, lines, fold_after: fold_after.max(1) }, changes))
    }

    /// A journal at `path` taken as empty (one that could not be read is replaced by the next
    /// fold).
    pub fn empty(path: PathBuf, fold_after: usize) -> Journal {
        Journal { path, lines: 0, fold_after: fold_after.max(1) }
    }

    /// Whether the journal has lines to fold.
    pub fn is_empty(&self) -> bool {
        self.lines == 0
    }

    /// Keeps `change` (already applied to the owner's file): a synced line, or `Ok(false)`
    /// when the journal is long enough that the owner must write the file whole instead (and
    /// then call [`Journal::folded`]).
    pub fn keep<C: Serialize>(&mut self, change: &C) -> Result<bool, StateError> {
        if self.lines + 1 >= self.fold_after {
            return Ok(false);
        }
        let mut line =
            serde_json::to_vec(change).map_err(|source| StateError::Encode { path: self.path.clone(), source })?;
        line.push(b'\n');
        append_synced(&self.path, &line)?;
        self.lines += 1;
        Ok(true)
    }

    /// The owner wrote its file whole: the journal's lines are in it, and the journal goes.
    pub fn folded(&mut self) -> Result<(), StateError> {
        match fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(StateError::Write { path: self.path.clone(), source }),
        }
        self.lines = 0;
        Ok(())
    }
}

/// Writes `value` as pretty JSON with [`write_atomic`], mode 0600.
pub fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<(), StateError> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|source| StateError::Encode { path: path.to_path_buf(), source })?;
    bytes.push(b'\n');
    write_atomic(path, &bytes, 0o600)
}

/// Reads a JSON state file; `None` when it does not exist. A file that does not parse is an
/// error naming line and column, and is never overwritten by the caller's defaults.
pub fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, StateError> {
    let bytes = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StateError::Read { path: path.to_path_buf(), source }),
    };
    serde_json::from_slice(&bytes).map(Some).map_err(|error| StateError::Corrupt {
        path: path.to_path_buf(),
        line: error.line(),
        column: error.column(),
        message: error.to_string(),
    })
}

/// Reads a JSON state file the daemon can start over without (a ledger, not configuration):
/// a missing file gives `fresh`; one that does not parse is renamed to `{name}.corrupt-{pid}`
/// (kept, never lost), a warning names both, and `fresh` is used.
pub fn read_json_or_set_aside<T: DeserializeOwned>(path: &Path, fresh: impl FnOnce() -> T) -> T {
    match read_json(path) {
        Ok(Some(value)) => value,
        Ok(None) => fresh(),
        Err(error) => {
            let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            let aside = path.with_file_name(format!("{name}.corrupt-{}", std::process::id()));
            tracing::warn!(%error, kept_as = %aside.display(), "a state file does not parse; starting a new one and keeping the old aside");
            // silent-ok: if it cannot be moved, the next write replaces it; the warning names it.
            let _ = fs::rename(path, &aside);
            fresh()
        }
    }
}

/// Seconds since the Unix epoch.
pub fn now_seconds() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

/// `seconds` since the Unix epoch as RFC 3339 in UTC, e.g. `2026-11-22T10:00:00Z`.
pub fn rfc3339(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let rest = seconds % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", rest / 3_600, rest % 3_600 / 60, rest % 60)
}

/// Now, as [`rfc3339`].
pub fn now_rfc3339() -> String {
    rfc3339(now_seconds())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_full_disk_is_known_through_the_errors_that_wrap_it() {
        let full = StateError::Write { path: "/d/state/x.json".into(), source: std::io::Error::from_raw_os_error(28) };
        let wrapped = crate::store::sessions::SessionError::Index(full);
        assert!(is_disk_full(&wrapped));
        let denied = StateError::Write { path: "/d/x".into(), source: std::io::Error::from_raw_os_error(13) };
        assert!(!is_disk_full(&denied));
    }

    #[test]
    fn formats_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_795_343_405), "2026-11-22T10:30:05Z");
    }

    #[test]
    fn replaces_whole_files_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("state.json");
        write_json(&path, &vec![1, 2, 3]).expect("first");
        write_json(&path, &vec![4]).expect("second");
        assert_eq!(read_json::<Vec<u32>>(&path).expect("read"), Some(vec![4]));
        let names: Vec<_> = fs::read_dir(dir.path()).expect("ls").map(|e| e.expect("entry").file_name()).collect();
        assert_eq!(names, vec![std::ffi::OsString::from("state.json")]);
        let mode = fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn missing_is_none_and_corrupt_is_an_error_with_position() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("s.json");
        assert_eq!(read_json::<Vec<u32>>(&path).expect("missing"), None);
        fs::write(&path, "[1,\n 2,\n oops]").expect("write");
        let error = read_json::<Vec<u32>>(&path).expect_err("corrupt");
        assert!(error.to_string().contains("s.json:3:2:"), "{error}");
        assert_eq!(fs::read_to_string(&path).expect("kept"), "[1,\n 2,\n oops]");
    }
}
