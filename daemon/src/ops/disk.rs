//! The data dir's disk, watched (spec §5.4): every `orchestrator.disk.check_interval` it is
//! read, its figures go to the metrics and `baaaht status`; past `warn_percent` the admins are
//! told (the log, and a notice on each one's preferred channel or in their inbox); past
//! `critical_percent` the gate ([`crate::base::disk::DiskGate`]) turns new conversations and
//! uploads away and idle sessions are archived at once, until it is below the mark again.

use std::sync::Arc;
use std::time::Duration;

use crate::base::config::DiskConfig;
use crate::base::disk::{DiskGate, Level, Usage};
use crate::base::lifetime::{Subsystem, Work};

/// The watch.
#[derive(Debug)]
pub struct DiskWatch {
    pub gate: Arc<DiskGate>,
    pub settings: DiskConfig,
    pub metrics: Arc<crate::base::metrics::Metrics>,
    pub notifier: Arc<crate::work::health::Notifier>,
    pub orchestrator: Arc<crate::drive::orchestrator::Orchestrator>,
}

/// The level `percent` stands at, coming from `before`: a mark is left only two points below
/// it, so a disk that hovers on a mark does not tell the admins again and again.
pub fn level_of(settings: &DiskConfig, percent: u8, before: Level) -> Level {
    let past = |mark: u8, level: Level| percent >= mark || (before >= level && percent.saturating_add(2) > mark);
    if past(settings.critical_percent, Level::Critical) {
        Level::Critical
    } else if past(settings.warn_percent, Level::Warning) {
        Level::Warning
    } else {
        Level::Fine
    }
}

impl DiskWatch {
    /// One look at the disk: its figures kept, a level reached told, idle sessions archived
    /// while it is critical.
    pub async fn look(&self) {
        let usage = match crate::base::disk::usage(self.gate.path()) {
            Ok(usage) => usage,
            Err(error) => {
                tracing::warn!(path = %self.gate.path().display(), %error, "cannot read how full the data disk is");
                return;
            }
        };
        self.metrics.set_disk(usage);
        let before = self.gate.level();
        let level = level_of(&self.settings, usage.percent(), before);
        self.gate.set(usage, level);
        if level > before {
            self.tell(level, usage);
        } else if level < before {
            tracing::info!(percent = usage.percent(), path = %self.gate.path().display(), ?level,
                "the data disk has room again");
        }
        if level == Level::Critical {
            let (_, archived) = crate::drive::orchestrator::archive_quiet(&self.orchestrator, true).await;
            if archived > 0 {
                tracing::warn!(archived, "idle sessions archived early: the data disk is nearly full");
            }
        }
    }

    /// Tells the log and the admins that the disk reached `level`.
    fn tell(&self, level: Level, usage: Usage) {
        let (path, percent) = (self.gate.path().display(), usage.percent());
        let free = crate::base::disk::gib(usage.available);
        let room = "Make room: `baaaht sessions list` and `baaaht sessions delete` for old conversations, \
                    `docker system prune` for the engine's leftovers, or a bigger disk.";
        let critical = self.settings.critical_percent;
        let (title, content) = match level {
            Level::Fine => return,
            Level::Warning => {
                tracing::warn!(percent, %path, "the data disk is nearly full");
                (
                    format!("The data disk is {percent}% full"),
                    format!(
                        "The disk baaaht keeps its data on ({path}) is {percent}% full ({free} free). At {critical}% \
                         new conversations and uploads are refused. {room}"
                    ),
                )
            }
            Level::Critical => {
                tracing::error!(percent, %path, "the data disk is critically full: new conversations and uploads are refused");
                (
                    format!("The data disk is {percent}% full: new conversations are refused"),
                    format!(
                        "The disk baaaht keeps its data on ({path}) is {percent}% full ({free} free). New \
                         conversations and uploads are refused until it is below {critical}%, and idle \
                         conversations are archived now; the ones going on go on. {room}"
                    ),
                )
            }
        };
        self.notifier.warn(&title, &content);
    }
}

impl Subsystem for DiskWatch {
    fn name(&self) -> &'static str {
        "disk"
    }

    fn run_until(self: Arc<Self>, shutdown: tokio_util::sync::CancellationToken) -> Work {
        Box::pin(async move {
            let every = Duration::from_millis(self.settings.check_interval.max(1000));
            let watch = &self;
            crate::base::lifetime::every(tokio::time::Instant::now(), every, &shutdown, || async move {
                watch.look().await;
            })
            .await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_reached_at_its_percent_and_left_two_points_below() {
        let settings = DiskConfig::default();
        assert_eq!(level_of(&settings, 89, Level::Fine), Level::Fine);
        assert_eq!(level_of(&settings, 90, Level::Fine), Level::Warning);
        assert_eq!(level_of(&settings, 95, Level::Fine), Level::Critical);
        assert_eq!(level_of(&settings, 94, Level::Critical), Level::Critical, "hovering on the mark");
        assert_eq!(level_of(&settings, 93, Level::Critical), Level::Warning);
        assert_eq!(level_of(&settings, 89, Level::Warning), Level::Warning);
        assert_eq!(level_of(&settings, 88, Level::Warning), Level::Fine);
        assert_eq!(level_of(&settings, 70, Level::Critical), Level::Fine);
    }
}
