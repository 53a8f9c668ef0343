//! What the daemon keeps for people: conversations (sessions and their logs), memory and the
//! search index over both, uploads and files sent, profiles, the event bus that carries what
//! happens to the channels, and the inbox kept while no channel is there. It imports sandbox/,
//! guard/ and base/.

pub mod events;
pub mod inbox;
pub mod memory;
pub mod profile;
pub mod recall;
pub mod sent;
pub mod sessions;
pub mod uploads;
