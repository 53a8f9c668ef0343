//! A tool container's web request (ProxyWebRequest): a search through the configured search
//! service, or a fetch through the web proxy. A turn that read untrusted content follows only
//! the links it was shown or hosts a rule allows; every request is audited; what comes back
//! shows the turn the addresses in it (never what it only echoes of the request); and no value
//! of the secrets store reaches the container, whatever a page says.

use std::collections::HashMap;
use std::sync::Arc;

use crate::base::auth::{Caller, Context};
use crate::base::datadir::DataDir;
use crate::guard::audit::{Audit, Kind, Record};
use crate::guard::redact::Shield;
use crate::net::egress::policy;
use crate::net::egress::proxy::{self, FetchRequest, ProxyError, WebProxy};
use crate::net::egress::search::{self, Backend, SearchError};
use crate::net::taint::Taints;

#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error(transparent)]
    Search(#[from] SearchError),
    /// The turn read untrusted content and may not reach this address (the sentence says why).
    #[error("{0}")]
    Tainted(String),
    #[error(transparent)]
    Proxy(#[from] ProxyError),
}

/// What a tool asks of the web.
#[derive(Debug)]
pub enum Asked {
    /// Up to `count` results for `query` (5 when 0).
    Search { query: String, count: usize },
    /// One request, through the proxy.
    Fetch { method: String, url: String, headers: Vec<(String, String)>, body: Vec<u8> },
}

/// Who asks: the tool container's caller, its session and context, the request's id.
#[derive(Debug)]
pub struct Asker<'a> {
    pub caller: &'a Caller,
    pub session: &'a str,
    pub context: &'a Context,
    pub correlation_id: &'a str,
}

/// What came back: the status, the headers (one value per name, repeated ones joined), the
/// body (cut at `max_content_size` when `truncated`), and where a redirect led.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
    pub final_url: String,
    pub truncated: bool,
}

/// The road of a tool's web requests.
#[derive(Debug)]
pub struct Road {
    pub proxy: Arc<WebProxy>,
    pub search: Backend,
    pub taints: Arc<Taints>,
    pub audit: Audit,
    pub data_dir: DataDir,
    /// Whose values are blotted from every answer.
    pub shield: Arc<Shield>,
}

impl Road {
    pub async fn request(&self, asker: &Asker<'_>, asked: Asked) -> Result<Answer, WebError> {
        match asked {
            Asked::Search { query, count } => self.search(asker, &query, count).await,
            Asked::Fetch { method, url, headers, body } => self.fetch(asker, method, url, headers, body).await,
        }
    }

    fn record(&self, asker: &Asker<'_>, outcome: &str) -> Record {
        Record::by(Kind::Egress, asker.caller, outcome).correlation(asker.correlation_id)
    }

    async fn search(&self, asker: &Asker<'_>, query: &str, count: usize) -> Result<Answer, WebError> {
        let count = if count == 0 { 5 } else { count };
        let found = search::search(&self.proxy, &self.search, asker.session, query, count).await?;
        self.audit.record(self.record(asker, "allowed").detail("search_results", found.len()));
        // silent-ok: a list of plain results always serialises.
        let body = serde_json::to_vec(&found).unwrap_or_default();
        // What the search engine answered shows the turn the addresses in it.
        self.taints.shown(asker.session, None, &String::from_utf8_lossy(&body), query);
        let headers = [("content-type".to_string(), "application/json".to_string())].into_iter().collect();
        Ok(Answer { status: 200, headers, body, final_url: String::new(), truncated: false })
    }

    async fn fetch(
        &self,
        asker: &Asker<'_>,
        method: String,
        url: String,
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Answer, WebError> {
        // The address as the proxy will read it to connect, for every check (one it cannot read
        // is refused by the proxy, which says why).
        let parsed = proxy::host_and_port(&url);
        let host = parsed.as_ref().map(|(host, _)| host.clone()).unwrap_or_default();
        if let Ok((host, port)) = parsed {
            self.may_follow(asker, &url, &host, port).await?;
        }
        let asked = format!("{url} {}", String::from_utf8_lossy(&body));
        let follow_redirects = self.taints.of_session(asker.session).is_none();
        let request = FetchRequest { session: asker.session.to_string(), method, url, headers, body, follow_redirects };
        let fetched = self.proxy.fetch(request).await;
        let record = match &fetched {
            Ok(response) => self
                .record(asker, "allowed")
                .detail("host", host.as_str())
                .detail("final_host", final_host(&response.final_url))
                .detail("status", response.status),
            Err(error) if error.is_refusal() => {
                self.record(asker, "refused").detail("host", host.as_str()).detail("reason", error.to_string())
            }
            Err(error) => {
                self.record(asker, "failed").detail("host", host.as_str()).detail("reason", error.to_string())
            }
        };
        self.audit.record(record);
        let mut response = fetched?;
        // The page shows the turn the addresses in it and where a redirect sent it; never what
        // it only echoes of the request (the model's own words).
        let location = response.headers.iter().find(|(name, _)| name == "location").map(|(_, to)| to.as_str());
        let text = format!(
            "{} {} {}",
            response.final_url,
            location.unwrap_or_default(),
            String::from_utf8_lossy(&response.body)
        );
        let (taints, session) = (self.taints.clone(), asker.session.to_string());
        // silent-ok: a marking pass that panicked logged why; the answer still goes back.
        tokio::task::spawn_blocking(move || taints.shown(&session, None, &text, &asked)).await.ok();
        let known = self.shield.values();
        let mut blotted = known.blot(&mut response.body);
        for (_, value) in response.headers.iter_mut() {
            let mut bytes = std::mem::take(value).into_bytes();
            blotted.extend(known.blot(&mut bytes));
            *value = String::from_utf8_lossy(&bytes).into_owned();
        }
        if !blotted.is_empty() {
            blotted.dedup();
            self.audit.record(self.record(asker, "blotted").detail("host", host.as_str()).detail("found", blotted));
        }
        let mut headers = HashMap::<String, String>::new();
        for (name, value) in response.headers {
            headers
                .entry(name)
                .and_modify(|joined| {
                    joined.push_str(", ");
                    joined.push_str(&value);
                })
                .or_insert(value);
        }
        let (status, body, final_url, truncated) =
            (response.status, response.body, response.final_url, response.truncated);
        Ok(Answer { status, headers, body, final_url, truncated })
    }

    /// A turn that read untrusted content follows only the links it was shown, or hosts a rule
    /// of its context allows.
    async fn may_follow(&self, asker: &Asker<'_>, url: &str, host: &str, port: u16) -> Result<(), WebError> {
        let principal = crate::guard::audit::principal(asker.caller);
        let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let (data_dir, context, checked) = (self.data_dir.clone(), asker.context.clone(), bare.clone());
        let allowed = tokio::task::spawn_blocking(move || {
            policy::decide(&data_dir, &context, &checked, port).is_some_and(|rule| rule.action == policy::Action::Allow)
        });
        let allowed = allowed.await.unwrap_or(false);
        self.taints.may_fetch(asker.session, url, &bare, allowed, &principal).map_err(|why| {
            self.audit.record(self.record(asker, "refused").detail("host", host).detail("reason", why.as_str()));
            WebError::Tainted(why)
        })
    }
}

/// The host `url` (an address the proxy fetched) leads to, for the audit line.
fn final_host(url: &str) -> String {
    // silent-ok: the proxy parsed it to fetch it; an address it could not is named by none.
    proxy::host_and_port(url).map(|(host, _)| host).unwrap_or_default()
}
