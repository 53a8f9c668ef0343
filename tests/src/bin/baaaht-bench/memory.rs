//! `baaaht-bench memory`: a context's search index (DESIGN.md §10.5) at a household's scale
//! and far past it — 100,000 memory entries and 1,000,000 session messages in one context:
//! - search p50/p99 over memories and over messages (queries of 1–4 words from the corpus,
//!   some common, some rare; a phrase and a prefix now and then), on the daemon's own index;
//! - indexing throughput (messages a second, in the batches a rebuild writes);
//! - a rebuild from the files (real session logs and memory files, through the daemon's
//!   `Recall`), and the database's size beside the text it holds;
//! - beside it, in the same run, the word-count search memory had before (every entry's file
//!   read and counted) on the 2,000 entries a context could keep, and the index on the same
//!   2,000: the ratio.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Result};
use baaaht_daemon::base::auth::Context;
use baaaht_daemon::store::memory::{Memories, MemoryStore, Metadata};
use baaaht_daemon::store::recall::index::{Filter, Index, MemoryDoc, MessageDoc};
use baaaht_daemon::store::recall::Recall;
use baaaht_daemon::store::sessions::SessionStore;

use baaaht_tests::Dice;

use crate::{header, Row};

/// The corpus's words: common English words, and 20,000 made-up ones (names, places, things)
/// used with a Zipf-like skew, as a household's vocabulary is.
struct Words {
    common: Vec<&'static str>,
    rare: Vec<String>,
}

impl Words {
    fn new() -> Words {
        let common = "the a to and of in is it you that we for on with this be at my was have are not \
                      but so what can will just about like when all there your if up one do out time get \
                      would go know me think day good make new see some could way people home week \
                      morning night today tomorrow dinner school work meeting trip call buy remember"
            .split_whitespace()
            .collect();
        let syllables =
            ["ka", "lo", "mi", "ran", "te", "sol", "vi", "no", "der", "pa", "qui", "zu", "bel", "tor", "en"];
        let mut rare = Vec::with_capacity(20_000);
        let mut dice = Dice(0xC0FF_EE12_3456_789B);
        while rare.len() < 20_000 {
            let parts = 2 + dice.below(2);
            let word: String = (0..parts).map(|_| syllables[dice.below(syllables.len())]).collect();
            rare.push(format!("{word}{}", rare.len() % 97));
        }
        Words { common, rare }
    }

    /// A word: common half the time, else a made-up one (the low ranks far more often).
    fn word(&self, dice: &mut Dice) -> &str {
        if dice.below(2) == 0 {
            return self.common[dice.below(self.common.len())];
        }
        // Zipf-like: the rank's square root spread.
        let spread = dice.below(self.rare.len() * self.rare.len());
        let rank = (spread as f64).sqrt() as usize;
        &self.rare[self.rare.len() - 1 - rank.min(self.rare.len() - 1)]
    }

    fn sentence(&self, dice: &mut Dice, least: usize, most: usize) -> String {
        let count = least + dice.below(most - least + 1);
        let words: Vec<&str> = (0..count).map(|_| self.word(dice)).collect();
        words.join(" ")
    }

    /// A query: 1–4 words from the corpus; one in ten a phrase, one in ten a prefix.
    fn query(&self, dice: &mut Dice) -> String {
        let count = 1 + dice.below(4);
        let words: Vec<String> = (0..count).map(|_| self.rare[dice.below(self.rare.len())].clone()).collect();
        match dice.below(10) {
            0 if words.len() > 1 => format!("\"{} {}\"", words[0], words[1]),
            1 => format!("{}*", &words[0][..words[0].len().min(4)]),
            _ => words.join(" "),
        }
    }
}

fn memory_doc(words: &Words, dice: &mut Dice, n: usize, now: u64) -> MemoryDoc {
    MemoryDoc {
        key: format!("fact-{n}"),
        body: words.sentence(dice, 6, 20),
        tags: vec![words.rare[dice.below(50)].clone()],
        importance: (dice.below(10) as f64) / 10.0,
        origin: "inferred".into(),
        session: format!("s-{}", n % 5000),
        created: now - dice.below(3 * 365 * 86_400) as u64,
        updated: now - dice.below(365 * 86_400) as u64,
    }
}

fn message_doc(words: &Words, dice: &mut Dice, n: usize, now: u64) -> MessageDoc {
    MessageDoc {
        entry: format!("e-{n:012x}"),
        session: format!("s-{}", n / 200),
        role: if n.is_multiple_of(2) { "user" } else { "assistant" }.into(),
        body: words.sentence(dice, 8, 30),
        at: now - dice.below(3 * 365 * 86_400) as u64,
    }
}

/// Times `queries` searches of each kind on `index`: (memories, messages) in µs; the slowest
/// message searches, with their queries.
fn searches(
    index: &Index,
    words: &Words,
    queries: usize,
    memories: &mut Row,
    messages: &mut Row,
) -> Result<Vec<(f64, String)>> {
    let mut slowest: Vec<(f64, String)> = vec![];
    let mut dice = Dice(0x5EED_0000_0000_0001);
    let now = baaaht_daemon::base::state::now_seconds();
    for _ in 0..queries {
        let query = words.query(&mut dice);
        let started = Instant::now();
        std::hint::black_box(index.search_memories(&query, &Filter::default(), 10, now)?);
        memories.values.push(started.elapsed().as_secs_f64() * 1e6);
        let started = Instant::now();
        std::hint::black_box(index.search_messages(&query, &Filter::default(), 10, now)?);
        let took = started.elapsed().as_secs_f64() * 1e6;
        messages.values.push(took);
        slowest.push((took, query));
        slowest.sort_by(|a, b| b.0.total_cmp(&a.0));
        slowest.truncate(3);
    }
    Ok(slowest)
}

pub(crate) fn run(memories: usize, messages: usize, queries: usize, rebuild_messages: usize) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let words = Words::new();
    let now = baaaht_daemon::base::state::now_seconds();
    let mut dice = Dice(0x1234_5678_9ABC_DEF1);

    // The big index, written as a rebuild writes it (batches of 1,000).
    let path = dir.path().join("big.sqlite");
    let mut index = Index::open(&path)?;
    let mut text_bytes = 0u64;
    let mut batch = Vec::with_capacity(1000);
    let started = Instant::now();
    for n in 0..memories {
        let doc = memory_doc(&words, &mut dice, n, now);
        text_bytes += doc.body.len() as u64;
        batch.push(doc);
        if batch.len() == 1000 {
            index.put_memories(&batch)?;
            batch.clear();
        }
    }
    index.put_memories(&batch)?;
    let memory_seconds = started.elapsed().as_secs_f64();
    let mut indexing =
        Row::new(format!("index {messages} messages in batches of 1,000, messages/s per batch"), "msg/s");
    let mut batch = Vec::with_capacity(1000);
    let started = Instant::now();
    for n in 0..messages {
        let doc = message_doc(&words, &mut dice, n, now);
        text_bytes += doc.body.len() as u64;
        batch.push(doc);
        if batch.len() == 1000 {
            let timed = Instant::now();
            index.put_messages(&batch, None)?;
            indexing.values.push(1000.0 / timed.elapsed().as_secs_f64());
            batch.clear();
        }
    }
    index.put_messages(&batch, None)?;
    let message_seconds = started.elapsed().as_secs_f64();
    let (kept_memories, kept_messages, db_bytes) = index.size()?;
    if kept_memories != memories as u64 || kept_messages != messages as u64 {
        bail!("the index holds {kept_memories} memories and {kept_messages} messages, not {memories} and {messages}");
    }
    let mut memory_search = Row::new(format!("search {memories} memories (10 best)"), "µs");
    let mut message_search = Row::new(format!("search {messages} messages (10 best)"), "µs");
    let slowest = searches(&index, &words, queries, &mut memory_search, &mut message_search)?;
    drop(index);

    // The word-count search memory had, on the 2,000 entries a context could keep, beside the
    // index on the same entries.
    let small = MemoryStore::new(dir.path().join("small/memory"));
    let mut small_index = Index::open(&dir.path().join("small.sqlite"))?;
    let mut dice = Dice(0x0BAD_CAFE_0000_0001);
    let mut docs = vec![];
    for n in 0..2000 {
        let doc = memory_doc(&words, &mut dice, n, now);
        small.write(&doc.key, &doc.body, Metadata { tags: doc.tags.clone(), ..Metadata::default() }, doc.updated)?;
        docs.push(doc);
    }
    small_index.put_memories(&docs)?;
    let mut word_count = Row::new("baseline: word-count search, 2,000 memory files (before)", "µs");
    let mut indexed = Row::new("index search, the same 2,000 memories", "µs");
    // The word count reads and parses the store's whole JSON index once per entry it reads (as
    // it did): seconds a query at 2,000 entries, so 20 queries are timed.
    let mut dice = Dice(0x5EED_0000_0000_0002);
    for _ in 0..20 {
        let query = words.query(&mut dice);
        let started = Instant::now();
        std::hint::black_box(small.search(&query, 10)?);
        word_count.values.push(started.elapsed().as_secs_f64() * 1e6);
        let started = Instant::now();
        std::hint::black_box(small_index.search_memories(&query, &Filter::default(), 10, now)?);
        indexed.values.push(started.elapsed().as_secs_f64() * 1e6);
    }

    // A rebuild from the files through the daemon's Recall: real session logs and memory files.
    let root = dir.path().join("data");
    let context = Context::user("bench");
    std::fs::create_dir_all(root.join("data/state"))?;
    let sessions = Arc::new(SessionStore::open(&root));
    let data_dir = baaaht_daemon::base::datadir::DataDir::new(&root);
    let store = Memories::new(data_dir.clone()).store(&context);
    let mut dice = Dice(0x00DD_BA11_0000_0001);
    for n in 0..2000 {
        let doc = memory_doc(&words, &mut dice, n, now);
        store.write(&doc.key, &doc.body, Metadata::default(), doc.updated)?;
    }
    let per_session = 1000;
    let mut written = 0;
    while written < rebuild_messages {
        let session = sessions.create(&context, "bench", None)?;
        let log = sessions.folder(&session.id).join(baaaht_daemon::store::sessions::log::FILE_NAME);
        let mut out = std::io::BufWriter::new(std::fs::OpenOptions::new().append(true).open(&log)?);
        let mut parent = session.id.clone();
        for _ in 0..per_session {
            let doc = message_doc(&words, &mut dice, written, now);
            let id = doc.entry.clone();
            let entry = baaaht_daemon::store::sessions::Entry::Message {
                id: id.clone(),
                parent,
                timestamp: baaaht_daemon::base::state::rfc3339(doc.at),
                message: baaaht_daemon::store::sessions::log::Message {
                    role: doc.role,
                    content: doc.body,
                    channel_type: None,
                    sender_id: None,
                    attachments: vec![],
                },
            };
            serde_json::to_writer(&mut out, &entry)?;
            out.write_all(b"\n")?;
            parent = id;
            written += 1;
        }
        out.flush()?;
    }
    let mut rebuild = Row::new(format!("rebuild from the files: 2,000 memory files + {written} messages in logs"), "s");
    for _ in 0..3 {
        let index_dir = data_dir.context_dir(&context).join(baaaht_daemon::store::recall::FOLDER);
        if index_dir.exists() {
            std::fs::remove_dir_all(&index_dir)?;
        }
        let recall = Recall::new(data_dir.clone(), sessions.clone(), Arc::new(Memories::new(data_dir.clone())));
        let started = Instant::now();
        let (memories_now, messages_now, _) = recall.size(&context)?;
        rebuild.values.push(started.elapsed().as_secs_f64());
        if memories_now != 2000 || messages_now != written as u64 {
            bail!("the rebuild holds {memories_now} memories and {messages_now} messages, not 2000 and {written}");
        }
    }

    println!(
        "baaaht-bench memory: one context's search index (SQLite FTS5, bm25 + importance + recency) with {memories} \
         memories and {messages} messages ({:.0} MiB of text); {queries} queries of 1–4 corpus words, some phrases and \
         prefixes; the word-count search memory had before, on the 2,000 entries a context could keep, in the same run\n",
        text_bytes as f64 / 1_048_576.0
    );
    header();
    let memory_p50 = memory_search.print();
    let memory_p99 = percentile(&mut memory_search.values);
    let message_p50 = message_search.print();
    let message_p99 = percentile(&mut message_search.values);
    let rate = indexing.print();
    let slowest: Vec<String> = slowest.iter().map(|(took, query)| format!("{query} ({:.1} ms)", took / 1e3)).collect();
    let word_count_p50 = word_count.print();
    let indexed_p50 = indexed.print();
    let rebuild_s = rebuild.print();
    let ratio = word_count_p50 / indexed_p50;
    let db_ratio = db_bytes as f64 / text_bytes as f64;
    println!(
        "\nsearch p50/p99: memories {:.2}/{:.2} ms, messages {:.2}/{:.2} ms (target p50 ≤ 5 ms, p99 ≤ 25 ms); \
         indexing {rate:.0} messages/s (target ≥ 10,000; all {messages} in {message_seconds:.1} s, the {memories} \
         memories in {memory_seconds:.1} s); database {:.0} MiB = {db_ratio:.2}× its text; rebuild of {written} \
         messages from their logs {rebuild_s:.1} s; on 2,000 memories the index answers {ratio:.0}× faster than the \
         word count ({:.2} ms vs {:.2} ms)",
        memory_p50 / 1e3,
        memory_p99 / 1e3,
        message_p50 / 1e3,
        message_p99 / 1e3,
        db_bytes as f64 / 1_048_576.0,
        indexed_p50 / 1e3,
        word_count_p50 / 1e3,
    );
    println!("the slowest message searches: {}", slowest.join(", "));
    println!(
        "RESULT memory_search_p50_ms={:.3} memory_search_p99_ms={:.3} message_search_p50_ms={:.3} \
         message_search_p99_ms={:.3} index_msgs_per_s={rate:.0} rebuild_s={rebuild_s:.2} rebuild_messages={written} \
         db_mib={:.1} db_to_text={db_ratio:.2} word_count_2k_p50_ms={:.3} index_2k_p50_ms={:.3} ratio={ratio:.1}",
        memory_p50 / 1e3,
        memory_p99 / 1e3,
        message_p50 / 1e3,
        message_p99 / 1e3,
        db_bytes as f64 / 1_048_576.0,
        word_count_p50 / 1e3,
        indexed_p50 / 1e3,
    );
    Ok(())
}

fn percentile(values: &mut [f64]) -> f64 {
    baaaht_tests::percentile(values, 99.0)
}
