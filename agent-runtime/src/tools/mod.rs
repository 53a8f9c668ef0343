//! The built-in tools (spec §8.2) as the tool runner executes them inside a tool container:
//! `read_file`, `write_file`, `edit_file`, `list_dir`, `grep` and `find` ([`files`]), `exec`
//! ([`exec`]) and `web_fetch` ([`web`], through the daemon's egress proxy), each with a JSON
//! schema for its parameters and typed errors whose messages tell the model what to do.
//! Every path goes through [`paths`].

pub mod exec;
pub mod files;
pub mod html;
pub mod message;
pub mod paths;
pub mod quota;
pub mod web;

use baaaht_proto::ToolName;
use serde_json::{json, Value};

/// Why a tool call failed, as the model reads it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ToolError {
    #[error("unknown tool `{0}`")]
    UnknownTool(String),
    #[error("parameter `{name}`: {problem}")]
    Param { name: &'static str, problem: String },
    #[error("`{path}` is refused: {reason}")]
    Path { path: String, reason: String },
    #[error("`{0}` does not exist")]
    NotFound(String),
    #[error("{path}: {message}")]
    Io { path: String, message: String },
    #[error("{0}")]
    Failed(String),
}

/// What a tool call returns.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
    pub metadata: Vec<(String, String)>,
}

impl From<ToolError> for ToolOutput {
    fn from(error: ToolError) -> ToolOutput {
        ToolOutput { content: error.to_string(), is_error: true, metadata: vec![] }
    }
}

/// Reads a tool call's parameters with messages that name what is wrong.
pub struct Params<'a>(pub &'a Value);

impl Params<'_> {
    pub fn string(&self, name: &'static str) -> Result<&str, ToolError> {
        match self.0.get(name) {
            Some(Value::String(text)) => Ok(text),
            Some(other) => Err(ToolError::Param { name, problem: format!("must be a string, not {other}") }),
            None => Err(ToolError::Param { name, problem: "is required".into() }),
        }
    }

    pub fn optional_string(&self, name: &'static str) -> Result<Option<&str>, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(_) => self.string(name).map(Some),
        }
    }

    pub fn optional_u64(&self, name: &'static str) -> Result<Option<u64>, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(value) => {
                value.as_u64().map(Some).ok_or_else(|| ToolError::Param {
                    name,
                    problem: format!("must be a whole number ≥ 0, not {value}"),
                })
            }
        }
    }

    pub fn flag(&self, name: &'static str) -> Result<bool, ToolError> {
        match self.0.get(name) {
            None | Some(Value::Null) => Ok(false),
            Some(Value::Bool(value)) => Ok(*value),
            Some(other) => Err(ToolError::Param { name, problem: format!("must be true or false, not {other}") }),
        }
    }
}

/// A tool's name, what it does and its parameters' JSON schema.
#[derive(Debug, Clone, PartialEq)]
pub struct Definition {
    pub name: &'static str,
    pub description: &'static str,
    pub parameters: Value,
}

/// The file tools' definitions.
pub fn definitions() -> Vec<Definition> {
    let path = json!({"type": "string", "description": "relative to /workspace, or absolute inside a mounted folder"});
    vec![
        Definition {
            name: ToolName::ReadFile.as_str(),
            description: "Read a text file with line numbers. Use offset/limit (in lines) for long files.",
            parameters: json!({"type": "object", "required": ["path"], "additionalProperties": false, "properties": {
                "path": path,
                "offset": {"type": "integer", "minimum": 1, "description": "first line to read (1-based)"},
                "limit": {"type": "integer", "minimum": 1, "description": "how many lines"},
            }}),
        },
        Definition {
            name: ToolName::WriteFile.as_str(),
            description: "Create or replace a file atomically; missing parent folders are created.",
            parameters: json!({"type": "object", "required": ["path", "content"], "additionalProperties": false, "properties": {
                "path": path, "content": {"type": "string"},
            }}),
        },
        Definition {
            name: ToolName::EditFile.as_str(),
            description:
                "Replace an exact piece of text in a file. old_text must occur exactly once unless replace_all is true.",
            parameters: json!({"type": "object", "required": ["path", "old_text", "new_text"], "additionalProperties": false, "properties": {
                "path": path,
                "old_text": {"type": "string"},
                "new_text": {"type": "string"},
                "replace_all": {"type": "boolean", "default": false},
            }}),
        },
        Definition {
            name: ToolName::ListDir.as_str(),
            description: "List a folder: each entry's kind, size and modification time.",
            parameters: json!({"type": "object", "additionalProperties": false, "properties": {
                "path": {"type": "string", "default": "."},
            }}),
        },
        Definition {
            name: ToolName::Grep.as_str(),
            description: "Search file contents with a regular expression (Rust regex syntax); respects .gitignore.",
            parameters: json!({"type": "object", "required": ["pattern"], "additionalProperties": false, "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "default": "."},
                "glob": {"type": "string", "description": "only files whose path matches, e.g. *.rs"},
                "ignore_case": {"type": "boolean", "default": false},
            }}),
        },
        Definition {
            name: ToolName::Exec.as_str(),
            description:
                "Run a shell command (sh -c) in /workspace without network, or one of a skill's scripts: give \
                          `script` (its path, /skills/NAME/scripts/FILE) and `args` instead of `command`, and it runs \
                          with the secrets its skill declares. stdout and stderr are capped at 32 KiB each.",
            parameters: json!({"type": "object", "additionalProperties": false, "properties": {
                "command": {"type": "string", "description": "a shell command; or give script instead"},
                "script": {"type": "string", "description": "a skill's script to run by itself, /skills/NAME/scripts/FILE"},
                "args": {"type": "array", "items": {"type": "string"}, "description": "the script's arguments"},
                "timeout": {"type": "integer", "minimum": 1, "description": "seconds; at most the configured limit (60 by default)"},
            }}),
        },
        Definition {
            name: ToolName::Message.as_str(),
            description: "Send a message to the user (or group) of this session, e.g. when a background task finishes, \
                          with files from the workspace if asked for (a chart, a document): each channel shows them its own way.",
            parameters: json!({"type": "object", "required": ["content"], "additionalProperties": false, "properties": {
                "content": {"type": "string"},
                "files": {"type": "array", "maxItems": baaaht_proto::SENT_FILES_MAX, "items": path.clone(),
                          "description": "files to send with it (10 MiB together at most)"},
            }}),
        },
        Definition {
            name: ToolName::WebSearch.as_str(),
            description: "Search the web through the configured search backend; returns titles, URLs and snippets.",
            parameters: json!({"type": "object", "required": ["query"], "additionalProperties": false, "properties": {
                "query": {"type": "string"},
                "count": {"type": "integer", "minimum": 1, "maximum": 20, "default": 5},
            }}),
        },
        Definition {
            name: ToolName::WebFetch.as_str(),
            description: "Fetch a web page (http or https, public addresses only) as readable text.",
            parameters: json!({"type": "object", "required": ["url"], "additionalProperties": false, "properties": {
                "url": {"type": "string"},
                "max_chars": {"type": "integer", "minimum": 100, "maximum": 200000, "default": 50000},
            }}),
        },
        Definition {
            name: ToolName::Browser.as_str(),
            description: "A real web browser (Chromium) for pages web_fetch cannot read: built by JavaScript, behind a \
                          form or a login. `open` a URL, then act on what the page shows: every line that begins with \
                          [n] is something to `click`, `type` into or `choose` from, named by its number in `ref`. \
                          Each action answers with the page as it is after. Logins stay for this conversation. \
                          `screenshot` shows the page in the chat; `pdf` and `download` save into the workspace.",
            parameters: json!({"type": "object", "required": ["action"], "additionalProperties": false, "properties": {
                "action": {"type": "string", "enum": ["open", "read", "click", "type", "choose", "scroll", "wait_for",
                    "back", "screenshot", "pdf", "download", "close"]},
                "url": {"type": "string", "description": "open, download: an http(s) address"},
                "ref": {"type": "integer", "minimum": 1, "description": "click, type, choose, download: the [n] of the page's last reading"},
                "text": {"type": "string", "description": "type: what to type (it replaces what the field holds); wait_for: the text to wait for"},
                "submit": {"type": "boolean", "default": false, "description": "type: press Enter after"},
                "option": {"type": "string", "description": "choose: the option's label"},
                "direction": {"type": "string", "enum": ["down", "up"], "default": "down"},
                "full_page": {"type": "boolean", "default": false, "description": "screenshot: the whole page, not only what the window shows"},
                "path": {"type": "string", "description": "screenshot, pdf: where in the workspace (default screenshots/ or pages/)"},
            }}),
        },
        Definition {
            name: ToolName::Find.as_str(),
            description: "Find files whose path matches a glob, e.g. **/*.md; respects .gitignore.",
            parameters: json!({"type": "object", "required": ["pattern"], "additionalProperties": false, "properties": {
                "pattern": {"type": "string"},
                "path": {"type": "string", "default": "."},
            }}),
        },
    ]
}

/// Runs file tool `tool` with `params` over `mounts`.
pub fn run(tool: ToolName, params: &Value, mounts: &paths::Mounts) -> ToolOutput {
    let params = Params(params);
    let result = match tool {
        ToolName::ReadFile => files::read_file(&params, mounts),
        ToolName::WriteFile => files::write_file(&params, mounts),
        ToolName::EditFile => files::edit_file(&params, mounts),
        ToolName::ListDir => files::list_dir(&params, mounts),
        ToolName::Grep => files::grep(&params, mounts),
        ToolName::Find => files::find(&params, mounts),
        other => Err(ToolError::UnknownTool(other.to_string())),
    };
    result.unwrap_or_else(ToolOutput::from)
}
