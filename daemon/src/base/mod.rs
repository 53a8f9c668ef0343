//! The floor everything stands on: the configuration, who a caller is, the data dir and its
//! atomic state files, the disk's gate, the host's memory, the metrics, systemd's notifications
//! and the daemon's lifetime. It imports no other wing.

pub mod auth;
pub mod config;
pub mod datadir;
pub mod disk;
pub mod host;
pub mod lifetime;
pub mod metrics;
pub mod state;
pub mod systemd;

use std::path::PathBuf;
use std::sync::Arc;

/// What every wing is opened with: the configuration, the data dir, the metrics, the daemon's
/// lifetime and where baaaht's other binaries are.
#[derive(Debug, Clone)]
pub struct Base {
    pub loaded: Arc<config::LoadedConfig>,
    pub data_dir: datadir::DataDir,
    pub metrics: Arc<metrics::Metrics>,
    pub lifetime: lifetime::Lifetime,
    /// The folder of `baaaht-agent`, `baaaht-llm-gateway` and the gateways.
    pub binaries: PathBuf,
    /// The data dir's disk as last read: what turns new work away when it is nearly full.
    pub disk: Arc<disk::DiskGate>,
}

impl Base {
    pub fn new(loaded: config::LoadedConfig, data_dir: datadir::DataDir) -> Base {
        let read = loaded.config.metrics.enabled || loaded.config.metrics.log;
        let metrics = Arc::new(if read { metrics::Metrics::default() } else { metrics::Metrics::off() });
        let binaries = datadir::binaries_dir(&loaded.config.container.binaries_dir);
        let disk = Arc::new(disk::DiskGate::new(data_dir.root().to_path_buf()));
        Base { loaded: Arc::new(loaded), data_dir, metrics, lifetime: lifetime::Lifetime::new(), binaries, disk }
    }
}
