//! What the tiers ask of the arena to evict and defragment: how the blocks of a pool are
//! used, where movables lie, blocks reserved whole or marked draining, frees sealed and
//! collected on demand, and emptied blocks given back. Crate-internal: nothing here is a
//! user's call.

use std::sync::Arc;

use super::{state, AllocMode, Allocation, Arena, PoolId, State};
use crate::alloc::BlockId;
use crate::Result;

/// One block of a pool as [`Arena::block_usage`] reads it, for the tiers' eviction and
/// defragmentation.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockUsage {
    pub id: BlockId,
    /// Bytes the block holds.
    pub size: u64,
    /// A block of one large allocation of its own.
    pub dedicated: bool,
    /// Live ranges in it (pending and cached ones included).
    pub live: usize,
    /// Bytes those ranges take.
    pub used: u64,
    /// Of `live`, the ranges freed and not yet back in the block (waiting for the GPU, or
    /// cached for reuse): they leave on their own.
    pub waiting: usize,
    /// Being emptied by a defragmentation: nothing new is placed in it.
    pub draining: bool,
}

impl Arena {
    /// Per block of `pool`, what it holds. Ranges pending or cached count as live; call
    /// [`synchronize`](Self::synchronize) first to see only allocations.
    pub(crate) fn block_usage(&self, pool: PoolId) -> Vec<BlockUsage> {
        let st = self.shared().state.lock();
        let Some(p) = st.pools.get(pool.index) else {
            return Vec::new();
        };
        // Freed ranges not back in their blocks are in the open frees, the sealed epochs
        // and the ready cache: walking those, not every record, keeps this off the
        // allocations' count (a defragmentation pass asks once per pool; 16 k movables
        // made the full walk most of a pass's fixed time).
        let mut waiting: rustc_hash::FxHashMap<BlockId, usize> = Default::default();
        let freed = st
            .open
            .iter()
            .chain(st.sealed.iter().flat_map(|(_, slots)| slots.iter()))
            .chain(st.ready.lists().iter().flat_map(|l| l.slots.iter()));
        for &slot in freed {
            if let Some(r) = st.live.get(slot) {
                if r.pool == pool.index && r.phase != state::Phase::Live && !r.is_planned() {
                    *waiting.entry(r.block()).or_default() += 1;
                }
            }
        }
        debug_assert_eq!(
            waiting.values().sum::<usize>(),
            st.live
                .records()
                .filter(|(_, r)| r.pool == pool.index
                    && r.phase != state::Phase::Live
                    && !r.is_planned())
                .count(),
            "a freed range outside the open frees, the sealed epochs and the ready cache"
        );
        p.set
            .blocks()
            .map(|(id, size, dedicated, live)| BlockUsage {
                id,
                size,
                dedicated,
                live,
                used: p.set.block(id).map_or(0, |a| a.used_bytes()),
                waiting: waiting.get(&id).copied().unwrap_or(0),
                draining: p.set.is_draining(id),
            })
            .collect()
    }

    /// Runs `f` with the arena's lock held, handing it a reader of an allocation's block
    /// and placed bytes (guards included; `None` for one of another arena): a scan of
    /// many allocations reads them all under one lock, with no list of them built first.
    pub(crate) fn with_placements<R>(
        &self,
        f: impl FnOnce(&dyn Fn(&Allocation) -> Option<(BlockId, u64)>) -> R,
    ) -> R {
        let shared = self.shared();
        let st = shared.state.lock();
        let place = |a: &Allocation| {
            if !Arc::ptr_eq(&a.shared, shared) {
                return None;
            }
            st.live.get(a.slot).map(|r| (r.block(), r.placed_size()))
        };
        let result = f(&place);
        shared.unlock(st);
        result
    }

    /// Places every destination of one group of defragmentation moves in `pool` under
    /// one lock, all or none (`Ok(None)`: one found no room; nothing is counted as out of
    /// memory). `mode` is [`AllocMode::INTO_EXISTING`] or [`AllocMode::in_block`].
    pub(crate) fn alloc_destinations(
        &self,
        pool: PoolId,
        requests: &[(u64, &str)],
        mode: AllocMode,
    ) -> Result<Option<Vec<Allocation>>> {
        self.check_pool(pool)?;
        self.shared().alloc_destinations(pool.index, requests, mode)
    }

    /// The budget and the bytes allocated now (a cheap read, where [`Arena::stats`]
    /// walks every block).
    pub(crate) fn budget_and_allocated(&self) -> (Option<u64>, u64) {
        let st = self.shared().state.lock();
        (st.budget, st.counters.allocated)
    }

    /// The offset alignment of `pool`'s ranges and its largest shared block.
    pub(crate) fn pool_layout(&self, pool: PoolId) -> (u64, u64) {
        let st = self.shared().state.lock();
        st.pools.get(pool.index).map_or((256, 256 << 20), |p| {
            (p.alignment, p.set.policy().max_block)
        })
    }

    /// Reserves an empty block of exactly `bytes` in `pool`, within the budget and quota,
    /// for [`AllocMode::in_block`] allocations; `Ok(None)` when they leave no room (a
    /// defragmentation's question, not a request refused: no out-of-memory is counted or
    /// recorded).
    pub(crate) fn reserve_block(
        &self,
        pool: PoolId,
        bytes: u64,
        label: &str,
    ) -> Result<Option<BlockId>> {
        self.check_pool(pool)?;
        self.shared()
            .reserve_block(pool.index, bytes, label, None, true)
    }

    /// Reserves an empty block of exactly `bytes` in `pool`, holds it whole with one
    /// spanning range, and hands block and range to `install` under the same lock (a
    /// planned loop's block).
    pub(crate) fn reserve_held_block(
        &self,
        pool: PoolId,
        bytes: u64,
        label: &str,
        install: &mut dyn FnMut(&mut State, BlockId, state::Placed),
    ) -> Result<BlockId> {
        self.check_pool(pool)?;
        self.shared()
            .reserve_block(pool.index, bytes, label, Some(install), false)?
            .ok_or_else(|| {
                crate::Error::invalid(
                    "a block was refused without an out-of-memory error",
                    "this is a vramkit bug: please report it",
                )
            })
    }

    /// Gives back every empty block now, whatever `trim_keep` says (a defragmentation
    /// emptied them on purpose). Returns the bytes given back.
    pub(crate) fn release_all_empty(&self) -> u64 {
        let shared = self.shared();
        let mut st = shared.state.lock();
        st.flush_ready();
        let released = st.release_empty(0);
        shared.unlock(st);
        released
    }

    /// Seals the frees gathered so far into an epoch now, so they come back as soon as the
    /// work submitted so far completes (a lazily sealed epoch would wait for whatever was
    /// submitted by the time it is sealed), and returns the epoch after which every range
    /// freed so far is back. For frees whose ranges someone is about to wait for: evicted
    /// allocations, a defragmentation pass's old places.
    pub(crate) fn seal_frees(&self) -> crate::gpu::Epoch {
        let shared = self.shared();
        let mut st = shared.state.lock();
        shared.seal(&mut st);
        let newest = st.sealed.back().map_or(0, |&(epoch, _)| epoch);
        shared.unlock(st);
        newest
    }

    /// Seals the open frees, polls without blocking, and collects every free the GPU is
    /// done with, returning the ranges cached for reuse to their blocks: what a
    /// defragmentation pass does first, so blocks whose frees came back can be emptied.
    pub(crate) fn collect_finished(&self) {
        let shared = self.shared();
        let st = shared.poll_unlocked(shared.state.lock(), false);
        let mut st = st;
        st.flush_ready();
        shared.unlock(st);
    }

    /// Collects the frees whose epochs are done (never waiting or polling), returns the
    /// ranges cached for reuse to their blocks, and gives back those of `blocks` (of
    /// `pool`) that are now empty, marking them no longer draining. Returns the blocks
    /// and bytes given back, and their buffers, which the caller destroys.
    pub(crate) fn release_drained(
        &self,
        pool: PoolId,
        blocks: &[BlockId],
    ) -> (usize, u64, Vec<DoomedBlock>) {
        let shared = self.shared();
        let mut st = shared.state.lock();
        st.harvest(shared.completion.get());
        st.flush_ready();
        let (mut count, mut bytes) = (0, 0);
        for &id in blocks {
            let Some(p) = st.pools.get_mut(pool.index) else {
                break;
            };
            p.set.set_draining(id, false);
            if let Some(size) = p.set.release_block(id) {
                st.retire_block(pool.index, id);
                count += 1;
                bytes += size;
            }
        }
        // Handed to the caller to destroy (counted as given back already): destroying a
        // block's buffer can take a driver milliseconds (4 ms for a 256 MiB block on an
        // H200), which a frame thread running a pass should not wait for.
        let doomed = std::mem::take(&mut st.doomed)
            .into_iter()
            .map(DoomedBlock)
            .collect();
        shared.unlock(st);
        (count, bytes, doomed)
    }

    /// Marks blocks of `pool` as draining or not ([`BlockSet::set_draining`]).
    pub(crate) fn set_draining(&self, pool: PoolId, blocks: &[BlockId], on: bool) {
        let mut st = self.shared().state.lock();
        if let Some(p) = st.pools.get_mut(pool.index) {
            for &id in blocks {
                p.set.set_draining(id, on);
            }
        }
    }
}

/// A block's buffer the arena has given back (counted out of its reserved bytes), for the
/// caller to destroy where it suits it.
pub(crate) struct DoomedBlock(std::sync::Arc<super::block::BlockBuffer>);

impl DoomedBlock {
    /// Destroys the buffer (and with it the mapping). Call with no lock of the arena
    /// held: destroying may run a wgpu map callback.
    pub(crate) fn destroy(self) {
        self.0.destroy();
    }
}
