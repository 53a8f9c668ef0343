//! File names as every part of baaaht keeps them: what the daemon stores a shared file as,
//! and what a tool runner names a file it sends.

/// The longest name kept, in bytes.
pub const MAX_NAME: usize = 120;

/// `given` made safe as a file name: its last path component, letters, digits, `.`, `-` and
/// `_` only (anything else becomes `_`), no leading dot, at most [`MAX_NAME`] bytes with its
/// extension kept; `upload` when nothing is left.
pub fn safe_name(given: &str) -> String {
    let last = given.rsplit(['/', '\\']).next().unwrap_or_default();
    let mut name = String::with_capacity(last.len());
    for c in last.chars() {
        let c = if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') { c } else { '_' };
        if c == '_' && name.ends_with('_') {
            continue;
        }
        name.push(c);
    }
    let name = name.trim_start_matches(['.', '_']).trim_end_matches('.');
    if name.is_empty() {
        return "upload".into();
    }
    if name.len() <= MAX_NAME {
        return name.to_string();
    }
    let (stem, extension) = split_extension(name);
    let keep = MAX_NAME.saturating_sub(extension.len());
    format!("{}{extension}", &stem[..keep.min(stem.len())])
}

/// `name` as stem and extension (with its dot; empty when there is none or it is too long to
/// be one).
pub fn split_extension(name: &str) -> (&str, &str) {
    match name.rfind('.') {
        Some(dot) if dot > 0 && name.len() - dot <= 12 => name.split_at(dot),
        _ => (name, ""),
    }
}
