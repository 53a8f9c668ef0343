//! The household's people on the web: the real `baaaht-web` (run as an external gateway, as
//! behind a reverse proxy), each person signed in once through the real OIDC provider's own
//! form, then writing and following their answers as the page does (`POST /api/messages`,
//! `/api/events`).

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context as _, Result};
use baaaht_proto::client::Client;
use baaaht_proto::v1;
use serde_json::json;

use super::{Outcome, Sent, PATIENCE, SORRY};
use crate::web::{self, Provider, Session, CLIENT_ID, CLIENT_SECRET};
use crate::{DaemonOptions, Running};

/// The site, its provider and its signed-in people.
pub(super) struct Site {
    pub(super) provider: Provider,
    pub(super) address: SocketAddr,
    site: String,
    port: u16,
    /// The site's people, by household index.
    pub(super) people: Vec<(usize, Session)>,
    gateway: Option<Running>,
    dir: tempfile::TempDir,
}

impl Site {
    /// The provider, started before the daemon: `options` then let the daemon reach it and
    /// give the gateway its client secret.
    pub(super) fn provider(options: &mut DaemonOptions) -> Result<Site> {
        let dir = tempfile::tempdir()?;
        let port = web::free_port()?;
        let site = format!("http://127.0.0.1:{port}");
        // ID tokens outlast the run: no sign-in again.
        let provider =
            Provider::start(dir.path(), &format!("{site}/auth/callback"), &format!("{site}/signed-out"), 4 * 3600)?;
        super::allow_egress(options, &format!("127.0.0.1:{}", provider.port));
        options.env.push(("WEB_CLIENT_SECRET_HOME".into(), CLIENT_SECRET.into()));
        Ok(Site {
            provider,
            address: format!("127.0.0.1:{port}").parse()?,
            site,
            port,
            people: vec![],
            gateway: None,
            dir,
        })
    }

    /// Registers the gateway with the daemon (`host`), starts `baaaht-web` on its socket and
    /// signs the people `indexes` in.
    pub(super) async fn open(&mut self, host: &mut Client, indexes: impl Iterator<Item = usize>) -> Result<()> {
        let request = v1::AddGatewayRequest {
            kind: "web".into(),
            name: "home".into(),
            issuer: self.provider.issuer.clone(),
            audience: CLIENT_ID.into(),
            mode: "external".into(),
            ..Default::default()
        };
        let added = host.admin.add_gateway(request).await.context("AddGateway")?.into_inner();
        let socket = added.gateway.context("the gateway's socket")?.socket;
        self.gateway = Some(web::web_gateway(self.dir.path(), &socket, &added.token, self.port, &[])?);
        for index in indexes {
            let (site, jar) = (self.site.clone(), self.dir.path().join(format!("jar-{index}")));
            let session = tokio::task::spawn_blocking(move || web::signed_in(&site, &super::user_id(index), &jar))
                .await?
                .with_context(|| format!("signing {} in", super::user_id(index)))?;
            self.people.push((index, session));
        }
        Ok(())
    }

    /// The gateway's and the provider's logs.
    pub(super) fn logs(&self) -> String {
        let gateway = self.gateway.as_ref().map(Running::log_text).unwrap_or_default();
        let provider = std::fs::read_to_string(self.dir.path().join("oidc-provider.log")).unwrap_or_default();
        format!("--- baaaht-web\n{gateway}\n--- oidc-provider\n{provider}\n")
    }

    /// Stops the provider (SIGSTOP: it holds its connections and answers nothing) or lets it
    /// go on (SIGCONT).
    pub(super) fn provider_away(&self, away: bool) -> Result<()> {
        let signal = if away { "-STOP" } else { "-CONT" };
        super::run_program("kill", &[signal, &self.provider.process.id().to_string()]).map(drop)
    }
}

/// Sends `content` as a signed-in page does and follows its turn on the page's event stream:
/// what the person saw.
pub(super) async fn follow(address: SocketAddr, session: &Session, content: &str, sent: &mut Sent) {
    let mut events = match web::events(address, session).await {
        Ok(events) => events,
        Err(error) => {
            sent.outcome = Outcome::Refused(format!("the site's event stream: {error:#}"));
            return;
        }
    };
    let asked = Instant::now();
    let posted = web::request(address, "POST", "/api/messages", session, Some(json!({ "content": content }))).await;
    let turn = match posted {
        Ok((200, body)) => body["turn"].as_str().unwrap_or_default().to_string(),
        // The daemon away (502): whether it kept the message, its log says.
        Ok((502, body)) => {
            let shown = body["error"].as_str().unwrap_or_default().to_string();
            sent.outcome = Outcome::Lost(format!("502: {shown}"));
            sent.unreachable = Some(shown);
            return;
        }
        Ok((status, body)) => {
            let said = body["error"].as_str().map_or_else(|| format!("{status}: {body}"), str::to_string);
            sent.outcome = Outcome::Refused(said);
            return;
        }
        Err(error) => {
            sent.outcome = Outcome::Lost(format!("POST /api/messages: {error:#}"));
            sent.unreachable = Some(format!("the site did not answer: {error:#}"));
            return;
        }
    };
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let event = match tokio::time::timeout_at(deadline, events.recv()).await {
            Err(_) => {
                sent.outcome = Outcome::Lost(format!("no answer within {} s", PATIENCE.as_secs()));
                return;
            }
            Ok(None) => {
                sent.outcome = Outcome::Lost("the page's event stream broke".into());
                return;
            }
            Ok(Some((_, event))) => event,
        };
        if event["turn"] != turn.as_str() {
            continue;
        }
        let text = event["text"].as_str().unwrap_or_default().to_string();
        match event["type"].as_str() {
            Some("delta") if sent.first_word.is_none() => sent.first_word = Some(asked.elapsed()),
            Some("reply") if text.starts_with(SORRY) => {
                sent.outcome = Outcome::Refused(text);
                return;
            }
            Some("reply") if super::answers(sent.kind, &text, &sent.token) => {
                sent.outcome = Outcome::Answered;
                return;
            }
            Some("reply") => {
                sent.outcome = Outcome::Lost(format!("a reply without its token: {text}"));
                return;
            }
            Some("error") => {
                sent.outcome = Outcome::Refused(text);
                return;
            }
            _ => {}
        }
    }
}
