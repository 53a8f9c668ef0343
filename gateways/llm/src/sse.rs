//! An incremental Server-Sent Events decoder (WHATWG HTML §9.2): bytes in, events out, whatever
//! the chunking — a network read may end anywhere, even inside a UTF-8 character or a CRLF.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; "message" when absent.
    pub event: String,
    /// The `data:` lines joined with "\n".
    pub data: String,
}

#[derive(Debug, Default)]
pub struct SseDecoder {
    buffer: Vec<u8>,
    event: Option<String>,
    data: Option<String>,
    /// The last byte seen was a CR, so a following LF belongs to the same line end.
    after_cr: bool,
}

impl SseDecoder {
    pub fn new() -> SseDecoder {
        SseDecoder::default()
    }

    /// Feeds bytes; returns the events completed by them.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = vec![];
        for &byte in bytes {
            if self.after_cr {
                self.after_cr = false;
                if byte == b'\n' {
                    continue;
                }
            }
            match byte {
                b'\n' | b'\r' => {
                    self.after_cr = byte == b'\r';
                    let line = std::mem::take(&mut self.buffer);
                    if let Some(event) = self.line(&String::from_utf8_lossy(&line)) {
                        out.push(event);
                    }
                }
                _ => self.buffer.push(byte),
            }
        }
        out
    }

    fn line(&mut self, line: &str) -> Option<SseEvent> {
        if line.is_empty() {
            let data = self.data.take()?;
            let event = self.event.take().unwrap_or_else(|| "message".into());
            return Some(SseEvent { event, data });
        }
        if line.starts_with(':') {
            return None; // a comment, e.g. a keep-alive
        }
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_string()),
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            },
            _ => {} // id, retry and unknown fields do not concern us
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut decoder = SseDecoder::new();
        chunks.iter().flat_map(|chunk| decoder.push(chunk)).collect()
    }

    #[test]
    fn framing_table() {
        let event = |event: &str, data: &str| SseEvent { event: event.into(), data: data.into() };
        let cases: Vec<(Vec<&[u8]>, Vec<SseEvent>)> = vec![
            (vec![b"event: ping\ndata: {}\n\n"], vec![event("ping", "{}")]),
            (vec![b"data: a\r\ndata: b\r\n\r\n"], vec![event("message", "a\nb")]),
            (vec![b"data: x\r", b"\n\r", b"\n"], vec![event("message", "x")]),
            (vec![b": keep-alive\n\ndata:no-space\n\n"], vec![event("message", "no-space")]),
            (
                vec![b"event: a\nid: 7\nretry: 10\ndata: 1\n\n", b"event: b\ndata: 2\n\n"],
                vec![event("a", "1"), event("b", "2")],
            ),
            (vec![b"data: caf", &[0xC3], &[0xA9], b"\n\n"], vec![event("message", "café")]),
            (vec![b"event: only-event\n\n"], vec![]),
            (vec![b"data: unfinished"], vec![]),
        ];
        for (chunks, expected) in cases {
            assert_eq!(all(&chunks), expected, "{chunks:?}");
        }
    }

    #[test]
    fn byte_by_byte_equals_whole() {
        let stream = b"event: message_start\ndata: {\"a\":1}\n\nevent: ping\ndata: {}\n\n";
        let whole = all(&[stream]);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(all(&bytes), whole);
        assert_eq!(whole.len(), 2);
    }
}
