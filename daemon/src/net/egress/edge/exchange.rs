//! One connection the edge reads request by request (plain HTTP, or TLS it opened for a host a
//! secret is bound to): each request's host checked, placeholders swapped for values in the
//! headers that take them, and the store's values blotted from what comes back.

use super::*;

/// One connection's requests through the edge.
pub(super) struct Exchange {
    pub(super) crossing: Crossing,
    /// Where the tunnel leads: every request in it must name this host and port.
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) plan: Plan,
    pub(super) tls: bool,
    /// The values read for this connection, by name.
    pub(super) values: Mutex<HashMap<String, Zeroizing<String>>>,
}

impl Exchange {
    /// Serves the command's requests on `near`, each sent on to `far` (or answered with why it
    /// cannot be); true when the connection ended cleanly (an answer cut short by the far end
    /// is not: its client then gets a reset).
    pub(super) async fn serve(self: Arc<Self>, near: impl Io, far: Result<impl Io, OnwardError>) -> bool {
        let mut driving = tokio::task::JoinSet::new();
        let sender = match far {
            Ok(far) => match hyper::client::conn::http1::handshake(TokioIo::new(far)).await {
                Ok((sender, driver)) => {
                    driving.spawn(driver);
                    Ok(tokio::sync::Mutex::new(sender))
                }
                Err(error) => Err(OnwardError::NotHttp { host: self.host.clone(), error }),
            },
            Err(why) => Err(why),
        };
        let sender = Arc::new(sender);
        let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
            let (exchange, sender) = (self.clone(), sender.clone());
            async move { Ok::<_, std::convert::Infallible>(exchange.forward(request, &sender).await) }
        });
        // A client may stop writing once its request is sent and wait for the answer.
        let near = TokioIo::new(Watched { inner: near, kept: vec![], ended: false });
        let connection = hyper::server::conn::http1::Builder::new().half_close(true).serve_connection(near, service);
        tokio::pin!(connection);
        // A command that hangs up mid-request ends its connection, nothing more.
        let served = tokio::select! {
            served = connection.as_mut() => served,
            // The far end closed its connection (an idle keep-alive timed out): this one closes
            // after the request in progress, so the command connects again.
            Some(_) = driving.join_next() => {
                connection.as_mut().graceful_shutdown();
                connection.await
            }
        };
        driving.abort_all();
        served.is_ok()
    }

    async fn forward(
        &self,
        request: hyper::Request<Incoming>,
        sender: &Result<tokio::sync::Mutex<hyper::client::conn::http1::SendRequest<Body>>, OnwardError>,
    ) -> hyper::Response<Body> {
        let (mut parts, body) = request.into_parts();
        let checked =
            self.aimed(&mut parts).and_then(|()| self.carries_no_value(&parts)).and_then(|()| self.swap(&mut parts));
        if let Err(why) = checked {
            return answer(hyper::StatusCode::FORBIDDEN, &why.to_string());
        }
        let known = self.crossing.values.as_ref().map(|shield| shield.values());
        if known.is_some() {
            // An answer the edge reads must be readable: not compressed, in its content or in
            // its transfer (`TE: gzip` would have it sent compressed under `chunked`).
            parts.headers.insert(http::header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
            parts.headers.remove(http::header::TE);
        }
        let body = match &known {
            Some(known) => Scrubbed::new(body, known.clone(), self.audited("request_body")).boxed(),
            None => body.boxed(),
        };
        let sender = match sender {
            Ok(sender) => sender,
            Err(why) => return answer(hyper::StatusCode::BAD_GATEWAY, &why.to_string()),
        };
        let mut sender = sender.lock().await;
        if sender.ready().await.is_err() {
            return answer(hyper::StatusCode::BAD_GATEWAY, &format!("{} closed the connection", self.host));
        }
        let response = match sender.send_request(hyper::Request::from_parts(parts, body)).await {
            Ok(response) => response,
            Err(error) => {
                return answer(hyper::StatusCode::BAD_GATEWAY, &format!("{} did not answer: {error}", self.host))
            }
        };
        let Some(known) = known else { return response.map(BodyExt::boxed) };
        let (mut parts, body) = response.into_parts();
        let coded = |name: http::header::HeaderName, plain: &[u8]| {
            parts.headers.get_all(name).iter().any(|value| !value.as_bytes().trim_ascii().eq_ignore_ascii_case(plain))
        };
        if coded(http::header::CONTENT_ENCODING, b"identity") || coded(http::header::TRANSFER_ENCODING, b"chunked") {
            let why = format!(
                "{} answered compressed though an uncompressed answer was asked for; the edge reads every answer for \
                 the values of secrets, and cannot read this one",
                self.host
            );
            self.crossing.refuse((&self.host, self.port), &why);
            return answer(hyper::StatusCode::BAD_GATEWAY, &why);
        }
        // The status line's words are the server's to choose: the command gets the standard ones.
        parts.extensions.remove::<hyper::ext::ReasonPhrase>();
        let found = blot_headers(&known, &mut parts.headers);
        if !found.is_empty() {
            self.audited("response_headers")(&found);
        }
        hyper::Response::from_parts(parts, Scrubbed::new(body, known, self.audited("response_body")).boxed())
    }

    /// What records the names of secrets blotted in `place` of this connection.
    fn audited(&self, place: &'static str) -> Report {
        let (audit, record) = (self.crossing.audit.clone(), self.crossing.record.clone());
        let (host, port) = (self.host.clone(), self.port);
        Arc::new(move |names: &[String]| {
            let record =
                record.clone().at_now().detail("host", host.as_str()).detail("port", port).detail("place", place);
            audit.record(Record { outcome: "blotted".into(), ..record }.detail("found", names.to_vec()));
            tracing::warn!(%host, port, place, ?names, "the values of secrets were blotted at the edge");
        })
    }

    /// Checks that the request names the tunnel's own host and port (in exactly one `Host`
    /// header and, in absolute form, its URL), so that nothing sent through a tunnel to a host
    /// is meant for another; then writes its URL in origin form. A tunnel inside the tunnel
    /// (CONNECT) and a change of protocol (`Upgrade`) are refused: they would carry what the
    /// edge cannot read.
    fn aimed(&self, parts: &mut http::request::Parts) -> Result<(), EdgeRefusal> {
        let default = if self.tls { 443 } else { 80 };
        let same =
            |host: &str, port: Option<u16>| plain(host) == plain(&self.host) && port.unwrap_or(default) == self.port;
        let wrong = || EdgeRefusal::NotAimed { host: self.host.clone(), port: self.port };
        if parts.method == http::Method::CONNECT {
            return Err(EdgeRefusal::Connect { host: self.host.clone() });
        }
        if parts.headers.contains_key(http::header::UPGRADE) {
            return Err(EdgeRefusal::Upgrade { host: self.host.clone() });
        }
        let mut named = parts.headers.get_all(http::header::HOST).iter();
        let (Some(first), None) = (named.next(), named.next()) else { return Err(wrong()) };
        let named = first.to_str().ok().filter(|value| !value.contains('@'));
        let named = named.and_then(|value| value.parse::<http::uri::Authority>().ok());
        let aimed = named.is_some_and(|named| same(named.host(), named.port_u16()))
            && parts.uri.authority().is_none_or(|authority| {
                !authority.as_str().contains('@') && same(authority.host(), authority.port_u16())
            });
        if !aimed {
            return Err(wrong());
        }
        let path = parts.uri.path_and_query().map_or("/", |path| path.as_str()).to_string();
        parts.uri = path.parse().map_err(|error| EdgeRefusal::Path { error })?;
        Ok(())
    }

    /// Refuses a request whose URL or headers carry a value of the secrets store (in any form
    /// it travels in): only placeholders go out, and the edge puts values in.
    fn carries_no_value(&self, parts: &http::request::Parts) -> Result<(), EdgeRefusal> {
        let Some(shield) = &self.crossing.values else { return Ok(()) };
        let known = shield.values();
        let carried = known.first_in(parts.uri.to_string().as_bytes()).map(str::to_string).or_else(|| {
            let mut headers = parts.headers.iter();
            headers.find_map(|(name, value)| {
                known
                    .first_in(name.as_str().as_bytes())
                    .or_else(|| known.first_in(value.as_bytes()))
                    .map(str::to_string)
            })
        });
        match carried {
            Some(name) => {
                let why = EdgeRefusal::Value { host: self.host.clone(), name: name.clone() };
                Err(self.refuse(&name, why))
            }
            None => Ok(()),
        }
    }

    /// Puts the bound secrets' values in place of their placeholders in the headers APIs take
    /// tokens in ([`CREDENTIAL_HEADERS`], inside `Authorization: Basic` too); why not, when a
    /// placeholder goes where its secret may not (another host, plain http, the URL, another
    /// header, a TRACE).
    fn swap(&self, parts: &mut http::request::Parts) -> Result<(), EdgeRefusal> {
        let anywhere = |text: &[u8]| {
            text.windows(credentials::PREFIX.len()).any(|window| window == credentials::PREFIX.as_bytes())
        };
        if anywhere(parts.uri.to_string().as_bytes()) {
            return Err(self.refused(&parts.uri.to_string(), Misplaced::Url));
        }
        let method = parts.method.clone();
        for (name, value) in parts.headers.iter_mut() {
            let raw = value.as_bytes();
            let (basic, text) = match raw.strip_prefix(b"Basic ").or_else(|| raw.strip_prefix(b"basic ")) {
                Some(encoded) => match base64::engine::general_purpose::STANDARD.decode(encoded.trim_ascii()) {
                    Ok(decoded) => (true, decoded),
                    Err(_) => (false, raw.to_vec()),
                },
                None => (false, raw.to_vec()),
            };
            if !anywhere(&text) {
                continue;
            }
            // Any byte that is not text hides nothing: the placeholder is refused or swapped
            // whole, and a header that is not text is not one it may be swapped in.
            let Ok(text) = String::from_utf8(text) else {
                let place = Misplaced::NotText { header: name.to_string() };
                return Err(self.refused(&String::from_utf8_lossy(raw), place));
            };
            if !CREDENTIAL_HEADERS.contains(&name.as_str()) {
                return Err(self.refused(&text, Misplaced::Header { header: name.to_string() }));
            }
            if method == http::Method::TRACE {
                return Err(self.refused(&text, Misplaced::Trace));
            }
            let Some(swapped) = self.swapped(&text)? else { continue };
            let swapped = Zeroizing::new(if basic {
                format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(swapped.as_bytes()))
            } else {
                swapped.to_string()
            });
            let mut header =
                http::HeaderValue::from_str(&swapped).map_err(|_holds_the_value| EdgeRefusal::NotAHeader)?;
            header.set_sensitive(true);
            *value = header;
        }
        Ok(())
    }

    /// Refuses (and audits) the placeholder found in `text`, which is on its way to `place`.
    fn refused(&self, text: &str, place: Misplaced) -> EdgeRefusal {
        let name = self.plan.made.iter().find(|(placeholder, _)| text.contains(placeholder.as_str()));
        let name = name.map_or("a credential", |(_, name)| name.as_str());
        self.refuse(name, EdgeRefusal::Misplaced { name: name.to_string(), place })
    }

    /// Audits and logs refusing `name`'s placeholder or value; the refusal, for the command.
    fn refuse(&self, name: &str, why: EdgeRefusal) -> EdgeRefusal {
        let crossing = &self.crossing;
        let record = crossing.record.clone().at_now().detail("host", self.host.as_str()).detail("credential", name);
        let said = why.to_string();
        crossing.audit.record(Record { outcome: "refused".into(), ..record }.detail("reason", said.as_str()));
        tracing::warn!(host = %self.host, credential = name, "{said}");
        why
    }

    /// `text` with each placeholder in it replaced by its value (none: no placeholder in it),
    /// or why a placeholder may not go here.
    fn swapped(&self, text: &str) -> Result<Option<Zeroizing<String>>, EdgeRefusal> {
        if !text.contains(credentials::PREFIX) {
            return Ok(None);
        }
        let mut out = Zeroizing::new(text.to_string());
        let mut found = false;
        for (placeholder, name) in &self.plan.made {
            if !out.contains(placeholder.as_str()) {
                continue;
            }
            found = true;
            let value = self.value(name)?;
            *out = out.replace(placeholder.as_str(), &value);
        }
        if !found {
            return Err(self.refused(text, Misplaced::OtherSession));
        }
        Ok(Some(out))
    }

    /// The value of the secret `name` for this connection's host, or why it is not sent there.
    fn value(&self, name: &str) -> Result<Zeroizing<String>, EdgeRefusal> {
        let refuse = |why: EdgeRefusal| self.refuse(name, why);
        let Some(binding) = self.plan.bound.iter().find(|binding| binding.name == name) else {
            return Err(refuse(EdgeRefusal::Unbound { name: name.to_string(), host: self.host.clone() }));
        };
        if !self.tls {
            return Err(refuse(EdgeRefusal::PlainHttp { name: name.to_string(), host: self.host.clone() }));
        }
        let Some(swap) = &self.crossing.swap else {
            return Err(refuse(EdgeRefusal::NotSwapped { name: name.to_string() }));
        };
        if let Some(value) = self.values.lock().unwrap_or_else(PoisonError::into_inner).get(name) {
            return Ok(value.clone());
        }
        let asker = crate::guard::secrets::Asker {
            caller: &swap.caller,
            correlation_id: "",
            consumer: ("egress_host", self.host.as_str()),
        };
        let unreadable = |why: String| EdgeRefusal::Unreadable { name: name.to_string(), host: self.host.clone(), why };
        let value = swap
            .edge
            .secrets
            .resolve(asker, binding.referrer, &format!("${{{name}}}"))
            .map_err(|why| refuse(unreadable(why.to_string())))?;
        self.values.lock().unwrap_or_else(PoisonError::into_inner).insert(name.to_string(), value.clone());
        Ok(value)
    }
}

/// A body with the store's values blotted as it streams ([`Scrubbing`]), the names found
/// reported when it ends.
struct Scrubbed {
    inner: Incoming,
    scrubbing: Scrubbing,
    /// Trailers waiting behind the bytes kept back.
    trailers: Option<Frame<Bytes>>,
    done: bool,
    report: Report,
}

impl Scrubbed {
    fn new(inner: Incoming, known: Arc<Known>, report: Report) -> Scrubbed {
        Scrubbed { inner, scrubbing: Scrubbing::new(known), trailers: None, done: false, report }
    }

    /// The end: what was kept back, and the names found, reported once.
    fn end(&mut self) -> Option<Bytes> {
        self.done = true;
        let rest = self.scrubbing.finish();
        if !self.scrubbing.found.is_empty() {
            (self.report)(&self.scrubbing.found);
        }
        (!rest.is_empty()).then(|| Bytes::from(rest))
    }
}

impl hyper::body::Body for Scrubbed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        loop {
            if let Some(trailers) = self.trailers.take() {
                return Poll::Ready(Some(Ok(trailers)));
            }
            if self.done {
                return Poll::Ready(None);
            }
            let polled = std::task::ready!(Pin::new(&mut self.inner).poll_frame(cx));
            match polled {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let passed = self.scrubbing.pass(&data);
                        if !passed.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(passed)))));
                        }
                    }
                    Err(trailers) => {
                        // Trailers are headers at the end: their values are read as the head's.
                        if let Ok(mut headers) = trailers.into_trailers() {
                            let found = blot_headers(self.scrubbing.known(), &mut headers);
                            self.scrubbing.found.extend(found);
                            self.trailers = Some(Frame::trailers(headers));
                        }
                        if let Some(rest) = self.end() {
                            return Poll::Ready(Some(Ok(Frame::data(rest))));
                        }
                    }
                },
                Some(Err(error)) => return Poll::Ready(Some(Err(error))),
                None => {
                    if let Some(rest) = self.end() {
                        return Poll::Ready(Some(Ok(Frame::data(rest))));
                    }
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.done && self.trailers.is_none()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        // Blotting keeps the length.
        self.inner.size_hint()
    }
}

/// `headers` with every known value in their values blotted, and the names found; a header
/// whose name carries one is dropped.
fn blot_headers(known: &Known, headers: &mut http::HeaderMap) -> Vec<String> {
    let mut found = vec![];
    let named: Vec<(http::header::HeaderName, String)> = headers
        .keys()
        .filter_map(|name| known.first_in(name.as_str().as_bytes()).map(|secret| (name.clone(), secret.to_string())))
        .collect();
    for (name, secret) in named {
        headers.remove(&name);
        found.push(secret);
    }
    for value in headers.values_mut() {
        let mut bytes = value.as_bytes().to_vec();
        let names = known.blot(&mut bytes);
        if !names.is_empty() {
            found.extend(names);
            if let Ok(blotted) = http::HeaderValue::from_bytes(&bytes) {
                *value = blotted;
            }
        }
    }
    found
}

/// An answer of the edge itself: `status` and a sentence.
fn answer(status: hyper::StatusCode, why: &str) -> hyper::Response<Body> {
    let body = Full::new(Bytes::from(format!("baaaht: {why}\n"))).map_err(|never| match never {}).boxed();
    let mut response = hyper::Response::new(body);
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static("text/plain; charset=utf-8"));
    response.headers_mut().insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}
