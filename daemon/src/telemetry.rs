//! Logging: JSON lines when stderr is not a terminal (journald, files, CI), human-readable
//! lines on a terminal; levels from `system.log_level` and `system.log_components`, or from
//! `RUST_LOG` when it is set.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::SystemConfig;

/// The filter directives for `system`: the daemon at `log_level`, each component at its own.
pub fn filter_directives(system: &SystemConfig) -> String {
    let mut directives = vec![
        "warn".to_string(),
        format!("baaaht_daemon={}", system.log_level),
        format!("baaahtd={}", system.log_level),
    ];
    for (component, level) in &system.log_components {
        directives.push(format!("baaaht_daemon::{component}={level}"));
    }
    directives.join(",")
}

/// Installs the global subscriber. Call once, from `main`.
pub fn init(system: &SystemConfig) {
    let filter = match std::env::var("RUST_LOG") {
        Ok(directives) if !directives.is_empty() => EnvFilter::new(directives),
        _ => EnvFilter::new(filter_directives(system)),
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if std::io::stderr().is_terminal() {
        builder.with_target(false).init();
    } else {
        builder.json().with_current_span(true).with_span_list(false).flatten_event(true).init();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::LogLevel;

    #[test]
    fn directives_per_component() {
        let mut system = SystemConfig { log_level: LogLevel::Debug, ..SystemConfig::default() };
        system.log_components.insert("container".into(), LogLevel::Trace);
        let directives = filter_directives(&system);
        assert_eq!(directives, "warn,baaaht_daemon=debug,baaahtd=debug,baaaht_daemon::container=trace");
        EnvFilter::try_new(directives).expect("valid filter");
    }
}
