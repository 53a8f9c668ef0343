//! Effect classes (DESIGN.md §10.3): every tool reads (what its server holds, sending nothing
//! anywhere), or acts (writes outside the session, sends, pays, shares, deletes, or takes what it
//! is given to a place of its choosing, as a fetch of any address does). An MCP tool's class
//! comes from `mcp.yaml` (`effects:` of its server: the tool named under `reads` or `acts`, else
//! the server's `default`), else, for a server marked `trusted`, from the tool's own MCP
//! annotations (`readOnlyHint: true` reads; `destructiveHint` and `openWorldHint` say more of
//! how it acts), else it acts. An untrusted server's hints are not taken (the MCP specification
//! says as much: a server that lies about them is the one to fear); they only word the question.
//! A turn that read content from outside has an acting tool asked of a person first
//! (`work::tools::acting`), and withheld where nobody can be asked.

use serde::{Deserialize, Serialize};

/// What a tool does to the world.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Effect {
    Reads,
    Acts,
}

impl Effect {
    pub fn as_str(self) -> &'static str {
        match self {
            Effect::Reads => "reads",
            Effect::Acts => "acts",
        }
    }
}

/// `effects:` of a server in `mcp.yaml`: the class of its tools, over what they say of
/// themselves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Effects {
    /// The class of every tool not named below.
    #[serde(default)]
    pub default: Option<Effect>,
    /// Tools that only read.
    #[serde(default)]
    pub reads: Vec<String>,
    /// Tools that act.
    #[serde(default)]
    pub acts: Vec<String>,
}

impl Effects {
    /// A tool named twice, which `mcp.yaml` refuses.
    pub fn named_twice(&self) -> Option<&str> {
        self.reads.iter().find(|tool| self.acts.contains(tool)).map(String::as_str)
    }

    /// Every tool named, for the name check.
    pub fn named(&self) -> impl Iterator<Item = &String> {
        self.reads.iter().chain(&self.acts)
    }
}

/// A tool's class and what it says of how it acts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    pub effect: Effect,
    /// It may delete or overwrite (MCP `destructiveHint`, true unless said).
    pub destructive: bool,
    /// It reaches beyond its server (MCP `openWorldHint`, true unless said).
    pub open_world: bool,
    /// Where the class came from: `mcp.yaml`, the tool's annotations, or neither.
    pub said_by: &'static str,
}

impl Class {
    /// The phrases a person reads of an acting tool, first what it is.
    pub fn phrases(&self) -> Vec<String> {
        let mut phrases = vec![match self.effect {
            Effect::Acts => "acts outside this conversation".to_string(),
            Effect::Reads => "only reads".to_string(),
        }];
        if self.effect == Effect::Acts && self.destructive {
            phrases.push("may delete or overwrite".into());
        }
        if self.effect == Effect::Acts && self.open_world {
            phrases.push("may reach beyond its server".into());
        }
        phrases.push(format!("(as {})", self.said_by));
        phrases
    }
}

/// The class of `tool` of a server whose `mcp.yaml` says `effects` (and whether it is
/// `trusted`), the tool announced with `annotations` (none: it said nothing, or it is one
/// baaaht adds that only reads here, which `added` says: `read_resource` and `get_prompt` of a
/// server that is trusted or reaches nothing beyond itself; of another they act, as a fetch).
pub fn class_of(
    effects: &Effects,
    tool: &str,
    annotations: Option<&rmcp::model::ToolAnnotations>,
    (added, trusted): (bool, bool),
) -> Class {
    let hint = |pick: fn(&rmcp::model::ToolAnnotations) -> Option<bool>| annotations.and_then(pick);
    let destructive = hint(|a| a.destructive_hint).unwrap_or(true);
    let open_world = hint(|a| a.open_world_hint).unwrap_or(true);
    let configured = if effects.acts.iter().any(|name| name == tool) {
        Some(Effect::Acts)
    } else if effects.reads.iter().any(|name| name == tool) {
        Some(Effect::Reads)
    } else {
        effects.default
    };
    if let Some(effect) = configured {
        return Class { effect, destructive, open_world, said_by: "mcp.yaml says" };
    }
    // `read_resource` and `get_prompt`, where they only read.
    if added {
        return Class { effect: Effect::Reads, destructive: false, open_world: false, said_by: "baaaht reads it" };
    }
    match hint(|a| a.read_only_hint) {
        Some(true) if trusted => {
            Class { effect: Effect::Reads, destructive: false, open_world, said_by: "its trusted server says" }
        }
        Some(true) => Class {
            effect: Effect::Acts,
            destructive,
            open_world,
            said_by: "its server says it only reads, but is not trusted to; mcp.yaml's effects can say so",
        },
        Some(false) => Class { effect: Effect::Acts, destructive, open_world, said_by: "the tool says" },
        None => Class { effect: Effect::Acts, destructive, open_world, said_by: "the tool does not say it only reads" },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::ToolAnnotations;

    fn annotated(read_only: Option<bool>, destructive: Option<bool>) -> ToolAnnotations {
        let mut annotations = ToolAnnotations::default();
        annotations.read_only_hint = read_only;
        annotations.destructive_hint = destructive;
        annotations.open_world_hint = Some(false);
        annotations
    }

    /// A tool with no annotation acts; `readOnlyHint` makes it read when its server is trusted;
    /// `mcp.yaml` overrides the tool, per tool over per server; the tools baaaht adds read.
    #[test]
    fn a_tool_acts_unless_it_or_mcp_yaml_says_it_only_reads() {
        let none = Effects::default();
        let class = class_of(&none, "send_email", None, (false, false));
        assert_eq!((class.effect, class.destructive, class.open_world), (Effect::Acts, true, true));
        assert_eq!(
            class.phrases(),
            [
                "acts outside this conversation",
                "may delete or overwrite",
                "may reach beyond its server",
                "(as the tool does not say it only reads)"
            ]
        );
        let read_only = annotated(Some(true), None);
        assert_eq!(class_of(&none, "search", Some(&read_only), (false, true)).effect, Effect::Reads);
        let untrusted = class_of(&none, "search", Some(&read_only), (false, false));
        assert_eq!(untrusted.effect, Effect::Acts, "an untrusted server's hint is not taken");
        let careful = class_of(&none, "send", Some(&annotated(Some(false), Some(false))), (false, false));
        assert_eq!((careful.effect, careful.destructive, careful.open_world), (Effect::Acts, false, false));
        assert_eq!(careful.phrases(), ["acts outside this conversation", "(as the tool says)"]);
        assert_eq!(class_of(&none, "read_resource", None, (true, false)).effect, Effect::Reads);

        let effects = Effects { default: Some(Effect::Reads), reads: vec![], acts: vec!["send".into()] };
        assert_eq!(class_of(&effects, "send", Some(&read_only), (false, true)).effect, Effect::Acts);
        assert_eq!(class_of(&effects, "list", None, (false, false)).effect, Effect::Reads);
        let strict = Effects { default: Some(Effect::Acts), reads: vec!["list".into()], acts: vec![] };
        assert_eq!(class_of(&strict, "search", Some(&read_only), (false, true)).effect, Effect::Acts);
        assert_eq!(class_of(&strict, "list", None, (false, false)).effect, Effect::Reads);
        let twice = Effects { default: None, reads: vec!["x".into()], acts: vec!["x".into()] };
        assert_eq!(twice.named_twice(), Some("x"));
    }
}
