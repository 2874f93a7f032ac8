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
//! finished the work submitted before the drop (`Queue::on_submitted_work_done`, the same
//! completion tracking the arena uses for its frees).
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
//!   below the arena's (a move drops a device allocation under it); `src/lock_rank.rs`.
//! - **Identity survives reuse**: every entry carries a generation, new whenever a slot
//!   gets a new movable or a movable a new place; whatever was decided on a snapshot
//!   (a defragmentation's plan) checks it, the pins and the in-flight mark again under the
//!   lock before acting, and `evict` re-reads pins and in-flight marks after every wait.
//! - **A wgpu error moves nothing**: evictions, restores and defragmenting copies are
//!   recorded and submitted in an error scope; on an error every entry touched goes back
//!   to where it was and the call returns the typed error.

mod copy;
mod defrag;
mod host;
#[cfg(feature = "metrics")]
mod metrics;
mod movable;
mod stats;

pub use defrag::{DefragLimits, DefragReport};
pub use movable::{Movable, Resident, Tier};
pub use stats::TierStats;

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Condvar;

use crate::lock_rank::{self, Mutex, MutexGuard};

use crate::arena::{Allocation, EventKind, PoolId, Relief};
use crate::{Arena, Error, Gpu, Result};
use host::{HostRange, HostTier};

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
    arena: Arena,
    gpu: Gpu,
    state: Mutex<TierState>,
    /// Signalled whenever a move finishes (see [`Place::Moving`]).
    moved: Condvar,
    /// The newest in-flight epoch the GPU has completed.
    done: Arc<AtomicU64>,
    next_epoch: AtomicU64,
}

/// Where a movable's bytes are.
pub(crate) enum Place {
    Device(Arc<Allocation>),
    Host(HostRange),
    /// Being copied by a thread that holds no lock meanwhile; wait on `moved`.
    Moving,
}

pub(crate) struct Entry {
    pub size: u64,
    pub label: Arc<str>,
    pub pool: PoolId,
    pub priority: u8,
    pub place: Place,
    /// Live [`Resident`] guards holding it.
    pub pins: u32,
    /// In flight until `done` reaches this epoch.
    pub busy_until: u64,
    /// `TierState::tick` when last made resident or created.
    pub last_use: u64,
    /// The handle was dropped while a move was under way; the mover frees it.
    pub dropped: bool,
    /// Identity of this entry *and* its place: new whenever a slot gets a new entry or an
    /// entry a new place. Whoever decides on a snapshot (a defragmentation's plan) and
    /// acts after a wait checks it is unchanged first: a slot is reused by the next
    /// movable, and a movable evicted and restored meanwhile is somewhere else.
    pub generation: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub evictions: u64,
    pub restores: u64,
    pub bytes_evicted: u64,
    pub bytes_restored: u64,
    pub defrag_moves: u64,
    pub bytes_defrag_moved: u64,
    pub stall: Duration,
    pub host_full: u64,
    /// Evictions asked for by the arena's allocation path (the rest: by hand).
    pub pressure_evictions: u64,
}

pub(crate) struct TierState {
    pub entries: Vec<Option<Entry>>,
    free_slots: Vec<u32>,
    /// The next [`Entry::generation`].
    next_generation: u64,
    pub host: HostTier,
    pub tick: u64,
    pub counters: Counters,
}

impl Entry {
    /// On the device, unpinned, its handle alive and no GPU work in flight on it once the
    /// GPU has completed epoch `done`: the tiers may move it now.
    pub(crate) fn movable_now(&self, done: u64) -> bool {
        matches!(self.place, Place::Device(_))
            && self.pins == 0
            && !self.dropped
            && self.busy_until <= done
    }
}

impl TierState {
    /// A generation no entry had before.
    fn new_generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    fn insert(&mut self, mut entry: Entry) -> u32 {
        entry.generation = self.new_generation();
        match self.free_slots.pop() {
            Some(i) => {
                self.entries[i as usize] = Some(entry);
                i
            }
            None => {
                self.entries.push(Some(entry));
                (self.entries.len() - 1) as u32
            }
        }
    }

    fn remove(&mut self, slot: u32) -> Option<Entry> {
        let e = self.entries.get_mut(slot as usize)?.take()?;
        self.free_slots.push(slot);
        Some(e)
    }

    pub(crate) fn entry(&mut self, slot: u32) -> Option<&mut Entry> {
        self.entries.get_mut(slot as usize)?.as_mut()
    }

    pub(crate) fn get(&self, slot: u32) -> Option<&Entry> {
        self.entries.get(slot as usize)?.as_ref()
    }

    /// The entry of `slot` if it is still of `generation` (same movable, same place).
    pub(crate) fn entry_of(&mut self, slot: u32, generation: u64) -> Option<&mut Entry> {
        self.entry(slot).filter(|e| e.generation == generation)
    }
}

/// The distinct pools of `pools`, by index.
pub(crate) fn distinct_pools(pools: impl Iterator<Item = PoolId>) -> Vec<PoolId> {
    let mut pools: Vec<PoolId> = pools.collect();
    pools.sort_unstable_by_key(|p| p.index());
    pools.dedup();
    pools
}

/// Under pressure, at least this fraction (1/N) of the budget is evicted at once...
const PRESSURE_BATCH_DIVISOR: u64 = 32;
/// ...but at most this many bytes beyond the request.
const PRESSURE_BATCH_MAX: u64 = 64 << 20;

thread_local! {
    /// Set when this thread's eviction found the host tier full, so the out-of-memory error
    /// the arena then returns can say both tiers are full.
    static HOST_FULL: Cell<bool> = const { Cell::new(false) };
}

/// One planned restore: the entry (marked moving), where its bytes go and come from.
struct Restore {
    slot: u32,
    pool: PoolId,
    size: u64,
    label: Arc<str>,
    from: HostRange,
}

/// One planned eviction: the device allocation taken out of its entry, and its host range.
struct Eviction {
    slot: u32,
    from: Arc<Allocation>,
    to: HostRange,
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
            arena: arena.clone(),
            state: Mutex::new(
                lock_rank::TIER,
                TierState {
                    entries: Vec::new(),
                    free_slots: Vec::new(),
                    next_generation: 0,
                    host: HostTier::new(&gpu, config.host_budget),
                    tick: 0,
                    counters: Counters::default(),
                },
            ),
            gpu,
            moved: Condvar::new(),
            done: Arc::new(AtomicU64::new(0)),
            next_epoch: AtomicU64::new(1),
        });
        let weak: Weak<TierShared> = Arc::downgrade(&shared);
        arena.set_relief(weak)?;
        Ok(Tiers { shared })
    }

    /// The arena the device tier lives in.
    pub fn arena(&self) -> &Arena {
        &self.shared.arena
    }

    /// A movable allocation of `size` bytes in the arena's default pool, on the device.
    /// Over the budget, less recently used movables are evicted to make room.
    pub fn alloc(&self, size: u64, label: &str) -> Result<Movable> {
        self.alloc_in(self.shared.arena.default_pool(), size, label)
    }

    /// [`alloc`](Self::alloc) in `pool`.
    pub fn alloc_in(&self, pool: PoolId, size: u64, label: &str) -> Result<Movable> {
        let a = self.shared.alloc_device(pool, size, label)?;
        let size = a.size();
        let label: Arc<str> = Arc::from(label);
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
        });
        drop(st);
        Ok(Movable {
            tiers: self.shared.clone(),
            slot,
            size,
        })
    }

    /// Makes every handle of `set` device-resident and pins it until the returned guard
    /// drops and the GPU work submitted before that completes; see the module docs. Those
    /// on the host come back in one submission (allocating room may evict others). On an
    /// error nothing is pinned and every handle stays where it was.
    pub fn make_resident<'a>(&self, set: &[&'a Movable]) -> Result<Resident<'a>> {
        self.shared.gpu.check_alive()?;
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
        st.tick += 1;
        let tick = st.tick;
        let mut restores = Vec::new();
        for &slot in &slots {
            let Some(e) = st.entry(slot) else { continue };
            e.pins += 1;
            e.last_use = tick;
            if matches!(e.place, Place::Host(_)) {
                if let Place::Host(range) = std::mem::replace(&mut e.place, Place::Moving) {
                    restores.push(Restore {
                        slot,
                        pool: e.pool,
                        size: e.size,
                        label: e.label.clone(),
                        from: range,
                    });
                }
            }
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
        self.shared.gpu.check_alive()?;
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
            let done = shared.done.load(Ordering::Acquire);
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
        if self.shared.gpu.lost().is_some() {
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
        Err(Error::invalid(
            "a movable allocation of another Tiers was passed",
            "pass handles made by this Tiers (one Tiers per arena)",
        ))
    }
}

impl TierShared {
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
        let result = self.arena.alloc_in(pool, size, label);
        match result {
            Err(Error::OutOfMemory(mut o)) if HOST_FULL.with(|f| f.get()) => {
                o.limit = crate::arena::Limit::HostTier;
                o.budget = self.state.lock().host.budget();
                o.hint = host::BOTH_FULL_HINT.to_string();
                Err(Error::OutOfMemory(o))
            }
            other => other,
        }
    }

    /// Makes all GPU work submitted so far complete and its in-flight marks clear (an empty
    /// submission first: wgpu files a completion callback registered while nothing was in
    /// flight with the *next* submission).
    fn settle(&self) -> Result<()> {
        self.gpu.submit([]);
        self.gpu.wait_idle()
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
            &self.gpu,
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

    /// Takes the device allocations of `slots` out of their entries (marking them moving)
    /// with a host range each. Entries not on the device are skipped. On a full host tier
    /// nothing is taken and the error says so.
    fn plan_evictions(&self, st: &mut TierState, slots: &[u32]) -> Result<Vec<Eviction>> {
        let mut planned: Vec<Eviction> = Vec::new();
        for &slot in slots {
            let Some(e) = st.get(slot) else {
                continue;
            };
            if !matches!(e.place, Place::Device(_)) {
                continue;
            }
            let (size, label) = (e.size, e.label.clone());
            match st.host.alloc(size, &label) {
                Ok(to) => {
                    let Some(e) = st.entry(slot) else { continue };
                    if let Place::Device(from) = std::mem::replace(&mut e.place, Place::Moving) {
                        planned.push(Eviction { slot, from, to });
                    }
                }
                Err(err) => {
                    st.counters.host_full += 1;
                    for p in planned {
                        st.host.free(p.to);
                        if let Some(e) = st.entry(p.slot) {
                            e.place = Place::Device(p.from);
                        }
                    }
                    return Err(err);
                }
            }
        }
        Ok(planned)
    }

    /// Records and submits the copies of `planned`, then commits: entries point at their
    /// host ranges and the device allocations drop (the arena reuses their ranges after
    /// the copies finish). Returns the bytes moved. When wgpu refuses the copies (a lost
    /// device), every entry goes back to its device allocation and nothing moved.
    fn run_evictions(&self, planned: Vec<Eviction>) -> Result<u64> {
        if planned.is_empty() {
            return Ok(0);
        }
        let copies: Vec<copy::Copy<'_>> = planned
            .iter()
            .map(|p| copy::Copy {
                src: p.from.buffer(),
                src_offset: p.from.offset(),
                dst: p.to.block.buffer(),
                dst_offset: p.to.offset(),
                bytes: p.from.size(),
            })
            .collect();
        let copied = copy::submit_commands(
            &self.gpu,
            "evicting movables to host memory",
            "evict",
            &copies,
        );
        drop(copies);
        let mut st = self.state.lock();
        if let Err(e) = copied {
            for p in planned {
                st.host.free(p.to);
                self.commit(&mut st, p.slot, Place::Device(p.from));
            }
            self.moved.notify_all();
            self.unlock(st);
            return Err(e);
        }
        let bytes: u64 = planned.iter().map(|p| p.from.size()).sum();
        st.counters.evictions += planned.len() as u64;
        st.counters.bytes_evicted += bytes;
        let mut olds = Vec::with_capacity(planned.len());
        for p in planned {
            p.from.note(EventKind::Evict);
            olds.push(p.from);
            self.commit(&mut st, p.slot, Place::Host(p.to));
        }
        self.moved.notify_all();
        self.unlock(st);
        drop(olds);
        // Their ranges come back when the copies finish, not when whatever is submitted
        // next does: the restore waiting for them must not wait for the caller's kernels.
        self.arena.seal_frees();
        Ok(bytes)
    }

    /// Unpinned, device-resident entries in eviction order (other pools than `prefer`
    /// last, then lower priority first, then least recently used first), each with
    /// whether GPU work submitted before its last use may still be running on it.
    fn candidates(&self, st: &TierState, prefer: Option<usize>) -> Vec<(u32, bool)> {
        let done = self.done.load(Ordering::Acquire);
        let mut c: Vec<(bool, u8, u64, u32, bool)> = st
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let e = e.as_ref()?;
                if !matches!(e.place, Place::Device(_)) || e.dropped || e.pins > 0 {
                    return None;
                }
                let other = prefer.is_some_and(|p| p != e.pool.index());
                // Settling the GPU would free a busy one; a pin it would not.
                let busy = e.busy_until > done;
                Some((other, e.priority, e.last_use, i as u32, busy))
            })
            .collect();
        c.sort_unstable();
        c.into_iter().map(|(.., i, busy)| (i, busy)).collect()
    }

    /// Evicts in [`candidates`](Self::candidates) order until `bytes` moved. An entry
    /// whose turn comes while GPU work may still use it makes the first attempt settle
    /// in-flight work and choose again, so the order holds (evicting the next idle entry
    /// instead once evicted a high-priority handle while the low-priority one it should
    /// have spared waited for its callback); after that, busy entries are passed over.
    fn evict_lru(&self, bytes: u64, prefer: Option<usize>) -> u64 {
        let mut moved = 0;
        for attempt in 0..2 {
            let mut st = self.state.lock();
            let order = self.candidates(&st, prefer);
            // (Only the first attempt can settle; the second always ends the loop.)
            let mut chosen = Vec::new();
            let mut sum = moved;
            let mut waiting = false;
            for (slot, busy) in order {
                if sum >= bytes {
                    break;
                }
                if busy {
                    if attempt == 0 {
                        waiting = true;
                        break;
                    }
                    continue;
                }
                sum += st.get(slot).map_or(0, |e| e.size);
                chosen.push(slot);
            }
            if waiting {
                drop(st);
                if self.settle().is_err() {
                    break;
                }
                continue;
            }
            let planned = self.plan_evictions(&mut st, &chosen);
            drop(st);
            match planned {
                Ok(p) => moved += self.run_evictions(p).unwrap_or(0),
                Err(_) => HOST_FULL.with(|f| f.set(true)),
            }
            // Every entry in order was idle or passed over: settling cannot add any.
            break;
        }
        moved
    }

    /// Evicts every movable of whole blocks that hold nothing else, blocks whose members
    /// were used longest ago first (lower priority first), until the blocks add up to
    /// `bytes`: under a budget on reserved bytes, only an emptied block makes room for a
    /// new one. Returns the bytes moved.
    fn evict_blocks(&self, bytes: u64) -> u64 {
        let pools = {
            let st = self.state.lock();
            distinct_pools(st.entries.iter().flatten().map(|e| e.pool))
        };
        // (pool, block) -> (block bytes, live ranges): read without our lock held.
        let mut blocks = std::collections::HashMap::new();
        for pool in pools {
            for b in self.arena.block_usage(pool) {
                blocks.insert((pool.index(), b.id), (b.size, b.live));
            }
        }
        let mut st = self.state.lock();
        let order = self.candidates(&st, None);
        // Per block: its movable members, their highest priority and latest use.
        let mut members: std::collections::HashMap<_, (Vec<u32>, u8, u64)> =
            std::collections::HashMap::new();
        for (slot, _) in order.into_iter().filter(|&(_, busy)| !busy) {
            let Some(e) = st.get(slot) else {
                continue;
            };
            let Place::Device(a) = &e.place else { continue };
            let (block, pool) = a.place();
            let m = members.entry((pool, block)).or_default();
            m.0.push(slot);
            m.1 = m.1.max(e.priority);
            m.2 = m.2.max(e.last_use);
        }
        let mut emptiable: Vec<(u8, u64, u64, Vec<u32>)> = members
            .into_iter()
            .filter_map(|(key, (slots, priority, last_use))| {
                let &(size, live) = blocks.get(&key)?;
                (slots.len() == live).then_some((priority, last_use, size, slots))
            })
            .collect();
        emptiable.sort_unstable_by_key(|e| (e.0, e.1));
        let mut chosen = Vec::new();
        let mut freed = 0;
        for (.., size, slots) in emptiable {
            if freed >= bytes {
                break;
            }
            freed += size;
            chosen.extend(slots);
        }
        let planned = self.plan_evictions(&mut st, &chosen);
        drop(st);
        match planned {
            Ok(p) => self.run_evictions(p).unwrap_or(0),
            Err(_) => {
                HOST_FULL.with(|f| f.set(true));
                0
            }
        }
    }

    /// Marks the end of a [`Resident`] guard: its entries lose a pin and stay in flight
    /// until the GPU finishes what was submitted so far.
    pub(crate) fn unpin(&self, slots: impl Iterator<Item = u32>) {
        let epoch = self.next_epoch.fetch_add(1, Ordering::Relaxed);
        let mut st = self.state.lock();
        for slot in slots {
            if let Some(e) = st.entry(slot) {
                e.pins = e.pins.saturating_sub(1);
                e.busy_until = e.busy_until.max(epoch);
            }
        }
        drop(st);
        let done = self.done.clone();
        self.gpu.queue().on_submitted_work_done(move || {
            done.fetch_max(epoch, Ordering::AcqRel);
        });
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

impl Relief for TierShared {
    fn relieve(&self, pool: usize, bytes: u64, whole_blocks: bool) -> u64 {
        let before = self.state.lock().counters.evictions;
        let moved = if whole_blocks {
            self.evict_blocks(bytes)
        } else {
            // A batch at a time: every eviction under pressure costs the request a wait
            // for the GPU, so a loop over small movables (1 MiB each) paid one round trip
            // per visit. Evicting the least recently used ahead lets the next requests
            // find room without waiting.
            let batch = self
                .arena
                .budget()
                .map_or(0, |b| (b / PRESSURE_BATCH_DIVISOR).min(PRESSURE_BATCH_MAX));
            self.evict_lru(bytes.max(batch), Some(pool))
        };
        let mut st = self.state.lock();
        st.counters.pressure_evictions += st.counters.evictions - before;
        moved
    }

    fn host_blocks(&self) -> Vec<crate::arena::HostBlockDump> {
        TierShared::host_blocks(self)
    }

    fn summary_lines(&self) -> Vec<String> {
        TierShared::summary_lines(self)
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
