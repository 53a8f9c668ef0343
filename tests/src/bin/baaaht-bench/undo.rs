//! `baaaht-bench undo`: what keeping a turn's changes for its undo costs, in this process, as
//! the daemon's tool road does it (`store::undo`: the look before a turn's first writing call,
//! the look after it), on this host's disk:
//! - the time a snapshot adds to a writing turn whose command changes 10 files, in a project of
//!   1,000 files and in one of 100,000, beside the command's writes themselves (same run);
//! - the time the undo of that turn takes (its plan, then putting the files back);
//! - the store's size after 100 turns over a 100 MB project, beside the bytes the turns wrote.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context as _, Result};
use baaaht_daemon::base::auth::Context;
use baaaht_daemon::base::config::UndoConfig;
use baaaht_daemon::store::sessions::{NewEntry, SessionStore};
use baaaht_daemon::store::undo::{Root, Turn, Undo};

use crate::{header, Row};

/// Text as a project holds it (words and code-ish lines), `size` bytes, different for each
/// `seed`.
fn text(seed: u64, size: usize) -> Vec<u8> {
    let words =
        ["let", "fn", "value", "return", "config", "self", "match", "Some", "None", "=>", "{", "}", "(", ")", ";"];
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(size + 16);
    while out.len() < size {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        out.extend_from_slice(words[(state % words.len() as u64) as usize].as_bytes());
        out.push(if state.is_multiple_of(11) { b'\n' } else { b' ' });
        if state.is_multiple_of(97) {
            out.extend_from_slice(format!("{state:x}").as_bytes());
        }
    }
    out.truncate(size);
    out
}

/// A project of `files` files of `size` bytes each, 100 to a folder, older than 2 s when this
/// returns (as a project's files are: one changed within the last 2 s is read again at each
/// look, its times being too close to trust).
fn project(at: &Path, files: usize, size: usize) -> Result<()> {
    std::fs::create_dir_all(at)?;
    for n in 0..files {
        let folder = at.join(format!("d{:04}", n / 100));
        if n % 100 == 0 {
            std::fs::create_dir_all(&folder)?;
        }
        std::fs::write(folder.join(format!("f{n}.rs")), text(n as u64, size))?;
    }
    std::thread::sleep(std::time::Duration::from_millis(2100));
    Ok(())
}

struct Bench {
    _dir: tempfile::TempDir,
    sessions: SessionStore,
    undo: Undo,
    session: String,
    roots: Vec<Root>,
    project: PathBuf,
    turns: u64,
}

impl Bench {
    fn new(files: usize, size: usize) -> Result<Bench> {
        let dir = tempfile::tempdir()?;
        let data = dir.path().join("data");
        std::fs::create_dir_all(data.join("data/state"))?;
        let sessions = SessionStore::open(&data);
        let session = sessions.create(&Context::user("bench"), "bench", None).context("a session")?.id;
        let project = dir.path().join("project");
        self::project(&project, files, size)?;
        let undo = Undo::new(&data, UndoConfig { turns: 1000, ..UndoConfig::default() });
        let roots = vec![Root { name: "/project/app".into(), host: project.clone() }];
        Ok(Bench { _dir: dir, sessions, undo, session, roots, project, turns: 0 })
    }

    /// One turn whose command rewrites `changed` files (picked by the turn's number): the
    /// time of the writes alone, and of the look before and after them.
    fn turn(&mut self, files: usize, changed: usize, size: usize) -> Result<(f64, f64, u64)> {
        self.turns += 1;
        let message = NewEntry::Message {
            role: "user",
            content: format!("turn {}", self.turns),
            channel: None,
            sender: None,
            attachments: vec![],
        };
        let entry = self.sessions.append(&self.session, None, message)?;
        let turn = Turn {
            session: self.session.clone(),
            context: Context::user("bench"),
            entry: entry.clone(),
            user_turn: format!("t-{entry}"),
            correlation: format!("c-{entry}"),
            marked: None,
        };
        let started = Instant::now();
        self.undo.before(&turn, &self.roots)?;
        let looked = started.elapsed();
        let started = Instant::now();
        let mut wrote = 0;
        for k in 0..changed {
            let n = (self.turns as usize * 7919 + k * 104_729) % files;
            let bytes = text(self.turns * 1000 + k as u64, size);
            wrote += bytes.len() as u64;
            std::fs::write(self.project.join(format!("d{:04}", n / 100)).join(format!("f{n}.rs")), bytes)?;
        }
        let writes = started.elapsed();
        let started = Instant::now();
        self.undo.after(&turn, "exec", None, &self.roots)?;
        let after = started.elapsed();
        self.undo.ended(&turn.user_turn);
        let reply = NewEntry::Message {
            role: "assistant",
            content: "done".into(),
            channel: None,
            sender: None,
            attachments: vec![],
        };
        self.sessions.append(&self.session, None, reply)?;
        Ok(((looked + after).as_secs_f64() * 1e3, writes.as_secs_f64() * 1e3, wrote))
    }
}

fn folder_size(at: &Path) -> u64 {
    let mut total = 0;
    let mut pending = vec![at.to_path_buf()];
    while let Some(folder) = pending.pop() {
        for entry in std::fs::read_dir(&folder).into_iter().flatten().flatten() {
            match entry.file_type() {
                Ok(kind) if kind.is_dir() => pending.push(entry.path()),
                Ok(_) => total += entry.metadata().map(|meta| meta.len()).unwrap_or(0),
                Err(_) => {}
            }
        }
    }
    total
}

pub(crate) fn run(runs: usize) -> Result<()> {
    header();
    let mut results = vec![];
    for files in [1_000, 100_000] {
        let mut bench = Bench::new(files, 1024)?;
        // The first look keeps the whole project once (per daemon start): not a turn's cost.
        let started = Instant::now();
        bench.turn(files, 10, 1024)?;
        println!(
            "first look at a {files}-file project (kept whole, once): {:.1} ms",
            started.elapsed().as_secs_f64() * 1e3
        );
        let mut snapshot =
            Row::new(format!("snapshot of a writing turn: {files} files, 10 changed (before + after)"), "ms");
        let mut writes =
            Row::new(format!("baseline: the command's writes of 10 files of 1 KiB ({files}-file project)"), "ms");
        let mut undo = Row::new(format!("undo of that turn: plan + put back ({files}-file project)"), "ms");
        for _ in 0..runs {
            let (looked, wrote, _) = bench.turn(files, 10, 1024)?;
            snapshot.values.push(looked);
            writes.values.push(wrote);
        }
        for _ in 0..runs.min(20) {
            let started = Instant::now();
            let plan = bench.undo.plan(&bench.sessions, &bench.session, 1)?;
            bench.undo.apply(&bench.sessions, &plan)?;
            undo.values.push(started.elapsed().as_secs_f64() * 1e3);
            // The next turn starts where the undo left the conversation.
            bench.turn(files, 10, 1024)?;
        }
        let (snapshot, writes, undo) = (snapshot.print(), writes.print(), undo.print());
        results.push((files, snapshot, writes, undo));
    }
    // 100 turns over a 100 MB project: 1,000 files of 100 KiB, 10 rewritten a turn.
    let mut bench = Bench::new(1_000, 100 << 10)?;
    let mut changed = 0;
    for _ in 0..100 {
        changed += bench.turn(1_000, 10, 100 << 10)?.2;
    }
    let store = folder_size(bench.undo.objects(&Context::user("bench")).dir());
    let project = folder_size(&bench.project);
    let ratio = store as f64 / changed as f64;
    println!(
        "store after 100 turns over a {:.0} MB project: {:.1} MB; the turns wrote {:.1} MB; ratio {ratio:.2} (the project's own first copy included)",
        project as f64 / 1e6,
        store as f64 / 1e6,
        changed as f64 / 1e6
    );
    let (small, large) = (&results[0], &results[1]);
    println!(
        "RESULT snapshot_1k_p50_ms={:.2} snapshot_100k_p50_ms={:.2} writes_1k_p50_ms={:.2} ratio_1k={:.2} undo_1k_p50_ms={:.2} undo_100k_p50_ms={:.2} store_over_changed={ratio:.2}",
        small.1,
        large.1,
        small.2,
        small.1 / small.2.max(1e-6),
        small.3,
        large.3
    );
    Ok(())
}
