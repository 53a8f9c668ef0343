//! Text a model or another person wrote, made safe for where it is shown. Replies, names and
//! file names may carry control sequences: OSC 52 sets a terminal's clipboard, `ESC [2J`
//! clears its screen, `\r` with `ESC [2K` rewrites a line already read, and a bidirectional
//! override (U+202E) turns "invoice<RLO>fdp.exe" into what reads as "invoiceexe.pdf". [`clean`] keeps newlines and tabs and shows every
//! other control character visibly (`^[` for ESC, `^M` for a carriage return, `<U+009B>` for a
//! C1 control or a bidirectional override), so nothing written can act on a terminal or hide
//! in a chat. [`pieces`] cuts text to a channel's limit per message.

use std::borrow::Cow;

/// Whether `c` must not be shown as it is.
fn is_control(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{00}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Bidirectional overrides, isolates and marks reorder what the reader sees.
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}' => true,
        // Line and paragraph separators start a line where only a newline should.
        '\u{2028}' | '\u{2029}' => true,
        _ => false,
    }
}

/// `text` with every control character but newline and tab made visible.
pub fn clean(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_control) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !is_control(c) => out.push(c),
            '\u{7f}' => out.push_str("^?"),
            // Caret notation, as `cat -v` shows them: ESC is ^[, CR is ^M.
            '\u{00}'..='\u{1f}' => {
                out.push('^');
                out.push(char::from(c as u8 + 0x40));
            }
            other => out.push_str(&format!("<U+{:04X}>", other as u32)),
        }
    }
    Cow::Owned(out)
}

/// `text` in pieces of at most `limit` bytes, cut at character boundaries only (pieces join up
/// exactly as the text was).
pub fn pieces(text: &str, limit: usize) -> Vec<String> {
    let mut pieces = vec![];
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = rest.len().min(limit.max(4));
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (piece, after) = rest.split_at(end);
        pieces.push(piece.to_string());
        rest = after;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_sequences_are_shown_not_obeyed() {
        let cases: &[(&str, &str)] = &[
            ("plain text\twith a tab\nand a line", "plain text\twith a tab\nand a line"),
            ("\x1b]52;c;aGVsbG8=\x07", "^[]52;c;aGVsbG8=^G"),
            ("\x1b]0;pwned\x07title", "^[]0;pwned^Gtitle"),
            ("\x1b[2J\x1b[H", "^[[2J^[[H"),
            ("safe\r\x1b[2Krewritten", "safe^M^[[2Krewritten"),
            ("\u{9b}31m", "<U+009B>31m"),
            ("abc\u{202e}txt.exe", "abc<U+202E>txt.exe"),
            ("\x7f\x00", "^?^@"),
            ("héllo wörld ✓", "héllo wörld ✓"),
        ];
        for (raw, shown) in cases {
            assert_eq!(clean(raw), *shown, "{raw:?}");
        }
        assert!(matches!(clean("nothing to do"), Cow::Borrowed(_)));
    }

    #[test]
    fn pieces_are_cut_at_character_boundaries_and_join_up_exactly() {
        let text = "ab é  \n".repeat(3);
        let cut = pieces(&text, 5);
        assert!(cut.iter().all(|piece| piece.len() <= 5), "{cut:?}");
        assert_eq!(cut.concat(), text);
        assert!(pieces("", 5).is_empty());
    }
}
