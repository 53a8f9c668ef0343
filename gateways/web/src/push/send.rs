//! Sending a notification to one device: encrypted for it ([`message::encrypt`]), signed with
//! the gateway's VAPID key, posted to its push service through the gateway's egress (the
//! daemon's tunnel in its container, which lets it reach the push services only), over HTTPS
//! verified against the system's authorities and the operator's `--ca-file`. A service's
//! answer decides what happens to the device ([`Delivery`]): gone (404, 410) removes it, too
//! large (413) sends a shorter one once, too many (429) or failing (5xx) tries once more after
//! its `Retry-After` when the message still lives then.

use std::time::Duration;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::devices::Device;
use super::message::{self, Delivery, Keys, Vapid};
use super::notify::Notification;

/// How long a push service has to answer.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);
/// The longest wait before a second try (a longer `Retry-After` drops the message).
const LONGEST_RETRY: u64 = 60;

type Https = Client<hyper_rustls::HttpsConnector<baaaht_gateway_kit::egress::Egress>, Full<Bytes>>;

/// What sends.
pub struct Sender {
    client: Https,
    vapid: Vapid,
    /// The contact the push services are given (`mailto:` or `https:`).
    subject: String,
}

impl std::fmt::Debug for Sender {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.debug_struct("Sender").field("vapid", &self.vapid).field("subject", &self.subject).finish()
    }
}

/// How a push went, for the log and the device list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    Delivered,
    /// The device is gone: remove it.
    Gone,
    /// Not delivered: why.
    Failed(String),
}

impl Sender {
    pub fn new(
        egress: baaaht_gateway_kit::egress::Egress,
        trust: &baaaht_gateway_kit::egress::Trust,
        vapid: Vapid,
        subject: String,
    ) -> Sender {
        let client = Client::builder(TokioExecutor::new()).build(trust.https(egress));
        Sender { client, vapid, subject }
    }

    /// The public key devices subscribe with.
    pub fn public_key(&self) -> String {
        self.vapid.public()
    }

    /// Sends `notification` to `device`, trying again as its service's answer says.
    pub async fn send(&self, device: &Device, notification: &Notification) -> Sent {
        let started = std::time::Instant::now();
        let mut sending = notification.clone();
        let mut shortened = false;
        let mut retried = false;
        loop {
            let delivery = match self.post(device, &sending).await {
                Ok(delivery) => delivery,
                Err(why) => return Sent::Failed(why),
            };
            match delivery {
                Delivery::Accepted => return Sent::Delivered,
                Delivery::Gone => return Sent::Gone,
                Delivery::TooLarge if !shortened => {
                    shortened = true;
                    sending = sending.shorter();
                }
                Delivery::Later(wait)
                    if !retried
                        && wait <= LONGEST_RETRY
                        && started.elapsed().as_secs() + wait < u64::from(sending.ttl) =>
                {
                    retried = true;
                    tokio::time::sleep(Duration::from_secs(wait)).await;
                }
                Delivery::TooLarge => return Sent::Failed("the push service found the message too large".into()),
                Delivery::Later(wait) => {
                    return Sent::Failed(format!("the push service asked to wait {wait} s; the message was dropped"))
                }
                Delivery::Refused(status) => {
                    return Sent::Failed(format!("the push service refused the message ({status})"))
                }
            }
        }
    }

    /// One POST of `notification` to `device`'s service: what its answer means.
    async fn post(&self, device: &Device, notification: &Notification) -> Result<Delivery, String> {
        // Keys no message can be encrypted for make a device nothing reaches: it goes.
        let Ok(keys) = Keys::decode(&device.p256dh, &device.auth) else { return Ok(Delivery::Gone) };
        let body = message::encrypt(&keys, &notification.payload()).map_err(|error| error.to_string())?;
        let authorization = self
            .vapid
            .authorization(&device.endpoint, &self.subject, crate::store::now())
            .map_err(|e| e.to_string())?;
        let mut request = http::Request::post(&device.endpoint)
            .header(http::header::AUTHORIZATION, authorization)
            .header(http::header::CONTENT_ENCODING, "aes128gcm")
            .header(http::header::CONTENT_TYPE, "application/octet-stream")
            .header("ttl", notification.ttl.to_string())
            .header("urgency", notification.urgency.as_str());
        if let Some(topic) = &notification.topic {
            request = request.header("topic", topic.as_str());
        }
        let request = request.body(Full::new(Bytes::from(body))).map_err(|error| format!("the request: {error}"))?;
        let answered = tokio::time::timeout(ANSWER_WITHIN, self.client.request(request)).await;
        let response = match answered {
            Ok(Ok(response)) => response,
            Ok(Err(error)) => {
                return Err(format!("cannot reach the push service: {}", baaaht_proto::error_chain(&error)))
            }
            Err(_) => return Err(format!("the push service did not answer within {} s", ANSWER_WITHIN.as_secs())),
        };
        let status = response.status().as_u16();
        let retry_after = response.headers().get(http::header::RETRY_AFTER).and_then(|value| value.to_str().ok());
        let delivery = Delivery::of(status, retry_after);
        // The answer's body is read (at most 4 KiB) so the connection can be used again.
        // silent-ok: what a push service says besides its status is not used.
        let _ = http_body_util::Limited::new(response.into_body(), 4096).collect().await;
        Ok(delivery)
    }
}
