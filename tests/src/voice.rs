//! Voice notes for the tests (issue 63): sentences espeak-ng speaks that Whisper base hears
//! back well, spoken into OGG/Opus on the host by the real `baaaht-speech`, the speech model
//! `scripts/test` installs, and the word error rate a transcript is judged by.

use std::path::PathBuf;

/// Said to the assistant: each came back from espeak-ng → Opus → Whisper base q8_0 with a word
/// error rate of at most 10% when they were chosen (none holds a number or a name).
pub const ASKED: [&str; 8] = [
    "What should we cook for dinner tonight?",
    "Can you tell me what the weather will be like this weekend?",
    "Turn off the lights in the kitchen.",
    "What time does the pharmacy close today?",
    "Remind me to call my mother on Sunday afternoon.",
    "Play some quiet music in the living room.",
    "How long should I boil an egg?",
    "Please remind everyone to take out the rubbish tonight.",
];

/// Answers the assistant speaks.
pub const ANSWERED: [&str; 4] = [
    "I added milk and eggs to your shopping list, and I will remind you when you get to the store.",
    "You could make a simple pasta with tomatoes and garlic, which takes about half an hour to cook.",
    "It is going to rain tomorrow afternoon, so you should take an umbrella when you go out.",
    "The kitchen lights are off now, but the lamp in the living room is still on.",
];

/// The speech model `scripts/test` installs (`BAAAHT_SPEECH_MODEL`, else the cache's); a test
/// that needs it fails loudly when it is missing.
pub fn model() -> PathBuf {
    let path = std::env::var_os("BAAAHT_SPEECH_MODEL").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("XDG_CACHE_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"));
        cache.join("baaaht/speech/whisper-base-q8_0.bin")
    });
    assert!(
        path.is_file(),
        "the speech model {} is missing: scripts/test installs it (target/debug/baaaht-speech install --models DIR)",
        path.display()
    );
    path
}

/// `text` spoken by espeak-ng into an OGG/Opus voice note, and its seconds.
pub fn speak(text: &str) -> (Vec<u8>, u32) {
    let folder = tempfile::tempdir().expect("temp");
    let out = folder.path().join("note.ogg");
    let made = std::process::Command::new(crate::bin("baaaht-speech"))
        .args(["speak", text, "--out"])
        .arg(&out)
        .output()
        .expect("baaaht-speech speak (espeak-ng and opusenc on the host)");
    assert!(made.status.success(), "speaking failed: {}", String::from_utf8_lossy(&made.stderr));
    let said = String::from_utf8_lossy(&made.stdout);
    let seconds: f32 = said.split_whitespace().next().and_then(|n| n.parse().ok()).unwrap_or(1.0);
    (std::fs::read(&out).expect("the voice note"), seconds.ceil() as u32)
}

/// The words of `text` as a transcript is judged: lowercase, no punctuation, apostrophes dropped.
pub fn words(text: &str) -> Vec<String> {
    text.to_lowercase()
        .replace('\'', "")
        .split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_string)
        .collect()
}

/// Word errors of `heard` against `said` (substitutions, insertions, deletions) and the words
/// said: their ratio is the word error rate.
pub fn word_errors(said: &str, heard: &str) -> (usize, usize) {
    let (said, heard) = (words(said), words(heard));
    let mut row: Vec<usize> = (0..=heard.len()).collect();
    for (i, word) in said.iter().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, other) in heard.iter().enumerate() {
            let next = (row[j + 1] + 1).min(row[j] + 1).min(diagonal + usize::from(word != other));
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    (row[heard.len()], said.len())
}

#[cfg(test)]
mod tests {
    #[test]
    fn word_errors_count_substitutions_insertions_and_deletions() {
        assert_eq!(super::word_errors("Turn off the lights.", "turn off the lights"), (0, 4));
        assert_eq!(super::word_errors("turn off the lights", "turn of the light"), (2, 4));
        assert_eq!(super::word_errors("turn off the lights", "turn off all the lights now"), (2, 4));
        assert_eq!(super::word_errors("turn off the lights", "lights"), (3, 4));
    }
}
