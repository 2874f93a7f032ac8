//! Planned allocations: one pool's allocations served from an offset table while a
//! planned loop's iteration runs (the user-facing half is [`crate::plan::PlannedLoop`]).
//!
//! # How it works
//! A [`LoopHook`] is installed in the arena's state for one iteration, for one pool and
//! the thread that began it. While it **records**, that thread's allocations in the pool
//! are served as usual and noted with their sizes and the order of their allocations
//! and frees ([`LoopEvent`]). While it **replays**, the `k`-th such allocation is an
//! offset lookup in the [`LoopTable`] inside one *loop block*: no allocator, no by-size
//! cache, no epoch. Loop blocks are ordinary blocks of the pool's [`BlockSet`] held by
//! one range that spans them, so no other allocation lands in them and trimming never
//! gives them back; they are counted in `reserved` like any block, and each planned
//! allocation in `allocated`, the live table, the labels and the history like any other.
//!
//! # What keeps it safe
//! - **A replay serves a planned offset only while the iteration has followed the
//!   recording event for event.** Then the planned allocations live at this point are
//!   exactly those live at this point of the recording, which the plan keeps apart. The
//!   first allocation of another size, or an allocation or free out of the recorded order
//!   (another thread freeing early counts), ends the plan for the rest of the iteration:
//!   what follows is served by the arena as usual ([`LoopHook::deviated`]). Planned
//!   allocations already handed out stay valid.
//! - **Within an iteration, bytes are reused in queue order**, as PyTorch's caching
//!   allocator reuses a block freed on the same stream: an allocation's drop promises its
//!   work was submitted (the arena's rule), later work on the same bytes is submitted
//!   after it on the one queue, and wgpu orders the two with a barrier on the block.
//! - **Across iterations, a loop block is used again only after the GPU finished the
//!   iteration that used it last** (its fence: the work-done epoch handed out when the
//!   iteration ends, `gpu/work_done.rs`), and only when none of its planned allocations is still alive; with
//!   two blocks (the default) the CPU runs one iteration ahead of the GPU.

use std::sync::atomic::Ordering;

use crate::gpu::Epoch;
use std::sync::Arc;

use super::block::BlockBuffer;
use super::state::{Placed, State};
use crate::alloc::BlockId;

/// One step of a recorded iteration: the `k`-th allocation of the loop's pool, or its free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoopEvent {
    Alloc(u32),
    Free(u32),
}

/// What one iteration's recording saw, in order.
#[derive(Default, Debug)]
pub(crate) struct Recording {
    /// Bytes of each allocation, in order (the request rounded up to 4).
    pub sizes: Vec<u64>,
    pub events: Vec<LoopEvent>,
    /// Allocation id -> index in `sizes`, for allocations not yet freed.
    pub open: rustc_hash::FxHashMap<u64, u32>,
}

/// The plan a replay follows: per allocation its size and, when it was freed inside the
/// recorded iteration, its offset in the loop block (`None`: it outlived the iteration,
/// so it is served by the arena as usual).
#[derive(Debug)]
pub(crate) struct LoopTable {
    pub sizes: Vec<u64>,
    pub offsets: Vec<Option<u64>>,
    pub events: Vec<LoopEvent>,
}

/// Where a replay is in its table.
pub(crate) struct Replay {
    pub table: Arc<LoopTable>,
    /// The loop blocks of this iteration, with their buffers: table offset `o` lies at
    /// `o % block_bytes` of block `o / block_bytes`.
    pub blocks: Vec<(BlockId, Arc<BlockBuffer>)>,
    pub block_bytes: u64,
    /// Next event of `table.events` expected.
    pub cursor: usize,
    /// Index of the next allocation.
    pub next: u32,
    /// Allocations served from the table so far.
    pub served: u64,
}

/// What the hook does this iteration.
pub(crate) enum HookMode {
    Record(Recording),
    Replay(Replay),
}

/// The active iteration of a planned loop (see the module docs).
pub(crate) struct LoopHook {
    /// The planned loop that installed it (`PlannedLoop`'s id).
    pub owner: u64,
    pub pool: usize,
    pub thread: u64,
    /// Unique per iteration in the arena: a planned allocation freed after its iteration
    /// ended does not move a later iteration's cursor.
    pub iteration: u64,
    pub mode: HookMode,
    /// The iteration left the recorded order (replays only).
    pub deviated: bool,
}

/// A planned allocation's place: what its drop needs instead of a range to free.
#[derive(Debug)]
pub(crate) struct PlannedRange {
    pub block: BlockId,
    pub size: u64,
    pub index: u32,
    pub iteration: u64,
}

/// A loop block: held by one spanning range, with the count of its live planned
/// allocations and the fence of the last iteration that used it.
pub(crate) struct LoopBlock {
    pub pool: usize,
    pub block: BlockId,
    /// The range that spans it.
    pub span: Placed,
    pub live: u32,
    /// The work-done epoch of the last iteration that used it (0: none yet).
    pub fence: Epoch,
    /// Its loop was dropped while planned allocations in it lived: give it back when the
    /// last of them is dropped.
    pub orphaned: bool,
}

impl LoopHook {
    /// True when this hook serves `pool` on the calling thread.
    pub fn applies(&self, pool: usize) -> bool {
        self.pool == pool && !self.deviated && self.thread == thread_id()
    }

    /// During a recording, notes an allocation of `size` bytes with `id`.
    pub fn note_recorded(&mut self, size: u64, id: u64) {
        if let HookMode::Record(r) = &mut self.mode {
            let k = r.sizes.len() as u32;
            r.sizes.push(size);
            r.events.push(LoopEvent::Alloc(k));
            r.open.insert(id, k);
        }
    }

    /// During a recording, notes the free of allocation `id` if it was recorded.
    pub fn note_free(&mut self, id: u64) {
        if let HookMode::Record(r) = &mut self.mode {
            if let Some(k) = r.open.remove(&id) {
                r.events.push(LoopEvent::Free(k));
            }
        }
    }

    /// During a replay, decides the next allocation of `size` bytes: `Some(Some(offset))`
    /// serves it from the table, `Some(None)` leaves it to the arena (it outlived the
    /// recording), `None` is a deviation (the hook stops applying).
    pub fn next_planned(&mut self, size: u64) -> Option<Option<(u64, u32)>> {
        let HookMode::Replay(r) = &mut self.mode else {
            return Some(None);
        };
        let k = r.next;
        let expected = r.table.events.get(r.cursor) == Some(&LoopEvent::Alloc(k));
        if !expected || r.table.sizes.get(k as usize) != Some(&size) {
            self.deviated = true;
            return None;
        }
        r.cursor += 1;
        r.next += 1;
        let offset = r.table.offsets[k as usize];
        if offset.is_some() {
            r.served += 1;
        }
        Some(offset.map(|o| (o, k)))
    }

    /// During a replay, notes the free of planned allocation `index` of `iteration`.
    pub fn note_planned_free(&mut self, index: u32, iteration: u64) {
        if iteration != self.iteration || self.deviated {
            return;
        }
        if let HookMode::Replay(r) = &mut self.mode {
            if r.table.events.get(r.cursor) == Some(&LoopEvent::Free(index)) {
                r.cursor += 1;
            } else {
                self.deviated = true;
            }
        }
    }

    /// True when a replay saw every recorded event in order.
    pub fn completed(&self) -> bool {
        match &self.mode {
            HookMode::Record(_) => true,
            HookMode::Replay(r) => !self.deviated && r.cursor == r.table.events.len(),
        }
    }
}

impl State {
    /// The loop block `block` of `pool`, if it is one.
    pub fn loop_block(&mut self, pool: usize, block: BlockId) -> Option<&mut LoopBlock> {
        self.loop_blocks
            .iter_mut()
            .find(|b| b.pool == pool && b.block == block)
    }

    /// Gives a loop block back to its pool: frees its spanning range and releases the
    /// block (destroyed once the lock is released).
    pub fn release_loop_block(&mut self, pool: usize, block: BlockId) {
        let Some(i) = self
            .loop_blocks
            .iter()
            .position(|b| b.pool == pool && b.block == block)
        else {
            return;
        };
        let lb = self.loop_blocks.swap_remove(i);
        self.pools[pool].set.free(lb.span);
        if self.pools[pool].set.release_block(block).is_some() {
            self.retire_block(pool, block);
        }
    }

    /// A planned allocation of loop block `block` was dropped.
    pub fn forget_planned(&mut self, pool: usize, range: &PlannedRange) {
        if let Some(hook) = self.loop_hook.as_deref_mut() {
            if hook.pool == pool {
                hook.note_planned_free(range.index, range.iteration);
            }
        }
        let mut release = false;
        if let Some(lb) = self.loop_block(pool, range.block) {
            lb.live = lb.live.saturating_sub(1);
            release = lb.live == 0 && lb.orphaned;
        }
        if release {
            self.release_loop_block(pool, range.block);
        }
    }
}

/// A number for the calling thread, unique in the process: a thread-local read, where
/// `std::thread::current()` clones a reference-counted handle (this runs on every
/// allocation while a loop iteration runs).
pub(crate) fn thread_id() -> u64 {
    use std::sync::atomic::AtomicU64;
    static NEXT: AtomicU64 = AtomicU64::new(1);
    thread_local!(static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed));
    ID.with(|id| *id)
}

/// What an iteration's end hands back to its planned loop.
pub(crate) struct LoopOutcome {
    /// The recording, when the iteration recorded.
    pub recording: Option<Recording>,
    /// A replay followed the recording to its end.
    pub completed: bool,
    /// Allocations a replay served from the table.
    pub served: u64,
}

impl super::Arena {
    /// Installs the hook of an iteration on the calling thread for `pool`: a recording,
    /// or a replay of `table` in loop blocks `blocks` of `block_bytes` each (the last may
    /// be smaller). Fails while another iteration runs.
    pub(crate) fn loop_begin(
        &self,
        owner: u64,
        pool: super::PoolId,
        replay: Option<(Arc<LoopTable>, &[BlockId], u64)>,
    ) -> crate::Result<()> {
        static ITERATIONS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        self.check_pool(pool)?;
        self.gpu().check_alive()?;
        let mut st = self.shared().state.lock();
        if st.loop_hook.is_some() {
            return Err(crate::Error::invalid(
                "a planned loop iteration began while another is running on this arena",
                "end the running iteration first (one iteration at a time per arena)",
            ));
        }
        let mode = match replay {
            None => HookMode::Record(Recording::default()),
            Some((table, blocks, block_bytes)) => {
                let p = &st.pools[pool.index()];
                let blocks = blocks
                    .iter()
                    .map(|&b| p.buffer(b).cloned().map(|buffer| (b, buffer)))
                    .collect::<Option<Vec<_>>>()
                    .ok_or_else(|| {
                        crate::Error::invalid("a planned loop's block is gone", "re-plan the loop")
                    })?;
                HookMode::Replay(Replay {
                    table,
                    blocks,
                    block_bytes,
                    cursor: 0,
                    next: 0,
                    served: 0,
                })
            }
        };
        st.loop_hook = Some(Box::new(LoopHook {
            owner,
            pool: pool.index(),
            thread: thread_id(),
            iteration: ITERATIONS.fetch_add(1, Ordering::Relaxed),
            mode,
            deviated: false,
        }));
        Ok(())
    }

    /// Ends the calling thread's iteration: takes its hook out and, for a replay, arms
    /// its loop block's fence to be set once the GPU has finished the work submitted so
    /// far. `None` when no iteration of this thread runs.
    pub(crate) fn loop_end(&self) -> Option<LoopOutcome> {
        let shared = self.shared();
        let mut st = shared.state.lock();
        if st
            .loop_hook
            .as_ref()
            .is_none_or(|h| h.thread != thread_id())
        {
            return None;
        }
        let hook = st.loop_hook.take()?;
        let completed = hook.completed();
        let pool = hook.pool;
        match hook.mode {
            HookMode::Record(recording) => Some(LoopOutcome {
                recording: Some(recording),
                completed,
                served: 0,
            }),
            HookMode::Replay(replay) => {
                // A dry run records no GPU work: epoch 0 is done from the start. Handing
                // out an epoch only files a callback (see `Shared::seal`).
                let fence = if shared.config.dry_run {
                    0
                } else {
                    shared.gpu.work_epoch()
                };
                for &(b, _) in &replay.blocks {
                    if let Some(lb) = st.loop_block(pool, b) {
                        lb.fence = fence;
                    }
                }
                drop(st);
                Some(LoopOutcome {
                    recording: None,
                    completed,
                    served: replay.served,
                })
            }
        }
    }

    /// Removes the hook of loop `owner` if it is still installed (its iteration was
    /// forgotten rather than ended): a loop being dropped must not leave a hook that
    /// serves offsets in blocks it gives back.
    pub(crate) fn loop_forget(&self, owner: u64) {
        let mut st = self.shared().state.lock();
        if st.loop_hook.as_ref().is_some_and(|h| h.owner == owner) {
            st.loop_hook = None;
        }
    }

    /// Reserves a loop block of `bytes` in `pool` (within the budget and quota) and holds
    /// it with one spanning range.
    pub(crate) fn loop_reserve(&self, pool: super::PoolId, bytes: u64) -> crate::Result<BlockId> {
        // Reserved, held and filed under one lock: an empty block between two locks took
        // another thread's allocation in the soak, and a held range filed under a second
        // lock left a range no record or loop names in between.
        let index = pool.index();
        self.reserve_held_block(pool, bytes, "planned loop", &mut |st, block, span| {
            st.loop_blocks.push(LoopBlock {
                pool: index,
                block,
                span,
                live: 0,
                fence: 0,
                orphaned: false,
            });
        })
    }

    /// Waits until loop block `block` may serve another iteration: its last iteration's
    /// GPU work has finished. Returns false when planned allocations in it still live (the
    /// iteration must not replay into it).
    pub(crate) fn loop_block_ready(
        &self,
        pool: super::PoolId,
        block: BlockId,
    ) -> crate::Result<bool> {
        let (live, fence) = {
            let mut st = self.shared().state.lock();
            match st.loop_block(pool.index(), block) {
                Some(lb) => (lb.live, lb.fence),
                None => return Ok(false),
            }
        };
        if live > 0 {
            return Ok(false);
        }
        // In the browser nothing may wait: a block the GPU still uses is not ready.
        if cfg!(web) {
            return Ok(self.gpu().work_done().is_done(fence));
        }
        self.gpu().wait_epoch(fence)?;
        Ok(self.gpu().work_done().is_done(fence))
    }

    /// Gives loop block `block` back, now or, while planned allocations in it live, when
    /// the last of them is dropped.
    pub(crate) fn loop_release(&self, pool: super::PoolId, block: BlockId) {
        let shared = self.shared();
        let mut st = shared.state.lock();
        match st.loop_block(pool.index(), block) {
            Some(lb) if lb.live > 0 => lb.orphaned = true,
            Some(_) => st.release_loop_block(pool.index(), block),
            None => {}
        }
        shared.unlock(st);
    }
}
