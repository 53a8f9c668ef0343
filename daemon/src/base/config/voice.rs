//! `voice:` in config.yaml: voice notes heard and answers spoken on this host (issue 63,
//! docs/voice.md). The recogniser and the voice run in the speech container, without network.

use serde::{Deserialize, Serialize};

use super::ByteSize;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct VoiceConfig {
    /// Whether voice notes are heard (off: they stay files, and the sender is told).
    pub enabled: bool,
    /// The recogniser's model, whisper.cpp's ggml file; empty: `data/models/whisper-base-q8_0.bin`,
    /// made by `baaahtd speech install`.
    pub model: String,
    /// The language people speak, as a code (`en`, `de`), or `auto` for the model to find it in
    /// each note (twice the work).
    pub language: String,
    /// The voice answers are spoken in: an espeak-ng voice (`en-us`, `de`, `en+f3`).
    pub voice: String,
    /// The longest voice note heard, in seconds.
    pub max_seconds: u32,
    /// The largest voice note taken.
    pub max_size: ByteSize,
    /// The minutes of voice notes each person may have heard a day (0: no limit).
    pub minutes_per_day: u32,
    /// When an answer also comes as a voice note: `when_asked_by_voice`, `always` or `never`.
    pub spoken_answers: SpokenAnswers,
    /// The longest answer spoken, in seconds (a longer one is cut at a sentence, and says so).
    pub max_spoken_seconds: u32,
    /// Seconds the speech container waits for the next note before it stops.
    pub idle_timeout: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SpokenAnswers {
    WhenAskedByVoice,
    Always,
    Never,
}

impl Default for VoiceConfig {
    fn default() -> Self {
        VoiceConfig {
            enabled: true,
            model: String::new(),
            language: "en".into(),
            voice: "en-us".into(),
            max_seconds: 300,
            max_size: ByteSize(20 << 20),
            minutes_per_day: 60,
            spoken_answers: SpokenAnswers::WhenAskedByVoice,
            max_spoken_seconds: 90,
            idle_timeout: 600,
        }
    }
}

impl VoiceConfig {
    /// What is wrong with it, as (the key, a sentence).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        let language = &self.language;
        let plain =
            |text: &str, more: &[u8]| text.bytes().all(|byte| byte.is_ascii_alphanumeric() || more.contains(&byte));
        if language != "auto" && !(2..=3).contains(&language.len()) || !language.bytes().all(|b| b.is_ascii_lowercase())
        {
            return Some(("language", format!("is `{language}`: write a language code such as en or de, or auto")));
        }
        if self.voice.is_empty() || self.voice.len() > 24 || !plain(&self.voice, b"-+_") || self.voice.starts_with('-')
        {
            return Some((
                "voice",
                format!("is `{}`: write an espeak-ng voice such as en-us, de or en+f3", self.voice),
            ));
        }
        if !(1..=3600).contains(&self.max_seconds) {
            return Some(("max_seconds", "must be between 1 and 3600".into()));
        }
        if self.max_size.0 < 1024 || self.max_size.0 > 32 << 20 {
            return Some((
                "max_size",
                "must be between 1KiB and 32MiB (what one message to the speech container holds)".into(),
            ));
        }
        if !(5..=600).contains(&self.max_spoken_seconds) {
            return Some(("max_spoken_seconds", "must be between 5 and 600".into()));
        }
        if self.idle_timeout == 0 {
            return Some(("idle_timeout", "must be at least 1 second".into()));
        }
        None
    }
}
