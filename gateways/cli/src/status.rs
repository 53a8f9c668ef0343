//! `baaaht status`: what the daemon is doing, for a person or (with `--json`) a script.

use std::fmt::Write as _;

use baaaht_proto::v1;
use serde::Serialize;

/// The status as printed with `--json`.
#[derive(Debug, Serialize)]
pub struct StatusJson<'a> {
    pub name: &'a str,
    pub version: &'a str,
    pub pid: u32,
    pub uptime_seconds: u64,
    pub data_dir: &'a str,
    pub engine: EngineJson<'a>,
    pub sessions: SessionsJson,
    pub containers_running: u32,
    pub metrics_address: &'a str,
    pub llm: LlmJson<'a>,
    pub degraded: &'a [String],
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<ContainerJson<'a>>,
    /// Containers ready in the warm pools, by role.
    pub pools: std::collections::BTreeMap<&'a str, u32>,
}

#[derive(Debug, Serialize)]
pub struct ContainerJson<'a> {
    pub name: &'a str,
    pub role: &'a str,
    pub session_id: &'a str,
    pub context: &'a str,
    pub cpu_percent: f64,
    pub memory_bytes: u64,
    pub memory_limit_bytes: u64,
    pub uptime_seconds: u64,
    pub health: &'a str,
}

#[derive(Debug, Serialize)]
pub struct LlmJson<'a> {
    pub mode: &'a str,
    pub state: &'a str,
    pub message: &'a str,
    pub providers: &'a [String],
}

#[derive(Debug, Serialize)]
pub struct EngineJson<'a> {
    pub kind: &'a str,
    pub endpoint: &'a str,
    pub version: &'a str,
    pub healthy: bool,
    pub message: &'a str,
}

#[derive(Debug, Serialize)]
pub struct SessionsJson {
    pub active: u32,
    pub idle: u32,
    pub archived: u32,
}

pub fn to_json(status: &v1::StatusResponse) -> StatusJson<'_> {
    let engine = status.engine.as_ref();
    StatusJson {
        name: &status.name,
        version: &status.version,
        pid: status.pid,
        uptime_seconds: status.uptime_seconds,
        data_dir: &status.data_dir,
        engine: EngineJson {
            kind: engine.map_or("none", |e| e.kind.as_str()),
            endpoint: engine.map_or("", |e| e.endpoint.as_str()),
            version: engine.map_or("", |e| e.version.as_str()),
            healthy: engine.is_some_and(|e| e.healthy),
            message: engine.map_or("", |e| e.message.as_str()),
        },
        sessions: SessionsJson {
            active: status.sessions_active,
            idle: status.sessions_idle,
            archived: status.sessions_archived,
        },
        containers_running: status.containers_running,
        metrics_address: &status.metrics_address,
        llm: LlmJson {
            mode: status.llm.as_ref().map_or("", |llm| llm.mode.as_str()),
            state: status.llm.as_ref().map_or("unknown", |llm| llm.state.as_str()),
            message: status.llm.as_ref().map_or("", |llm| llm.message.as_str()),
            providers: status.llm.as_ref().map_or(&[], |llm| llm.providers.as_slice()),
        },
        degraded: &status.degraded,
        pools: status.pools.iter().map(|pool| (pool.role.as_str(), pool.ready)).collect(),
        containers: status
            .containers
            .iter()
            .map(|c| ContainerJson {
                name: &c.name,
                role: &c.role,
                session_id: &c.session_id,
                context: &c.context,
                cpu_percent: c.cpu_percent,
                memory_bytes: c.memory_bytes,
                memory_limit_bytes: c.memory_limit_bytes,
                uptime_seconds: c.uptime_seconds,
                health: &c.health,
            })
            .collect(),
    }
}

/// "512 B", "3.4 MiB", "1.2 GiB".
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The containers as a table: name, role, context, CPU, memory (of its limit), age, health.
pub fn containers_text(containers: &[v1::ContainerUsage]) -> String {
    let mut out = String::new();
    let width = containers.iter().map(|c| c.name.len()).max().unwrap_or(0).max(9);
    let _ = writeln!(
        out,
        "{:<width$}  {:<11} {:<14} {:>6}  {:>21}  {:<7}  HEALTH",
        "CONTAINER", "ROLE", "CONTEXT", "CPU", "MEMORY", "UP"
    );
    for c in containers {
        let memory = format!("{} / {}", human_bytes(c.memory_bytes), human_bytes(c.memory_limit_bytes));
        let _ = writeln!(
            out,
            "{:<width$}  {:<11} {:<14} {:>5.1}%  {memory:>21}  {:<7}  {}",
            c.name,
            c.role,
            if c.context.is_empty() { "-" } else { &c.context },
            c.cpu_percent,
            human_duration(c.uptime_seconds),
            if c.health.is_empty() { "-" } else { &c.health },
        );
    }
    out
}

/// "3d 4h", "2h 5m", "4m 12s", "9s".
pub fn human_duration(seconds: u64) -> String {
    let (days, hours, minutes, secs) = (seconds / 86_400, seconds / 3600 % 24, seconds / 60 % 60, seconds % 60);
    match () {
        () if days > 0 => format!("{days}d {hours}h"),
        () if hours > 0 => format!("{hours}h {minutes}m"),
        () if minutes > 0 => format!("{minutes}m {secs}s"),
        () => format!("{secs}s"),
    }
}

pub fn to_text(status: &v1::StatusResponse) -> String {
    let mut out = String::new();
    let _ =
        writeln!(out, "baaahtd {} (pid {}), up {}", status.version, status.pid, human_duration(status.uptime_seconds));
    if !status.name.is_empty() {
        let _ = writeln!(out, "name:        {}", status.name);
    }
    let _ = writeln!(out, "data dir:    {}", status.data_dir);
    let engine = match &status.engine {
        Some(engine) if engine.healthy => {
            format!("{} {} at {} ({})", engine.kind, engine.version, engine.endpoint, engine.message)
        }
        Some(engine) => format!("none ({})", engine.message),
        None => "unknown".to_string(),
    };
    let _ = writeln!(out, "engine:      {engine}");
    let _ = writeln!(
        out,
        "sessions:    {} active, {} idle, {} archived",
        status.sessions_active, status.sessions_idle, status.sessions_archived
    );
    let _ = writeln!(out, "containers:  {} running", status.containers_running);
    if !status.pools.is_empty() {
        let ready: Vec<String> = status.pools.iter().map(|pool| format!("{} {}", pool.ready, pool.role)).collect();
        let _ = writeln!(out, "warm pools:  {} ready", ready.join(", "));
    }
    if let Some(llm) = &status.llm {
        let providers =
            if llm.providers.is_empty() { String::new() } else { format!(", providers: {}", llm.providers.join(", ")) };
        let why = if llm.message.is_empty() { String::new() } else { format!(": {}", llm.message) };
        let _ = writeln!(out, "llm:         {} ({}){providers}{why}", llm.state, llm.mode);
    }
    let metrics = if status.metrics_address.is_empty() {
        "off".to_string()
    } else {
        format!("http://{}/metrics", status.metrics_address)
    };
    let _ = writeln!(out, "metrics:     {metrics}");
    if status.degraded.is_empty() {
        let _ = writeln!(out, "health:      ok");
    } else {
        for problem in &status.degraded {
            let _ = writeln!(out, "health:      {problem}");
        }
    }
    if !status.containers.is_empty() {
        out.push('\n');
        out.push_str(&containers_text(&status.containers));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        for (seconds, text) in [(9, "9s"), (252, "4m 12s"), (7500, "2h 5m"), (273_600, "3d 4h")] {
            assert_eq!(human_duration(seconds), text);
        }
    }

    #[test]
    fn text_shows_degradation() {
        let status = v1::StatusResponse {
            version: "0.1.0".into(),
            name: "home".into(),
            pid: 42,
            uptime_seconds: 75,
            data_dir: "/d".into(),
            engine: Some(v1::EngineStatus {
                kind: "none".into(),
                healthy: false,
                message: "degraded: no container engine at /var/run/docker.sock".into(),
                ..Default::default()
            }),
            degraded: vec!["degraded: no container engine at /var/run/docker.sock".into()],
            llm: Some(v1::LlmGatewayStatus {
                mode: "process".into(),
                state: "ready".into(),
                message: String::new(),
                providers: vec!["anthropic".into(), "ollama".into()],
            }),
            ..Default::default()
        };
        let text = to_text(&status);
        assert!(text.starts_with("baaahtd 0.1.0 (pid 42), up 1m 15s\nname:        home\n"), "{text}");
        assert!(text.contains("health:      degraded: no container engine at /var/run/docker.sock"), "{text}");
        assert!(text.contains("metrics:     off"), "{text}");
        assert!(text.contains("llm:         ready (process), providers: anthropic, ollama\n"), "{text}");
        assert!(!text.contains("CONTAINER"), "no table unless asked: {text}");
    }

    #[test]
    fn containers_show_cpu_and_memory_against_their_limit() {
        let container = v1::ContainerUsage {
            name: "baaaht-assistant-s-1".into(),
            role: "assistant".into(),
            session_id: "s-1".into(),
            context: "user:alice".into(),
            cpu_percent: 12.345,
            memory_bytes: 45 * 1024 * 1024 + 300 * 1024,
            memory_limit_bytes: 512 * 1024 * 1024,
            uptime_seconds: 130,
            health: "healthy".into(),
        };
        let text = containers_text(&[container]);
        let row = text.lines().nth(1).unwrap_or_default();
        assert_eq!(
            row, "baaaht-assistant-s-1  assistant   user:alice      12.3%   45.3 MiB / 512.0 MiB  2m 10s   healthy",
            "{text}"
        );
        assert_eq!(human_bytes(900), "900 B");
    }
}
