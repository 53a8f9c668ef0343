//! `Sessions.DownloadFile`: a file an agent sent to a conversation ([`crate::store::sent`]), for
//! whoever may read the conversation — its attachment first, then its bytes in chunks.

use baaaht_proto::{v1, SENT_FILE_MAX_BYTES};
use tonic::codegen::BoxStream;
use tonic::{Request, Response, Status};

use super::Shared;
use crate::base::auth::Operation;

use super::{check, valid_id};

/// The size of each piece of a file sent to a client.
const CHUNK: usize = 64 * 1024;

pub(super) async fn download_file(
    shared: &Shared,
    request: Request<v1::DownloadFileRequest>,
) -> Result<Response<BoxStream<v1::FileChunk>>, Status> {
    check(shared, &request, Operation::DownloadFile, None, Some(&request.get_ref().session_id))?;
    let v1::DownloadFileRequest { session_id, path } = request.into_inner();
    valid_id(&session_id, "session_id")?;
    if shared.sessions.get(&session_id).is_none() {
        return Err(crate::store::sessions::SessionError::NotFound(session_id).into());
    }
    let Some(name) = crate::store::sent::name_of(&path).map(str::to_string) else {
        return Err(Status::invalid_argument(format!(
            "path `{}` is not a file an agent sent; give a message attachment's path (sent/NAME)",
            path.escape_debug()
        )));
    };
    let workspaces = shared.workspaces.clone();
    let session = session_id.clone();
    let read = tokio::task::spawn_blocking(move || workspaces.sent(&session, &name, SENT_FILE_MAX_BYTES))
        .await
        .map_err(|error| Status::internal(format!("reading a sent file stopped: {error}")))?;
    let bytes = match read {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Err(Status::not_found(format!("conversation {session_id} has no file {path}"))),
        Err(error) => {
            tracing::error!(session = %session_id, %path, %error, "cannot read a sent file");
            return Err(Status::internal("the file cannot be read"));
        }
    };
    let chunks = super::to_wire::file_chunks(path, &bytes, CHUNK).into_iter().map(Ok);
    Ok(Response::new(Box::pin(tokio_stream::iter(chunks))))
}
