//! Warm pools (spec §19 "pre-warmed containers", §20.1's pool size, eviction and per-role
//! pools): containers of a role started ahead of demand, so that a new session's first turn
//! does not wait for one to start.
//!
//! A pooled container holds nothing of anyone. It is started with no user's, group's or
//! session's mount and its own daemon socket bound to nobody: the token in its environment
//! authenticates its calls, and every call waits, answered by nothing, until a session claims
//! it and the daemon binds it (`ContainerManager::claim`: the socket's identity, once; the
//! inventory). What an agent learns of its session it learns from the answer to the call it
//! made while it waited (RegisterAgent). A container that served a session is never returned
//! to a pool: it is removed when its session is done with it.
//!
//! Each role's pool keeps as many containers ready as new sessions claimed in the last
//! [`DEMAND_WINDOW`], at least its floor and at most its ceiling (`container.pools`), one
//! start at a time, and never past the container cap (it leaves [`KEEP_FREE`] slots for work)
//! or the host's free memory. When a start waits for a slot, a pooled container is the first
//! to go (`work::slots`). Pooled containers are tasks to the inventory: a daemon that crashed
//! with a full pool finds them at its next start and removes them.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::base::auth::{Context, Role};
use crate::base::config::PoolSize;
use crate::base::lifetime::{Subsystem, Work};
use crate::sandbox::container::manager::{ContainerManager, RunRequest};
use crate::sandbox::container::{ContainerKind, Isolation};

/// How far back claims count toward a pool's size.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(300);
/// Container slots a pool leaves free for work.
pub const KEEP_FREE: usize = 2;
/// Memory the host keeps free beyond a pooled container's limit.
const MEMORY_RESERVE: u64 = 256 << 20;
/// How long a pooled container may take to come up (its first call waiting).
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the pools look again with nothing to wake them.
const LOOK_EVERY: Duration = Duration::from_secs(5);
/// The longest a pool waits after its starts failed.
const MOST_BACKOFF: Duration = Duration::from_secs(60);
/// How long after a claim a pool that still has a container ready waits before it starts
/// another: a new session's first turn claims one container after another (its Assistant,
/// a Worker, a tool container), and a start beside it takes the cores it runs on.
const SETTLE: Duration = Duration::from_millis(250);

/// What a pooled container holds beside itself (a tool container's workspace and IPC folder,
/// made before it started): handed to the session that claims it, dropped on the blocking
/// pool when the container is removed unclaimed.
pub type Held = Box<dyn std::any::Any + Send>;

/// A pooled container's request (no session, no context, no mount of anyone's) and what it
/// holds, or why it cannot be made.
pub type Made = std::pin::Pin<Box<dyn std::future::Future<Output = Result<(RunRequest, Held), String>> + Send>>;

/// How a pooled container of a role is started.
pub type Starter = Arc<dyn Fn(Role) -> Made + Send + Sync>;

/// A ready container in a pool.
struct Pooled {
    name: String,
    tier: Isolation,
    held: Held,
}

impl std::fmt::Debug for Pooled {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pooled").field("name", &self.name).field("tier", &self.tier).finish_non_exhaustive()
    }
}

/// One role's pool.
#[derive(Debug, Default)]
struct Pool {
    ready: VecDeque<Pooled>,
    /// Containers starting for it now.
    starting: usize,
    /// When sessions claimed (or asked for) one, within [`DEMAND_WINDOW`].
    claims: VecDeque<Instant>,
    /// No start before this (after failures).
    paused_until: Option<Instant>,
    failures: u32,
}

impl Pool {
    fn demand(&mut self, now: Instant) -> usize {
        while self.claims.front().is_some_and(|at| now.duration_since(*at) > DEMAND_WINDOW) {
            self.claims.pop_front();
        }
        self.claims.len()
    }
}

/// Every role's warm pool.
pub struct WarmPools {
    containers: Arc<ContainerManager>,
    sizes: HashMap<Role, PoolSize>,
    starters: Mutex<HashMap<Role, Starter>>,
    pools: Mutex<HashMap<Role, Pool>>,
    /// Pooled containers to remove: stale ones a claim passed over, one whose claim failed or
    /// was dropped half-way, one whose removal failed (the engine away). The fill loop removes
    /// them, so a claim never waits on a removal.
    discard: Mutex<Vec<(String, Held)>>,
    /// Claimed containers being handed to their sessions now: no pool starts one meanwhile.
    handing: std::sync::atomic::AtomicUsize,
    wake: tokio::sync::Notify,
}

/// A claimed container being handed over: while one is, no pool starts a container (a start
/// makes a filesystem, mounts it and starts a sandbox, on the cores and the mount table the
/// handover needs). Dropped when the session holds it (or gave up on it).
#[must_use = "the pools start again as soon as it is dropped"]
pub struct Handover<'a> {
    pools: &'a WarmPools,
}

impl Drop for Handover<'_> {
    fn drop(&mut self) {
        self.pools.handing.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        self.pools.wake.notify_one();
    }
}

/// A pooled container taken out of its pool for a claim: discarded when dropped, unless the
/// claim succeeded and kept it.
struct Taken<'a> {
    pools: &'a WarmPools,
    pooled: Option<(String, Held)>,
}

impl Taken<'_> {
    fn keep(mut self) -> Option<(String, Held)> {
        self.pooled.take()
    }
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(pooled) = self.pooled.take() {
            self.pools.discard(pooled);
        }
    }
}

impl std::fmt::Debug for WarmPools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WarmPools").field("sizes", &self.sizes).finish_non_exhaustive()
    }
}

impl WarmPools {
    /// The pools of the roles `sizes` gives a ceiling above 0.
    pub fn new(containers: Arc<ContainerManager>, sizes: impl IntoIterator<Item = (Role, PoolSize)>) -> WarmPools {
        let sizes = sizes.into_iter().filter(|(_, size)| size.ceiling > 0).collect();
        WarmPools {
            containers,
            sizes,
            starters: Mutex::default(),
            pools: Mutex::default(),
            discard: Mutex::default(),
            handing: std::sync::atomic::AtomicUsize::new(0),
            wake: tokio::sync::Notify::new(),
        }
    }

    /// How containers of `role` are started for its pool (its room registers it: agents, tool
    /// containers). A role without a starter has no pool.
    pub fn starts(&self, role: Role, starter: Starter) {
        self.starters.lock().unwrap_or_else(PoisonError::into_inner).insert(role, starter);
        self.wake.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Role, Pool>> {
        self.pools.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `role` has a pool (a ceiling above 0).
    pub fn pools(&self, role: Role) -> bool {
        self.sizes.contains_key(&role)
    }

    /// Whether `role`'s pool has a container ready now.
    pub fn has_ready(&self, role: Role) -> bool {
        self.lock().get(&role).is_some_and(|pool| !pool.ready.is_empty())
    }

    /// Containers ready in every pool, by role, for status and benchmarks.
    pub fn ready(&self) -> Vec<(Role, usize)> {
        let mut ready: Vec<(Role, usize)> =
            self.lock().iter().map(|(role, pool)| (*role, pool.ready.len())).filter(|(_, n)| *n > 0).collect();
        ready.sort();
        ready
    }

    /// The names of the containers ready in the pools.
    pub fn names(&self) -> Vec<String> {
        self.lock().values().flat_map(|pool| pool.ready.iter().map(|pooled| pooled.name.clone())).collect()
    }

    /// A ready container of `role` bound to `session_id` and `context` (recorded as `kind`),
    /// what it holds, and the handover that holds the pools' starts off until it is dropped,
    /// if its pool has one of the tier `role` runs under now; none: start one cold. Counts
    /// toward the pool's demand either way (a pool refills after the handover, see [`SETTLE`]).
    pub async fn claim(
        &self,
        role: Role,
        session_id: &str,
        context: &Context,
        kind: ContainerKind,
    ) -> Option<(String, Held, Handover<'_>)> {
        if !self.pools(role) {
            return None;
        }
        self.handing.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        let handover = Handover { pools: self };
        self.lock().entry(role).or_default().claims.push_back(Instant::now());
        let tier = self.containers.tier(role).await?;
        loop {
            let Pooled { name, tier: started_under, held } =
                self.lock().get_mut(&role).and_then(|pool| pool.ready.pop_front())?;
            let taken = Taken { pools: self, pooled: Some((name.clone(), held)) };
            // Started before the tier changed (gVisor stopped or came back), or its process
            // gone: not this one.
            if started_under != tier || !self.containers.pooled_waiting(&name) {
                continue;
            }
            match self.containers.claim(&name, session_id, context, kind).await {
                Ok(_) => {
                    tracing::info!(container = %name, role = role.as_str(), session = session_id, "claimed a pooled container");
                    return taken.keep().map(|(name, held)| (name, held, handover));
                }
                Err(error) => tracing::warn!(container = %name, %error, "cannot claim a pooled container; removing it"),
            }
        }
    }

    /// Puts a pooled container on the list the fill loop removes.
    fn discard(&self, pooled: (String, Held)) {
        self.discard.lock().unwrap_or_else(PoisonError::into_inner).push(pooled);
        self.wake.notify_one();
    }

    /// Removes the discarded containers; one the engine cannot remove now stays on the list.
    async fn remove_discarded(&self) {
        let discarded = std::mem::take(&mut *self.discard.lock().unwrap_or_else(PoisonError::into_inner));
        let mut discarded = discarded.into_iter();
        while let Some((name, held)) = discarded.next() {
            if !self.remove(name, held).await {
                // The engine is away: the rest wait with it for the next look.
                self.discard.lock().unwrap_or_else(PoisonError::into_inner).extend(discarded);
                return;
            }
        }
    }

    /// Removes one pooled container (of the pool with the most ready) to make room for work;
    /// false when every pool is empty.
    pub async fn evict_one(&self) -> bool {
        let oldest = {
            let mut pools = self.lock();
            let role = pools.iter().max_by_key(|(_, pool)| pool.ready.len()).map(|(role, _)| *role);
            role.and_then(|role| pools.get_mut(&role).and_then(|pool| pool.ready.pop_front()))
        };
        let Some(pooled) = oldest else { return false };
        tracing::info!(container = %pooled.name, "removed a pooled container to make room");
        self.remove(pooled.name, pooled.held).await;
        true
    }

    /// Removes pooled container `name` now, then what it held; one the engine cannot remove
    /// goes on the discard list.
    async fn remove(&self, name: String, held: Held) -> bool {
        match self.containers.stop_service(&name).await {
            Ok(()) => {
                let_go(held).await;
                true
            }
            Err(error) => {
                tracing::warn!(container = name, %error, "cannot remove a pooled container; trying again later");
                self.discard.lock().unwrap_or_else(PoisonError::into_inner).push((name, held));
                false
            }
        }
    }

    /// The role whose pool is furthest below its size, if one is and may start one now.
    fn next_start(&self, now: Instant) -> Option<Role> {
        let starters = self.starters.lock().unwrap_or_else(PoisonError::into_inner);
        let mut pools = self.lock();
        let mut wanted: Vec<(usize, Role)> = vec![];
        for (role, size) in &self.sizes {
            if !starters.contains_key(role) {
                continue;
            }
            let pool = pools.entry(*role).or_default();
            if pool.paused_until.is_some_and(|until| now < until) {
                continue;
            }
            let target = pool.demand(now).clamp(size.floor as usize, size.ceiling as usize);
            let have = pool.ready.len() + pool.starting;
            if have < target {
                wanted.push((target - have, *role));
            }
        }
        // The most wanted first; Assistants before the roles they delegate to.
        wanted.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        wanted.first().map(|(_, role)| *role)
    }

    /// How long the start of a container for `role`'s pool waits: while a claimed container is
    /// handed over, and for [`SETTLE`] after the last claim when the pool still has one ready
    /// (an empty pool starts at once, the next session may need it).
    fn hold_off(&self, role: Role, now: Instant) -> Option<Duration> {
        if self.handing.load(std::sync::atomic::Ordering::Acquire) > 0 {
            return Some(SETTLE);
        }
        let pools = self.lock();
        if pools.get(&role).is_none_or(|pool| pool.ready.is_empty()) {
            return None;
        }
        let last = pools.values().filter_map(|pool| pool.claims.back()).max()?;
        SETTLE.checked_sub(now.duration_since(*last)).filter(|wait| !wait.is_zero())
    }

    /// Whether the host has room for one more container of `role` beside the work it does
    /// (more than [`KEEP_FREE`] slots free, and more than the slots kept free ahead of starts:
    /// a pooled start never has an agent removed to keep them).
    fn room_for(&self, role: Role) -> bool {
        if self.containers.slots_free() <= KEEP_FREE.max(self.containers.kept_free()) {
            return false;
        }
        crate::base::host::meminfo("MemAvailable")
            .is_none_or(|free| free >= self.containers.memory_limit(role) + MEMORY_RESERVE)
    }

    /// Starts one container for `role`'s pool and waits until it is up.
    async fn fill(&self, role: Role) {
        let starter = self.starters.lock().unwrap_or_else(PoisonError::into_inner).get(&role).cloned();
        let Some(starter) = starter else { return };
        self.lock().entry(role).or_default().starting += 1;
        let ready = match starter(role).await {
            Ok((request, held)) => match self.containers.start_pooled(request).await {
                Ok((handle, tier)) => {
                    let up = tokio::time::timeout(READY_TIMEOUT, self.containers.pooled_ready(&handle.name)).await;
                    if matches!(up, Ok(true)) {
                        Ok(Pooled { name: handle.name, tier, held })
                    } else {
                        let why =
                            format!("container {} did not come up within {} s", handle.name, READY_TIMEOUT.as_secs());
                        self.remove(handle.name, held).await;
                        Err(why)
                    }
                }
                Err(error) => {
                    let_go(held).await;
                    Err(baaaht_proto::error_chain(&error))
                }
            },
            Err(why) => Err(why),
        };
        let mut pools = self.lock();
        let pool = pools.entry(role).or_default();
        pool.starting -= 1;
        match ready {
            Ok(pooled) => {
                tracing::debug!(container = %pooled.name, role = role.as_str(), "a pooled container is ready");
                pool.ready.push_back(pooled);
                pool.failures = 0;
                pool.paused_until = None;
            }
            Err(why) => {
                pool.failures += 1;
                let wait = (Duration::from_secs(5) * 2u32.saturating_pow(pool.failures.min(4))).min(MOST_BACKOFF);
                pool.paused_until = Some(Instant::now() + wait);
                tracing::warn!(role = role.as_str(), %why, retry_in_s = wait.as_secs(), "cannot fill a warm pool");
            }
        }
    }

    /// Keeps the pools filled until `cancel`: one start at a time, so a pool never takes both
    /// cores from the work it is there for.
    async fn keep_filled(self: Arc<Self>, cancel: CancellationToken) {
        while !cancel.is_cancelled() {
            tokio::select! {
                () = self.remove_discarded() => {}
                () = cancel.cancelled() => break,
            }
            let next = self.next_start(Instant::now()).filter(|role| self.room_for(*role));
            if let Some(wait) = next.and_then(|role| self.hold_off(role, Instant::now())) {
                tokio::select! {
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(wait) => {}
                    () = cancel.cancelled() => {}
                }
                continue;
            }
            match next {
                // A start cut short leaves its container to the manager's shutdown.
                Some(role) => tokio::select! {
                    () = self.fill(role) => {}
                    () = cancel.cancelled() => {}
                },
                None => tokio::select! {
                    () = self.wake.notified() => {}
                    () = tokio::time::sleep(LOOK_EVERY) => {}
                    () = cancel.cancelled() => {}
                },
            }
        }
        self.empty().await;
    }

    /// Lets go of what every pooled container held (at shutdown; the containers themselves go
    /// with the rest, all at once, in `ContainerManager::shutdown`).
    async fn empty(&self) {
        let ready: Vec<Pooled> = self.lock().values_mut().flat_map(|pool| pool.ready.drain(..)).collect();
        let discarded = std::mem::take(&mut *self.discard.lock().unwrap_or_else(PoisonError::into_inner));
        let held = ready.into_iter().map(|pooled| pooled.held).chain(discarded.into_iter().map(|(_, held)| held));
        let held: Vec<Held> = held.collect();
        let_go(Box::new(held)).await;
    }
}

/// Drops what a pooled container held (unmounting its filesystems) on the blocking pool.
pub(crate) async fn let_go(held: Held) {
    if let Err(error) = tokio::task::spawn_blocking(move || drop(held)).await {
        tracing::warn!(%error, "cannot let go of what a pooled container held");
    }
}

impl Subsystem for WarmPools {
    fn name(&self) -> &'static str {
        "pools"
    }

    fn run_until(self: Arc<Self>, shutdown: CancellationToken) -> Work {
        Box::pin(self.keep_filled(shutdown))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_follows_the_claims_of_the_last_minutes_between_floor_and_ceiling() {
        let mut pool = Pool::default();
        let now = Instant::now();
        assert_eq!(pool.demand(now), 0);
        for _ in 0..3 {
            pool.claims.push_back(now);
        }
        assert_eq!(pool.demand(now), 3);
        assert_eq!(pool.demand(now + DEMAND_WINDOW + Duration::from_secs(1)), 0, "old claims no longer count");
        let size = PoolSize { floor: 1, ceiling: 4 };
        assert_eq!(0usize.clamp(size.floor as usize, size.ceiling as usize), 1);
        assert_eq!(9usize.clamp(size.floor as usize, size.ceiling as usize), 4);
    }
}
