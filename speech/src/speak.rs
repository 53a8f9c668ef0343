//! The voice: Debian's `espeak-ng` reads the text (given on its standard input, never as an
//! argument) to WAV, and `opusenc` (opus-tools) packs it as an OGG/Opus voice note. What the
//! daemon sends is already plain sentences; here the text is made inert once more: no control
//! characters, and none of espeak's own markup (`[[phonemes]]`, SSML's `<…>`).

use std::io::Write as _;
use std::process::{Command, Stdio};

/// The most characters read aloud in one note (some five minutes).
pub const MOST_CHARACTERS: usize = 4000;

/// A voice note.
#[derive(Debug)]
pub struct Spoken {
    pub ogg: Vec<u8>,
    pub seconds: f32,
}

/// Whether `voice` names an espeak-ng voice plainly ("en-us", "de", "en+f3"), nothing more.
pub fn voice_name(voice: &str) -> bool {
    !voice.is_empty()
        && voice.len() <= 24
        && voice.bytes().all(|byte| byte.is_ascii_alphanumeric() || byte == b'-' || byte == b'+' || byte == b'_')
        && !voice.starts_with('-')
}

/// The text as espeak-ng may read it: printable characters, markup brackets as spaces, at most
/// [`MOST_CHARACTERS`].
pub fn inert(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => ' ',
            '[' | ']' | '<' | '>' | '{' | '}' | '\\' => ' ',
            c if c.is_control() => ' ',
            // Bidirectional overrides and invisible formatting say nothing.
            '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}' => ' ',
            c => c,
        })
        .take(MOST_CHARACTERS)
        .collect()
}

/// Speaks `text` in `voice` with espeak-ng, packed as OGG/Opus.
pub fn espeak(text: &str, voice: &str) -> Result<Spoken, String> {
    let voice = if voice.is_empty() { "en-us" } else { voice };
    if !voice_name(voice) {
        return Err(format!("`{voice}` is not a voice name such as en-us or de"));
    }
    let text = inert(text);
    if text.trim().is_empty() {
        return Err("there is nothing to say".into());
    }
    let wav = run(Command::new("espeak-ng").args(["-v", voice, "--stdout"]), text.as_bytes(), "espeak-ng")?;
    let ogg =
        run(Command::new("opusenc").args(["--quiet", "--bitrate", "24", "--downmix-mono", "-", "-"]), &wav, "opusenc")?;
    let seconds = crate::audio::ogg_opus_seconds(&ogg).ok_or("opusenc made no OGG/Opus")?;
    Ok(Spoken { ogg, seconds })
}

/// Runs `command` with `input` on its standard input, and gives its standard output.
fn run(command: &mut Command, input: &[u8], name: &str) -> Result<Vec<u8>, String> {
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env_clear()
        .spawn()
        .map_err(|error| format!("cannot run {name}: {error}"))?;
    let mut stdin = child.stdin.take().ok_or_else(|| format!("{name} took no input"))?;
    let input = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let output = child.wait_with_output().map_err(|error| format!("{name} failed: {error}"))?;
    let written = writer.join().map_err(|_panicked| format!("{name}'s input could not be written"))?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        return Err(format!("{name} failed ({}): {}", output.status, said.trim()));
    }
    written.map_err(|error| format!("{name}'s input could not be written: {error}"))?;
    Ok(output.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_controls_and_overrides_are_not_read() {
        assert_eq!(inert("say [[h@l'oU]] <speak>hi</speak>\x1b[31m"), "say   h@l'oU    speak hi /speak   31m");
        assert_eq!(inert("a\u{202e}b\nc"), "a b c");
        assert_eq!(inert(&"x".repeat(10_000)).len(), MOST_CHARACTERS);
    }

    #[test]
    fn a_voice_is_a_plain_name() {
        for good in ["en-us", "de", "en+f3", "en_GB"] {
            assert!(voice_name(good), "{good}");
        }
        for bad in ["", "--stdout", "../voices/x", "en us", "en;rm", &"a".repeat(30)] {
            assert!(!voice_name(bad), "{bad}");
        }
    }
}
