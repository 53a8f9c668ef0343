//! baaaht's web gateway (`baaaht-web`): an axum server, a gRPC client of the daemon with its
//! gateway token. People sign in with OpenID Connect ([`oidc`]); their browser sessions are
//! kept server-side ([`store`]); [`app`] is what the routes share and who calls them, [`routes`]
//! the site's routes, [`api`] the page's JSON API, [`assets`] the UI's files; [`events`] keeps what each user's browser follows; [`export`] writes a
//! conversation as a file; [`artifacts`] serves the HTML and SVG in answers; [`home`] has the first screen's suggestions
//! and the model picker's choices; [`tasks`] the settings' list of scheduled tasks.

pub mod api;
pub mod app;
pub mod artifacts;
pub mod assets;
pub mod events;
pub mod export;
pub mod files;
pub mod home;
pub mod oidc;
pub mod push;
pub mod routes;
pub mod search;
pub mod store;
pub mod tasks;
