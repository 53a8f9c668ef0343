//! A gateway's health, as the daemon asks for it (`ContainerHealth` on `--health-socket`): it
//! is healthy while its channel's updates can reach it (a connection open, a poll answered, a
//! webhook served) and unhealthy once it has had no connection to its service for
//! `--unhealthy-after`; after three unhealthy answers in a row the daemon restarts it
//! (DESIGN.md §9.2).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use baaaht_proto::v1;
use baaaht_proto::v1::container_health_server::ContainerHealth;
use tonic::{Request, Response, Status};

/// Whether events reach the gateway.
#[derive(Debug, Clone)]
enum Events {
    Up,
    Down { since: Instant, why: String },
}

/// What the gateway tells the daemon about itself.
#[derive(Debug)]
pub struct Health {
    /// The service, as sentences name it ("Slack", "Telegram").
    service: String,
    started: Instant,
    unhealthy_after: Duration,
    events: Mutex<Events>,
}

impl Health {
    pub fn new(service: &str, unhealthy_after: Duration) -> Arc<Health> {
        let started = Instant::now();
        let events = Events::Down { since: started, why: format!("not connected to {service} yet") };
        Arc::new(Health { service: service.to_string(), started, unhealthy_after, events: Mutex::new(events) })
    }

    /// Events reach the gateway.
    pub fn up(&self) {
        *self.events.lock().unwrap_or_else(PoisonError::into_inner) = Events::Up;
    }

    /// Events stopped reaching the gateway, for `why`; the first reason since it was up is kept.
    pub fn down(&self, why: &str) {
        let mut events = self.events.lock().unwrap_or_else(PoisonError::into_inner);
        match &mut *events {
            Events::Up => *events = Events::Down { since: Instant::now(), why: why.to_string() },
            Events::Down { why: last, .. } => *last = why.to_string(),
        }
    }

    /// "healthy", "degraded" (reconnecting) or "unhealthy", and a sentence.
    pub fn status(&self) -> (&'static str, String) {
        match &*self.events.lock().unwrap_or_else(PoisonError::into_inner) {
            Events::Up => ("healthy", String::new()),
            Events::Down { since, why } if since.elapsed() < self.unhealthy_after => ("degraded", why.clone()),
            Events::Down { since, why } => {
                let seconds = since.elapsed().as_secs();
                ("unhealthy", format!("no connection to {} for {seconds} s: {why}", self.service))
            }
        }
    }
}

#[tonic::async_trait]
impl ContainerHealth for Health {
    async fn health_check(
        &self,
        request: Request<v1::HealthCheckRequest>,
    ) -> Result<Response<v1::HealthCheckResponse>, Status> {
        let (status, message) = self.status();
        Ok(Response::new(v1::HealthCheckResponse {
            status: status.into(),
            message,
            uptime_seconds: self.started.elapsed().as_secs() as i64,
            metrics: Default::default(),
            probe: request.into_inner().probe,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_connection_is_degraded_then_unhealthy() {
        let patient = Health::new("Slack", Duration::from_secs(3600));
        assert_eq!(patient.status().0, "degraded");
        patient.up();
        assert_eq!(patient.status(), ("healthy", String::new()));
        patient.down("Slack closed the connection");
        assert_eq!(patient.status(), ("degraded", "Slack closed the connection".into()));
        let impatient = Health::new("Slack", Duration::ZERO);
        impatient.up();
        impatient.down("Slack closed the connection");
        impatient.down("apps.connections.open failed");
        let (status, message) = impatient.status();
        assert_eq!(status, "unhealthy");
        assert!(message.starts_with("no connection to Slack for 0 s: apps.connections.open failed"), "{message}");
    }
}
