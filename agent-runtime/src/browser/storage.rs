//! The profile's size on the host, watched. A person's profile lives beside the session's
//! workspace on the daemon's disk, outside the workspace's cap, and Chromium lets a site store
//! up to a share of the whole disk (IndexedDB, the Cache API, the file system API). So the
//! runner adds up the profile once a second; past `max_profile` it ends the browser, and
//! before the next start the sites' stored data goes. What makes a login (cookies, saved
//! passwords, preferences) stays.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the profile is added up.
const EVERY: Duration = Duration::from_secs(1);

/// What sites store in a profile's `Default/` (and what Chromium derives from them), removed
/// when the profile is over its cap. Not the logins: `Cookies`, `Login Data`, `Preferences`.
const SITE_DATA: &[&str] = &[
    "IndexedDB",
    "Local Storage",
    "Session Storage",
    "Service Worker",
    "File System",
    "blob_storage",
    "shared_proto_db",
    "WebStorage",
    "Storage",
    "databases",
    "Code Cache",
    "Cache",
    "GPUCache",
    "DawnGraphiteCache",
    "DawnWebGPUCache",
];

/// The bytes of the files under `dir`, links not followed.
pub fn size(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(kind) if kind.is_dir() => size(&entry.path()),
            Ok(kind) if kind.is_file() => entry.metadata().map_or(0, |metadata| metadata.len()),
            _ => 0,
        })
        .sum()
}

/// Removes what sites stored in `profile` (never its logins); the bytes it held.
pub fn clear(profile: &Path) -> u64 {
    let mut freed = 0;
    for name in SITE_DATA {
        let path = profile.join("Default").join(name);
        let held = size(&path);
        if std::fs::remove_dir_all(&path).is_ok() {
            freed += held;
        }
    }
    freed
}

/// Adds up `profile` every second until `stop`; past `cap` bytes, ends the browser's process
/// `browser` and sets `over`.
pub fn watch(profile: std::path::PathBuf, cap: u64, browser: u32, stop: Arc<AtomicBool>, over: Arc<AtomicBool>) {
    let spawned = std::thread::Builder::new().name("browser-profile".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            if size(&profile) > cap {
                over.store(true, Ordering::Relaxed);
                if let Some(pid) = i32::try_from(browser).ok().and_then(rustix::process::Pid::from_raw) {
                    // silent-ok: it may have ended already; the next call starts it again.
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
                return;
            }
            std::thread::sleep(EVERY);
        }
    });
    if let Err(error) = spawned {
        eprintln!("baaaht-agent browser: the profile's size cannot be watched: {error}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sites_data_goes_and_the_logins_stay() {
        let profile = tempfile::tempdir().expect("tempdir");
        let default = profile.path().join("Default");
        std::fs::create_dir_all(default.join("IndexedDB/https_evil.example_0.indexeddb.blob/1"))
            .expect("the test's profile");
        std::fs::write(default.join("IndexedDB/https_evil.example_0.indexeddb.blob/1/00"), vec![7; 3000])
            .expect("the test's profile");
        std::fs::create_dir_all(default.join("Local Storage")).expect("the test's profile");
        std::fs::write(default.join("Local Storage/log"), vec![1; 100]).expect("the test's profile");
        std::fs::write(default.join("Cookies"), vec![2; 500]).expect("the test's profile");
        std::fs::write(default.join("Login Data"), vec![3; 50]).expect("the test's profile");
        std::os::unix::fs::symlink("/", default.join("root")).expect("the test's profile");
        assert_eq!(size(profile.path()), 3650, "a link is not followed");
        assert_eq!(clear(profile.path()), 3100);
        assert_eq!(size(profile.path()), 550);
        assert!(default.join("Cookies").exists() && default.join("Login Data").exists());
    }
}
