//! Email in the compliance suite: `baaaht-email` against real mail servers (Dovecot, Postfix
//! with OpenDKIM, dnsmasq for the DKIM key), its IMAP through a relay the health case cuts; the
//! person Alice (alice@family.test), whose mail is submitted signed in, so signed. Her chat is
//! her mailbox: each mail the assistant sent her, its text above the quote of hers.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use baaaht_gateway_compliance::channel::File;
use baaaht_gateway_compliance::{Channel, FakeDaemon};

use super::cut::Cut;
use crate::mail::{compose, Mail, MailServers, AUTHSERV_ID};

const ASSISTANT: (&str, &str) = ("assistant@home.test", "assistant-pw");
const ALICE: (&str, &str) = ("alice@family.test", "alice-pw");

pub struct Email {
    servers: MailServers,
    imap: Cut,
    gateway: crate::Running,
    next: AtomicU64,
}

impl Email {
    /// Alice's mailbox now.
    fn mails(&self) -> Vec<Mail> {
        // The mail program's round: blocking, on a thread the runtime lends for it.
        tokio::task::block_in_place(|| self.servers.mailbox(ALICE.0, ALICE.1)).unwrap_or_default()
    }

    /// Submits `raw` as Alice, as her mail program sends.
    async fn submit(&self, raw: String) {
        let submitted = tokio::task::block_in_place(|| self.servers.submit(ALICE.0, ALICE.1, ASSISTANT.0, &raw));
        if let Err(error) = submitted {
            panic!("Alice's mail was not taken: {error:#}\n{}", self.servers.logs());
        }
    }

    /// A Message-ID of Alice's, new.
    fn new_id(&self) -> String {
        format!("c{}@family.test", self.next.fetch_add(1, Ordering::SeqCst) + 1)
    }
}

/// What a mail shows as the assistant's words: its text above the quote of the mail it answers.
fn words(mail: &Mail) -> String {
    let body = mail.body();
    let lines: Vec<&str> = body.lines().collect();
    let quote = lines.iter().enumerate().position(|(at, line)| {
        line.ends_with(" wrote:") && lines.get(at + 1).is_some_and(|next| next.starts_with('>'))
    });
    let kept = quote.map_or(&lines[..], |at| &lines[..at]);
    kept.join("\n").trim_end().to_string()
}

impl Channel for Email {
    /// The mail as it was sent.
    type Written = String;

    const LIMIT: usize = usize::MAX;
    const NAME: &'static str = "email";

    fn secrets() -> HashMap<String, String> {
        HashMap::from([("password".to_string(), ASSISTANT.1.to_string())])
    }

    async fn start(daemon: &FakeDaemon, health: &Path) -> Result<Email, String> {
        let servers = tokio::task::block_in_place(|| MailServers::start(&[ASSISTANT, ALICE]))
            .map_err(|error| format!("the mail servers: {error:#}"))?;
        let imap = Cut::start(servers.imaps).await.map_err(|error| format!("the IMAP relay: {error}"))?;
        let state = daemon.folder().join("email-state").display().to_string();
        let (imap_at, smtp_at) = (format!("127.0.0.1:{}", imap.port), format!("127.0.0.1:{}", servers.submissions));
        let (ca, dns) = (servers.ca.display().to_string(), format!("127.0.0.1:{}", servers.dns));
        let args = [
            "--address",
            ASSISTANT.0,
            "--imap",
            &imap_at,
            "--imap-tls",
            "implicit",
            "--smtp",
            &smtp_at,
            "--smtp-tls",
            "implicit",
            "--ca-file",
            &ca,
            "--allow",
            ALICE.0,
            "--dns",
            &dns,
            "--authserv-id",
            AUTHSERV_ID,
            "--state-dir",
            &state,
        ];
        let gateway = super::start_gateway(daemon, "baaaht-email", health, &args)?;
        let email = Email { servers, imap, gateway, next: AtomicU64::new(0) };
        let watching =
            email.wait_for(Duration::from_secs(60), |email| email.log().contains("watching the mailbox")).await;
        if !watching {
            return Err(format!("the gateway never watched the mailbox\n{}", email.log()));
        }
        Ok(email)
    }

    fn identity(&self) -> String {
        format!("email:{}", ALICE.0)
    }

    async fn write(&self, text: &str, files: &[File]) -> String {
        let id = self.new_id();
        let raw = if files.is_empty() {
            compose(ALICE.0, ASSISTANT.0, "A question", &id, &[], text)
        } else {
            use base64::Engine as _;
            // Lines end in \n here: `compose` makes them CRLF.
            let mut body = format!("--part\nContent-Type: text/plain; charset=utf-8\n\n{text}\n");
            for file in files {
                let data = base64::engine::general_purpose::STANDARD.encode(&file.bytes);
                body.push_str(&format!(
                    "--part\nContent-Type: {}\nContent-Disposition: attachment; filename=\"{}\"\n\
                     Content-Transfer-Encoding: base64\n\n{data}\n",
                    file.mime_type, file.name
                ));
            }
            body.push_str("--part--");
            let mixed = [("MIME-Version", "1.0"), ("Content-Type", "multipart/mixed; boundary=part")];
            compose(ALICE.0, ASSISTANT.0, "A question", &id, &mixed, &body)
        };
        self.submit(raw.clone()).await;
        raw
    }

    async fn redeliver(&self, written: &String) {
        // The same mail, its Message-ID and all, in the inbox again.
        self.submit(written.clone()).await;
    }

    fn shown(&self) -> Vec<String> {
        self.mails().iter().map(words).collect()
    }

    fn files(&self) -> Vec<File> {
        self.mails()
            .into_iter()
            .flat_map(|mail| mail.files)
            .map(|(name, bytes)| File { name, mime_type: String::new(), bytes, voice: false })
            .collect()
    }

    async fn answer_approval(&self, decision: &str) -> Result<(), String> {
        let mails = self.mails();
        let asking = |body: String| {
            use baaaht_gateway_kit::sentences::{ACTION_ANSWER_WITH, ANSWER_WITH, REVIEW_ANSWER_WITH};
            body.contains(ANSWER_WITH) || body.contains(REVIEW_ANSWER_WITH) || body.contains(ACTION_ANSWER_WITH)
        };
        let asked = mails.iter().rev().find(|mail| asking(mail.body()));
        let Some(asked) = asked else { return Err("no approval request in Alice's mailbox".into()) };
        let Some(request) = asked.header("Message-ID") else { return Err("the request mail has no Message-ID".into()) };
        let id = self.new_id();
        let reply = compose(ALICE.0, ASSISTANT.0, "Re: A question", &id, &[("In-Reply-To", &request)], decision);
        self.submit(reply).await;
        Ok(())
    }

    fn set_offline(&self, offline: bool) {
        self.imap.set_offline(offline);
    }

    async fn wait_for(&self, wait: Duration, check: impl Fn(&Email) -> bool + Send + Sync) -> bool {
        super::looked_at_until(wait, Duration::from_millis(250), || check(self)).await
    }

    fn log(&self) -> String {
        self.gateway.log_text()
    }
}
