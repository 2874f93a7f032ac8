//! [`PlannedLoop`]: a loop whose allocations repeat, served from a planned offset table
//! after one recorded iteration.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;
use web_time::Instant;

use crate::alloc::plan::{lower_bound, plan_in_blocks, Heuristic, Interval};
use crate::alloc::BlockId;
use crate::arena::planned::{LoopEvent, LoopTable, Recording};
use crate::arena::PoolId;
use crate::{Arena, Error, Result};

/// Settings of a [`PlannedLoop`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopConfig {
    /// The pool whose allocations are planned (`None`: the arena's default pool).
    /// Allocations in other pools (the kernels' parameters among them) are served as
    /// usual.
    pub pool: Option<PoolId>,
    /// Slots of loop blocks, used in turn: an iteration replays into a slot only once the
    /// GPU has finished the iteration that used it before. Each holds the planned peak
    /// (in one block, or several when it is larger than the device's largest buffer).
    /// With 1 (the default) the loop reserves the least, never more than the plain loop
    /// it replaces, and each `begin` waits until the GPU has finished the iteration
    /// before; with 2 the CPU may run an iteration ahead of the GPU, for twice the plan's
    /// bytes.
    pub slots: usize,
}

impl Default for LoopConfig {
    fn default() -> Self {
        LoopConfig {
            pool: None,
            slots: 1,
        }
    }
}

/// What a [`PlannedLoop`] has done so far.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoopStats {
    /// Iterations begun.
    pub iterations: u64,
    /// Iterations recorded (the first, and the first after each [`PlannedLoop::replan`]).
    pub recorded: u64,
    /// Iterations replayed from the plan to their end, exactly as recorded.
    pub replayed: u64,
    /// Replayed iterations that left the recorded order (a different size, order or
    /// thread): the rest of each was served by the arena as usual.
    pub deviations: u64,
    /// Iterations that ran without the plan because their slot still held planned
    /// allocations of an earlier iteration (kept past its end).
    pub fallbacks: u64,
    /// Allocations served from the plan (an offset lookup each).
    pub planned_allocations: u64,
    /// Allocations of the recorded iteration.
    pub recorded_allocations: usize,
    /// Of those, freed within the iteration (and so planned).
    pub planned_per_iteration: usize,
    /// Bytes of one slot of loop blocks: the plan's peak.
    pub plan_bytes: u64,
    /// Loop blocks per slot: the plan's peak is split into blocks no larger than the
    /// device's largest buffer, no allocation across two.
    pub blocks_per_slot: usize,
    /// The most bytes live at once in the recorded iteration: no plan peaks lower.
    pub lower_bound: u64,
    /// The order that gave the plan.
    pub heuristic: Option<Heuristic>,
    /// How long planning took.
    pub plan_time: Duration,
    /// Plans whose loop block could not be reserved (over the budget, or larger than the
    /// device's largest buffer): the loop then runs unplanned until
    /// [`PlannedLoop::replan`].
    pub plan_failures: u64,
}

/// A loop whose iterations allocate the same sizes in the same order (a training step,
/// a decode step, a frame): the first iteration is recorded, its allocations are planned
/// into one block at the lowest peak the planner finds ([`crate::alloc::plan`]), and later
/// iterations take every allocation from that offset table, with no allocator work and
/// no fragmentation. Your code in the loop does not change: it allocates through the
/// arena (or a [`Runtime`](crate::Runtime) on it) as before.
///
/// ```no_run
/// # fn main() -> vramkit::Result<()> {
/// use vramkit::plan::{LoopConfig, PlannedLoop};
/// let rt = vramkit::Runtime::headless()?;
/// let mut planned = PlannedLoop::new(rt.arena(), LoopConfig::default())?;
/// for _step in 0..100 {
///     let iteration = planned.begin()?; // the first records, the others replay
///     let h = rt.alloc::<f32>(1 << 20, "hidden")?;
///     let mut batch = rt.batch();
///     batch.fill(1.0, &h)?;
///     batch.submit()?;
///     drop(h);
///     iteration.end()?;
/// }
/// assert_eq!(planned.stats().replayed, 99);
/// # Ok(()) }
/// ```
///
/// # What it promises
/// - Only allocations of the planned pool made **on the thread that began the
///   iteration** are planned; an allocation still alive when its recorded iteration ends
///   is never planned (it is served as usual in every replay).
/// - A replay serves planned offsets only while it follows the recording event for
///   event; at the first difference (another size, another order of allocations and
///   frees) the rest of the iteration is served by the arena as usual, and the
///   iteration is counted in [`LoopStats::deviations`]. Results stay correct either way.
/// - Bytes are reused within an iteration in queue order and across iterations only after
///   the GPU finished the iteration that last used them (see `arena::planned`). An
///   allocation kept past its iteration's end keeps its loop block out of use until it is
///   dropped ([`LoopStats::fallbacks`]).
/// - Loop blocks count against the arena's budget; [`replan`](Self::replan) records
///   again, and dropping the loop gives the blocks back (each once its planned
///   allocations are gone).
pub struct PlannedLoop {
    /// Unique in the process: names this loop's hook in the arena.
    id: u64,
    arena: Arena,
    pool: PoolId,
    config: LoopConfig,
    table: Option<Arc<LoopTable>>,
    /// Per slot (used in turn), the loop blocks that hold the plan.
    slots: Vec<Vec<BlockId>>,
    /// Bytes per loop block (the plan's [`crate::alloc::plan::Plan::block`]).
    block_bytes: u64,
    record_next: bool,
    stats: LoopStats,
}

impl std::fmt::Debug for PlannedLoop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlannedLoop")
            .field("config", &self.config)
            .field("stats", &self.stats)
            .finish()
    }
}

/// One iteration of a [`PlannedLoop`]; [`end`](Self::end) it (or drop it) when the
/// iteration's allocations have been dropped. Not `Send`: it ends on the thread that began
/// it.
pub struct Iteration<'a> {
    planned: &'a mut PlannedLoop,
    ended: bool,
    _thread_bound: PhantomData<*const ()>,
}

impl std::fmt::Debug for Iteration<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Iteration")
            .field("iteration", &self.planned.stats.iterations)
            .finish()
    }
}

impl PlannedLoop {
    /// A planned loop on `arena`; nothing is recorded until [`begin`](Self::begin).
    /// Fails on an arena with guard bytes (guards need each range filled and checked).
    pub fn new(arena: &Arena, config: LoopConfig) -> Result<PlannedLoop> {
        let pool = config.pool.unwrap_or_else(|| arena.default_pool());
        arena.check_pool(pool)?;
        if config.slots == 0 {
            return Err(Error::invalid(
                "a planned loop with 0 slots",
                "use at least 1 (the default; 2 lets the CPU run an iteration ahead)",
            ));
        }
        if arena.guard_bytes() > 0 {
            return Err(Error::invalid(
                "a planned loop on an arena with guard bytes",
                "plan loops on an arena without guards (ArenaConfig::guard_bytes = 0)",
            ));
        }
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        Ok(PlannedLoop {
            id: NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            arena: arena.clone(),
            pool,
            config,
            table: None,
            slots: Vec::new(),
            block_bytes: u64::MAX,
            record_next: true,
            stats: LoopStats::default(),
        })
    }

    /// Begins an iteration: the first (and the first after [`replan`](Self::replan))
    /// records, later ones replay. Fails while another iteration runs on the arena.
    pub fn begin(&mut self) -> Result<Iteration<'_>> {
        let replay = match (&self.table, self.record_next) {
            (Some(table), false) if !self.slots.is_empty() => {
                let k = (self.stats.iterations % self.slots.len() as u64) as usize;
                let mut ready = true;
                for &block in &self.slots[k] {
                    ready &= self.arena.loop_block_ready(self.pool, block)?;
                }
                if ready {
                    Some(Some((table.clone(), k)))
                } else {
                    self.stats.fallbacks += 1;
                    None
                }
            }
            // Nothing planned (every allocation outlived the recording), or the plan did
            // not fit (see `plan_from`): run as usual until `replan`.
            (_, false) => None,
            (_, true) => Some(None),
        };
        if let Some(replay) = replay {
            let replay = replay.map(|(table, k)| (table, &self.slots[k][..], self.block_bytes));
            self.arena.loop_begin(self.id, self.pool, replay)?;
        }
        self.stats.iterations += 1;
        Ok(Iteration {
            planned: self,
            ended: false,
            _thread_bound: PhantomData,
        })
    }

    /// Records the next iteration again and plans from it (after the loop's shapes
    /// changed, e.g. another batch size).
    pub fn replan(&mut self) {
        self.record_next = true;
    }

    /// What the loop has done so far.
    pub fn stats(&self) -> LoopStats {
        self.stats.clone()
    }

    /// Ends the running iteration (see [`Iteration::end`]).
    fn end_iteration(&mut self) -> Result<()> {
        let Some(outcome) = self.arena.loop_end() else {
            return Ok(());
        };
        match outcome.recording {
            Some(recording) => self.plan_from(recording),
            None => {
                if outcome.completed {
                    self.stats.replayed += 1;
                } else {
                    self.stats.deviations += 1;
                }
                self.stats.planned_allocations += outcome.served;
                Ok(())
            }
        }
    }

    /// Plans the recorded iteration and reserves the loop blocks for it.
    fn plan_from(&mut self, recording: Recording) -> Result<()> {
        let start = Instant::now();
        let (align, _) = self.arena.pool_layout(self.pool);
        let (table, intervals, planned) = table_of(recording, align);
        // No buffer can be larger than the device allows: larger plans span several
        // blocks, none of their allocations across two.
        let p = plan_in_blocks(&intervals, self.arena.gpu().limits().max_buffer_size);
        let mut offsets = table.offsets;
        for (k, at) in planned.iter().zip(&p.offsets) {
            offsets[*k] = Some(*at);
        }
        self.stats.plan_time = start.elapsed();
        self.stats.recorded += 1;
        self.stats.recorded_allocations = table.sizes.len();
        self.stats.planned_per_iteration = intervals.len();
        self.stats.lower_bound = lower_bound(&intervals);
        self.stats.plan_bytes = p.peak;
        self.stats.heuristic = (!intervals.is_empty()).then_some(p.heuristic);
        self.release_slots();
        self.table = None;
        // The recorded iteration ran on the arena's own blocks; the replays will not use
        // them, so they go back once its work is done (in the browser, where nothing may
        // wait, those already empty).
        if !cfg!(web) {
            self.arena.synchronize()?;
        }
        self.arena.trim();
        // Whatever happens below, the next iterations do not record again by themselves:
        // a plan that does not fit now would not fit next time either.
        self.record_next = false;
        self.block_bytes = p.block;
        if p.peak > 0 {
            for _ in 0..self.config.slots {
                match self.reserve_slot(p.peak, p.block) {
                    Ok(slot) => self.slots.push(slot),
                    // Fewer slots than asked: the loop still runs, fenced more often.
                    Err(_) if !self.slots.is_empty() => break,
                    Err(e) => {
                        self.stats.plan_failures += 1;
                        return Err(e);
                    }
                }
            }
        }
        self.stats.blocks_per_slot = self.slots.first().map_or(0, Vec::len);
        self.table = Some(Arc::new(LoopTable { offsets, ..table }));
        Ok(())
    }
}

impl PlannedLoop {
    /// Reserves the blocks of one slot: `peak` bytes in blocks of `block` bytes (the
    /// last one smaller). On error, those already reserved go back.
    fn reserve_slot(&self, peak: u64, block: u64) -> Result<Vec<BlockId>> {
        let mut slot = Vec::new();
        let mut at = 0;
        while at < peak {
            let bytes = (peak - at).min(block);
            match self.arena.loop_reserve(self.pool, bytes) {
                Ok(id) => slot.push(id),
                Err(e) => {
                    for id in slot {
                        self.arena.loop_release(self.pool, id);
                    }
                    return Err(e);
                }
            }
            at += bytes;
        }
        Ok(slot)
    }

    /// Gives every slot's blocks back (each once its planned allocations are gone).
    fn release_slots(&mut self) {
        for slot in self.slots.drain(..) {
            for block in slot {
                self.arena.loop_release(self.pool, block);
            }
        }
    }
}

/// The table of a recording (offsets still to fill), the intervals of the allocations
/// freed within it (step = event index), and the index of each interval's allocation.
fn table_of(recording: Recording, align: u64) -> (LoopTable, Vec<Interval>, Vec<usize>) {
    let n = recording.sizes.len();
    let mut first = vec![0u32; n];
    let mut last: Vec<Option<u32>> = vec![None; n];
    for (step, e) in recording.events.iter().enumerate() {
        match *e {
            LoopEvent::Alloc(k) => first[k as usize] = step as u32,
            LoopEvent::Free(k) => last[k as usize] = Some(step as u32),
        }
    }
    let mut intervals = Vec::new();
    let mut planned = Vec::new();
    for k in 0..n {
        if let Some(last) = last[k] {
            intervals.push(Interval {
                size: recording.sizes[k],
                align,
                first: first[k],
                last,
            });
            planned.push(k);
        }
    }
    let table = LoopTable {
        sizes: recording.sizes,
        offsets: vec![None; n],
        events: recording.events,
    };
    (table, intervals, planned)
}

impl Iteration<'_> {
    /// Ends the iteration. After a recording this plans the loop and reserves its blocks;
    /// when they do not fit (the budget, or the device's largest buffer) it returns that
    /// error and the loop runs unplanned until [`PlannedLoop::replan`]
    /// ([`LoopStats::plan_failures`]). Dropping the iteration ends it too, ignoring such an error.
    pub fn end(mut self) -> Result<()> {
        self.ended = true;
        self.planned.end_iteration()
    }
}

impl Drop for Iteration<'_> {
    fn drop(&mut self) {
        if !self.ended {
            if let Err(e) = self.planned.end_iteration() {
                log::warn!("planned loop: ending an iteration failed: {e}");
            }
        }
    }
}

impl Drop for PlannedLoop {
    fn drop(&mut self) {
        // An iteration forgotten rather than ended left its hook in the arena.
        self.arena.loop_forget(self.id);
        self.release_slots();
    }
}
