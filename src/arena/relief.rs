//! The pressure hook: how a layer above the arena (the tiered memory of
//! [`crate::tier`]) gives device memory back when an allocation would cross a limit.
//!
//! The arena knows nothing of what the hook does; it only promises *when* it calls it:
//! on the allocation path, after cached ranges and empty blocks that were in the way went
//! back and in-flight frees were waited for once (they come back without moving a byte),
//! and before it reports out-of-memory; four times at most per request (holes in the
//! request's pool, then whole blocks, then both again, larger); with **no lock of the arena held** (the hook
//! drops allocations, records copies and submits, all of which take the arena's lock or
//! may run wgpu callbacks). After a hook reports bytes given back, the arena waits for
//! the oldest epoch of frees in flight (the given-back ranges come back once the copies
//! that read them finish, not once all later work has) and tries again. An allocation made *for* the hook's owner can opt out
//! ([`AllocMode::relieve`]) so the hook never runs inside itself.

/// Gives device memory back under pressure; see the module docs.
pub(crate) trait Relief: Send + Sync {
    /// Frees at least `bytes` of allocations in the arena (pool index `pool` preferred) if
    /// it can; with `whole_blocks`, only allocations whose blocks then hold nothing else,
    /// so that at least `bytes` of blocks can be given back (a budget counts reserved
    /// bytes: holes in blocks do not make room for a new block). Returns the bytes it
    /// dropped (0: nothing to give).
    fn relieve(&self, pool: usize, bytes: u64, whole_blocks: bool) -> u64;

    /// The host tier's blocks for the arena's JSON and SVG dumps. Called with no lock of
    /// the arena held.
    fn host_blocks(&self) -> Vec<HostBlockDump>;

    /// Lines about the tiers for the arena's summary. Called with no lock of the arena
    /// held.
    fn summary_lines(&self) -> Vec<String>;

    /// The hook's owner, for a layer above that knows its type (a runtime recovering from
    /// a lost device moves the tiers onto its new arena).
    fn as_any(self: std::sync::Arc<Self>) -> std::sync::Arc<dyn std::any::Any + Send + Sync>;
}

/// One host-tier block as the dumps show it.
pub(crate) struct HostBlockDump {
    pub block: u32,
    pub size: u64,
    /// `(offset, size, label)` of every evicted allocation in it.
    pub ranges: Vec<(u64, u64, String)>,
}

/// How one allocation may be served; [`AllocMode::NORMAL`] is what `Arena::alloc` does.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AllocMode {
    /// May take a range of the same size from the by-size cache, and its range goes back
    /// to that cache when freed.
    pub cache: bool,
    /// May create a new block.
    pub grow: bool,
    /// May call the pressure hook.
    pub relieve: bool,
    /// Only in this block (a repacking's fresh block, `Arena::reserve_block`).
    pub block: Option<crate::alloc::BlockId>,
    /// In a block of its own, which nothing else is placed in while it lives
    /// (`Arena::alloc_own_buffer_in`).
    pub own: bool,
}

impl AllocMode {
    /// Everything allowed.
    pub const NORMAL: AllocMode = AllocMode {
        cache: true,
        grow: true,
        relieve: true,
        block: None,
        own: false,
    };
    /// A buffer of its own: never a cached range (it may lie in a shared block), and its
    /// range does not go to the by-size cache when freed.
    pub const OWN_BUFFER: AllocMode = AllocMode {
        cache: false,
        grow: true,
        relieve: true,
        block: None,
        own: true,
    };
    /// A defragmentation's destination: only free space of existing blocks that are not
    /// draining; never a cached range (it may lie in a draining block), never the hook.
    pub const INTO_EXISTING: AllocMode = AllocMode {
        cache: false,
        grow: false,
        relieve: false,
        block: None,
        own: false,
    };

    /// A repacking's destination: block `id` and nothing else.
    pub fn in_block(id: crate::alloc::BlockId) -> AllocMode {
        AllocMode {
            block: Some(id),
            ..AllocMode::INTO_EXISTING
        }
    }
}
