//! Defragmentation: movable allocations leave sparse blocks, and the emptied blocks go
//! back to the device.
//!
//! # How it works
//! 1. All GPU work is waited for, so pending frees and cached ranges are back in their
//!    blocks and every in-flight mark has cleared; a block's live ranges are then exactly
//!    its allocations.
//! 2. Per pool, a shared block is a *candidate* when every live range in it is an
//!    unpinned movable (one plain allocation or pinned movable keeps the block).
//! 3. **Repack**: the emptiest candidates are grouped (at most the pool's largest block
//!    of live bytes per group) and each group's movables go, largest first, into one
//!    fresh block sized to exactly their bytes plus a sliver of slack: packed end to
//!    end, they leave no holes. This needs room under the budget for one such block at a
//!    time; where there is none, the pass goes on with step 4 only.
//! 4. **Fill holes**: the remaining candidates, emptiest first, are moved into the free
//!    space of the other blocks while their bytes fit in it (never a new block).
//! 5. A block being emptied is marked *draining* (the allocator core places nothing new in
//!    it). If one of its movables finds no place, the block is left as it was.
//! 6. One submission copies every moved allocation (`copy_buffer_to_buffer`), the handles
//!    point at the new ranges, the old ranges are freed, and once the copies have finished
//!    the emptied blocks are given back.
//!
//! Dedicated blocks (one large allocation each) are never candidates: moving one would
//! free one block by filling another of the same size.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Place, Tiers};
use crate::alloc::BlockId;
use crate::arena::{AllocMode, Allocation, EventKind, PoolId};
use crate::Result;

/// Bounds on one [`Tiers::defragment`] call, for incremental passes (like VMA's); a block
/// is emptied completely or not at all, so a pass stops before the block that would
/// cross a bound. The default is unbounded. Under a budget a pass also holds no more
/// destinations at once than leave a sixteenth of the budget free: until its copies
/// finish, a move holds both places.
#[derive(Clone, Copy, Debug)]
pub struct DefragLimits {
    /// Most bytes to move.
    pub max_bytes: u64,
    /// Most allocations to move.
    pub max_moves: usize,
}

impl Default for DefragLimits {
    fn default() -> Self {
        DefragLimits {
            max_bytes: u64::MAX,
            max_moves: usize::MAX,
        }
    }
}

/// What one [`Tiers::defragment`] call did.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefragReport {
    /// Allocations moved.
    pub moves: usize,
    /// Bytes moved (device to device).
    pub bytes_moved: u64,
    /// Blocks given back.
    pub blocks_freed: usize,
    /// Bytes given back.
    pub bytes_freed: u64,
    /// Arena bytes in live allocations before and after.
    pub allocated_before: u64,
    /// See `allocated_before`.
    pub allocated_after: u64,
    /// Arena bytes held in blocks before and after.
    pub reserved_before: u64,
    /// See `reserved_before`.
    pub reserved_after: u64,
    /// False when a bound of [`DefragLimits`] (or the budget's room) stopped the pass with
    /// candidates left: call again to go on.
    pub complete: bool,
    /// Wall time of the call, waits and copies included.
    pub elapsed: Duration,
}

impl DefragReport {
    /// Reserved over allocated before the pass (1.0: no waste).
    pub fn ratio_before(&self) -> f64 {
        self.reserved_before as f64 / self.allocated_before.max(1) as f64
    }

    /// Reserved over allocated after the pass.
    pub fn ratio_after(&self) -> f64 {
        self.reserved_after as f64 / self.allocated_after.max(1) as f64
    }
}

/// One movable to move: its slot and [generation](super::Entry::generation) when the pass
/// looked (the move happens only if both still match: same movable, same place, as
/// another thread may drop, create, evict or restore meanwhile), its size, and the bytes
/// it takes in its block.
struct Candidate {
    slot: u32,
    generation: u64,
    size: u64,
    placed: u64,
}

/// What one pass has decided so far.
struct Pass {
    report: DefragReport,
    limits: DefragLimits,
    moves: Vec<Move>,
    drained: Vec<(PoolId, BlockId)>,
    /// Bytes of destinations the pass may hold at once: until the copies finish, a move
    /// holds both places, and under a budget that room is what other threads' requests
    /// need. The pass leaves a sixteenth of the budget free.
    spare: u64,
}

impl Pass {
    /// Whether moving `bytes` more in `moves` more allocations stays within the limits;
    /// records that the pass stopped short when not.
    fn fits(&mut self, bytes: u64, moves: usize) -> bool {
        let ok = self.report.bytes_moved + bytes <= self.limits.max_bytes.min(self.spare)
            && self.report.moves + moves <= self.limits.max_moves;
        if !ok {
            self.report.complete = false;
        }
        ok
    }

    fn take(&mut self, planned: Vec<Move>) {
        self.report.moves += planned.len();
        self.report.bytes_moved += planned.iter().map(|m| m.to.size()).sum::<u64>();
        self.moves.extend(planned);
    }
}

/// One planned move: the old allocation taken out of the entry and its new place.
struct Move {
    slot: u32,
    from: Arc<Allocation>,
    to: Allocation,
}

impl Tiers {
    /// Moves movable allocations into fewer blocks and gives the emptied ones back; see
    /// the module docs of `tier::defrag`. Waits for all GPU work first.
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// # let rt = vramkit::Runtime::headless()?;
    /// # let tiers = vramkit::tier::Tiers::new(rt.arena(), Default::default())?;
    /// let report = tiers.defragment(Default::default())?;
    /// println!("{:.2} -> {:.2} reserved/allocated", report.ratio_before(), report.ratio_after());
    /// # Ok(()) }
    /// ```
    pub fn defragment(&self, limits: DefragLimits) -> Result<DefragReport> {
        let start = Instant::now();
        let shared = &self.shared;
        let arena = &shared.arena;
        arena.synchronize()?;
        shared.settle()?;
        let before = arena.stats();
        let mut pass = Pass {
            report: DefragReport {
                allocated_before: before.allocated,
                reserved_before: before.reserved,
                complete: true,
                ..Default::default()
            },
            limits,
            moves: Vec::new(),
            drained: Vec::new(),
            spare: before
                .budget
                .map_or(u64::MAX, |b| (b - b / 16).saturating_sub(before.allocated)),
        };
        let by_block = self.movable_blocks();
        for pool in super::distinct_pools(by_block.keys().map(|(p, _)| *p)) {
            self.repack(pool, &by_block, &mut pass);
            self.fill_holes(pool, &by_block, &mut pass);
        }
        let Pass {
            mut report,
            moves,
            drained,
            ..
        } = pass;
        // The old ranges come back once the copies finish; then the drained blocks are
        // empty and go back to the device (with any repack block left unused). On an
        // error the blocks stop draining all the same.
        let released = self.run_moves(moves).and_then(|()| {
            arena.synchronize()?;
            let blocks_before = arena.stats().blocks;
            report.bytes_freed = arena.release_all_empty();
            report.blocks_freed = blocks_before.saturating_sub(arena.stats().blocks);
            Ok(())
        });
        for (pool, id) in drained {
            arena.set_draining(pool, &[id], false);
        }
        released?;
        let after = arena.stats();
        report.allocated_after = after.allocated;
        report.reserved_after = after.reserved;
        report.elapsed = start.elapsed();
        Ok(report)
    }

    /// Movables free to move, by pool and block.
    fn movable_blocks(&self) -> HashMap<(PoolId, BlockId), Vec<Candidate>> {
        let mut by_block: HashMap<(PoolId, BlockId), Vec<Candidate>> = HashMap::new();
        let st = self.shared.state.lock();
        let done = self.shared.gpu.work_done().done();
        for (slot, e) in st.entries.iter().enumerate() {
            let Some(e) = e.as_ref().filter(|e| e.movable_now(done)) else {
                continue;
            };
            let Place::Device(a) = &e.place else { continue };
            let (block, _) = a.place();
            by_block
                .entry((e.pool, block))
                .or_default()
                .push(Candidate {
                    slot: slot as u32,
                    generation: e.generation,
                    size: e.size,
                    placed: a.placed_size(),
                });
        }
        by_block
    }

    /// Candidate blocks of `pool` not drained yet, emptiest first: `(used, size, id)`.
    fn candidate_blocks(
        &self,
        pool: PoolId,
        by_block: &HashMap<(PoolId, BlockId), Vec<Candidate>>,
        pass: &Pass,
    ) -> Vec<(u64, u64, BlockId)> {
        let mut c: Vec<(u64, u64, BlockId)> = self
            .shared
            .arena
            .block_usage(pool)
            .into_iter()
            .filter(|b| {
                !b.dedicated
                    && b.live > 0
                    && !pass.drained.contains(&(pool, b.id))
                    && by_block
                        .get(&(pool, b.id))
                        .is_some_and(|c| c.len() == b.live)
            })
            .map(|b| (b.used, b.size, b.id))
            .collect();
        c.sort_unstable();
        c
    }

    /// Step 3 of the module docs.
    fn repack(
        &self,
        pool: PoolId,
        by_block: &HashMap<(PoolId, BlockId), Vec<Candidate>>,
        pass: &mut Pass,
    ) {
        let arena = &self.shared.arena;
        let (align, max_block) = arena.pool_layout(pool);
        let candidates = self.candidate_blocks(pool, by_block, pass);
        let mut i = 0;
        while i < candidates.len() {
            let (mut used, mut size, mut j) = (0, 0, i);
            while j < candidates.len() && used + candidates[j].0 <= max_block {
                used += candidates[j].0;
                size += candidates[j].1;
                j += 1;
            }
            if j == i {
                break;
            }
            let group: Vec<BlockId> = candidates[i..j].iter().map(|c| c.2).collect();
            i = j;
            let mut members: Vec<&Candidate> = group
                .iter()
                .filter_map(|id| by_block.get(&(pool, *id)))
                .flatten()
                .collect();
            members.sort_unstable_by_key(|c| std::cmp::Reverse(c.placed));
            // End to end at the pool's alignment, plus slack for the range allocator's
            // search (it asks for a free range one alignment and one size bin larger).
            let largest = members.first().map_or(0, |c| c.placed);
            let packed: u64 = members
                .iter()
                .map(|c| c.placed.next_multiple_of(align))
                .sum();
            let bytes = packed + 2 * align + largest / 8;
            // Worth a move only if it gives back at least a sixteenth of the group.
            if bytes + size / 16 > size {
                continue;
            }
            if !pass.fits(used, members.len()) {
                break;
            }
            let Ok(block) = arena.reserve_block(pool, bytes, "defragment") else {
                // No room for a fresh block under the budget: holes only.
                break;
            };
            arena.set_draining(pool, &group, true);
            match self.plan_moves(pool, &members, AllocMode::in_block(block)) {
                Some(planned) => {
                    pass.drained.extend(group.iter().map(|id| (pool, *id)));
                    pass.take(planned);
                }
                None => arena.set_draining(pool, &group, false),
            }
        }
    }

    /// Step 4 of the module docs.
    fn fill_holes(
        &self,
        pool: PoolId,
        by_block: &HashMap<(PoolId, BlockId), Vec<Candidate>>,
        pass: &mut Pass,
    ) {
        let arena = &self.shared.arena;
        let usage = arena.block_usage(pool);
        let mut free_elsewhere: u64 = usage
            .iter()
            .filter(|b| !b.dedicated && !pass.drained.contains(&(pool, b.id)))
            .map(|b| b.size - b.used)
            .sum();
        for (used, size, id) in self.candidate_blocks(pool, by_block, pass) {
            // Its own free space no longer counts once it drains.
            let room = free_elsewhere.saturating_sub(size - used);
            if used > room {
                break;
            }
            let Some(members) = by_block.get(&(pool, id)) else {
                continue;
            };
            if !pass.fits(used, members.len()) {
                break;
            }
            let mut members: Vec<&Candidate> = members.iter().collect();
            members.sort_unstable_by_key(|c| std::cmp::Reverse(c.placed));
            arena.set_draining(pool, &[id], true);
            match self.plan_moves(pool, &members, AllocMode::INTO_EXISTING) {
                Some(planned) => {
                    pass.drained.push((pool, id));
                    pass.take(planned);
                    free_elsewhere = room - used;
                }
                // Fragmented: this block stays; a fuller one may still have members
                // that fit.
                None => arena.set_draining(pool, &[id], false),
            }
        }
    }

    /// New places (`mode`) for every member of draining blocks; `None` (nothing changed)
    /// when one does not fit.
    fn plan_moves(
        &self,
        pool: PoolId,
        members: &[&Candidate],
        mode: AllocMode,
    ) -> Option<Vec<Move>> {
        let shared = &self.shared;
        let mut planned: Vec<Move> = Vec::with_capacity(members.len());
        let mut label = String::new();
        for c in members {
            {
                let mut st = shared.state.lock();
                if let Some(e) = st.entry_of(c.slot, c.generation) {
                    label.clear();
                    label.push_str(&e.label);
                }
            }
            let Ok(to) = shared.arena.alloc_mode(pool, c.size, &label, mode) else {
                self.unplan(planned);
                return None;
            };
            // Decided on a snapshot: act only if the slot still holds the same movable in
            // the same place, unpinned and with no GPU work in flight on it.
            let mut st = shared.state.lock();
            let done = shared.gpu.work_done().done();
            let taken = match st.entry_of(c.slot, c.generation) {
                Some(e) if e.movable_now(done) => std::mem::replace(&mut e.place, Place::Moving),
                _ => Place::Moving,
            };
            let Place::Device(from) = taken else {
                // Pinned, moved, dropped or in flight meanwhile: the block cannot empty.
                drop(st);
                to.discard_unused();
                self.unplan(planned);
                return None;
            };
            drop(st);
            planned.push(Move {
                slot: c.slot,
                from,
                to,
            });
        }
        Some(planned)
    }

    /// Puts planned moves back as they were.
    fn unplan(&self, planned: Vec<Move>) {
        let shared = &self.shared;
        let mut st = shared.state.lock();
        let mut unused = Vec::with_capacity(planned.len());
        for m in planned {
            shared.commit(&mut st, m.slot, Place::Device(m.from));
            unused.push(m.to);
        }
        shared.moved.notify_all();
        drop(st);
        // Never used by the GPU: their ranges go straight back, for the next attempt.
        for a in unused {
            a.discard_unused();
        }
    }

    /// Copies every move in one submission and points the handles at the new ranges. When
    /// wgpu refuses the copies (a lost device), every entry goes back to where it was and
    /// nothing moved.
    fn run_moves(&self, moves: Vec<Move>) -> Result<()> {
        if moves.is_empty() {
            return Ok(());
        }
        let shared = &self.shared;
        let copied = shared.gpu.scoped("defragmenting", || {
            let copies: Vec<super::copy::Copy<'_>> = moves
                .iter()
                .map(|m| super::copy::Copy {
                    src: m.from.buffer(),
                    src_offset: m.from.offset(),
                    dst: m.to.buffer(),
                    dst_offset: m.to.offset(),
                    bytes: m.from.size(),
                })
                .collect();
            let encoder = || {
                shared
                    .gpu
                    .device()
                    .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                        label: Some("vramkit defragment"),
                    })
            };
            let mut recorded = encoder();
            if let Err(e) = super::copy::record(&shared.gpu, &mut recorded, &copies) {
                // The kernel could not be set up: copy commands move the same bytes.
                log::warn!("defragmentation falls back to copy commands: {e}");
                recorded = encoder();
                copies.iter().for_each(|c| c.command(&mut recorded));
            }
            shared.gpu.submit_timed("defragment", [recorded.finish()]);
        });
        if let Err(e) = copied {
            self.unplan(moves);
            return Err(e);
        }
        let bytes: u64 = moves.iter().map(|m| m.from.size()).sum();
        let mut st = shared.state.lock();
        st.counters.defrag_moves += moves.len() as u64;
        st.counters.bytes_defrag_moved += bytes;
        let mut olds = Vec::with_capacity(moves.len());
        for m in moves {
            m.to.note(EventKind::Move);
            olds.push(m.from);
            shared.commit(&mut st, m.slot, Place::Device(Arc::new(m.to)));
        }
        shared.moved.notify_all();
        drop(st);
        drop(olds);
        Ok(())
    }
}
