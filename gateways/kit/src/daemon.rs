//! The daemon, called for a channel's user: each request names them (their channel identity
//! and the name they go by), their place (their own conversations, or a shared chat's group,
//! made by the daemon on first use); what they may read of a refusal is
//! [`crate::sentences::for_users`].

use baaaht_proto::client::Client;
use baaaht_proto::v1;

/// The size of each piece of a file sent to the daemon.
const UPLOAD_CHUNK: usize = 64 * 1024;

/// A channel's user as the daemon is told: their identity in the gateway's namespace
/// (`slack:T1:U7`, `telegram:bot:42`) and, when known, the name they go by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    pub identity: String,
    pub name: Option<String>,
}

impl Person {
    /// `message` on behalf of this person.
    pub fn request<T>(&self, message: T) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Ok(value) = self.identity.parse() {
            request.metadata_mut().insert(baaaht_proto::USER_HEADER, value);
        }
        // Only what a header carries (visible ASCII and spaces).
        let name: Option<String> = self
            .name
            .as_deref()
            .map(|name| name.chars().filter(|c| c.is_ascii_graphic() || *c == ' ').take(80).collect());
        if let Some(Ok(value)) = name.filter(|name| !name.trim().is_empty()).map(|name| name.parse()) {
            request.metadata_mut().insert(baaaht_proto::USER_NAME_HEADER, value);
        }
        request
    }
}

/// Where a message belongs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// A direct chat: the person's own conversations.
    Own,
    /// A chat with others (a channel, a group, a room): its group's, by the chat's id.
    Shared { chat: String },
}

/// The context `person` writes in at `place`: their own, or the shared chat's group.
pub async fn context_of(daemon: &Client, person: &Person, place: &Place) -> Result<v1::ContextRef, tonic::Status> {
    let mut daemon = daemon.clone();
    match place {
        Place::Shared { chat } => {
            let request = v1::EnsureChannelGroupRequest { channel: chat.clone(), name: String::new(), left: false };
            let group = daemon.gateways.ensure_channel_group(person.request(request)).await?.into_inner();
            Ok(v1::ContextRef { r#type: v1::ContextType::Group as i32, id: group.id })
        }
        Place::Own => {
            let me = daemon.gateways.who_am_i(person.request(v1::WhoAmIRequest {})).await?.into_inner();
            Ok(v1::ContextRef { r#type: v1::ContextType::User as i32, id: me.id })
        }
    }
}

/// A file a person shared in their channel, fetched by the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    pub name: String,
    pub mime_type: String,
    pub bytes: Vec<u8>,
    /// A voice note the person recorded themselves: the daemon hears it as their words (one
    /// forwarded from someone else is a file like any other).
    pub voice: bool,
}

/// Stores `file` in the uploads of the session `session_id` (the context's active one when
/// empty): the session it went to and the attachment that names it in a message.
pub async fn upload(
    daemon: &Client,
    person: &Person,
    context: &v1::ContextRef,
    session_id: &str,
    file: File,
) -> Result<(String, v1::Attachment), tonic::Status> {
    let start = v1::UploadStart {
        context: Some(context.clone()),
        session_id: session_id.to_string(),
        filename: file.name,
        mime_type: file.mime_type,
        sender_id: person.identity.clone(),
        size_bytes: file.bytes.len() as u64,
    };
    let chunks: Vec<v1::UploadChunk> = std::iter::once(v1::upload_chunk::Part::Start(start))
        .chain(file.bytes.chunks(UPLOAD_CHUNK).map(|chunk| v1::upload_chunk::Part::Data(chunk.to_vec())))
        .map(|part| v1::UploadChunk { part: Some(part) })
        .collect();
    let mut daemon = daemon.clone();
    let stored = daemon.sessions.upload_file(person.request(tokio_stream::iter(chunks))).await?.into_inner();
    let attachment = stored.attachment.ok_or_else(|| tonic::Status::internal("the daemon stored no attachment"))?;
    tracing::info!(session = %stored.session_id, path = %attachment.path, bytes = attachment.size_bytes, "a shared file is in the session's uploads");
    Ok((stored.session_id, attachment))
}

/// The file an agent sent to the conversation `session` (a message's attachment, `sent/NAME`),
/// read as `person`: the daemon gives it only to whoever may read the conversation.
pub async fn download(
    daemon: &Client,
    person: &Person,
    session: &str,
    attachment: &v1::Attachment,
) -> Result<File, tonic::Status> {
    let mut daemon = daemon.clone();
    let request = v1::DownloadFileRequest { session_id: session.to_string(), path: attachment.path.clone() };
    let mut chunks = daemon.sessions.download_file(person.request(request)).await?.into_inner();
    let mut file = File {
        name: attachment.filename.clone(),
        mime_type: attachment.mime_type.clone(),
        bytes: vec![],
        voice: attachment.voice,
    };
    while let Some(chunk) = chunks.message().await? {
        match chunk.part {
            Some(v1::file_chunk::Part::Attachment(about)) => {
                file.name = about.filename;
                file.mime_type = about.mime_type;
            }
            Some(v1::file_chunk::Part::Data(bytes)) => {
                if file.bytes.len() + bytes.len() > baaaht_proto::SENT_FILE_MAX_BYTES as usize {
                    return Err(tonic::Status::out_of_range(format!(
                        "{} is larger than a sent file may be",
                        file.name
                    )));
                }
                file.bytes.extend_from_slice(&bytes);
            }
            None => {}
        }
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_names_the_person_and_a_name_only_as_a_header_carries_it() {
        let person = Person { identity: "telegram:bot:42".into(), name: Some("Zoë \u{1b}[2J Smith".into()) };
        let request = person.request(());
        let header = |key: &str| request.metadata().get(key).and_then(|value| value.to_str().ok()).map(str::to_string);
        assert_eq!(header(baaaht_proto::USER_HEADER).as_deref(), Some("telegram:bot:42"));
        assert_eq!(header(baaaht_proto::USER_NAME_HEADER).as_deref(), Some("Zo [2J Smith"));
        let nameless = Person { identity: "slack:T1:U7".into(), name: Some("李".into()) }.request(());
        assert!(nameless.metadata().get(baaaht_proto::USER_NAME_HEADER).is_none());
    }
}
