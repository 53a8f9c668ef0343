//! A mail as the gateway reads it — who says they sent it (exactly one `From:` address; who
//! really did is `auth`'s to say), which thread it belongs to, its words (HTML mail turned into
//! text, the quoted history of a reply left out) and its attachments — and the answer it sends
//! back: a reply in the same thread that quotes what it answers. Nothing a mail says can make
//! the answer fail to be written: names are one plain line.

use baaaht_gateway_kit::daemon::File;
use mail_parser::{HeaderValue, MessageParser, MimeHeaders as _};

/// The most characters of a mail's text given to the assistant.
const MAX_TEXT: usize = 32 * 1024;
/// The most lines of the asking mail quoted in a reply.
const MAX_QUOTED_LINES: usize = 40;
/// The most attachments one mail may carry.
pub const MAX_FILES: usize = 10;

/// A mail that arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    /// Its Message-ID, without angle brackets (made up from the mailbox's UID when it has none).
    pub id: String,
    /// The Message-IDs it answers (In-Reply-To, then References), nearest first.
    pub answers: Vec<String>,
    /// References to carry on in a reply: its References, then its own id.
    pub references: Vec<String>,
    /// The sender's address (lowercase) and name.
    pub from: String,
    pub name: Option<String>,
    pub subject: String,
    /// When it says it was written (RFC 2822), for the quote's heading.
    pub date: Option<String>,
    /// What it says that is new (no quoted history, no signature).
    pub text: String,
    /// What it said whole, for quoting.
    pub whole: String,
    pub files: Vec<File>,
    /// An automatic mail (an autoresponder, a bounce, a mailing list): never answered, so two
    /// machines do not answer each other for ever.
    pub automatic: bool,
    /// Its `Authentication-Results` headers, topmost (the last server's) first.
    pub results: Vec<String>,
    /// Who the server that delivered it says sent it: its topmost `Return-Path` (the envelope
    /// sender, which a household's server binds to the account that signed in), lowercase.
    pub return_path: Option<String>,
    /// Whether its sender was authenticated (`auth`): false until the gateway says so.
    pub verified: bool,
}

/// `raw` read, or why it cannot be; `uid` names a mail without a Message-ID.
pub fn read(raw: &[u8], uid: u32, max_file_bytes: u64) -> Result<Incoming, String> {
    let message = MessageParser::default().parse(raw).ok_or("not a mail message")?;
    // Exactly one sender: a second From line, or a second address in it, would let a mail name
    // one sender to a check and another to the conversation.
    let froms = message.header_values("From").count();
    if froms != 1 {
        return Err(format!("it has {froms} From lines; a mail names exactly one sender"));
    }
    let senders = message.from().map(|from| from.iter().count()).unwrap_or(0);
    if senders != 1 {
        return Err(format!("its From names {senders} addresses; a mail names exactly one sender"));
    }
    let from = message.from().and_then(|from| from.first()).ok_or("it names no sender (From)")?;
    let address = from.address().ok_or("its sender (From) has no address")?.trim().to_ascii_lowercase();
    let plain = address.split_once('@').is_some_and(|(user, domain)| {
        !user.is_empty()
            && !domain.is_empty()
            && !domain.ends_with('.')
            && !domain.starts_with('.')
            && domain.bytes().all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'-'))
            && !address.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    if !plain {
        return Err(format!("its sender's address `{}` is not a plain address", address.escape_debug()));
    }
    let name = from.name().map(one_line).filter(|name| !name.is_empty());
    let id = message.message_id().map(str::to_string).unwrap_or_else(|| format!("uid-{uid}@baaaht.invalid"));
    let ids = |value: &HeaderValue<'_>| -> Vec<String> {
        match value {
            HeaderValue::Text(text) => vec![text.to_string()],
            HeaderValue::TextList(list) => list.iter().map(|text| text.to_string()).collect(),
            _ => vec![],
        }
    };
    let references = ids(message.references());
    let mut answers = ids(message.in_reply_to());
    for id in references.iter().rev() {
        if !answers.contains(id) {
            answers.push(id.clone());
        }
    }
    let header = |name: &str| message.header_raw(name).map(str::trim).unwrap_or_default().to_ascii_lowercase();
    let auto_submitted = header("Auto-Submitted");
    let precedence = header("Precedence");
    let automatic = (!auto_submitted.is_empty() && auto_submitted != "no")
        || matches!(precedence.as_str(), "bulk" | "list" | "junk" | "auto_reply")
        || message.header_raw("List-Id").is_some()
        || address.starts_with("mailer-daemon@")
        || address.starts_with("postmaster@");
    let results =
        message.header_values("Authentication-Results").filter_map(HeaderValue::as_text).map(str::to_string).collect();
    let return_path = message.header_values("Return-Path").next().and_then(|value| match value {
        HeaderValue::Text(text) => Some(text.to_string()),
        HeaderValue::TextList(texts) => texts.first().map(ToString::to_string),
        HeaderValue::Address(address) => address.first().and_then(|one| one.address()).map(str::to_string),
        _ => None,
    });
    let return_path = return_path
        .map(|path| path.trim().trim_start_matches('<').trim_end_matches('>').trim().to_ascii_lowercase())
        .filter(|path| !path.is_empty());
    let whole: String = message.body_text(0).map(|text| text.replace("\r\n", "\n")).unwrap_or_default();
    let whole: String = whole.chars().take(MAX_TEXT).collect();
    let text = new_part(&whole);
    let attached = message.attachments().count();
    if attached > MAX_FILES {
        return Err(format!("it has {attached} attachments; at most {MAX_FILES} are taken from one mail"));
    }
    let mut files = vec![];
    for part in message.attachments() {
        let bytes = part.contents();
        if bytes.len() as u64 > max_file_bytes {
            return Err(format!(
                "its attachment {} is larger than the {} this gateway takes",
                part.attachment_name().unwrap_or("(unnamed)"),
                baaaht_proto::human_size(max_file_bytes)
            ));
        }
        let mime_type = part
            .content_type()
            .map(|kind| match kind.subtype() {
                Some(sub) => format!("{}/{sub}", kind.ctype()),
                None => kind.ctype().to_string(),
            })
            .unwrap_or_else(|| "application/octet-stream".into());
        let name = part
            .attachment_name()
            .map(one_line)
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| format!("attachment-{}", files.len() + 1));
        files.push(File { name, mime_type, bytes: bytes.to_vec(), voice: false });
    }
    let mut references_out = references.clone();
    references_out.push(id.clone());
    Ok(Incoming {
        id,
        answers,
        references: references_out,
        from: address,
        name,
        subject: one_line(message.subject().unwrap_or_default()),
        date: message.date().map(|date| date.to_rfc822()),
        text,
        whole,
        files,
        automatic,
        results,
        return_path,
        verified: false,
    })
}

/// `text` as one plain line: control characters (a line break a decoded word hid among them)
/// become spaces, runs of space one, at most 200 characters.
fn one_line(text: &str) -> String {
    let text: String = text.chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    text.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(200).collect()
}

/// What a mail says that is new: the quoted history of a reply (`> …` lines, and the
/// "On …, … wrote:" line before them) and the signature (after `-- `) left out.
pub fn new_part(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut kept: Vec<&str> = vec![];
    for (at, line) in lines.iter().enumerate() {
        if *line == "-- " || *line == "--" {
            break;
        }
        if line.trim_start().starts_with('>') {
            continue;
        }
        let quoted_next = lines[at + 1..]
            .iter()
            .find(|next| !next.trim().is_empty())
            .is_some_and(|next| next.trim_start().starts_with('>'));
        if quoted_next && line.trim_end().ends_with(':') {
            continue;
        }
        kept.push(line);
    }
    let text = kept.join("\n");
    text.trim().to_string()
}

/// The subject of a reply to `subject`.
pub fn reply_subject(subject: &str) -> String {
    let subject = subject.trim();
    if subject.is_empty() {
        "Re: your message".into()
    } else if subject.to_ascii_lowercase().starts_with("re:") {
        subject.to_string()
    } else {
        format!("Re: {subject}")
    }
}

/// The body of a reply: `answer`, then `asked` quoted under its heading (with `quoted`).
pub fn reply_body(answer: &str, asked: &Incoming, quoted: bool) -> String {
    if !quoted {
        return format!("{}\n", answer.trim_end());
    }
    let who = match &asked.name {
        Some(name) => format!("{name} <{}>", asked.from),
        None => asked.from.clone(),
    };
    let heading = match &asked.date {
        Some(date) => format!("On {date}, {who} wrote:"),
        None => format!("{who} wrote:"),
    };
    let mut quoted: Vec<String> = asked
        .whole
        .trim_end()
        .lines()
        .take(MAX_QUOTED_LINES)
        .map(|line| if line.is_empty() { ">".to_string() } else { format!("> {line}") })
        .collect();
    if asked.whole.trim_end().lines().count() > MAX_QUOTED_LINES {
        quoted.push("> […]".into());
    }
    format!("{}\n\n{heading}\n{}\n", answer.trim_end(), quoted.join("\n"))
}

/// A new Message-ID at `domain`.
pub fn new_id(domain: &str) -> String {
    let mut bytes = [0u8; 12];
    if getrandom::fill(&mut bytes).is_err() {
        // The clock is unique enough for an id when the system's randomness is not there.
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos();
        bytes.copy_from_slice(&nanos.to_le_bytes()[..12]);
    }
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("{token}@{domain}")
}

/// The gateway's own mailbox: `address`, shown as `name`.
fn sender(address: &str, name: &str) -> Result<lettre::message::Mailbox, String> {
    use lettre::message::Mailbox;
    format!("{name} <{address}>")
        .parse()
        .or_else(|_| address.parse().map(|address| Mailbox::new(None, address)))
        .map_err(|error| format!("the gateway's address `{address}`: {error}"))
}

/// `asked`'s reply from `address` (named `name`), `answer` its text and `files` attached, with
/// its own `id`; quoting `asked` with `quoted`.
pub fn reply(
    address: &str,
    name: &str,
    asked: &Incoming,
    answer: &str,
    files: &[File],
    id: &str,
    quoted: bool,
) -> Result<lettre::Message, String> {
    use lettre::message::Mailbox;
    let to_address = asked.from.parse().map_err(|error| format!("the sender's address `{}`: {error}", asked.from))?;
    let to = Mailbox::new(asked.name.clone(), to_address);
    let references: Vec<String> = asked.references.iter().map(|id| format!("<{id}>")).collect();
    let builder = lettre::Message::builder()
        .from(sender(address, name)?)
        .to(to)
        .subject(reply_subject(&asked.subject))
        .message_id(Some(format!("<{id}>")))
        .in_reply_to(format!("<{}>", asked.id))
        .references(references.join(" "));
    // RFC 3834: an answer made by a program, so other programs do not answer it back.
    written(builder, reply_body(answer, asked, quoted), files, "auto-replied")
}

/// A mail from `address` (named `name`) to `to` (named `to_name`) that answers none — what
/// comes between turns, a scheduled task's result — with its own `id`.
pub fn new_mail(
    address: &str,
    name: &str,
    (to, to_name): (&str, Option<String>),
    subject: &str,
    text: &str,
    files: &[File],
    id: &str,
) -> Result<lettre::Message, String> {
    use lettre::message::Mailbox;
    let to_address = to.parse().map_err(|error| format!("the address `{to}`: {error}"))?;
    let builder = lettre::Message::builder()
        .from(sender(address, name)?)
        .to(Mailbox::new(to_name, to_address))
        .subject(subject)
        .message_id(Some(format!("<{id}>")));
    // RFC 3834: made by a program (not an answer), so other programs do not answer it.
    written(builder, text.trim_end().to_string() + "\n", files, "auto-generated")
}

/// The mail `builder` starts, `text` its body and `files` attached, marked `Auto-Submitted: auto`.
fn written(
    builder: lettre::message::MessageBuilder,
    text: String,
    files: &[File],
    auto: &str,
) -> Result<lettre::Message, String> {
    use lettre::message::header;
    let text = lettre::message::SinglePart::plain(text);
    let written = if files.is_empty() {
        builder.singlepart(text)
    } else {
        let mut parts = lettre::message::MultiPart::mixed().singlepart(text);
        for file in files {
            let content_type = header::ContentType::parse(&file.mime_type)
                .unwrap_or_else(|_unknown| header::ContentType::parse("application/octet-stream").expect("a type"));
            let name = baaaht_proto::files::safe_name(&file.name);
            // Base64, so the file arrives as it was sent (a text file's line ends too).
            let body =
                lettre::message::Body::new_with_encoding(file.bytes.clone(), header::ContentTransferEncoding::Base64)
                    .map_err(|_unencodable| format!("{name} cannot be attached"))?;
            parts = parts.singlepart(lettre::message::Attachment::new(name).body(body, content_type));
        }
        builder.multipart(parts)
    };
    let mut mail = written.map_err(|error| format!("the mail cannot be written: {error}"))?;
    let header = header::HeaderName::new_from_ascii_str("Auto-Submitted");
    mail.headers_mut().insert_raw(header::HeaderValue::new(header, auto.into()));
    Ok(mail)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ASKED: &str = "Message-ID: <q1@family.test>\r\nIn-Reply-To: <a0@home.test>\r\nReferences: <r0@family.test> <a0@home.test>\r\nFrom: Alice Liddell <Alice@Family.test>\r\nTo: assistant@home.test\r\nSubject: Dinner\r\nDate: Thu, 26 Nov 2026 18:00:00 +0000\r\nContent-Type: text/plain\r\n\r\nWhat about fish?\r\n\r\nOn Wed, 25 Nov 2026, assistant wrote:\r\n> Pasta is good.\r\n> Or soup.\r\n\r\n-- \r\nAlice\r\n";

    #[test]
    fn a_reply_is_read_for_its_thread_and_its_new_words_only() {
        let mail = read(ASKED.as_bytes(), 7, 1024).expect("read");
        assert_eq!(mail.id, "q1@family.test");
        assert_eq!(mail.answers, ["a0@home.test", "r0@family.test"]);
        assert_eq!(mail.references, ["r0@family.test", "a0@home.test", "q1@family.test"]);
        assert_eq!((mail.from.as_str(), mail.name.as_deref()), ("alice@family.test", Some("Alice Liddell")));
        assert_eq!(mail.text, "What about fish?");
        assert!(!mail.automatic && mail.results.is_empty());
    }

    #[test]
    fn html_mail_becomes_text_and_automatic_or_forged_mail_is_marked() {
        let html = "Message-ID: <h@x>\r\nFrom: bob@family.test\r\nSubject: hi\r\nContent-Type: text/html\r\n\r\n<p>Hello <b>there</b></p><script>x()</script>";
        let mail = read(html.as_bytes(), 1, 1024).expect("html");
        assert!(mail.text.contains("Hello there") || mail.text.contains("Hello *there*"), "{}", mail.text);
        assert!(!mail.text.contains('<'), "{}", mail.text);
        let auto = "Message-ID: <v@x>\r\nFrom: bob@family.test\r\nAuto-Submitted: auto-replied\r\nSubject: Out of office\r\n\r\naway";
        assert!(read(auto.as_bytes(), 2, 1024).expect("auto").automatic);
        let stamped = "Message-ID: <f@x>\r\nAuthentication-Results: mail.home.test; dkim=none\r\nAuthentication-Results: x; dmarc=pass\r\nFrom: alice@family.test\r\nSubject: x\r\n\r\nsend me the codes";
        assert_eq!(
            read(stamped.as_bytes(), 3, 1024).expect("stamped").results,
            ["mail.home.test; dkim=none", "x; dmarc=pass"]
        );
        let no_id = "From: bob@family.test\r\nSubject: x\r\n\r\nhi";
        assert_eq!(read(no_id.as_bytes(), 9, 1024).expect("no id").id, "uid-9@baaaht.invalid");
        assert!(read(b"Subject: x\r\n\r\nhi", 4, 1024).expect_err("no sender").contains("From"));
    }

    #[test]
    fn a_mail_names_exactly_one_plain_sender_and_few_attachments() {
        let mail = |from: &str| format!("Message-ID: <m@x>\r\n{from}\r\nSubject: x\r\n\r\nhi");
        for (from, says) in [
            ("From: alice@family.test\r\nFrom: mallory@elsewhere.test", "2 From lines"),
            ("From: alice@family.test, mallory@elsewhere.test", "names 2 addresses"),
            ("From: alice@family.test.", "not a plain address"),
        ] {
            let refused = read(mail(from).as_bytes(), 1, 1024).expect_err(from);
            assert!(refused.contains(says), "{from}: {refused}");
        }
        let many: String = (0..11)
            .map(|n| format!("--b\r\nContent-Type: text/plain\r\nContent-Disposition: attachment; filename=\"f{n}.txt\"\r\n\r\nx\r\n"))
            .collect();
        let attached = format!(
            "Message-ID: <a@x>\r\nFrom: alice@family.test\r\nSubject: x\r\nContent-Type: multipart/mixed; boundary=b\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\nhi\r\n{many}--b--\r\n"
        );
        assert!(read(attached.as_bytes(), 1, 1024).expect_err("too many").contains("11 attachments; at most 10"));
    }

    #[test]
    fn a_name_with_a_line_break_in_it_is_answered_as_one_plain_line() {
        // "Al\nice: Bcc: x@evil" as a decoded word.
        let asked = "Message-ID: <n@x>\r\nFrom: =?utf-8?B?QWwKaWNlOiBCY2M6IHhAZXZpbA==?= <alice@family.test>\r\nSubject: =?utf-8?B?aGkKQmNjOiB4QGV2aWw=?=\r\n\r\nhi";
        let mail = read(asked.as_bytes(), 1, 1024).expect("read");
        assert_eq!(mail.name.as_deref(), Some("Al ice: Bcc: x@evil"));
        assert_eq!(mail.subject, "hi Bcc: x@evil");
        let reply = reply("assistant@home.test", "baaaht", &mail, "ok", &[], "r@home.test", true).expect("a reply");
        let text = String::from_utf8(reply.formatted()).expect("utf-8");
        assert!(!text.lines().any(|line| line.starts_with("Bcc:")), "{text}");
    }

    #[test]
    fn a_reply_quotes_what_it_answers_in_the_same_thread() {
        let mail = read(ASKED.as_bytes(), 7, 1024).expect("read");
        let reply =
            reply("assistant@home.test", "baaaht", &mail, "Fish is fine.", &[], "n1@home.test", true).expect("reply");
        let text = String::from_utf8(reply.formatted()).expect("utf-8");
        assert!(text.contains("Subject: Re: Dinner"), "{text}");
        assert!(text.contains("In-Reply-To: <q1@family.test>"), "{text}");
        assert!(text.contains("References: <r0@family.test> <a0@home.test> <q1@family.test>"), "{text}");
        assert!(text.contains("Message-ID: <n1@home.test>"), "{text}");
        assert!(text.contains("Auto-Submitted: auto-replied"), "{text}");
        assert!(text.contains("MIME-Version: 1.0"), "a MIME mail says so: {text}");
        assert!(
            text.contains("To: \"Alice Liddell\" <alice@family.test>")
                || text.contains("To: Alice Liddell <alice@family.test>"),
            "{text}"
        );
        let fresh = new_mail(
            "assistant@home.test",
            "baaaht",
            ("alice@family.test", Some("Alice".into())),
            "Daily digest",
            "Three things today.",
            &[],
            "n3@home.test",
        )
        .expect("a new mail");
        let fresh = String::from_utf8(fresh.formatted()).expect("utf-8");
        assert!(fresh.contains("Subject: Daily digest") && fresh.contains("Auto-Submitted: auto-generated"), "{fresh}");
        assert!(!fresh.contains("In-Reply-To"), "{fresh}");
        let body = reply_body("Fish is fine.", &mail, true);
        assert!(body.starts_with("Fish is fine.\n\nOn Thu, 26 Nov 2026 18:00:00 +0000, Alice Liddell <alice@family.test> wrote:\n> What about fish?\n"), "{body}");
        assert_eq!(reply_subject("RE: x"), "RE: x");
        assert_eq!(reply_subject(""), "Re: your message");
    }

    #[test]
    fn files_the_agents_sent_are_attached_to_the_reply_and_read_back_as_attachments() {
        let mail = read(ASKED.as_bytes(), 7, 1024).expect("read");
        let chart = File {
            name: "chart.csv".into(),
            mime_type: "text/csv".into(),
            bytes: b"a,b\n1,2\n".to_vec(),
            voice: false,
        };
        let reply = reply(
            "assistant@home.test",
            "baaaht",
            &mail,
            "Here it is.",
            std::slice::from_ref(&chart),
            "n2@home.test",
            true,
        )
        .expect("reply");
        let read_back = read(&reply.formatted(), 8, 1024).expect("read back");
        assert!(read_back.text.starts_with("Here it is."), "{}", read_back.text);
        assert_eq!(read_back.files, vec![chart]);
    }
}
