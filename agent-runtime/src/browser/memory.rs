//! The pages' memory, watched from outside them. A page's JavaScript heap has a cap of its own
//! (`--max-old-space-size`), but what a page holds outside it (array buffers, images, the DOM)
//! does not, and under gVisor the container's memory cap kills the whole sandbox, browser and
//! runner with it. So the runner reads the resident memory of every process of the container
//! twenty times a second and ends the largest renderer when it grows past a page's share, or
//! when everything together comes near the container's cap: that page crashes, the browser and
//! the other pages go on, and the next answer says why.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the processes' memory is read.
const EVERY: Duration = Duration::from_millis(50);

/// What a page may hold, and every process of the container together.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    /// One renderer's resident bytes.
    pub page: u64,
    /// Every process's together.
    pub pages: u64,
}

impl Caps {
    /// The caps for a page heap of `heap_mib` in a browser container of `memory` bytes: a page
    /// its heap and 128 MiB beside it; everything together all but 256 MiB of the container
    /// (what the sandbox itself and `/tmp` take, and the room a page fills between two
    /// readings).
    pub fn of(heap_mib: u64, memory: u64) -> Caps {
        let pages = memory.saturating_sub(256 << 20).max(128 << 20);
        Caps { page: ((heap_mib << 20) + (128 << 20)).min(pages), pages }
    }
}

/// A renderer ended for its memory: its resident bytes then.
pub type Ended = Arc<Mutex<Vec<u64>>>;

/// Watches the renderers until `stop` is set; each one ended is noted in `ended`.
pub fn watch(caps: Caps, stop: Arc<AtomicBool>, ended: Ended) {
    let spawned = std::thread::Builder::new().name("browser-memory".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let processes = processes();
            if let Some((pid, resident)) = over(&processes, caps) {
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

/// A process of the container: its id, its resident bytes, whether it is a page's renderer.
type Process = (i32, u64, bool);

/// The renderer to end, if any: the largest, when it is past a page's cap or everything
/// together is past theirs.
fn over(processes: &[Process], caps: Caps) -> Option<(i32, u64)> {
    let largest = processes.iter().filter(|(.., renderer)| *renderer).max_by_key(|(_, resident, _)| *resident)?;
    let together: u64 = processes.iter().map(|(_, resident, _)| resident).sum();
    (largest.1 > caps.page || together > caps.pages).then_some((largest.0, largest.1))
}

/// The processes of this container, with their resident bytes.
fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return vec![] };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            let resident = resident(&status)?;
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            let renderer = cmdline.split(|byte| *byte == 0).any(|arg| arg == b"--type=renderer");
            Some((pid, resident, renderer))
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
        assert_eq!((caps.page >> 20, caps.pages >> 20), (640, 768));
        let mib = |n: u64| n << 20;
        assert_eq!(over(&[(10, mib(100), true), (11, mib(700), true)], caps), Some((11, mib(700))));
        // The browser's own process counts toward the whole, but only a page is ended.
        assert_eq!(
            over(&[(1, mib(300), false), (10, mib(400), true), (11, mib(100), true)], caps),
            Some((10, mib(400)))
        );
        assert_eq!(over(&[(1, mib(200), false), (10, mib(300), true)], caps), None);
        assert_eq!(over(&[(1, mib(900), false)], caps), None, "no page to end");
        assert_eq!(over(&[], caps), None);
        // A small container: a page's share is never more than everything's.
        assert_eq!(Caps::of(512, 512 << 20).page, 256 << 20);
        assert_eq!(resident("Name:\tchromium\nVmRSS:\t  2048 kB\nThreads: 9\n"), Some(2 << 20));
    }
}
