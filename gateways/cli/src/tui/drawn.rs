//! The conversation's finished blocks as `view` last drew them, kept in the app's state so a
//! frame draws only what was added since. `state` holds it; only `view` fills and reads it.

use ratatui::text::Line;

/// The finished blocks as last drawn: each block's lines and code blocks, valid while the
/// blocks are only added to and the width, theme and thinking toggle stay.
#[derive(Debug, Clone, Default)]
pub struct Drawn(pub(super) std::cell::RefCell<DrawnBlocks>);

#[derive(Debug, Clone, Default)]
pub(super) struct DrawnBlocks {
    /// The generation of the blocks, the width, the thinking toggle and the theme drawn for.
    pub(super) key: (u64, usize, bool, bool),
    pub(super) blocks: Vec<(Vec<Line<'static>>, usize)>,
}
