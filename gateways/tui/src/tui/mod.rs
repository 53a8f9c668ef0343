//! `baaaht tui` (issue 16), in progress: the state machine first; the terminal and the daemon
//! loop come next.

pub mod state;
