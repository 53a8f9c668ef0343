//! `baaaht tui` (issue 16), in progress: the state machine, the view and the loop.

pub mod run;
pub mod state;
pub mod view;
