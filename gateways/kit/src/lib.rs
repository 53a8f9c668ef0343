//! What every chat gateway of baaaht repeats, in one place (DESIGN.md §10.4): the daemon
//! called as the channel's user ([`daemon`]), the health the daemon asks after ([`health`]),
//! connections out through the daemon's egress ([`egress`]), redelivered updates dropped
//! ([`seen`]), state files written atomically ([`state`]), reconnects that wait longer each time ([`backoff`]), the options a supervised gateway takes
//! ([`cli`]), text made safe for a
//! channel ([`text`]), and a turn: the message sent, its answer streamed as edits of one
//! message within the channel's rate, a status line while agents work, approval requests
//! handed to the channel ([`turn`]); and what reaches a chat between its turns — a scheduled
//! task's result, a message sent later — through one subscription per context served
//! ([`follow`]), one context's stream followed, again after each loss ([`watch`]); what the daemon says of a turn, read once for every client ([`said`]); and every sentence a person reads of them ([`sentences`]); `/undo` and `/redo` from a chat ([`undo`]). A gateway supplies what its channel does differently
//! (a [`turn::Surface`]: how an answer is opened, shown and closed) and its own way in.

pub mod backoff;
pub mod cli;
pub mod daemon;
pub mod egress;
pub mod follow;
pub mod health;
pub mod said;
pub mod seen;
pub mod sentences;
pub mod state;
pub mod text;
pub mod turn;
pub mod undo;
pub mod watch;
