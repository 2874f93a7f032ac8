//! Defragmentation in passes, as VMA's begin / pass / end: a frame loop moves a bounded
//! amount each frame, with its own GPU work running between passes, and never waits for
//! the whole device.
//!
//! # How it works
//! [`Tiers::begin_defragmentation`] starts a [`Defragmentation`] over one pool or all.
//! A pass, like VMA's, has two steps around the caller's submission:
//! 1. [`Defragmentation::pass`] takes the blocks of earlier passes whose copies have
//!    finished as spares (an epoch of the device's work-done tracker, `gpu/work_done.rs`, checked
//!    without waiting), then plans one bounded pass (`defrag.rs`, within
//!    [`DefragLimits`]) and records one copy per moved allocation into the caller's
//!    command encoder. The moved movables are *moving* from here on. It returns a
//!    [`DefragPass`] token.
//! 2. The caller submits the encoder, then hands the token to
//!    [`Defragmentation::end_pass`]: the handles point at the new places and the old
//!    ranges are freed into an epoch that completes with the copies; once it has, the
//!    blocks it emptied become *spares*: still draining (nothing else is placed in them),
//!    they are what later repacks pack into instead of creating fresh blocks, and they go
//!    back at [`Defragmentation::end`]. A driver takes milliseconds to create a block and
//!    as long to destroy one (4-5 ms for 256 MiB on an H200), and while it destroys one
//!    the driver calls of other threads wait (a pass recording its copies then took 3-4
//!    ms more), so neither happens in a pass once spares exist. Until `end`, the arena
//!    still gives an empty spare back when a request needs its room under the budget.
//!    Blocks given back are destroyed on a thread of their own (`disposer.rs`).
//!
//! The movables a pass plans from come from a scan of all of them (`defrag.rs`), which
//! a frame loop's passes spread over several passes, a few thousand movables each, so
//! that no pass holds a whole scan (1.5-2 ms for 16 k movables on an H200's host): the
//! first passes, and those after the candidates the last scan found are used up, move
//! nothing ([`PassReport::scanning`]).
//!
//! [`Defragmentation::pass_submit`] does both around a submission of its own.
//! [`Defragmentation::end`] waits for the epochs of the passes still finishing (only
//! their copies, never other work) and returns the report. [`Tiers::defragment`] is the
//! same loop in one call, after waiting for all GPU work so that every pending free is
//! back in its block first.
//!
//! # The contract
//! - **Submit the encoder a pass recorded into, then hand its token to `end_pass`.** A
//!   pass whose token is never ended (dropped, or followed by another `pass`, `end` or the
//!   `Defragmentation`'s drop) is taken as *never submitted*: its handles keep their old
//!   places, whose bytes are intact whether or not the copies ran, and its new places are
//!   freed after the work submitted so far. So an encoder dropped on an error path costs
//!   the pass, never the data.
//! - Between `pass` and `end_pass` the moved movables are moving: `make_resident` on one
//!   waits for `end_pass`, so the frame thread takes its `Resident` guards before `pass`
//!   (a pinned movable is never moved) or after `end_pass`. Other threads just wait, as
//!   they do for an eviction.
//! - A movable is moved only while unpinned and with no GPU work in flight on it.
//! - **The passes end.** A pass that moves nothing while no block waits for frees to
//!   come back and no scan is under way has nothing left to do:
//!   [`Defragmentation::is_done`] is true from then on (and [`PassReport::no_room`] says
//!   when candidates are left only because nothing can take them). Moves into holes of
//!   blocks already reserved need no budget room, so a full budget does not stop them.
//! - Dropping a `Defragmentation` stops its blocks draining and gives its spares back;
//!   blocks not yet empty stay with the arena, which gives empty ones back on `trim`.

use web_time::Instant;

use super::defrag::{Move, Planned};
use super::{DefragLimits, DefragReport, MovableId, Tiers};
use crate::alloc::BlockId;
use crate::arena::PoolId;
use crate::gpu::Epoch;
use crate::Result;

/// What a [`Defragmentation`] covers and how much one pass may move.
#[derive(Clone, Copy, Debug, Default)]
pub struct DefragOptions {
    /// One pool only (`None`: every pool with movables).
    pub pool: Option<PoolId>,
    /// Bounds on each pass.
    pub per_pass: DefragLimits,
}

/// What one pass recorded.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PassReport {
    /// Allocations moved by this pass.
    pub moves: usize,
    /// Which movables they are ([`Movable::id`](super::Movable::id)), in no particular
    /// order: a frame loop that caches bind groups of them rebuilds these.
    pub moved: Vec<MovableId>,
    /// Bytes they hold.
    pub bytes_moved: u64,
    /// Blocks this pass empties (spares once its copies finish, given back at
    /// [`Defragmentation::end`]: module docs). A pass within its limits, or one block
    /// past them ([`DefragLimits`]).
    pub blocks_drained: usize,
    /// Blocks that came empty since the previous pass (earlier passes' copies finished):
    /// spares now, given back at `end`.
    pub blocks_freed: usize,
    /// Their bytes.
    pub bytes_freed: u64,
    /// Candidates were left because nothing can take them now (no hole fits them, and
    /// the budget leaves no room for a fresh block).
    pub no_room: bool,
    /// The pass read on in a scan of the movables and moved nothing: a scan is spread
    /// over passes (a few thousand movables each), the first ones and those after the
    /// candidates the last scan found are used up (module docs of `tier::passes`).
    pub scanning: bool,
}

/// A pass recorded by [`Defragmentation::pass`]: submit the encoder it recorded into, then
/// hand this to [`Defragmentation::end_pass`]. Dropped without that, the pass is taken as
/// never submitted (module docs of `tier::passes`).
#[must_use = "submit the encoder, then hand the pass to Defragmentation::end_pass"]
#[derive(Debug)]
pub struct DefragPass {
    report: PassReport,
    /// Which pass of its `Defragmentation` this is.
    serial: u64,
    /// Which `Defragmentation`.
    owner: u64,
}

impl DefragPass {
    /// What the pass recorded.
    pub fn report(&self) -> &PassReport {
        &self.report
    }
}

/// A defragmentation under way (see the module docs of `tier::passes`).
///
/// ```no_run
/// # fn main() -> vramkit::Result<()> {
/// # let rt = vramkit::Runtime::headless()?;
/// # let tiers = vramkit::tier::Tiers::new(rt.arena(), Default::default())?;
/// use vramkit::tier::{DefragLimits, DefragOptions};
/// let options = DefragOptions {
///     per_pass: DefragLimits { max_bytes: 64 << 20, max_moves: 256 },
///     ..Default::default()
/// };
/// let mut defrag = tiers.begin_defragmentation(options)?;
/// while !defrag.is_done() {
///     // ... this frame's work on the movables (its Resident guards taken before the pass) ...
///     let mut encoder = rt.gpu().device().create_command_encoder(&Default::default());
///     let pass = defrag.pass(&mut encoder)?;
///     rt.gpu().submit([encoder.finish()]);
///     defrag.end_pass(pass)?; // the moved handles point at their new places from here
/// }
/// let report = defrag.end()?;
/// println!("{} moves, {} blocks given back", report.moves, report.blocks_freed);
/// # Ok(()) }
/// ```
pub struct Defragmentation<'t> {
    tiers: &'t Tiers,
    options: DefragOptions,
    report: DefragReport,
    start: Instant,
    /// The pass recorded and not yet ended: its moves (entries moving) and the blocks it
    /// drains.
    recorded: Option<Recorded>,
    /// The serial number of the last pass recorded.
    serial: u64,
    /// Unique per `Defragmentation`: ties its [`DefragPass`] tokens to it.
    id: u64,
    /// Passes whose old places are freed, waiting for the epoch of those frees.
    finishing: Vec<Finishing>,
    /// The last planning found nothing left to move within the limits.
    exhausted: bool,
    ended: bool,
    /// Destroys the given-back blocks off the caller's thread (`disposer.rs`).
    disposer: super::disposer::Disposer,
    /// What the last scan for candidates found (`defrag.rs`).
    kept: super::defrag::KeptCandidates,
}

struct Recorded {
    moves: Vec<Move>,
    drained: Vec<(PoolId, BlockId)>,
}

struct Finishing {
    epoch: Epoch,
    drained: Vec<(PoolId, BlockId)>,
}

impl Tiers {
    /// Starts a defragmentation run in bounded passes, for a frame loop (module docs of
    /// `tier::passes`). Nothing is waited for; the first [`Defragmentation::pass`] plans.
    pub fn begin_defragmentation(&self, options: DefragOptions) -> Result<Defragmentation<'_>> {
        if let Some(pool) = options.pool {
            self.shared.arena().check_pool(pool)?;
        }
        let before = self.shared.arena().stats();
        Ok(Defragmentation {
            tiers: self,
            options,
            report: DefragReport {
                allocated_before: before.allocated,
                reserved_before: before.reserved,
                complete: false,
                ..Default::default()
            },
            start: Instant::now(),
            recorded: None,
            serial: 0,
            id: {
                static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            },
            finishing: Vec::new(),
            exhausted: false,
            ended: false,
            disposer: Default::default(),
            kept: Default::default(),
        })
    }

    /// Moves movable allocations into fewer blocks and gives the emptied ones back; see
    /// the module docs of `tier::defrag`. Waits for all GPU work first, so every pending
    /// free is back in its block, then runs passes within `limits` as one
    /// ([`Tiers::begin_defragmentation`]) until nothing is left to move or a bound stops
    /// it (then [`DefragReport::complete`] is false: call again to go on).
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
        self.shared.arena().synchronize()?;
        self.shared.settle()?;
        let mut d = self.begin_defragmentation(DefragOptions {
            pool: None,
            per_pass: limits,
        })?;
        d.start = start;
        // Stopping the world, one pass reads every movable.
        d.kept.scan_step = usize::MAX;
        let bounded = limits.max_bytes != u64::MAX || limits.max_moves != usize::MAX;
        loop {
            let pass = d.pass_submit()?;
            // One pass is the bound; unbounded, go on while a pass moved something and
            // stopped short (the budget's room): its old places come back first.
            if bounded || pass.moves == 0 || d.report.complete {
                break;
            }
            d.wait_finishing()?;
        }
        let mut report = d.end()?;
        // A repack block whose moves were abandoned is empty too: give it back with the
        // rest of the empty blocks, as the whole device was waited for anyway.
        let arena = self.shared.arena();
        let blocks = arena.stats().blocks;
        report.bytes_freed += arena.release_all_empty();
        let after = arena.stats();
        report.blocks_freed += blocks.saturating_sub(after.blocks);
        report.allocated_after = after.allocated;
        report.reserved_after = after.reserved;
        report.elapsed = start.elapsed();
        Ok(report)
    }
}

impl Defragmentation<'_> {
    /// Gives back the blocks of finished passes and records one bounded pass of copies
    /// into `encoder` (module docs). Submit `encoder`, then hand the returned token to
    /// [`end_pass`](Self::end_pass). A previous pass whose token was never ended is undone
    /// first, as never submitted.
    pub fn pass(&mut self, encoder: &mut wgpu::CommandEncoder) -> Result<DefragPass> {
        self.undo_unended();
        self.tiers.shared.arena().collect_finished();
        let (blocks_freed, bytes_freed) = self.finish_done();
        let Planned {
            moves,
            drained,
            bytes,
            complete,
            no_room,
            waiting,
            scanning,
        } = self
            .tiers
            .plan_pass(self.options.pool, self.options.per_pass, &mut self.kept);
        if let Err(e) = self.tiers.record_moves(&moves, encoder) {
            self.tiers.abandon_moves(moves);
            self.undrain(&drained);
            return Err(e);
        }
        let count = moves.len();
        let blocks_drained = drained.len();
        // Nothing moved and no block waiting for its frees: nothing a later pass could
        // do, whether every candidate is gone or what is left has nowhere to go. Done
        // once the finishing passes are.
        self.exhausted = count == 0 && !waiting;
        self.report.moves += count;
        self.report.bytes_moved += bytes;
        self.report.complete = complete;
        self.report.no_room = no_room;
        let moved = moves.iter().map(|m| m.id).collect();
        self.serial += 1;
        if count > 0 || !drained.is_empty() {
            self.recorded = Some(Recorded { moves, drained });
        }
        Ok(DefragPass {
            report: PassReport {
                moves: count,
                moved,
                bytes_moved: bytes,
                blocks_drained,
                blocks_freed,
                bytes_freed,
                no_room,
                scanning,
            },
            serial: self.serial,
            owner: self.id,
        })
    }

    /// Ends `pass`, whose encoder the caller has submitted: the moved handles point at
    /// their new places, and the old ranges are freed into an epoch that completes with
    /// the copies. A token of another `Defragmentation`, or of a pass already undone (a
    /// later `pass` was recorded first), is an error that changes nothing.
    pub fn end_pass(&mut self, pass: DefragPass) -> Result<()> {
        if pass.owner != self.id || pass.serial != self.serial {
            return Err(crate::Error::invalid(
                format!(
                    "ending pass {} of a defragmentation whose open pass is {}",
                    pass.serial, self.serial
                ),
                "hand each DefragPass to end_pass of the Defragmentation that made it, \
                 before its next pass (a pass not ended by then was undone as unsubmitted)",
            ));
        }
        self.commit_recorded();
        Ok(())
    }

    /// Commits the recorded pass (its encoder was submitted).
    fn commit_recorded(&mut self) {
        let Some(Recorded { moves, drained }) = self.recorded.take() else {
            return;
        };
        self.tiers.commit_moves(moves, &mut self.kept);
        let epoch = self.tiers.shared.arena().seal_frees();
        self.finishing.push(Finishing { epoch, drained });
    }

    /// Undoes a recorded pass whose token was never ended: taken as never submitted
    /// (module docs).
    fn undo_unended(&mut self) {
        if let Some(Recorded { moves, drained }) = self.recorded.take() {
            log::warn!(
                "defragmentation: a pass of {} moves was not ended; it is undone as never \
                 submitted",
                moves.len()
            );
            self.tiers.undo_moves(moves);
            self.undrain(&drained);
        }
    }

    /// [`pass`](Self::pass) into an encoder of its own, submitted at once.
    pub fn pass_submit(&mut self) -> Result<PassReport> {
        let gpu = self.tiers.shared.gpu();
        let mut encoder = gpu
            .device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("vramkit defragment"),
            });
        let pass = self.pass(&mut encoder)?;
        let submitted = gpu.scoped("defragmenting", || {
            gpu.submit_timed("defragment", [encoder.finish()]);
        });
        if let Err(e) = submitted {
            // Refused (a lost device): nothing was copied, every entry goes back.
            if let Some(Recorded { moves, drained }) = self.recorded.take() {
                self.tiers.abandon_moves(moves);
                self.undrain(&drained);
            }
            return Err(e);
        }
        let report = pass.report.clone();
        self.end_pass(pass)?;
        Ok(report)
    }

    /// Whether nothing is left to move and every pass has finished (its blocks given
    /// back): the frame loop may stop calling [`pass`](Self::pass).
    pub fn is_done(&self) -> bool {
        self.exhausted && self.recorded.is_none() && self.finishing.is_empty()
    }

    /// The totals so far.
    pub fn report(&self) -> DefragReport {
        self.report
    }

    /// Waits for the copies of the passes still finishing (not for other GPU work), gives
    /// their emptied blocks back and returns the report. A pass whose token was not ended
    /// is undone first, as never submitted.
    pub fn end(mut self) -> Result<DefragReport> {
        self.undo_unended();
        let waited = self.wait_finishing();
        self.ended = true;
        let left: Vec<Finishing> = std::mem::take(&mut self.finishing);
        for f in &left {
            self.undrain(&f.drained);
        }
        self.release_kept();
        waited?;
        let after = self.tiers.shared.arena().stats();
        self.report.allocated_after = after.allocated;
        self.report.reserved_after = after.reserved;
        self.report.elapsed = self.start.elapsed();
        Ok(self.report)
    }

    /// Turns the blocks of every finishing pass whose epoch is done into spares; returns
    /// how many, and their bytes.
    fn finish_done(&mut self) -> (usize, u64) {
        let work = self.tiers.shared.gpu().work_done().clone();
        if self.finishing.iter().all(|f| !work.is_done(f.epoch)) {
            // wgpu runs callbacks only inside polls: give the copies a chance to report.
            self.tiers.shared.gpu().poll();
        }
        let (done, waiting): (Vec<Finishing>, Vec<Finishing>) = std::mem::take(&mut self.finishing)
            .into_iter()
            .partition(|f| work.is_done(f.epoch));
        self.finishing = waiting;
        // Emptied blocks stay as spares until `end` (module docs).
        let emptied: Vec<(PoolId, BlockId)> = done.into_iter().flat_map(|f| f.drained).collect();
        let mut bytes = 0;
        let arena = self.tiers.shared.arena();
        for pool in super::distinct_pools(emptied.iter().map(|(p, _)| *p)) {
            bytes += arena
                .block_usage(pool)
                .iter()
                .filter(|b| emptied.contains(&(pool, b.id)))
                .map(|b| b.size)
                .sum::<u64>();
        }
        let blocks = emptied.len();
        self.kept.spares.extend(emptied);
        (blocks, bytes)
    }

    /// Waits for the epochs of the finishing passes and turns their blocks into spares.
    fn wait_finishing(&mut self) -> Result<()> {
        let newest = self.finishing.iter().map(|f| f.epoch).max();
        if let Some(epoch) = newest {
            self.tiers.shared.gpu().wait_epoch(epoch)?;
        }
        self.finish_done();
        Ok(())
    }

    /// Gives back the empty ones of `drained` (all marked no longer draining); their
    /// buffers go to the disposer's thread.
    fn release(&mut self, drained: &[(PoolId, BlockId)]) -> (usize, u64) {
        let arena = self.tiers.shared.arena();
        let (mut blocks, mut bytes) = (0, 0);
        for pool in super::distinct_pools(drained.iter().map(|(p, _)| *p)) {
            let ids: Vec<BlockId> = drained
                .iter()
                .filter(|(p, _)| *p == pool)
                .map(|(_, id)| *id)
                .collect();
            let (b, n, doomed) = arena.release_drained(pool, &ids);
            self.disposer.dispose(doomed);
            blocks += b;
            bytes += n;
        }
        (blocks, bytes)
    }

    /// Gives back the kept empty blocks that are still empty, and stops the blocks that
    /// were emptying over several passes draining (they keep what is left in them).
    fn release_kept(&mut self) {
        let partial: Vec<_> = std::mem::take(&mut self.kept.partial)
            .into_iter()
            .map(|e| e.block)
            .collect();
        self.undrain(&partial);
        let kept = std::mem::take(&mut self.kept.spares);
        let (blocks, bytes) = self.release(&kept);
        self.report.blocks_freed += blocks;
        self.report.bytes_freed += bytes;
    }

    /// Marks `drained` no longer draining, giving nothing back.
    fn undrain(&self, drained: &[(PoolId, BlockId)]) {
        for &(pool, id) in drained {
            self.tiers.shared.arena().set_draining(pool, &[id], false);
        }
    }
}

impl Drop for Defragmentation<'_> {
    fn drop(&mut self) {
        if self.ended {
            return;
        }
        self.undo_unended();
        self.finish_done();
        for f in std::mem::take(&mut self.finishing) {
            self.undrain(&f.drained);
        }
        self.release_kept();
    }
}
