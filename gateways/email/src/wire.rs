//! The connections to the mail servers, made through the kit's egress (the daemon's tunnel in
//! a container) and made private before a password is sent: IMAP for reading the mailbox, SMTP
//! for sending answers.

use std::pin::Pin;
use std::task::{Context, Poll};

use baaaht_gateway_kit::egress::{Egress, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::server::{Server, Tls, Trust};

/// A private IMAP connection's stream.
pub type ImapStream = Wire<tokio_rustls::client::TlsStream<Stream>>;
/// A signed-in IMAP session.
pub type Session = async_imap::Session<ImapStream>;

/// A stream to a mail server, as the IMAP and SMTP clients take it.
#[derive(Debug)]
pub struct Wire<S>(pub S);

impl<S: AsyncRead + Unpin> AsyncRead for Wire<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Wire<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S> lettre::transport::smtp::client::AsyncTokioStream for Wire<S>
where
    S: AsyncRead + AsyncWrite + Send + Sync + Unpin + std::fmt::Debug,
{
    fn peer_addr(&self) -> std::io::Result<std::net::SocketAddr> {
        // Through the daemon's tunnel there is no peer address of our own to give.
        Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "a tunnelled connection"))
    }
}

/// How long connecting and signing in may take.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

async fn dial(egress: &Egress, server: &Server) -> Result<Stream, String> {
    let dialled = tokio::time::timeout(CONNECT_TIMEOUT, egress.dial(&server.host, server.port)).await;
    match dialled {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(error)) => Err(format!("cannot reach {}:{}: {error}", server.host, server.port)),
        Err(_) => Err(format!("{}:{} did not answer in {} s", server.host, server.port, CONNECT_TIMEOUT.as_secs())),
    }
}

/// Signs in to the IMAP server as `login` and selects `mailbox`.
pub async fn imap(
    egress: &Egress,
    trust: &Trust,
    server: &Server,
    login: &str,
    password: &str,
    mailbox: &str,
) -> Result<Session, String> {
    let signed_in = tokio::time::timeout(CONNECT_TIMEOUT, async {
        let stream = dial(egress, server).await?;
        let said = |error: async_imap::error::Error| format!("IMAP {}:{}: {error}", server.host, server.port);
        let private = match server.tls {
            Tls::Implicit => crate::server::wrap(trust, stream, server).await?,
            Tls::StartTls => {
                let mut plain = async_imap::Client::new(Wire(stream));
                plain.read_response().await.map_err(|error| said(error.into()))?;
                plain.run_command_and_check_ok("STARTTLS", None).await.map_err(|error| {
                    format!(
                        "IMAP {}:{} refused STARTTLS ({error}); the gateway sends no password in plain text",
                        server.host, server.port
                    )
                })?;
                crate::server::wrap(trust, plain.into_inner().0, server).await?
            }
        };
        let mut client = async_imap::Client::new(Wire(private));
        if server.tls == Tls::Implicit {
            client.read_response().await.map_err(|error| said(error.into()))?;
        }
        let mut session = client.login(login, password).await.map_err(|(error, _)| {
            format!("IMAP {}:{} refused the sign-in of {login}: {error}", server.host, server.port)
        })?;
        session.select(mailbox).await.map_err(|error| format!("IMAP: cannot open the mailbox {mailbox}: {error}"))?;
        Ok::<_, String>(session)
    })
    .await;
    signed_in.map_err(|_elapsed| {
        format!("IMAP {}:{}: no sign-in within {} s", server.host, server.port, CONNECT_TIMEOUT.as_secs())
    })?
}

/// How often a mail the SMTP server turned away for now (a 4xx answer: "try again later") is
/// offered again, and the first pause (doubled each time): about half a minute in all.
const SEND_RETRIES: u32 = 5;
const FIRST_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

/// Sends `message` through the SMTP server, signed in as `login`; a mail the server turns away
/// for now (4xx) is offered again after a pause, as any mail client does.
pub async fn send(
    egress: &Egress,
    trust: &Trust,
    server: &Server,
    login: &str,
    password: &str,
    message: &lettre::Message,
) -> Result<(), String> {
    let mut pause = FIRST_RETRY;
    for _ in 0..SEND_RETRIES {
        match send_once(egress, trust, server, login, password, message).await {
            Err(Failure { text, transient: true }) => {
                tracing::info!(error = %text, pause_ms = pause.as_millis() as u64, "the SMTP server said to try again later; the mail is offered again");
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
            done => return done.map_err(|failure| failure.text),
        }
    }
    send_once(egress, trust, server, login, password, message).await.map_err(|failure| failure.text)
}

/// Why a mail was not sent, and whether the server said to try again later.
struct Failure {
    text: String,
    transient: bool,
}

impl From<String> for Failure {
    fn from(text: String) -> Failure {
        Failure { text, transient: false }
    }
}

async fn send_once(
    egress: &Egress,
    trust: &Trust,
    server: &Server,
    login: &str,
    password: &str,
    message: &lettre::Message,
) -> Result<(), Failure> {
    use lettre::transport::smtp::authentication::{Credentials, Mechanism};
    use lettre::transport::smtp::client::AsyncSmtpConnection;
    use lettre::transport::smtp::extension::ClientId;
    let said = |error: lettre::transport::smtp::Error| Failure {
        transient: error.is_transient(),
        text: format!("SMTP {}:{}: {error}", server.host, server.port),
    };
    let hello = ClientId::Domain(login.rsplit_once('@').map(|(_, domain)| domain).unwrap_or("localhost").to_string());
    let sent = tokio::time::timeout(CONNECT_TIMEOUT * 2, async {
        let stream = dial(egress, server).await?;
        let mut connection = match server.tls {
            Tls::Implicit => {
                let private = crate::server::wrap(trust, stream, server).await?;
                AsyncSmtpConnection::connect_with_transport(Box::new(Wire(private)), &hello).await.map_err(said)?
            }
            Tls::StartTls => {
                let mut connection =
                    AsyncSmtpConnection::connect_with_transport(Box::new(Wire(stream)), &hello).await.map_err(said)?;
                if !connection.can_starttls() {
                    return Err(Failure::from(format!(
                        "SMTP {}:{} offers no STARTTLS; the gateway sends no password in plain text",
                        server.host, server.port
                    )));
                }
                connection.starttls(crate::server::smtp(trust, server)?, &hello).await.map_err(said)?;
                connection
            }
        };
        let credentials = Credentials::new(login.to_string(), password.to_string());
        connection.auth(&[Mechanism::Plain, Mechanism::Login], &credentials).await.map_err(said)?;
        connection.send(message.envelope(), &message.formatted()).await.map_err(said)?;
        // silent-ok: the mail is taken; a QUIT the server does not answer changes nothing.
        let _ = connection.quit().await;
        Ok::<_, Failure>(())
    })
    .await;
    sent.map_err(|_elapsed| {
        Failure::from(format!(
            "SMTP {}:{}: the mail was not taken within {} s",
            server.host,
            server.port,
            CONNECT_TIMEOUT.as_secs() * 2
        ))
    })?
}
