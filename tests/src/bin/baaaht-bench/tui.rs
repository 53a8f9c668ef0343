//! `baaaht-bench tui` (issue 16): `baaaht tui` on a real pseudo-terminal (util-linux `script`
//! relays it to pipes this process holds), against the real daemon and the fake provider.
//! Keypress → screen: a key is written to the terminal while an answer streams (200 tokens/s)
//! and timed until the terminal output carries it, beside the same key echoed by a raw-mode
//! `cat` on the same kind of terminal. Launch → usable prompt, beside a one-shot
//! `baaaht status`. The TUI's resident memory after a long answer.

use std::io::{Read as _, Write as _};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use baaaht_proto::v1;
use baaaht_tests::fake_provider::{anthropic_answer, token_stream, Answer, Asked, Responder, Wire};
use baaaht_tests::scenario;
use baaaht_tests::tmux::shell_quote;
use baaaht_tests::DaemonOptions;

use crate::{header, Row};

/// Output received so far, each read with the moment it arrived.
#[derive(Default)]
struct Received {
    bytes: Vec<u8>,
    arrivals: Vec<(usize, Instant)>,
    closed: bool,
}

/// A program on a pseudo-terminal of `COLUMNS`×`ROWS`.
struct Terminal {
    child: Child,
    input: ChildStdin,
    received: Arc<(Mutex<Received>, Condvar)>,
}

const COLUMNS: u16 = 100;
const ROWS: u16 = 30;

impl Terminal {
    fn start(command: &str, socket: &std::path::Path) -> Result<Terminal> {
        let script = format!("stty cols {COLUMNS} rows {ROWS}; exec {command}");
        let mut child = Command::new("script")
            .args(["-qfec", &script, "/dev/null"])
            .env("BAAAHT_SOCKET", socket)
            .env("TERM", "xterm-256color")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .context("run script(1) (util-linux) for a pseudo-terminal")?;
        let input = child.stdin.take().context("stdin")?;
        let mut output = child.stdout.take().context("stdout")?;
        let received: Arc<(Mutex<Received>, Condvar)> = Arc::default();
        let filling = received.clone();
        std::thread::spawn(move || {
            let mut chunk = [0u8; 65536];
            loop {
                let n = output.read(&mut chunk).unwrap_or(0);
                let now = Instant::now();
                let (lock, changed) = &*filling;
                let mut got = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                if n == 0 {
                    got.closed = true;
                    changed.notify_all();
                    return;
                }
                got.bytes.extend_from_slice(&chunk[..n]);
                let end = got.bytes.len();
                got.arrivals.push((end, now));
                changed.notify_all();
            }
        });
        Ok(Terminal { child, input, received })
    }

    fn len(&self) -> usize {
        self.received.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).bytes.len()
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.input.write_all(bytes)?;
        self.input.flush()?;
        Ok(())
    }

    /// Waits until the output after byte `from` holds `needle`; when its last byte arrived.
    fn wait_for(&self, needle: &[u8], from: usize, limit: Duration) -> Result<Instant> {
        let deadline = Instant::now() + limit;
        let (lock, changed) = &*self.received;
        let mut got = lock.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        loop {
            if let Some(at) = got.bytes[from.min(got.bytes.len())..].windows(needle.len()).position(|w| w == needle) {
                let end = from + at + needle.len();
                let arrived = got.arrivals.iter().find(|(upto, _)| *upto >= end).map(|(_, when)| *when);
                return arrived.context("an arrival for every byte");
            }
            if got.closed {
                bail!("the program ended before it wrote {:?}", String::from_utf8_lossy(needle));
            }
            let now = Instant::now();
            if now > deadline {
                bail!("{:?} did not appear within {limit:?}", String::from_utf8_lossy(needle));
            }
            got = changed.wait_timeout(got, deadline - now).unwrap_or_else(std::sync::PoisonError::into_inner).0;
        }
    }

    /// The process `script` runs (the shell that exec'd the program).
    fn program_pid(&self) -> Result<u32> {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", self.child.id()))?;
        children.split_whitespace().next().context("script has a child")?.parse().context("a pid")
    }

    fn stop(mut self) {
        // silent-ok: already gone is as good.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Keys that the streamed answer never contains, each written and waited for in turn.
const MARKERS: [char; 20] =
    ['①', '②', '③', '④', '⑤', '⑥', '⑦', '⑧', '⑨', '⑩', '⑪', '⑫', '⑬', '⑭', '⑮', '⑯', '⑰', '⑱', '⑲', '⑳'];

/// Writes `samples` markers to `terminal`, each timed until the output carries it; every 20,
/// as many backspaces empty the line again.
/// `cleared` is what the program writes once the line is empty again.
fn keypresses(terminal: &mut Terminal, samples: usize, cleared: &[u8], row: &mut Row) -> Result<()> {
    for index in 0..samples {
        let marker = MARKERS[index % MARKERS.len()];
        let mut bytes = [0u8; 4];
        let encoded = marker.encode_utf8(&mut bytes).as_bytes().to_vec();
        let from = terminal.len();
        let sent = Instant::now();
        terminal.write(&encoded)?;
        let shown = terminal.wait_for(&encoded, from, Duration::from_secs(10))?;
        row.values.push(shown.duration_since(sent).as_secs_f64() * 1000.0);
        if index % MARKERS.len() == MARKERS.len() - 1 {
            let from = terminal.len();
            terminal.write(&[0x7f; MARKERS.len()])?;
            terminal.wait_for(cleared, from, Duration::from_secs(10)).context("the line is emptied")?;
        }
    }
    Ok(())
}

fn kib_of(pid: u32, field: &str) -> Result<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status.lines().find(|line| line.starts_with(field)).with_context(|| format!("{field} of {pid}"))?;
    Ok(line.split_whitespace().nth(1).context("a number")?.parse::<f64>()?)
}

pub(crate) fn run(samples: usize, launches: usize, tokens: usize) -> Result<()> {
    let rt = baaaht_tests::runtime();
    // "go" streams a long answer (200 tokens/s); anything else is answered at once.
    let brain = Answer::Respond(Responder(Arc::new(move |request| {
        let asked = Asked::of(request);
        if scenario::last_user_text(&asked) == "go" {
            return token_stream(Wire::Anthropic, tokens, Duration::from_millis(5));
        }
        anthropic_answer("ok", &[])
    })));
    let (_fake, daemon) = scenario::start(&rt, brain, DaemonOptions::default())?;
    let socket = daemon.socket();
    let baaaht = shell_quote(&baaaht_tests::bin("baaaht").display().to_string());
    let tui = format!("{baaaht} tui --user alice --theme dark");

    let mut launch =
        Row { name: "baaaht tui: launch → usable prompt (connected)".into(), unit: "ms", values: vec![] };
    let mut status =
        Row { name: "baseline: one-shot `baaaht status` (connect, RPC, exit)".into(), unit: "ms", values: vec![] };
    for _ in 0..launches {
        let started = Instant::now();
        let terminal = Terminal::start(&tui, &socket)?;
        let ready = terminal.wait_for(b"connected", 0, Duration::from_secs(30))?;
        launch.values.push(ready.duration_since(started).as_secs_f64() * 1000.0);
        terminal.stop();
        let started = Instant::now();
        let output = Command::new(baaaht_tests::bin("baaaht")).arg("status").env("BAAAHT_SOCKET", &socket).output()?;
        status.values.push(started.elapsed().as_secs_f64() * 1000.0);
        if !output.status.success() {
            bail!("baaaht status failed: {}", String::from_utf8_lossy(&output.stderr));
        }
    }

    // Every frame ends with the cursor at the start of an empty one-line draft.
    let prompt = format!("\x1b[{};2H", ROWS - 1).into_bytes();
    // Keys while an answer streams.
    let mut terminal = Terminal::start(&tui, &socket)?;
    terminal.wait_for(b"connected", 0, Duration::from_secs(30))?;
    let from = terminal.len();
    terminal.write(b"go\r")?;
    let streamed_from = Instant::now();
    terminal.wait_for(b"answering", from, Duration::from_secs(60)).context("the answer streams")?;
    let mut streaming =
        Row { name: "keypress → screen while an answer streams (200 tokens/s)".into(), unit: "ms", values: vec![] };
    keypresses(&mut terminal, samples, &prompt, &mut streaming)?;
    let still_streaming = streamed_from.elapsed() < Duration::from_millis(5 * tokens as u64);
    let mut idle = Row { name: "keypress → screen, idle".into(), unit: "ms", values: vec![] };
    // Idle: once the reply is in the session.
    rt.block_on(async {
        let mut client = scenario::host_client(&daemon).await?;
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            let filter = v1::SessionFilter { user_id: "alice".into(), ..Default::default() };
            let sessions = client.sessions.list_sessions(filter).await?.into_inner().sessions;
            let mut replied = false;
            for session in sessions {
                let read = v1::ReadSessionRequest { session_id: session.id, leaf_entry_id: String::new() };
                let entries = client.sessions.read_session(read).await?.into_inner().entries;
                replied |= entries.iter().any(
                    |entry| matches!(&entry.entry, Some(v1::session_entry::Entry::Message(m)) if m.role == "assistant"),
                );
            }
            if replied {
                return anyhow::Ok(());
            }
            if Instant::now() > deadline {
                bail!("the streamed answer did not end within 120 s");
            }
            // Polling the session for the reply, not waiting for a state to settle.
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })?;
    // The reply's own frame is drawn when its event arrives, by now or together with the
    // first idle key (one frame in the first sample at most).
    keypresses(&mut terminal, samples, &prompt, &mut idle)?;
    let pid = terminal.program_pid()?;
    let rss_mib = kib_of(pid, "VmRSS:")? / 1024.0;
    let peak_mib = kib_of(pid, "VmHWM:")? / 1024.0;
    terminal.stop();

    // The floor: a raw-mode `cat` echoing the same keys on the same kind of terminal.
    let mut cat = Terminal::start("sh -c 'stty raw -echo; echo ready; exec cat'", &socket)?;
    cat.wait_for(b"ready", 0, Duration::from_secs(10))?;
    let mut echo =
        Row { name: "baseline: raw-mode `cat` echoing the key (same pty relay)".into(), unit: "ms", values: vec![] };
    // `cat` echoes the backspaces themselves.
    keypresses(&mut cat, samples, &[0x7f; MARKERS.len()], &mut echo)?;
    cat.stop();

    println!(
        "baaaht-bench tui: {samples} keys while a {tokens}-token answer streams and {samples} idle, on a \
         {COLUMNS}x{ROWS} pseudo-terminal; {launches} launches{}\n",
        if still_streaming { "" } else { " (the answer ended before the keys did: raise --tokens)" }
    );
    header();
    let launch_p50 = launch.print();
    let status_p50 = status.print();
    let streaming_p50 = streaming.print();
    let streaming_p99 = baaaht_tests::percentile(&mut streaming.values, 99.0);
    let idle_p50 = idle.print();
    let echo_p50 = echo.print();
    println!(
        "\nkeypress → screen while streaming: {streaming_p50:.2} ms p50, {streaming_p99:.2} ms p99 ({:.1}× a raw \
         `cat`'s echo); launch → prompt {launch_p50:.0} ms ({:.2}× a one-shot `baaaht status`); resident memory \
         after the answer {rss_mib:.1} MiB (peak {peak_mib:.1} MiB)",
        streaming_p50 / echo_p50,
        launch_p50 / status_p50
    );
    println!(
        "RESULT keypress_streaming_p50_ms={streaming_p50:.3} keypress_streaming_p99_ms={streaming_p99:.3} \
         keypress_idle_p50_ms={idle_p50:.3} cat_echo_p50_ms={echo_p50:.3} keypress_vs_cat={:.2} \
         launch_p50_ms={launch_p50:.1} status_p50_ms={status_p50:.1} launch_vs_status={:.2} rss_mib={rss_mib:.1} \
         peak_rss_mib={peak_mib:.1}",
        streaming_p50 / echo_p50,
        launch_p50 / status_p50
    );
    Ok(())
}
