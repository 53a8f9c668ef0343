//! What reaches the operator's terminal. Text an agent or a model produced (replies, tasks,
//! messages, transcripts, skill descriptions, error messages that quote them) may carry
//! terminal control sequences: OSC 52 sets the clipboard, OSC 0 the window title, `ESC [2J`
//! clears the screen, `\r` with `ESC [2K` rewrites a line the operator already read. Every such
//! text goes through [`clean`] before it is printed, on stdout and stderr alike: newlines and
//! tabs stay, every other control character is shown visibly (`^[` for ESC, `^M` for a
//! carriage return, `<U+009B>` for a C1 control or a bidirectional override), so nothing the
//! model writes can act on the terminal. The rule is the gateway kit's, shared with every chat
//! gateway.

pub use baaaht_gateway_kit::text::clean;
