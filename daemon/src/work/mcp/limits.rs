//! What an MCP server may put in front of a model: its tools' descriptions and schemas are
//! cut to a size (each tool's, and all of one server's), and an answer longer than the longest
//! message the client takes is cut at once and answered with its beginning, instead of being
//! dropped by the client while its call waits for its timeout. Both say what they cut.

/// The longest tool description offered, in bytes.
pub const MAX_DESCRIPTION: usize = 2 << 10;
/// The largest parameters schema offered (as JSON), in bytes.
pub const MAX_SCHEMA: usize = 16 << 10;
/// All of one server's tool definitions together, in bytes.
pub const MAX_SERVER_DEFINITIONS: usize = 64 << 10;
/// The most of a cut answer's text shown.
const SHOWN_OF_A_CUT_ANSWER: usize = 64 << 10;

/// `text` cut at `max` bytes (on a character boundary); how much was dropped.
fn cut(text: &str, max: usize) -> (&str, usize) {
    if text.len() <= max {
        return (text, 0);
    }
    let mut at = max;
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    (&text[..at], text.len() - at)
}

/// The definitions of one server's tools (name, description, schema) as offered: each
/// description and schema within its cap, and tools past [`MAX_SERVER_DEFINITIONS`] left
/// out; every cut is said in the description, and logged.
pub fn capped(
    server: &str,
    definitions: Vec<(String, String, serde_json::Value)>,
) -> Vec<(String, String, serde_json::Value)> {
    let mut offered = vec![];
    let mut total = 0;
    for (name, description, schema) in definitions {
        let (kept, dropped) = cut(&description, MAX_DESCRIPTION);
        let mut description = kept.to_string();
        if dropped > 0 {
            description.push_str(&format!(" [description cut by baaaht: {dropped} more bytes]"));
        }
        let size = schema.to_string().len();
        let schema = if size > MAX_SCHEMA {
            description.push_str(&format!(
                " [its parameters' schema ({size} bytes) is larger than baaaht offers ({MAX_SCHEMA}): pass its \
                 arguments as the tool's documentation says]"
            ));
            serde_json::json!({"type": "object"})
        } else {
            schema
        };
        if dropped > 0 || size > MAX_SCHEMA {
            tracing::warn!(server, tool = %name, description_bytes = kept.len() + dropped, schema_bytes = size, "an MCP tool's definition was cut");
        }
        let length = name.len() + description.len() + schema.to_string().len();
        if total + length > MAX_SERVER_DEFINITIONS {
            tracing::warn!(server, tool = %name, "an MCP server's tool definitions pass {MAX_SERVER_DEFINITIONS} bytes: the rest are not offered");
            break;
        }
        total += length;
        offered.push((name, description, schema));
    }
    offered
}

/// A server's output on its way to the client, one JSON-RPC message a line. Each line is held
/// until it ends and then passed on whole; a line longer than `max` is not passed on: its
/// call is answered at once with the beginning of its text and a note that it was cut, and
/// the rest of the line is dropped as it comes.
#[derive(Debug)]
pub struct Lines {
    max: usize,
    line: Vec<u8>,
    dropping: bool,
}

impl Lines {
    pub fn new(max: usize) -> Lines {
        Lines { max, line: vec![], dropping: false }
    }

    /// What of `bytes` to pass on to the client now.
    pub fn push(&mut self, mut bytes: &[u8]) -> Vec<u8> {
        let mut out = vec![];
        while !bytes.is_empty() {
            let end = bytes.iter().position(|byte| *byte == b'\n');
            let (part, rest) = match end {
                Some(at) => (&bytes[..at], &bytes[at + 1..]),
                None => (bytes, &[][..]),
            };
            bytes = rest;
            if !self.dropping {
                let room = self.max.saturating_sub(self.line.len());
                self.line.extend_from_slice(&part[..part.len().min(room)]);
                if part.len() > room {
                    self.dropping = true;
                    out.extend(cut_answer(&self.line, self.max));
                    self.line.clear();
                }
            }
            if end.is_some() {
                if !self.dropping {
                    out.append(&mut self.line);
                    out.push(b'\n');
                }
                self.dropping = false;
                self.line.clear();
            }
        }
        out
    }
}

/// The line answering the call whose answer begins with `prefix` (longer than `max` bytes):
/// its text's beginning and a note, as a successful `tools/call` result; nothing when its id
/// is not among its first members.
fn cut_answer(prefix: &[u8], max: usize) -> Vec<u8> {
    let text = String::from_utf8_lossy(prefix);
    let Some(id) = top_level_id(&text) else {
        tracing::warn!("an MCP server's message is longer than the client takes, and names no id early: dropped");
        return vec![];
    };
    let shown = first_text(&text).unwrap_or_default();
    let (shown, _) = cut(&shown, SHOWN_OF_A_CUT_ANSWER);
    let note =
        format!("\n[truncated: the server's answer was longer than {} MiB; only its beginning is shown]", max >> 20);
    let answer = serde_json::json!({
        "jsonrpc": "2.0",
        "id": id,
        "result": {"content": [{"type": "text", "text": format!("{shown}{note}")}], "isError": false},
    });
    tracing::warn!(%id, "an MCP server's answer was longer than the client takes: cut");
    let mut line = answer.to_string().into_bytes();
    line.push(b'\n');
    line
}

/// The `id` member of the JSON object `text` begins with, when it comes before anything cut.
fn top_level_id(text: &str) -> Option<serde_json::Value> {
    let bytes = text.as_bytes();
    let (mut depth, mut index, mut in_string, mut key_start) = (0usize, 0usize, false, None);
    while index < bytes.len() {
        let byte = bytes[index];
        if in_string {
            match byte {
                b'\\' => index += 1,
                b'"' => {
                    in_string = false;
                    if let (1, Some(start)) = (depth, key_start.take()) {
                        let key = &text[start..index];
                        let after = text[index + 1..].trim_start();
                        if key == "id" {
                            let value = after.strip_prefix(':')?.trim_start();
                            let end = value.find([',', '}']).unwrap_or(value.len());
                            return serde_json::from_str(value[..end].trim()).ok();
                        }
                    }
                }
                _ => {}
            }
        } else {
            match byte {
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth = depth.saturating_sub(1),
                b'"' => {
                    in_string = true;
                    // A key at the top: right after `{` or `,`.
                    let before = text[..index].trim_end();
                    if depth == 1 && (before.ends_with('{') || before.ends_with(',')) {
                        key_start = Some(index + 1);
                    }
                }
                _ => {}
            }
        }
        index += 1;
    }
    None
}

/// The beginning of the first `"text"` string in `text` (cut JSON), unescaped.
fn first_text(text: &str) -> Option<String> {
    // The key `"text"`, not a value that reads "text" (`"type":"text"`).
    let after = text.match_indices("\"text\"").find_map(|(start, _)| {
        text[start + 6..].trim_start().strip_prefix(':').and_then(|value| value.trim_start().strip_prefix('"'))
    })?;
    let bytes = after.as_bytes();
    let mut end = 0;
    while end < bytes.len() {
        match bytes[end] {
            b'\\' => end += 2,
            b'"' => break,
            _ => end += 1,
        }
    }
    // A cut escape at the end is left out.
    let mut raw = &after[..end.min(after.len())];
    while let Some(at) = raw.rfind('\\') {
        if serde_json::from_str::<String>(&format!("\"{}\"", &raw[at..])).is_ok() {
            break;
        }
        raw = &raw[..at];
    }
    serde_json::from_str(&format!("\"{raw}\"")).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_too_long_is_answered_at_once_with_its_beginning_and_the_rest_dropped() {
        let mut lines = Lines::new(100);
        let short = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n";
        assert_eq!(lines.push(short), short.to_vec());
        // A line in pieces is held until it ends.
        assert!(lines.push(b"{\"jsonrpc\":\"2.0\",").is_empty());
        assert_eq!(lines.push(b"\"id\":2}\n"), b"{\"jsonrpc\":\"2.0\",\"id\":2}\n".to_vec());
        let long = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"line \\\"one\\\"\\n{}",
            "x".repeat(200)
        );
        let answered = lines.push(long.as_bytes());
        let answer: serde_json::Value = serde_json::from_slice(&answered).expect("one JSON line");
        assert_eq!(answer["id"], 7);
        let text = answer["result"]["content"][0]["text"].as_str().expect("text");
        assert!(text.starts_with("line \"one\"\nxx") && text.contains("[truncated: "), "{text}");
        // The rest of that line goes nowhere; the next one passes.
        assert!(lines.push(b"xxxx\"}]}}\n{\"id\":8}\n").ends_with(b"{\"id\":8}\n"));
    }

    #[test]
    fn the_id_is_the_top_level_one() {
        assert_eq!(top_level_id(r#"{"jsonrpc":"2.0","id":"a-1","result":{"#), Some(serde_json::json!("a-1")));
        assert_eq!(top_level_id(r#"{"result":{"id":5,"x":[1,{"id":6}]},"id":9,"#), Some(serde_json::json!(9)));
        assert_eq!(top_level_id(r#"{"result":{"id":5,"content":"#), None);
    }

    #[test]
    fn descriptions_schemas_and_servers_are_held_to_their_size() {
        let big = "d".repeat(200 << 10);
        let schema = serde_json::json!({"type": "object", "description": "s".repeat(MAX_SCHEMA)});
        let offered = capped(
            "huge",
            vec![("a".into(), big.clone(), serde_json::json!({"type": "object"})), ("b".into(), "fine".into(), schema)],
        );
        assert!(offered[0].1.len() < MAX_DESCRIPTION + 100 && offered[0].1.contains("[description cut by baaaht"));
        assert_eq!(offered[1].2, serde_json::json!({"type": "object"}));
        assert!(offered[1].1.contains("is larger than baaaht offers"));
        let many: Vec<_> = (0..100).map(|n| (format!("t{n}"), "d".repeat(1500), serde_json::json!({}))).collect();
        let kept = capped("many", many);
        assert!(
            kept.len() < 100
                && kept.iter().map(|(n, d, s)| n.len() + d.len() + s.to_string().len()).sum::<usize>()
                    <= MAX_SERVER_DEFINITIONS
        );
    }
}
