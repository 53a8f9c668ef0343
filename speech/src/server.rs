//! The Speech service on the container's socket, and its health for the daemon's probes. The
//! model is loaded once, when the service starts; recordings are heard one at a time on a
//! blocking thread, their progress streamed back window by window.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use baaaht_proto::v1;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status};

use crate::hear::Recogniser;

/// The service: the model (loading, loaded, or why not) and when it started.
#[derive(Debug, Clone)]
pub struct SpeechService {
    model: Arc<OnceLock<Result<Recogniser, String>>>,
    path: Arc<PathBuf>,
    started: Instant,
}

impl SpeechService {
    /// A service whose model at `path` starts loading now, beside the first calls.
    pub fn start(path: PathBuf) -> SpeechService {
        let service = SpeechService { model: Arc::new(OnceLock::new()), path: Arc::new(path), started: Instant::now() };
        let loading = service.clone();
        std::thread::spawn(move || loading.recogniser().is_ok());
        service
    }

    fn recogniser(&self) -> Result<&Recogniser, String> {
        self.model.get_or_init(|| Recogniser::load(&self.path)).as_ref().map_err(Clone::clone)
    }
}

fn refused(why: String) -> v1::TranscribeEvent {
    v1::TranscribeEvent { event: Some(v1::transcribe_event::Event::Refused(why)) }
}

#[tonic::async_trait]
impl v1::speech_server::Speech for SpeechService {
    type TranscribeStream = ReceiverStream<Result<v1::TranscribeEvent, Status>>;

    async fn transcribe(
        &self,
        request: Request<v1::TranscribeRequest>,
    ) -> Result<Response<Self::TranscribeStream>, Status> {
        let request = request.into_inner();
        if !crate::hear::language_code(&request.language) {
            return Err(Status::invalid_argument(format!("`{}` is not a language code such as en", request.language)));
        }
        if request.max_seconds == 0 {
            return Err(Status::invalid_argument("max_seconds must be more than 0"));
        }
        let (events, stream) = tokio::sync::mpsc::channel(8);
        let service = self.clone();
        tokio::task::spawn_blocking(move || {
            let sound = match crate::audio::decode(request.audio, request.max_seconds) {
                Ok(sound) => sound,
                Err(why) => {
                    // silent-ok: the daemon gone, nobody waits for the answer.
                    let _ = events.blocking_send(Ok(refused(why.to_string())));
                    return;
                }
            };
            let total = sound.seconds();
            let recogniser = match service.recogniser() {
                Ok(recogniser) => recogniser,
                Err(why) => {
                    // silent-ok: as above.
                    let _ = events.blocking_send(Err(Status::failed_precondition(why)));
                    return;
                }
            };
            let told = events.clone();
            let heard = recogniser.hear(&sound, &request.language, |done| {
                let progress = v1::TranscribeProgress { done_seconds: done, total_seconds: total };
                let event = v1::TranscribeEvent { event: Some(v1::transcribe_event::Event::Progress(progress)) };
                // silent-ok: as above.
                let _ = told.blocking_send(Ok(event));
            });
            let answer = match heard {
                Ok(heard) => {
                    let transcript = v1::Transcript { text: heard.text, seconds: total, language: heard.language };
                    Ok(v1::TranscribeEvent { event: Some(v1::transcribe_event::Event::Transcript(transcript)) })
                }
                Err(why) => Err(Status::internal(why)),
            };
            // silent-ok: as above.
            let _ = events.blocking_send(answer);
        });
        Ok(Response::new(ReceiverStream::new(stream)))
    }

    async fn synthesize(
        &self,
        request: Request<v1::SynthesizeRequest>,
    ) -> Result<Response<v1::SynthesizeResponse>, Status> {
        let request = request.into_inner();
        if !request.engine.is_empty() && request.engine != "espeak" {
            return Err(Status::invalid_argument(format!(
                "`{}` is not a voice this service has (espeak)",
                request.engine
            )));
        }
        let spoken = tokio::task::spawn_blocking(move || crate::speak::espeak(&request.text, &request.voice))
            .await
            .map_err(|error| Status::internal(format!("the voice stopped: {error}")))?;
        Ok(Response::new(match spoken {
            Ok(spoken) => v1::SynthesizeResponse { ogg: spoken.ogg, seconds: spoken.seconds, refused: String::new() },
            Err(why) => v1::SynthesizeResponse { refused: why, ..Default::default() },
        }))
    }
}

/// The daemon's probe: healthy once the model is loaded, degraded while it loads, unhealthy if
/// it cannot be.
#[tonic::async_trait]
impl v1::container_health_server::ContainerHealth for SpeechService {
    async fn health_check(
        &self,
        request: Request<v1::HealthCheckRequest>,
    ) -> Result<Response<v1::HealthCheckResponse>, Status> {
        let probe = request.into_inner().probe;
        let (status, message) = match self.model.get() {
            None => ("degraded", "loading the model".to_string()),
            Some(Ok(_)) => ("healthy", "ok".to_string()),
            Some(Err(why)) => ("unhealthy", why.clone()),
        };
        let uptime_seconds = self.started.elapsed().as_secs() as i64;
        let response =
            v1::HealthCheckResponse { status: status.into(), message, uptime_seconds, probe, ..Default::default() };
        Ok(Response::new(response))
    }
}
