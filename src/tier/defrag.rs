//! Defragmentation: movable allocations leave sparse blocks, and the emptied blocks go
//! back to the device. This file plans the moves of one pass; `passes.rs` runs passes
//! (VMA's begin / pass / end) and [`Tiers::defragment`] is a loop over them.
//!
//! # How a pass plans
//! 1. Only what is free to move now counts: movables that are unpinned and have no GPU
//!    work in flight ([`super::Entry::movable_now`]), in blocks whose every live range is
//!    such a movable. A block still holding frees the GPU has not finished with waits for
//!    a later pass. ([`Tiers::defragment`] first waits for all GPU work, so every block's
//!    live ranges are exactly its allocations.)
//! 2. Per pool (one, or all), a shared block is a *candidate* when every live range in it is an
//!    unpinned movable (one plain allocation or pinned movable keeps the block).
//! 3. **Repack**: the emptiest candidates are grouped (at most the pool's largest block
//!    of live bytes per group) and each group's movables go, largest first, into one
//!    fresh block sized to exactly their bytes plus a sliver of slack: packed end to
//!    end, they leave no holes. This needs room under the budget for one such block at a
//!    time, and leaves a sixteenth of the budget free for other threads' requests (until
//!    the copies finish, a move holds both places); where there is no such room, the
//!    pass goes on with step 4 only. Where an earlier pass's emptied block is kept as a
//!    spare (`passes.rs`), the group is bounded to fit it and packs into it: no block is
//!    created (a driver takes milliseconds to make one).
//! 4. **Fill holes**: the remaining candidates, emptiest first, are moved into the free
//!    space of the other blocks while their bytes fit in it (never a new block). A hole
//!    of a block already reserved needs no budget room, so this step runs under any
//!    budget, a full one included.
//! 5. A block being emptied is marked *draining* (the allocator core places nothing new in
//!    it). If one of its movables finds no place, the block is left as it was. A block
//!    holding more than what is left of the pass's limits moves its largest movables
//!    that fit them and empties over the next passes (into holes; what no hole takes,
//!    into the block its repack began, sized for all of it), so no pass runs past its
//!    limits, however full the blocks: a block of 900 small movables emptied in one
//!    pass took an H200's host 1-1.5 ms to plan.
//! 6. The pass records one copy per moved allocation into a command encoder (the
//!    caller's, or its own submission), and the handles point at the new ranges at once.
//!    The old ranges are freed when the encoder has been submitted, and once those copies
//!    have finished the emptied blocks are spares for later repacks, given back at the
//!    end (`passes.rs`).
//!
//! Dedicated blocks (one large allocation each) are never candidates: moving one would
//! free one block by filling another of the same size.

use std::sync::Arc;
use std::time::Duration;

use super::{Place, Tiers};
use crate::alloc::BlockId;
use crate::arena::{AllocMode, Allocation, BlockUsage, EventKind, PoolId};
use crate::Result;

/// Bounds on one defragmentation pass (like VMA's). A pass stays within them, except
/// that its first move always goes (bounds smaller than one movable still converge): a
/// block holding more than what is left of them empties over several passes, draining
/// meanwhile (nothing new is placed in it). Zero stops everything. The default is
/// unbounded. Under a budget a pass also holds no more destinations at once than leave a
/// sixteenth of the budget free: until its copies finish, a move holds both places.
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
    /// False when a bound of [`DefragLimits`] stopped the pass with candidates left, or a
    /// block waits for frees the GPU has not finished: call again to go on. True when
    /// nothing is left that another call could move now (see `no_room`).
    pub complete: bool,
    /// Candidates were left where they are because nothing can take them: no hole of the
    /// other blocks fits them and the budget leaves no room for a fresh block. Calling
    /// again moves nothing until memory is freed or the budget grows.
    pub no_room: bool,
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

/// Sorts one block's members largest first, the order their moves are placed in, unless
/// an earlier pass did (kept candidates stay sorted).
fn largest_first(members: &mut [Candidate]) {
    if !members.is_sorted_by(|a, b| a.placed >= b.placed) {
        members.sort_unstable_by_key(|c| std::cmp::Reverse(c.placed));
    }
}

/// Movables free to move, by pool and block.
type ByBlock = rustc_hash::FxHashMap<(PoolId, BlockId), Vec<Candidate>>;

/// A scan reads every movable and its place under the arena's lock: about 1-2 ms for
/// 16 384 movables on an H200's host, several typical passes of 16 MiB. A frame loop's
/// scan is spread over passes ([`SCAN_STEP`] movables each, moving nothing until it is
/// whole); its passes keep what one scan found and scan again when what they kept has
/// nothing left to move, and every [`RESCAN_EVERY`] passes unless the entries changed only
/// by their own moves since (`KeptCandidates::current_at`: no movable came, went, was evicted or
/// restored, and the scan passed none over as pinned or busy). Not rarer while things
/// change: scanning every 64 passes gave no clear gain (H200: mean 0.45-0.70 ms against
/// 0.52-0.53 with 16). What they keep can be stale; nothing moves on it unchecked: a
/// block counts as a candidate only while its live ranges number its kept movables, and
/// each move re-checks that its slot holds the same movable, in the same place, unpinned
/// and idle.
const RESCAN_EVERY: u32 = 16;

/// Movables a pass of a frame loop's defragmentation reads of a scan under way (a
/// fifth of a millisecond on an H200's host), so that no pass holds a whole scan: the
/// first passes, and the passes after the kept candidates run out, scan and move
/// nothing. [`Tiers::defragment`] scans whole, in its one pass.
pub(super) const SCAN_STEP: usize = 2048;

/// A scan under way, spread over passes ([`SCAN_STEP`]).
struct Scan {
    /// The next entry slot to read.
    next: usize,
    /// What it found so far: per pool, per block index, the candidates.
    dense: Vec<(PoolId, Vec<Vec<Candidate>>)>,
    /// It passed over an entry on the device that may become movable unseen (pinned,
    /// busy, moving).
    passed_over: bool,
    /// The tiers' `next_generation` when it began.
    began_at: u64,
}

/// The candidates kept between the passes of one `Defragmentation` (see [`RESCAN_EVERY`]).
pub(super) struct KeptCandidates {
    by_block: Option<ByBlock>,
    /// A scan under way, which `by_block` waits for.
    scan: Option<Scan>,
    /// Movables a pass reads of a scan under way ([`SCAN_STEP`]; `usize::MAX`: whole).
    pub scan_step: usize,
    passes: u32,
    /// Blocks finished passes emptied, kept draining for the next repacks, oldest first
    /// (`passes.rs`).
    pub spares: Vec<(PoolId, BlockId)>,
    /// Blocks being emptied over several passes (draining meanwhile): what was left of
    /// the pass's limits took only some of their movables (`Pass::portion`).
    /// `passes.rs` stops them draining at the end.
    pub partial: Vec<Emptying>,
    /// Emptied candidate lists, for the next scan to fill (`movable_blocks`).
    lists: Vec<Vec<Candidate>>,
    /// The tiers' `next_generation` up to which `by_block` is as current as its scan: the
    /// scan found every entry of its pools idle or off the device, and every change since
    /// is this defragmentation's own moves (`note_committed`).
    /// `None`: a scan passed over pinned, busy or moving entries, or something else
    /// changed; then the kept candidates are rescanned every [`RESCAN_EVERY`] passes.
    current_at: Option<u64>,
}

impl Default for KeptCandidates {
    fn default() -> Self {
        KeptCandidates {
            by_block: None,
            scan: None,
            scan_step: SCAN_STEP,
            passes: 0,
            spares: Vec::new(),
            partial: Vec::new(),
            lists: Vec::new(),
            current_at: None,
        }
    }
}

impl KeptCandidates {
    /// Keeps the lists of a scan no longer used, emptied, for the next one.
    fn recycle(&mut self, old: Option<ByBlock>) {
        for members in old.into_iter().flat_map(|b| b.into_values()) {
            self.recycle_list(members);
        }
    }

    fn recycle_list(&mut self, mut members: Vec<Candidate>) {
        members.clear();
        self.lists.push(members);
    }

    /// Notes that this defragmentation's own commits moved the tiers' `next_generation`
    /// from `before` to `after`: the kept candidates stay as current as they were. The
    /// moved movables are not filed into the blocks they went to: those blocks become
    /// candidates at the next scan, once what the last one found is used up (filed at
    /// once, the blocks a pass had just filled were drained again by the next passes:
    /// 26 frames to converge on lavapipe against 17-22).
    fn note_committed(&mut self, before: u64, after: u64) {
        self.current_at = self.current_at.filter(|&at| at == before).map(|_| after);
    }
}

/// A block being emptied over several passes, and where the rest of its movables go.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) struct Emptying {
    pub block: (PoolId, BlockId),
    /// The block a repack began to pack it into (sized for all of it): a next portion
    /// that no hole takes goes there (`fill_holes`), and meanwhile that block is no
    /// candidate. Without it, a block whose rest did not fit the holes stopped emptying
    /// with holes of its own, its repack's block, part full, was the emptiest of all and
    /// was emptied into those holes, and the next repack packed the first block into it
    /// again, part way: an H200 run went 400 frames without ending. Going there first
    /// left the repack's block full and the other blocks' holes unfilled (1.21 reserved
    /// over allocated in `tier::blocks_fuller_than_a_pass_empty_over_several_passes`;
    /// holes first: 1.005). `None`: holes only.
    pub into: Option<BlockId>,
}

/// Whether `block` of `pool` is being emptied over several passes.
fn is_emptying(emptying: &[Emptying], pool: PoolId, block: BlockId) -> bool {
    emptying.iter().any(|e| e.block == (pool, block))
}

/// Whether `block` of `pool` is the repack's block a block emptying over several passes
/// goes on into.
fn is_refilled(emptying: &[Emptying], pool: PoolId, block: BlockId) -> bool {
    emptying
        .iter()
        .any(|e| e.block.0 == pool && e.into == Some(block))
}

/// Whether every live range of block `b` is a candidate of `by_block` (the block can
/// empty now); notes in `pass` a block that only waits for its frees to come back.
fn ready_to_empty(pool: PoolId, b: &BlockUsage, by_block: &ByBlock, pass: &mut Pass) -> bool {
    let movables = by_block.get(&(pool, b.id)).map_or(0, Vec::len);
    if movables > 0 && b.waiting > 0 && movables + b.waiting == b.live {
        pass.waiting = true;
    }
    movables == b.live
}

/// What one pass has decided so far.
struct Pass {
    report: DefragReport,
    limits: DefragLimits,
    moves: Vec<Move>,
    drained: Vec<(PoolId, BlockId)>,
    /// Blocks this pass moved only the first `n` (largest) of their movables out of.
    portions: Vec<(Emptying, usize)>,
    /// Bytes of destinations the pass may hold at once: until the copies finish, a move
    /// holds both places, and under a budget that room is what other threads' requests
    /// need. The pass leaves a sixteenth of the budget free.
    spare: u64,
    /// A block of movables was passed over only because some of its ranges are freed and
    /// not back yet: a later pass may empty it.
    waiting: bool,
}

/// Where a planned move goes: what it needs from the budget.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Destination {
    /// A fresh block: needs the pass's spare room under the budget.
    FreshBlock,
    /// Holes of blocks already reserved: no budget room.
    Holes,
}

impl Pass {
    /// Whether moving `bytes` more in `moves` more allocations to `to` stays within the
    /// limits (and, for a fresh block, the spare room); records why the pass stopped
    /// short when not.
    fn fits(&mut self, bytes: u64, moves: usize, to: Destination) -> bool {
        let within = self.within(bytes, moves, to);
        let room = to == Destination::Holes || bytes <= self.spare;
        // The first move of a pass goes even past the limits (not past the budget's
        // room), so that limits smaller than a movable still converge over passes; a
        // zero limit stops everything.
        let first =
            self.report.moves == 0 && self.limits.max_bytes > 0 && self.limits.max_moves > 0;
        if within || (first && room) {
            return true;
        }
        if room {
            self.report.complete = false;
        } else {
            self.report.no_room = true;
        }
        false
    }

    /// Whether `bytes` more in `moves` more allocations to `to` stay within the limits
    /// (no side effects).
    fn within(&self, bytes: u64, moves: usize, to: Destination) -> bool {
        let cap = match to {
            Destination::FreshBlock => self.limits.max_bytes.min(self.spare),
            Destination::Holes => self.limits.max_bytes,
        };
        self.report.bytes_moved + bytes <= cap && self.report.moves + moves <= self.limits.max_moves
    }

    /// How many of `members` (largest first) the pass can move to `to` from the front
    /// within its limits: all, the first few (a block then empties over several passes),
    /// or none; at least one while the pass has moved nothing (a movable larger than the
    /// byte limit still moves, so limits smaller than one movable converge). Records why
    /// it stopped short, as [`fits`](Self::fits) does.
    fn portion(&mut self, members: &[&Candidate], to: Destination) -> usize {
        let (mut bytes, mut n) = (0, 0);
        while let Some(c) = members.get(n) {
            if !self.within(bytes + c.placed, n + 1, to) {
                break;
            }
            bytes += c.placed;
            n += 1;
        }
        if n == members.len() {
            return n;
        }
        if n == 0 {
            let one = members.first().map_or(0, |c| c.placed);
            return usize::from(self.fits(one, 1, to));
        }
        self.report.complete = false;
        n
    }

    fn take(&mut self, planned: Vec<Move>) {
        self.report.moves += planned.len();
        self.report.bytes_moved += planned.iter().map(|m| m.to.size()).sum::<u64>();
        self.moves.extend(planned);
    }
}

/// One planned move: the old allocation taken out of the entry and its new place.
pub(super) struct Move {
    slot: u32,
    /// The movable's identity, for the pass's report.
    pub(super) id: super::MovableId,
    from: Arc<Allocation>,
    to: Allocation,
}

impl Tiers {
    /// Plans one pass within `limits` over `pool` (or every pool): the moves, with their
    /// entries marked moving, and the blocks they drain. See the module docs. `kept`
    /// holds the candidates between passes ([`KeptCandidates`]).
    pub(super) fn plan_pass(
        &self,
        pool: Option<PoolId>,
        limits: DefragLimits,
        kept: &mut KeptCandidates,
    ) -> Planned {
        // Due every RESCAN_EVERY passes, unless nothing but this defragmentation's own
        // moves changed the entries since the kept candidates were current.
        let due = kept.passes.is_multiple_of(RESCAN_EVERY)
            && kept.current_at != Some(self.shared.state.lock().next_generation);
        kept.passes += 1;
        if kept.scan.is_none() && (kept.by_block.is_none() || due) {
            self.begin_scan(kept);
        }
        let Some((mut by_block, fresh)) = self.scan_on(pool, kept) else {
            return Planned::scanning();
        };
        let mut pass = self.plan_from(&mut by_block, limits, kept);
        if !fresh && pass.moves.is_empty() && !pass.waiting {
            // Nothing left in what the last scan saw: look again before saying so (new
            // movables, or blocks whose movables were busy then).
            kept.recycle(Some(by_block));
            self.begin_scan(kept);
            match self.scan_on(pool, kept) {
                Some((found, _)) => by_block = found,
                None => return Planned::scanning(),
            }
            pass = self.plan_from(&mut by_block, limits, kept);
        }
        // The drained blocks' movables have moved: they are candidates no more; nor are
        // the ones moved out of blocks that empty over several passes (the first of
        // their sorted lists).
        for key in &pass.drained {
            if let Some(members) = by_block.remove(key) {
                kept.recycle_list(members);
            }
            kept.partial.retain(|e| e.block != *key);
        }
        for (emptying, n) in &pass.portions {
            if let Some(members) = by_block.get_mut(&emptying.block) {
                members.drain(..*n);
            }
            match kept.partial.iter_mut().find(|e| e.block == emptying.block) {
                Some(e) => *e = *emptying,
                None => kept.partial.push(*emptying),
            }
        }
        kept.by_block = Some(by_block);
        Planned {
            moves: pass.moves,
            drained: pass.drained,
            bytes: pass.report.bytes_moved,
            complete: pass.report.complete && !pass.waiting,
            no_room: pass.report.no_room,
            waiting: pass.waiting,
            scanning: false,
        }
    }

    /// Steps 3 and 4 of the module docs over the candidates `by_block`.
    fn plan_from(
        &self,
        by_block: &mut ByBlock,
        limits: DefragLimits,
        kept: &mut KeptCandidates,
    ) -> Pass {
        let (budget, allocated) = self.shared.arena().budget_and_allocated();
        let mut pass = Pass {
            report: DefragReport {
                complete: true,
                ..Default::default()
            },
            limits,
            moves: Vec::new(),
            drained: Vec::new(),
            portions: Vec::new(),
            waiting: false,
            spare: budget.map_or(u64::MAX, |b| (b - b / 16).saturating_sub(allocated)),
        };
        let pools = super::distinct_pools(by_block.keys().map(|(p, _)| *p));
        for pool in pools {
            // One look at the pool's blocks for the whole pass: what the repack changes
            // (its fresh blocks, the blocks it drains) the hole filling leaves alone.
            let usage = self.shared.arena().block_usage(pool);
            // A spare the arena gave back for a request's room (its id perhaps reused by
            // a block of its own since) is a spare no more; a block emptying over several
            // passes that was given back meanwhile (emptied by its own frees) is emptied
            // no more, and one whose repack's block was given back goes into holes.
            let still_draining = |&(p, id): &(PoolId, BlockId)| {
                p != pool || usage.iter().any(|b| b.id == id && b.draining)
            };
            kept.spares.retain(still_draining);
            kept.partial.retain(|e| still_draining(&e.block));
            for e in kept.partial.iter_mut().filter(|e| e.block.0 == pool) {
                e.into = e.into.filter(|to| usage.iter().any(|b| b.id == *to));
            }
            self.repack(pool, by_block, &usage, &mut pass, kept);
            self.fill_holes(pool, by_block, &usage, &mut pass, &mut kept.partial);
        }
        pass
    }

    /// Starts a scan of every movable (the kept candidates' lists recycled for it).
    fn begin_scan(&self, kept: &mut KeptCandidates) {
        let old = kept.by_block.take();
        kept.recycle(old);
        kept.scan = Some(Scan {
            next: 0,
            dense: Vec::new(),
            passed_over: false,
            began_at: self.shared.state.lock().next_generation,
        });
    }

    /// The candidates to plan from, and whether a scan finished just now: the kept ones
    /// when no scan is under way; else the scan read on by `kept.scan_step` movables of
    /// `pool` (or every pool), and its result if that finished it (`None`: not yet).
    fn scan_on(&self, pool: Option<PoolId>, kept: &mut KeptCandidates) -> Option<(ByBlock, bool)> {
        let Some(scan) = kept.scan.as_mut() else {
            return Some((kept.by_block.take().unwrap_or_default(), false));
        };
        let finished = self.read_movables(pool, scan, &mut kept.lists, kept.scan_step);
        if !finished {
            return None;
        }
        let scan = kept.scan.take()?;
        // As current as the entries were when it began, if none changed while it read
        // (a scan spread over passes runs while nothing of this defragmentation moves).
        let now = self.shared.state.lock().next_generation;
        kept.current_at = (!scan.passed_over && now == scan.began_at).then_some(now);
        let mut by_block = ByBlock::default();
        for (pool, blocks) in scan.dense {
            for (i, members) in blocks.into_iter().enumerate() {
                if !members.is_empty() {
                    by_block.insert((pool, BlockId(i as u32)), members);
                } else if members.capacity() > 0 {
                    kept.lists.push(members);
                }
            }
        }
        Some((by_block, true))
    }

    /// Reads at most `step` movables of `pool` (or every pool) from `scan.next` on, filing
    /// those free to move now by block; true when it has read the last entry. Their
    /// places are read from the arena under one lock for all of them, taken inside the
    /// tiers' (ranks rise: `src/sync/rank.rs`), so no handle is cloned.
    ///
    /// Nothing here takes fresh memory once a scan has run: the lists come from `lists`
    /// (emptied lists of earlier scans), and no list of the movables is built on the way.
    /// A scan of 16 k movables spent a third of its 1.5-2 ms on an H200's host growing
    /// fresh vectors, page faults for the most part; another quarter went to a hash lookup
    /// per movable, where gathering by block index needs none (the blocks number tens).
    /// Each block's members are sorted where they are first moved (`largest_first`):
    /// sorting all of them here cost a scan's pass another fifth.
    fn read_movables(
        &self,
        pool: Option<PoolId>,
        scan: &mut Scan,
        lists: &mut Vec<Vec<Candidate>>,
        step: usize,
    ) -> bool {
        let st = self.shared.state.lock();
        let done = self.shared.gpu().work_done().done();
        let mut read = 0;
        self.shared.arena().with_placements(|place| {
            while let Some(e) = st.entries.get(scan.next) {
                if read == step {
                    return;
                }
                let slot = scan.next;
                scan.next += 1;
                let Some(e) = e.as_ref().filter(|e| pool.is_none_or(|p| p == e.pool)) else {
                    continue;
                };
                read += 1;
                if !e.movable_now(done) {
                    // Evicted ones come back through a restore, a new generation; the
                    // rest may become movable with no change a later pass could see.
                    scan.passed_over |= !matches!(e.place, Place::Host(_));
                    continue;
                }
                let Place::Device(a) = &e.place else { continue };
                let Some((block, placed)) = place(a) else {
                    continue;
                };
                let dense = &mut scan.dense;
                let at = match dense.iter().position(|(p, _)| *p == e.pool) {
                    Some(at) => at,
                    None => {
                        dense.push((e.pool, Vec::new()));
                        dense.len() - 1
                    }
                };
                let blocks = &mut dense[at].1;
                let i = block.0 as usize;
                if blocks.len() <= i {
                    blocks.resize_with(i + 1, Vec::new);
                }
                let members = &mut blocks[i];
                if members.capacity() == 0 {
                    *members = lists.pop().unwrap_or_default();
                }
                members.push(Candidate {
                    slot: slot as u32,
                    generation: e.generation,
                    size: e.size,
                    placed,
                });
            }
        });
        scan.next >= st.entries.len()
    }

    /// Candidate blocks of `pool` not drained yet, emptiest first: `(used, size, id)`; notes
    /// in `pass` a block that only waits for its frees to come back. Blocks that blocks
    /// emptying over several passes go on into are none (they are being filled).
    fn candidate_blocks(
        &self,
        pool: PoolId,
        by_block: &ByBlock,
        usage: &[BlockUsage],
        pass: &mut Pass,
        emptying: &[Emptying],
    ) -> Vec<(u64, u64, BlockId)> {
        let mut c: Vec<(u64, u64, BlockId)> = Vec::new();
        for b in usage {
            if b.dedicated || b.live == 0 || pass.drained.contains(&(pool, b.id)) {
                continue;
            }
            if ready_to_empty(pool, b, by_block, pass) && !is_refilled(emptying, pool, b.id) {
                c.push((b.used, b.size, b.id));
            }
        }
        c.sort_unstable();
        c
    }

    /// Step 3 of the module docs.
    fn repack(
        &self,
        pool: PoolId,
        by_block: &mut ByBlock,
        usage: &[BlockUsage],
        pass: &mut Pass,
        kept: &mut KeptCandidates,
    ) {
        let arena = self.shared.arena();
        let (align, max_block) = arena.pool_layout(pool);
        let mut candidates = self.candidate_blocks(pool, by_block, usage, pass, &kept.partial);
        // A block emptying over several passes goes on into holes (`fill_holes`).
        candidates.retain(|c| !is_emptying(&kept.partial, pool, c.2));
        let spares = &mut kept.spares;
        let mut i = 0;
        while i < candidates.len() {
            // The largest empty spare of the pool, if any: the group is bounded to fit it
            // (a sixteenth kept for alignment and the allocator's slack).
            let spare = spares
                .iter()
                .filter(|(p, _)| *p == pool)
                .filter_map(|(_, id)| usage.iter().find(|b| b.id == *id && b.live == 0))
                .map(|b| (b.size, b.id))
                .max();
            let bound = spare.map_or(max_block, |(s, _)| s - s / 16);
            let (mut used, mut size, mut count, mut j) = (0, 0, 0, i);
            while j < candidates.len() && used + candidates[j].0 <= bound {
                let members = by_block.get(&(pool, candidates[j].2)).map_or(0, Vec::len);
                // A group grows only within the pass's limits (its first block always:
                // past them, it empties over several passes).
                if j > i
                    && !pass.within(
                        used + candidates[j].0,
                        count + members,
                        Destination::FreshBlock,
                    )
                {
                    break;
                }
                used += candidates[j].0;
                size += candidates[j].1;
                count += members;
                j += 1;
            }
            if j == i {
                break;
            }
            let group: Vec<BlockId> = candidates[i..j].iter().map(|c| c.2).collect();
            i = j;
            // End to end at the pool's alignment, plus slack for the range allocator's
            // search (it asks for a free range one alignment and one size bin larger).
            // Summed before anything is gathered or sorted: most groups of the late
            // passes are not worth a move, and sorting their members every pass was a
            // quarter of the planning (callgrind, lavapipe). One walk, and a mask for the
            // rounding (the alignment is a power of two): a division per member was a
            // tenth of a late pass's planning.
            let (mut largest, mut packed) = (0, 0);
            for c in group
                .iter()
                .filter_map(|id| by_block.get(&(pool, *id)))
                .flatten()
            {
                largest = largest.max(c.placed);
                packed += (c.placed + align - 1) & !(align - 1);
            }
            let bytes = packed + 2 * align + largest / 8;
            let spare = spare.filter(|&(s, _)| bytes <= s);
            // Worth a move only if it gives back at least a sixteenth of the group.
            if spare.map_or(bytes, |(s, _)| s) + size / 16 > size {
                continue;
            }
            // A spare is reserved already: no budget room needed.
            let to = match spare {
                Some(_) => Destination::Holes,
                None => Destination::FreshBlock,
            };
            if to == Destination::FreshBlock && used > pass.spare {
                pass.report.no_room = true;
                break;
            }
            // Largest first: each block's list sorted in place, then merged (a stable
            // sort of sorted runs). A group past what is left of the pass's limits is
            // one block (it grows only within them), which then empties over several
            // passes: the moved movables are the first of its list, and the rest go
            // into holes later, this block's among them.
            for id in &group {
                if let Some(members) = by_block.get_mut(&(pool, *id)) {
                    largest_first(members);
                }
            }
            let mut members: Vec<&Candidate> = group
                .iter()
                .filter_map(|id| by_block.get(&(pool, *id)))
                .flatten()
                .collect();
            members.sort_by_key(|c| std::cmp::Reverse(c.placed));
            // (`portion` records why it took none; a group of several blocks is within
            // the limits by construction, so it goes whole or waits.)
            let n = pass.portion(&members, to);
            if n == 0 {
                break;
            }
            if n < members.len() && group.len() > 1 {
                pass.report.complete = false;
                break;
            }
            let block = match spare {
                Some((_, id)) => {
                    spares.retain(|&(p, b)| (p, b) != (pool, id));
                    arena.set_draining(pool, &[id], false);
                    id
                }
                None => match arena.reserve_block(pool, bytes, "defragment") {
                    Ok(Some(block)) => block,
                    // No room for a fresh block under the budget: holes only.
                    Ok(None) | Err(_) => break,
                },
            };
            arena.set_draining(pool, &group, true);
            match self.plan_moves(pool, &members[..n], AllocMode::in_block(block)) {
                Some(planned) if n == members.len() => {
                    pass.drained.extend(group.iter().map(|id| (pool, *id)));
                    pass.take(planned);
                }
                Some(planned) => {
                    let emptying = Emptying {
                        block: (pool, group[0]),
                        into: Some(block),
                    };
                    pass.portions.push((emptying, n));
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
        by_block: &mut ByBlock,
        usage: &[BlockUsage],
        pass: &mut Pass,
        partial: &mut Vec<Emptying>,
    ) {
        let arena = self.shared.arena();
        let mut free_elsewhere: u64 = usage
            .iter()
            .filter(|b| !b.dedicated && !b.draining && !pass.drained.contains(&(pool, b.id)))
            .map(|b| b.size - b.used)
            .sum();
        for (used, size, id) in self.candidate_blocks(pool, by_block, usage, pass, partial) {
            // Its own free space no longer counts once it drains (a block emptying over
            // several passes drains already). Only a block whose every movable has room
            // elsewhere starts to empty.
            let emptying = partial.iter().find(|e| e.block == (pool, id));
            let draining = emptying.is_some();
            let into = emptying.and_then(|e| e.into);
            let room = match draining {
                true => free_elsewhere,
                false => free_elsewhere.saturating_sub(size - used),
            };
            if used > room {
                pass.report.no_room = true;
                break;
            }
            let Some(members) = by_block.get_mut(&(pool, id)) else {
                continue;
            };
            largest_first(members);
            let members: Vec<&Candidate> = members.iter().collect();
            let n = pass.portion(&members, Destination::Holes);
            if n == 0 {
                break;
            }
            let bytes: u64 = members[..n].iter().map(|c| c.placed).sum();
            arena.set_draining(pool, &[id], true);
            // Holes first; what does not fit them goes into the block its repack began
            // (sized for all of it).
            let planned = self
                .plan_moves(pool, &members[..n], AllocMode::INTO_EXISTING)
                .or_else(|| {
                    let to = into?;
                    self.plan_moves(pool, &members[..n], AllocMode::in_block(to))
                });
            match planned {
                Some(planned) => {
                    let emptying = Emptying {
                        block: (pool, id),
                        into,
                    };
                    match n == members.len() {
                        true => pass.drained.push((pool, id)),
                        false => pass.portions.push((emptying, n)),
                    }
                    pass.take(planned);
                    free_elsewhere = room - bytes;
                    if n < members.len() {
                        // What is left of the limits is spent.
                        break;
                    }
                }
                // Fragmented: this block stays (and stops emptying); a fuller one may
                // still have members that fit.
                None => {
                    arena.set_draining(pool, &[id], false);
                    partial.retain(|e| e.block != (pool, id));
                }
            }
        }
    }

    /// New places (`mode`) for every member of draining blocks; `None` (nothing changed)
    /// when one does not fit, or one is no longer the movable the scan saw in the same
    /// place, unpinned and idle (pinned, moved, dropped or in flight meanwhile: the block
    /// cannot empty). One hold of the tiers' lock for the group: the labels are read,
    /// the destinations placed by one call into the arena (its lock taken inside ours:
    /// ranks rise), and the places taken, so nothing changes between the check and the
    /// taking. A lock of each per member made a pass's planning about 2-3 µs a move on an
    /// H200's host.
    fn plan_moves(
        &self,
        pool: PoolId,
        members: &[&Candidate],
        mode: AllocMode,
    ) -> Option<Vec<Move>> {
        let shared = &self.shared;
        let mut st = shared.state.lock();
        let placed = {
            let mut requests: Vec<(u64, &str)> = Vec::with_capacity(members.len());
            for c in members {
                let e = st.get(c.slot).filter(|e| e.generation == c.generation)?;
                requests.push((c.size, &e.label));
            }
            shared.arena().alloc_destinations(pool, &requests, mode)
        };
        let tos = match placed {
            Ok(Some(tos)) => tos,
            Ok(None) | Err(_) => return None,
        };
        let done = shared.gpu().work_done().done();
        let movable = members.iter().all(|c| {
            st.get(c.slot)
                .is_some_and(|e| e.generation == c.generation && e.movable_now(done))
        });
        if !movable {
            drop(st);
            tos.into_iter().for_each(Allocation::discard_unused);
            return None;
        }
        let mut planned: Vec<Move> = Vec::with_capacity(members.len());
        for (c, to) in members.iter().zip(tos) {
            // Checked above under the same hold of the lock: every entry is there, on
            // the device.
            let Some(e) = st.entry(c.slot) else {
                debug_assert!(false, "an entry checked under the lock vanished");
                continue;
            };
            if let Place::Device(from) = std::mem::replace(&mut e.place, Place::Moving) {
                planned.push(Move {
                    slot: c.slot,
                    id: e.id,
                    from,
                    to,
                });
            }
        }
        Some(planned)
    }

    /// Puts planned moves back as they were.
    fn unplan(&self, planned: Vec<Move>) {
        // Never used by the GPU: their ranges go straight back, for the next attempt.
        for a in self.put_back(planned) {
            a.discard_unused();
        }
    }

    /// Points the entries of `moves` at their old places again (waking whoever waits for
    /// a move) and returns the new places, for the caller to free its way.
    fn put_back(&self, moves: Vec<Move>) -> Vec<Allocation> {
        let shared = &self.shared;
        let mut st = shared.state.lock();
        let mut unused = Vec::with_capacity(moves.len());
        for m in moves {
            shared.commit(&mut st, m.slot, Place::Device(m.from));
            unused.push(m.to);
        }
        shared.moved.notify_all();
        drop(st);
        unused
    }

    /// Records a copy per move into `encoder`; the entries stay moving until
    /// [`commit_moves`](Self::commit_moves). When wgpu refuses the copies (a lost device),
    /// every entry goes back to where it was and nothing moved.
    pub(super) fn record_moves(
        &self,
        moves: &[Move],
        encoder: &mut wgpu::CommandEncoder,
    ) -> Result<()> {
        if moves.is_empty() {
            return Ok(());
        }
        let gpu = &self.shared.gpu();
        gpu.scoped("defragmenting", || {
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
            if let Err(e) = super::copy::record(gpu, encoder, &copies) {
                // The kernel could not be set up: copy commands move the same bytes.
                log::warn!("defragmentation falls back to copy commands: {e}");
                copies.iter().for_each(|c| c.command(encoder));
            }
        })
    }

    /// Points the handles of `moves`, whose copies are submitted, at their new ranges and
    /// frees the old ones (after those copies, by the arena's rule for frees).
    ///
    /// Tells `kept` that the entries changed only by these commits meanwhile
    /// ([`KeptCandidates::note_committed`]).
    pub(super) fn commit_moves(&self, moves: Vec<Move>, kept: &mut KeptCandidates) {
        if moves.is_empty() {
            return;
        }
        let shared = &self.shared;
        let bytes: u64 = moves.iter().map(|m| m.from.size()).sum();
        let mut st = shared.state.lock();
        let before = st.next_generation;
        st.counters.defrag_moves += moves.len() as u64;
        st.counters.bytes_defrag_moved += bytes;
        let mut olds = Vec::with_capacity(moves.len());
        for m in moves {
            m.to.note(EventKind::Move);
            olds.push(m.from);
            shared.commit(&mut st, m.slot, Place::Device(Arc::new(m.to)));
        }
        let after = st.next_generation;
        shared.moved.notify_all();
        drop(st);
        drop(olds);
        kept.note_committed(before, after);
    }

    /// Puts recorded but uncommitted moves back (their copies were never submitted).
    pub(super) fn abandon_moves(&self, moves: Vec<Move>) {
        self.unplan(moves);
    }

    /// Puts back moves whose copies may or may not have been submitted (a pass whose
    /// token was dropped without `end_pass`): the handles keep their old places, whose
    /// bytes are intact either way, and the new places are freed by the arena's rule for
    /// frees, after all work submitted so far, so a copy that was submitted lands in
    /// memory nothing else has yet.
    pub(super) fn undo_moves(&self, moves: Vec<Move>) {
        drop(self.put_back(moves));
    }
}

/// One planned pass (see [`Tiers::plan_pass`]).
pub(super) struct Planned {
    pub moves: Vec<Move>,
    pub drained: Vec<(PoolId, BlockId)>,
    pub bytes: u64,
    /// False when a bound stopped the planning with candidates left, or a block of
    /// movables waits for frees to come back.
    pub complete: bool,
    /// Candidates were left for lack of room (holes or budget).
    pub no_room: bool,
    /// A block of movables waits for frees to come back, or a scan is under way.
    pub waiting: bool,
    /// The pass only read on in a scan ([`SCAN_STEP`]).
    pub scanning: bool,
}

impl Planned {
    /// A pass that only read on in a scan: nothing moved, and not done.
    fn scanning() -> Planned {
        Planned {
            moves: Vec::new(),
            drained: Vec::new(),
            bytes: 0,
            complete: false,
            no_room: false,
            waiting: true,
            scanning: true,
        }
    }
}
