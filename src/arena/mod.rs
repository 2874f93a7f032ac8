//! The buffer arena: GPU memory that is cheap to allocate in a hot loop, never reused while
//! the GPU may still read it, bounded by a budget, and explained by statistics and dumps.
//!
//! # How it works
//! Each pool owns a [`crate::alloc::BlockSet`] whose blocks are `wgpu::Buffer`s.
//! An [`Allocation`] is a range of one block. Dropping it does not free the range at once:
//! the range joins an *epoch* that completes when all GPU work submitted before it has
//! finished (`Queue::on_submitted_work_done`). Completed epochs are collected on the next
//! allocation, so the hot path never waits; only a request that would exceed the budget
//! waits for in-flight frees before it gives up.
//!
//! Collected ranges are kept by request size, like PyTorch's cached blocks: the next
//! allocation of that size takes one without the range allocator, and the references an
//! allocation holds (arena, block buffer, label) are handed back and reused, so a steady
//! loop does no reference counting. The cache never costs memory: it goes back to the
//! blocks before the arena grows, trims, waits or reports out-of-memory
//! ([`ArenaStats::cached`]).
//!
//! # Where blocks live
//! On discrete GPUs blocks are ordinary wgpu buffers in device memory. On Vulkan CPU and
//! integrated adapters, whose device memory is system memory, they are host-visible and
//! stay mapped ([`BlockMemory`]), so the stream module can upload into and download from
//! an idle queue's blocks with one host copy.
//!
//! # Budget and what each backend reports
//! [`Budget::Bytes`] works everywhere. [`Budget::FractionOfDevice`] needs the device's
//! memory size, which wgpu exposes only on Vulkan (the device-local heap, read through
//! wgpu-hal); Metal, DX12 and GL report none, and the arena then asks for a byte budget.

mod allocation;
mod block;
mod config;
mod guard;
mod oom;
mod report;
mod state;
mod stats;

pub use allocation::{Allocation, Typed};
pub use block::BlockMemory;
pub use config::{ArenaConfig, Budget, PoolConfig};
pub use guard::{GuardViolation, Side, GUARD_PATTERN};
pub use oom::{Limit, OutOfMemory};
pub use state::LabelStats;
pub use stats::{ArenaStats, BlockStats};

use std::mem::ManuallyDrop;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::alloc::{AllocError, BlockPolicy, BlockSet};
use crate::{Error, Gpu, Result};
use allocation::Freed;
use block::BlockBuffer;
use state::{CachedRange, Completion, LiveRecord, Placed, Pool, State, MAX_SPARES};

/// Frees gathered before they are sealed into an epoch even while another is in flight.
const SEAL_BATCH: usize = 64;

/// Names a pool of an [`Arena`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolId(usize);

/// A sub-allocating GPU buffer arena. Cheap to clone (all clones share one arena), `Send`
/// and `Sync`.
///
/// ```no_run
/// use vramkit::{Arena, ArenaConfig, arena::Budget};
/// let gpu = vramkit::Gpu::headless()?;
/// let arena = Arena::new(&gpu, ArenaConfig { budget: Budget::Bytes(1 << 30), ..Default::default() })?;
/// for _ in 0..1000 {
///     let scratch = arena.alloc(1 << 20, "scratch")?; // no create_buffer after warm-up
///     // ... record and submit work that uses `scratch` ...
/// }
/// println!("{}", arena.summary());
/// # Ok::<(), vramkit::Error>(())
/// ```
#[derive(Clone)]
pub struct Arena {
    front: Arc<Front>,
}

/// The user-facing owner: when the last `Arena` clone drops, live allocations are reported
/// as leaks (allocations keep [`Shared`] alive on their own, so that drop would never see
/// them).
struct Front {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    gpu: Gpu,
    config: ArenaConfig,
    budget: Option<u64>,
    default_policy: BlockPolicy,
    state: Mutex<State>,
    completion: Arc<Completion>,
    /// Blocks go to host-visible memory ([`BlockMemory`], resolved for this device).
    host_visible_blocks: bool,
}

/// Why a block could not be reserved.
enum Reserve {
    Alloc(AllocError),
    /// First pass: try harvesting finished frees before growing.
    NeedBlock,
    Over(oom::Limit, Option<u64>),
    Device(String),
}

impl From<AllocError> for Reserve {
    fn from(e: AllocError) -> Self {
        Reserve::Alloc(e)
    }
}

impl Arena {
    /// Creates an arena with a default pool using `config.usage`.
    pub fn new(gpu: &Gpu, config: ArenaConfig) -> Result<Arena> {
        let budget = match config.budget {
            Budget::Unlimited => None,
            Budget::Bytes(b) => Some(b),
            Budget::FractionOfDevice(f) => {
                if !(0.0..=1.0).contains(&f) {
                    return Err(Error::invalid(
                        format!("budget fraction {f} is outside 0..=1"),
                        "pass e.g. Budget::FractionOfDevice(0.8)",
                    ));
                }
                let total = gpu.device_memory().ok_or_else(|| {
                    Error::invalid(
                        format!(
                            "{:?} does not report the device's memory size",
                            gpu.info().backend
                        ),
                        "use Budget::Bytes(n) on this backend",
                    )
                })?;
                Some((total as f64 * f) as u64)
            }
        };
        let limits = gpu.limits();
        let max_binding = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        let default_policy = config
            .policy
            .clone()
            .unwrap_or_else(|| BlockPolicy::for_max_binding(max_binding));
        let shared = Arc::new(Shared {
            gpu: gpu.clone(),
            budget,
            default_policy,
            state: Mutex::new(State::new()),
            completion: Arc::new(Completion::default()),
            host_visible_blocks: config.block_memory.host_visible_on(gpu),
            config,
        });
        let arena = Arena {
            front: Arc::new(Front { shared }),
        };
        let usage = arena.shared().config.usage;
        arena.add_pool("default", PoolConfig { quota: None, usage })?;
        Ok(arena)
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.front.shared
    }

    /// The GPU context.
    pub fn gpu(&self) -> &Gpu {
        &self.shared().gpu
    }

    /// The default pool.
    pub fn default_pool(&self) -> PoolId {
        PoolId(0)
    }

    /// Adds a named pool with its own buffers, usage flags and quota.
    pub fn add_pool(&self, name: &str, config: PoolConfig) -> Result<PoolId> {
        let shared = self.shared();
        let mut st = shared.state.lock();
        if st.pools.iter().any(|p| p.name == name) {
            return Err(Error::invalid(
                format!("pool '{name}' already exists"),
                "pick another name, or look it up with Arena::pool",
            ));
        }
        let limits = shared.gpu.limits();
        let mut alignment = limits.min_storage_buffer_offset_alignment as u64;
        if config.usage.contains(wgpu::BufferUsages::UNIFORM) {
            alignment = alignment.max(limits.min_uniform_buffer_offset_alignment as u64);
        }
        let alignment = alignment.max(wgpu::COPY_BUFFER_ALIGNMENT);
        let mut policy = shared.default_policy.clone();
        if config.usage.contains(wgpu::BufferUsages::UNIFORM) {
            let cap = limits.max_uniform_buffer_binding_size.max(64 << 10);
            policy.max_block = policy.max_block.min(cap.next_power_of_two() / 2 * 2);
            policy.min_block = policy.min_block.min(policy.max_block);
            policy.dedicated_threshold = policy.dedicated_threshold.min(policy.max_block);
        }
        st.pools.push(Pool {
            name: name.to_string(),
            config,
            set: BlockSet::new(policy),
            buffers: Vec::new(),
            alignment,
        });
        Ok(PoolId(st.pools.len() - 1))
    }

    /// Looks a pool up by name.
    pub fn pool(&self, name: &str) -> Option<PoolId> {
        self.shared()
            .state
            .lock()
            .pools
            .iter()
            .position(|p| p.name == name)
            .map(PoolId)
    }

    /// Allocates `size` bytes in the default pool.
    pub fn alloc(&self, size: u64, label: &str) -> Result<Allocation> {
        self.alloc_in(PoolId(0), size, label)
    }

    /// Allocates room for `len` elements of `T` in the default pool.
    pub fn alloc_typed<T: bytemuck::Pod>(&self, len: usize, label: &str) -> Result<Typed<T>> {
        let bytes = (len as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| {
                Error::invalid(
                    format!("{len} elements overflow a 64-bit byte count"),
                    "allocate fewer elements",
                )
            })?;
        self.alloc(bytes, label)?.typed()
    }

    /// Allocates `size` bytes in `pool`. Over the budget or quota it first gives back cached
    /// empty blocks, then waits for in-flight frees, and only then returns
    /// [`Error::OutOfMemory`]; the arena stays usable either way.
    pub fn alloc_in(&self, pool: PoolId, size: u64, label: &str) -> Result<Allocation> {
        self.shared().alloc(pool.0, size, label)
    }

    /// Polls the device (without blocking) and makes the frees the GPU has finished with
    /// reusable (kept by size for the next allocation of that size; see
    /// [`ArenaStats::cached`]). Returns how many ranges came back. Allocation does this too;
    /// call it from idle loops so freed memory shows up in statistics and `trim`.
    pub fn maintain(&self) -> usize {
        let shared = self.shared();
        let mut st = shared.state.lock();
        // Seal first so the poll can complete this epoch too (its callback only marks an
        // atomic, so polling under the lock cannot deadlock).
        shared.seal_and_poll(&mut st);
        st.harvest(shared.completion.get())
    }

    /// Waits for all submitted GPU work and returns every pending free, and every range
    /// cached for reuse, to its block.
    pub fn synchronize(&self) -> Result<()> {
        let shared = self.shared();
        let mut st = shared.state.lock();
        shared.wait_and_harvest(&mut st)
    }

    /// Gives completely free blocks back to the device (`Buffer::destroy`), keeping up to
    /// `config.trim_keep` bytes of empty blocks cached. Returns bytes released.
    pub fn trim(&self) -> u64 {
        self.maintain();
        let shared = self.shared();
        let mut st = shared.state.lock();
        st.flush_ready();
        st.release_empty(shared.config.trim_keep)
    }

    /// Resets peak statistics to current values.
    pub fn reset_peak(&self) {
        let mut st = self.shared().state.lock();
        let reserved = st.reserved();
        let c = &mut st.counters;
        c.peak_allocated = c.allocated;
        c.peak_active = c.allocated + c.pending;
        c.peak_reserved = reserved;
        for p in &mut st.pools {
            p.set.reset_peak();
        }
        for (_, l) in &mut st.label_stats {
            l.peak_bytes = l.bytes;
        }
    }

    /// How many block buffers the arena has destroyed so far. Anything that caches objects
    /// referring to arena buffers (bind groups) must drop them when this changes.
    pub fn blocks_released(&self) -> u64 {
        self.shared().state.lock().counters.blocks_released
    }

    /// The budget in bytes, if any.
    pub fn budget(&self) -> Option<u64> {
        self.shared().budget
    }
}

impl Shared {
    /// Seals the open frees into an epoch when none is in flight or [`SEAL_BATCH`] frees
    /// have gathered: a free sealed later still waits for all work submitted before its
    /// drop, and registering a completion callback on every allocation would cost more
    /// than the allocation. (With strictly one epoch in flight, the epoch sealed right
    /// after a poll held a single free and everything dropped after it waited two polls;
    /// batches let frees complete as the GPU finishes, whoever polls.)
    fn seal_lazily(&self, st: &mut State) {
        if st.sealed.is_empty() || st.open.len() >= SEAL_BATCH {
            self.seal(st);
        }
    }

    fn seal(&self, st: &mut State) {
        if let Some(epoch) = st.seal() {
            let completion = self.completion.clone();
            self.gpu
                .queue()
                .on_submitted_work_done(move || completion.mark(epoch));
        }
    }

    /// Seals, then polls so that finished epochs complete. No submit is needed: wgpu-core
    /// (30) attaches a completion callback to the last submission still in flight, or runs
    /// it at the next poll when none is (`LifetimeTracker::add_work_done_closure`), and
    /// `on_submitted_work_done` first flushes pending `write_buffer` data into a
    /// submission of its own. (An empty submit here cost ~74 us per poll on lavapipe.)
    fn seal_and_poll(&self, st: &mut State) {
        self.seal(st);
        self.gpu.poll();
    }

    /// The allocation path's poll: collects finished frees and notes when, for
    /// [`polled_recently`](Self::polled_recently).
    fn reclaim(&self, st: &mut State) {
        self.seal_and_poll(st);
        st.last_poll_at = st.counters.allocations;
        st.harvest(self.completion.get());
    }

    /// Fewer than `config.poll_interval` allocations since the allocation path last polled.
    fn polled_recently(&self, st: &State) -> bool {
        st.counters.allocations - st.last_poll_at < self.config.poll_interval
    }

    /// Like [`seal_and_poll`](Self::seal_and_poll), blocking until all submitted work is
    /// done (no submit needed either: the wait runs the callbacks the seal registered).
    fn wait_and_harvest(&self, st: &mut State) -> Result<()> {
        self.seal(st);
        self.gpu.wait_idle()?;
        st.counters.waits += 1;
        st.harvest(self.completion.get());
        st.flush_ready();
        Ok(())
    }

    fn alloc(self: &Arc<Self>, pool: usize, size: u64, label: &str) -> Result<Allocation> {
        if size == 0 {
            return Err(AllocError::ZeroSize.into());
        }
        let size = size
            .checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
            .ok_or(AllocError::TooLarge {
                size,
                capacity: u64::MAX,
            })?;
        let mut st = self.state.lock();
        if pool >= st.pools.len() {
            return Err(Error::invalid(
                format!("pool {pool} does not exist"),
                "use a PoolId from this arena",
            ));
        }
        st.harvest(self.completion.get());
        self.seal_lazily(&mut st);
        let (label, label_index) = st.intern(label);
        let align = st.pools[pool].alignment;
        let guard = self.config.guard_bytes.next_multiple_of(align);
        let total = size.checked_add(2 * guard).ok_or(AllocError::TooLarge {
            size,
            capacity: u64::MAX,
        })?;
        // Ranges are kept by request size for reuse unless guards need refilling or the
        // request gets a dedicated block (those go back to their block, to be trimmed).
        let reuse = guard == 0 && total < st.pools[pool].set.policy().dedicated_threshold;

        let mut retries = 0u32;
        let mut allow_new = false;
        let mut reclaimed = false;
        let mut polled_for_cache = false;
        let range = loop {
            if reuse {
                if let Some(range) = st.take_ready(pool, total) {
                    break range;
                }
                // No range of this size is ready but frees are in flight: a poll (cheap
                // without a submit) at most every `poll_interval` allocations brings them
                // back, rather than carving new ranges until the block is full.
                if !polled_for_cache && !st.sealed.is_empty() && !self.polled_recently(&st) {
                    polled_for_cache = true;
                    self.reclaim(&mut st);
                    continue;
                }
            }
            match self.try_place(&mut st, pool, total, align, &label, allow_new) {
                Ok(placed) => match st.pools[pool].buffer(placed.block).cloned() {
                    Some(buffer) => break CachedRange { placed, buffer },
                    None => {
                        // Unreachable: a placed range always lies in a live block.
                        st.pools[pool].set.free(&placed);
                        return Err(Error::Device {
                            during: "allocating".into(),
                            message: "block without a buffer".into(),
                        });
                    }
                },
                Err(Reserve::Alloc(e)) => return Err(e.into()),
                Err(Reserve::NeedBlock) => {
                    // Ranges cached for other sizes go back to their blocks before any
                    // growth: the cache must never be why the arena holds more memory.
                    if st.counters.cached > 0 {
                        st.flush_ready();
                        continue;
                    }
                    // Before growing, collect every free the GPU has finished with: seal
                    // what is open, poll (which runs completion callbacks) and retry once.
                    // A poll costs far more than an allocation, so within
                    // `config.poll_interval` allocations of the last one the pool grows instead;
                    // the working set then settles where a poll returns many ranges.
                    // The budget still bounds growth (over it, the arena waits and trims).
                    // Requests for a dedicated block always poll first: a new large buffer
                    // costs more than the poll.
                    let dedicated = total >= st.pools[pool].set.policy().dedicated_threshold;
                    let recently = !dedicated && self.polled_recently(&st);
                    if reclaimed || recently || (st.open.is_empty() && st.sealed.is_empty()) {
                        allow_new = true;
                    }
                    if !reclaimed && !recently {
                        self.reclaim(&mut st);
                    }
                    reclaimed = true;
                }
                Err(Reserve::Over(limit, budget)) => {
                    retries += 1;
                    st.counters.retries += 1;
                    if retries == 1 {
                        let flushed = st.flush_ready();
                        if st.release_empty(0) > 0 || flushed > 0 {
                            continue;
                        }
                    }
                    if retries <= 2 && (!st.sealed.is_empty() || !st.open.is_empty()) {
                        self.wait_and_harvest(&mut st)?;
                        st.release_empty(0);
                        continue;
                    }
                    st.counters.ooms += 1;
                    return Err(self.oom(&st, pool, size, &label, limit, budget, retries));
                }
                Err(Reserve::Device(message)) => {
                    retries += 1;
                    st.counters.retries += 1;
                    let flushed = st.flush_ready();
                    if retries <= 2
                        && (flushed > 0
                            || st.release_empty(0) > 0
                            || !st.sealed.is_empty()
                            || !st.open.is_empty())
                    {
                        self.wait_and_harvest(&mut st)?;
                        st.release_empty(0);
                        continue;
                    }
                    st.counters.ooms += 1;
                    log::warn!("device refused a block: {message}");
                    return Err(self.oom(&st, pool, size, &label, Limit::Device, None, retries));
                }
            }
        };
        let placed = range.placed;
        let id = st.next_id;
        st.next_id += 1;
        let offset = placed.offset + guard;
        if guard > 0 {
            guard::fill(
                &self.gpu,
                range.buffer.buffer(),
                placed.offset,
                guard,
                offset + size,
                placed.size - guard - size,
            );
        }
        let slot = st.live.insert(LiveRecord {
            id,
            label: label_index,
            size,
            pool,
            block: placed.block,
            offset,
            range_offset: placed.offset,
            created: coarsetime::Instant::now_without_cache_update(),
            backtrace: self
                .config
                .backtraces
                .then(|| Box::new(std::backtrace::Backtrace::force_capture())),
        });
        st.note_alloc(label_index, placed.size);
        // A reference handed back by a dropped allocation, or a new one.
        let shared = st.stock.pop().unwrap_or_else(|| self.clone());
        drop(st);
        Ok(Allocation {
            shared: ManuallyDrop::new(shared),
            id,
            slot,
            label_index,
            pool,
            placed,
            buffer: ManuallyDrop::new(range.buffer),
            offset,
            size,
            label: ManuallyDrop::new(label),
            reuse,
        })
    }

    /// One placement attempt; creates a block buffer if `allow_new` and limits allow.
    fn try_place(
        &self,
        st: &mut State,
        pool: usize,
        total: u64,
        align: u64,
        label: &str,
        allow_new: bool,
    ) -> std::result::Result<Placed, Reserve> {
        let reserved_total = st.reserved();
        let p = &mut st.pools[pool];
        let pool_reserved = p.set.stats().reserved;
        let quota = p.config.quota;
        let usage = p.config.usage;
        let max_buffer = self.gpu.limits().max_buffer_size;
        let mut created: Option<BlockBuffer> = None;
        let mut released = Vec::new();
        let name = &self.config.name;
        // Borrowed, not cloned: this runs on every allocation.
        let pool_name: &str = &p.name;
        let result = p.set.allocate(
            total,
            align,
            |id, block_size| {
                if !allow_new {
                    return Err(Reserve::NeedBlock);
                }
                if block_size > max_buffer {
                    return Err(Reserve::Over(Limit::MaxBufferSize, Some(max_buffer)));
                }
                if let Some(b) = self.budget {
                    if reserved_total + block_size > b {
                        return Err(Reserve::Over(Limit::Budget, Some(b)));
                    }
                }
                if let Some(q) = quota {
                    if pool_reserved + block_size > q {
                        return Err(Reserve::Over(
                            Limit::PoolQuota(pool_name.to_string()),
                            Some(q),
                        ));
                    }
                }
                let buffer = BlockBuffer::create(
                    &self.gpu,
                    block_size,
                    usage,
                    self.host_visible_blocks,
                    &format!("{name}/{pool_name}/block{} ({label})", id.0),
                )
                .map_err(|e| Reserve::Device(e.to_string()))?;
                if let Some(old) = created.replace(buffer) {
                    old.destroy(); // the BlockSet asked again with a larger size
                }
                Ok(())
            },
            |id| released.push(id),
        );
        for id in released {
            if let Some(b) = p.buffers.get_mut(id.0 as usize).and_then(Option::take) {
                b.destroy();
                st.counters.blocks_released += 1;
            }
        }
        let placed = match result {
            Ok(placed) => placed,
            Err(e) => {
                if let Some(b) = created {
                    b.destroy();
                }
                return Err(e);
            }
        };
        if let Some(buffer) = created {
            let i = placed.block.0 as usize;
            if p.buffers.len() <= i {
                p.buffers.resize_with(i + 1, || None);
            }
            p.buffers[i] = Some(Arc::new(buffer));
            st.counters.blocks_created += 1;
        }
        Ok(placed)
    }

    #[allow(clippy::too_many_arguments)]
    fn oom(
        &self,
        st: &State,
        pool: usize,
        size: u64,
        label: &str,
        limit: Limit,
        budget: Option<u64>,
        retries: u32,
    ) -> Error {
        let p = &st.pools[pool];
        let hint = match &limit {
            Limit::Budget => {
                "drop allocations you no longer need, call Arena::trim, or raise the budget"
            }
            Limit::PoolQuota(_) => "free allocations in this pool or raise its quota",
            Limit::Device => "the device is full: lower the budget or free memory elsewhere",
            Limit::MaxBufferSize => {
                "split the data into several allocations no larger than the max buffer size"
            }
        };
        Error::OutOfMemory(Box::new(OutOfMemory {
            requested: size,
            label: label.to_string(),
            pool: p.name.clone(),
            limit,
            allocated: st.counters.allocated,
            reserved: st.reserved(),
            budget,
            largest_free: p.largest_free(),
            retries,
            hint: hint.to_string(),
        }))
    }

    /// Takes back a dropped allocation: its range waits in the open epoch; its references
    /// (arena, block buffer, label) are kept for the next allocation, so a steady
    /// allocate/free loop does no reference counting.
    pub(super) fn release(this: Arc<Shared>, freed: Freed) {
        let Freed {
            slot,
            label,
            label_index,
            pending,
        } = freed;
        let shared: *const Shared = Arc::as_ptr(&this);
        // SAFETY: `this` keeps the arena alive for the whole call: it is either dropped
        // after the guard below (`closed`, or a full stock) or moved into the stock inside
        // that same state, which only the arena's own drop empties, under this lock.
        let shared = unsafe { &*shared };
        let mut st = shared.state.lock();
        let size = pending.range.placed.size;
        st.live.remove(slot);
        st.counters.frees += 1;
        st.counters.allocated -= size;
        st.counters.pending += size;
        if let Some((_, l)) = st.label_stats.get_mut(label_index as usize) {
            l.count -= 1;
            l.bytes -= size;
        }
        if let Some(spares) = st.label_spares.get_mut(label_index as usize) {
            if spares.len() < MAX_SPARES {
                spares.push(label);
            }
        }
        st.open.push(pending);
        if !st.closed && st.stock.len() < MAX_SPARES {
            st.stock.push(this);
        } else {
            drop(st);
            drop(this);
        }
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        // Break the cycle of references the stock holds to the arena (see `State::stock`).
        st.closed = true;
        let stock = std::mem::take(&mut st.stock);
        let report = report::leak_report(&st, &self.shared.config.name);
        drop(st);
        drop(stock);
        if let Some(report) = report {
            log::warn!("{report}");
        }
    }
}

impl std::fmt::Debug for Arena {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.stats();
        f.debug_struct("Arena")
            .field("name", &self.shared().config.name)
            .field("allocated", &s.allocated)
            .field("reserved", &s.reserved)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dropped allocations hand their arena reference to the arena itself (a cycle); the
    /// arena's drop must break it, or every arena would leak with its GPU blocks.
    #[test]
    fn recycled_references_do_not_keep_a_dropped_arena_alive() {
        let gpu = Gpu::headless().unwrap_or_else(|e| panic!("{e}"));
        let arena = Arena::new(&gpu, ArenaConfig::default()).unwrap();
        for _ in 0..100 {
            drop(arena.alloc(256, "loop").unwrap());
        }
        let outlives = arena.alloc(256, "outlives").unwrap();
        let weak = Arc::downgrade(arena.shared());
        drop(arena);
        assert!(
            weak.upgrade().is_some(),
            "a live allocation keeps its arena"
        );
        drop(outlives);
        assert!(
            weak.upgrade().is_none(),
            "the stock kept a dropped arena alive"
        );
    }
}
