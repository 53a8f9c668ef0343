//! `BAAAHT__SECTION__KEY=value` environment overrides of `config.yaml` (spec §16.3).
//!
//! A value replaces the key's value: scalars are taken as written (a number or boolean where the
//! key holds one), arrays and maps must be written as JSON, e.g. `BAAAHT__SYSTEM__ADMIN_USERS=
//! '["billm","alice"]'`. A wrong key or type is an error that names the variable.

use serde_json::Value;

use super::diagnostics::with_suggestion;
use super::{Config, ConfigError};

const PREFIX: &str = "BAAAHT__";

/// Why a variable's value cannot go where its name points (said after the variable's name).
///
/// Each message carries its cause's text, so none is a `source` (a chain would say it twice).
#[derive(Debug, thiserror::Error)]
enum OverrideError {
    #[error("`{section}` is a value, not a section, so `{key}` does not exist")]
    NotASection { section: String, key: String },
    /// The message holds the cause too: it is told as one sentence.
    #[error("`{key}`: expected a JSON {kind} ({error})")]
    NotJson { key: String, kind: &'static str, error: serde_json::Error },
}

/// Applies every `BAAAHT__…` variable of `env`, in name order so the result is deterministic.
pub(super) fn apply(
    config: Config,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<(Config, Vec<String>), ConfigError> {
    let mut variables: Vec<(String, String)> = env.into_iter().filter(|(name, _)| name.starts_with(PREFIX)).collect();
    if variables.is_empty() {
        return Ok((config, vec![]));
    }
    variables.sort();
    let env_error = |variable: &str, message: String| ConfigError::Env { variable: variable.to_string(), message };
    let mut tree = serde_json::to_value(&config)
        .map_err(|error| env_error(&variables[0].0, format!("cannot represent the configuration: {error}")))?;
    let mut applied = vec![];
    for (variable, raw) in &variables {
        let path: Vec<String> = variable[PREFIX.len()..].split("__").map(str::to_ascii_lowercase).collect();
        if path.iter().any(String::is_empty) {
            return Err(env_error(variable, "empty key segment: write BAAAHT__SECTION__KEY".into()));
        }
        set(&mut tree, &path, raw).map_err(|error| env_error(variable, error.to_string()))?;
        // Check each variable on its own so an error names the variable that caused it.
        serde_json::from_value::<Config>(tree.clone())
            .map_err(|error| env_error(variable, with_suggestion(&error.to_string())))?;
        applied.push(variable.clone());
    }
    let config = serde_json::from_value(tree)
        .map_err(|error| env_error(&variables[0].0, with_suggestion(&error.to_string())))?;
    Ok((config, applied))
}

fn set(tree: &mut Value, path: &[String], raw: &str) -> Result<(), OverrideError> {
    let mut node = tree;
    for (depth, key) in path.iter().enumerate() {
        let Value::Object(map) = node else {
            return Err(OverrideError::NotASection { section: path[..depth].join("."), key: path[..=depth].join(".") });
        };
        if depth + 1 == path.len() {
            let value = match map.get(key) {
                Some(current) => parse_like(current, raw).map_err(|error| OverrideError::NotJson {
                    key: path.join("."),
                    kind: if current.is_array() { "array" } else { "object" },
                    error,
                })?,
                None => parse_new(raw),
            };
            map.insert(key.clone(), value);
            return Ok(());
        }
        // Structs serialize every field, so a missing key is a typo in a struct or a new entry
        // in a map (e.g. `container.role_limits.coder`); deserializing afterwards tells which,
        // and names the nearest valid key for a typo.
        node = map.entry(key.clone()).or_insert_with(|| Value::Object(serde_json::Map::new()));
    }
    Ok(())
}

/// Parses `raw` as the kind of value `current` is (an array or an object must be JSON).
fn parse_like(current: &Value, raw: &str) -> Result<Value, serde_json::Error> {
    match current {
        Value::String(_) => Ok(Value::String(raw.to_string())),
        Value::Array(_) | Value::Object(_) => serde_json::from_str(raw),
        Value::Bool(_) | Value::Number(_) | Value::Null => Ok(parse_new(raw)),
    }
}

fn parse_new(raw: &str) -> Value {
    // silent-ok: a value that is not JSON is a plain string, e.g. `docker`.
    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()))
}
