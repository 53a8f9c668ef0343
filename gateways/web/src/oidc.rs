//! Sign-in with OpenID Connect (`openidconnect`): the issuer's discovery, the authorization
//! code flow with PKCE (S256), `state` (one use, ten minutes) and `nonce` checked, the ID token
//! validated (signature against the issuer's keys, issuer, audience, expiry, nonce), and
//! RP-initiated logout where the provider offers it. The issuer and client come from the
//! daemon, which verifies every ID token again on every call.

use std::future::Future;
use std::pin::Pin;

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreGenderClaim, CoreJweContentEncryptionAlgorithm, CoreJwsSigningAlgorithm,
};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl,
    LogoutRequest, Nonce, PkceCodeChallenge, PkceCodeVerifier, PostLogoutRedirectUrl, ProviderMetadataWithLogout,
    RedirectUrl, Scope, TokenResponse as _,
};

/// The most an answer of the issuer may be.
const MAX_ANSWER: usize = 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    #[error("the issuer {issuer}: {message}")]
    Discovery { issuer: String, message: String },
    #[error("{0}")]
    Config(String),
    #[error("the sign-in failed: {0}")]
    SignIn(String),
}

/// An HTTP error for openidconnect's client.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

type Https = Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The HTTP client openidconnect calls: no redirects followed, answers at most 1 MiB.
#[derive(Clone)]
pub struct Http(Https);

impl Http {
    pub fn new() -> Result<Http, OidcError> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_native_roots()
            .map_err(|error| OidcError::Config(format!("cannot load the system's CA certificates: {error}")))?
            .https_or_http()
            .enable_http1()
            .build();
        Ok(Http(Client::builder(TokioExecutor::new()).build(https)))
    }
}

impl<'c> openidconnect::AsyncHttpClient<'c> for Http {
    type Error = HttpError;
    type Future = Pin<Box<dyn Future<Output = Result<openidconnect::HttpResponse, HttpError>> + Send + Sync + 'c>>;

    fn call(&'c self, request: openidconnect::HttpRequest) -> Self::Future {
        Box::pin(async move {
            let (parts, body) = request.into_parts();
            let request = http::Request::from_parts(parts, Full::new(Bytes::from(body)));
            let response = self.0.request(request).await.map_err(|error| HttpError(error.to_string()))?;
            let (parts, body) = response.into_parts();
            let limited = http_body_util::Limited::new(body, MAX_ANSWER);
            let bytes = limited.collect().await.map_err(|error| HttpError(error.to_string()))?.to_bytes();
            Ok(http::Response::from_parts(parts, bytes.to_vec()))
        })
    }
}

type Configured =
    CoreClient<EndpointSet, EndpointNotSet, EndpointNotSet, EndpointNotSet, EndpointMaybeSet, EndpointMaybeSet>;

/// The relying party.
pub struct Oidc {
    client: Configured,
    http: Http,
    issuer: String,
    end_session: Option<String>,
}

/// Where to send the browser to sign in, and what to keep until it comes back.
pub struct Start {
    pub url: String,
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

/// Who signed in.
#[derive(Debug, Clone)]
pub struct Identity {
    pub subject: String,
    pub name: String,
    pub email: String,
    pub id_token: String,
    /// Seconds since the epoch.
    pub expires: u64,
}

impl Oidc {
    /// Reads `issuer`'s discovery document and makes the client `client_id` (with its secret
    /// for a confidential client) answering at `redirect`.
    pub async fn discover(
        issuer: &str,
        client_id: &str,
        client_secret: Option<String>,
        redirect: &str,
    ) -> Result<Oidc, OidcError> {
        let http = Http::new()?;
        let issuer_url = IssuerUrl::new(issuer.to_string())
            .map_err(|error| OidcError::Config(format!("issuer `{issuer}`: {error}")))?;
        let metadata = ProviderMetadataWithLogout::discover_async(issuer_url, &http)
            .await
            .map_err(|error| OidcError::Discovery { issuer: issuer.into(), message: error.to_string() })?;
        let end_session = metadata.additional_metadata().end_session_endpoint.as_ref().map(|url| url.to_string());
        let redirect = RedirectUrl::new(redirect.to_string())
            .map_err(|error| OidcError::Config(format!("--public-url gives the callback `{redirect}`: {error}")))?;
        let client = CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(client_id.into()),
            client_secret.map(ClientSecret::new),
        )
        .set_redirect_uri(redirect);
        Ok(Oidc { client, http, issuer: issuer.to_string(), end_session })
    }

    /// A sign-in: the provider's URL with a fresh state, nonce and PKCE challenge.
    pub fn start(&self, state: String) -> Start {
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let nonce = Nonce::new_random();
        let kept = nonce.clone();
        let (url, state, _) = self
            .client
            .authorize_url(CoreAuthenticationFlow::AuthorizationCode, move || CsrfToken::new(state), move || kept)
            .add_scope(Scope::new("email".into()))
            .add_scope(Scope::new("profile".into()))
            .set_pkce_challenge(challenge)
            .url();
        Start {
            url: url.to_string(),
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
        }
    }

    /// Finishes a sign-in: the code exchanged (with the PKCE verifier), the ID token checked
    /// against the nonce, who signed in. `iss`, when the provider sends it back, must be ours.
    pub async fn finish(
        &self,
        code: &str,
        iss: Option<&str>,
        nonce: &str,
        pkce_verifier: String,
    ) -> Result<Identity, OidcError> {
        if iss.is_some_and(|iss| iss.trim_end_matches('/') != self.issuer.trim_end_matches('/')) {
            return Err(OidcError::SignIn("the answer came from another issuer".into()));
        }
        let request = self
            .client
            .exchange_code(AuthorizationCode::new(code.into()))
            .map_err(|error| OidcError::Config(error.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier));
        let tokens = request.request_async(&self.http).await.map_err(|error| OidcError::SignIn(error.to_string()))?;
        let id_token = tokens.id_token().ok_or_else(|| OidcError::SignIn("the provider sent no ID token".into()))?;
        let claims = id_token
            .claims(&self.client.id_token_verifier(), &Nonce::new(nonce.into()))
            .map_err(|error| OidcError::SignIn(format!("the ID token is not valid: {error}")))?;
        let name = claims
            .name()
            .and_then(|name| name.get(None))
            .map(|name| name.to_string())
            .or_else(|| claims.preferred_username().map(|name| name.to_string()))
            .unwrap_or_default();
        Ok(Identity {
            subject: claims.subject().to_string(),
            name,
            email: claims.email().map(|email| email.to_string()).unwrap_or_default(),
            id_token: id_token.to_string(),
            expires: claims.expiration().timestamp().max(0) as u64,
        })
    }

    /// Where to send the browser to sign out at the provider too, when it offers that.
    pub fn logout_url(&self, id_token: &str, back: &str) -> Option<String> {
        let end_session = self.end_session.as_ref()?;
        let url = openidconnect::EndSessionUrl::new(end_session.clone()).ok()?;
        let hint: openidconnect::IdToken<
            openidconnect::EmptyAdditionalClaims,
            CoreGenderClaim,
            CoreJweContentEncryptionAlgorithm,
            CoreJwsSigningAlgorithm,
        > = id_token.parse().ok()?;
        let request = LogoutRequest::from(url).set_id_token_hint(&hint);
        let request = match PostLogoutRedirectUrl::new(back.to_string()) {
            Ok(back) => request.set_post_logout_redirect_uri(back),
            Err(_) => request,
        };
        Some(request.http_get_url().to_string())
    }
}
