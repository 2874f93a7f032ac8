//! The buffer arena: GPU memory that is cheap to allocate in a hot loop, never reused while
//! the GPU may still read it, bounded by a budget, and explained by statistics and dumps.
//!
//! # How it works
//! Each pool owns a [`crate::alloc::BlockSet`] whose blocks are `wgpu::Buffer`s.
//! An [`Allocation`] is a range of one block. Dropping it does not free the range at once:
//! the range joins a batch that waits for an epoch of the device's work-done tracker
//! (`gpu/work_done.rs`): one that completes when all GPU work submitted before the free
//! has finished (`completion.rs` decides when to seal a batch). Completed batches are
//! collected on the next
//! allocation, so the hot path never waits; only a request that would exceed the budget
//! waits for in-flight frees before it gives up.
//!
//! Collected ranges are kept by request size, like PyTorch's cached blocks: the next
//! allocation of that size takes one without the range allocator. The cache never costs
//! memory: it goes back to the blocks before the arena grows, trims, waits or reports
//! out-of-memory ([`ArenaStats::cached`]).
//!
//! # What an allocation and a free cost
//! A range has one record from its placement until it goes back to its block: the
//! allocation's details while it lives, then the range while its free waits for the GPU
//! and while it waits in the cache. The record owns the range and its block's buffer, so
//! a free, the epoch's completion and a reuse move only the record's slot number between
//! lists, and the handle points into the record's buffer instead of counting references
//! to it. The handle keeps only what GPU work reads (buffer, offset, size) and the slot:
//! every `?` or `unwrap` moves it, so its id and label are read from the record, under the
//! lock (a smaller handle is fewer stores for the next lock operation to wait for). Handles
//! also hand their arena reference back to the arena, which gives it to the next
//! allocation. A steady loop therefore does no reference counting and takes the arena's
//! lock twice per alloc+free pair. The lock (`lock.rs`) takes with one compare-and-swap
//! and releases with a plain store when nobody waits, so a pair pays two atomic
//! read-modify-writes, not the four of a parking_lot or std mutex; and on Linux, once a
//! thread has taken it 64 times, it is biased to that thread, which then takes and
//! releases it with plain loads and stores until another thread revokes the bias (one
//! `membarrier`). A pair then pays no atomic read-modify-write at all.
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

mod acquire;
mod allocation;
mod bind;
mod block;
mod completion;
mod config;
mod for_tiers;
pub(crate) mod guard;
mod invariants;
mod labels;
mod live_budget;
mod observe;
pub(crate) mod planned;
mod ready;
mod relief;
mod reserve;
mod state;

pub use crate::error::{Limit, OutOfMemory};
pub use allocation::{Allocation, Elements, Typed};
pub use bind::{Access, BindEntry, BindGroup, Bindable};
pub use block::BlockMemory;
pub use config::{ArenaConfig, Budget, HostUse, PoolConfig};
pub(crate) use for_tiers::{BlockUsage, DoomedBlock};
pub use guard::{GuardViolation, Side, GUARD_PATTERN};
pub use labels::{Folded, LABELS_KEPT};
pub use observe::history;
pub use observe::history::{EventKind, GpuSpan, HistoryConfig, MemoryEvent, MemoryHistory};
#[cfg(feature = "metrics")]
pub use observe::metrics;
pub use observe::stats::{ArenaStats, BlockStats, PoolStats};
pub(crate) use relief::{AllocMode, HostBlockDump, Relief};
pub use state::LabelStats;

use std::sync::Arc;

use crate::sync::rank::{self as lock_rank, Mutex};

use crate::alloc::{BlockPolicy, BlockSet};
use crate::{Error, Gpu, Result};
use completion::Completion;
use state::{Pool, State, MAX_SPARES};

/// Frees gathered before they are sealed into an epoch even while another is in flight.
const SEAL_BATCH: usize = 64;

/// Names a pool of one [`Arena`]; another arena refuses it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PoolId {
    arena: u64,
    index: usize,
}

impl PoolId {
    /// The pool's index in its arena.
    pub(crate) fn index(self) -> usize {
        self.index
    }
}

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
    /// Unique per arena: ties its [`PoolId`]s to it.
    id: u64,
    config: ArenaConfig,
    default_policy: BlockPolicy,
    state: invariants::StateLock,
    completion: Arc<Completion>,
    /// Blocks go to host-visible memory ([`BlockMemory`], resolved for this device).
    host_visible_blocks: bool,
    /// The allocation path files one completion callback at a time
    /// (`Shared::seal_lazily`): on CPU adapters, where a submission costs tens of
    /// microseconds, or as `VRAMKIT_SEALING` says (`chained_callbacks`).
    chained_callbacks: bool,
    /// The pressure hook of the tier that owns this arena's movable allocations, if any
    /// (weak: the tier holds the arena, not the other way round).
    relief: Mutex<Option<std::sync::Weak<dyn Relief>>>,
    /// A live budget's fraction, next reading and last reading (`live_budget.rs`).
    live: Mutex<live_budget::LiveBudget>,
    /// When the next reading of a live budget is due, on the clock of `gpu::clock`
    /// (nanoseconds; [`live_budget::NOT_LIVE`]: the budget is fixed): the allocation
    /// path's check, one atomic load and one stamp instead of a lock and a clock read.
    live_due: std::sync::atomic::AtomicU64,
    /// Timed allocations not yet handed to the `metrics` recorder (`metrics.rs`).
    #[cfg(feature = "metrics")]
    latency_samples: Mutex<Vec<f64>>,
}

impl Arena {
    /// Creates an arena with a default pool using `config.usage`.
    pub fn new(gpu: &Gpu, config: ArenaConfig) -> Result<Arena> {
        Self::with_id(gpu, config, None)
    }

    /// The arena a runtime recovering from a lost device continues with: on `gpu`, with
    /// this arena's configuration, its pools in the same order (so every [`PoolId`] the
    /// program holds names the same pool) and its identity. Nothing of this arena's
    /// memory carries over: its allocations belong to the lost device, and fail their next
    /// use with [`Error::DeviceLost`].
    pub(crate) fn successor(&self, gpu: &Gpu) -> Result<Arena> {
        let shared = self.shared();
        let (pools, budget) = {
            let st = shared.state.lock();
            let pools: Vec<(String, PoolConfig, bool)> = st
                .pools
                .iter()
                .skip(1)
                .map(|p| (p.name.clone(), p.config.clone(), p.keep_one))
                .collect();
            (pools, st.budget)
        };
        let next = Self::with_id(gpu, shared.config.clone(), Some(shared.id))?;
        for (name, config, keep_one) in pools {
            let pool = next.add_pool(&name, config)?;
            if keep_one {
                next.keep_one_block(pool);
            }
        }
        // A fixed budget changed since (set_budget) carries over; a live one follows the
        // new device's driver by itself.
        let live = matches!(shared.config.budget, Budget::FractionOfAvailable(_));
        let fresh = next.shared().state.lock().budget;
        if !live && budget != fresh {
            next.set_budget(budget.map_or(Budget::Unlimited, Budget::Bytes))?;
        }
        Ok(next)
    }

    fn with_id(gpu: &Gpu, mut config: ArenaConfig, id: Option<u64>) -> Result<Arena> {
        let budget = resolve_budget(gpu, config.budget)?;
        let limits = gpu.limits();
        let max_binding = limits
            .max_storage_buffer_binding_size
            .min(limits.max_buffer_size);
        let default_policy = config
            .policy
            .clone()
            .unwrap_or_else(|| BlockPolicy::for_max_binding(max_binding));
        static NEXT_ARENA: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        let id =
            id.unwrap_or_else(|| NEXT_ARENA.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        if config.name.is_empty() {
            config.name = format!("arena-{id}");
        }
        let shared = Arc::new(Shared {
            gpu: gpu.clone(),
            id,
            default_policy,
            state: invariants::StateLock::new(State::new(budget)),
            completion: Arc::new(Completion::new(gpu.work_done().clone())),
            host_visible_blocks: config.block_memory.host_visible_on(gpu),
            chained_callbacks: chained_callbacks(gpu),
            relief: Mutex::new(lock_rank::ARENA_RELIEF, None),
            live: Mutex::new(lock_rank::LIVE_BUDGET, Default::default()),
            live_due: std::sync::atomic::AtomicU64::new(live_budget::NOT_LIVE),
            #[cfg(feature = "metrics")]
            latency_samples: Mutex::new(lock_rank::LATENCY_SAMPLES, Vec::new()),
            config,
        });
        let arena = Arena {
            front: Arc::new(Front { shared }),
        };
        let usage = arena.shared().config.usage;
        arena.add_pool(
            "default",
            PoolConfig {
                usage,
                ..Default::default()
            },
        )?;
        arena.set_live(arena.shared().config.budget);
        arena.shared().refresh_live_budget(true);
        arena.join_ledger();
        Ok(arena)
    }

    fn shared(&self) -> &Arc<Shared> {
        &self.front.shared
    }

    /// The GPU context.
    pub fn gpu(&self) -> &Gpu {
        &self.shared().gpu
    }

    /// The arena's name ([`ArenaConfig::name`]), as reports and metrics label it.
    pub fn name(&self) -> &str {
        &self.shared().config.name
    }

    /// Guard bytes around each allocation ([`ArenaConfig::guard_bytes`]).
    pub(crate) fn guard_bytes(&self) -> u64 {
        self.shared().config.guard_bytes
    }

    /// True for a dry run's arena ([`ArenaConfig::dry_run`]).
    pub fn is_dry_run(&self) -> bool {
        self.shared().config.dry_run
    }

    /// The default pool.
    pub fn default_pool(&self) -> PoolId {
        self.pool_id(0)
    }

    fn pool_id(&self, index: usize) -> PoolId {
        PoolId {
            arena: self.shared().id,
            index,
        }
    }

    /// Adds a named pool with its own buffers, usage flags and quota.
    pub fn add_pool(&self, name: &str, config: PoolConfig) -> Result<PoolId> {
        let shared = self.shared();
        check_pool_usage(&shared.gpu, name, config.usage)?;
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
        if let Some(block) = config.block_size {
            let block = block.max(alignment).next_multiple_of(alignment);
            policy.min_block = block.min(policy.max_block);
        }
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
            keep_one: false,
        });
        let index = st.pools.len() - 1;
        drop(st);
        Ok(self.pool_id(index))
    }

    /// The pool for what a host app binds as `use` (uniform, vertex or index buffers),
    /// made on first use with that usage and small blocks (64 KiB for uniforms, 256 KiB
    /// for the others), so that a renderer's handful of small buffers does not reserve
    /// 4 MiB a kind. Allocate in it with [`alloc_in`](Self::alloc_in) or
    /// [`alloc_typed_in`](Self::alloc_typed_in).
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// use vramkit::arena::HostUse;
    /// let uniforms = arena.host_pool(HostUse::Uniform)?;
    /// let params = arena.alloc_typed_in::<[f32; 4]>(uniforms, 1, "sim params")?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn host_pool(&self, host_use: HostUse) -> Result<PoolId> {
        let (name, config) = host_use.pool();
        if let Some(pool) = self.pool(name) {
            return Ok(pool);
        }
        match self.add_pool(name, config) {
            // Another thread made it meanwhile.
            Err(_) if self.pool(name).is_some() => self
                .pool(name)
                .ok_or_else(|| Error::invalid(format!("pool '{name}'"), "this is a vramkit bug")),
            made => made,
        }
    }

    /// Looks a pool up by name.
    pub fn pool(&self, name: &str) -> Option<PoolId> {
        self.shared()
            .state
            .lock()
            .pools
            .iter()
            .position(|p| p.name == name)
            .map(|i| self.pool_id(i))
    }

    /// Allocates `size` bytes in the default pool.
    pub fn alloc(&self, size: u64, label: &str) -> Result<Allocation> {
        self.alloc_in(self.default_pool(), size, label)
    }

    /// Allocates room for `len` elements of `T` in the default pool.
    pub fn alloc_typed<T: bytemuck::Pod>(&self, len: usize, label: &str) -> Result<Typed<T>> {
        self.alloc_typed_in(self.default_pool(), len, label)
    }

    /// Room for `len` elements of `T` in `pool`.
    pub fn alloc_typed_in<T: bytemuck::Pod>(
        &self,
        pool: PoolId,
        len: usize,
        label: &str,
    ) -> Result<Typed<T>> {
        let bytes = (len as u64)
            .checked_mul(std::mem::size_of::<T>() as u64)
            .ok_or_else(|| {
                Error::misuse(
                    crate::Misuse::Shape,
                    format!("{len} elements overflow a 64-bit byte count"),
                    "allocate fewer elements",
                )
            })?;
        self.alloc_in(pool, bytes, label)?.typed_len(len as u64)
    }

    /// `size` bytes in `pool` with a wgpu buffer of their own: a block nothing else is
    /// placed in while the allocation lives (offset 0 when no guard bytes are asked for).
    /// What a host app binds in ways that may not share a buffer with another binding of
    /// the same pass: wgpu refuses one buffer bound `read_write` beside any other binding
    /// of it in one dispatch or draw (README, "Embedding vramkit in a wgpu app";
    /// [`BindGroup`] checks it). It costs one buffer per
    /// allocation; its block is cached for the next such request when it drops.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// let particles_out = arena.alloc_own_buffer_in(arena.default_pool(), 64 << 10, "particles b")?;
    /// assert_eq!(particles_out.offset(), 0);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn alloc_own_buffer_in(&self, pool: PoolId, size: u64, label: &str) -> Result<Allocation> {
        self.check_pool(pool)?;
        self.shared()
            .alloc(pool.index, size, label, AllocMode::OWN_BUFFER)
    }

    /// Allocates `size` bytes in `pool`. Over the budget or quota it first gives back cached
    /// empty blocks, then waits for in-flight frees, and only then returns
    /// [`Error::OutOfMemory`]; the arena stays usable either way.
    pub fn alloc_in(&self, pool: PoolId, size: u64, label: &str) -> Result<Allocation> {
        self.check_pool(pool)?;
        if self.shared().live_reading_due() {
            self.shared().refresh_live_budget(false);
        }
        #[cfg(feature = "metrics")]
        if metrics::sample_latency() {
            let start = web_time::Instant::now();
            let result = self
                .shared()
                .alloc(pool.index, size, label, AllocMode::NORMAL);
            self.note_latency(start.elapsed());
            return result;
        }
        self.shared()
            .alloc(pool.index, size, label, AllocMode::NORMAL)
    }

    /// Fails unless `pool` belongs to this arena.
    pub(crate) fn check_pool(&self, pool: PoolId) -> Result<()> {
        if pool.arena != self.shared().id {
            return Err(Error::misuse(
                crate::Misuse::Foreign,
                format!("pool #{} belongs to another arena", pool.index),
                "use a PoolId returned by this arena's add_pool, pool or default_pool",
            ));
        }
        Ok(())
    }

    /// Makes `pool` keep one empty block when empty blocks are given back (see
    /// `Pool::keep_one`).
    pub(crate) fn keep_one_block(&self, pool: PoolId) {
        if let Some(p) = self.shared().state.lock().pools.get_mut(pool.index) {
            p.keep_one = true;
        }
    }

    /// The tier attached to this arena, if any.
    pub(crate) fn tier_hook(&self) -> Option<Arc<dyn Relief>> {
        self.shared()
            .relief
            .lock()
            .as_ref()
            .and_then(|w| w.upgrade())
    }

    /// Installs the pressure hook ([`Relief`]); fails if one is installed and alive.
    pub(crate) fn set_relief(&self, relief: std::sync::Weak<dyn Relief>) -> Result<()> {
        let mut slot = self.shared().relief.lock();
        if slot.as_ref().is_some_and(|w| w.strong_count() > 0) {
            return Err(Error::invalid(
                "this arena already has tiered memory (tier::Tiers) attached",
                "create one Tiers per arena and share it (it is cheap to clone)",
            ));
        }
        *slot = Some(relief);
        Ok(())
    }

    /// Polls the device (without blocking) and makes the frees the GPU has finished with
    /// reusable (kept by size for the next allocation of that size; see
    /// [`ArenaStats::cached`]). Returns how many ranges came back. Allocation does this too;
    /// call it from idle loops so freed memory shows up in statistics and `trim`.
    pub fn maintain(&self) -> usize {
        let shared = self.shared();
        if shared.live_reading_due() {
            shared.refresh_live_budget(false);
        }
        let st = shared.state.lock();
        // Sealed first so the poll can complete this epoch too; polled without the lock
        // (the poll runs wgpu callbacks, which may free or allocate).
        let before = st.harvested;
        let st = shared.poll_unlocked(st, true);
        let collected = st.harvested - before;
        shared.unlock(st);
        collected as usize
    }

    /// Waits for all submitted GPU work and returns every pending free, and every range
    /// cached for reuse, to its block.
    pub fn synchronize(&self) -> Result<()> {
        let shared = self.shared();
        let st = shared.wait_unlocked(shared.state.lock())?;
        shared.unlock(st);
        Ok(())
    }

    /// [`synchronize`](Self::synchronize) without blocking (the browser's way, where the
    /// blocking call returns [`Error::WouldBlock`]): resolves
    /// once all submitted work is done and every pending free is back in the arena.
    ///
    /// ```no_run
    /// # async fn page(arena: &vramkit::Arena) -> vramkit::Result<()> {
    /// arena.synchronize_async().await?;
    /// assert_eq!(arena.stats().pending_frees, 0);
    /// # Ok(()) }
    /// ```
    pub async fn synchronize_async(&self) -> Result<()> {
        self.shared().wait_async().await
    }

    /// Gives completely free blocks back to the device (`Buffer::destroy`), keeping up to
    /// `config.trim_keep` bytes of empty blocks cached. Returns bytes released.
    pub fn trim(&self) -> u64 {
        let shared = self.shared();
        let mut st = shared.poll_unlocked(shared.state.lock(), true);
        st.flush_ready();
        let released = st.release_empty(shared.config.trim_keep);
        shared.unlock(st);
        released
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
        self.shared().state.lock().budget
    }

    /// Changes the budget at once, like PyTorch's `set_per_process_memory_fraction`. A
    /// lower budget gives cached ranges and empty blocks back to the device right away
    /// while the arena holds more than it allows; live allocations are kept, so reserved
    /// memory may stay above the new budget until they are dropped (allocations that would
    /// grow it fail meanwhile). Returns the budget in bytes now in force.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// use vramkit::arena::Budget;
    /// arena.set_budget(Budget::Bytes(512 << 20))?;
    /// arena.set_budget(Budget::Unlimited)?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn set_budget(&self, budget: Budget) -> Result<Option<u64>> {
        let shared = self.shared();
        let bytes = resolve_budget(&shared.gpu, budget)?;
        let mut st = shared.state.lock();
        st.budget = bytes;
        if bytes.is_some_and(|b| st.reserved() > b) {
            st.flush_ready();
            st.release_empty(0);
        }
        shared.unlock(st);
        self.set_live(budget);
        if let Some(live) = shared.refresh_live_budget(true) {
            return Ok(Some(live));
        }
        Ok(bytes)
    }
}

/// Whether the arenas of `gpu` chain their completion callbacks
/// ([`Shared::chained_callbacks`]): on CPU adapters, unless `VRAMKIT_SEALING` says
/// `chained` or `batched` (the GPUs' way), so that either path can be tested on any
/// adapter (the arena's test suites run again under the path their adapter does not take,
/// `tests/support`). Read once per process.
fn chained_callbacks(gpu: &Gpu) -> bool {
    static FORCED: std::sync::OnceLock<Option<bool>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| match crate::knobs::Knob::Sealing.get().as_deref() {
        Some("chained") => Some(true),
        Some("batched") => Some(false),
        Some(other) => {
            log::warn!("VRAMKIT_SEALING={other:?} ignored: use chained or batched");
            None
        }
        None => None,
    });
    forced.unwrap_or_else(|| gpu.is_cpu())
}

/// A budget in bytes (`None`: unlimited), or an error for a fraction outside 0..=1 or one
/// of a device whose memory size the backend does not report.
fn resolve_budget(gpu: &Gpu, budget: Budget) -> Result<Option<u64>> {
    Ok(match budget {
        Budget::Unlimited => None,
        Budget::Bytes(b) => Some(b),
        // The fixed fraction until the first reading (and where there is none).
        Budget::FractionOfDevice(f) | Budget::FractionOfAvailable(f) => {
            if !(0.0..=1.0).contains(&f) {
                return Err(Error::invalid(
                    format!("budget fraction {f} is outside 0..=1"),
                    "pass e.g. Budget::FractionOfDevice(0.8)",
                ));
            }
            // An installed reader may know the size where the backend does not (read
            // only then: the live budget reads the driver itself right after).
            let reported = || match budget {
                Budget::FractionOfAvailable(_) => gpu.driver_memory().map(|m| m.total),
                _ => None,
            };
            let total = gpu.device_memory().or_else(reported).ok_or_else(|| {
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
    })
}

/// WebGPU's rules for buffer usage, checked before any block is created, so that a bad
/// pool is an error at `add_pool` and not a "device full" at the first allocation.
fn check_pool_usage(gpu: &Gpu, name: &str, usage: wgpu::BufferUsages) -> Result<()> {
    use wgpu::BufferUsages as U;
    if usage.is_empty() {
        return Err(Error::misuse(
            crate::Misuse::Usage,
            format!("pool '{name}' has no buffer usage"),
            "give it the usages its allocations need, e.g. STORAGE | COPY_DST | COPY_SRC",
        ));
    }
    if !gpu.has(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS) {
        for (map, partner) in [(U::MAP_READ, U::COPY_DST), (U::MAP_WRITE, U::COPY_SRC)] {
            if usage.contains(map) && !(usage - map - partner).is_empty() {
                return Err(Error::misuse(
                    crate::Misuse::Usage,
                    format!(
                        "pool '{name}' asks for {usage:?}: {map:?} combines only with {partner:?}"
                    ),
                    format!(
                        "use a pool of {map:?} | {partner:?} for readback or staging, and another \
                         for kernels"
                    ),
                ));
            }
        }
    }
    Ok(())
}

impl Shared {
    /// Takes back a dropped allocation: its record's slot waits in the open epoch (the
    /// range stays in the record); its arena reference is kept for the next allocation, so
    /// a steady allocate/free loop does no reference counting.
    #[inline(always)]
    pub(super) fn release(this: Arc<Shared>, slot: u32) {
        let shared: *const Shared = Arc::as_ptr(&this);
        // SAFETY: `this` keeps the arena alive for the whole call: it is either dropped
        // after the guard below (`closed`, or a full stock) or moved into the stock inside
        // that same state, which only the arena's own drop empties, under this lock.
        let shared = unsafe { &*shared };
        let mut st = shared.state.lock();
        let freed = st
            .forget_live(slot)
            .map(|r| (r.id, r.placed_size(), r.is_planned()));
        match freed {
            // No epoch: the bytes go back with the loop block (`planned.rs`).
            Some((_, _, true)) => st.release_planned(slot),
            Some((id, size, false)) => {
                if let Some(hook) = st.loop_hook.as_deref_mut() {
                    hook.note_free(id);
                }
                st.counters.pending += size;
                st.open.push(slot);
            }
            None => {}
        }
        let surplus = if !st.closed && st.stock.len() < MAX_SPARES {
            st.stock.push(this);
            None
        } else {
            Some(this)
        };
        // Releasing a loop block may have doomed its buffer.
        shared.unlock(st);
        drop(surplus);
    }
}

impl Shared {
    /// Takes back an allocation no GPU work was ever recorded on (a planned move that was
    /// called off): its range goes straight back to its block, since nothing can be
    /// reading it.
    pub(super) fn release_unused(&self, slot: u32) {
        let mut st = self.state.lock();
        if let Some(pool) = st.forget_live(slot).map(|r| r.pool) {
            if let Some(planned) = st.take_planned(slot) {
                st.forget_planned(pool, &planned);
            } else {
                let st = &mut *st;
                state::return_to_block(&mut st.live, &mut st.pools, slot);
            }
        }
        self.unlock(st);
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        let mut st = self.shared.state.lock();
        // Break the cycle of references the stock holds to the arena (see `State::stock`).
        st.closed = true;
        let stock = std::mem::take(&mut st.stock);
        let live = st.live_allocations();
        drop(st);
        drop(stock);
        // Not a leak: live allocations keep the arena's state and their blocks, go on
        // working, and give their memory back when they drop (a `Runtime` dropped before
        // the results it handed out, say). Noted for a logger only; `leak_report` lists
        // what is live wherever everything should have been freed.
        if live > 0 {
            log::info!(
                "arena '{}': its last handle dropped with {live} allocation(s) live; they \
                 keep working and their memory returns when they drop",
                self.shared.config.name
            );
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
