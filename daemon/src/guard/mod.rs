//! What keeps secrets and people safe whatever asks: redaction of every known and likely
//! secret, the encrypted secrets store, the audit log, per-caller limits and the daemon's own
//! tracing. It imports only base/.

pub mod audit;
pub mod limits;
pub mod redact;
pub mod secrets;
pub mod telemetry;

use std::sync::Arc;

use crate::base::Base;

#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    #[error("security.redact.extra_patterns")]
    Patterns(#[source] redact::RulesError),
}

/// The guard wing, opened.
#[derive(Debug)]
pub struct Guard {
    pub audit: audit::Audit,
    /// The secrets store, when it could be opened (read again when it changes): providers'
    /// keys, skills' `addons.env`, MCP servers' `env` and gateways' credentials come from it.
    pub secrets: Arc<secrets::LiveSecrets>,
    /// The one redactor (DESIGN.md §10.3).
    pub redact: redact::Redact,
}

impl Guard {
    /// Opens the audit log, the secrets store and the
    /// redactor: the store's values, gitleaks' rules (compiled now, beside the start) and the
    /// operator's patterns; the audit and the log lines are cleaned with it.
    pub fn open(base: &Base) -> Result<Guard, GuardError> {
        let (loaded, data_dir) = (&base.loaded, &base.data_dir);
        let audit = audit::Audit::open(
            data_dir.logs_dir().join("audit"),
            loaded.config.audit.enabled,
            loaded.config.audit.retention_days,
            base.metrics.clone(),
        );
        let opened = secrets::open_unattended(&data_dir.config_dir());
        let secrets = Arc::new(secrets::LiveSecrets::new(&data_dir.config_dir(), opened));
        let patterns = loaded.config.security.redact.patterns();
        let shield = Arc::new(redact::Shield::new(Some(secrets.clone()), &patterns).map_err(GuardError::Patterns)?);
        let warming = shield.clone();
        base.lifetime.tasks.spawn_blocking(move || warming.warm());
        audit.shield_with(shield.clone());
        let redact = redact::Redact::new(shield, audit.clone());
        redact::for_log_lines(&redact);
        Ok(Guard { audit, secrets, redact })
    }
}
