//! The recogniser: whisper.cpp through `whisper-rs`, one model loaded once, one recording heard
//! at a time, window by window ([`Sound::windows`]) so a long note tells its progress.

use std::path::Path;
use std::sync::Mutex;

use whisper_rs::{FullParams, SamplingStrategy, WhisperContext, WhisperContextParameters, WhisperState};

use crate::audio::Sound;

/// What was heard.
#[derive(Debug, Clone, PartialEq)]
pub struct Heard {
    pub text: String,
    /// The language heard, as a code.
    pub language: String,
}

/// A loaded model and its one working state.
pub struct Recogniser {
    state: Mutex<WhisperState>,
    threads: i32,
}

impl std::fmt::Debug for Recogniser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recogniser").field("threads", &self.threads).finish_non_exhaustive()
    }
}

impl Recogniser {
    /// Loads the model at `path` (whisper.cpp's ggml format).
    pub fn load(path: &Path) -> Result<Recogniser, String> {
        whisper_rs::install_logging_hooks();
        let name = path.to_str().ok_or_else(|| format!("{} is not a UTF-8 path", path.display()))?;
        if !path.is_file() {
            return Err(format!(
                "the speech model {} is missing: an administrator runs `baaahtd speech install`",
                path.display()
            ));
        }
        let context = WhisperContext::new_with_params(name, WhisperContextParameters::default())
            .map_err(|error| format!("cannot load the speech model {}: {error}", path.display()))?;
        let state = context.create_state().map_err(|error| format!("cannot prepare the speech model: {error}"))?;
        let threads = std::thread::available_parallelism().map_or(2, |n| n.get().min(4)) as i32;
        Ok(Recogniser { state: Mutex::new(state), threads })
    }

    /// Hears `sound` in `language` (a code, or empty to let the model find it), telling
    /// `progress` the seconds done after each window.
    pub fn hear(&self, sound: &Sound, language: &str, mut progress: impl FnMut(f32)) -> Result<Heard, String> {
        let mut state = self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut language = if language.is_empty() { "auto".to_string() } else { language.to_string() };
        let mut text = String::new();
        for window in sound.windows() {
            let samples = &sound.samples[window.clone()];
            if Sound::speaks(samples) {
                let mut params = FullParams::new(SamplingStrategy::Greedy { best_of: 1 });
                params.set_n_threads(self.threads);
                params.set_language(Some(&language));
                params.set_no_context(true);
                params.set_suppress_blank(true);
                params.set_print_progress(false);
                params.set_print_realtime(false);
                params.set_print_special(false);
                params.set_print_timestamps(false);
                state.full(params, samples).map_err(|error| format!("the recogniser failed: {error}"))?;
                for segment in state.as_iter() {
                    let said = segment.to_str_lossy().map_err(|error| format!("the recogniser failed: {error}"))?;
                    let said = said.trim();
                    if !said.is_empty() {
                        if !text.is_empty() {
                            text.push(' ');
                        }
                        text.push_str(said);
                    }
                }
                if language == "auto" {
                    // The rest is heard in the language of the first words.
                    language = whisper_rs::get_lang_str(state.full_lang_id_from_state()).unwrap_or("en").to_string();
                }
            }
            progress(window.end as f32 / crate::audio::RATE as f32);
        }
        if language == "auto" {
            language.clear();
        }
        Ok(Heard { text, language })
    }
}

/// Whether `code` is a language code the model may be told ("en", "de", "yue"), or empty.
pub fn language_code(code: &str) -> bool {
    code.is_empty() || (code.len() <= 3 && code.len() >= 2 && code.bytes().all(|byte| byte.is_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn only_short_lowercase_codes_are_languages() {
        for good in ["", "en", "de", "yue"] {
            assert!(super::language_code(good), "{good}");
        }
        for bad in ["english", "e", "EN", "e\0", "../x", "auto"] {
            assert!(!super::language_code(bad), "{bad}");
        }
    }
}
