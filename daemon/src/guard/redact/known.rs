//! The secret values the daemon knows (the secrets store's), found in the forms they travel
//! in, and replaced by `[redacted: NAME]`.
//!
//! Each value is searched for as it is and reversed, in hex (either case), in base64 and
//! base64url at each of the three alignments a value can have inside a longer encoded string
//! (the characters that mix with unknown neighbouring bytes are left out of the needle), in
//! base32 at each of its five, percent-encoded (the bytes that need it, or every byte; either
//! case), escaped as a JSON string (as it needs, or every character as `\u`), and as HTML's
//! character references. An answer cut short still carries most of a value: any [`PIECE`]
//! bytes of it in a row are found, and any [`PIECE_ENCODED`] characters of its base64 (a mail
//! wraps base64 in lines). One automaton (`aho-corasick`, leftmost-longest) finds them all in
//! one pass, in text or in bytes, overlapping pieces joined; [`Scrubbing`] does it to a stream,
//! across the boundaries of its chunks. Values shorter than [`MIN_VALUE`] are not searched for:
//! they would redact ordinary words. The known limit: a value in pieces shorter than those, or
//! in an encoding not listed here (encrypted, compressed), is not found.

use aho_corasick::{AhoCorasick, MatchKind};
use base64::Engine as _;

use super::Finding;

/// The shortest value searched for.
pub const MIN_VALUE: usize = 8;
/// The shortest encoded needle searched for (a short value's base64 edges are dropped).
const MIN_NEEDLE: usize = 6;
/// How many bytes of a value in a row are found on their own (an error page that quotes the
/// first characters of a token, an echo cut short).
pub(super) const PIECE: usize = 12;
/// The same for a value's base64, in characters (twelve bytes' worth).
const PIECE_ENCODED: usize = 16;

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
    let first_base64 = found.len();
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
    let base64_end = found.len();
    for engine in [&data_encoding::BASE32_NOPAD, &data_encoding::BASE32HEX_NOPAD] {
        for offset in 0..5usize {
            let mut shifted = vec![0u8; offset];
            shifted.extend_from_slice(bytes);
            let encoded = engine.encode(&shifted);
            let (start, end) = ((8 * offset).div_ceil(5), (8 * (offset + bytes.len())) / 5);
            if end > start {
                let needle = &encoded[start..end.min(encoded.len())];
                found.push(needle.to_ascii_lowercase());
                found.push(needle.to_string());
            }
        }
    }
    let encoded: Vec<String> =
        found[first_base64..base64_end].iter().flat_map(|form| pieces(form, PIECE_ENCODED)).collect();
    found.extend(encoded);
    found.push(value.chars().rev().collect());
    let every: String = bytes.iter().map(|byte| format!("%{byte:02X}")).collect();
    found.push(every.to_ascii_lowercase());
    found.push(every);
    let units: Vec<u16> = value.encode_utf16().collect();
    found.push(units.iter().map(|unit| format!("\\u{unit:04x}")).collect());
    found.push(units.iter().map(|unit| format!("\\u{unit:04X}")).collect());
    found.push(value.chars().map(|c| format!("&#{};", c as u32)).collect());
    found.push(value.chars().map(|c| format!("&#x{:x};", c as u32)).collect());
    found.push(value.chars().map(|c| format!("&#x{:X};", c as u32)).collect());
    found.extend(pieces(value, PIECE));
    let percent: String = bytes
        .iter()
        .map(|&byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (byte as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect();
    found.push(lower_escapes(&percent));
    found.push(percent);
    // As a JSON string holds it (quotes, backslashes and control characters escaped; a slash
    // may be too, and anything beyond ASCII as \u escapes).
    if let Ok(json) = serde_json::to_string(value) {
        let json = json[1..json.len() - 1].to_string();
        found.push(json.replace('/', "\\/"));
        let ascii: String = json
            .chars()
            .map(|c| {
                if c.is_ascii() {
                    c.to_string()
                } else {
                    c.encode_utf16(&mut [0; 2]).iter().map(|unit| format!("\\u{unit:04x}")).collect()
                }
            })
            .collect();
        found.push(ascii);
        found.push(json);
    }
    found.retain(|needle| needle.len() >= MIN_NEEDLE);
    found.sort();
    found.dedup();
    found
}

/// Every run of `length` bytes of `form` that begins and ends on a character's boundary (none
/// when the form is no longer than that: it is searched for whole).
fn pieces(form: &str, length: usize) -> Vec<String> {
    if form.len() <= length {
        return vec![];
    }
    (0..=form.len() - length).filter_map(|start| form.get(start..start + length)).map(String::from).collect()
}

/// `percent` with the hex digits of its escapes in lower case (`%2f`), the rest as it is.
fn lower_escapes(percent: &str) -> String {
    let mut out = String::with_capacity(percent.len());
    let mut escape = 0;
    for c in percent.chars() {
        if c == '%' {
            escape = 2;
            out.push(c);
        } else if escape > 0 {
            escape -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
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
        self.find_bytes(text.as_bytes(), found);
    }

    /// As [`Known::find`], in bytes that need not be text.
    /// Pieces of a value overlap: each place is searched again from one byte after the last
    /// found began, and what overlaps is joined into one finding.
    pub fn find_bytes(&self, bytes: &[u8], found: &mut Vec<Finding>) {
        let Some(automaton) = &self.automaton else { return };
        let mut joined: Option<Finding> = None;
        let mut at = 0;
        while let Some(matched) = automaton.find(aho_corasick::Input::new(bytes).range(at..)) {
            at = matched.start() + 1;
            match &mut joined {
                Some(last) if matched.start() < last.end => last.end = last.end.max(matched.end()),
                _ => {
                    let name = self.names[matched.pattern().as_usize()].clone();
                    found.extend(joined.replace(Finding { start: matched.start(), end: matched.end(), rule: name }));
                }
            }
        }
        found.extend(joined);
    }

    /// The name of the first known value in `bytes`, if one is there.
    pub fn first_in(&self, bytes: &[u8]) -> Option<&str> {
        let automaton = self.automaton.as_ref()?;
        automaton.find(bytes).map(|matched| self.names[matched.pattern().as_usize()].as_str())
    }

    /// Whether any value is known at all.
    pub fn is_empty(&self) -> bool {
        self.automaton.is_none()
    }

    /// `bytes` with every known value overwritten in place by as many `*` (the length of
    /// what carries it stays the same: a `Content-Length`, a JSON string stay whole), and the
    /// names found.
    pub fn blot(&self, bytes: &mut [u8]) -> Vec<String> {
        let mut found = vec![];
        self.find_bytes(bytes, &mut found);
        let mut names: Vec<String> = vec![];
        for finding in found {
            bytes[finding.start..finding.end].fill(b'*');
            if !names.contains(&finding.rule) {
                names.push(finding.rule);
            }
        }
        names
    }

    /// The longest form searched for, in bytes: a stream keeps one less than this back to
    /// find a form cut across two chunks.
    fn longest(&self) -> usize {
        self.automaton.as_ref().map_or(0, |automaton| automaton.max_pattern_len())
    }

    /// `text` with every known value replaced by `[redacted: NAME]`, and the names found.
    #[cfg(test)]
    pub fn redact<'t>(&self, text: &'t str) -> (std::borrow::Cow<'t, str>, Vec<String>) {
        let mut found = vec![];
        self.find(text, &mut found);
        super::replace(text, found)
    }
}

/// A stream scrubbed of the known values as it passes, chunk by chunk: each chunk comes out
/// with its values blotted ([`Known::blot`]), less the few bytes at its end that may begin a
/// value the next chunk ends, which come out with the next one (or at [`Scrubbing::finish`]).
pub struct Scrubbing {
    known: std::sync::Arc<Known>,
    kept: Vec<u8>,
    /// The names found so far.
    pub found: Vec<String>,
}

impl Scrubbing {
    /// The values it looks for.
    pub fn known(&self) -> &Known {
        &self.known
    }

    pub fn new(known: std::sync::Arc<Known>) -> Scrubbing {
        Scrubbing { known, kept: vec![], found: vec![] }
    }

    /// What of `chunk` (after what was kept back) may go on now, scrubbed.
    pub fn pass(&mut self, chunk: &[u8]) -> Vec<u8> {
        if self.known.is_empty() {
            return chunk.to_vec();
        }
        let mut bytes = std::mem::take(&mut self.kept);
        bytes.extend_from_slice(chunk);
        let mut found = vec![];
        self.known.find_bytes(&bytes, &mut found);
        // Everything but the last `longest - 1` bytes goes on; a value that begins before that
        // point ends inside `bytes` (it is no longer than `longest`), so it is found whole.
        let mut cut = bytes.len().saturating_sub(self.known.longest().saturating_sub(1));
        for finding in &found {
            if finding.start < cut {
                cut = cut.max(finding.end);
                bytes[finding.start..finding.end].fill(b'*');
                if !self.found.contains(&finding.rule) {
                    self.found.push(finding.rule.clone());
                }
            }
        }
        self.kept = bytes.split_off(cut);
        bytes
    }

    /// What was kept back, scrubbed: the end of the stream.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut rest = std::mem::take(&mut self.kept);
        for name in self.known.blot(&mut rest) {
            if !self.found.contains(&name) {
                self.found.push(name);
            }
        }
        rest
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
        // Escaped in JSON, percent-encoded in lower case.
        for text in [
            serde_json::json!({"echo": format!("Bearer {VALUE}")}).to_string(),
            serde_json::to_string(&format!("Bearer {VALUE}")).expect("json").replace('/', "\\/"),
            format!("q={}", VALUE.replace('/', "%2f").replace('+', "%2b").replace('?', "%3f")),
        ] {
            let (redacted, names) = redactor.redact(&text);
            assert_eq!(names, ["GITHUB_TOKEN"], "{text} → {redacted}");
        }
        // Nothing known: the text itself, not a copy; a short value is not searched for.
        let (same, names) = redactor.redact("nothing to see, abc");
        assert!(matches!(same, Cow::Borrowed(_)) && names.is_empty());
        let (none, _) = Known::new([]).redact(VALUE);
        assert_eq!(none, VALUE);
    }

    #[test]
    fn a_value_is_found_reversed_base32_escaped_every_way_cut_short_and_wrapped() {
        let redactor = Known::new([("GITHUB_TOKEN", VALUE)]);
        let every_byte: String = VALUE.bytes().map(|byte| format!("%{byte:02X}")).collect();
        let mime = base64::engine::general_purpose::STANDARD.encode(format!("Authorization: Bearer {VALUE}"));
        // The characters of it that carry only the value's bits.
        let value_in_mime =
            &mime[("Authorization: Bearer ".len() * 4).div_ceil(3)..mime.trim_end_matches('=').len() - 1];
        let mut carried = vec![
            VALUE.chars().rev().collect::<String>(),
            every_byte.to_ascii_lowercase(),
            every_byte,
            VALUE.chars().map(|c| format!("\\u{:04X}", c as u32)).collect(),
            VALUE.chars().map(|c| format!("&#{};", c as u32)).collect(),
            VALUE.chars().map(|c| format!("&#x{:x};", c as u32)).collect(),
            format!("invalid token '{}…'", &VALUE[..PIECE + 3]),
            format!("…{}", &VALUE[VALUE.len() - PIECE..]),
        ];
        for prefix in ["", "a", "ab", "abc", "abcd"] {
            carried.push(data_encoding::BASE32.encode(format!("{prefix}{VALUE}").as_bytes()));
            carried.push(data_encoding::BASE32.encode(format!("{prefix}{VALUE}").as_bytes()).to_ascii_lowercase());
        }
        // base64 wrapped as a mail wraps it, the break at every place in the value's part.
        for width in 20..mime.len() {
            let wrapped: Vec<&str> =
                mime.as_bytes().chunks(width).map(|line| std::str::from_utf8(line).expect("ascii")).collect();
            carried.push(wrapped.join("\r\n"));
        }
        for text in &carried {
            let (redacted, names) = redactor.redact(text);
            assert_eq!(names, ["GITHUB_TOKEN"], "{text} → {redacted}");
            // What is left of the value is shorter than a piece, in every line.
            for line in redacted.lines() {
                let left = line.replace("[redacted: GITHUB_TOKEN]", "\n");
                for part in left.lines() {
                    let long = |piece: usize| part.len() >= piece;
                    assert!(
                        !(long(PIECE_ENCODED) && value_in_mime.contains(part) || long(PIECE) && VALUE.contains(part)),
                        "{text} → {redacted}"
                    );
                }
            }
        }
        // Ordinary words and a short run of the value are left alone.
        let ordinary = format!("ghp_ tokens are GitHub's; {}", &VALUE[..PIECE - 1]);
        let (same, names) = redactor.redact(&ordinary);
        assert!(matches!(same, Cow::Borrowed(_)) && names.is_empty(), "{same}");
    }

    #[test]
    fn a_stream_is_scrubbed_across_its_chunks_and_keeps_its_length() {
        use base64::Engine as _;
        let known = std::sync::Arc::new(Known::new([("GITHUB_TOKEN", VALUE)]));
        let b64 = base64::engine::general_purpose::STANDARD.encode(format!("Bearer {VALUE}"));
        let body = format!("{{\"h\":\"Bearer {VALUE}\",\"b\":\"{b64}\",\"x\":\"{}\"}}", "y".repeat(100));
        let bytes = body.as_bytes();
        // Cut at every place, in pieces of every size from one byte.
        for size in [1, 2, 3, 7, 16, 64, bytes.len()] {
            let mut scrubbing = Scrubbing::new(known.clone());
            let mut out = vec![];
            for chunk in bytes.chunks(size) {
                out.extend(scrubbing.pass(chunk));
            }
            out.extend(scrubbing.finish());
            let out = String::from_utf8(out).expect("text");
            assert_eq!(out.len(), body.len(), "{size}");
            assert!(!out.contains(VALUE) && !out.contains(&b64[10..30]), "{size}: {out}");
            assert!(out.ends_with(&format!("{}\"}}", "y".repeat(100))), "{size}: {out}");
            assert_eq!(scrubbing.found, ["GITHUB_TOKEN"]);
        }
    }
}
