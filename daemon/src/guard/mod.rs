//! What keeps secrets and people safe whatever asks: redaction of every known and likely
//! secret, the encrypted secrets store, the audit log, per-caller limits and the daemon's own
//! tracing. It imports only base/.

pub mod audit;
pub mod limits;
pub mod redact;
pub mod secrets;
pub mod telemetry;
