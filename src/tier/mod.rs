//! Tiered memory: movable allocations that spill to host memory when the device budget is
//! under pressure, come back when they are used, and move to defragment the arena.
//!
//! CUDA gets this from page faults (unified memory); wgpu has none, so vramkit makes it
//! explicit and predictable: the program says *when* it needs an allocation on the device,
//! and between those moments the arena may move it.
//!
//! ```no_run
//! # fn main() -> vramkit::Result<()> {
//! use vramkit::tier::{TierConfig, Tiers};
//!
//! let rt = vramkit::Runtime::headless()?;
//! let tiers = Tiers::new(rt.arena(), TierConfig::default())?;
//! let weights = tiers.alloc(64 << 20, "weights")?; // device-resident to start with
//! {
//!     let resident = tiers.make_resident(&[&weights])?; // pinned until its work completes
//!     let w = resident.elements::<f32>(&weights)?;
//!     let mut batch = rt.batch();
//!     batch.fill(1.0, w)?;
//!     batch.submit()?;
//! } // the pin ends when the submitted work completes
//! tiers.evict(&[&weights])?; // now in host memory; the next make_resident brings it back
//! # Ok(()) }
//! ```
//!
//! # How it works
//! A [`Movable`] is a handle; the bytes behind it live in one of two tiers:
//! - **device**: an ordinary arena [`Allocation`], in the pool it was made in;
//! - **host**: a range of the host tier (`host.rs`), host memory the GPU copies into and
//!   out of directly on Vulkan (the staging memory of [`crate::stream`]).
//!
//! [`Tiers::make_resident`] takes a set of handles at once, brings those on the host back
//! (an arena allocation, then one GPU copy each, all in one submission), and returns a
//! [`Resident`] guard that *pins* them and hands out their current bindings. When the
//! guard drops, the pins turn into an *in-flight* mark that clears once the GPU has
//! finished the work submitted before the drop (an epoch of the device's work-done tracker,
//! `gpu/work_done.rs`, which the arena's frees wait for too).
//!
//! Eviction copies an allocation to a host range and drops the device allocation; the
//! arena hands its range out again only after the copy has finished, so nothing else can
//! overwrite the bytes before they are out. It happens:
//! - in the arena's allocation path, when a request would cross the budget or a quota:
//!   after waiting once for its own frees in flight and before reporting out-of-memory,
//!   the arena asks the tier for memory back
//!   (any allocation, movable or not, benefits), and the tier evicts movables least
//!   recently made resident first, lower [`priority`](Movable::set_priority) first, at
//!   least 1/32 of the budget (up to 64 MiB) at a time, so the requests after it find
//!   room without waiting for the GPU;
//! - on demand ([`Tiers::evict`], [`Tiers::evict_bytes`]).
//!
//! [`Tiers::defragment`] moves device-resident movables out of the emptiest blocks into
//! the free space of fuller ones with `copy_buffer_to_buffer`, then gives the emptied
//! blocks back (see `defrag.rs`).
//!
//! # What it promises
//! - **Pinned or in-flight allocations are never moved**: a movable is moved only while no
//!   [`Resident`] guard holds it and all GPU work submitted before its last guard dropped
//!   has completed. The rule for the guard is the arena's rule for allocations: *drop it
//!   only after the work recorded on its bindings is submitted* (vramkit's batches borrow
//!   the guard's allocations until they submit, so dropping it earlier does not compile).
//! - **The bytes survive every move**: each move is one GPU copy, queued before anything
//!   that could read the new place or reuse the old one. A handle whose bytes are being
//!   moved by another thread is waited for, never read half-moved.
//! - **Plain [`Allocation`]s never move.** Only a block whose every live range is an
//!   unpinned movable is emptied by defragmentation.
//! - **Accounting is exact**: device bytes are the arena's (a movable on the device is an
//!   ordinary allocation, counted under its label); host bytes are [`TierStats::host_bytes`],
//!   bounded by [`TierConfig::host_budget`]. When an eviction would cross the host budget
//!   while the device budget is full, the request fails with
//!   [`Limit::HostTier`](crate::arena::Limit::HostTier) and nothing moves.
//! - **No lock of ours is held** while polling, waiting or submitting, or while calling
//!   the arena (whose allocation path may call back into the tier). The tiers' lock ranks
//!   `lock_rank::TIER`: above the queue lock (a callback may drop a guard or a handle) and
//!   below the arena's (a move drops a device allocation under it); `src/sync/rank.rs`.
//! - **Identity survives reuse**: every entry carries a generation, new whenever a slot
//!   gets a new movable or a movable a new place; whatever was decided on a snapshot
//!   (a defragmentation's plan) checks it, the pins and the in-flight mark again under the
//!   lock before acting, and `evict` re-reads pins and in-flight marks after every wait.
//! - **A wgpu error moves nothing**: evictions, restores and defragmenting copies are
//!   recorded and submitted in an error scope; on an error every entry touched goes back
//!   to where it was and the call returns the typed error.

pub(crate) mod copy;
mod defrag;
mod disposer;
mod evict;
mod host;
#[cfg(feature = "metrics")]
mod metrics;
mod movable;
mod passes;
mod recover;
mod state;
mod stats;

pub use defrag::{DefragLimits, DefragReport};
pub use movable::{Movable, MovableId, Resident, Tier};
pub use passes::{DefragOptions, DefragPass, Defragmentation, PassReport};
pub use recover::MovablesRecovered;
pub use stats::TierStats;

use std::sync::{Arc, Weak};
use web_time::Instant;

use parking_lot::Condvar;

use crate::sync::rank::MutexGuard;

use crate::arena::{Allocation, EventKind, PoolId};
use crate::{Arena, Error, Gpu, Result};
use evict::HOST_FULL;
use host::{HostRange, HostTier};
pub(crate) use state::{Counters, Entry, Place, TierState};

/// How the tiers are configured.
#[derive(Clone, Debug, Default)]
pub struct TierConfig {
    /// Bytes of host memory evicted allocations may hold (`None`: no limit beyond what the
    /// system gives).
    pub host_budget: Option<u64>,
}

/// Movable allocations over one [`Arena`], and the host tier they spill to. Cheap to clone
/// (clones share everything), `Send` and `Sync`. One per arena.
#[derive(Clone)]
pub struct Tiers {
    shared: Arc<TierShared>,
}

pub(crate) struct TierShared {
    /// The arena and its device: replaced when the runtime recovers from a lost device
    /// (`recover.rs`), so read through [`TierShared::arena`] and [`TierShared::gpu`].
    on: parking_lot::RwLock<(Arena, Gpu)>,
    state: state::TierLock,
    /// Signalled whenever a move finishes (see [`Place::Moving`]).
    moved: Condvar,
}

impl TierShared {
    /// The arena the device tier lives in now.
    fn arena(&self) -> Arena {
        let _rank = crate::sync::rank::Held::take(crate::sync::rank::TIER_DEVICE);
        self.on.read().0.clone()
    }

    /// Its device.
    fn gpu(&self) -> Gpu {
        let _rank = crate::sync::rank::Held::take(crate::sync::rank::TIER_DEVICE);
        self.on.read().1.clone()
    }
}

/// The distinct pools of `pools`, by index.
pub(crate) fn distinct_pools(pools: impl Iterator<Item = PoolId>) -> Vec<PoolId> {
    let mut pools: Vec<PoolId> = pools.collect();
    pools.sort_unstable_by_key(|p| p.index());
    pools.dedup();
    pools
}

/// One planned restore: the entry (marked moving), where its bytes go and come from.
struct Restore {
    slot: u32,
    pool: PoolId,
    size: u64,
    label: Arc<str>,
    from: HostRange,
}

impl Restore {
    /// The restore of `e` (in `slot`) if it is in the host tier, marking it moving.
    fn take(slot: u32, e: &mut Entry) -> Option<Restore> {
        if !matches!(e.place, Place::Host(_)) {
            return None;
        }
        let Place::Host(from) = std::mem::replace(&mut e.place, Place::Moving) else {
            return None;
        };
        Some(Restore {
            slot,
            pool: e.pool,
            size: e.size,
            label: e.label.clone(),
            from,
        })
    }
}

impl Tiers {
    /// Tiered memory over `arena`: movable allocations in its pools, evicted under its
    /// budget. Fails if the arena already has one.
    pub fn new(arena: &Arena, config: TierConfig) -> Result<Tiers> {
        if arena.is_dry_run() {
            return Err(crate::Error::invalid(
                "tiered memory over a dry run's arena (it has no bytes to move)",
                "plan tiered workloads with a real run, or dry-run the code without Tiers",
            ));
        }
        let gpu = arena.gpu().clone();
        let shared = Arc::new(TierShared {
            on: parking_lot::RwLock::new((arena.clone(), gpu.clone())),
            state: state::TierLock::new(TierState {
                entries: Vec::new(),
                free_slots: Vec::new(),
                next_generation: 0,
                host: HostTier::new(&gpu, config.host_budget),
                tick: 0,
                counters: Counters::default(),
            }),
            moved: Condvar::new(),
        });
        let weak: Weak<TierShared> = Arc::downgrade(&shared);
        arena.set_relief(weak)?;
        Ok(Tiers { shared })
    }

    /// The arena the device tier lives in (after a recovery, the runtime's new arena).
    pub fn arena(&self) -> Arena {
        self.shared.arena()
    }

    /// A movable allocation of `size` bytes in the arena's default pool, on the device.
    /// Over the budget, less recently used movables are evicted to make room.
    pub fn alloc(&self, size: u64, label: &str) -> Result<Movable> {
        self.alloc_in(self.shared.arena().default_pool(), size, label)
    }

    /// [`alloc`](Self::alloc) in `pool`.
    pub fn alloc_in(&self, pool: PoolId, size: u64, label: &str) -> Result<Movable> {
        let a = self.shared.alloc_device(pool, size, label)?;
        let size = a.size();
        let label: Arc<str> = Arc::from(label);
        let id = MovableId::next();
        let mut st = self.shared.state.lock();
        st.tick += 1;
        let last_use = st.tick;
        let slot = st.insert(Entry {
            size,
            label,
            pool,
            priority: 0,
            place: Place::Device(Arc::new(a)),
            pins: 0,
            busy_until: 0,
            last_use,
            dropped: false,
            generation: 0,
            id,
            restore: None,
        });
        drop(st);
        Ok(Movable {
            tiers: self.shared.clone(),
            slot,
            size,
            id,
        })
    }

    /// Makes every handle of `set` device-resident and pins it until the returned guard
    /// drops and the GPU work submitted before that completes; see the module docs. Those
    /// on the host come back in one submission (allocating room may evict others). On an
    /// error nothing is pinned and every handle stays where it was.
    pub fn make_resident<'a>(&self, set: &[&'a Movable]) -> Result<Resident<'a>> {
        self.shared.gpu().check_alive()?;
        for m in set {
            self.check(m)?;
        }
        let mut slots: Vec<u32> = set.iter().map(|m| m.slot).collect();
        slots.sort_unstable();
        slots.dedup();
        let start = Instant::now();
        let shared = &self.shared;
        let mut st = shared.state.lock();
        st = shared.wait_not_moving(st, &slots);
        // Bytes lost with a device fail here, before anything is pinned.
        if let Some(e) = slots
            .iter()
            .filter_map(|&s| st.get(s))
            .find(|e| matches!(e.place, Place::Lost))
        {
            let lost = recover::lost_movable(&e.label, &shared.gpu().info().name);
            drop(st);
            return Err(lost);
        }
        st.tick += 1;
        let tick = st.tick;
        let mut restores = Vec::new();
        for &slot in &slots {
            let Some(e) = st.entry(slot) else { continue };
            e.pins += 1;
            e.last_use = tick;
            restores.extend(Restore::take(slot, e));
        }
        drop(st);
        let restored = if restores.is_empty() {
            Ok(())
        } else {
            shared.restore(restores)
        };
        let mut st = shared.state.lock();
        if let Err(e) = restored {
            for &slot in &slots {
                if let Some(e) = st.entry(slot) {
                    e.pins -= 1;
                }
            }
            drop(st);
            return Err(e);
        }
        let mut held = Vec::with_capacity(slots.len());
        for &slot in &slots {
            if let Some(Entry {
                place: Place::Device(a),
                ..
            }) = st.entry(slot)
            {
                held.push((slot, a.clone()));
            }
        }
        if !set.is_empty() {
            st.counters.stall += start.elapsed();
        }
        drop(st);
        Ok(Resident::new(shared.clone(), held))
    }

    /// Starts bringing `set` back to the device without pinning it: the copies are queued
    /// behind the work already submitted and the call returns without waiting for them
    /// (unless room had to be made: evicting waits for the copies out), so the CPU can
    /// record the next work meanwhile; a later [`make_resident`](Self::make_resident)
    /// finds them there unless pressure evicted them again. On one wgpu queue the copies
    /// do not run at the same time as kernels (BENCHMARKS.md, tiered memory).
    pub fn prefetch(&self, set: &[&Movable]) -> Result<()> {
        self.make_resident(set).map(drop)
    }

    /// Moves every handle of `set` that is on the device to host memory now. Fails, moving
    /// nothing, if one is pinned by a live [`Resident`], also by one made while this call
    /// waited; waits for GPU work still using them. Returns the bytes moved.
    pub fn evict(&self, set: &[&Movable]) -> Result<u64> {
        self.shared.gpu().check_alive()?;
        for m in set {
            self.check(m)?;
        }
        let shared = &self.shared;
        let slots: Vec<u32> = set.iter().map(|m| m.slot).collect();
        let mut st = shared.state.lock();
        // Pins, places and in-flight marks are read afresh after every wait: another
        // thread may pin or move a handle while this one waits without the lock.
        loop {
            st = shared.wait_not_moving(st, &slots);
            if let Some(e) = slots.iter().filter_map(|&s| st.get(s)).find(|e| e.pins > 0) {
                let label = e.label.to_string();
                drop(st);
                return Err(Error::invalid(
                    format!("cannot evict '{label}': a Resident guard still pins it"),
                    "drop the guard (after submitting the work that uses it) before evicting",
                ));
            }
            let done = shared.gpu().work_done().done();
            if !slots
                .iter()
                .any(|&s| st.get(s).is_some_and(|e| e.busy_until > done))
            {
                break;
            }
            drop(st);
            shared.settle()?;
            st = shared.state.lock();
        }
        let planned = shared.plan_evictions(&mut st, &slots);
        drop(st);
        shared.run_evictions(planned?)
    }

    /// Evicts unpinned, idle movables, least recently used first, until at least `bytes`
    /// are on the host or none is left; returns the bytes moved (none on a lost device).
    pub fn evict_bytes(&self, bytes: u64) -> u64 {
        if self.shared.gpu().lost().is_some() {
            return 0;
        }
        self.shared.evict_lru(bytes, None)
    }

    /// Counters and tier sizes.
    pub fn stats(&self) -> TierStats {
        self.shared.stats()
    }

    /// Changes the host tier's budget; host memory already held stays until it is freed.
    pub fn set_host_budget(&self, budget: Option<u64>) {
        self.shared.state.lock().host.set_budget(budget);
    }

    /// Checks the tiers' invariants (numbered in `src/tier/state.rs`: entries, pins,
    /// places, host ranges against host blocks) and then the arena's
    /// ([`Arena::check_invariants`]); returns the first one broken. Linear in what they
    /// hold: for tests and debugging (the `heavy-checks` feature runs it on every
    /// acquisition of the tiers' lock).
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.shared.state.lock().check_invariants()?;
        self.shared.arena().check_invariants()
    }

    /// Gives empty host blocks back to the system; returns the bytes given back.
    pub fn trim(&self) -> u64 {
        let mut st = self.shared.state.lock();
        let bytes = st.host.release_empty(0);
        self.shared.unlock(st);
        bytes
    }

    fn check(&self, m: &Movable) -> Result<()> {
        if Arc::ptr_eq(&m.tiers, &self.shared) {
            return Ok(());
        }
        Err(Error::misuse(
            crate::Misuse::Foreign,
            "a movable allocation of another Tiers was passed",
            "pass handles made by this Tiers (one Tiers per arena)",
        ))
    }
}

impl TierShared {
    /// Brings the movables of `slots` that are in the host tier back to the device, without
    /// pinning them (a recovery's last step, `recover.rs`).
    fn restore_slots(&self, slots: &[u32]) -> Result<()> {
        let mut st = self.state.lock();
        st = self.wait_not_moving(st, slots);
        let mut restores = Vec::new();
        for &slot in slots {
            let Some(e) = st.entry(slot) else { continue };
            restores.extend(Restore::take(slot, e));
        }
        drop(st);
        if restores.is_empty() {
            return Ok(());
        }
        self.restore(restores)
    }

    /// Releases the state lock, then destroys host blocks given back while it was held.
    fn unlock(&self, mut st: MutexGuard<'_, TierState>) {
        let doomed = std::mem::take(&mut st.host.doomed);
        drop(st);
        for b in doomed {
            b.buffer().destroy();
        }
    }

    /// Waits (releasing the lock) until no entry of `slots` is being moved.
    fn wait_not_moving<'s>(
        &'s self,
        mut st: MutexGuard<'s, TierState>,
        slots: &[u32],
    ) -> MutexGuard<'s, TierState> {
        while slots.iter().any(|&s| {
            matches!(
                st.get(s),
                Some(Entry {
                    place: Place::Moving,
                    ..
                })
            )
        }) {
            self.moved.wait(&mut st.guard);
        }
        st
    }

    /// A device allocation for a movable. An out-of-memory error that came after the host
    /// tier refused an eviction says that both tiers are full.
    fn alloc_device(&self, pool: PoolId, size: u64, label: &str) -> Result<Allocation> {
        HOST_FULL.with(|f| f.set(false));
        let result = self.arena().alloc_in(pool, size, label);
        match result {
            Err(Error::OutOfMemory(mut o)) if HOST_FULL.with(|f| f.get()) => {
                o.limit = crate::arena::Limit::HostTier;
                o.limit_bytes = self.state.lock().host.budget();
                o.hint = host::BOTH_FULL_HINT.to_string();
                Err(Error::OutOfMemory(o))
            }
            other => other,
        }
    }

    /// Makes all GPU work submitted so far complete and its in-flight marks clear (the
    /// wait completes every epoch handed out before it, `gpu/work_done.rs`).
    fn settle(&self) -> Result<()> {
        self.gpu().wait_idle()
    }

    /// Brings `restores` (entries already marked moving and pinned) back to the device:
    /// allocations first, then one submission of copies. On an error every entry goes back
    /// to its host range.
    fn restore(&self, restores: Vec<Restore>) -> Result<()> {
        let mut allocated = Vec::with_capacity(restores.len());
        for r in &restores {
            match self.alloc_device(r.pool, r.size, &r.label) {
                Ok(a) => allocated.push(a),
                Err(e) => {
                    self.unrestore(restores, allocated);
                    return Err(e);
                }
            }
        }
        let copies: Vec<copy::Copy<'_>> = restores
            .iter()
            .zip(&allocated)
            .map(|(r, a)| copy::Copy {
                src: r.from.block.buffer(),
                src_offset: r.from.offset(),
                dst: a.buffer(),
                dst_offset: a.offset(),
                bytes: r.size,
            })
            .collect();
        let copied = copy::submit_commands(
            &self.gpu(),
            "restoring movables to the device",
            "restore",
            &copies,
        );
        drop(copies);
        if let Err(e) = copied {
            self.unrestore(restores, allocated);
            return Err(e);
        }
        let bytes: u64 = restores.iter().map(|r| r.size).sum();
        let mut st = self.state.lock();
        st.counters.restores += restores.len() as u64;
        st.counters.bytes_restored += bytes;
        for (r, a) in restores.into_iter().zip(allocated) {
            a.note(EventKind::Restore);
            st.host.free(r.from);
            self.commit(&mut st, r.slot, Place::Device(Arc::new(a)));
        }
        self.moved.notify_all();
        self.unlock(st);
        Ok(())
    }

    /// A restore that failed before any copy ran: the bytes are still on the host, where
    /// the entries go back; the device ranges made for them were never used by the GPU.
    fn unrestore(&self, restores: Vec<Restore>, allocated: Vec<Allocation>) {
        let mut st = self.state.lock();
        for r in restores {
            self.commit(&mut st, r.slot, Place::Host(r.from));
        }
        self.moved.notify_all();
        self.unlock(st);
        for a in allocated {
            a.discard_unused();
        }
    }

    /// Puts `place` into the entry of `slot` after a move (a new generation: the entry is
    /// somewhere else now), or frees it if the handle was dropped meanwhile (then the
    /// device allocation, if any, drops with the lock held: the arena's release takes
    /// only the arena's lock, never ours).
    fn commit(&self, st: &mut TierState, slot: u32, place: Place) {
        let dropped = st.entry(slot).is_none_or(|e| e.dropped);
        if !dropped {
            let generation = st.new_generation();
            if let Some(e) = st.entry(slot) {
                e.place = place;
                e.generation = generation;
            }
            return;
        }
        st.remove(slot);
        if let Place::Host(range) = place {
            st.host.free(range);
        }
    }

    /// Marks the end of a [`Resident`] guard: its entries lose a pin and stay in flight
    /// until the GPU finishes what was submitted so far.
    pub(crate) fn unpin(&self, slots: impl Iterator<Item = u32>) {
        let epoch = self.gpu().work_epoch();
        let mut st = self.state.lock();
        for slot in slots {
            if let Some(e) = st.entry(slot) {
                e.pins = e.pins.saturating_sub(1);
                e.busy_until = e.busy_until.max(epoch);
            }
        }
        drop(st);
    }

    /// Frees the entry of a dropped handle.
    pub(crate) fn drop_entry(&self, slot: u32) {
        let mut st = self.state.lock();
        let Some(e) = st.entry(slot) else { return };
        if matches!(e.place, Place::Moving) {
            e.dropped = true;
            return;
        }
        let place = st.remove(slot).map(|e| e.place);
        let device = match place {
            Some(Place::Host(range)) => {
                st.host.free(range);
                None
            }
            Some(Place::Device(a)) => Some(a),
            _ => None,
        };
        self.unlock(st);
        drop(device);
    }
}

impl std::fmt::Debug for Tiers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.stats();
        f.debug_struct("Tiers")
            .field("movables", &s.movables)
            .field("device_bytes", &s.device_bytes)
            .field("host_bytes", &s.host_bytes)
            .finish()
    }
}

// Shared between threads; make the promise checked.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Tiers>();
};
