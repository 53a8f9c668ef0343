//! baaaht's web gateway (`baaaht-web`): an axum server, a gRPC client of the daemon with its
//! gateway token. People sign in with OpenID Connect ([`oidc`]); their browser sessions are
//! kept server-side ([`store`]); [`app`] has the routes; [`events`] keeps what each user's
//! browser follows.

pub mod app;
pub mod events;
pub mod oidc;
pub mod store;
