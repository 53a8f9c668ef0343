//! How configuration files name secrets: `${NAME}` references, what a valid name is, and which
//! names are LLM providers' keys (never usable by a user's own servers and skills).

/// Whether `name` may name a secret: 1-128 letters, digits, `_`, `.` or `-`.
pub fn is_valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 128
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The names an LLM provider's key goes by: those providers.yaml refers to, and each
/// built-in provider's `{NAME}_API_KEY`.
pub fn provider_key_names(providers: &super::ProvidersConfig) -> std::collections::BTreeSet<String> {
    let mut names: std::collections::BTreeSet<String> = baaaht_llm::presets::PRESETS
        .iter()
        .map(|preset| format!("{}_API_KEY", preset.name.to_ascii_uppercase()))
        .collect();
    for (_, entry) in providers.providers.configured() {
        for text in entry.secret_references() {
            names.extend(reference_names(text).map(str::to_string));
        }
    }
    names
}

/// The names `text` refers to as `${NAME}`.
pub fn reference_names(text: &str) -> impl Iterator<Item = &str> {
    text.split("${").skip(1).filter_map(|rest| rest.split_once('}').map(|(name, _)| name))
}
