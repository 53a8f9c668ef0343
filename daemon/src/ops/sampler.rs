//! The sampled metrics (spec §18.2): what the engine says each container uses, sessions by
//! status and the size of the memory stores, taken every `metrics.sample_interval` seconds
//! so a scrape never waits for the engine.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::base::auth::Role;
use crate::base::datadir::DataDir;
use crate::base::lifetime::{Subsystem, Work};
use crate::base::metrics::Metrics;
use crate::base::metrics::Sample;
use crate::sandbox::container::manager::ContainerManager;
use crate::store::sessions::SessionStore;

/// What a sample is taken from, and where it goes.
#[derive(Debug)]
pub struct Sampler {
    pub containers: Arc<ContainerManager>,
    pub sessions: Arc<SessionStore>,
    pub data_dir: DataDir,
    pub metrics: Arc<Metrics>,
    pub every: Duration,
}

/// Samples until `cancel`.
pub async fn run(sampler: Arc<Sampler>, cancel: CancellationToken) {
    let every = sampler.every;
    let sampler = &sampler;
    crate::base::lifetime::every(tokio::time::Instant::now(), every, &cancel, || async move {
        let sample = take(sampler).await;
        sampler.metrics.set_sample(&sample);
    })
    .await;
}

/// One sample.
pub async fn take(sampler: &Sampler) -> Sample {
    let inventory = sampler.containers.inventory().await;
    let measured = sampler.containers.usage(&inventory.containers).await;
    let mut containers: Vec<(&'static str, u64, f64, u64)> = vec![];
    for (entry, usage) in &measured {
        let role = Role::named(&entry.role).map_or("other", Role::as_str);
        match containers.iter_mut().find(|(name, ..)| *name == role) {
            Some((_, count, cpu, memory)) => {
                *count += 1;
                *cpu += usage.cpu_percent / 100.0;
                *memory += usage.memory_bytes;
            }
            None => containers.push((role, 1, usage.cpu_percent / 100.0, usage.memory_bytes)),
        }
    }
    let counts = sampler.sessions.counts();
    let root = sampler.data_dir.root().to_path_buf();
    let memory_bytes = tokio::task::spawn_blocking(move || memory_store_bytes(&root)).await.unwrap_or_default();
    Sample {
        containers,
        sessions: [
            ("active", u64::from(counts.active)),
            ("idle", u64::from(counts.idle)),
            ("archived", u64::from(counts.archived)),
        ],
        memory_bytes,
    }
}

/// Bytes in the memory stores of users and of groups (`{users,groups}/{id}/memory/`).
fn memory_store_bytes(root: &std::path::Path) -> Vec<(&'static str, u64)> {
    crate::base::datadir::CONTEXT_KINDS
        .into_iter()
        .map(|kind| {
            let folder = crate::base::datadir::context_folder(kind);
            let kind = if kind == crate::base::auth::ContextKind::User { "user" } else { "group" };
            let contexts = std::fs::read_dir(root.join(folder)).into_iter().flatten().flatten();
            let bytes = contexts
                .flat_map(|context| std::fs::read_dir(context.path().join("memory")).into_iter().flatten().flatten())
                .filter_map(|file| file.metadata().ok())
                .filter(std::fs::Metadata::is_file)
                .map(|metadata| metadata.len())
                .sum();
            (kind, bytes)
        })
        .collect()
}

impl Subsystem for Sampler {
    fn name(&self) -> &'static str {
        "sampler"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(run(self, shutdown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_stores_are_summed_by_kind_of_context() {
        let root = tempfile::tempdir().expect("tempdir");
        for (path, size) in [
            ("users/alice/memory/index.json", 10),
            ("users/alice/memory/tea.md", 5),
            ("users/bob/memory/x.md", 7),
            ("users/bob/notes.md", 1000),
            ("groups/family/memory/y.md", 3),
        ] {
            let path = root.path().join(path);
            std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            std::fs::write(path, vec![b'x'; size]).expect("write");
        }
        assert_eq!(memory_store_bytes(root.path()), vec![("user", 22), ("group", 3)]);
    }
}
