//! The pages' memory, watched from outside them. A page's JavaScript heap has a cap of its own
//! (`--max-old-space-size`), but what a page holds outside it (array buffers, images, the DOM)
//! does not, and under gVisor the container's memory cap kills the whole sandbox, browser and
//! runner with it (under runc the kernel ends the renderer, whose `oom_score_adj` Chromium
//! raises). So the runner reads, twenty times a second, each renderer's resident memory and the
//! container's memory in use (its cgroup, or under gVisor the sandbox's own `/proc/meminfo`),
//! and ends the largest renderer when it grows past a page's share or the container comes near
//! its cap: that page crashes, the browser and the other pages go on, and the next answer says
//! why. Processes are not added up: the resident memory each shows counts the pages it shares
//! with the others (under gVisor every Chromium process shows some 330 MiB at rest).
//!
//! A renderer is known by `--type=renderer` in its command line, which Chromium rewrites with
//! spaces for the processes its zygote forks (not NUL-separated as `execve` leaves it).

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
    /// The container's memory in use.
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

/// Why a renderer was ended: its resident bytes then, and the container's memory in use when
/// that was past its cap (else the page alone was past its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    pub resident: u64,
    pub container: Option<u64>,
}

/// The renderers ended for their memory, in turn.
pub type Ended = Arc<Mutex<Vec<Ending>>>;

/// Watches the renderers until `stop` is set; each one ended is noted in `ended`.
pub fn watch(caps: Caps, stop: Arc<AtomicBool>, ended: Ended) {
    let spawned = std::thread::Builder::new().name("browser-memory".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            let processes = processes();
            if let Some((pid, ending)) = over(&processes, in_use(caps), caps) {
                // A signal to a process of this container; it may have ended already.
                if rustix::process::Pid::from_raw(pid)
                    .is_some_and(|pid| rustix::process::kill_process(pid, rustix::process::Signal::KILL).is_ok())
                {
                    ended.lock().unwrap_or_else(PoisonError::into_inner).push(ending);
                }
            }
            std::thread::sleep(EVERY);
        }
    });
    if let Err(error) = spawned {
        eprintln!("baaaht-agent browser: the pages' memory cannot be watched: {error}");
    }
}

/// Stops (`pause`) or continues every page's renderer, all of its threads at once: its
/// scripts, timers and workers (a dedicated or a service worker runs in a renderer too, where
/// stopping the page's scripts or freezing it leaves them going). Between calls nothing of a
/// page runs.
pub fn pause_pages(pause: bool) {
    let signal = if pause { rustix::process::Signal::STOP } else { rustix::process::Signal::CONT };
    for (pid, _, renderer) in processes() {
        if let Some(pid) = rustix::process::Pid::from_raw(pid).filter(|_| renderer) {
            // silent-ok: a renderer that ended meanwhile needs nothing.
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// A process of the container: its id, its resident bytes, whether it is a page's renderer.
type Process = (i32, u64, bool);

/// The renderer to end, if any: the largest, when it is past a page's cap or the container's
/// memory in use (`in_use`, when known) is past theirs.
fn over(processes: &[Process], in_use: Option<u64>, caps: Caps) -> Option<(i32, Ending)> {
    let &(pid, resident, _) =
        processes.iter().filter(|(.., renderer)| *renderer).max_by_key(|(_, resident, _)| *resident)?;
    let container = in_use.filter(|used| *used > caps.pages);
    (resident > caps.page || container.is_some()).then_some((pid, Ending { resident, container }))
}

/// The processes of this container, with their resident bytes.
fn processes() -> Vec<Process> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return vec![] };
    entries
        .flatten()
        .filter_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let status = std::fs::read_to_string(entry.path().join("status")).ok()?;
            let resident = field_kib(&status, "VmRSS:")? << 10;
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            Some((pid, resident, renderer(&cmdline)))
        })
        .collect()
}

/// Whether a `/proc/N/cmdline` is a renderer's, its arguments split by NULs or by spaces.
fn renderer(cmdline: &[u8]) -> bool {
    cmdline.split(|byte| *byte == 0 || *byte == b' ').any(|arg| arg == b"--type=renderer")
}

/// The container's memory in use, where it can be read: its cgroup's (v2, then v1 without the
/// file pages the kernel can drop), else the sandbox's own `/proc/meminfo` under gVisor, which
/// shows the container's memory as the whole (`MemTotal` no more than the container's cap and
/// a little: runc's `/proc/meminfo` is the host's, and says nothing of the container).
fn in_use(caps: Caps) -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let number = |text: String| text.trim().parse::<u64>().ok();
    if let Some(used) = read("/sys/fs/cgroup/memory.current").and_then(number) {
        return Some(used);
    }
    if let Some(used) = read("/sys/fs/cgroup/memory/memory.usage_in_bytes").and_then(number) {
        let stat = read("/sys/fs/cgroup/memory/memory.stat").unwrap_or_default();
        let inactive = stat
            .lines()
            .find_map(|line| line.strip_prefix("total_inactive_file "))
            .and_then(|value| value.trim().parse::<u64>().ok())
            .unwrap_or(0);
        return Some(used.saturating_sub(inactive));
    }
    sandboxed(&read("/proc/meminfo")?, caps)
}

/// Memory in use by `/proc/meminfo`, when it is the sandbox's own: `MemTotal` within the
/// container's share (`caps.pages` and the 256 MiB left beside it) and 64 MiB.
fn sandboxed(meminfo: &str, caps: Caps) -> Option<u64> {
    let total = field_kib(meminfo, "MemTotal:")? << 10;
    let available = field_kib(meminfo, "MemAvailable:")? << 10;
    (total <= caps.pages + (256 << 20) + (64 << 20)).then(|| total.saturating_sub(available))
}

/// A `/proc` file's `name` field in KiB (`VmRSS:  2048 kB`).
fn field_kib(text: &str, name: &str) -> Option<u64> {
    let line = text.lines().find(|line| line.starts_with(name))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_past_its_share_or_the_container_near_its_cap_ends_the_largest_page() {
        let caps = Caps::of(512, 1 << 30);
        assert_eq!((caps.page >> 20, caps.pages >> 20), (640, 768));
        let mib = |n: u64| n << 20;
        let ending = |resident, container| Ending { resident, container };
        assert_eq!(over(&[(10, mib(100), true), (11, mib(700), true)], None, caps), Some((11, ending(mib(700), None))));
        // The browser's own process is never ended, nor counted: its resident memory counts
        // what it shares with the pages.
        assert_eq!(over(&[(1, mib(900), false), (10, mib(400), true)], None, caps), None);
        assert_eq!(over(&[(1, mib(300), false), (10, mib(400), true)], Some(mib(700)), caps), None);
        // The container near its cap: the largest page goes.
        assert_eq!(
            over(&[(1, mib(300), false), (10, mib(400), true), (11, mib(100), true)], Some(mib(800)), caps),
            Some((10, ending(mib(400), Some(mib(800)))))
        );
        assert_eq!(over(&[(1, mib(900), false)], Some(mib(1000)), caps), None, "no page to end");
        assert_eq!(over(&[], None, caps), None);
        // A small container: a page's share is never more than everything's.
        assert_eq!(Caps::of(512, 512 << 20).page, 256 << 20);
        assert_eq!(field_kib("Name:\tchromium\nVmRSS:\t  2048 kB\nThreads: 9\n", "VmRSS:"), Some(2048));
    }

    #[test]
    fn a_renderer_is_known_by_its_command_line_as_execve_or_the_zygote_leaves_it() {
        assert!(renderer(b"/usr/lib/chromium/chromium\0--type=renderer\0--lang=en-US\0"));
        assert!(renderer(b"/usr/lib/chromium/chromium --type=renderer --crashpad-handler-pid=18 --lang=en-US"));
        assert!(!renderer(b"/usr/lib/chromium/chromium --type=zygote --no-sandbox"));
        assert!(!renderer(b"/usr/lib/chromium/chromium\0--headless\0about:blank\0"));
    }

    #[test]
    fn meminfo_is_the_containers_only_when_it_is_no_larger_than_the_container() {
        let caps = Caps::of(512, 1 << 30);
        // gVisor: the sandbox's own.
        let sandbox = "MemTotal:        1048576 kB\nMemFree:          300000 kB\nMemAvailable:     307200 kB\n";
        assert_eq!(sandboxed(sandbox, caps), Some((1 << 30) - (300 << 20)));
        // runc: the host's.
        let host = "MemTotal:       24684084 kB\nMemFree:        21432928 kB\nMemAvailable:   23807144 kB\n";
        assert_eq!(sandboxed(host, caps), None);
    }
}
