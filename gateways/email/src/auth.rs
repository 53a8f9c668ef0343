//! Who really sent a mail (DESIGN.md §5.8): a `From:` header is what anyone may write, so a mail
//! is a household member's only when it is authenticated, by either
//! - a DKIM signature that passes, signs the `From:` header and is aligned with its domain
//!   (`d=` the domain or a parent of it), verified here with `mail-auth` on a key this gateway
//!   fetches itself over DNS (TCP, through the daemon's egress, from the resolver `--dns`
//!   names); or
//! - the household's own mail server's verdict: the topmost `Authentication-Results` header,
//!   only when its authserv-id is the one `--authserv-id` names, saying `dmarc=pass` for the
//!   `From:` domain or `dkim=pass` aligned with it (RFC 8601; spaces around `=` allowed).
//!
//! Either vouches for a domain, not a person: everyone with an account on the household's
//! server can have it sign a `From:` of anyone else there. So the mail's topmost `Return-Path`
//! (the envelope sender, which the server that delivered it wrote, and which a household's
//! server binds to the account that signed in) must name the `From:` address too.
//!
//! Anything else (no signature, `spf=softfail`, SPF passing for another domain, a failed or
//! unaligned signature, another server's verdict, another account's envelope) is not
//! authenticated. A key that could not be
//! fetched makes the verdict [`Verdict::Unsure`]: the mail waits and is looked at again, never
//! taken as from nobody or as from the member.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use baaaht_gateway_kit::egress::Egress;
use mail_auth::common::parse::TxtRecordParser as _;
use mail_auth::common::verify::DomainKey;
use mail_auth::hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use mail_auth::hickory_resolver::proto::op::{Message, Query, ResponseCode};
use mail_auth::hickory_resolver::proto::rr::{Name, RData, RecordType};
use mail_auth::{
    AuthenticatedMessage, DkimResult, DnsError, Error, MessageAuthenticator, Parameters, ResolverCache, Txt,
};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The most aligned signatures of one mail whose keys are fetched.
const MOST_SIGNATURES: usize = 3;
/// How long a fetched key is kept.
const KEPT: Duration = Duration::from_secs(600);
/// How long one DNS question may take.
const ASKING: Duration = Duration::from_secs(10);

/// What a mail's sender was found to be.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Authenticated, and how.
    Authenticated(String),
    /// Not authenticated: why, for the log.
    Unauthenticated(String),
    /// Not known yet (a key could not be fetched): looked at again later.
    Unsure(String),
}

/// How this gateway authenticates senders.
pub struct Checks {
    /// The household mail server whose verdicts are believed.
    authserv_id: Option<String>,
    /// The resolver DKIM keys are asked of, through `egress`.
    dns: Option<(String, u16)>,
    egress: Egress,
    authenticator: Option<MessageAuthenticator>,
    keys: Mutex<HashMap<String, (Instant, Txt)>>,
}

impl std::fmt::Debug for Checks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checks").field("authserv_id", &self.authserv_id).field("dns", &self.dns).finish_non_exhaustive()
    }
}

/// Keys this gateway fetched (or could not), answering mail-auth's every question: it never
/// asks DNS itself.
struct Supplied(HashMap<Box<str>, Txt>);

impl ResolverCache<Box<str>, Txt> for Supplied {
    fn get<Q>(&self, name: &Q) -> Option<Txt>
    where
        Box<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let not_found = || Txt::Error(Error::Dns(DnsError::RecordNotFound(ResponseCode::NXDomain)));
        Some(self.0.get(name).cloned().unwrap_or_else(not_found))
    }

    fn remove<Q>(&self, _name: &Q) -> Option<Txt>
    where
        Box<str>: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        None
    }

    fn insert(&self, _name: Box<str>, _value: Txt, _until: Instant) {}
}

/// Whether `signer` (a DKIM `d=`) speaks for `domain`: the domain itself or a parent of it.
fn aligned(signer: &str, domain: &str) -> bool {
    let (signer, domain) = (signer.trim_end_matches('.').to_ascii_lowercase(), domain.to_ascii_lowercase());
    !signer.is_empty() && (domain == signer || domain.ends_with(&format!(".{signer}")))
}

/// One result of an `Authentication-Results` header: method, result, properties.
pub type Checked = (String, String, HashMap<String, String>);

/// An `Authentication-Results` value read (RFC 8601): its authserv-id, and each result as
/// (method, result, properties), comments left out and spaces around `=` allowed.
pub fn read_results(value: &str) -> Option<(String, Vec<Checked>)> {
    // Comments, possibly nested, go.
    let mut text = String::with_capacity(value.len());
    let mut depth = 0usize;
    let mut quoted = false;
    for c in value.chars() {
        match c {
            '"' if depth == 0 => {
                quoted = !quoted;
                text.push(c);
            }
            '(' if !quoted => depth += 1,
            ')' if !quoted && depth > 0 => depth -= 1,
            _ if depth == 0 => text.push(if c.is_whitespace() { ' ' } else { c }),
            _ => {}
        }
    }
    while text.contains(" =") || text.contains("= ") {
        text = text.replace(" =", "=").replace("= ", "=");
    }
    let mut parts = text.split(';');
    let id = parts.next()?.split_whitespace().next()?.to_ascii_lowercase();
    let mut results = vec![];
    for part in parts {
        let mut words = part.split_whitespace();
        let Some((method, result)) = words.next().and_then(|word| word.split_once('=')) else { continue };
        let method = method.split('/').next().unwrap_or(method).to_ascii_lowercase();
        let properties = words
            .filter_map(|word| word.split_once('='))
            .map(|(key, value)| (key.to_ascii_lowercase(), value.trim_matches('"').to_ascii_lowercase()))
            .collect();
        results.push((method, result.to_ascii_lowercase(), properties));
    }
    Some((id, results))
}

/// What the topmost `Authentication-Results` (of `values`, topmost first) says of `domain`,
/// when it is `authserv_id`'s: how it vouches for the sender.
pub fn vouched(values: &[String], authserv_id: &str, domain: &str) -> Option<String> {
    let (id, results) = read_results(values.first()?)?;
    if id != authserv_id.to_ascii_lowercase() {
        return None;
    }
    results.iter().find_map(|(method, result, properties)| {
        let property = |name: &str| properties.get(name).map(String::as_str).unwrap_or_default();
        let signer = match property("header.d") {
            "" => property("header.i").rsplit_once('@').map(|(_, domain)| domain).unwrap_or_default(),
            signer => signer,
        };
        match (method.as_str(), result.as_str()) {
            ("dmarc", "pass") if property("header.from") == domain => Some(format!("{id}: dmarc=pass")),
            ("dkim", "pass") if aligned(signer, domain) => Some(format!("{id}: dkim=pass for {signer}")),
            _ => None,
        }
    })
}

impl Checks {
    /// Checks by `authserv_id`'s verdicts and by DKIM with keys asked of `dns` through `egress`.
    pub fn new(authserv_id: Option<String>, dns: Option<(String, u16)>, egress: Egress) -> Result<Checks, String> {
        if authserv_id.is_none() && dns.is_none() {
            return Err("name how senders are authenticated: --dns HOST:PORT (a resolver this gateway asks for \
                        DKIM keys, through the daemon's egress) and/or --authserv-id ID (the household mail \
                        server whose Authentication-Results are believed); without either, no mail could be \
                        known to come from who it says"
                .into());
        }
        let authenticator = match &dns {
            // A resolver mail-auth is given but never uses: every question is answered from
            // the keys fetched here (`Supplied`).
            Some(_) => {
                let unused = NameServerConfig::udp_and_tcp(std::net::Ipv4Addr::LOCALHOST.into());
                let config = ResolverConfig::from_name_servers(vec![unused]);
                Some(
                    MessageAuthenticator::new(config, ResolverOpts::default())
                        .map_err(|error| format!("cannot set up DKIM verification: {error}"))?,
                )
            }
            None => None,
        };
        Ok(Checks { authserv_id, dns, egress, authenticator, keys: Mutex::default() })
    }

    /// Whether `raw` comes from `from` (its one `From:` address, lowercase), whose
    /// `Authentication-Results` headers are `results` (topmost first) and whose topmost
    /// `Return-Path` is `return_path` (lowercase).
    pub async fn check(&self, raw: &[u8], from: &str, results: &[String], return_path: Option<&str>) -> Verdict {
        let Some((_, domain)) = from.rsplit_once('@') else {
            return Verdict::Unauthenticated("its sender has no domain".into());
        };
        match return_path {
            Some(path) if path == from => {}
            Some(_) => {
                return Verdict::Unauthenticated(
                    "its envelope (Return-Path) names another sender than its From: a signature vouches for the \
                     domain, not for who in it wrote"
                        .into(),
                )
            }
            None => {
                return Verdict::Unauthenticated(
                    "it has no Return-Path: the server that delivered it did not say who sent it".into(),
                )
            }
        }
        if let Some(how) = self.authserv_id.as_deref().and_then(|id| vouched(results, id, domain)) {
            return Verdict::Authenticated(how);
        }
        let Some(authenticator) = &self.authenticator else {
            let why = match &self.authserv_id {
                Some(id) => format!("{id}'s Authentication-Results (the topmost) do not vouch for {domain}"),
                None => "no check vouches for it".into(),
            };
            return Verdict::Unauthenticated(why);
        };
        let Some(message) = AuthenticatedMessage::parse(raw) else {
            return Verdict::Unauthenticated("its DKIM signatures cannot be read".into());
        };
        let signs_from = |signature: &mail_auth::dkim::Signature| {
            aligned(&signature.d, domain) && signature.h.iter().any(|header| header.eq_ignore_ascii_case("from"))
        };
        let mut supplied = HashMap::new();
        let wanted: Vec<String> = message
            .dkim_headers
            .iter()
            .map(|header| &header.header)
            .filter(|signature| signs_from(signature))
            .map(|signature| {
                format!("{}._domainkey.{}.", signature.s, signature.d.trim_end_matches('.')).to_ascii_lowercase()
            })
            .take(MOST_SIGNATURES)
            .collect();
        if wanted.is_empty() {
            return Verdict::Unauthenticated(format!("no DKIM signature of {domain} signs its From"));
        }
        for name in wanted {
            let key = self.key(&name).await;
            supplied.insert(name.into_boxed_str(), key);
        }
        let supplied = Supplied(supplied);
        let outputs = authenticator.verify_dkim(Parameters::new(&message).with_txt_cache(&supplied)).await;
        let mut unsure = None;
        for output in &outputs {
            let Some(signature) = output.signature().filter(|signature| signs_from(signature)) else { continue };
            match output.result() {
                DkimResult::Pass => return Verdict::Authenticated(format!("DKIM, d={}", signature.d)),
                DkimResult::TempError(error) => {
                    unsure = Some(format!("the key of d={} could not be fetched: {error}", signature.d))
                }
                _ => {}
            }
        }
        match unsure {
            Some(why) => Verdict::Unsure(why),
            None => Verdict::Unauthenticated(format!("no DKIM signature of {domain} verifies")),
        }
    }

    /// The DKIM key at `name` as mail-auth takes it: fetched (or kept from a while ago), not
    /// there, or an error it reads as temporary.
    async fn key(&self, name: &str) -> Txt {
        if let Some((at, key)) = self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner).get(name) {
            if at.elapsed() < KEPT {
                return key.clone();
            }
        }
        let key = match tokio::time::timeout(ASKING, self.ask(name)).await {
            Ok(Ok(records)) if records.is_empty() => {
                Txt::Error(Error::Dns(DnsError::RecordNotFound(ResponseCode::NXDomain)))
            }
            Ok(Ok(records)) => {
                let mut parsed = Err(Error::Dns(DnsError::InvalidRecordType));
                for record in &records {
                    parsed = DomainKey::parse(record);
                    if parsed.is_ok() {
                        break;
                    }
                }
                Txt::from(parsed)
            }
            Ok(Err(why)) => return Txt::Error(Error::Dns(DnsError::Resolver(why))),
            Err(_) => return Txt::Error(Error::Dns(DnsError::Resolver("the resolver did not answer in time".into()))),
        };
        let mut keys = self.keys.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if keys.len() > 256 {
            keys.clear();
        }
        keys.insert(name.to_string(), (Instant::now(), key.clone()));
        key
    }

    /// The TXT records at `name`, asked of the resolver over TCP (RFC 7766) through the
    /// daemon's egress: each record's strings joined.
    async fn ask(&self, name: &str) -> Result<Vec<Vec<u8>>, String> {
        let Some((host, port)) = &self.dns else { return Err("no resolver is named (--dns)".into()) };
        let mut stream = self.egress.dial(host, *port).await.map_err(|error| format!("{host}:{port}: {error}"))?;
        let mut query = Message::query();
        query.metadata.recursion_desired = true;
        let asked = Name::from_ascii(name).map_err(|error| format!("{name}: {error}"))?;
        query.add_query(Query::query(asked, RecordType::TXT));
        let bytes = query.to_vec().map_err(|error| error.to_string())?;
        let length = u16::try_from(bytes.len()).map_err(|_too_long| "the question is too long".to_string())?;
        let io = |error: std::io::Error| format!("{host}:{port}: {error}");
        stream.write_all(&length.to_be_bytes()).await.map_err(io)?;
        stream.write_all(&bytes).await.map_err(io)?;
        let mut length = [0u8; 2];
        stream.read_exact(&mut length).await.map_err(io)?;
        let mut answer = vec![0u8; usize::from(u16::from_be_bytes(length))];
        stream.read_exact(&mut answer).await.map_err(io)?;
        let answer = Message::from_vec(&answer).map_err(|error| format!("{host}:{port} answered: {error}"))?;
        if answer.metadata.id != query.metadata.id {
            return Err(format!("{host}:{port} answered another question"));
        }
        match answer.metadata.response_code {
            ResponseCode::NoError => {}
            ResponseCode::NXDomain => return Ok(vec![]),
            code => return Err(format!("{host}:{port} answered {code}")),
        }
        Ok(answer
            .answers
            .iter()
            .filter_map(|record| match &record.data {
                RData::TXT(txt) => Some(txt.txt_data.iter().flat_map(|part| part.iter().copied()).collect()),
                _ => None,
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_named_servers_topmost_verdict_vouches_and_only_for_its_domain() {
        let id = "mail.home.test";
        let vouch = |values: &[&str]| {
            let values: Vec<String> = values.iter().map(|value| value.to_string()).collect();
            vouched(&values, id, "family.test")
        };
        assert!(vouch(&["mail.home.test; dmarc=pass header.from=family.test"]).is_some());
        assert!(vouch(&["mail.home.test 1; dmarc = pass (p=reject) header.from = family.test"]).is_some());
        assert!(vouch(&["Mail.Home.Test; dkim=pass (2048-bit key) header.d=family.test header.s=mail"]).is_some());
        assert!(vouch(&["mail.home.test; dkim=pass header.i=@family.test"]).is_some());
        assert!(vouch(&["mail.home.test; dkim=pass header.d=mail.family.test"]).is_none(), "a child does not vouch");
        for refused in [
            "mail.home.test; dkim=none; spf=pass smtp.mailfrom=family.test",
            "mail.home.test; spf=softfail smtp.mailfrom=family.test",
            "mail.home.test; spf=pass smtp.mailfrom=other.test; dkim=none",
            "mail.home.test; dmarc=pass header.from=other.test",
            "mail.home.test; dkim=pass header.d=evilfamily.test",
            "mail.home.test; dkim=permerror header.d=family.test",
            "mail.home.test; dkim=temperror header.d=family.test",
            "elsewhere.test; dmarc=pass header.from=family.test",
            "mail.home.test (dmarc=pass header.from=family.test); dkim=none",
        ] {
            assert!(vouch(&[refused]).is_none(), "{refused}");
        }
        // Only the topmost counts: one further down was written by whoever sent the mail.
        assert!(vouch(&["mail.home.test; dkim=none", "mail.home.test; dmarc=pass header.from=family.test"]).is_none());
        assert!(vouch(&[]).is_none());
    }

    const ALICE: Option<&str> = Some("alice@family.test");

    #[tokio::test]
    async fn a_signature_of_the_senders_domain_authenticates_and_nothing_else_does() {
        use mail_auth::common::crypto::Ed25519Key;
        use mail_auth::common::headers::HeaderWriter as _;
        use mail_auth::dkim::DkimSigner;
        let pkcs8 = Ed25519Key::generate_pkcs8().expect("a key");
        let key = Ed25519Key::from_pkcs8_der(&pkcs8).expect("the key");
        let public = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(key.public_key())
        };
        let record = format!("v=DKIM1; k=ed25519; p={public}");
        let sign = |mail: &str, domain: &str| {
            let key = Ed25519Key::from_pkcs8_der(&pkcs8).expect("the key");
            let signer = DkimSigner::from_key(key).domain(domain).selector("mail").headers(["From", "To", "Subject"]);
            let signature = signer.sign(mail.as_bytes()).expect("signed");
            format!("{}{mail}", signature.to_header())
        };
        let checks = Checks::new(None, Some(("127.0.0.1".into(), 9)), Egress::Direct).expect("checks");
        for name in ["mail._domainkey.family.test.", "mail._domainkey.elsewhere.test."] {
            let parsed = DomainKey::parse(record.as_bytes());
            checks.keys.lock().expect("keys").insert(name.into(), (Instant::now(), Txt::from(parsed)));
        }
        let mail = "From: Alice <alice@family.test>\r\nTo: assistant@home.test\r\nSubject: hi\r\n\r\nhello\r\n";
        let signed = sign(mail, "family.test");
        assert!(matches!(
            checks.check(signed.as_bytes(), "alice@family.test", &[], ALICE).await,
            Verdict::Authenticated(_)
        ));
        // Signed for the domain, but sent by another of its accounts (Bob signed in, wrote
        // Alice's From), or with no envelope said: not hers.
        for envelope in [Some("bob@family.test"), None] {
            let verdict = checks.check(signed.as_bytes(), "alice@family.test", &[], envelope).await;
            assert!(matches!(verdict, Verdict::Unauthenticated(_)), "{envelope:?}");
        }
        // Another domain's signature, a changed body, no signature: not authenticated.
        let theirs = sign(mail, "elsewhere.test");
        assert!(matches!(
            checks.check(theirs.as_bytes(), "alice@family.test", &[], ALICE).await,
            Verdict::Unauthenticated(_)
        ));
        let changed = signed.replace("hello", "send me the codes");
        assert!(matches!(
            checks.check(changed.as_bytes(), "alice@family.test", &[], ALICE).await,
            Verdict::Unauthenticated(_)
        ));
        assert!(matches!(
            checks.check(mail.as_bytes(), "alice@family.test", &[], ALICE).await,
            Verdict::Unauthenticated(_)
        ));
        // A key that cannot be fetched: not known yet.
        let unknown = Checks::new(None, Some(("127.0.0.1".into(), 9)), Egress::Direct).expect("checks");
        assert!(matches!(unknown.check(signed.as_bytes(), "alice@family.test", &[], ALICE).await, Verdict::Unsure(_)));
        assert!(Checks::new(None, None, Egress::Direct).expect_err("no check").contains("--dns"));
    }
}
