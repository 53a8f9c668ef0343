//! What reaches the operator's terminal. Text an agent or a model produced (replies, tasks,
//! messages, transcripts, skill descriptions, error messages that quote them) may carry
//! terminal control sequences: OSC 52 sets the clipboard, OSC 0 the window title, `ESC [2J`
//! clears the screen, `\r` with `ESC [2K` rewrites a line the operator already read. Every such
//! text goes through [`clean`] before it is printed, on stdout and stderr alike: newlines and
//! tabs stay, every other control character is shown visibly (`^[` for ESC, `^M` for a
//! carriage return, `<U+009B>` for a C1 control or a bidirectional override), so nothing the
//! model writes can act on the terminal.

use std::borrow::Cow;

/// Whether `c` must not reach the terminal as it is.
fn is_control(c: char) -> bool {
    match c {
        '\n' | '\t' => false,
        '\u{00}'..='\u{1f}' | '\u{7f}'..='\u{9f}' => true,
        // Bidirectional overrides and isolates reorder what the operator sees.
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
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
        for (input, shown) in cases {
            assert_eq!(clean(input), *shown, "{input:?}");
        }
        assert!(matches!(clean("nothing to do"), Cow::Borrowed(_)));
    }
}
