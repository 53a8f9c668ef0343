//! Notifications on a person's devices (Web Push): the messages ([`message`]).

pub mod message;
