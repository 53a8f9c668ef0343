//! HTTPS to a provider: a local TLS server with a certificate the client trusts (through
//! SSL_CERT_FILE, as an operator with a private CA would) answers; one with a certificate
//! nobody vouches for is refused before any request is sent.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use baaaht_llm::model::{Block, Event, Message, Request, Role};
use baaaht_llm::provider::{self, Endpoint, Failure, Wire};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

const ANSWER: &str = "data: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"over TLS\"},\"finish_reason\":null}]}\n\ndata: {\"id\":\"c1\",\"model\":\"m\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n";

/// Serves one TLS connection with `name`'s certificate, answering with ANSWER; returns the
/// port and whether a request arrived.
async fn tls_server(name: &str) -> (u16, tokio::task::JoinHandle<bool>) {
    let certs = vec![CertificateDer::from_pem_file(fixture(&format!("{name}.pem"))).expect("certificate")];
    let key = PrivateKeyDer::from_pem_file(fixture(&format!("{name}.key"))).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let task = tokio::spawn(async move {
        let Ok((tcp, _)) = listener.accept().await else { return false };
        let Ok(mut tls) = acceptor.accept(tcp).await else { return false };
        let mut buffer = [0u8; 8192];
        let n = tls.read(&mut buffer).await.unwrap_or(0);
        let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";
        let _ = tls.write_all(format!("{head}{ANSWER}").as_bytes()).await;
        let _ = tls.shutdown().await;
        n > 0
    });
    (port, task)
}

fn endpoint(port: u16) -> Endpoint {
    Endpoint {
        name: "vllm".into(),
        wire: Wire::OpenAi,
        api_base: format!("https://localhost:{port}/v1"),
        api_key: Some("sk-test".into()),
        timeout: Duration::from_secs(10),
        max_output: None,
        cloud: Default::default(),
        signer: None,
        route: baaaht_llm::provider::Route::Direct,
    }
}

fn request() -> Request {
    Request {
        model: "m".into(),
        messages: vec![Message { role: Role::User, content: vec![Block::Text("Hi".into())] }],
        ..Request::default()
    }
}

#[tokio::test]
async fn https_with_a_trusted_certificate_answers_and_an_untrusted_one_is_refused() {
    // The only test in this binary: it decides which certificates the process trusts.
    std::env::set_var("SSL_CERT_FILE", fixture("trusted-ca.pem"));

    let (port, server) = tls_server("trusted").await;
    let mut events = vec![];
    provider::stream(&endpoint(port), &request(), &mut |event| events.push(event)).await.expect("answers over TLS");
    assert!(events.contains(&Event::TextDelta { index: 0, text: "over TLS".into() }), "{events:?}");
    assert!(server.await.expect("server"), "no request reached the server");

    let (port, server) = tls_server("untrusted").await;
    let failure = provider::stream(&endpoint(port), &request(), &mut |_| {}).await.expect_err("untrusted");
    assert!(matches!(failure, Failure::Tls { .. }), "{failure:?}");
    let message = failure.to_string();
    assert!(message.starts_with("vllm: TLS with localhost failed: invalid peer certificate"), "{message}");
    assert!(!failure.retryable(), "a certificate problem is not retried");
    assert!(!server.await.expect("server"), "a request was sent to an untrusted server");
}
