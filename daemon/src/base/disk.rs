//! The data dir's disk (spec §5.4): how full it is, read with statvfs(2), and the gate that
//! turns new conversations and uploads away while it is past the critical mark. The watch that
//! reads it, tells the admins and archives early is `ops::disk`.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// How full a filesystem is, as `df` says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Bytes an unprivileged writer may still use.
    pub available: u64,
    /// Bytes in use.
    pub used: u64,
}

impl Usage {
    /// The share in use of what an unprivileged writer could ever have (`df`'s Use%: blocks
    /// reserved for root are not counted as free), in whole percent, rounded up.
    pub fn percent(&self) -> u8 {
        let whole = self.used.saturating_add(self.available);
        if whole == 0 {
            return 0;
        }
        let percent = (u128::from(self.used) * 100).div_ceil(u128::from(whole));
        u8::try_from(percent.min(100)).unwrap_or(100)
    }
}

/// `bytes` as a person reads free space: GiB with one decimal.
pub fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// How full the filesystem holding `path` is.
pub fn usage(path: &Path) -> std::io::Result<Usage> {
    let stat = rustix::fs::statvfs(path)?;
    let unit = if stat.f_frsize > 0 { stat.f_frsize } else { stat.f_bsize };
    let total = stat.f_blocks.saturating_mul(unit);
    let free = stat.f_bfree.saturating_mul(unit);
    Ok(Usage { available: stat.f_bavail.saturating_mul(unit), used: total.saturating_sub(free) })
}

/// Where the disk stands against its marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Fine,
    /// Past the warning mark: the admins are told.
    Warning,
    /// Past the critical mark: new conversations and uploads are refused.
    Critical,
}

/// The disk as last read, shared by what must turn work away while it is nearly full.
#[derive(Debug)]
pub struct DiskGate {
    path: PathBuf,
    level: AtomicU8,
    percent: AtomicU8,
    available: AtomicU64,
}

impl DiskGate {
    /// A gate for the disk of `path`, open until it is read.
    pub fn new(path: PathBuf) -> DiskGate {
        DiskGate { path, level: AtomicU8::new(0), percent: AtomicU8::new(0), available: AtomicU64::new(u64::MAX) }
    }

    /// The folder whose disk this is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keeps what was read and the level it stands at.
    pub fn set(&self, usage: Usage, level: Level) {
        self.percent.store(usage.percent(), Ordering::Relaxed);
        self.available.store(usage.available, Ordering::Relaxed);
        let level = match level {
            Level::Fine => 0,
            Level::Warning => 1,
            Level::Critical => 2,
        };
        self.level.store(level, Ordering::Relaxed);
    }

    pub fn level(&self) -> Level {
        match self.level.load(Ordering::Relaxed) {
            0 => Level::Fine,
            1 => Level::Warning,
            _ => Level::Critical,
        }
    }

    /// What is in use, in percent, as last read.
    pub fn percent(&self) -> u8 {
        self.percent.load(Ordering::Relaxed)
    }

    /// Why new work that writes to the disk is turned away now (a sentence for the person who
    /// asked), or nothing while it may go.
    pub fn refusal(&self, what: &str) -> Option<String> {
        (self.level() == Level::Critical).then(|| {
            format!(
                "{what} cannot start now: the disk baaaht keeps its data on is {}% full. The conversations already open \
                 go on; ask again once the person who runs baaaht has made room.",
                self.percent()
            )
        })
    }

    /// What `baaaht status` lists as degraded, when the disk is past a mark.
    pub fn degraded(&self) -> Option<String> {
        let available = gib(self.available.load(Ordering::Relaxed));
        match self.level() {
            Level::Fine => None,
            Level::Warning => Some(format!(
                "disk: {} is {}% full ({available} free); past the critical mark new conversations and uploads are \
                 refused",
                self.path.display(),
                self.percent()
            )),
            Level::Critical => Some(format!(
                "disk: {} is {}% full ({available} free): new conversations and uploads are refused until there is \
                 room",
                self.path.display(),
                self.percent()
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn use_percent_is_dfs() {
        assert_eq!(Usage { available: 0, used: 0 }.percent(), 0);
        assert_eq!(Usage { available: 10, used: 90 }.percent(), 90);
        // df rounds up: 90.1% is 91%.
        assert_eq!(Usage { available: 999, used: 9001 }.percent(), 91);
        assert_eq!(Usage { available: 0, used: 5 }.percent(), 100);
    }

    #[test]
    fn the_gate_closes_only_past_the_critical_mark_and_says_why() {
        let gate = DiskGate::new("/var/lib/baaaht".into());
        assert_eq!((gate.refusal("a new conversation"), gate.degraded()), (None, None));
        gate.set(Usage { available: 8 << 30, used: 92 << 30 }, Level::Warning);
        assert_eq!(gate.refusal("a new conversation"), None);
        assert!(
            gate.degraded().is_some_and(|why| why.contains("/var/lib/baaaht is 92% full")),
            "{:?}",
            gate.degraded()
        );
        gate.set(Usage { available: 4 << 30, used: 96 << 30 }, Level::Critical);
        let why = gate.refusal("a new conversation").expect("refused");
        assert!(why.starts_with("a new conversation cannot start now: the disk baaaht keeps its data on is 96% full"));
        assert!(gate.degraded().is_some_and(|why| why.contains("refused until there is room")));
    }

    #[test]
    fn a_real_filesystem_reads() {
        let dir = tempfile::tempdir().expect("tempdir");
        let usage = usage(dir.path()).expect("statvfs");
        assert!(usage.used > 0 && usage.percent() <= 100, "{usage:?}");
    }
}
