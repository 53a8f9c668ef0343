//! A gateway's kept state (the web gateway's sign-ins, the email gateway's threads) written
//! as every state file of baaaht is: to a temporary file, synced, renamed over the old one,
//! the folder synced — a crash leaves the old file or the new one, never half of either.

use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

/// Replaces `path` with `bytes` atomically and durably; the file is readable by its owner only.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|name| name.to_str()).unwrap_or("state");
    // Each write its own temporary file, so two writers never share one.
    static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let count = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let temp = dir.join(format!(".{name}.tmp-{}-{count}", std::process::id()));
    let written = (|| {
        let mut out = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(&temp)?;
        out.write_all(bytes)?;
        out.sync_all()?;
        std::fs::rename(&temp, path)?;
        std::fs::File::open(dir)?.sync_all()
    })();
    if written.is_err() {
        // silent-ok: the temporary file may not exist; the write's own error is what matters.
        let _ = std::fs::remove_file(&temp);
    }
    written
}
