//! `baaaht tui`: the state machine, the view and the loop.

pub mod drawn;
pub mod export;
pub mod markdown;
pub mod run;
pub mod state;
pub mod theme;
pub mod view;
