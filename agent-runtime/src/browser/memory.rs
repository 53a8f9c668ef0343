//! The pages' memory, watched from outside them. A page's JavaScript heap has a cap of its own
//! (`--max-old-space-size`), but what a page holds outside it (array buffers, images, the DOM)
//! does not, and under gVisor the container's memory cap kills the whole sandbox, browser and
//! runner with it. So the runner reads each renderer's resident memory several times a second
//! and ends a renderer that grows past a page's share, or the largest when together they
//! leave the browser too little room: that page crashes, the browser and the other pages go on,
//! and the next answer says why.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the renderers' memory is read.
const EVERY: Duration = Duration::from_millis(100);

/// What a page may hold, and all the pages together.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// One renderer's resident bytes.
    pub page: u64,
    /// Every renderer's together.
    pub pages: u64,
}

impl Caps {
    /// The caps for a page heap of `heap_mib` in a browser container of `memory` bytes: a page
    /// its heap and 128 MiB beside it; the pages together all but 192 MiB (the browser's own
    /// process, its network service and the runner).
    pub fn of(heap_mib: u64, memory: u64) -> Caps {
        let pages = memory.saturating_sub(192 << 20).max(128 << 20);
        Caps { page: ((heap_mib << 20) + (128 << 20)).min(pages), pages }
    }
}

/// A renderer ended for its memory: its resident bytes then.
pub type Ended = Arc<Mutex<Vec<u64>>>;

/// Watches the renderers until `stop` is set; each one ended is noted in `ended`.
pub fn watch(caps: Caps, stop: Arc<AtomicBool>, ended: Ended) {
    let spawned = std::thread::Builder::new().name("browser-memory".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let renderers = renderers();
            if let Some((pid, resident)) = over(&renderers, caps) {
                // A signal to a process of this container; it may have ended already.
                if rustix::process::Pid::from_raw(pid)
                    .is_some_and(|pid| rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok())
                {
                    ended.lock().unwrap_or_else(PoisonError::into_inner).push(resident);
                }
            }
            std::thread::sleep(EVERY);
        }
    });
    if let Err(error) = spawned {
        eprintln!("baaaht-agent browser: the pages' memory cannot be watched: {error}");
    }
}

/// The renderer to end, if any: one past a page's cap, else the largest when together they
/// are past theirs.
fn over(renderers: &[(i32, u64)], caps: Caps) -> Option<(i32, u64)> {
    let largest = renderers.iter().copied().max_by_key(|(_, resident)| *resident)?;
    let together: u64 = renderers.iter().map(|(_, resident)| resident).sum();
    (largest.1 > caps.page || together > caps.pages).then_some(largest)
}

/// Chromium's renderers in this container, with their resident bytes.
fn renderers() -> Vec<(i32, u64)> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return vec![] };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).ok()?;
            let renderer = cmdline.split(|byte| *byte == 0).any(|arg| arg == b"--type=renderer");
            if !renderer {
                return None;
            }
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            Some((pid, resident(&status)?))
        })
        .collect()
}

/// `VmRSS` of a `/proc/N/status`, in bytes.
fn resident(status: &str) -> Option<u64> {
    let line = status.lines().find(|line| line.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib << 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_past_its_share_or_the_largest_past_all_of_theirs_is_ended() {
        let caps = Caps::of(512, 1 << 30);
        assert_eq!((caps.page >> 20, caps.pages >> 20), (640, 832));
        let mib = |n: u64| n << 20;
        assert_eq!(over(&[(10, mib(100)), (11, mib(700))], caps), Some((11, mib(700))));
        assert_eq!(over(&[(10, mib(500)), (11, mib(400))], caps), Some((10, mib(500))));
        assert_eq!(over(&[(10, mib(300)), (11, mib(400))], caps), None);
        assert_eq!(over(&[], caps), None);
        // A small container: a page's share is never more than all of theirs.
        assert_eq!(Caps::of(512, 512 << 20).page, 320 << 20);
        assert_eq!(resident("Name:\tchromium\nVmRSS:\t  2048 kB\nThreads: 9\n"), Some(2 << 20));
    }
}
