//! `message`: a message to the user or group of this session, queued as a file in the
//! context's IPC folder (spec §12.4); the daemon delivers it to the context's channels. An agent
//! can only message its own context: the folder it writes to is that context's.

use std::io::Write as _;
use std::path::Path;

use super::{Params, ToolError, ToolOutput};

/// The longest message.
pub const MAX_BYTES: usize = 64 << 10;

/// Queues `params.content` in `folder` for the daemon.
pub fn message(params: &Params<'_>, folder: &Path, session: &str) -> Result<ToolOutput, ToolError> {
    let content = params.string("content")?;
    if content.trim().is_empty() {
        return Err(ToolError::Param { name: "content", problem: "is empty".into() });
    }
    if content.len() > MAX_BYTES {
        return Err(ToolError::Param { name: "content", problem: format!("is longer than {} KiB", MAX_BYTES >> 10) });
    }
    // Ids need no secrecy: the time and the runner's pid make them unique in this folder.
    let id = format!(
        "m{}-{}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
        std::process::id()
    );
    let record = serde_json::json!({"id": id, "content": content, "sessionId": session});
    let io = |error: std::io::Error| ToolError::Io { path: folder.display().to_string(), message: error.to_string() };
    let temp = folder.join(format!(".{id}.tmp"));
    let mut file = std::fs::File::create(&temp).map_err(io)?;
    file.write_all(record.to_string().as_bytes()).and_then(|()| file.sync_all()).map_err(io)?;
    std::fs::rename(&temp, folder.join(format!("{id}.json"))).map_err(io)?;
    Ok(ToolOutput {
        content: format!("message queued for delivery (id {id})"),
        is_error: false,
        metadata: vec![("message_id".into(), id)],
    })
}
