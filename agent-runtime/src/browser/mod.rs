//! The `browser` tool (DESIGN.md §12): one headless Chromium per session, in a tool container of
//! its own (`baaaht-agent runner --browser`), driven over the DevTools protocol ([`cdp`]). The
//! container has no network: Chromium reaches the web only through the runner's egress proxy,
//! so the daemon's address filter, host rules, approvals, credentials at the edge and taint
//! apply to every request it makes, loopback included (`<-loopback>` takes away Chromium's own
//! exception). WebRTC, QUIC, prefetching and Chromium's own background traffic are off.
//!
//! The profile is the person's own, in the session's folder beside its workspace (not in it: no
//! other tool reads its cookies), so a login survives between turns and goes with the
//! conversation; in a group, each member's browser has a profile of its own. Between calls the page's scripts are stopped:
//! they and their timers run only while the model uses it. A page that stops answering (a script that
//! never yields), crashes (a memory bomb) or opens windows is closed or contained, and the
//! answer says so.

pub mod actions;
pub mod cdp;
pub mod memory;
pub mod page;
pub mod storage;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::{json, Value};

use cdp::{Cdp, CdpError, Event};

use crate::tools::{ToolError, ToolOutput};

/// Where Chromium writes a download before it is named, relative to the workspace.
pub const DOWNLOADING: &str = ".browser/downloading";
/// How long a command that only asks the browser may take.
const QUICK: Duration = Duration::from_secs(10);
/// The window's size (also a screenshot's).
const WINDOW: (u32, u32) = (1280, 900);

/// The browser's limits, from the runner's command line.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The Chromium to start.
    pub chromium: PathBuf,
    /// The most pages (tabs and windows) open at once.
    pub pages: usize,
    /// The most bytes one download may have.
    pub download_bytes: u64,
    /// The most bytes of page text one answer carries.
    pub text_bytes: usize,
    /// The JavaScript heap a page may grow to, in MiB (past it, the page crashes, not the browser).
    pub heap_mib: u64,
    /// The container's memory: the pages are ended before they fill it ([`memory`]).
    pub memory_bytes: u64,
    /// The profile (logins, cookies): a folder of the person's own, outside the workspace.
    pub profile: PathBuf,
    /// The most bytes the profile may hold ([`storage`]).
    pub profile_bytes: u64,
}

/// How the browser is run: its limits, and what the runner gives it.
#[derive(Debug, Clone)]
pub struct Settings {
    pub limits: Limits,
    /// The session's workspace as the container sees it.
    pub workspace: PathBuf,
    /// The runner's egress proxy on the container's loopback.
    pub proxy_port: u16,
    /// The hosts the pages asked for: the only ones the proxy carries.
    pub pages_asked: Arc<PageHosts>,
}

/// The hosts (`host:port`) the browser's pages have asked for, from the protocol's
/// `Network.requestWillBeSent`: the proxy carries a connection only to one of them, so Chromium's
/// own traffic (sign-in, time, updates, field trials) never reaches the daemon or a person.
#[derive(Debug, Default)]
pub struct PageHosts {
    asked: Mutex<std::collections::HashSet<String>>,
    added: tokio::sync::Notify,
}

/// The most hosts noted: a page asking for ever more (to fill the runner's memory) is carried
/// to none past them.
const MOST_HOSTS: usize = 4096;

/// How long a connection waits for its page's request to be seen (the protocol's event and the
/// proxy's connection come on two pipes).
const PAGE_ASKED_WAIT: Duration = Duration::from_millis(1500);

impl PageHosts {
    /// Notes the host of `url`, a page's request.
    pub fn note(&self, url: &str) {
        let Some((scheme, rest)) = url.split_once("://") else { return };
        let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
        let authority = authority.rsplit_once('@').map_or(authority, |(_, host)| host).to_ascii_lowercase();
        let default = match scheme.to_ascii_lowercase().as_str() {
            "http" | "ws" => 80,
            "https" | "wss" => 443,
            _ => return,
        };
        let with_port = match authority.rsplit_once(':') {
            Some((_, port)) if !authority.ends_with(']') && port.parse::<u16>().is_ok() => authority.clone(),
            _ => format!("{authority}:{default}"),
        };
        let mut asked = self.asked.lock().unwrap_or_else(PoisonError::into_inner);
        if asked.len() < MOST_HOSTS {
            asked.insert(with_port);
        }
        drop(asked);
        self.added.notify_waiters();
    }

    fn has(&self, host: &str, port: u16) -> bool {
        let host = host.to_ascii_lowercase();
        let key = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        self.asked.lock().unwrap_or_else(PoisonError::into_inner).contains(&key)
    }

    /// Whether a page asked for `host:port`, waiting a moment for the page's event.
    pub async fn admits(&self, host: &str, port: u16) -> bool {
        let deadline = tokio::time::Instant::now() + PAGE_ASKED_WAIT;
        loop {
            let added = self.added.notified();
            if self.has(host, port) {
                return true;
            }
            if tokio::time::timeout_at(deadline, added).await.is_err() {
                return self.has(host, port);
            }
        }
    }
}

/// What happened beside an action, told with its answer.
#[derive(Debug, Default)]
struct Happened {
    /// Dialogs (alert, confirm, prompt) dismissed, with their text.
    dialogs: Vec<String>,
    /// Windows the page opened that were closed.
    popups_closed: usize,
    /// Page targets created and not yet looked at: (target, opener).
    new_pages: Vec<(String, String)>,
    /// The current page crashed.
    crashed: bool,
    /// Load events of the current page, and its main frame's navigations.
    loads: u64,
    /// The current page's requests under way (by the protocol's request id).
    requests: std::collections::HashSet<String>,
    navigations: u64,
    /// The attachment of the page the counts are of: another page's events are not counted.
    current: String,
    /// Downloads by id: (suggested name, bytes received, total, state).
    downloads: std::collections::HashMap<String, Download>,
    /// The download ids in the order they began: an action takes the first, the rest are
    /// cancelled (a page's own).
    began: Vec<String>,
}

#[derive(Debug, Clone, Default)]
struct Download {
    name: String,
    /// Where it comes from (the last address of its redirects).
    url: String,
    received: u64,
    total: u64,
    state: String,
}

/// The page the tool works on: its target and its attachment.
#[derive(Debug, Clone, Default)]
struct Page {
    target: String,
    session: String,
}

/// A Chromium that runs.
struct Running {
    child: crate::reaper::Spawned,
    cdp: Arc<Cdp>,
    happened: Arc<Mutex<Happened>>,
    changed: Arc<tokio::sync::Notify>,
    page: Page,
    /// The numbers of the last rendering of the page.
    refs: Vec<i64>,
    /// The renderers' memory watch: stopped when the browser goes.
    memory: (memory::Caps, Arc<std::sync::atomic::AtomicBool>, memory::Ended),
}

impl Drop for Running {
    fn drop(&mut self) {
        self.memory.1.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The session's browser: started at its first call, again after it ended or crashed.
pub struct Browser {
    settings: Settings,
    running: Option<Running>,
    /// The profile went past its cap ([`storage`]): the browser is ended, and the sites' data
    /// goes before it starts again.
    profile_over: Arc<std::sync::atomic::AtomicBool>,
    /// What the next answer says of a start that removed the sites' data.
    cleared: Option<String>,
}

impl std::fmt::Debug for Browser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Browser").field("running", &self.running.is_some()).finish_non_exhaustive()
    }
}

/// Why the browser could not do what was asked, as the model reads it.
fn failed(why: impl std::fmt::Display) -> ToolError {
    ToolError::Failed(why.to_string())
}

impl From<CdpError> for ToolError {
    fn from(error: CdpError) -> ToolError {
        failed(error)
    }
}

/// The last PEM certificate of `bundle`: the daemon's egress authority, which it appends to
/// the roots it trusts (`authority.rs`).
fn last_certificate(bundle: &str) -> Option<&str> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let start = bundle.rfind(BEGIN)?;
    let end = bundle[start..].find(END)? + start + END.len();
    Some(&bundle[start..end])
}

impl Browser {
    pub fn new(settings: Settings) -> Browser {
        Browser { settings, running: None, profile_over: Arc::default(), cleared: None }
    }

    /// The flags Chromium starts with.
    fn flags(&self, home: &std::path::Path) -> Vec<String> {
        let settings = &self.settings;
        vec![
            "--headless".into(),
            // The container is the sandbox (gVisor where usable); Chromium's own needs
            // namespaces a container does not give.
            "--no-sandbox".into(),
            "--remote-debugging-pipe".into(),
            format!("--user-data-dir={}", settings.limits.profile.display()),
            format!("--proxy-server=http://127.0.0.1:{}", settings.proxy_port),
            // Loopback too goes through the proxy, where it is refused.
            "--proxy-bypass-list=<-loopback>".into(),
            "--force-webrtc-ip-handling-policy=disable_non_proxied_udp".into(),
            "--webrtc-ip-handling-policy=disable_non_proxied_udp".into(),
            "--disable-quic".into(),
            "--dns-prefetch-disable".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-default-apps".into(),
            "--disable-extensions".into(),
            "--disable-breakpad".into(),
            "--disable-client-side-phishing-detection".into(),
            "--disable-domain-reliability".into(),
            "--disable-component-extensions-with-background-pages".into(),
            "--metrics-recording-only".into(),
            "--no-service-autorun".into(),
            "--variations-server-url=http://0.0.0.0/".into(),
            "--google-base-url=http://0.0.0.0/".into(),
            "--disable-search-engine-choice-screen".into(),
            "--no-first-run".into(),
            "--no-default-browser-check".into(),
            "--no-pings".into(),
            "--disable-gpu".into(),
            "--disable-dev-shm-usage".into(),
            "--mute-audio".into(),
            "--hide-scrollbars".into(),
            "--password-store=basic".into(),
            "--use-mock-keychain".into(),
            // Fewer processes, less memory (each holds its own copy of Chromium's data under
            // gVisor): the network service and the GPU thread in the browser's process, no
            // zygote (it forks nothing a sandbox would need: the container is the sandbox).
            // `NetworkServiceInProcess` without the 2 is the old name, which Chromium 120+
            // ignores. Measured: 180 → 140 MiB for a container with one page.
            "--enable-features=NetworkServiceInProcess2".into(),
            "--no-zygote".into(),
            "--in-process-gpu".into(),
            // Frames of other sites stay in their page's process, whose requests the tool sees.
            "--disable-site-isolation-trials".into(),
            "--disable-features=DnsOverHttps,NetworkPrediction,Translate,MediaRouter,OptimizationHints,AutofillServerCommunication,CertificateTransparencyComponentUpdater,SafeBrowsing,InterestFeedContentSuggestions,PrivacySandboxSettings4,HttpsUpgrades,IsolateOrigins,site-per-process".into(),
            format!("--js-flags=--max-old-space-size={}", settings.limits.heap_mib),
            format!("--window-size={},{}", WINDOW.0, WINDOW.1),
            format!("--disk-cache-dir={}", home.join("cache").display()),
            // The cache is in /tmp, which is memory: kept small.
            "--disk-cache-size=67108864".into(),
            "about:blank".into(),
        ]
    }

    /// Starts Chromium: the profile's locks from another container removed, the daemon's
    /// authority trusted (for hosts whose credentials the edge swaps in), the pipe connected.
    async fn launch(&mut self) -> Result<(), ToolError> {
        let home = PathBuf::from("/tmp/browser-home");
        let profile = self.settings.limits.profile.clone();
        std::fs::create_dir_all(&profile).map_err(|error| failed(format!("cannot make the profile: {error}")))?;
        std::fs::create_dir_all(home.join(".pki/nssdb"))
            .map_err(|error| failed(format!("cannot make the browser's home: {error}")))?;
        // A download a crash left half way is nobody's.
        // silent-ok: usually absent.
        let _ = std::fs::remove_dir_all(self.settings.workspace.join(DOWNLOADING));
        for lock in ["SingletonLock", "SingletonSocket", "SingletonCookie"] {
            // silent-ok: usually absent; a link left by another container is what goes.
            let _ = std::fs::remove_file(profile.join(lock));
        }
        let cap = self.settings.limits.profile_bytes;
        if self.profile_over.swap(false, std::sync::atomic::Ordering::Relaxed) || storage::size(&profile) > cap {
            let freed = storage::clear(&profile);
            self.cleared = Some(format!(
                "the sites' stored data in the browser's profile went past {} MiB, so it was removed ({} MiB); the \
                 logins stay",
                cap >> 20,
                freed >> 20
            ));
        }
        self.trust_authority(&home);
        let log = std::fs::File::create(home.join("chromium.log"))
            .map_err(|error| failed(format!("cannot open the browser's log: {error}")))?;
        // Chromium speaks the protocol on its fds 3 and 4: the shell puts the pipes there.
        let mut command = std::process::Command::new("/bin/sh");
        command
            .arg("-c")
            .arg("exec \"$0\" \"$@\" 3<&0 4>&1 </dev/null >/dev/null")
            .arg(&self.settings.limits.chromium)
            .args(self.flags(&home))
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", home.join(".config"))
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(log);
        let mut child = crate::reaper::spawn(&mut command).map_err(|error| {
            failed(format!("cannot start the browser ({}): {error}", self.settings.limits.chromium.display()))
        })?;
        let (Some(stdin), Some(stdout)) = (child.child.stdin.take(), child.child.stdout.take()) else {
            return Err(failed("the browser's pipes were not made"));
        };
        let writer = tokio::process::ChildStdin::from_std(stdin).map_err(failed)?;
        let reader = tokio::process::ChildStdout::from_std(stdout).map_err(failed)?;
        let (cdp, events) = Cdp::start(writer, reader);
        let happened = Arc::new(Mutex::new(Happened::default()));
        let changed = Arc::new(tokio::sync::Notify::new());
        let caps = memory::Caps::of(self.settings.limits.heap_mib, self.settings.limits.memory_bytes);
        let watching = (caps, Arc::new(std::sync::atomic::AtomicBool::new(false)), memory::Ended::default());
        memory::watch(caps, watching.1.clone(), watching.2.clone());
        storage::watch(profile.clone(), cap, child.child.id(), watching.1.clone(), self.profile_over.clone());
        let mut running =
            Running { child, cdp, happened, changed, page: Page::default(), refs: vec![], memory: watching };
        watch(
            events,
            &running.cdp,
            &running.happened,
            &running.changed,
            (self.settings.limits.pages, &self.settings.pages_asked),
        );
        // The first answer can take a while under gVisor.
        let started = running.cdp.call("", "Browser.getVersion", json!({}), Duration::from_secs(60)).await;
        if let Err(error) = started {
            let log = std::fs::read_to_string(home.join("chromium.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            // silent-ok: it did not start; whatever is left goes with the sweep.
            let _ = running.child.child.kill();
            return Err(failed(format!(
                "the browser did not start ({error}): {}",
                tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
            )));
        }
        running.cdp.call("", "Target.setDiscoverTargets", json!({"discover": true}), QUICK).await?;
        running.cdp.call("", "Browser.setDownloadBehavior", json!({"behavior": "deny"}), QUICK).await?;
        let targets = running.cdp.call("", "Target.getTargets", json!({}), QUICK).await?;
        let first = targets["targetInfos"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|target| target["type"] == "page")
            .and_then(|target| target["targetId"].as_str())
            .map(str::to_string);
        let target = match first {
            Some(target) => target,
            None => {
                let made = running.cdp.call("", "Target.createTarget", json!({"url": "about:blank"}), QUICK).await?;
                made["targetId"].as_str().unwrap_or_default().to_string()
            }
        };
        running.page = attach(&running.cdp, &running.happened, &target).await?;
        self.running = Some(running);
        Ok(())
    }

    /// Adds the daemon's egress authority to Chromium's trust (its NSS database in `home`): the
    /// edge answers for hosts a credential is bound to with certificates it issues.
    fn trust_authority(&self, home: &std::path::Path) {
        let Ok(bundle) = std::fs::read_to_string(crate::egress::TRUST) else { return };
        let Some(authority) = last_certificate(&bundle) else { return };
        if !authority.contains("MII") {
            return;
        }
        let pem = home.join("egress-authority.pem");
        if std::fs::write(&pem, authority).is_err() {
            return;
        }
        let db = format!("sql:{}", home.join(".pki/nssdb").display());
        let run = |args: &[&str]| {
            std::process::Command::new("certutil")
                .args(args)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        };
        let pem = pem.display().to_string();
        let made = std::path::Path::new(&home.join(".pki/nssdb/cert9.db")).exists()
            || run(&["-d", &db, "-N", "--empty-password"]);
        if !made || !run(&["-d", &db, "-A", "-t", "C,,", "-n", "baaaht egress authority", "-i", &pem]) {
            eprintln!("baaaht-agent browser: the egress authority could not be trusted; bound hosts will fail");
        }
    }

    /// The running browser, started if it is not (or no longer).
    async fn running(&mut self) -> Result<&mut Running, ToolError> {
        let alive = match self.running.as_mut() {
            Some(running) => matches!(running.child.wait_timeout(Duration::ZERO), Ok(None)),
            None => false,
        };
        if !alive {
            if self.running.take().is_some() && crate::reaper::active() {
                crate::reaper::sweep();
            }
            self.launch().await?;
        }
        self.running.as_mut().ok_or_else(|| failed("the browser did not start"))
    }

    /// Runs one call (`params` as the model gave them) within `limit`.
    pub async fn call(&mut self, params: &Value, limit: Duration) -> ToolOutput {
        let action = params.get("action").and_then(Value::as_str).unwrap_or_default().to_string();
        if action == "close" {
            return self.close().await;
        }
        let settings = self.settings.clone();
        let running = match self.running().await {
            Ok(running) => running,
            Err(error) => return error.into(),
        };
        // The daemon waits for the call a little longer than its limit; a page closed for not
        // answering, and what is told of it, fit in that margin.
        let limit = limit.saturating_sub(Duration::from_secs(25)).max(Duration::from_secs(5));
        let outcome = actions::act(running, &settings, &action, params, limit).await;
        let mut told = running.told();
        running.quiet().await;
        if self.profile_over.load(std::sync::atomic::Ordering::Relaxed) {
            // Ended by the watch: what the sites stored goes now (and at the next start, if
            // this runner ends first).
            self.running = None;
            if crate::reaper::active() {
                crate::reaper::sweep();
            }
            let freed = storage::clear(&settings.limits.profile);
            self.profile_over.store(false, std::sync::atomic::Ordering::Relaxed);
            told.push_str(&format!(
                "\nthe pages stored more than {} MiB in the browser's profile, so the browser was closed and what the \
                 sites stored was removed ({} MiB); the logins stay",
                settings.limits.profile_bytes >> 20,
                freed >> 20
            ));
        }
        if let Some(cleared) = self.cleared.take() {
            told = format!("{cleared}\n{told}");
        }
        let told = told.trim().to_string();
        let mut output = outcome.unwrap_or_else(ToolOutput::from);
        if !told.is_empty() {
            if !output.content.is_empty() && !output.content.ends_with('\n') {
                output.content.push('\n');
            }
            output.content.push_str(&told);
        }
        output
    }

    /// Closes the browser; its profile (logins) stays in the workspace.
    async fn close(&mut self) -> ToolOutput {
        let Some(mut running) = self.running.take() else {
            return ToolOutput { content: "the browser was not open".into(), ..ToolOutput::default() };
        };
        // Its pages, stopped between calls, end with it.
        memory::pause_pages(false);
        // silent-ok: it may be gone already; the kill below ends it either way.
        let _ = running.cdp.call("", "Browser.close", json!({}), QUICK).await;
        if matches!(running.child.wait_timeout(Duration::from_secs(5)), Ok(None)) {
            // silent-ok: it exited meanwhile.
            let _ = running.child.child.kill();
        }
        if crate::reaper::active() {
            crate::reaper::sweep();
        }
        ToolOutput {
            content: "the browser is closed; its logins are kept for this conversation".into(),
            ..ToolOutput::default()
        }
    }
}

impl Running {
    /// What happened beside the action (dialogs dismissed, windows closed, a crash), said once.
    fn told(&mut self) -> String {
        let mut happened = self.happened.lock().unwrap_or_else(PoisonError::into_inner);
        let mut told = vec![];
        if !happened.dialogs.is_empty() {
            let dialogs: Vec<String> =
                happened.dialogs.drain(..).take(3).map(|text| page::tidy(&text).chars().take(120).collect()).collect();
            told.push(format!("the page's dialogs were dismissed: {}", dialogs.join(" | ")));
        }
        if happened.popups_closed > 0 {
            told.push(format!("the page opened {} windows; they were closed", happened.popups_closed));
            happened.popups_closed = 0;
        }
        told.join("\n")
    }

    /// Why the current page crashed, said once: ended for its memory, or by itself.
    fn crash(&self) -> String {
        let ended = std::mem::take(&mut *self.memory.2.lock().unwrap_or_else(PoisonError::into_inner));
        let caps = self.memory.0;
        match ended.last() {
            Some(memory::Ending { resident, container: None }) => format!(
                "the page was closed: it held {} MiB of memory, more than a page may ({} MiB)",
                resident >> 20,
                caps.page >> 20
            ),
            Some(memory::Ending { resident, container: Some(used) }) => format!(
                "the page was closed: the browser's container had {} MiB of memory in use, more than its pages \
                 may ({} MiB), and this page held the most ({} MiB)",
                used >> 20,
                caps.pages >> 20,
                resident >> 20
            ),
            None => "the page crashed (it may have used more memory than a page may)".into(),
        }
    }

    /// Waits until `check` holds for what happened, or `limit` passes, or the page crashes;
    /// whether it held.
    async fn until(&self, limit: Duration, check: impl Fn(&Happened) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let notified = self.changed.notified();
            {
                let now = self.happened.lock().unwrap_or_else(PoisonError::into_inner);
                if check(&now) {
                    return true;
                }
                if now.crashed {
                    return false;
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return check(&self.happened.lock().unwrap_or_else(PoisonError::into_inner));
            }
        }
    }

    /// Between calls nothing of a page runs: every other page (a window a page opened and the
    /// tool did not follow) is closed, the page's scripts are stopped, and its renderers (its
    /// workers with it) are stopped until the next call ([`memory::pause_pages`]).
    async fn quiet(&self) {
        if let Ok(targets) = self.cdp.call("", "Target.getTargets", json!({}), QUICK).await {
            let others = targets["targetInfos"].as_array().into_iter().flatten().filter(|target| {
                target["type"] == "page" && target["targetId"].as_str() != Some(self.page.target.as_str())
            });
            for other in others {
                // silent-ok: it may have closed itself meanwhile.
                let _ = self.cdp.call("", "Target.closeTarget", json!({"targetId": other["targetId"]}), QUICK).await;
            }
        }
        // silent-ok: a page that cannot be stopped (gone, crashed) is dealt with at the next call.
        let _ = self
            .cdp
            .call(&self.page.session, "Emulation.setScriptExecutionDisabled", json!({"value": true}), QUICK)
            .await;
        // What the page let go of is collected first: a stopped renderer runs no idle
        // collection, and would hold the garbage of its last load until the next call.
        // silent-ok: a page that cannot collect is stopped as it is.
        let _ = self.cdp.call(&self.page.session, "HeapProfiler.collectGarbage", json!({}), QUICK).await;
        memory::pause_pages(true);
    }

    /// Replaces the current page with a blank one (the old one hung or crashed).
    async fn fresh_page(&mut self) -> Result<(), ToolError> {
        // silent-ok: a crashed page may be gone already.
        let _ = self.cdp.call("", "Target.closeTarget", json!({"targetId": self.page.target}), QUICK).await;
        let made = self.cdp.call("", "Target.createTarget", json!({"url": "about:blank"}), QUICK).await?;
        let target = made["targetId"].as_str().unwrap_or_default().to_string();
        self.page = attach(&self.cdp, &self.happened, &target).await?;
        self.refs.clear();
        self.happened.lock().unwrap_or_else(PoisonError::into_inner).crashed = false;
        Ok(())
    }
}

/// Attaches to the page `target` and turns on what the tool follows of it.
async fn attach(cdp: &Cdp, happened: &Mutex<Happened>, target: &str) -> Result<Page, ToolError> {
    let attached = cdp.call("", "Target.attachToTarget", json!({"targetId": target, "flatten": true}), QUICK).await?;
    let session = attached["sessionId"].as_str().unwrap_or_default().to_string();
    {
        let mut now = happened.lock().unwrap_or_else(PoisonError::into_inner);
        now.current = session.clone();
        now.requests.clear();
    }
    for (method, params) in [
        ("Page.enable", json!({})),
        ("Inspector.enable", json!({})),
        ("Network.enable", json!({"maxTotalBufferSize": 0, "maxResourceBufferSize": 0})),
        ("Emulation.setScriptExecutionDisabled", json!({"value": false})),
        // The page has the focus whether or not a window does, as a person's page in front.
        ("Emulation.setFocusEmulationEnabled", json!({"enabled": true})),
    ] {
        cdp.call(&session, method, params, QUICK).await?;
    }
    Ok(Page { target: target.to_string(), session })
}

/// Follows the browser's events: dialogs dismissed, windows past `pages` closed, loads, crashes
/// and downloads noted for the actions that wait on them.
fn watch(
    mut events: tokio::sync::mpsc::UnboundedReceiver<Event>,
    cdp: &Arc<Cdp>,
    happened: &Arc<Mutex<Happened>>,
    changed: &Arc<tokio::sync::Notify>,
    (pages, asked): (usize, &Arc<PageHosts>),
) {
    let (cdp, happened, changed, asked) = (cdp.clone(), happened.clone(), changed.clone(), asked.clone());
    tokio::spawn(async move {
        let mut open: Vec<String> = vec![];
        while let Some(Event { method, params, session }) = events.recv().await {
            if method == "Network.requestWillBeSent" {
                asked.note(params["request"]["url"].as_str().unwrap_or_default());
                let mut now = happened.lock().unwrap_or_else(PoisonError::into_inner);
                // A page asking without end is waited for at most SETTLE; the set stays small.
                if session == now.current && now.requests.len() < 1000 {
                    now.requests.insert(params["requestId"].as_str().unwrap_or_default().to_string());
                }
                continue;
            }
            let mut close = None;
            {
                let mut now = happened.lock().unwrap_or_else(PoisonError::into_inner);
                match method.as_str() {
                    "Page.loadEventFired" if session == now.current => now.loads += 1,
                    "Network.loadingFinished" | "Network.loadingFailed" if session == now.current => {
                        now.requests.remove(params["requestId"].as_str().unwrap_or_default());
                    }
                    "Page.frameNavigated" if params["frame"].get("parentId").is_none() && session == now.current => {
                        now.navigations += 1
                    }
                    "Page.javascriptDialogOpening" => {
                        now.dialogs.push(params["message"].as_str().unwrap_or_default().to_string());
                        let accept = params["type"] == "beforeunload";
                        let cdp = cdp.clone();
                        tokio::spawn(async move {
                            let answer = json!({"accept": accept});
                            // silent-ok: a dialog gone meanwhile needs no answer.
                            let _ = cdp.call(&session, "Page.handleJavaScriptDialog", answer, QUICK).await;
                        });
                    }
                    "Inspector.targetCrashed" => now.crashed = true,
                    "Target.targetCreated" if params["targetInfo"]["type"] == "page" => {
                        let target = params["targetInfo"]["targetId"].as_str().unwrap_or_default().to_string();
                        let opener = params["targetInfo"]["openerId"].as_str().unwrap_or_default().to_string();
                        open.push(target.clone());
                        if open.len() > pages.max(1) {
                            now.popups_closed += 1;
                            close = Some(target);
                        } else if !opener.is_empty() {
                            now.new_pages.push((target, opener));
                        }
                    }
                    "Target.targetDestroyed" => {
                        let target = params["targetId"].as_str().unwrap_or_default();
                        open.retain(|open| open != target);
                        now.new_pages.retain(|(new, _)| new != target);
                    }
                    "Browser.downloadWillBegin" => {
                        let id = params["guid"].as_str().unwrap_or_default().to_string();
                        let name = params["suggestedFilename"].as_str().unwrap_or_default().to_string();
                        now.began.push(id.clone());
                        let url = params["url"].as_str().unwrap_or_default().to_string();
                        now.downloads
                            .insert(id, Download { name, url, state: "inProgress".into(), ..Download::default() });
                    }
                    "Browser.downloadProgress" => {
                        let id = params["guid"].as_str().unwrap_or_default().to_string();
                        let download = now.downloads.entry(id).or_default();
                        download.received = params["receivedBytes"].as_u64().unwrap_or(0);
                        download.total = params["totalBytes"].as_u64().unwrap_or(0);
                        download.state = params["state"].as_str().unwrap_or_default().to_string();
                    }
                    _ => continue,
                }
            }
            changed.notify_waiters();
            if let Some(target) = close {
                let cdp = cdp.clone();
                tokio::spawn(async move {
                    // silent-ok: it may have closed itself.
                    let _ = cdp.call("", "Target.closeTarget", json!({"targetId": target}), QUICK).await;
                });
            }
        }
        changed.notify_waiters();
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_proxy_carries_only_hosts_a_page_asked_for() {
        let pages = PageHosts::default();
        pages.note("https://Trains.example/times?x=1");
        pages.note("http://user:pw@10.0.0.1:8080/");
        pages.note("wss://[::1]/socket");
        pages.note("data:text/html,hi");
        assert!(pages.admits("trains.example", 443).await);
        assert!(pages.admits("10.0.0.1", 8080).await);
        assert!(pages.admits("::1", 443).await);
        assert!(!pages.has("trains.example", 80));
        assert!(!pages.admits("accounts.google.com", 443).await, "Chromium's own traffic is not a page's");
        for n in 0..MOST_HOSTS {
            pages.note(&format!("https://h{n}.example/"));
        }
        assert!(pages.has("h10.example", 443) && !pages.has(&format!("h{}.example", MOST_HOSTS - 1), 443));
    }

    #[test]
    fn the_authority_is_the_bundles_last_certificate() {
        let bundle = "-----BEGIN CERTIFICATE-----\nMIIroot\n-----END CERTIFICATE-----\n\
                      -----BEGIN CERTIFICATE-----\nMIIours\n-----END CERTIFICATE-----\n";
        assert_eq!(last_certificate(bundle), Some("-----BEGIN CERTIFICATE-----\nMIIours\n-----END CERTIFICATE-----"));
        assert_eq!(last_certificate("no certificate"), None);
    }
}
