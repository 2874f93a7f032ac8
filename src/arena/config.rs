//! Arena and pool settings.

use super::block::BlockMemory;
use crate::alloc::BlockPolicy;

/// How much device memory the arena may hold (reserved bytes, all pools together).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Budget {
    /// No limit beyond what the device refuses.
    Unlimited,
    /// At most this many bytes.
    Bytes(u64),
    /// This fraction (0..=1) of the device's memory. Needs a backend that reports memory
    /// size (Vulkan; see [`Gpu::device_memory`](crate::Gpu::device_memory)); elsewhere
    /// creating the arena fails with a hint to pass [`Budget::Bytes`].
    FractionOfDevice(f64),
    /// This fraction (0..=1) of what the driver says this process may use now, re-read
    /// as it changes: other processes taking memory on the GPU shrink it, and the arena
    /// gives back cache (and the tiers spill) to stay under it; see
    /// [`Arena::refresh_budget`](super::Arena::refresh_budget). Where no driver reports a
    /// budget it is [`FractionOfDevice`](Self::FractionOfDevice), fixed.
    FractionOfAvailable(f64),
}

/// Settings of an [`Arena`](super::Arena).
#[derive(Clone, Debug)]
pub struct ArenaConfig {
    /// Name used in logs, reports and buffer labels. Empty (the default): `arena-N`, N
    /// counting the arenas of the process, so two runtimes' reports tell which is which.
    pub name: String,
    /// The device's index in a `DeviceSet` (`vramkit::devices`, native only), which sets it:
    /// the summary names it and metrics carry the label `device="i"`. `None` elsewhere.
    pub device_index: Option<usize>,
    /// Budget for reserved bytes over all pools.
    pub budget: Budget,
    /// Block policy; `None` derives it from the device's max storage-binding size.
    pub policy: Option<BlockPolicy>,
    /// Usage flags of the default pool's buffers.
    pub usage: wgpu::BufferUsages,
    /// Bytes of empty blocks [`trim`](super::Arena::trim) keeps for reuse.
    pub trim_keep: u64,
    /// Debug option: guard bytes placed before and after every allocation, filled with a
    /// known pattern that [`check_guards`](super::Arena::check_guards) verifies on the GPU.
    /// 0 turns it off. Rounded up to the allocation alignment.
    pub guard_bytes: u64,
    /// When no freed range of a request's size is ready, or a pool runs out of room, the
    /// arena polls the device to collect frees the GPU has finished with, but at most once
    /// per this many allocations; in between it places new ranges (and grows) instead.
    /// Larger values cost less CPU and hold more memory in hot loops; 0 polls every time.
    /// Requests for dedicated blocks always poll first. On GPUs (not CPU adapters),
    /// requests under 256 KiB stretch the interval until 16 MiB of them can circulate
    /// between polls, at most 16 times this value: a poll and its callbacks cost several
    /// alloc+free pairs, and small ranges are cheap to keep.
    pub poll_interval: u64,
    /// Where blocks live: device memory, or host-visible memory on CPU and integrated
    /// adapters so that uploads can be a single host copy (see [`BlockMemory`]).
    pub block_memory: BlockMemory,
    /// Capture a backtrace for every allocation, shown in leak reports (slow; for
    /// debugging). Also turned on by `VRAMKIT_BACKTRACE=1`.
    pub backtraces: bool,
    /// How often a live budget ([`Budget::FractionOfAvailable`]) reads the driver at most:
    /// on the allocation path and in [`maintain`](super::Arena::maintain) once this much
    /// time has passed since the last reading. Default 100 ms.
    pub budget_refresh: web_time::Duration,
    /// A dry run: blocks are virtual (offsets and sizes from the same allocator and block
    /// policy, no device memory behind them), frees come back at once as if the GPU had
    /// finished, and vramkit's kernels and transfers check their arguments but record
    /// nothing. [`Runtime::dry_run`](crate::Runtime::dry_run) sets it; see the
    /// [`plan`](crate::plan) module for what a dry run measures.
    pub dry_run: bool,
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig {
            name: String::new(),
            device_index: None,
            budget: Budget::Unlimited,
            policy: None,
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_SRC
                | wgpu::BufferUsages::COPY_DST,
            trim_keep: 0,
            guard_bytes: 0,
            poll_interval: 64,
            block_memory: BlockMemory::Auto,
            backtraces: crate::knobs::Knob::Backtrace.is("1"),
            budget_refresh: super::live_budget::DEFAULT_REFRESH,
            dry_run: false,
        }
    }
}

/// Settings of a named pool: its own buffers (with their own usage flags) and a quota
/// under the arena's budget.
#[derive(Clone, Debug)]
pub struct PoolConfig {
    /// Most reserved bytes this pool may hold.
    pub quota: Option<u64>,
    /// Usage flags of this pool's buffers.
    pub usage: wgpu::BufferUsages,
    /// The size of the pool's first shared block (later ones grow from it), where the
    /// arena's policy would start at 4 MiB: a pool of a few small buffers (uniforms, a
    /// mesh's indices) reserves this much, not 4 MiB. `None`: the arena's policy.
    pub block_size: Option<u64>,
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            quota: None,
            usage: ArenaConfig::default().usage,
            block_size: None,
        }
    }
}

/// What a host app binds a buffer as, for a pool made for it
/// ([`Arena::host_pool`](super::Arena::host_pool)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostUse {
    /// Uniform buffers (`var<uniform>`): blocks of 64 KiB, within every device's uniform
    /// binding limit.
    Uniform,
    /// Vertex buffers, also bindable as storage (a compute pass that moves particles
    /// writes what the render pass draws): blocks of 256 KiB.
    Vertex,
    /// Index buffers: blocks of 256 KiB.
    Index,
}

impl HostUse {
    /// The pool's name, its usage and its first block.
    pub(super) fn pool(self) -> (&'static str, PoolConfig) {
        use wgpu::BufferUsages as U;
        let copy = U::COPY_DST | U::COPY_SRC;
        let (name, usage, block) = match self {
            HostUse::Uniform => ("host uniform", U::UNIFORM | copy, 64 << 10),
            HostUse::Vertex => ("host vertex", U::VERTEX | U::STORAGE | copy, 256 << 10),
            HostUse::Index => ("host index", U::INDEX | copy, 256 << 10),
        };
        (
            name,
            PoolConfig {
                quota: None,
                usage,
                block_size: Some(block),
            },
        )
    }
}
