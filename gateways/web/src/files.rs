//! Files the agents sent to a conversation (the `message` tool's `files`), downloaded by the
//! people who may read it: `GET /api/sessions/{id}/files/sent/{name}`, read from the daemon as
//! the signed-in user. A file is always a download (never drawn by the site), under a policy
//! that runs nothing, so an HTML or SVG file an agent wrote cannot act as the site.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use baaaht_proto::v1;

use crate::app::{api_error, error, App, User};

/// A file's download: no script, no styles, nothing loaded; never sniffed as something else.
const POLICY: &str = "default-src 'none'; sandbox";

pub async fn download(State(app): State<Arc<App>>, user: User, Path((id, name)): Path<(String, String)>) -> Response {
    if baaaht_proto::files::safe_name(&name) != name {
        return error(StatusCode::NOT_FOUND, "That conversation has no such file.");
    }
    let request = v1::DownloadFileRequest { session_id: id, path: format!("sent/{name}") };
    let mut daemon = app.daemon.clone();
    let mut chunks = match daemon.sessions.download_file(app.as_user(&user.session, request)).await {
        Ok(chunks) => chunks.into_inner(),
        Err(status) => return api_error(&status),
    };
    let (mut mime_type, mut bytes) = (String::from("application/octet-stream"), vec![]);
    loop {
        match chunks.message().await {
            Ok(Some(v1::FileChunk { part: Some(v1::file_chunk::Part::Attachment(about)) })) => {
                mime_type = about.mime_type
            }
            Ok(Some(v1::FileChunk { part: Some(v1::file_chunk::Part::Data(data)) })) => bytes.extend_from_slice(&data),
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(status) => return api_error(&status),
        }
    }
    let kind = HeaderValue::from_str(&mime_type).unwrap_or(HeaderValue::from_static("application/octet-stream"));
    // The name is a safe one (letters, digits, `.`, `-`, `_`): nothing to quote.
    let disposition = HeaderValue::from_str(&format!("attachment; filename=\"{name}\""))
        .unwrap_or(HeaderValue::from_static("attachment"));
    let headers = [
        (header::CONTENT_TYPE, kind),
        (header::CONTENT_DISPOSITION, disposition),
        (header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(POLICY)),
        (header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff")),
        (header::CACHE_CONTROL, HeaderValue::from_static("private, max-age=300")),
    ];
    (headers, bytes).into_response()
}
