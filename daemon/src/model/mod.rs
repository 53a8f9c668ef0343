//! The one road to a model: the LLM gateway and every call through it, streamed words and the
//! turn table, budgets per user and group, the usage ledger, and voice (the speech container).
//! It imports work/ and below.

pub mod budgets;
pub mod llm;
pub mod speech;
pub mod usage;

use std::sync::Arc;

use crate::base::Base;
use crate::guard::{audit, secrets, Guard};
use crate::net::{Net, NetError};
use crate::sandbox::Sandbox;
use crate::store::Store;
use crate::work::Workers;

/// The model wing, opened.
#[derive(Debug)]
pub struct Model {
    pub llm: Arc<llm::LlmGateway>,
    /// Spending limits per user and group.
    pub budgets: Arc<budgets::Budgets>,
    /// The one road to the model: every model call the daemon makes or brokers.
    pub calls: Arc<llm::call::Calls>,
    /// Voice notes heard and answers spoken, in the speech container.
    pub speech: Arc<speech::Speech>,
}

impl Model {
    /// The LLM gateway (reaching its providers' hosts only, by tunnel through the web proxy, and
    /// telling the admins when it cannot), the budgets and the one road to it.
    pub fn open(
        base: &Base,
        guard: &Guard,
        sandbox: &Sandbox,
        store: &Store,
        workers: &Workers,
    ) -> Result<Model, NetError> {
        let (loaded, data_dir) = (&base.loaded, &base.data_dir);
        let opened = guard.secrets.current();
        let settings = llm::gateway_settings(loaded, opened.as_deref(), |name| std::env::var(name).ok());
        guard.redact.shield().also_known(settings.secret_values());
        if let Some(store) = &opened {
            for (provider, entry) in loaded.providers.providers.configured() {
                let references = entry.secret_references().into_iter().flat_map(secrets::reference_names);
                for name in references.filter(|name| store.get(name).is_some()) {
                    let record = audit::Record::new(audit::Kind::Secret, "daemon", "read");
                    guard.audit.record(record.detail("name", name).detail("for", format!("LLM provider {provider}")));
                }
            }
        }
        let llm = Arc::new(llm::LlmGateway::new(loaded, settings, data_dir, &base.binaries, base.metrics.clone()));
        // The gateway in its container has no network: its providers' hosts only, by tunnel.
        let way_out = Net::web_proxy(base)?;
        let hosts = llm.provider_hosts();
        llm.reach_out_through(llm::egress::WayOut::new(
            hosts,
            way_out,
            guard.audit.clone(),
            base.lifetime.tasks.clone(),
        ));
        llm.tell_admins_through(workers.notifier.clone());
        let budgets = Arc::new(budgets::Budgets::new(
            &data_dir.state_dir(),
            loaded.config.budgets.clone(),
            loaded.providers.prices.clone(),
            &loaded.config.system.timezone,
            base.metrics.clone(),
        ));
        let calls = Arc::new(llm::call::Calls::new(
            llm.clone(),
            budgets.clone(),
            guard.audit.clone(),
            store.events.clone(),
            loaded.clone(),
        ));
        let speech = Arc::new(speech::Speech::new(loaded, data_dir, &base.binaries, sandbox.containers.clone()));
        Ok(Model { llm, budgets, calls, speech })
    }
}
