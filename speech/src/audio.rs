//! What a recording holds, as 16 kHz mono samples for the recogniser: OGG/Opus (the voice notes
//! of Telegram, Matrix, Slack and mail) and WebM/Opus (a browser's MediaRecorder), known by their
//! first bytes, never by the type a channel declared. A recording's length is bounded before a
//! byte of it is decoded (what its container says) and while it is decoded (the samples made so
//! far), so hours of silence packed into a few megabytes are refused, not heard.

use std::io::Cursor;
use std::ops::Range;

use symphonia::core::codecs::audio::well_known::CODEC_ID_OPUS;
use symphonia::core::codecs::CodecParameters;
use symphonia::core::formats::{FormatOptions, FormatReader, Track};
use symphonia::core::io::{MediaSourceStream, MediaSourceStreamOptions};

/// Samples a second, as the recogniser takes them; Opus decodes to it natively.
pub const RATE: usize = 16_000;
/// The longest frame Opus has (120 ms), in samples at [`RATE`].
const LONGEST_FRAME: usize = RATE * 120 / 1000;
/// A recording whose every 20 ms is quieter than this (about -40 dBFS) says nothing.
const SPEAKING: f32 = 0.01;
/// At least this much of it must be louder, or the recogniser would make words up.
const LEAST_SPOKEN_SECONDS: f32 = 0.3;
/// The longest a window given to the recogniser at once may be (its model hears 30 s).
const WINDOW_SECONDS: usize = 28;

/// How a recording is packed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Ogg,
    WebM,
}

/// Why a recording is not heard, as the sentence its sender reads.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Refused {
    #[error("it is {0}, which baaaht does not hear: send a voice note (OGG or WebM with Opus sound)")]
    Format(&'static str),
    #[error("it holds {0} sound, which baaaht does not hear: send a voice note (Opus sound)")]
    Codec(String),
    #[error("it is {seconds} s long, longer than the {most} s a voice note may be")]
    TooLong { seconds: u64, most: u32 },
    #[error("it is damaged ({0}); record it again")]
    Damaged(String),
    #[error("it holds no sound")]
    Empty,
    #[error("it is silent: nothing was said")]
    Silent,
}

impl Format {
    /// The format of `bytes`, by their first bytes; a sentence naming what they are otherwise.
    pub fn of(bytes: &[u8]) -> Result<Format, Refused> {
        if bytes.starts_with(b"OggS") {
            Ok(Format::Ogg)
        } else if bytes.starts_with(&[0x1a, 0x45, 0xdf, 0xa3]) {
            Ok(Format::WebM)
        } else {
            Err(Refused::Format(named(bytes)))
        }
    }
}

/// What other bytes are, for the refusal.
fn named(bytes: &[u8]) -> &'static str {
    if bytes.starts_with(b"ID3") || bytes.starts_with(&[0xff, 0xfb]) || bytes.starts_with(&[0xff, 0xf3]) {
        "MP3"
    } else if bytes.starts_with(b"RIFF") && bytes.get(8..12) == Some(b"WAVE") {
        "WAV"
    } else if bytes.get(4..8) == Some(b"ftyp") {
        "MP4 or M4A"
    } else if bytes.starts_with(b"fLaC") {
        "FLAC"
    } else if bytes.starts_with(&[0xff, 0xf1]) || bytes.starts_with(&[0xff, 0xf9]) {
        "AAC"
    } else if bytes.is_empty() {
        "empty"
    } else {
        "not a recording"
    }
}

/// The sound of a recording.
#[derive(Debug)]
pub struct Sound {
    /// Mono samples at [`RATE`], in -1..1.
    pub samples: Vec<f32>,
}

impl Sound {
    pub fn seconds(&self) -> f32 {
        self.samples.len() as f32 / RATE as f32
    }

    /// Windows the recogniser hears one at a time: at most [`WINDOW_SECONDS`] each, cut where
    /// it is quietest in the last few seconds, so a word is seldom cut in two.
    pub fn windows(&self) -> Vec<Range<usize>> {
        let frame = RATE / 50;
        let longest = WINDOW_SECONDS * RATE;
        let mut windows = vec![];
        let mut start = 0;
        while self.samples.len() - start > longest {
            let look_from = start + longest - 5 * RATE;
            let cut = (look_from..start + longest - frame)
                .step_by(frame)
                .min_by(|a, b| {
                    loudness(&self.samples[*a..*a + frame]).total_cmp(&loudness(&self.samples[*b..*b + frame]))
                })
                .map_or(start + longest, |quietest| quietest + frame / 2);
            windows.push(start..cut);
            start = cut;
        }
        windows.push(start..self.samples.len());
        windows
    }

    /// Whether a window says anything at all.
    pub fn speaks(samples: &[f32]) -> bool {
        let frame = RATE / 50;
        let loud = samples.chunks(frame).filter(|chunk| loudness(chunk) > SPEAKING).count();
        loud as f32 * 0.02 >= LEAST_SPOKEN_SECONDS
    }
}

/// Root mean square.
fn loudness(samples: &[f32]) -> f32 {
    if samples.is_empty() {
        return 0.0;
    }
    (samples.iter().map(|sample| sample * sample).sum::<f32>() / samples.len() as f32).sqrt()
}

/// Decodes `bytes`, refusing a recording of more than `most` seconds before and while decoding.
pub fn decode(bytes: Vec<u8>, most: u32) -> Result<Sound, Refused> {
    let format = Format::of(&bytes)?;
    let source = MediaSourceStream::new(Box::new(Cursor::new(bytes)), MediaSourceStreamOptions::default());
    let options = FormatOptions::default();
    let damaged = |error: symphonia::core::errors::Error| Refused::Damaged(error.to_string());
    let mut reader: Box<dyn FormatReader> = match format {
        Format::Ogg => Box::new(symphonia::default::formats::OggReader::try_new(source, options).map_err(damaged)?),
        Format::WebM => Box::new(symphonia::default::formats::MkvReader::try_new(source, options).map_err(damaged)?),
    };
    let track = opus_track(reader.tracks())?;
    if let Some(seconds) = declared_seconds(&track) {
        if seconds > u64::from(most) {
            return Err(Refused::TooLong { seconds, most });
        }
    }
    // Opus says its pre-skip at 48 kHz.
    let skip = track.delay.unwrap_or(0) as usize / 3;
    let mut decoder =
        opus::Decoder::new(RATE as u32, opus::Channels::Mono).map_err(|error| Refused::Damaged(error.to_string()))?;
    let limit = (most as usize + 1) * RATE + skip;
    let mut samples = Vec::with_capacity(limit.min(60 * RATE));
    let mut frame = vec![0f32; LONGEST_FRAME * 3];
    loop {
        let packet = match reader.next_packet() {
            Ok(Some(packet)) => packet,
            Ok(None) => break,
            Err(symphonia::core::errors::Error::IoError(error))
                if error.kind() == std::io::ErrorKind::UnexpectedEof && !samples.is_empty() =>
            {
                // A recording cut short (a browser stopped mid-page) is heard up to its cut.
                break;
            }
            Err(error) => return Err(damaged(error)),
        };
        if packet.track_id != track.id || packet.data.is_empty() {
            continue;
        }
        let made = decoder
            .decode_float(&packet.data, &mut frame, false)
            .map_err(|error| Refused::Damaged(format!("a packet cannot be decoded: {error}")))?;
        samples.extend_from_slice(&frame[..made]);
        if samples.len() > limit {
            let seconds = (samples.len() - skip) as u64 / RATE as u64;
            return Err(Refused::TooLong { seconds, most });
        }
    }
    samples.drain(..skip.min(samples.len()));
    if samples.is_empty() {
        return Err(Refused::Empty);
    }
    if !Sound::speaks(&samples) {
        return Err(Refused::Silent);
    }
    Ok(Sound { samples })
}

/// The recording's first audio track, which must be Opus.
fn opus_track(tracks: &[Track]) -> Result<Track, Refused> {
    let audio = tracks
        .iter()
        .find(|track| matches!(track.codec_params, Some(CodecParameters::Audio(_))))
        .ok_or(Refused::Empty)?;
    let Some(CodecParameters::Audio(params)) = &audio.codec_params else { return Err(Refused::Empty) };
    if params.codec != CODEC_ID_OPUS {
        let name = symphonia::core::codecs::audio::well_known::CODEC_ID_VORBIS;
        let what = if params.codec == name { "Vorbis".to_string() } else { "another codec's".to_string() };
        return Err(Refused::Codec(what));
    }
    Ok(audio.clone())
}

/// The length the container states, in whole seconds, when it states one.
fn declared_seconds(track: &Track) -> Option<u64> {
    let base = track.time_base?;
    let ticks = track.duration?.get();
    Some(ticks.saturating_mul(u64::from(base.numer.get())) / u64::from(base.denom.get()))
}

/// The length of an OGG/Opus stream from its last page's granule position, without decoding it.
pub fn ogg_opus_seconds(bytes: &[u8]) -> Option<f32> {
    let head = bytes.windows(8).position(|window| window == b"OpusHead")?;
    let pre_skip = u16::from_le_bytes([*bytes.get(head + 10)?, *bytes.get(head + 11)?]);
    let tail = bytes.len().saturating_sub(65_536);
    let last = bytes[tail..].windows(4).rposition(|window| window == b"OggS")? + tail;
    let granule = i64::from_le_bytes(bytes.get(last + 6..last + 14)?.try_into().ok()?);
    Some((granule - i64::from(pre_skip)).max(0) as f32 / 48_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_format_is_known_by_its_first_bytes_and_others_are_named() {
        assert_eq!(Format::of(b"OggS\0\x02"), Ok(Format::Ogg));
        assert_eq!(Format::of(&[0x1a, 0x45, 0xdf, 0xa3, 0x9f]), Ok(Format::WebM));
        assert_eq!(Format::of(b"ID3\x04"), Err(Refused::Format("MP3")));
        assert_eq!(Format::of(b"RIFF\0\0\0\0WAVEfmt "), Err(Refused::Format("WAV")));
        assert_eq!(Format::of(b"\0\0\0\x20ftypM4A "), Err(Refused::Format("MP4 or M4A")));
        assert_eq!(Format::of(b"<html>"), Err(Refused::Format("not a recording")));
        assert_eq!(
            Refused::Format("MP3").to_string(),
            "it is MP3, which baaaht does not hear: send a voice note (OGG or WebM with Opus sound)"
        );
    }

    #[test]
    fn damaged_and_truncated_recordings_are_refused_with_a_sentence() {
        for bytes in [b"OggS".to_vec(), b"OggS\0\x02garbage".to_vec(), vec![0x1a, 0x45, 0xdf, 0xa3, 0xff, 0xff]] {
            let refused = decode(bytes, 60).expect_err("refused");
            assert!(matches!(refused, Refused::Damaged(_) | Refused::Empty), "{refused:?}");
        }
    }

    #[test]
    fn silence_says_nothing_and_a_tone_does() {
        assert!(!Sound::speaks(&vec![0.0; RATE * 5]));
        assert!(!Sound::speaks(&vec![0.002; RATE * 5]));
        let tone: Vec<f32> = (0..RATE).map(|n| (n as f32 * 0.05).sin() * 0.3).collect();
        assert!(Sound::speaks(&tone));
    }

    #[test]
    fn a_long_recording_is_heard_in_windows_cut_where_it_is_quiet() {
        let mut samples: Vec<f32> = (0..RATE * 70).map(|n| (n as f32 * 0.05).sin() * 0.3).collect();
        // A pause at 25 s.
        samples[25 * RATE..25 * RATE + RATE / 2].fill(0.0);
        let windows = Sound { samples }.windows();
        assert!(windows.len() == 3, "{windows:?}");
        assert!((25 * RATE..25 * RATE + RATE / 2).contains(&windows[0].end), "{windows:?}");
        assert!(windows.iter().all(|window| window.len() <= WINDOW_SECONDS * RATE));
        assert_eq!(windows.last().map(|window| window.end), Some(RATE * 70));
        assert_eq!(Sound { samples: vec![0.1; RATE * 3] }.windows(), vec![0..RATE * 3]);
    }
}
