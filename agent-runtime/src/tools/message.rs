//! `message`: a message to the user or group of this session, queued as a file in the
//! context's IPC folder (spec §12.4); the daemon delivers it to the context's channels. An agent
//! can only message its own context: the folder it writes to is that context's. Files sent with
//! it (`files`, paths as the file tools take them) are copied first into `{id}.files/` beside
//! it, so the daemon keeps them as they were when sent (DESIGN.md §10.4).

use std::io::Write as _;
use std::path::Path;

use baaaht_proto::{SENT_FILES_MAX, SENT_FILE_MAX_BYTES};
use serde_json::Value;

use super::paths::{read_capped, Mounts};
use super::{Params, ToolError, ToolOutput};

/// The longest message.
pub const MAX_BYTES: usize = 64 << 10;

/// Queues `params.content` (and the `files` it names, read through `mounts`) in `folder` for
/// the daemon.
pub fn message(
    params: &Params<'_>,
    folder: &Path,
    session: &str,
    correlation_id: &str,
    mounts: &Mounts,
) -> Result<ToolOutput, ToolError> {
    let content = params.string("content")?;
    if content.trim().is_empty() {
        return Err(ToolError::Param { name: "content", problem: "is empty".into() });
    }
    if content.len() > MAX_BYTES {
        return Err(ToolError::Param { name: "content", problem: format!("is longer than {} KiB", MAX_BYTES >> 10) });
    }
    let paths = files_of(params)?;
    // Ids need no secrecy: the time and the runner's pid make them unique in this folder.
    let id = format!(
        "m{}-{}",
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0),
        std::process::id()
    );
    let io = |error: std::io::Error| ToolError::Io { path: folder.display().to_string(), message: error.to_string() };
    let names =
        if paths.is_empty() { vec![] } else { copy_files(&paths, &folder.join(format!("{id}.files")), mounts)? };
    let record = serde_json::json!({
        "id": id,
        "content": content,
        "sessionId": session,
        "files": names,
        "correlationId": correlation_id,
    });
    let temp = folder.join(format!(".{id}.tmp"));
    let mut file = std::fs::File::create(&temp).map_err(io)?;
    file.write_all(record.to_string().as_bytes()).and_then(|()| file.sync_all()).map_err(io)?;
    std::fs::rename(&temp, folder.join(format!("{id}.json"))).map_err(io)?;
    let with = match names.len() {
        0 => String::new(),
        1 => " with 1 file".into(),
        count => format!(" with {count} files"),
    };
    Ok(ToolOutput {
        content: format!("message queued for delivery{with} (id {id})"),
        is_error: false,
        metadata: vec![("message_id".into(), id)],
    })
}

/// The `files` parameter: at most [`SENT_FILES_MAX`] paths.
fn files_of<'a>(params: &'a Params<'_>) -> Result<Vec<&'a str>, ToolError> {
    let problem = |problem: String| ToolError::Param { name: "files", problem };
    let items = match params.0.get("files") {
        None | Some(Value::Null) => return Ok(vec![]),
        Some(Value::Array(items)) => items,
        Some(other) => return Err(problem(format!("must be a list of paths, not {other}"))),
    };
    if items.len() > SENT_FILES_MAX {
        return Err(problem(format!("names {} files; a message may send {SENT_FILES_MAX}", items.len())));
    }
    items
        .iter()
        .map(|item| item.as_str().ok_or_else(|| problem(format!("must be a list of paths, not {item}"))))
        .collect()
}

/// Copies each of `paths` (regular files of at most [`SENT_FILE_MAX_BYTES`] together) into
/// `into`, under safe and distinct names; the names. Nothing is left in `into` when it fails.
fn copy_files(paths: &[&str], into: &Path, mounts: &Mounts) -> Result<Vec<String>, ToolError> {
    let mut read: Vec<(String, Vec<u8>)> = vec![];
    for path in paths {
        let so_far: u64 = read.iter().map(|(_, bytes)| bytes.len() as u64).sum();
        let located = mounts.locate(path)?;
        let shown = located.display();
        let (fd, stat) = super::files::open_regular(&located)?;
        let left = SENT_FILE_MAX_BYTES.saturating_sub(so_far);
        if stat.st_size as u64 > left {
            return Err(ToolError::Path {
                path: shown,
                reason: format!(
                    "it is {}; a message's files may have {} together",
                    baaaht_proto::human_size(stat.st_size as u64),
                    baaaht_proto::human_size(SENT_FILE_MAX_BYTES)
                ),
            });
        }
        let (bytes, more) = read_capped(&fd, left as usize)
            .map_err(|error| ToolError::Io { path: shown.clone(), message: error.to_string() })?;
        if more {
            return Err(ToolError::Path { path: shown, reason: "it grew while it was read; send it again".into() });
        }
        read.push((baaaht_proto::files::safe_name(path), bytes));
    }
    let io = |error: std::io::Error| {
        // silent-ok: what could not be written is removed as far as it can be.
        let _ = std::fs::remove_dir_all(into);
        if error.raw_os_error() == Some(rustix::io::Errno::NOSPC.raw_os_error()) {
            return ToolError::Failed(format!(
                "the files do not fit beside the messages waiting to be delivered; send them in a minute, or fewer at once ({error})"
            ));
        }
        ToolError::Io { path: into.display().to_string(), message: error.to_string() }
    };
    std::fs::create_dir(into).map_err(io)?;
    let mut names: Vec<String> = vec![];
    for (name, bytes) in read {
        let (stem, extension) = baaaht_proto::files::split_extension(&name);
        let mut unique = name.clone();
        for number in 2.. {
            if !names.contains(&unique) {
                break;
            }
            unique = format!("{stem}-{number}{extension}");
        }
        let mut file = std::fs::File::create(into.join(&unique)).map_err(io)?;
        file.write_all(&bytes).and_then(|()| file.sync_all()).map_err(io)?;
        names.push(unique);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn queued(folder: &Path) -> Vec<Value> {
        let mut found = vec![];
        for entry in std::fs::read_dir(folder).expect("folder").flatten() {
            if entry.path().extension().is_some_and(|extension| extension == "json") {
                found.push(serde_json::from_slice(&std::fs::read(entry.path()).expect("read")).expect("json"));
            }
        }
        found
    }

    #[test]
    fn files_go_beside_the_message_under_safe_distinct_names_and_a_bad_one_queues_nothing() {
        let temp = tempfile::tempdir().expect("tempdir");
        let (workspace, folder) = (temp.path().join("workspace"), temp.path().join("messages"));
        std::fs::create_dir_all(workspace.join("out")).expect("mkdir");
        std::fs::create_dir_all(&folder).expect("mkdir");
        std::fs::write(workspace.join("out/chart.png"), b"png bytes").expect("write");
        std::fs::write(workspace.join("chart.png"), b"another").expect("write");
        std::os::unix::fs::symlink("/etc/hostname", workspace.join("host")).expect("link");
        let mounts = Mounts::open(&[(workspace.clone(), true)]).expect("mounts");
        let send = |params: Value| message(&Params(&params), &folder, "s1", "c-test", &mounts);

        let sent = send(json!({"content": "two charts", "files": ["out/chart.png", "chart.png"]})).expect("sent");
        assert!(sent.content.contains("with 2 files"), "{}", sent.content);
        let record = &queued(&folder)[0];
        assert_eq!(record["files"], json!(["chart.png", "chart-2.png"]));
        assert_eq!(record["correlationId"], "c-test", "the request it came from (spec §18.1)");
        let id = record["id"].as_str().expect("id");
        assert_eq!(std::fs::read(folder.join(format!("{id}.files/chart.png"))).expect("copy"), b"png bytes");
        assert_eq!(std::fs::read(folder.join(format!("{id}.files/chart-2.png"))).expect("copy"), b"another");

        for (files, says) in [
            (json!(["host"]), "leads outside"),
            (json!(["missing.pdf"]), "does not exist"),
            (json!(["../../etc/passwd"]), "refused"),
            (json!("chart.png"), "must be a list"),
            (json!(["a", "b", "c", "d", "e", "f"]), "may send 5"),
        ] {
            let refused = send(json!({"content": "no", "files": files})).expect_err("refused").to_string();
            assert!(refused.contains(says), "{files}: {refused}");
        }
        assert_eq!(queued(&folder).len(), 1, "nothing more was queued");
        assert_eq!(std::fs::read_dir(&folder).expect("folder").count(), 2, "no files were left behind");
    }
}
