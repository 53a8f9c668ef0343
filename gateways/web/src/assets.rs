//! The UI's files, built into the binary (no build step, no CDN; DESIGN §9.5). They are few and
//! small, so `include_bytes!` does what rust-embed would, without another dependency. Each
//! answer carries an ETag of the file, so a browser revalidates instead of downloading again,
//! and a new binary's files are never mixed with an old one's.

use axum::extract::Path;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

/// The files under `/ui/`: name, content type, bytes.
const FILES: &[(&str, &str, &[u8])] = &[
    ("app.js", "text/javascript; charset=utf-8", include_bytes!("../ui/app.js")),
    ("app.css", "text/css; charset=utf-8", include_bytes!("../ui/app.css")),
    ("theme.js", "text/javascript; charset=utf-8", include_bytes!("../ui/theme.js")),
    ("markdown.js", "text/javascript; charset=utf-8", include_bytes!("../ui/markdown.js")),
    ("state.js", "text/javascript; charset=utf-8", include_bytes!("../ui/state.js")),
    ("conversation.js", "text/javascript; charset=utf-8", include_bytes!("../ui/conversation.js")),
    ("sidebar.js", "text/javascript; charset=utf-8", include_bytes!("../ui/sidebar.js")),
    ("composer.js", "text/javascript; charset=utf-8", include_bytes!("../ui/composer.js")),
    ("models.js", "text/javascript; charset=utf-8", include_bytes!("../ui/models.js")),
    ("settings.js", "text/javascript; charset=utf-8", include_bytes!("../ui/settings.js")),
    ("text.js", "text/javascript; charset=utf-8", include_bytes!("../ui/text.js")),
    ("vendor/marked.esm.js", "text/javascript; charset=utf-8", include_bytes!("../ui/vendor/marked.esm.js")),
    ("vendor/purify.es.mjs", "text/javascript; charset=utf-8", include_bytes!("../ui/vendor/purify.es.mjs")),
    ("vendor/highlight.min.js", "text/javascript; charset=utf-8", include_bytes!("../ui/vendor/highlight.min.js")),
    ("push.js", "text/javascript; charset=utf-8", include_bytes!("../ui/push.js")),
    ("icons/icon-192.png", "image/png", include_bytes!("../ui/icons/icon-192.png")),
    ("icons/icon-512.png", "image/png", include_bytes!("../ui/icons/icon-512.png")),
    ("icons/maskable-512.png", "image/png", include_bytes!("../ui/icons/maskable-512.png")),
];

/// The app's manifest (`/manifest.webmanifest`): what installing it makes.
const MANIFEST: &[u8] = include_bytes!("../ui/manifest.webmanifest");
/// The service worker (`/sw.js`, at the root for the whole site to be its scope).
const WORKER: &[u8] = include_bytes!("../ui/sw.js");

/// The ETag of `bytes`: a short hash, quoted.
fn etag(bytes: &[u8]) -> String {
    let hash = Sha256::digest(bytes);
    let hex: String = hash.iter().take(12).map(|byte| format!("{byte:02x}")).collect();
    format!("\"{hex}\"")
}

/// `GET /ui/{file}`.
pub async fn serve(Path(file): Path<String>, headers: HeaderMap) -> Response {
    let Some((_, kind, bytes)) = FILES.iter().find(|(name, _, _)| *name == file) else {
        return (StatusCode::NOT_FOUND, "no such file").into_response();
    };
    answer(kind, bytes, &headers)
}

/// `GET /manifest.webmanifest`.
pub async fn manifest(headers: HeaderMap) -> Response {
    answer("application/manifest+json", MANIFEST, &headers)
}

/// `GET /sw.js`: a new binary's worker replaces the old one (the browser compares its bytes).
pub async fn worker(headers: HeaderMap) -> Response {
    answer("text/javascript; charset=utf-8", WORKER, &headers)
}

/// `bytes` of type `kind`, or "not modified" when the browser has them.
fn answer(kind: &'static str, bytes: &'static [u8], headers: &HeaderMap) -> Response {
    let tag = etag(bytes);
    let cached = headers.get(header::IF_NONE_MATCH).and_then(|value| value.to_str().ok()) == Some(tag.as_str());
    let mut response = if cached {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, kind)], bytes).into_response()
    };
    let answer = response.headers_mut();
    answer.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    if let Ok(tag) = HeaderValue::from_str(&tag) {
        answer.insert(header::ETAG, tag);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_has_a_type_and_a_distinct_tag() {
        let tags: std::collections::HashSet<String> = FILES.iter().map(|(_, _, bytes)| etag(bytes)).collect();
        assert_eq!(tags.len(), FILES.len());
        assert!(FILES.iter().all(|(name, kind, bytes)| !bytes.is_empty()
            && kind.contains(match name.rsplit('.').next() {
                Some("css") => "css",
                Some("png") => "image/png",
                _ => "javascript",
            })));
        let manifest: serde_json::Value = serde_json::from_slice(MANIFEST).expect("the manifest is JSON");
        for icon in manifest["icons"].as_array().expect("icons") {
            let src = icon["src"].as_str().expect("src");
            assert!(FILES.iter().any(|(name, _, _)| format!("/ui/{name}") == src), "{src} is served");
        }
    }
}
