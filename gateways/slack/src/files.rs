//! Files shared with the bot (spec §10.2): downloaded with the bot token — only from Slack's own
//! hosts, so the token never goes anywhere else — at most `max` bytes each, for the daemon to
//! store in the session's `uploads/`.

use baaaht_proto::human_size;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

use crate::egress::Egress;

/// A file as downloaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Downloaded {
    pub name: String,
    pub mime_type: String,
    pub bytes: Bytes,
}

/// Downloads shared files.
pub struct Files {
    http: Client<hyper_rustls::HttpsConnector<Egress>, Empty<Bytes>>,
    /// The Web API's URL: its host serves files too (Slack's, or a test's).
    api: http::Uri,
    /// The largest file taken.
    pub max: u64,
}

impl Files {
    pub fn new(api_url: &str, egress: Egress, max: u64) -> Result<Files, String> {
        let api: http::Uri = api_url.parse().map_err(|error| format!("--api-url {api_url}: {error}"))?;
        let https = crate::egress::https(egress)?;
        Ok(Files { http: Client::builder(TokioExecutor::new()).build(https), api, max })
    }

    /// Whether the bot token may be sent to `url`: https on slack.com or one of its hosts, or
    /// the Web API's own scheme and host.
    pub fn trusted(&self, url: &http::Uri) -> bool {
        let host = url.host().unwrap_or_default().to_ascii_lowercase();
        let slack = url.scheme_str() == Some("https") && (host == "slack.com" || host.ends_with(".slack.com"));
        let api = url.scheme() == self.api.scheme() && url.authority() == self.api.authority();
        slack || api
    }

    /// Downloads the file `file` (an event's file object) with the bot token. The error is a
    /// sentence for the user who shared it.
    pub async fn download(&self, file: &Value, bot_token: &str) -> Result<Downloaded, String> {
        let name = file["name"].as_str().or(file["title"].as_str()).unwrap_or("file").to_string();
        let mime_type = file["mimetype"].as_str().unwrap_or_default().to_string();
        let size = file["size"].as_u64().unwrap_or_default();
        if size > self.max {
            return Err(format!(
                "{name} is {}, more than the {} a file may be.",
                human_size(size),
                human_size(self.max)
            ));
        }
        let Some(url) = file["url_private_download"].as_str().or(file["url_private"].as_str()) else {
            return Err(format!("{name} cannot be downloaded (a file kept outside Slack?); attach a copy."));
        };
        // Slack's links are percent-encoded; a space that slipped through is encoded here.
        let url: http::Uri = url
            .replace(' ', "%20")
            .parse()
            .map_err(|_unreadable| format!("{name} has a download link the gateway cannot read."))?;
        if !self.trusted(&url) {
            tracing::warn!(%url, "a shared file's link leads outside Slack; not downloaded");
            return Err(format!("{name} is not stored in Slack; attach a copy."));
        }
        let request = http::Request::get(url)
            .header(http::header::AUTHORIZATION, format!("Bearer {bot_token}"))
            .body(Empty::new())
            .map_err(|error| format!("{name}: {error}"))?;
        let failed = |error: String| {
            tracing::warn!(file = %name, %error, "cannot download a shared file");
            format!("{name} could not be downloaded from Slack; try again.")
        };
        let response = self.http.request(request).await.map_err(|error| failed(error.to_string()))?;
        if !response.status().is_success() {
            return Err(failed(format!("HTTP {}", response.status())));
        }
        let limited = Limited::new(response.into_body(), usize::try_from(self.max).unwrap_or(usize::MAX));
        let bytes = match limited.collect().await {
            Ok(body) => body.to_bytes(),
            Err(error) if error.is::<http_body_util::LengthLimitError>() => {
                return Err(format!("{name} is more than the {} a file may be.", human_size(self.max)));
            }
            Err(error) => return Err(failed(error.to_string())),
        };
        Ok(Downloaded { name, mime_type, bytes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_goes_to_slack_and_the_api_host_only() {
        let files = Files::new("http://127.0.0.1:4000/api", Egress::Direct, 10).expect("files");
        let trusted = |url: &str| files.trusted(&url.parse().expect("url"));
        assert!(trusted("https://files.slack.com/files-pri/T1-F1/download/a.png"));
        assert!(trusted("https://slack.com/x"));
        assert!(trusted("http://127.0.0.1:4000/api/files/F1/a.png"));
        assert!(!trusted("http://files.slack.com/a.png"));
        assert!(!trusted("https://files.slack.com.evil.example/a.png"));
        assert!(!trusted("https://evilslack.com/a.png"));
        assert!(!trusted("http://127.0.0.1:4001/api/files/F1/a.png"));
    }

    #[tokio::test]
    async fn a_file_past_the_limit_is_refused_before_it_is_downloaded() {
        let files = Files::new("http://127.0.0.1:4000/api", Egress::Direct, 1000).expect("files");
        let file = serde_json::json!({"name": "big.bin", "size": 2_500_000, "url_private": "http://127.0.0.1:4000/api/files/F1"});
        let refused = files.download(&file, "xoxb-1").await.expect_err("too big");
        assert_eq!(refused, "big.bin is 2.5 MB, more than the 1.0 KB a file may be.");
        let external = serde_json::json!({"name": "doc", "size": 10});
        assert!(files.download(&external, "xoxb-1").await.expect_err("no link").contains("attach a copy"));
    }
}
