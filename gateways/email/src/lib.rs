//! baaaht's email gateway (DESIGN.md §10.4): a mailbox read by IMAP IDLE ([`wire`]), each
//! mail from an allowed sender ([`allow`]) whose sending is authenticated ([`auth`]: DKIM, or
//! the household mail server's verdict) read for its thread, words and files ([`mail`]) and
//! answered in the conversation of its thread ([`threads`], [`gateway`]) by a reply sent over
//! SMTP, both connections private and verified ([`server`]).

pub mod allow;
pub mod auth;
pub mod gateway;
pub mod mail;
pub mod server;
pub mod threads;
pub mod wire;
