//! web_search backends (spec §8.2), queried by the daemon through its egress proxy: a SearXNG
//! instance's JSON API, or the Brave Search API with its key from the secrets store.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::proxy::{FetchRequest, ProxyError, WebProxy};
use crate::base::config::{SearchBackend, SearchConfig};

/// The Brave Search API.
pub const BRAVE_URL: &str = "https://api.search.brave.com/res/v1/web/search";

/// One result, as the web_search tool shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResult {
    pub title: String,
    pub url: String,
    pub snippet: String,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("web_search has no backend: set tools.web_proxy.search.backend to searxng or brave")]
    NoBackend,
    #[error(
        "tools.web_proxy.search.searxng_url is empty: set it to your SearXNG instance, e.g. http://searx.lan:8080"
    )]
    NoSearxngUrl,
    #[error("the Brave Search key is missing: {0}")]
    NoBraveKey(KeyError),
    #[error(transparent)]
    Proxy(#[from] ProxyError),
    #[error("the search backend answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the search backend's answer does not parse: {0}")]
    Parse(String),
}

/// Why the Brave Search key (`tools.web_proxy.search.brave_api_key`) could not be resolved.
#[derive(Debug, Clone, thiserror::Error)]
pub enum KeyError {
    #[error("${{{name}}} is neither in the secrets store nor in the environment: run `baaahtd secrets set {name}`")]
    Unresolved { name: String },
    /// The store could not be read (shared: the backend is cloned with its key).
    #[error(transparent)]
    Secrets(Arc<crate::guard::secrets::SecretsError>),
}

/// The configured backend, its key resolved.
#[derive(Clone)]
pub enum Backend {
    None,
    Searxng { url: String },
    Brave { key: Result<String, KeyError> },
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Backend::None => f.write_str("None"),
            Backend::Searxng { url } => f.debug_struct("Searxng").field("url", url).finish(),
            Backend::Brave { .. } => f.write_str("Brave"),
        }
    }
}

impl Backend {
    /// From `tools.web_proxy.search`; `key` resolves the Brave key reference.
    pub fn from_config(config: &SearchConfig, key: impl FnOnce(&str) -> Result<String, KeyError>) -> Backend {
        match config.backend {
            SearchBackend::None => Backend::None,
            SearchBackend::Searxng => Backend::Searxng { url: config.searxng_url.trim_end_matches('/').to_string() },
            SearchBackend::Brave => Backend::Brave { key: key(&config.brave_api_key) },
        }
    }
}

/// Percent-encodes a query-string value.
pub fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() * 3);
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[derive(Deserialize)]
struct Searxng {
    #[serde(default)]
    results: Vec<SearxngResult>,
}

#[derive(Deserialize)]
struct SearxngResult {
    #[serde(default)]
    title: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    content: String,
}

#[derive(Deserialize)]
struct Brave {
    #[serde(default)]
    web: Option<BraveWeb>,
}

#[derive(Deserialize)]
struct BraveWeb {
    #[serde(default)]
    results: Vec<BraveResult>,
}

#[derive(Deserialize)]
struct BraveResult {
    #[serde(default)]
    title: String,
    #[serde(default)]
    url: String,
    #[serde(default)]
    description: String,
}

/// Reads a SearXNG JSON answer.
pub fn parse_searxng(body: &[u8], count: usize) -> Result<Vec<SearchResult>, SearchError> {
    let answer: Searxng = serde_json::from_slice(body).map_err(|error| SearchError::Parse(error.to_string()))?;
    Ok(answer
        .results
        .into_iter()
        .take(count)
        .map(|r| SearchResult { title: r.title, url: r.url, snippet: r.content })
        .collect())
}

/// Reads a Brave Search answer.
pub fn parse_brave(body: &[u8], count: usize) -> Result<Vec<SearchResult>, SearchError> {
    let answer: Brave = serde_json::from_slice(body).map_err(|error| SearchError::Parse(error.to_string()))?;
    Ok(answer
        .web
        .map(|web| web.results)
        .unwrap_or_default()
        .into_iter()
        .take(count)
        .map(|r| SearchResult { title: r.title, url: r.url, snippet: strip_tags(&r.description) })
        .collect())
}

/// Brave marks matches with `<strong>`; the snippet is plain text.
fn strip_tags(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for c in text.chars() {
        match c {
            '<' => inside = true,
            '>' => inside = false,
            c if !inside => out.push(c),
            _ => {}
        }
    }
    out
}

/// Searches `query` for `session`, at most `count` results (1 to 20).
pub async fn search(
    proxy: &WebProxy,
    backend: &Backend,
    session: &str,
    query: &str,
    count: usize,
) -> Result<Vec<SearchResult>, SearchError> {
    let count = count.clamp(1, 20);
    let (url, headers) = match backend {
        Backend::None => return Err(SearchError::NoBackend),
        Backend::Searxng { url } if url.is_empty() => return Err(SearchError::NoSearxngUrl),
        Backend::Searxng { url } => (format!("{url}/search?q={}&format=json", encode(query)), vec![]),
        Backend::Brave { key: Err(why) } => return Err(SearchError::NoBraveKey(why.clone())),
        Backend::Brave { key: Ok(key) } => (
            format!("{BRAVE_URL}?q={}&count={count}", encode(query)),
            vec![
                ("accept".to_string(), "application/json".to_string()),
                ("x-subscription-token".to_string(), key.clone()),
            ],
        ),
    };
    let response = proxy
        .fetch(FetchRequest {
            session: session.to_string(),
            method: "GET".into(),
            url,
            headers,
            body: vec![],
            follow_redirects: true,
        })
        .await?;
    if response.status != 200 {
        let body: String = String::from_utf8_lossy(&response.body).chars().take(300).collect();
        return Err(SearchError::Status { status: response.status, body });
    }
    match backend {
        Backend::Brave { .. } => parse_brave(&response.body, count),
        _ => parse_searxng(&response.body, count),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_formats_parse() {
        let searxng = br#"{"query":"rust","results":[{"title":"Rust","url":"https://www.rust-lang.org/","content":"A language"},{"title":"Two","url":"https://two.example/","content":"x"}]}"#;
        assert_eq!(
            parse_searxng(searxng, 1).expect("parses"),
            [SearchResult {
                title: "Rust".into(),
                url: "https://www.rust-lang.org/".into(),
                snippet: "A language".into()
            }]
        );
        let brave = br#"{"type":"search","web":{"type":"search","results":[{"title":"Rust","url":"https://www.rust-lang.org/","description":"A <strong>language</strong> empowering everyone"}]}}"#;
        assert_eq!(parse_brave(brave, 5).expect("parses")[0].snippet, "A language empowering everyone");
        assert!(parse_brave(b"{}", 5).expect("no web results").is_empty());
        assert!(parse_searxng(b"<html>", 5).is_err());
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(encode("rust async & tokio/ü"), "rust%20async%20%26%20tokio%2F%C3%BC");
    }
}
