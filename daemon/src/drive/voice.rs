//! A voice note heard as its sender's words (issue 63): the recording the gateway shared with the
//! message, as the daemon kept it when it was uploaded (`recordings/`, never the copy in the
//! workspace a container can write), is heard in the speech container; what was said leads the
//! message, the recording stays attached. The transcript marks nothing: it is the sender's own.

use std::sync::Arc;

use crate::base::auth::{Context, ContextKind};
use crate::drive::orchestrator::{Incoming, Orchestrator, OrchestratorError};
use crate::model::speech::{Speech, VoiceError};
use crate::sandbox::workspace::Kept;
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
pub async fn hear(
    orchestrator: &Arc<Orchestrator>,
    speech: &Speech,
    mut incoming: Incoming,
) -> Result<Incoming, OrchestratorError> {
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
