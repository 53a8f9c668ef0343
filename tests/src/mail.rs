//! Real mail servers for the email gateway's tests, one set per test on loopback: Dovecot
//! (IMAP with TLS from the first byte and with STARTTLS, delivery by LMTP, sign-in from a
//! password file), Postfix (SMTP in for anyone, submission with TLS or STARTTLS and a password,
//! a signed-in user sending only as their own address, everything delivered to Dovecot) with
//! OpenDKIM as its milter (mail submitted for `family.test` signed with a key made for the
//! test; mail coming in checked, an `Authentication-Results` of `mail.home.test` written and
//! any claiming that id removed), and dnsmasq answering for the key (`mail._domainkey.
//! family.test`), all with a certificate from a test authority. Debian's packages;
//! `scripts/test` installs them. Mail is sent with lettre and read with Python's imaplib and
//! email package, as a mail program shows it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};

use crate::Running;

/// The mail domains the servers take mail for.
pub const DOMAINS: &[&str] = &["home.test", "family.test", "elsewhere.test"];
/// The domain whose submitted mail OpenDKIM signs, and its selector.
pub const SIGNED_DOMAIN: &str = "family.test";
pub const SELECTOR: &str = "mail";
/// The authserv-id of the household's mail server (OpenDKIM's `AuthservID`).
pub const AUTHSERV_ID: &str = "mail.home.test";

/// Reads mail as a person's mail program shows it (Python's imaplib and email package).
const CLIENT: &str = r#"
import base64, email, email.policy, imaplib, json, ssl, sys
verb = sys.argv[1]
if verb == "list":
    port, ca, user, password = int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5]
    imap = imaplib.IMAP4_SSL("127.0.0.1", port, ssl_context=ssl.create_default_context(cafile=ca))
    imap.login(user, password)
    imap.select("INBOX", readonly=True)
    out = []
    _, found = imap.uid("SEARCH", None, "ALL")
    for uid in found[0].split():
        _, data = imap.uid("FETCH", uid, "(FLAGS BODY.PEEK[])")
        flags = data[0][0].decode()
        message = email.message_from_bytes(data[0][1], policy=email.policy.default)
        body = message.get_body(("plain",))
        text = body.get_content() if body is not None else ""
        files = [{"name": part.get_filename() or "", "data": base64.b64encode(part.get_content() if isinstance(part.get_content(), bytes) else part.get_content().encode()).decode()} for part in message.iter_attachments()]
        out.append({"uid": int(uid), "seen": "\\Seen" in flags, "raw": data[0][1].decode("utf-8", "replace"), "text": text, "files": files})
    print(json.dumps(out))
"#;

/// A mail in a mailbox.
#[derive(Debug, Clone)]
pub struct Mail {
    pub uid: u32,
    pub seen: bool,
    pub raw: String,
    /// Its text, decoded (as a mail program shows it).
    pub text: String,
    /// Its attachments, decoded: each one's name and bytes.
    pub files: Vec<(String, Vec<u8>)>,
}

impl Mail {
    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<String> {
        let head = self.raw.split("\r\n\r\n").next().unwrap_or_default().replace("\r\n ", " ").replace("\r\n\t", " ");
        head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name).then(|| value.trim().to_string())
        })
    }

    /// Its text, as a mail program shows it.
    pub fn body(&self) -> String {
        self.text.replace("\r\n", "\n")
    }
}

/// Dovecot and Postfix, stopped on drop.
pub struct MailServers {
    pub dir: PathBuf,
    /// IMAP with TLS from the first byte, and with STARTTLS.
    pub imaps: u16,
    pub imap: u16,
    /// SMTP in, no sign-in (mail from the test's senders).
    pub smtp: u16,
    /// Submission with a password: TLS from the first byte, and with STARTTLS.
    pub submissions: u16,
    pub submission: u16,
    /// The test authority's certificate (PEM).
    pub ca: PathBuf,
    /// dnsmasq's port on 127.0.0.1: where the DKIM key is asked for.
    pub dns: u16,
    milter: u16,
    dovecot: Option<Running>,
    postfix: Option<Running>,
    opendkim: Option<Running>,
    dnsmasq: Option<Running>,
}

impl MailServers {
    /// Starts both, with a mailbox for each of `users` (address, password). The ports are
    /// free when chosen; another process (a connection's own port is drawn from the same
    /// range) may take one before a server binds it: then all start again on new ones.
    pub fn start(users: &[(&str, &str)]) -> Result<MailServers> {
        const TRIES: usize = 3;
        let mut tried = 1;
        loop {
            match Self::start_once(users) {
                Err(error) if tried < TRIES && format!("{error:#}").contains("Address already in use") => {
                    eprintln!("a mail server's port was taken meanwhile; starting them again on others");
                    tried += 1;
                }
                started => return started,
            }
        }
    }

    fn start_once(users: &[(&str, &str)]) -> Result<MailServers> {
        static STARTED: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let count = STARTED.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // Short: the servers' sockets live here, and a socket's path has at most 107 bytes.
        let dir = PathBuf::from(format!("/tmp/bm-{}-{count}", std::process::id()));
        // silent-ok: a folder left by an earlier run, or none.
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["tls", "mail", "run", "spool", "pdata", "postfix", "dkim"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        let ports = [mail_port()?, mail_port()?, mail_port()?, mail_port()?, mail_port()?, mail_port()?, mail_port()?];
        let mut servers = MailServers {
            ca: dir.join("tls/ca.pem"),
            dir,
            imaps: ports[0],
            imap: ports[1],
            smtp: ports[2],
            submissions: ports[3],
            submission: ports[4],
            dns: ports[5],
            milter: ports[6],
            dovecot: None,
            postfix: None,
            opendkim: None,
            dnsmasq: None,
        };
        servers.certificates()?;
        let passwords: String = users.iter().map(|(user, password)| format!("{user}:{{PLAIN}}{password}\n")).collect();
        std::fs::write(servers.dir.join("users"), passwords)?;
        servers.start_dovecot()?;
        servers.start_dkim()?;
        servers.start_postfix(users)?;
        Ok(servers)
    }

    /// A DKIM key for [`SIGNED_DOMAIN`] (opendkim-genkey), dnsmasq answering for it, and
    /// OpenDKIM signing and checking as the household's milter.
    fn start_dkim(&mut self) -> Result<()> {
        let keys = self.dir.join("dkim");
        crate::tls::run(
            Command::new("opendkim-genkey").args(["-b", "2048", "-d", SIGNED_DOMAIN, "-s", SELECTOR, "-D"]).arg(&keys),
        )
        .context("opendkim-genkey (install opendkim-tools)")?;
        // The record as the zone file has it: quoted strings inside parentheses, joined.
        let zone = std::fs::read_to_string(keys.join(format!("{SELECTOR}.txt")))?;
        let inside = zone.split_once('(').and_then(|(_, rest)| rest.split_once(')')).map(|(inside, _)| inside);
        let record: String = inside.context("the key's record")?.split('"').skip(1).step_by(2).collect();
        let mut dnsmasq = Command::new("dnsmasq");
        dnsmasq
            .args(["--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--no-poll"])
            .args(["--local=/test/", "--listen-address=127.0.0.1", "--bind-interfaces", "--pid-file=", "--user=root"])
            .arg(format!("--port={}", self.dns))
            .arg(format!("--txt-record={SELECTOR}._domainkey.{SIGNED_DOMAIN},{record}"));
        self.dnsmasq =
            Some(crate::spawn(dnsmasq, &self.dir.join("dnsmasq.log")).context("dnsmasq (install dnsmasq-base)")?);
        wait_for_port(self.dns, "dnsmasq", &self.dir.join("dnsmasq.log"))?;
        // OpenDKIM resolves through libunbound, which asks no loopback server and answers for
        // `.test` itself unless told otherwise.
        let unbound = format!(
            "server:\n    do-not-query-localhost: no\n    local-zone: \"test.\" nodefault\nforward-zone:\n    \
             name: \".\"\n    forward-addr: 127.0.0.1@{}\n",
            self.dns
        );
        std::fs::write(keys.join("unbound.conf"), unbound)?;
        // The port was free when picked; a server of a test running beside this one may take
        // it first (OpenDKIM then exits: "smfi_opensocket() failed", and the port answers for
        // the other one): another port, a few times.
        for attempt in 1..=5 {
            self.start_opendkim(&keys)?;
            std::thread::sleep(Duration::from_millis(300));
            let exited = self.opendkim.as_mut().is_some_and(Running::has_exited);
            match (exited, attempt) {
                (false, _) => return Ok(()),
                (true, 5) => {
                    let log = self.opendkim.as_ref().map(Running::log_text).unwrap_or_default();
                    bail!("OpenDKIM exited at its start: {log}")
                }
                (true, _) => self.milter = mail_port()?,
            }
        }
        Ok(())
    }

    /// OpenDKIM on the milter port, listening.
    fn start_opendkim(&mut self, keys: &Path) -> Result<()> {
        let k = keys.display();
        let config = format!(
            "Background no\nSyslog no\nLogWhy yes\nMode sv\nSocket inet:{milter}@[127.0.0.1]\nUserID root\n\
             RequireSafeKeys no\nDomain {SIGNED_DOMAIN}\nSelector {SELECTOR}\nKeyFile {k}/{SELECTOR}.private\n\
             Canonicalization relaxed/simple\nOversignHeaders From\n\
             InternalHosts 192.0.2.1\nAuthservID {AUTHSERV_ID}\nAlwaysAddARHeader yes\nRemoveARAll yes\n\
             ResolverConfiguration {k}/unbound.conf\n",
            milter = self.milter,
        );
        std::fs::write(keys.join("opendkim.conf"), config)?;
        let mut opendkim = Command::new("opendkim");
        opendkim.args(["-f", "-x"]).arg(keys.join("opendkim.conf"));
        self.opendkim =
            Some(crate::spawn(opendkim, &self.dir.join("opendkim.log")).context("opendkim (install opendkim)")?);
        wait_for_port(self.milter, "OpenDKIM", &self.dir.join("opendkim.log"))
    }

    /// A test authority and the servers' certificate from it (for 127.0.0.1 and localhost).
    fn certificates(&self) -> Result<()> {
        crate::tls::test_authority(&self.dir.join("tls"), "baaaht test mail CA")
    }

    fn start_dovecot(&mut self) -> Result<()> {
        let d = self.dir.display().to_string();
        let config = format!(
            "base_dir = {d}/run/dovecot\nstate_dir = {d}/run/state\nlog_path = {d}/dovecot.log\n\
             protocols = imap lmtp\nlisten = 127.0.0.1\nssl = required\nssl_cert = <{d}/tls/server.pem\n\
             ssl_key = <{d}/tls/server.key\ndisable_plaintext_auth = yes\nauth_mechanisms = plain login\n\
             first_valid_uid = 1\n\
             passdb {{\n  driver = passwd-file\n  args = scheme=PLAIN username_format=%u {d}/users\n}}\n\
             userdb {{\n  driver = static\n  args = uid=dovenull gid=dovenull home={d}/mail/%d/%n\n}}\n\
             mail_location = maildir:~/Maildir\n\
             service imap-login {{\n  inet_listener imap {{\n    address = 127.0.0.1\n    port = {imap}\n  }}\n\
               inet_listener imaps {{\n    address = 127.0.0.1\n    port = {imaps}\n    ssl = yes\n  }}\n}}\n\
             service lmtp {{\n  unix_listener {d}/run/lmtp {{\n    mode = 0666\n  }}\n}}\n\
             service auth {{\n  unix_listener {d}/run/auth {{\n    mode = 0666\n  }}\n}}\n\
             default_internal_user = dovecot\ndefault_login_user = dovenull\n",
            imap = self.imap,
            imaps = self.imaps,
        );
        std::fs::write(self.dir.join("dovecot.conf"), config)?;
        crate::tls::run(Command::new("chown").args(["-R", "dovenull:dovenull"]).arg(self.dir.join("mail")))?;
        crate::tls::run(Command::new("chmod").args(["755"]).arg(&self.dir).arg(self.dir.join("run")))?;
        let mut command = Command::new("dovecot");
        command.args(["-F", "-c"]).arg(self.dir.join("dovecot.conf"));
        self.dovecot = Some(crate::spawn(command, &self.dir.join("dovecot.out"))?);
        wait_for_port(self.imaps, "Dovecot", &self.dir.join("dovecot.log"))
    }

    fn start_postfix(&mut self, users: &[(&str, &str)]) -> Result<()> {
        let d = self.dir.display().to_string();
        // A signed-in user sends as their own address only, as a household's server is set up.
        let logins: Vec<String> = users.iter().map(|(user, _)| format!("{user}={user}")).collect();
        let main = format!(
            "compatibility_level = 3.6\nqueue_directory = {d}/spool\ndata_directory = {d}/pdata\n\
             myhostname = mail.home.test\nmydestination =\ninet_interfaces = 127.0.0.1\ninet_protocols = ipv4\n\
             mynetworks = 127.0.0.0/8\nvirtual_mailbox_domains = {domains}\nvirtual_transport = lmtp:unix:{d}/run/lmtp\n\
             smtpd_tls_cert_file = {d}/tls/server.pem\nsmtpd_tls_key_file = {d}/tls/server.key\n\
             smtpd_tls_security_level = may\nsmtpd_sasl_type = dovecot\nsmtpd_sasl_path = {d}/run/auth\n\
             smtpd_relay_restrictions = permit_mynetworks permit_sasl_authenticated reject_unauth_destination\n\
             maillog_file = {d}/postfix.log\nmaillog_file_prefixes = {d}\nalias_maps =\nalias_database =\n\
             smtpd_sender_login_maps = inline:{{ {logins} }}\n\
             smtpd_milters = inet:127.0.0.1:{milter}\nnon_smtpd_milters = $smtpd_milters\nmilter_default_action = tempfail\n",
            domains = DOMAINS.join(" "),
            logins = logins.join(", "),
            milter = self.milter,
        );
        std::fs::write(self.dir.join("postfix/main.cf"), main)?;
        let submission = |port: u16, tls: &str| {
            format!(
                "127.0.0.1:{port} inet n - n - - smtpd\n  {tls}\n  -o smtpd_sasl_auth_enable=yes\n  \
                 -o smtpd_client_restrictions=permit_sasl_authenticated,reject\n  \
                 -o smtpd_sender_restrictions=reject_sender_login_mismatch\n  \
                 -o smtpd_relay_restrictions=permit_sasl_authenticated,reject\n"
            )
        };
        // Debian's services, none chrooted (the test's folders are not in a chroot), SMTP on
        // the test's port, and the two submission services.
        let proto = std::fs::read_to_string("/etc/postfix/master.cf.proto")
            .or_else(|_| std::fs::read_to_string("/usr/share/postfix/master.cf.dist"))
            .context("Postfix's master.cf.proto (install postfix)")?;
        let mut master = String::new();
        for line in proto.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if line.starts_with(|c: char| c.is_ascii_alphanumeric()) && fields.len() >= 8 {
                if fields[0] == "smtp" && fields[1] == "inet" {
                    master.push_str(&format!("127.0.0.1:{} inet n - n - - smtpd\n", self.smtp));
                    continue;
                }
                let mut fields = fields;
                fields[4] = "n";
                master.push_str(&fields.join(" "));
            } else {
                master.push_str(line);
            }
            master.push('\n');
        }
        master.push_str(&submission(self.submissions, "-o smtpd_tls_wrappermode=yes"));
        master.push_str(&submission(self.submission, "-o smtpd_tls_security_level=encrypt"));
        std::fs::write(self.dir.join("postfix/master.cf"), master)?;
        crate::tls::run(Command::new("chown").args(["postfix"]).arg(self.dir.join("pdata")))?;
        let mut command = Command::new("postfix");
        command.arg("-c").arg(self.dir.join("postfix")).arg("start-fg");
        self.postfix = Some(crate::spawn(command, &self.dir.join("postfix.out"))?);
        wait_for_port(self.submissions, "Postfix", &self.dir.join("postfix.log"))?;
        wait_for_port(self.smtp, "Postfix", &self.dir.join("postfix.log"))
    }

    fn client(&self, args: &[&str], stdin: Option<&[u8]>) -> Result<String> {
        use std::io::Write as _;
        let mut child = Command::new("python3")
            .args(["-c", CLIENT])
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut input) = child.stdin.take() {
            input.write_all(stdin.unwrap_or_default())?;
        }
        let output = child.wait_with_output()?;
        if !output.status.success() {
            bail!("the mail client ({}) failed: {}", args[0], String::from_utf8_lossy(&output.stderr));
        }
        Ok(String::from_utf8_lossy(&output.stdout).into_owned())
    }

    /// Sends `raw` (a whole mail, CRLF lines) from `sender` to `to` through Postfix's SMTP.
    pub fn send(&self, sender: &str, to: &str, raw: &str) -> Result<()> {
        use lettre::Transport as _;
        let envelope = lettre::address::Envelope::new(Some(sender.parse()?), vec![to.parse()?])?;
        let smtp = lettre::SmtpTransport::builder_dangerous("127.0.0.1")
            .port(self.smtp)
            .timeout(Some(Duration::from_secs(20)))
            .build();
        // A sending mail program tries again when the server does not answer (CI saw Postfix's
        // greeting not come once, under load); the second failure is the test's.
        if let Err(first) = smtp.send_raw(&envelope, raw.as_bytes()) {
            eprintln!("Postfix did not take a mail from {sender} ({first}); trying again");
            smtp.send_raw(&envelope, raw.as_bytes())
                .with_context(|| format!("Postfix did not take a mail from {sender}: {}", self.logs()))?;
        }
        Ok(())
    }

    /// Sends `raw` from `sender` (signed in with `password`) to `to` through Postfix's
    /// submission port with TLS from the first byte, as a mail program sends.
    pub fn submit(&self, sender: &str, password: &str, to: &str, raw: &str) -> Result<()> {
        use lettre::transport::smtp::authentication::Credentials;
        use lettre::transport::smtp::client::{Certificate, Tls, TlsParameters};
        use lettre::Transport as _;
        let authority = Certificate::from_pem(&std::fs::read(&self.ca)?)?;
        let tls = TlsParameters::builder("127.0.0.1".into()).add_root_certificate(authority).build_rustls()?;
        let envelope = lettre::address::Envelope::new(Some(sender.parse()?), vec![to.parse()?])?;
        let smtp = lettre::SmtpTransport::builder_dangerous("127.0.0.1")
            .port(self.submissions)
            .tls(Tls::Wrapper(tls))
            .credentials(Credentials::new(sender.into(), password.into()))
            .build();
        smtp.send_raw(&envelope, raw.as_bytes()).with_context(|| format!("Postfix did not take {sender}'s mail"))?;
        Ok(())
    }

    /// Where Dovecot delivers new mail for `address` (a Maildir's `new/`; made with its first mail).
    pub fn new_mail_folder(&self, address: &str) -> PathBuf {
        let (user, domain) = address.split_once('@').unwrap_or((address, ""));
        self.dir.join("mail").join(domain).join(user).join("Maildir/new")
    }

    /// The mails in `user`'s inbox, oldest first.
    pub fn mailbox(&self, user: &str, password: &str) -> Result<Vec<Mail>> {
        let ca = self.ca.display().to_string();
        let printed = self.client(&["list", &self.imaps.to_string(), &ca, user, password], None)?;
        let listed: Vec<serde_json::Value> = serde_json::from_str(printed.trim())?;
        Ok(listed
            .iter()
            .map(|mail| Mail {
                uid: mail["uid"].as_u64().unwrap_or_default() as u32,
                seen: mail["seen"] == true,
                raw: mail["raw"].as_str().unwrap_or_default().to_string(),
                text: mail["text"].as_str().unwrap_or_default().to_string(),
                files: mail["files"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|file| {
                        use base64::Engine as _;
                        let data = file["data"].as_str().unwrap_or_default();
                        let bytes = base64::engine::general_purpose::STANDARD.decode(data).unwrap_or_default();
                        (file["name"].as_str().unwrap_or_default().to_string(), bytes)
                    })
                    .collect(),
            })
            .collect())
    }

    /// Waits until `user`'s inbox satisfies `check` (its mails then), or `limit` passes (None).
    pub fn wait_for_mail(
        &self,
        user: &str,
        password: &str,
        limit: Duration,
        check: impl Fn(&[Mail]) -> bool,
    ) -> Option<Vec<Mail>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(mails) = self.mailbox(user, password) {
                if check(&mails) {
                    return Some(mails);
                }
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What the servers logged (for a failing test's message).
    pub fn logs(&self) -> String {
        ["dovecot.log", "postfix.log", "dovecot.out", "postfix.out", "opendkim.log", "dnsmasq.log"]
            .iter()
            .map(|name| format!("--- {name}\n{}", std::fs::read_to_string(self.dir.join(name)).unwrap_or_default()))
            .collect()
    }
}

impl Drop for MailServers {
    fn drop(&mut self) {
        // Postfix's master in the foreground stops its children when it is stopped.
        // silent-ok: it may have stopped already.
        let _ = Command::new("postfix").arg("-c").arg(self.dir.join("postfix")).arg("stop").output();
        self.postfix.take();
        self.dovecot.take();
        self.opendkim.take();
        self.dnsmasq.take();
        if std::env::var_os("BAAAHT_KEEP_MAIL").is_none() {
            // silent-ok: cleaning up.
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A port for a mail server: below the kernel's ephemeral range (32768-60999 here), so no
/// connection's own port and no server on a port the kernel drew (`127.0.0.1:0`, as the other
/// suites' servers bind) can take it; from a block of 200 of this process's own (by its pid),
/// handed out in turn, and free when handed out. A port drawn from the ephemeral range was
/// taken meanwhile by another test's server often enough that a mail went to the wrong one.
fn mail_port() -> Result<u16> {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let base = 20_000 + (std::process::id() % 60) * 200;
    for _ in 0..200 {
        let offset = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 200;
        let port = u16::try_from(base + offset)?;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port in 127.0.0.1:{base}-{}", base + 199)
}

/// Waits for `port` on loopback to take connections (what `log` says when it does not).
fn wait_for_port(port: u16, server: &str, log: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > deadline {
            bail!("{server} does not listen on 127.0.0.1:{port}: {}", std::fs::read_to_string(log).unwrap_or_default());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A mail from `from` to `to`, CRLF lines; `headers` added after the usual ones.
pub fn compose(from: &str, to: &str, subject: &str, id: &str, headers: &[(&str, &str)], body: &str) -> String {
    let mut mail = format!(
        "From: {from}\r\nTo: {to}\r\nSubject: {subject}\r\nMessage-ID: <{id}>\r\nDate: Fri, 27 Nov 2026 08:00:00 +0000\r\n"
    );
    for (name, value) in headers {
        mail.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("Content-Type")) {
        mail.push_str("Content-Type: text/plain; charset=utf-8\r\n");
    }
    mail.push_str("\r\n");
    mail.push_str(&body.replace('\n', "\r\n"));
    mail.push_str("\r\n");
    mail
}
