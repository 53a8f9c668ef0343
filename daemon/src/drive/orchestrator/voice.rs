//! A voice note heard as its sender's words (issue 63): the recording the gateway shared with the
//! message, as the daemon kept it when it was uploaded (`recordings/`, never the copy in the
//! workspace a container can write), is heard in the speech container; what was said leads the
//! message, the recording stays attached. The transcript marks nothing: it is the sender's own.
//! The answer to it is spoken too ([`speak_answer`]), as a voice note sent to the conversation.

use std::sync::Arc;

use super::{Incoming, Orchestrator, OrchestratorError};
use crate::base::auth::{Context, ContextKind};
use crate::base::config::SpokenAnswers;
use crate::model::speech::VoiceError;
use crate::sandbox::workspace::Kept;
use crate::store::events::{Event, Kind};
use crate::store::sessions::log::Attachment;
use crate::store::uploads::{MAX_RECORDING_BYTES, RECORDING_TYPES};

impl From<VoiceError> for OrchestratorError {
    fn from(error: VoiceError) -> OrchestratorError {
        match error {
            VoiceError::Unavailable(_) => OrchestratorError::Model(error.to_string()),
            VoiceError::NoMinutesLeft(_) => OrchestratorError::Budget(error.to_string()),
            _ => OrchestratorError::Invalid(error.to_string()),
        }
    }
}

/// Hears the voice note among `incoming`'s attachments: the message says what was said.
pub async fn hear(orchestrator: &Arc<Orchestrator>, mut incoming: Incoming) -> Result<Incoming, OrchestratorError> {
    let speech = &orchestrator.speech;
    let recording = incoming
        .attachments
        .iter()
        .find(|attachment| RECORDING_TYPES.contains(&attachment.mime_type.as_str()))
        .cloned()
        .ok_or_else(|| {
            OrchestratorError::Invalid("the voice note holds no recording (OGG or WebM with Opus sound)".into())
        })?;
    speech.ready()?;
    let workspaces = orchestrator.workspaces.clone();
    let (session, path) = (recording.session.clone(), recording.path.clone());
    let read =
        tokio::task::spawn_blocking(move || workspaces.shared(&session, Kept::Recording, &path, MAX_RECORDING_BYTES));
    let audio = read
        .await
        .map_err(|error| OrchestratorError::Invalid(format!("the voice note cannot be read: {error}")))?
        .map_err(|error| OrchestratorError::Invalid(format!("the voice note cannot be read: {error}")))?
        .ok_or_else(|| {
            OrchestratorError::Invalid(format!(
                "the voice note was not heard: it is larger than the {} MiB a voice note may be",
                speech.config().max_size.0 >> 20
            ))
        })?;
    // A person's minutes are theirs wherever they speak.
    let person = match incoming.context.kind {
        ContextKind::User => incoming.context.clone(),
        ContextKind::Group => Context::user(incoming.sender.clone()),
    };
    let heard = speech.hear(&person, audio, &recording.mime_type, |_done, _total| {}).await?;
    tracing::info!(seconds = heard.seconds, language = %heard.language, "a voice note was heard");
    incoming.content =
        if incoming.content.is_empty() { heard.text } else { format!("{}\n\n{}", heard.text, incoming.content) };
    incoming.spoken = true;
    Ok(incoming)
}

/// Whether the answer to a message is also spoken: the message was a voice note, or the
/// configuration says always.
pub fn answers_aloud(orchestrator: &Orchestrator, spoken: bool) -> bool {
    let voice = orchestrator.speech.config();
    voice.enabled
        && match voice.spoken_answers {
            SpokenAnswers::Always => true,
            SpokenAnswers::WhenAskedByVoice => spoken,
            SpokenAnswers::Never => false,
        }
}

/// Speaks `answer` (the turn's reply, `ids`: session, turn, correlation) and sends it to the
/// conversation as a voice note, kept in the session's `sent/` as `spoken-{turn}.ogg`. On the
/// daemon's tracker; a failure is logged, the written answer stands.
pub fn speak_answer(orchestrator: &Arc<Orchestrator>, context: Context, ids: (&str, &str, &str), answer: String) {
    let orchestrator = orchestrator.clone();
    let (session, turn, correlation) = (ids.0.to_string(), ids.1.to_string(), ids.2.to_string());
    orchestrator.lifetime.clone().spawn(async move {
        let seconds = orchestrator.speech.config().max_spoken_seconds;
        let said = crate::model::speech::spoken::speakable(&answer, seconds);
        if said.trim().is_empty() {
            return;
        }
        let spoken = match orchestrator.speech.speak(&said).await {
            Ok(spoken) => spoken,
            Err(error) => {
                tracing::warn!(%error, session, "the answer could not be spoken; it stays written");
                return;
            }
        };
        let name = format!("{}{turn}.ogg", crate::store::sent::SPOKEN_PREFIX);
        let workspaces = orchestrator.workspaces.clone();
        let (kept_in, bytes) = (session.clone(), spoken.ogg);
        let size = bytes.len() as u64;
        let kept = tokio::task::spawn_blocking(move || workspaces.keep_sent(&kept_in, &name, &bytes)).await;
        let kept = match kept {
            Ok(Ok(kept)) => kept,
            Ok(Err(error)) => {
                tracing::warn!(%error, session, "the spoken answer cannot be kept; it stays written");
                return;
            }
            Err(error) => {
                tracing::warn!(%error, session, "the spoken answer cannot be kept; it stays written");
                return;
            }
        };
        let attachment = Attachment {
            path: format!("{}/{kept}", crate::sandbox::workspace::SENT),
            session: session.clone(),
            mime_type: "audio/ogg".into(),
            size_bytes: size,
        };
        let metadata = [("voice_seconds".to_string(), format!("{:.1}", spoken.seconds))].into();
        let kind =
            Kind::Message { content: String::new(), reply_to: String::new(), metadata, attachments: vec![attachment] };
        orchestrator.events.publish(&context, Event::of_turn(&session, &turn, &correlation, kind));
    });
}
