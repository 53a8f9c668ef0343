//! A session's browser (DESIGN.md §12): the `browser` tool's calls go to a tool container of
//! their own, on an image with Debian's Chromium, whose runner (`baaaht-agent runner --browser`)
//! drives one Chromium over the DevTools protocol. The container holds the session's workspace
//! (the profile, so a login survives between turns; screenshots, PDFs and downloads) and the
//! daemon's trust bundle, nothing else; it has no network: every request of every page goes
//! through the runner's proxy to this daemon's relay, under the session's egress policy,
//! approvals, the edge's credentials and the taint rules, as a command's would.

use std::time::{Duration, Instant};

use crate::base::auth::{Context, Role};
use crate::base::config::BrowserConfig;
use crate::sandbox::container::manager::{RunRequest, BINARIES_MOUNT};
use crate::sandbox::container::MountSpec;

use super::{Runner, Runners, ToolsError, WORKSPACE};

/// Where Debian installs Chromium in the image.
const CHROMIUM: &str = "/usr/bin/chromium";

/// Where the person's profile is mounted in the browser's container.
const PROFILE: &str = "/browser-profile";

/// The key of `person`'s browser in `session` among the tool containers.
pub(super) fn key(session: &str, person: &str) -> String {
    format!("{}{person}", prefix(session))
}

/// What the keys of every browser of `session` begin with.
pub(super) fn prefix(session: &str) -> String {
    format!("{session}/browser/")
}

/// Whose browser a call of `context` uses: a person's own, also in a group (a member's logins
/// are not another's), named as a folder may be. A group's scheduled run (nobody asked) has a
/// profile of its own.
pub fn person(context: &Context, asker: Option<&str>) -> String {
    let who = match context.kind {
        crate::base::auth::ContextKind::User => context.id.as_str(),
        crate::base::auth::ContextKind::Group => asker.unwrap_or("-scheduled"),
    };
    let plain = !who.is_empty()
        && !who.starts_with('.')
        && who.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
    if plain {
        who.to_string()
    } else {
        who.bytes().map(|byte| format!("{byte:02x}")).collect()
    }
}

/// The browser's image on `base`: Debian's Chromium, a font family for its pages and NSS's
/// `certutil` (the daemon's authority is added to Chromium's trust with it). Its tag and
/// Dockerfile; built once, when a session first uses the browser.
pub fn layer(base: &str) -> (String, String) {
    crate::sandbox::container::images::layer(base, "chromium fonts-dejavu-core libnss3-tools", "browser")
}

/// The browser's runner command and limits from `config`, over `base` (the tool role's limits).
pub(super) fn command(config: &BrowserConfig) -> Vec<String> {
    vec![
        format!("{BINARIES_MOUNT}/baaaht-agent"),
        "runner".into(),
        "--mount".into(),
        WORKSPACE.into(),
        "--browser".into(),
        CHROMIUM.into(),
        "--browser-pages".into(),
        config.pages.max(1).to_string(),
        "--browser-download-bytes".into(),
        config.max_download.0.to_string(),
        "--browser-profile-bytes".into(),
        config.max_profile.0.to_string(),
        "--browser-heap-mib".into(),
        (config.page_memory.0 >> 20).max(64).to_string(),
        "--browser-memory-bytes".into(),
        config.memory.0.to_string(),
        "--browser-profile".into(),
        PROFILE.into(),
    ]
}

impl Runners {
    /// Why the browser may not open `url`, when that is known at sight: not http(s), or a
    /// loopback, private, link-local or metadata address the filter refuses (one it resolves to
    /// is refused by the relay when the page asks for it).
    pub fn browser_refuses(&self, url: &str) -> Option<String> {
        let scheme = url.split_once(':').map(|(scheme, _)| scheme.to_ascii_lowercase()).unwrap_or_default();
        if !matches!(scheme.as_str(), "http" | "https") {
            return Some(format!("the browser opens only http:// and https:// addresses, not `{scheme}:`"));
        }
        let (host, port) = match crate::net::egress::proxy::host_and_port(url) {
            Ok(found) => found,
            Err(error) => return Some(format!("{url} is not an address the browser can open: {error}")),
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        self.web.refused_at_sight(bare, port).map(|why| format!("the browser may not open {url}: {why}"))
    }

    /// Starts `person`'s browser container in `session`: the browser's image (built the first
    /// time), its limits, the workspace, the person's profile and the trust bundle, and no IPC
    /// folder (it queues nothing).
    pub(super) async fn start_browser(
        &self,
        session: &str,
        context: &Context,
        person: &str,
    ) -> Result<Runner, ToolsError> {
        let (tag, dockerfile) = layer(self.containers.image());
        self.containers.ensure_image(&tag, &dockerfile).await.map_err(ToolsError::Container)?;
        let (workspaces, held, whose) = (self.workspaces.clone(), session.to_string(), person.to_string());
        let profile = tokio::task::spawn_blocking(move || workspaces.browser_profile(&held, &whose))
            .await
            .map_err(|error| ToolsError::Prepare(error.to_string()))?
            .map_err(|error| ToolsError::Prepare(format!("the browser's profile cannot be made: {error}")))?;
        let workspace = self.hold_workspace(session).await?;
        let mut limits = self.policy.resource_limits(Role::Tool);
        limits.memory_bytes = self.browser.memory.0;
        // Chromium's processes and threads, and room in /tmp for its home and cache.
        limits.pids = limits.pids.max(512);
        limits.tmp_bytes = limits.tmp_bytes.max(256 << 20);
        let request = RunRequest {
            role: Role::Tool,
            session_id: session.to_string(),
            context: context.clone(),
            command: command(&self.browser),
            mounts: [
                MountSpec { host: workspace.path.clone(), target: WORKSPACE.into(), read_only: false },
                MountSpec { host: profile, target: PROFILE.into(), read_only: false },
            ]
            .into_iter()
            .chain(self.trust_mount())
            .collect(),
            env: vec![],
            timeout: Duration::MAX,
            daemon_socket: true,
            working_dir: Some(WORKSPACE.into()),
            image: Some(tag),
            limits: Some(limits),
        };
        let mut changes = self.connected.changes();
        let handle = match self.containers.start_service(request).await {
            Ok(handle) => handle,
            Err(error) => {
                self.let_go_workspace(session).await;
                return Err(super::worded(ToolsError::Container(error)));
            }
        };
        if let Err(error) = self.runner_connected(&mut changes, &handle.name, "a browser").await {
            self.let_go_workspace(session).await;
            return Err(error);
        }
        Ok(Runner {
            session: session.to_string(),
            container: handle.name,
            context: context.clone(),
            last_used: Instant::now(),
            called: false,
            skills: vec![],
            idle: Some(Duration::from_secs(self.browser.idle_timeout.max(1))),
            _ipc: None,
        })
    }
}

impl super::call::Calls {
    /// Whether the agent `identity` (working on `live`) may make the browser call `params`: the
    /// browser is on; an address to open passes the filter at sight and, in a turn that read
    /// content from outside, was shown by that content or is allowed by a rule; typing in such
    /// a turn is an acting step a person allows first. Why not, in a sentence.
    pub(super) async fn browser_may(
        &self,
        identity: &crate::base::auth::ContainerIdentity,
        live: Option<&crate::base::auth::Live>,
        params: &serde_json::Value,
    ) -> Result<(), String> {
        if !self.loaded.config.tools.browser.enabled {
            return Err("the browser is turned off on this server (tools.browser.enabled in config.yaml)".into());
        }
        // A role without the browser is refused by the call's road, before anyone is asked.
        if !crate::sandbox::policy::Policy::tools_of(identity.role).contains(&baaaht_proto::ToolName::Browser) {
            return Ok(());
        }
        let action = params["action"].as_str().unwrap_or_default();
        let marked = self.taints.of_session(&identity.session_id).is_some();
        let caller = crate::base::auth::Caller::Container(std::sync::Arc::new(identity.clone()));
        let principal = crate::guard::audit::principal(&caller);
        if let Some(url) = params["url"].as_str().filter(|_| matches!(action, "open" | "download")) {
            let refused = |why: &str| {
                let record = crate::guard::audit::Record::by(crate::guard::audit::Kind::Egress, &caller, "refused")
                    .detail("session", identity.session_id.as_str())
                    .detail("tool", "browser")
                    .detail("url", crate::net::egress::proxy::redacted(url))
                    .detail("reason", why);
                self.audit.record(record);
            };
            if let Some(why) = self.runners.browser_refuses(url) {
                refused(&why);
                return Err(why);
            }
            let (host, port) = crate::net::egress::proxy::host_and_port(url).map_err(|error| error.to_string())?;
            let bare = host.trim_start_matches('[').trim_end_matches(']').to_string();
            let (data_dir, context, checked) = (self.data_dir.clone(), identity.context.clone(), bare.clone());
            let allowed = tokio::task::spawn_blocking(move || {
                use crate::net::egress::policy;
                policy::decide(&data_dir, &context, &checked, port)
                    .is_some_and(|rule| rule.action == policy::Action::Allow)
            });
            let allowed = allowed.await.unwrap_or(false);
            if let Err(why) = self.taints.may_fetch(&identity.session_id, url, &bare, allowed, &principal) {
                // The same rule as `web_fetch`'s, said of the browser.
                let why = why.replacen("`web_fetch`", &format!("the browser's `{action}`"), 1);
                refused(&why);
                return Err(why);
            }
            // A page reads its address's `#` part, which the shown-address check leaves out.
            if marked && url.split_once('#').is_some_and(|(_, fragment)| !fragment.is_empty()) {
                let why = "the browser did not open it: this conversation read content from outside, and then it \
                           opens addresses without a `#` part (open it without one)"
                    .to_string();
                refused(&why);
                return Err(why);
            }
        }
        // Typing and choosing hand the model's text to the page: in a marked turn, a person
        // first. So do the steps a marked turn takes on its own (clicks, going back, a
        // download by a link's number) past the first few: which buttons it presses could
        // spell out what it read.
        let step = matches!(action, "click" | "back") || (action == "download" && params["url"].is_null());
        if matches!(action, "type" | "choose") || (step && !self.taints.may_step(&identity.session_id)) {
            let arguments: serde_json::Map<String, serde_json::Value> = params
                .as_object()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|(name, _)| name != "action")
                .collect();
            let class = crate::work::mcp::effects::Class {
                effect: crate::work::mcp::effects::Effect::Acts,
                destructive: false,
                open_world: true,
                said_by: "the browser",
            };
            match live {
                Some(live) => {
                    let action = super::acting::Action {
                        live,
                        server: super::acting::BROWSER,
                        tool: action,
                        class,
                        arguments: &arguments,
                    };
                    super::acting::allowed(&self.taints, &self.approvals, self.redact.shield(), action).await?;
                }
                None => {
                    if let Some(mark) = self.taints.of_session(&identity.session_id) {
                        let source = mark.sources.first().cloned().unwrap_or_default();
                        return Err(format!(
                            "the browser did not {action}: this conversation read content from outside ({source}), and \
                             this agent works for no turn now, so nobody can be asked"
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// After a browser call of `identity`'s: a screenshot is shown in the conversation (kept in
    /// its `sent/`, as a file an agent sends), and the files the call wrote carry the turn's mark.
    pub(super) async fn browser_done(
        &self,
        identity: &crate::base::auth::ContainerIdentity,
        live: Option<&crate::base::auth::Live>,
        answer: &crate::work::ipc::ToolAnswer,
    ) {
        if answer.is_error {
            return;
        }
        let session = identity.session_id.clone();
        if let (Some(live), Some(wrote)) = (live, answer.metadata.get("wrote")) {
            if let Some(mark) = self.taints.mark(&live.session, &live.user_turn) {
                let (taints, wrote) = (self.taints.clone(), wrote.clone());
                tokio::task::spawn_blocking(move || taints.wrote(&mark, vec![wrote])).await.ok();
            }
        }
        let Some(path) = answer.metadata.get("screenshot").cloned() else { return };
        let (workspaces, held) = (self.runners.workspaces().clone(), session.clone());
        let kept = tokio::task::spawn_blocking(move || {
            let bytes = workspaces.read(&held, &path, baaaht_proto::SENT_FILE_MAX_BYTES)?;
            let Some(bytes) = bytes else { return Ok(None) };
            let name = path.rsplit('/').next().unwrap_or("screenshot.png").to_string();
            let kept = workspaces.keep_sent(&held, &name, &bytes)?;
            Ok::<_, std::io::Error>(Some((kept, bytes.len() as u64)))
        })
        .await;
        let (kept, size) = match kept {
            Ok(Ok(Some(kept))) => kept,
            Ok(Ok(None)) => {
                tracing::warn!(session, "a browser screenshot is not in the workspace (or too large); not shown");
                return;
            }
            Ok(Err(error)) => {
                tracing::warn!(session, %error, "a browser screenshot cannot be kept; not shown");
                return;
            }
            Err(error) => {
                tracing::warn!(session, %error, "a browser screenshot cannot be kept; not shown");
                return;
            }
        };
        let url = answer.metadata.get("url").cloned().unwrap_or_default();
        let attachment = crate::store::sessions::log::Attachment {
            path: format!("{}/{kept}", crate::sandbox::workspace::SENT),
            session: session.clone(),
            mime_type: "image/png".into(),
            size_bytes: size,
        };
        let kind = crate::store::events::Kind::Message {
            content: format!("The browser's screenshot of {url}"),
            reply_to: String::new(),
            metadata: std::collections::BTreeMap::new(),
            attachments: vec![attachment],
        };
        let (turn, correlation) =
            live.map(|live| (live.user_turn.clone(), live.correlation_id.clone())).unwrap_or_default();
        let event = crate::store::events::Event::of_turn(&session, &turn, &correlation, kind);
        self.events.publish(&identity.context, event);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_browsers_image_is_named_by_what_it_is_built_from() {
        let (tag, dockerfile) = layer("baaaht/base:latest");
        assert!(tag.starts_with("baaaht/browser:") && tag.len() == "baaaht/browser:".len() + 16, "{tag}");
        assert!(
            dockerfile.starts_with("FROM baaaht/base:latest\n") && dockerfile.contains(" chromium "),
            "{dockerfile}"
        );
        assert_ne!(layer("another/base").0, tag);
        let command = command(&BrowserConfig::default());
        let at = |flag: &str| command.iter().position(|arg| arg == flag).map(|index| command[index + 1].as_str());
        assert_eq!(
            (at("--browser"), at("--browser-pages"), at("--browser-heap-mib"), at("--browser-profile")),
            (Some(CHROMIUM), Some("4"), Some("512"), Some(PROFILE))
        );
        assert_eq!(at("--browser-memory-bytes"), Some("1073741824"));
    }

    #[test]
    fn each_person_browses_with_a_profile_of_their_own() {
        let group = Context { kind: crate::base::auth::ContextKind::Group, id: "family".into() };
        let alice = Context { kind: crate::base::auth::ContextKind::User, id: "alice".into() };
        assert_eq!(person(&alice, None), "alice");
        assert_eq!(person(&group, Some("bob")), "bob");
        assert_eq!(person(&group, None), "-scheduled");
        assert_eq!(person(&group, Some("../x")), "2e2e2f78");
        assert_eq!(person(&group, Some(".hidden")), "2e68696464656e");
        assert_ne!(key("s1", "alice"), key("s1", "bob"));
        assert!(key("s1", "alice").starts_with(&prefix("s1")));
    }
}
