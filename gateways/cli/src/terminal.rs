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

/// A time the daemon gives (RFC 3339, in UTC) as the person reads it: in this machine's time
/// zone, to the minute (`2026-11-28 14:46`); what does not read as a time stays as it is.
pub fn local_time(rfc3339: &str) -> String {
    match rfc3339.parse::<jiff::Timestamp>() {
        Ok(at) => at.to_zoned(jiff::tz::TimeZone::system()).strftime("%Y-%m-%d %H:%M").to_string(),
        Err(_) => rfc3339.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_is_shown_in_the_local_zone_to_the_minute() {
        let at = "2026-11-28T14:46:41.059Z";
        let expected = at
            .parse::<jiff::Timestamp>()
            .expect("a time")
            .to_zoned(jiff::tz::TimeZone::system())
            .strftime("%Y-%m-%d %H:%M")
            .to_string();
        assert_eq!(local_time(at), expected);
        assert_eq!(local_time("soon"), "soon");
    }
}
