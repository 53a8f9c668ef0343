//! `baaaht tui` (issue 16), in progress: the state machine and the view first; the terminal
//! and the daemon loop come next.

pub mod state;
pub mod view;
