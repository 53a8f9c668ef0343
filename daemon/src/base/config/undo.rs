//! `sessions.undo:` in config.yaml: what every turn changed in the folders it can write is
//! kept so that the turn can be undone from the chat (docs/undo.md).

use serde::{Deserialize, Serialize};

use super::ByteSize;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct UndoConfig {
    /// Whether turns' file changes are kept (off: `/undo` moves the conversation only, and says
    /// that files are not put back).
    pub enabled: bool,
    /// How many of a session's turns keep their changes, newest first.
    pub turns: usize,
    /// The most the kept contents of one person's (or group's) sessions take on the disk: past
    /// it, the oldest turns' changes are let go first.
    pub max_size: ByteSize,
    /// The largest file whose content is kept; a larger one a turn changes cannot be put back
    /// (the undo says so).
    pub max_file_size: ByteSize,
    /// The most files of one folder looked at; the rest is not kept (said in the log).
    pub max_files: usize,
}

impl Default for UndoConfig {
    fn default() -> Self {
        UndoConfig {
            enabled: true,
            turns: 50,
            max_size: ByteSize(2 << 30),
            max_file_size: ByteSize(32 << 20),
            max_files: 200_000,
        }
    }
}
