//! Voice, from the daemon's side (issue 63, docs/voice.md): the speech container (`baaaht-speech`
//! on an image with espeak-ng and opusenc, no network, the model read-only) started when a
//! voice note first comes and stopped after `voice.idle_timeout` without one; each person's
//! minutes a day ([`minutes`]); and an answer made speakable ([`spoken`]).

pub mod minutes;
pub mod spoken;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_proto::client::Backoff;
use baaaht_proto::v1;
use baaaht_proto::v1::speech_client::SpeechClient;
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use crate::base::auth::{Context, Role};
use crate::base::config::{LoadedConfig, VoiceConfig};
use crate::base::datadir::DataDir;
use crate::base::lifetime::{Subsystem, Work};
use crate::sandbox::container::manager::{ContainerManager, RunRequest, BINARIES_MOUNT};
use crate::sandbox::container::{Limits, MountSpec};

/// The speech service's binary, beside the daemon's.
pub const SPEECH_BINARY: &str = "baaaht-speech";
/// The model's default file, in `data/models/`.
pub const MODEL_FILE: &str = "whisper-base-q8_0.bin";
const SOCKET: &str = "speech.sock";
const SOCKET_MOUNT: &str = "/run/baaaht-speech";
const MODEL_MOUNT: &str = "/opt/baaaht/models/model.bin";
/// How long a started container may take to listen.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a voice note is not heard or an answer not spoken, as a sentence for the person.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VoiceError {
    #[error("voice notes are turned off here (voice.enabled); write instead")]
    Off,
    #[error("baaaht cannot hear voice notes yet: an administrator runs `baaahtd speech install`")]
    NotInstalled,
    #[error("the voice note was not heard: {0}")]
    Refused(String),
    #[error("the voice note was not heard: it is larger than the {0} MiB a voice note may be")]
    TooLarge(u64),
    #[error("you have used today's {0} minutes of voice notes; write instead, or try again tomorrow")]
    NoMinutesLeft(u32),
    #[error("the speech service is not available ({0}); try again in a minute")]
    Unavailable(String),
}

/// What was heard.
#[derive(Debug, Clone, PartialEq)]
pub struct Heard {
    pub text: String,
    pub seconds: f32,
    pub language: String,
}

/// A voice note made from text.
#[derive(Debug, Clone)]
pub struct Spoken {
    pub ogg: Vec<u8>,
    pub seconds: f32,
}

/// The running container and its client.
#[derive(Debug)]
struct Running {
    name: String,
    client: SpeechClient<Channel>,
}

/// The speech service.
#[derive(Debug)]
pub struct Speech {
    config: VoiceConfig,
    model: PathBuf,
    folder: PathBuf,
    binary: PathBuf,
    containers: Arc<ContainerManager>,
    running: tokio::sync::Mutex<Option<Running>>,
    last_used: Mutex<Instant>,
    in_flight: AtomicUsize,
    pub minutes: minutes::Minutes,
}

impl Speech {
    pub fn new(
        loaded: &LoadedConfig,
        data_dir: &DataDir,
        binaries: &Path,
        containers: Arc<ContainerManager>,
    ) -> Speech {
        let config = loaded.config.voice.clone();
        let model = if config.model.is_empty() {
            data_dir.root().join("data/models").join(MODEL_FILE)
        } else {
            PathBuf::from(&config.model)
        };
        let minutes =
            minutes::Minutes::open(&data_dir.state_dir(), config.minutes_per_day, &loaded.config.system.timezone);
        Speech {
            config,
            model,
            folder: data_dir.root().join("data/speech"),
            binary: binaries.join(SPEECH_BINARY),
            containers,
            running: tokio::sync::Mutex::new(None),
            last_used: Mutex::new(Instant::now()),
            in_flight: AtomicUsize::new(0),
            minutes,
        }
    }

    pub fn config(&self) -> &VoiceConfig {
        &self.config
    }

    /// The model's file.
    pub fn model_path(&self) -> &Path {
        &self.model
    }

    /// Whether voice notes can be heard here now: on, and the model installed.
    pub fn ready(&self) -> Result<(), VoiceError> {
        if !self.config.enabled {
            return Err(VoiceError::Off);
        }
        if !self.model.is_file() {
            return Err(VoiceError::NotInstalled);
        }
        Ok(())
    }

    /// Hears `audio`, a voice note of `person`, telling `progress` the seconds done of the whole.
    pub async fn hear(
        &self,
        person: &Context,
        audio: Vec<u8>,
        declared: &str,
        mut progress: impl FnMut(f32, f32),
    ) -> Result<Heard, VoiceError> {
        self.ready()?;
        if audio.len() as u64 > self.config.max_size.0 {
            return Err(VoiceError::TooLarge(self.config.max_size.0 >> 20));
        }
        let left = self.minutes.left(person);
        if left <= 0.0 {
            return Err(VoiceError::NoMinutesLeft(self.config.minutes_per_day));
        }
        // A note longer than the minutes left is refused as too long, before it is decoded.
        let most = (self.config.max_seconds as f32).min(left.ceil()).max(1.0) as u32;
        let language = if self.config.language == "auto" { String::new() } else { self.config.language.clone() };
        let request = v1::TranscribeRequest { audio, declared_type: declared.to_string(), language, max_seconds: most };
        let _using = self.using();
        let mut events = self
            .call(|mut client| {
                let request = request.clone();
                async move { client.transcribe(request).await }
            })
            .await?;
        loop {
            let event =
                events.message().await.map_err(|status| VoiceError::Unavailable(status.message().to_string()))?;
            match event.and_then(|event| event.event) {
                Some(v1::transcribe_event::Event::Progress(told)) => progress(told.done_seconds, told.total_seconds),
                Some(v1::transcribe_event::Event::Transcript(heard)) => {
                    self.minutes.spend(person, heard.seconds);
                    if heard.text.trim().is_empty() {
                        return Err(VoiceError::Refused("no words were heard in it".into()));
                    }
                    return Ok(Heard { text: heard.text, seconds: heard.seconds, language: heard.language });
                }
                Some(v1::transcribe_event::Event::Refused(why)) => {
                    if why.contains("longer than") && (most as f32) < self.config.max_seconds as f32 {
                        return Err(VoiceError::Refused(format!("{why}: that is what is left of your minutes today")));
                    }
                    return Err(VoiceError::Refused(why));
                }
                None => return Err(VoiceError::Unavailable("it stopped before it had heard the note".into())),
            }
        }
    }

    /// Speaks `text` (plain sentences, [`spoken::speakable`]) in the configured voice.
    pub async fn speak(&self, text: &str) -> Result<Spoken, VoiceError> {
        self.ready()?;
        let request =
            v1::SynthesizeRequest { text: text.to_string(), voice: self.config.voice.clone(), engine: "espeak".into() };
        let _using = self.using();
        let spoken = self
            .call(|mut client| {
                let request = request.clone();
                async move { client.synthesize(request).await }
            })
            .await?;
        if !spoken.refused.is_empty() {
            return Err(VoiceError::Unavailable(spoken.refused));
        }
        Ok(Spoken { ogg: spoken.ogg, seconds: spoken.seconds })
    }

    /// Counts a call in flight until the guard is dropped (the idle stop waits for it).
    fn using(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        *self.last_used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
        InFlight(self)
    }

    /// Makes `call` on the running container, started first when none runs, and again once
    /// when it no longer answers.
    async fn call<T, F, Fut>(&self, call: F) -> Result<T, VoiceError>
    where
        F: Fn(SpeechClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        for attempt in 0..2 {
            let client = self.client().await?;
            match call(client).await {
                Ok(response) => return Ok(response.into_inner()),
                Err(status) if status.code() == tonic::Code::Unavailable && attempt == 0 => {
                    tracing::warn!(reason = %status.message(), "the speech container stopped answering; starting it again");
                    self.stop().await;
                }
                Err(status) => return Err(VoiceError::Unavailable(status.message().to_string())),
            }
        }
        Err(VoiceError::Unavailable("it stopped answering".into()))
    }

    async fn client(&self) -> Result<SpeechClient<Channel>, VoiceError> {
        let mut running = self.running.lock().await;
        if let Some(running) = running.as_ref() {
            return Ok(running.client.clone());
        }
        let started = self.start().await?;
        let client = started.client.clone();
        *running = Some(started);
        Ok(client)
    }

    /// Starts the container and connects to it.
    async fn start(&self) -> Result<Running, VoiceError> {
        let unavailable = |why: String| VoiceError::Unavailable(why);
        if !self.binary.is_file() {
            return Err(unavailable(format!(
                "{} is missing: build it or set container.binaries_dir",
                self.binary.display()
            )));
        }
        prepare_folder(&self.folder)
            .map_err(|error| unavailable(format!("cannot prepare {}: {error}", self.folder.display())))?;
        let (tag, dockerfile) = layer(self.containers.image());
        self.containers.ensure_image(&tag, &dockerfile).await.map_err(|error| unavailable(error.told()))?;
        let socket_mode = if crate::base::datadir::current_uid() == 0 { "600" } else { "666" };
        let request = RunRequest {
            role: Role::Speech,
            session_id: "system".into(),
            context: Context::user("system"),
            command: vec![
                format!("{BINARIES_MOUNT}/{SPEECH_BINARY}"),
                "serve".into(),
                "--socket".into(),
                format!("{SOCKET_MOUNT}/{SOCKET}"),
                "--socket-mode".into(),
                socket_mode.into(),
                "--model".into(),
                MODEL_MOUNT.into(),
            ],
            mounts: vec![
                MountSpec { host: self.folder.clone(), target: SOCKET_MOUNT.into(), read_only: false },
                MountSpec { host: self.model.clone(), target: MODEL_MOUNT.into(), read_only: true },
                MountSpec {
                    host: self.binary.clone(),
                    target: format!("{BINARIES_MOUNT}/{SPEECH_BINARY}"),
                    read_only: true,
                },
            ],
            env: vec![],
            timeout: Duration::MAX,
            daemon_socket: false,
            working_dir: None,
            image: Some(tag),
            // The recogniser takes some 250 MiB; both cores while it hears.
            limits: Some(Limits { cpus: 2.0, memory_bytes: 1 << 30, pids: 64, tmp_bytes: 16 << 20, disk_bytes: 0 }),
        };
        let handle = self.containers.start_detached(request).await.map_err(|error| unavailable(error.told()))?;
        match connect(&self.folder.join(SOCKET)).await {
            Ok(client) => {
                tracing::info!(container = %handle.name, "the speech container is ready");
                Ok(Running { name: handle.name, client })
            }
            Err(why) => {
                // silent-ok: a container that never listened is removed either way.
                let _ = self.containers.stop_service(&handle.name).await;
                Err(unavailable(why))
            }
        }
    }

    /// Stops the container, if one runs.
    pub async fn stop(&self) {
        let running = self.running.lock().await.take();
        if let Some(running) = running {
            if let Err(error) = self.containers.stop_service(&running.name).await {
                tracing::warn!(%error, "cannot stop the speech container");
            }
        }
    }

    /// Stops the container once it has had nothing to do for `voice.idle_timeout`.
    async fn stop_when_idle(&self) {
        let idle = self.last_used.lock().unwrap_or_else(PoisonError::into_inner).elapsed();
        let running = self.running.lock().await.is_some();
        if running
            && self.in_flight.load(Ordering::SeqCst) == 0
            && idle >= Duration::from_secs(self.config.idle_timeout)
        {
            tracing::info!(idle_s = idle.as_secs(), "stopping the idle speech container");
            self.stop().await;
        }
    }
}

/// A call in flight ([`Speech::using`]).
struct InFlight<'a>(&'a Speech);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
        *self.0.last_used.lock().unwrap_or_else(PoisonError::into_inner) = Instant::now();
    }
}

/// The speech image on `base`: Debian's espeak-ng and opus-tools. Its tag and Dockerfile; built
/// once, when a voice note first comes.
pub fn layer(base: &str) -> (String, String) {
    crate::sandbox::container::images::layer(base, "espeak-ng opus-tools", "speech")
}

/// A fresh folder for the socket, reachable by the container's uid.
fn prepare_folder(folder: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    match std::fs::remove_dir_all(folder) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => return Err(error),
        _ => {}
    }
    std::fs::DirBuilder::new().mode(0o700).create(folder)?;
    // Made just now by the daemon; handed over by descriptor all the same.
    crate::sandbox::shared_dirs::hand_over(crate::sandbox::shared_dirs::open_trusted(folder)?)
}

/// Waits for the socket and connects.
async fn connect(socket: &Path) -> Result<SpeechClient<Channel>, String> {
    let deadline = Instant::now() + START_TIMEOUT;
    while !socket.exists() {
        if Instant::now() > deadline {
            return Err(format!("it did not listen on {} within {} s", socket.display(), START_TIMEOUT.as_secs()));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let backoff = Backoff {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(500),
        give_up_after: Duration::from_secs(5),
    };
    let channel = baaaht_proto::client::channel(socket, backoff).await.map_err(|error| error.to_string())?;
    Ok(SpeechClient::new(channel)
        .max_decoding_message_size(baaaht_proto::MAX_MESSAGE_BYTES)
        .max_encoding_message_size(baaaht_proto::MAX_MESSAGE_BYTES))
}

/// The speech container stopped when idle, and at shutdown.
#[derive(Debug)]
pub struct Upkeep {
    pub speech: Arc<Speech>,
}

impl Subsystem for Upkeep {
    fn name(&self) -> &'static str {
        "speech"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(async move {
            loop {
                tokio::select! {
                    () = shutdown.cancelled() => break,
                    () = tokio::time::sleep(Duration::from_secs(5)) => self.speech.stop_when_idle().await,
                }
            }
            self.speech.stop().await;
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_speech_image_is_named_by_what_it_is_built_from() {
        let (tag, dockerfile) = super::layer("baaaht/base:latest");
        assert!(tag.starts_with("baaaht/speech:"), "{tag}");
        assert!(dockerfile.starts_with("FROM baaaht/base:latest\n") && dockerfile.contains(" espeak-ng opus-tools "));
        assert_ne!(super::layer("baaaht/base:other").0, tag);
    }
}
