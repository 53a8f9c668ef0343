//! What a person or an agent types, made into an FTS5 query; how a match is ranked beside
//! bm25; and when two memories say the same thing.
//!
//! A query's words match any of them (`OR`: a paraphrased question shares some words with the
//! fact, rarely all), ranked by bm25 so a match of more and rarer words comes first. `"a
//! phrase"` matches those words in that order; `word*` matches words that start so. Every
//! other character is taken as a separator, so nothing a person types is FTS5 syntax.

use std::collections::BTreeSet;

/// Words too common to find anything by (they only slow a search down).
const STOP_WORDS: &[&str] = &[
    "a", "about", "an", "and", "are", "as", "at", "be", "by", "can", "did", "do", "does", "for", "from", "had", "has",
    "have", "he", "her", "him", "his", "how", "i", "in", "is", "it", "its", "me", "my", "of", "on", "or", "our", "s",
    "she", "so", "t", "that", "the", "their", "them", "there", "they", "this", "to", "was", "we", "were", "what",
    "when", "where", "which", "who", "why", "will", "with", "you", "your",
];

/// A word as the index's tokenizer sees it (letters and digits), lowercased.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric()).filter(|word| !word.is_empty()).map(str::to_lowercase)
}

/// The FTS5 expression for `query`, or `None` when it has no word to look for.
pub fn fts(query: &str) -> Option<String> {
    let mut terms: Vec<String> = vec![];
    let mut common: Vec<String> = vec![];
    let mut rest = query;
    while !rest.is_empty() {
        // A phrase, between double quotes.
        if let Some(after) = rest.strip_prefix('"') {
            let (phrase, next) = after.split_once('"').unwrap_or((after, ""));
            let phrase: Vec<String> = words(phrase).collect();
            if !phrase.is_empty() {
                terms.push(format!("\"{}\"", phrase.join(" ")));
            }
            rest = next;
            continue;
        }
        let end = rest.find(|c: char| c.is_whitespace() || c == '"').unwrap_or(rest.len());
        let (token, next) = rest.split_at(end);
        rest = next.strip_prefix(|c: char| c.is_whitespace()).unwrap_or(next);
        let prefix = token.ends_with('*');
        let parts: Vec<String> = words(token).collect();
        for (at, word) in parts.iter().enumerate() {
            let last = at + 1 == parts.len();
            if prefix && last {
                terms.push(format!("\"{word}\"*"));
            } else if STOP_WORDS.contains(&word.as_str()) {
                common.push(format!("\"{word}\""));
            } else {
                terms.push(format!("\"{word}\""));
            }
        }
    }
    // A query of common words only looks for them after all.
    let terms = if terms.is_empty() { common } else { terms };
    let mut seen = BTreeSet::new();
    let terms: Vec<String> = terms.into_iter().filter(|term| seen.insert(term.clone())).collect();
    (!terms.is_empty()).then(|| terms.join(" OR "))
}

/// A match's score (higher is better): its bm25 (FTS5 gives it negated) raised by importance
/// (0–1, up to twice) and recency (up to twice for what is new, half again after a month).
pub fn score(bm25: f64, importance: f64, age_seconds: u64) -> f64 {
    let relevance = -bm25;
    let days = age_seconds as f64 / 86_400.0;
    relevance * (1.0 + importance.clamp(0.0, 1.0)) * (1.0 + 1.0 / (1.0 + days / 30.0))
}

/// `text` as a memory is compared: its words, lowercased, in order, one space apart.
pub fn normalized(text: &str) -> String {
    words(text).collect::<Vec<_>>().join(" ")
}

/// The words of `text` that say something (not [`STOP_WORDS`]), a plural's `s` taken off.
fn content_words(text: &str) -> BTreeSet<String> {
    words(text)
        .filter(|word| !STOP_WORDS.contains(&word.as_str()))
        .map(|word| match word.strip_suffix('s') {
            Some(stem) if stem.len() > 2 && !stem.ends_with('s') => stem.to_string(),
            _ => word,
        })
        .collect()
}

/// How alike two memories are, 0–1: the share of their content words in common (Jaccard).
pub fn similarity(a: &str, b: &str) -> f64 {
    let (a, b) = (content_words(a), content_words(b));
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let shared = a.intersection(&b).count();
    shared as f64 / (a.len() + b.len() - shared) as f64
}

/// From this similarity on, a new memory is taken as one already kept, told again.
pub const SAME_FACT: f64 = 0.75;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_is_words_phrases_and_prefixes_and_never_fts5_syntax() {
        assert_eq!(fts("Where does Alice work?").as_deref(), Some("\"alice\" OR \"work\""));
        assert_eq!(fts("\"black coffee\" sugar").as_deref(), Some("\"black coffee\" OR \"sugar\""));
        assert_eq!(fts("birth* NEAR(x) AND -y").as_deref(), Some("\"birth\"* OR \"near\" OR \"x\" OR \"y\""));
        assert_eq!(fts("what is it").as_deref(), Some("\"what\" OR \"is\" OR \"it\""));
        assert_eq!(fts("  \"\" ?! ").as_deref(), None);
        assert_eq!(fts("Zoë's café").as_deref(), Some("\"zoë\" OR \"café\""));
    }

    #[test]
    fn importance_and_recency_raise_a_match_and_age_lowers_it() {
        let fresh = score(-2.0, 0.0, 0);
        assert!(score(-2.0, 1.0, 0) > fresh);
        assert!(score(-2.0, 0.0, 365 * 86_400) < fresh);
        assert!(score(-3.0, 0.0, 365 * 86_400) > score(-1.0, 0.0, 0), "relevance counts most");
    }

    #[test]
    fn the_same_fact_told_again_is_alike_and_another_fact_is_not() {
        assert_eq!(normalized("Alice takes her coffee BLACK!"), "alice takes her coffee black");
        assert!(similarity("Alice takes her coffee black.", "alice takes coffee black") >= SAME_FACT);
        assert!(similarity("Alice takes her coffee black.", "Alice's coffee: she takes it black") >= SAME_FACT);
        assert!(similarity("Alice's coffee is black", "Alice's car is black") < SAME_FACT);
        assert_eq!(similarity("", "x"), 0.0);
    }
}
