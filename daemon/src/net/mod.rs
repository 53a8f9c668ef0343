//! Every byte that leaves or enters from outside: the egress edge (SSRF filter, rules,
//! approvals asked in chat, credentials swapped in, the web proxy and search), and taint, which
//! marks what came from outside wherever it flows. It imports store/ and below.

pub mod egress;
pub mod taint;

use std::sync::Arc;
use std::time::Duration;

use crate::base::Base;
use crate::guard::{secrets, Guard};
use crate::store::Store;

#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// What is wrong is in the sentence, as it always was (so not a `#[source]` as well: the
    /// daemon's error chain would say it twice).
    #[error("cannot set up the web egress proxy: {0}")]
    WebProxy(egress::proxy::ProxyConfigError),
}

/// The net wing, opened.
#[derive(Debug)]
pub struct Net {
    /// The web proxy every fetch and tunnel goes through.
    pub web: Arc<egress::proxy::WebProxy>,
    /// The tainted turns and what they may no longer do.
    pub taints: Arc<taint::Taints>,
    /// Connections waiting for someone to allow them in chat.
    pub approvals: Arc<egress::approvals::Approvals>,
    /// Where credentials are swapped in; none when its certificate authority could not be made
    /// (tools still run, and no secret is swapped).
    pub edge: Option<Arc<egress::edge::Edge>>,
    /// The road of a tool's web requests: search and fetch, checked, audited and blotted.
    pub road: Arc<egress::web::Road>,
}

impl Net {
    pub fn open(base: &Base, guard: &Guard, store: &Store) -> Result<Net, NetError> {
        let (loaded, data_dir) = (&base.loaded, &base.data_dir);
        let web = Arc::new(Net::web_proxy(base)?);
        let opened = guard.secrets.current();
        let search = egress::search::Backend::from_config(&loaded.config.tools.web_proxy.search, |reference| {
            secrets::resolve_references(reference, opened.as_deref(), |name| std::env::var(name).ok())
                .map(|key| key.to_string())
                .map_err(|error| match error {
                    secrets::SecretsError::Unresolved { name } => egress::search::KeyError::Unresolved { name },
                    other => egress::search::KeyError::Secrets(Arc::new(other)),
                })
        });
        let taints = Arc::new(taint::Taints::open(
            &data_dir.state_dir(),
            loaded.config.security.taint.clone(),
            guard.audit.clone(),
            store.events.clone(),
            guard.redact.clone(),
        ));
        let approvals = Arc::new(egress::approvals::Approvals::new(
            store.events.clone(),
            Duration::from_secs(loaded.config.egress.approval_timeout.max(1)),
        ));
        let edge = match egress::authority::Authority::open(&data_dir.state_dir()) {
            Ok(authority) => Some(Arc::new(egress::edge::Edge::new(
                Arc::new(authority),
                data_dir.clone(),
                secrets::Handout::new(guard.secrets.clone(), secrets::Rules::of(loaded), guard.audit.clone()),
            ))),
            Err(why) => {
                tracing::error!(%why, "the egress certificate authority could not be made; credentials are not swapped in");
                None
            }
        };
        let road = Arc::new(egress::web::Road {
            proxy: web.clone(),
            search,
            taints: taints.clone(),
            audit: guard.audit.clone(),
            data_dir: data_dir.clone(),
            shield: guard.redact.shield().clone(),
        });
        Ok(Net { web, taints, approvals, edge, road })
    }

    /// A web proxy on `tools.web_proxy`'s rules, resolving and connecting for real.
    pub fn web_proxy(base: &Base) -> Result<egress::proxy::WebProxy, NetError> {
        egress::proxy::WebProxy::new(
            &base.loaded.config.tools.web_proxy,
            Arc::new(egress::proxy::SystemResolver),
            Arc::new(egress::proxy::TcpConnector),
        )
        .map_err(NetError::WebProxy)
    }
}
