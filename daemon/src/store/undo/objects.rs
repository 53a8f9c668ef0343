//! One context's kept file contents, by their SHA-256: `undo/{context}/objects/ab/cdef…`, each
//! a zstd frame. A content kept twice is kept once; what is read back is checked against its
//! name, so a torn or damaged object reads as missing, never as other bytes.

use std::collections::HashSet;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

/// How hard contents are compressed: zstd's default, fast to write and to read.
const LEVEL: i32 = 3;

/// A content's name: its SHA-256, in hex.
pub fn hash_of(bytes: &[u8]) -> String {
    sha2::Sha256::digest(bytes).iter().map(|byte| format!("{byte:02x}")).collect()
}

fn is_hash(name: &str) -> bool {
    name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

#[derive(Debug, Clone)]
pub struct Objects {
    dir: PathBuf,
}

impl Objects {
    pub fn at(dir: PathBuf) -> Objects {
        Objects { dir }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, hash: &str) -> PathBuf {
        self.dir.join(&hash[..2]).join(&hash[2..])
    }

    pub fn has(&self, hash: &str) -> bool {
        is_hash(hash) && self.path(hash).is_file()
    }

    /// Keeps `bytes` (once) and answers their name and the bytes it took on the disk (0 when
    /// they were kept already). Not synced: a daemon killed keeps what the kernel was handed,
    /// and a copy a power cut tore reads as damaged, never as other bytes (a file's undo then
    /// says its earlier content is not kept).
    pub fn put(&self, bytes: &[u8]) -> std::io::Result<(String, u64)> {
        let hash = hash_of(bytes);
        let path = self.path(&hash);
        if path.is_file() {
            return Ok((hash, 0));
        }
        let folder = path.parent().unwrap_or(&self.dir);
        std::fs::create_dir_all(folder)?;
        let packed = zstd::bulk::compress(bytes, LEVEL)?;
        let mut suffix = [0u8; 6];
        getrandom::fill(&mut suffix).map_err(std::io::Error::other)?;
        let temp = folder.join(format!(".tmp-{}", suffix.iter().map(|b| format!("{b:02x}")).collect::<String>()));
        let written = (|| {
            let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&temp)?;
            file.write_all(&packed)?;
            std::fs::rename(&temp, &path)
        })();
        if written.is_err() {
            // silent-ok: the draft may not exist; the write's own error is what is said.
            let _ = std::fs::remove_file(&temp);
        }
        written.map(|()| (hash, packed.len() as u64))
    }

    /// The bytes named `hash` (at most `cap` of them); an error when they are missing or damaged.
    pub fn get(&self, hash: &str, cap: u64) -> std::io::Result<Vec<u8>> {
        if !is_hash(hash) {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("{hash} names no content")));
        }
        let packed = std::fs::read(self.path(hash))?;
        let damaged = |why: String| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("the kept copy is damaged ({why})"))
        };
        let size = zstd::zstd_safe::get_frame_content_size(&packed)
            .map_err(|_unreadable| damaged("no size in its frame".into()))?
            .ok_or_else(|| damaged("no size in its frame".into()))?;
        if size > cap {
            return Err(std::io::Error::new(
                std::io::ErrorKind::FileTooLarge,
                format!("it is {size} bytes, more than {cap}"),
            ));
        }
        let bytes = zstd::bulk::decompress(&packed, size as usize).map_err(|error| damaged(error.to_string()))?;
        if hash_of(&bytes) != hash {
            return Err(std::io::Error::new(std::io::ErrorKind::InvalidData, "the kept copy is damaged"));
        }
        Ok(bytes)
    }

    /// Every object kept: its name and its size on disk.
    pub fn list(&self) -> std::io::Result<Vec<(String, u64)>> {
        let mut found = vec![];
        let folders = match std::fs::read_dir(&self.dir) {
            Ok(folders) => folders,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(found),
            Err(error) => return Err(error),
        };
        for folder in folders {
            let folder = folder?;
            let prefix = folder.file_name().to_string_lossy().into_owned();
            if prefix.len() != 2 || !folder.file_type()?.is_dir() {
                continue;
            }
            for object in std::fs::read_dir(folder.path())? {
                let object = object?;
                let name = format!("{prefix}{}", object.file_name().to_string_lossy());
                if is_hash(&name) {
                    found.push((name, object.metadata()?.len()));
                }
            }
        }
        Ok(found)
    }

    /// Removes every object not in `keep`: how many, and their bytes.
    pub fn sweep(&self, keep: &HashSet<String>) -> std::io::Result<(usize, u64)> {
        let (mut count, mut bytes) = (0, 0);
        for (name, size) in self.list()? {
            if !keep.contains(&name) {
                match std::fs::remove_file(self.path(&name)) {
                    Ok(()) => {
                        count += 1;
                        bytes += size;
                    }
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                    Err(error) => return Err(error),
                }
            }
        }
        Ok((count, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_content_is_kept_once_compressed_and_read_back_checked() {
        let dir = tempfile::tempdir().expect("temp");
        let objects = Objects::at(dir.path().join("objects"));
        let text = "line of a source file\n".repeat(1000);
        let (hash, took) = objects.put(text.as_bytes()).expect("put");
        assert!(took > 0);
        assert_eq!(objects.put(text.as_bytes()).expect("again"), (hash.clone(), 0));
        let listed = objects.list().expect("list");
        assert_eq!(listed.len(), 1);
        assert!(listed[0].1 < text.len() as u64 / 10, "{listed:?}");
        assert_eq!(objects.get(&hash, 1 << 20).expect("get"), text.as_bytes());
        assert!(objects.get(&hash, 10).is_err(), "more than the cap");
        // A damaged copy reads as damaged, never as other bytes.
        let other = zstd::bulk::compress(b"other", 3).expect("the test's files");
        std::fs::write(objects.path(&hash), other).expect("the test's files");
        assert!(objects.get(&hash, 1 << 20).is_err());
        assert!(objects.get("../../etc/passwd", 10).is_err());
        let (kept, _) = objects.put(b"kept").expect("put");
        let (count, _) = objects.sweep(&HashSet::from([kept.clone()])).expect("sweep");
        assert_eq!(count, 1);
        assert!(objects.has(&kept) && !objects.has(&hash));
    }
}
