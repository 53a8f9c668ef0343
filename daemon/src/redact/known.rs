//! The secret values the daemon knows (the secrets store's), found in the forms they travel
//! in, and replaced by `[redacted: NAME]`.
//!
//! Each value is searched for as it is, in hex (either case), in base64 and base64url at each
//! of the three alignments a value can have inside a longer encoded string (the characters
//! that mix with unknown neighbouring bytes are left out of the needle), and
//! percent-encoded. One automaton (`aho-corasick`, leftmost-longest) finds them all in one
//! pass. Values shorter than [`MIN_VALUE`] are not searched for: they would redact ordinary
//! words. Split or reversed values are not found; that is the known limit.

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;

use super::Finding;

/// The shortest value searched for.
pub const MIN_VALUE: usize = 8;
/// The shortest encoded needle searched for (a short value's base64 edges are dropped).
const MIN_NEEDLE: usize = 6;

/// Finds known secret values in text.
pub struct Known {
    automaton: Option<AhoCorasick>,
    /// The secret's name for each needle, by the automaton's pattern index.
    names: Vec<String>,
}

impl std::fmt::Debug for Known {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Known").field("needles", &self.names.len()).finish_non_exhaustive()
    }
}

/// The forms `value` travels in, each long enough to search for.
fn forms(value: &str) -> Vec<String> {
    let bytes = value.as_bytes();
    let mut found = vec![value.to_string()];
    let hex: String = bytes.iter().map(|byte| format!("{byte:02x}")).collect();
    found.push(hex.to_ascii_uppercase());
    found.push(hex);
    for engine in [&base64::engine::general_purpose::STANDARD_NO_PAD, &base64::engine::general_purpose::URL_SAFE_NO_PAD]
    {
        for offset in 0..3usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(bytes);
            let encoded = engine.encode(&shifted);
            // The characters that carry only the value's bits: from after the filler's to the
            // last whole group of six bits.
            let start = (4 * offset).div_ceil(3);
            let end = (4 * (offset + bytes.len())) / 3;
            if end > start {
                found.push(encoded[start..end.min(encoded.len())].to_string());
            }
        }
    }
    let percent: String = bytes
        .iter()
        .map(|&byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect();
    found.push(percent);
    found.retain(|needle| needle.len() >= MIN_NEEDLE);
    found.sort();
    found.dedup();
    found
}

impl Known {
    /// A redactor for `secrets` (name, value); values shorter than [`MIN_VALUE`] are left out.
    pub fn new<'a>(secrets: impl IntoIterator<Item = (&'a str, &'a str)>) -> Known {
        let (mut needles, mut names) = (vec![], vec![]);
        for (name, value) in secrets {
            if value.len() < MIN_VALUE {
                continue;
            }
            for needle in forms(value) {
                needles.push(needle);
                names.push(name.to_string());
            }
        }
        let automaton = if needles.is_empty() {
            None
        } else {
            match AhoCorasick::builder().match_kind(MatchKind::LeftmostLongest).build(&needles) {
                Ok(automaton) => Some(automaton),
                Err(error) => {
                    tracing::error!(%error, "the redactor could not be built; nothing is redacted by value");
                    None
                }
            }
        };
        Known { automaton, names }
    }

    /// Where each known value is in `text`, appended to `found` (named by the secret).
    pub fn find(&self, text: &str, found: &mut Vec<Finding>) {
        let Some(automaton) = &self.automaton else { return };
        for matched in automaton.find_iter(text) {
            let name = &self.names[matched.pattern().as_usize()];
            found.push(Finding { start: matched.start(), end: matched.end(), rule: name.clone() });
        }
    }

    /// `text` with every known value replaced by `[redacted: NAME]`, and the names found.
    #[cfg(test)]
    pub fn redact<'t>(&self, text: &'t str) -> (std::borrow::Cow<'t, str>, Vec<String>) {
        let mut found = vec![];
        self.find(text, &mut found);
        super::replace(text, found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::borrow::Cow;

    const VALUE: &str = "ghp_Secr3tValue/with+odd?chars";

    #[test]
    fn a_value_is_found_plain_hex_base64_at_every_alignment_and_percent_encoded() {
        let redactor = Known::new([("GITHUB_TOKEN", VALUE), ("SHORT", "abc")]);
        let standard = base64::engine::general_purpose::STANDARD;
        let url_safe = base64::engine::general_purpose::URL_SAFE;
        let hex: String = VALUE.bytes().map(|byte| format!("{byte:02x}")).collect();
        let mut carried = vec![
            format!("token={VALUE};"),
            format!("hex {hex} and {}", hex.to_ascii_uppercase()),
            format!("percent {}", VALUE.replace('/', "%2F").replace('+', "%2B").replace('?', "%3F")),
        ];
        // Inside longer base64, whatever comes before it.
        for prefix in ["", "a", "ab", "abc"] {
            carried.push(format!("Basic {}", standard.encode(format!("{prefix}user:{VALUE}@host"))));
            carried.push(format!("url {}", url_safe.encode(format!("{prefix}{VALUE}"))));
        }
        for text in &carried {
            let (redacted, names) = redactor.redact(text);
            assert_eq!(names, ["GITHUB_TOKEN"], "{text} → {redacted}");
            assert!(redacted.contains("[redacted: GITHUB_TOKEN]"), "{redacted}");
            assert!(!redacted.contains(VALUE) && !redacted.contains(&hex), "{redacted}");
        }
        // Nothing known: the text itself, not a copy; a short value is not searched for.
        let (same, names) = redactor.redact("nothing to see, abc");
        assert!(matches!(same, Cow::Borrowed(_)) && names.is_empty());
        let (none, _) = Known::new([]).redact(VALUE);
        assert_eq!(none, VALUE);
    }
}
