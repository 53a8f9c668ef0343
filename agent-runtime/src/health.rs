//! Answers to the daemon's health probes (spec §18.3), for the agent loop and the tool runner.

use std::time::Instant;

use baaaht_proto::v1;

/// The answer to `probe` of a container that started at `started` and is busy since `busy`.
pub fn answer(probe: v1::HealthCheckRequest, started: Instant, busy: Option<Instant>) -> v1::HealthCheckResponse {
    let mut metrics = std::collections::HashMap::new();
    let message = match busy {
        Some(since) => {
            let seconds = since.elapsed().as_secs();
            metrics.insert("busy_seconds".to_string(), seconds.to_string());
            format!("working for {seconds} s")
        }
        None => "idle".to_string(),
    };
    v1::HealthCheckResponse {
        status: "healthy".into(),
        message,
        uptime_seconds: started.elapsed().as_secs() as i64,
        metrics,
        probe: probe.probe,
    }
}
