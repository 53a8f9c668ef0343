//! `web_fetch` and `web_search`, both through the daemon (the tool container has no network):
//! a URL fetched by its egress proxy,
//! HTML turned into readable text.

use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde_json::Value;

use super::{html, Params, ToolError, ToolOutput};

/// Characters returned when `max_chars` is not given, and the most that can be asked for.
pub const DEFAULT_CHARS: usize = 50_000;
pub const MAX_CHARS: usize = 200_000;

fn is_text(content_type: &str) -> bool {
    let kind = content_type.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
    kind.is_empty()
        || kind.starts_with("text/")
        || kind.ends_with("+json")
        || kind.ends_with("+xml")
        || matches!(kind.as_str(), "application/json" | "application/xml" | "application/javascript")
}

/// Fetches `params.url` through the daemon.
pub async fn web_fetch(client: &mut Client, params: &Value) -> Result<ToolOutput, ToolError> {
    let params = Params(params);
    let url = params.string("url")?.trim().to_string();
    let max_chars = params.optional_u64("max_chars")?.map_or(DEFAULT_CHARS, |n| (n as usize).clamp(100, MAX_CHARS));
    let request = v1::WebProxyRequest {
        url: url.clone(),
        method: "GET".into(),
        headers: [(
            "accept".to_string(),
            "text/html,application/xhtml+xml,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5".to_string(),
        )]
        .into_iter()
        .collect(),
        ..v1::WebProxyRequest::default()
    };
    let response = client
        .agents
        .proxy_web_request(request)
        .await
        .map_err(|status| ToolError::Failed(format!("cannot fetch {url}: {}", status.message())))?
        .into_inner();
    let content_type = response.headers.get("content-type").cloned().unwrap_or_default();
    let body = String::from_utf8_lossy(&response.body);
    let text = if !is_text(&content_type) {
        format!("({content_type}, {} bytes: not text)", response.body.len())
    } else if content_type.to_ascii_lowercase().contains("html") || body.trim_start().starts_with('<') {
        html::to_text(&body)
    } else {
        body.into_owned()
    };
    let mut content = format!("{} (HTTP {}, {})\n\n", response.final_url, response.status, content_type);
    let total = text.chars().count();
    content.extend(text.chars().take(max_chars));
    if total > max_chars {
        content.push_str(&format!("\n[{} more characters not shown; ask with a larger max_chars]", total - max_chars));
    }
    if response.truncated {
        content.push_str("\n[the page was longer than the proxy's limit and was cut]");
    }
    Ok(ToolOutput {
        content,
        is_error: response.status >= 400,
        metadata: vec![("status".into(), response.status.to_string()), ("final_url".into(), response.final_url)],
    })
}

/// One result of the daemon's search backend.
#[derive(Debug, serde::Deserialize)]
struct Found {
    title: String,
    url: String,
    #[serde(default)]
    snippet: String,
}

/// Searches `params.query` through the daemon's configured backend.
pub async fn web_search(client: &mut Client, params: &Value) -> Result<ToolOutput, ToolError> {
    let params = Params(params);
    let query = params.string("query")?.trim().to_string();
    if query.is_empty() {
        return Err(ToolError::Param { name: "query", problem: "is empty".into() });
    }
    let count = params.optional_u64("count")?.map_or(5, |n| n.clamp(1, 20)) as u32;
    let request =
        v1::WebProxyRequest { search_query: query.clone(), search_count: count, ..v1::WebProxyRequest::default() };
    let response = client
        .agents
        .proxy_web_request(request)
        .await
        .map_err(|status| ToolError::Failed(format!("cannot search: {}", status.message())))?
        .into_inner();
    let found: Vec<Found> = serde_json::from_slice(&response.body)
        .map_err(|error| ToolError::Failed(format!("the search answer does not parse: {error}")))?;
    if found.is_empty() {
        return Ok(ToolOutput { content: format!("no results for {query:?}"), is_error: false, metadata: vec![] });
    }
    let mut content = String::new();
    for (index, result) in found.iter().enumerate() {
        content.push_str(&format!("{}. {}\n   {}\n", index + 1, result.title.trim(), result.url));
        if !result.snippet.trim().is_empty() {
            content.push_str(&format!("   {}\n", result.snippet.trim()));
        }
    }
    Ok(ToolOutput { content, is_error: false, metadata: vec![("results".into(), found.len().to_string())] })
}
