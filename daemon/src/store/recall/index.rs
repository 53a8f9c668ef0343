//! One context's search index: a SQLite database (bundled SQLite, WAL) with FTS5 tables over
//! its memory entries and its sessions' messages, and how much of each session's log is in
//! it. Only the daemon opens it; it is never mounted into a container. It holds nothing the
//! files do not: [`super::Recall`] rebuilds it from them when it is missing, damaged or of
//! another schema.

use std::path::{Path, PathBuf};

use rusqlite::{params, Connection, OptionalExtension};

use super::query;

/// The schema this code reads and writes; another one is rebuilt.
pub const SCHEMA_VERSION: i64 = 1;

/// How many best bm25 matches are ranked again by importance and recency.
const CANDIDATES: usize = 200;

/// A query of prefixes only (`ran*`) ranks among its newest this many matches: a short prefix
/// can match most of a context's messages, and bm25 over all of them took a third of a second
/// at a million messages (`baaaht-bench memory`).
const PREFIX_WINDOW: usize = 5_000;

/// Prefixes of 3 and 4 characters have indexes of their own (`prefix='3 4'`): a query like
/// `ran*` would otherwise merge the lists of every word starting so (half a second over a
/// million messages; `baaaht-bench memory`).
const SCHEMA: &str = "
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE memories(
    id INTEGER PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    body TEXT NOT NULL,
    tags TEXT NOT NULL,
    importance REAL NOT NULL,
    origin TEXT NOT NULL,
    session TEXT NOT NULL,
    created INTEGER NOT NULL,
    updated INTEGER NOT NULL,
    norm TEXT NOT NULL
);
CREATE INDEX memories_norm ON memories(norm);
CREATE VIRTUAL TABLE memories_fts USING fts5(
    key, body, tags, content='memories', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2',
    prefix='3 4'
);
CREATE TRIGGER memories_in AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts(rowid, key, body, tags) VALUES (new.id, new.key, new.body, new.tags);
END;
CREATE TRIGGER memories_out AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, key, body, tags) VALUES ('delete', old.id, old.key, old.body, old.tags);
END;
CREATE TRIGGER memories_change AFTER UPDATE ON memories BEGIN
    INSERT INTO memories_fts(memories_fts, rowid, key, body, tags) VALUES ('delete', old.id, old.key, old.body, old.tags);
    INSERT INTO memories_fts(rowid, key, body, tags) VALUES (new.id, new.key, new.body, new.tags);
END;
CREATE TABLE messages(
    id INTEGER PRIMARY KEY,
    entry TEXT NOT NULL UNIQUE,
    session TEXT NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE VIRTUAL TABLE messages_fts USING fts5(
    body, content='messages', content_rowid='id', tokenize='porter unicode61 remove_diacritics 2', prefix='3 4'
);
CREATE TRIGGER messages_in AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, body) VALUES (new.id, new.body);
END;
CREATE TRIGGER messages_out AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, body) VALUES ('delete', old.id, old.body);
END;
CREATE TABLE logs(session TEXT PRIMARY KEY, bytes INTEGER NOT NULL);
";

/// A memory entry as the index keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct MemoryDoc {
    pub key: String,
    pub body: String,
    pub tags: Vec<String>,
    pub importance: f64,
    pub origin: String,
    pub session: String,
    pub created: u64,
    pub updated: u64,
}

/// A session's message as the index keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageDoc {
    /// The log entry's id.
    pub entry: String,
    pub session: String,
    /// user or assistant.
    pub role: String,
    pub body: String,
    pub at: u64,
}

/// What a search narrows to.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Memories with this tag.
    pub tag: Option<String>,
    /// Messages of this session.
    pub session: Option<String>,
    /// Seconds since the epoch: updated (a memory) or written (a message) at or after, before.
    pub since: Option<u64>,
    pub until: Option<u64>,
}

/// A match, best first.
#[derive(Debug, Clone, PartialEq)]
pub struct Found<T> {
    pub doc: T,
    pub score: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("the search index {path}: {source}")]
    Sql { path: PathBuf, source: rusqlite::Error },
    #[error("the search index {path} is damaged: {why}")]
    Damaged { path: PathBuf, why: String },
    #[error("the search index {path} has schema {found}, not {SCHEMA_VERSION}")]
    Schema { path: PathBuf, found: i64 },
}

/// One context's index, open.
pub struct Index {
    path: PathBuf,
    db: Connection,
}

impl Index {
    /// Opens the index at `path` (made with the schema when missing), checked: its schema is
    /// this code's and SQLite finds it whole.
    pub fn open(path: &Path) -> Result<Index, IndexError> {
        let sql = |source| IndexError::Sql { path: path.to_path_buf(), source };
        let fresh = !path.exists();
        let db = Connection::open(path).map_err(sql)?;
        let index = Index { path: path.to_path_buf(), db };
        index
            .db
            .execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=OFF;")
            .map_err(|source| index.damaged_or(source))?;
        if fresh {
            let schema =
                format!("BEGIN; {SCHEMA} INSERT INTO meta(key, value) VALUES ('schema', '{SCHEMA_VERSION}'); COMMIT;");
            index.db.execute_batch(&schema).map_err(sql)?;
            return Ok(index);
        }
        let found: Option<String> = index
            .db
            .query_row("SELECT value FROM meta WHERE key = 'schema'", [], |row| row.get(0))
            .optional()
            .map_err(|source| index.damaged_or(source))?;
        let found = found.and_then(|value| value.parse::<i64>().ok()).unwrap_or(0);
        if found != SCHEMA_VERSION {
            return Err(IndexError::Schema { path: path.to_path_buf(), found });
        }
        let check: String = index
            .db
            .query_row("PRAGMA quick_check", [], |row| row.get(0))
            .map_err(|source| index.damaged_or(source))?;
        if check != "ok" {
            return Err(IndexError::Damaged { path: path.to_path_buf(), why: check });
        }
        Ok(index)
    }

    fn sql(&self, source: rusqlite::Error) -> IndexError {
        IndexError::Sql { path: self.path.clone(), source }
    }

    /// A file that is not a database (or a damaged one) is named so: it is rebuilt.
    fn damaged_or(&self, source: rusqlite::Error) -> IndexError {
        use rusqlite::ffi::ErrorCode;
        match source.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
                IndexError::Damaged { path: self.path.clone(), why: source.to_string() }
            }
            _ => self.sql(source),
        }
    }

    /// Keeps `doc` (replacing the entry of its key).
    pub fn put_memory(&mut self, doc: &MemoryDoc) -> Result<(), IndexError> {
        self.put_memories(std::slice::from_ref(doc))
    }

    /// Keeps `docs` (each replacing the entry of its key), in one transaction.
    pub fn put_memories(&mut self, docs: &[MemoryDoc]) -> Result<(), IndexError> {
        let path = self.path.clone();
        let sql = |source| IndexError::Sql { path: path.clone(), source };
        let transaction = self.db.transaction().map_err(sql)?;
        {
            let mut upsert = transaction
                .prepare_cached(
                    "INSERT INTO memories(key, body, tags, importance, origin, session, created, updated, norm)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                     ON CONFLICT(key) DO UPDATE SET body = excluded.body, tags = excluded.tags,
                       importance = excluded.importance, origin = excluded.origin, session = excluded.session,
                       created = excluded.created, updated = excluded.updated, norm = excluded.norm",
                )
                .map_err(sql)?;
            for doc in docs {
                upsert
                    .execute(params![
                        doc.key,
                        doc.body,
                        doc.tags.join(" "),
                        doc.importance,
                        doc.origin,
                        doc.session,
                        doc.created as i64,
                        doc.updated as i64,
                        query::normalized(&doc.body),
                    ])
                    .map_err(sql)?;
            }
        }
        transaction.commit().map_err(sql)
    }

    /// Forgets the memory `key`.
    pub fn forget_memory(&self, key: &str) -> Result<(), IndexError> {
        self.db.execute("DELETE FROM memories WHERE key = ?1", [key]).map_err(|source| self.sql(source))?;
        Ok(())
    }

    /// Every memory key and when it was updated.
    pub fn memory_times(&self) -> Result<Vec<(String, u64)>, IndexError> {
        let mut statement = self.db.prepare("SELECT key, updated FROM memories").map_err(|source| self.sql(source))?;
        let rows = statement
            .query_map([], |row| Ok((row.get::<_, String>(0)?, row.get::<_, i64>(1)? as u64)))
            .map_err(|source| self.sql(source))?;
        rows.collect::<Result<_, _>>().map_err(|source| self.sql(source))
    }

    /// Keeps `docs` (one transaction; a message kept already is left as it is) and notes that
    /// `session`'s log is in the index up to `bytes`.
    pub fn put_messages(&mut self, docs: &[MessageDoc], log: Option<(&str, u64)>) -> Result<(), IndexError> {
        let path = self.path.clone();
        let sql = |source| IndexError::Sql { path: path.clone(), source };
        let transaction = self.db.transaction().map_err(sql)?;
        {
            let mut insert = transaction
                .prepare_cached(
                    "INSERT OR IGNORE INTO messages(entry, session, role, body, at) VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .map_err(sql)?;
            for doc in docs {
                insert.execute(params![doc.entry, doc.session, doc.role, doc.body, doc.at as i64]).map_err(sql)?;
            }
            if let Some((session, bytes)) = log {
                transaction
                    .execute(
                        "INSERT INTO logs(session, bytes) VALUES (?1, ?2)
                         ON CONFLICT(session) DO UPDATE SET bytes = excluded.bytes",
                        params![session, bytes as i64],
                    )
                    .map_err(sql)?;
            }
        }
        transaction.commit().map_err(sql)
    }

    /// How much of `session`'s log is in the index (0: none of it).
    pub fn log_bytes(&self, session: &str) -> Result<u64, IndexError> {
        let bytes: Option<i64> = self
            .db
            .query_row("SELECT bytes FROM logs WHERE session = ?1", [session], |row| row.get(0))
            .optional()
            .map_err(|source| self.sql(source))?;
        Ok(bytes.unwrap_or(0) as u64)
    }

    /// The memories matching `text`, best first: at most `limit`, ranked at `now`.
    pub fn search_memories(
        &self,
        text: &str,
        filter: &Filter,
        limit: usize,
        now: u64,
    ) -> Result<Vec<Found<MemoryDoc>>, IndexError> {
        let Some(expression) = query::fts(text) else { return Ok(vec![]) };
        let from = self.window("memories", &expression)?;
        let mut statement = self
            .db
            .prepare_cached(&ranked(MEMORY_COLUMNS, "memories", MEMORY_FILTERS, filter, from > 0))
            .map_err(|source| self.sql(source))?;
        let rows = statement
            .query_map(
                params![
                    expression,
                    filter.tag,
                    filter.since.map(|at| at as i64),
                    filter.until.map(|at| at as i64),
                    CANDIDATES as i64,
                    from
                ],
                |row| {
                    let doc = MemoryDoc {
                        key: row.get(0)?,
                        body: row.get(1)?,
                        tags: row.get::<_, String>(2)?.split_whitespace().map(str::to_string).collect(),
                        importance: row.get(3)?,
                        origin: row.get(4)?,
                        session: row.get(5)?,
                        created: row.get::<_, i64>(6)? as u64,
                        updated: row.get::<_, i64>(7)? as u64,
                    };
                    Ok((doc, row.get::<_, f64>(8)?))
                },
            )
            .map_err(|source| self.sql(source))?;
        let mut found = vec![];
        for row in rows {
            let (doc, bm25) = row.map_err(|source| self.sql(source))?;
            let score = query::score(bm25, doc.importance, now.saturating_sub(doc.updated));
            found.push(Found { doc, score });
        }
        Ok(best(found, limit))
    }

    /// The messages matching `text`, best first: at most `limit`, ranked at `now`.
    pub fn search_messages(
        &self,
        text: &str,
        filter: &Filter,
        limit: usize,
        now: u64,
    ) -> Result<Vec<Found<MessageDoc>>, IndexError> {
        let Some(expression) = query::fts(text) else { return Ok(vec![]) };
        let from = self.window("messages", &expression)?;
        let mut statement = self
            .db
            .prepare_cached(&ranked(MESSAGE_COLUMNS, "messages", MESSAGE_FILTERS, filter, from > 0))
            .map_err(|source| self.sql(source))?;
        let rows = statement
            .query_map(
                params![
                    expression,
                    filter.session,
                    filter.since.map(|at| at as i64),
                    filter.until.map(|at| at as i64),
                    CANDIDATES as i64,
                    from
                ],
                |row| {
                    let doc = MessageDoc {
                        entry: row.get(0)?,
                        session: row.get(1)?,
                        role: row.get(2)?,
                        body: row.get(3)?,
                        at: row.get::<_, i64>(4)? as u64,
                    };
                    Ok((doc, row.get::<_, f64>(5)?))
                },
            )
            .map_err(|source| self.sql(source))?;
        let mut found = vec![];
        for row in rows {
            let (doc, bm25) = row.map_err(|source| self.sql(source))?;
            let score = query::score(bm25, 0.0, now.saturating_sub(doc.at));
            found.push(Found { doc, score });
        }
        Ok(best(found, limit))
    }

    /// The lowest rowid of `table` a search for `expression` ranks: for a query of prefixes
    /// only with more than [`PREFIX_WINDOW`] matches, its newest that many; else all (0).
    fn window(&self, table: &str, expression: &str) -> Result<i64, IndexError> {
        if !expression.split(" OR ").all(|term| term.ends_with('*')) {
            return Ok(0);
        }
        let oldest: Option<i64> = self
            .db
            .prepare_cached(&format!(
                "SELECT rowid FROM {table}_fts WHERE {table}_fts MATCH ?1 ORDER BY rowid DESC LIMIT 1 OFFSET ?2"
            ))
            .and_then(|mut statement| {
                statement.query_row(params![expression, PREFIX_WINDOW as i64 - 1], |row| row.get(0)).optional()
            })
            .map_err(|source| self.sql(source))?;
        Ok(oldest.unwrap_or(0))
    }

    /// The memory that says what `body` says, if one does: the same words, or the most alike
    /// of those sharing its words when alike enough ([`query::SAME_FACT`]).
    pub fn same_fact(&self, body: &str) -> Result<Option<String>, IndexError> {
        let same: Option<String> = self
            .db
            .query_row("SELECT key FROM memories WHERE norm = ?1 LIMIT 1", [query::normalized(body)], |row| row.get(0))
            .optional()
            .map_err(|source| self.sql(source))?;
        if same.is_some() {
            return Ok(same);
        }
        let alike = self.search_memories(body, &Filter::default(), 20, 0)?;
        let best = alike
            .into_iter()
            .map(|found| (query::similarity(body, &found.doc.body), found.doc.key))
            .filter(|(similarity, _)| *similarity >= query::SAME_FACT)
            .max_by(|a, b| a.0.total_cmp(&b.0));
        Ok(best.map(|(_, key)| key))
    }

    /// How many memories and messages are kept, and the database's size in bytes.
    pub fn size(&self) -> Result<(u64, u64, u64), IndexError> {
        let count = |table: &str| -> Result<u64, IndexError> {
            self.db
                .query_row(&format!("SELECT count(*) FROM {table}"), [], |row| row.get::<_, i64>(0))
                .map(|count| count as u64)
                .map_err(|source| self.sql(source))
        };
        let pages: i64 = self
            .db
            .query_row("SELECT page_count * page_size FROM pragma_page_count(), pragma_page_size()", [], |row| {
                row.get(0)
            })
            .map_err(|source| self.sql(source))?;
        Ok((count("memories")?, count("messages")?, pages as u64))
    }
}

const MEMORY_COLUMNS: &str = "m.key, m.body, m.tags, m.importance, m.origin, m.session, m.created, m.updated";
const MEMORY_FILTERS: &str = "(?2 IS NULL OR (' ' || m.tags || ' ') LIKE '% ' || ?2 || ' %')
    AND (?3 IS NULL OR m.updated >= ?3) AND (?4 IS NULL OR m.updated < ?4)";
const MESSAGE_COLUMNS: &str = "m.entry, m.session, m.role, m.body, m.at";
const MESSAGE_FILTERS: &str =
    "(?2 IS NULL OR m.session = ?2) AND (?3 IS NULL OR m.at >= ?3) AND (?4 IS NULL OR m.at < ?4)";

/// The query of `table`'s best [`CANDIDATES`] matches of `?1` from rowid `?6` on, with
/// `columns` and their rank, narrowed by `filters` (`?2`–`?4`). Unfiltered, the matches are ranked in the FTS table
/// alone and only the best are read from `table` (a query matching many rows reads 200, not
/// all of them); filtered, every match is read, to keep the best that pass.
fn ranked(columns: &str, table: &str, filters: &str, filter: &Filter, windowed: bool) -> String {
    // Without a window, `?6` is only bound: a rowid constraint would change FTS5's plan.
    let (inner, outer) = if windowed { ("AND rowid >= ?6", "") } else { ("", "AND ?6 IS NOT NULL") };
    if *filter == Filter::default() {
        format!(
            "SELECT {columns}, f.rank FROM (SELECT rowid, rank FROM {table}_fts WHERE {table}_fts MATCH ?1 {inner}
             ORDER BY rank LIMIT ?5) f JOIN {table} m ON m.id = f.rowid WHERE {filters} {outer} ORDER BY f.rank"
        )
    } else {
        let inner = inner.replace("rowid", "f.rowid");
        format!(
            "SELECT {columns}, f.rank FROM {table}_fts f JOIN {table} m ON m.id = f.rowid
             WHERE {table}_fts MATCH ?1 {inner} AND {filters} {outer} ORDER BY f.rank LIMIT ?5"
        )
    }
}

/// The best `limit` of `found`.
fn best<T>(mut found: Vec<Found<T>>, limit: usize) -> Vec<Found<T>> {
    found.sort_by(|a, b| b.score.total_cmp(&a.score));
    found.truncate(limit);
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn memory(key: &str, body: &str, importance: f64, updated: u64) -> MemoryDoc {
        MemoryDoc {
            key: key.into(),
            body: body.into(),
            tags: vec!["food".into()],
            importance,
            origin: "user".into(),
            session: String::new(),
            created: updated,
            updated,
        }
    }

    #[test]
    fn memories_and_messages_are_found_by_their_words_stems_phrases_and_filters() {
        let dir = tempfile::tempdir().expect("dir");
        let mut index = Index::open(&dir.path().join("recall.sqlite")).expect("open");
        index.put_memory(&memory("coffee", "Alice takes her coffee black.", 0.0, 1_000)).expect("put");
        index.put_memory(&memory("tea", "Bob drinks green tea every morning.", 0.0, 1_000)).expect("put");
        index.put_memory(&memory("tea-2", "Carol likes tea with milk.", 1.0, 1_000)).expect("put");
        let keys = |found: Vec<Found<MemoryDoc>>| found.into_iter().map(|f| f.doc.key).collect::<Vec<_>>();
        assert_eq!(
            keys(index.search_memories("Who takes coffee?", &Filter::default(), 5, 2_000).expect("s")),
            ["coffee"]
        );
        // Stems: "drinking" finds "drinks".
        assert_eq!(keys(index.search_memories("drinking", &Filter::default(), 5, 2_000).expect("s")), ["tea"]);
        // Importance raises an equal match.
        assert_eq!(keys(index.search_memories("tea", &Filter::default(), 5, 2_000).expect("s")), ["tea-2", "tea"]);
        assert_eq!(keys(index.search_memories("\"green tea\"", &Filter::default(), 5, 2_000).expect("s")), ["tea"]);
        assert_eq!(keys(index.search_memories("morn*", &Filter::default(), 5, 2_000).expect("s")), ["tea"]);
        let sport = Filter { tag: Some("sport".into()), ..Filter::default() };
        assert!(index.search_memories("tea", &sport, 5, 2_000).expect("s").is_empty());
        index.forget_memory("tea").expect("forget");
        assert_eq!(keys(index.search_memories("tea", &Filter::default(), 5, 2_000).expect("s")), ["tea-2"]);

        let message = |entry: &str, session: &str, body: &str, at: u64| MessageDoc {
            entry: entry.into(),
            session: session.into(),
            role: "user".into(),
            body: body.into(),
            at,
        };
        let docs = [message("e1", "s1", "We fly to Lisbon on the 4th.", 10), message("e2", "s2", "Lisbon again?", 20)];
        index.put_messages(&docs, Some(("s1", 300))).expect("messages");
        index.put_messages(&docs[..1], None).expect("again: ignored");
        let found = index.search_messages("lisbon", &Filter::default(), 5, 30).expect("s");
        assert_eq!(found.len(), 2);
        let only = Filter { session: Some("s1".into()), ..Filter::default() };
        assert_eq!(index.search_messages("lisbon", &only, 5, 30).expect("s")[0].doc.entry, "e1");
        let late = Filter { since: Some(15), ..Filter::default() };
        assert_eq!(index.search_messages("lisbon", &late, 5, 30).expect("s")[0].doc.entry, "e2");
        assert_eq!(index.log_bytes("s1").expect("bytes"), 300);
        assert_eq!(index.size().expect("size").0, 2);
        assert_eq!(index.size().expect("size").1, 2);
    }

    #[test]
    fn a_query_of_prefixes_only_ranks_its_newest_matches_and_a_word_ranks_them_all() {
        let dir = tempfile::tempdir().expect("dir");
        let mut index = Index::open(&dir.path().join("recall.sqlite")).expect("open");
        let docs: Vec<MessageDoc> = (0..PREFIX_WINDOW + 1000)
            .map(|n| MessageDoc {
                entry: format!("e-{n:05}"),
                session: "s1".into(),
                role: "user".into(),
                // The oldest thousand say it most.
                body: if n < 1000 { "alphabet alphabet alphabet".into() } else { format!("alphabet and {n} more") },
                at: 1_000,
            })
            .collect();
        index.put_messages(&docs, None).expect("messages");
        let entries = |query: &str| -> Vec<String> {
            let found = index.search_messages(query, &Filter::default(), 5, 2_000).expect("search");
            found.into_iter().map(|found| found.doc.entry).collect()
        };
        assert!(entries("alphabet").iter().all(|entry| entry.as_str() < "e-01000"), "the best of all");
        let newest = entries("alpha*");
        assert_eq!(newest.len(), 5);
        assert!(newest.iter().all(|entry| entry.as_str() >= "e-01000"), "the newest matches: {newest:?}");
    }

    #[test]
    fn the_same_fact_is_found_and_a_damaged_or_older_index_says_so() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("recall.sqlite");
        let mut index = Index::open(&path).expect("open");
        index.put_memory(&memory("coffee", "Alice takes her coffee black.", 0.0, 1)).expect("put");
        assert_eq!(index.same_fact("alice takes her coffee BLACK").expect("same").as_deref(), Some("coffee"));
        assert_eq!(index.same_fact("Alice's coffee: she takes it black").expect("alike").as_deref(), Some("coffee"));
        assert_eq!(index.same_fact("Alice's car is black").expect("other"), None);
        index.db.execute("UPDATE meta SET value = '0' WHERE key = 'schema'", []).expect("downgrade");
        drop(index);
        assert!(matches!(Index::open(&path), Err(IndexError::Schema { found: 0, .. })));
        std::fs::write(&path, vec![0x5a; 8192]).expect("garble");
        let wal = dir.path().join("recall.sqlite-wal");
        if wal.exists() {
            std::fs::remove_file(&wal).expect("the journal");
        }
        assert!(matches!(Index::open(&path), Err(IndexError::Damaged { .. })), "{:?}", Index::open(&path).err());
    }
}
