//! The allocation path: a small state machine over the arena's state lock.
//!
//! # Lock discipline
//! wgpu runs callbacks (buffer maps, `on_submitted_work_done`, the user's own) inside
//! `Device::poll`, `Queue::submit` and `Buffer::destroy`/drop of a buffer with a pending
//! map, on the calling thread. A callback that drops or allocates an [`Allocation`] takes
//! the arena's lock; were it held around that call, the thread would wait on itself. So
//! the lock is never held around any of them:
//! - each [`Step`] is decided under the lock from the state alone;
//! - a step that needs the GPU ([`Step::Poll`], [`Step::Wait`]) seals the open frees under
//!   the lock, releases it, polls or waits, and re-locks to collect; the next step is then
//!   decided afresh, since other threads may have allocated or freed meanwhile;
//! - blocks given back are only queued under the lock ([`State::doomed`]) and destroyed by
//!   [`Shared::unlock`] after it is released;
//! - the one callback of ours that takes the lock, the allocation path's completion
//!   callback ([`Shared::seal_lazily`]), only *tries* it: it may run inside another
//!   thread's submit under the queue lock (`gpu::submit`), which a thread holding the
//!   arena's lock may be waiting for.
//!
//! # The steps
//! A request first takes a cached range of its exact size, then places a range in an
//! existing block, and only then grows; over a budget or quota it gives back cached ranges
//! and the empty blocks in the way, reads a live budget again (once), waits for the oldest
//! epoch of in-flight frees, asks an attached tier to evict movable allocations
//! ([`super::Relief`], four times at most), waits again while frees are in flight (a
//! bounded number of times), and only then fails with [`Error::OutOfMemory`] naming the
//! limit.

use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::Arc;

use super::allocation::Held;
use super::history::EventKind;
use super::planned::{HookMode, PlannedRange};
use super::state::{self, CachedRange, LiveRecord, Phase, State};
use super::{guard, AllocMode, Allocation, Shared};
use crate::alloc::AllocError;
use crate::error::Limit;
use crate::gpu::clock;
use crate::sync::biased::MutexGuard;
use crate::{Error, Result};

/// Waits for in-flight frees one request may do before it fails.
const MAX_WAITS: u32 = 8;
/// Times one request may ask an attached tier for memory ([`Step::Relieve`]).
const MAX_RELIEFS: u32 = 4;

/// What the allocation loop does next.
pub(super) enum Step {
    /// A range is placed or taken from the ready cache: done.
    Placed(Got),
    /// Decide again under the lock (something was given back to the blocks).
    Again,
    /// Seal, release the lock, poll the device without blocking, re-lock and collect;
    /// with `flush`, also run callbacks wgpu deferred (see `Shared::poll_unlocked`).
    Poll { flush: bool },
    /// Seal, release the lock, wait for the oldest epoch of frees in flight, re-lock,
    /// collect, and give cached ranges back to their blocks.
    Wait,
    /// Release the lock, ask the pressure hook for `bytes` ([`super::Relief`]), and if it
    /// gave any back, wait and collect as [`Step::Wait`] does (for whole blocks, first
    /// wait for all work, so pending frees do not hide empty blocks).
    Relieve { bytes: u64, whole_blocks: bool },
    /// Release the lock, read the driver now for a live budget
    /// ([`super::Budget::FractionOfAvailable`]), re-lock and decide again: the budget may
    /// have grown since the last reading (a neighbour gave memory back).
    Reread,
    /// Give up with this error; the arena is unchanged.
    Fail(Error),
}

/// Why a block could not be reserved.
pub(super) enum Reserve {
    Alloc(AllocError),
    /// Growth not allowed yet: try collecting finished frees first.
    NeedBlock,
    /// The block set gave empty blocks back to make room, after the room for a new block
    /// had been computed: decide again with what is reserved now.
    Released,
    /// The limit, its bound in bytes, and the block that would have crossed it.
    Over(Limit, Option<u64>, u64),
    Device(String),
    /// Fail the request with this error (the device is lost).
    Failed(Error),
}

impl From<AllocError> for Reserve {
    fn from(e: AllocError) -> Self {
        Reserve::Alloc(e)
    }
}

/// Where a request's range comes from.
pub(super) enum Got {
    /// The ready cache: the slot of a record whose range the GPU is done with.
    Ready(u32),
    /// Placed now.
    New(CachedRange),
}

/// One request and what the loop has tried for it so far.
pub(super) struct Request<'a> {
    pub(super) pool: usize,
    /// The user's bytes (a multiple of 4).
    pub(super) size: u64,
    /// The bytes placed: `size` plus both guards.
    pub(super) total: u64,
    pub(super) align: u64,
    pub(super) label: &'a str,
    /// Ranges of this size may come from the by-size cache.
    pub(super) reuse: bool,
    /// What this request may do ([`AllocMode`]).
    pub(super) mode: AllocMode,
    /// Times the pressure hook was asked.
    pub(super) relieved: u32,
    /// Times the loop waited for the GPU.
    pub(super) waits: u32,
    /// Growth is allowed (after a reclaim, or when there was nothing to reclaim).
    pub(super) allow_new: bool,
    /// The loop has polled to reclaim before growing.
    pub(super) reclaimed: bool,
    /// The loop has polled for a cached range of this size.
    pub(super) polled_for_cache: bool,
    /// `alloc` looked in the cache just before the loop (the first step skips it).
    pub(super) ready_checked: bool,
    /// Times a limit was hit.
    pub(super) retries: u32,
    /// A cached range of this size served it (recorded in the history).
    pub(super) reused: bool,
    /// The live budget was read again for this request ([`Step::Reread`]).
    pub(super) reread: bool,
}

/// Pending frees the allocation path lets gather before it polls and flushes instead of
/// growing, whatever the live data (see `before_growing`).
const PENDING_FLOOR: u64 = 64 << 20;

/// [`PENDING_FLOOR`] where callbacks are chained ([`Shared::seal_lazily`]): a free comes
/// back a submission later there, so the floor covers two windows between submits. With
/// one window, `loop_reuse` (1 MiB per iteration, a submit every 64) polled once per
/// window on lavapipe, and the callback that ran in that poll filed the next one while
/// the program's writes were queued, which submits them: many extra submissions. Used
/// only while frees come back on their own (the rule of `before_growing`); the loop's
/// figures are in BENCHMARKS.md (Arena).
const PENDING_FLOOR_CHAINED: u64 = 2 * PENDING_FLOOR;

impl Shared {
    /// Releases the state lock, then destroys the blocks given back while it was held
    /// (destroying a buffer may run a wgpu map callback, which must not find us locked).
    #[inline]
    pub(super) fn unlock(&self, st: MutexGuard<'_, State>) {
        if st.doomed.is_empty() {
            // The common case, on every free: nothing to destroy.
            return;
        }
        Self::unlock_and_destroy(st);
    }

    #[inline(never)]
    fn unlock_and_destroy(mut st: MutexGuard<'_, State>) {
        let doomed = std::mem::take(&mut st.doomed);
        drop(st);
        for block in doomed {
            block.destroy();
        }
    }

    pub(super) fn alloc(
        self: &Arc<Self>,
        pool: usize,
        size: u64,
        label: &str,
        mode: AllocMode,
    ) -> Result<Allocation> {
        if size == 0 {
            return Err(AllocError::ZeroSize.into());
        }
        self.gpu.check_alive()?;
        let mut st = self.state.lock();
        let ready = if mode.cache && mode.block.is_none() {
            self.ready_slot(&mut st, pool, size)
        } else {
            None
        };
        let Some((slot, size)) = ready else {
            return self.alloc_placed(st, pool, size, label, mode);
        };
        // The steady state of a loop. Only small values pass between the steps: the
        // handle is written once, where it is returned (built in one function and moved
        // out through an `Option<Result<_>>`, its copies slowed the pair measurably: loads
        // that span two earlier stores wait for both).
        let label_index = st.intern(label);
        if self.revive(&mut st, slot, size, label_index).is_none() {
            self.unlock(st);
            return Err(no_record());
        }
        self.hand_out(st, slot, EventKind::Reuse)
    }

    /// Places a defragmentation's destinations, all under one lock: each of `requests`
    /// (bytes, label) in `pool` as `mode` allows, which must neither grow, relieve nor
    /// take cached ranges ([`AllocMode::INTO_EXISTING`], [`AllocMode::in_block`]). All
    /// or none: `Ok(None)` when one finds no room, with what was placed given back at
    /// once. A probe for holes, not a refusal: nothing is counted as out of memory or
    /// written to the history as one. With guards, or while a planned loop runs, the
    /// requests take the general path one at a time (same result, one lock each).
    pub(super) fn alloc_destinations(
        self: &Arc<Self>,
        pool: usize,
        requests: &[(u64, &str)],
        mode: AllocMode,
    ) -> Result<Option<Vec<Allocation>>> {
        if mode.cache || mode.grow || mode.relieve {
            return Err(Error::invalid(
                "placing defragmentation destinations with a mode that may grow, relieve or \
                 reuse cached ranges",
                "this is a vramkit bug: please report it",
            ));
        }
        self.gpu.check_alive()?;
        let max_buffer = self.gpu.limits().max_buffer_size;
        let mut st = self.state.lock();
        let Some(align) = st.pools.get(pool).map(|p| p.alignment) else {
            self.unlock(st);
            return Err(Error::misuse(
                crate::Misuse::Foreign,
                format!("pool {pool} does not exist"),
                "use a PoolId from this arena",
            ));
        };
        if self.config.guard_bytes != 0 || st.loop_hook.is_some() {
            self.unlock(st);
            return self.alloc_destinations_each(pool, requests, mode);
        }
        st.harvest(self.completion.get());
        self.seal_lazily(&mut st);
        let mut placed: Vec<Allocation> = Vec::with_capacity(requests.len());
        let mut fits = true;
        for &(size, label) in requests {
            let total = size
                .checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
                .filter(|&t| t > 0 && t <= max_buffer);
            let Some(total) = total else {
                fits = false;
                break;
            };
            let p = &mut st.pools[pool];
            let range = match mode.block {
                Some(block) => p.set.allocate_in(block, total, align),
                None => p.set.allocate_existing(total, align),
            };
            let Some(range) = range else {
                fits = false;
                break;
            };
            let Some(buffer) = p.buffer(range.block).cloned() else {
                // Unreachable: a placed range always lies in a live block.
                p.set.free(range);
                fits = false;
                break;
            };
            let label_index = st.intern(label);
            let id = st.next_id;
            st.next_id += 1;
            let (created, backtrace) = self.birth();
            let offset = range.offset;
            let slot = st.live.insert(LiveRecord {
                phase: Phase::Live,
                id,
                label: label_index,
                size: total,
                pool,
                offset,
                range_offset: offset,
                created,
                backtrace,
                held: Held::Range(range),
                buffer,
                class: None,
            });
            let State { live, history, .. } = &mut *st;
            let Some(r) = live.get(slot) else {
                fits = false;
                break;
            };
            if let Some(h) = history.as_mut() {
                state::record_event(h, EventKind::Alloc, r);
            }
            let (buffer, placed_size) = (NonNull::from(&*r.buffer), r.placed_size());
            st.note_alloc(label_index, placed_size);
            let shared = st.stock.pop().unwrap_or_else(|| self.clone());
            placed.push(Allocation {
                shared: ManuallyDrop::new(shared),
                buffer,
                offset,
                size: total,
                slot,
            });
        }
        self.unlock(st);
        if fits {
            return Ok(Some(placed));
        }
        placed.into_iter().for_each(Allocation::discard_unused);
        Ok(None)
    }

    /// [`alloc_destinations`](Self::alloc_destinations) through the general path, one
    /// request at a time.
    #[cold]
    fn alloc_destinations_each(
        self: &Arc<Self>,
        pool: usize,
        requests: &[(u64, &str)],
        mode: AllocMode,
    ) -> Result<Option<Vec<Allocation>>> {
        let mut placed = Vec::with_capacity(requests.len());
        for &(size, label) in requests {
            match self.alloc(pool, size, label, mode) {
                Ok(a) => placed.push(a),
                Err(e) => {
                    placed.into_iter().for_each(Allocation::discard_unused);
                    return match e {
                        Error::OutOfMemory(_) => Ok(None),
                        e => Err(e),
                    };
                }
            }
        }
        Ok(Some(placed))
    }

    /// The slot of a ready range for a request of `size` bytes in `pool`, and the request
    /// size its record takes (`size` rounded up to the copy alignment), when the request
    /// may take one without the general path ([`alloc_placed`](Self::alloc_placed)): no
    /// guards, no planned loop running, a size the cache holds. Collects finished frees
    /// and seals open ones first, as every allocation does. The general path's checks,
    /// request and calls cost a loop of small pairs about a fifth of its time.
    #[inline]
    fn ready_slot(self: &Arc<Self>, st: &mut State, pool: usize, size: u64) -> Option<(u32, u64)> {
        if self.config.guard_bytes != 0 || st.loop_hook.is_some() {
            return None;
        }
        let size = size.checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)?;
        // Ranges of a size at or above the threshold are never cached; the test keeps a
        // policy changed since from serving one anyway.
        if size >= st.pools.get(pool)?.set.policy().dedicated_threshold {
            return None;
        }
        st.harvest(self.completion.get());
        self.seal_lazily(st);
        Some((st.take_ready(pool, size)?, size))
    }

    /// Every allocation [`ready_slot`](Self::ready_slot) does not serve: checks the
    /// request, serves planned loop iterations, and places new ranges.
    #[inline(never)]
    fn alloc_placed<'s>(
        self: &'s Arc<Self>,
        mut st: MutexGuard<'s, State>,
        pool: usize,
        size: u64,
        label: &str,
        mode: AllocMode,
    ) -> Result<Allocation> {
        let max_buffer = self.gpu.limits().max_buffer_size;
        let Some(p) = st.pools.get(pool) else {
            return Err(Error::misuse(
                crate::Misuse::Foreign,
                format!("pool {pool} does not exist"),
                "use a PoolId from this arena",
            ));
        };
        let align = p.alignment;
        // The fixed threshold, not the share: a request dedicated only by its share of
        // what is reserved (at most 32 MiB) is cheap to keep in the reuse cache, which a
        // loop of 1 MiB allocations in a 64 MiB arena lives on.
        let dedicated_threshold = p.set.policy().dedicated_threshold;
        // (The test spares the common case a division.)
        let guard = match self.config.guard_bytes {
            0 => 0,
            bytes => bytes.next_multiple_of(align),
        };
        // Whatever the limits, no buffer can hold more than the device's largest buffer:
        // say so before any arithmetic on the size can overflow.
        let total = size
            .checked_next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
            .and_then(|s| s.checked_add(2 * guard))
            .filter(|&t| t <= max_buffer);
        let Some(total) = total else {
            st.counters.ooms += 1;
            let limit = Limit::MaxBufferSize;
            return Err(self.oom(&mut st, pool, size, label, limit, Some(max_buffer), 0));
        };
        let size = size.next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
        let blocks_before = st.counters.blocks_created;
        let label_index = st.intern(label);
        if st.loop_hook.is_some() && guard == 0 && mode.cache {
            // Before the harvest and the seal: a planned allocation needs neither.
            if let Some(slot) = self.planned(&mut st, pool, size, label_index) {
                return self.hand_out(st, slot, EventKind::Alloc);
            }
        }
        st.harvest(self.completion.get());
        self.seal_lazily(&mut st);
        // Ranges are kept by request size for reuse unless guards need refilling or the
        // request gets a dedicated block (those go back to their block).
        let reuse = mode.cache && guard == 0 && total < dedicated_threshold;
        // A range of this size may be ready when `ready_slot` did not look (a planned
        // loop runs). Looked up here as well as in `step` (which then skips it once).
        let ready = if reuse && mode.block.is_none() {
            st.take_ready(pool, total)
        } else {
            None
        };
        let (got, reused) = match ready {
            Some(slot) => (Got::Ready(slot), true),
            None => {
                let mut req = Request {
                    pool,
                    size,
                    total,
                    align,
                    label,
                    reuse,
                    mode,
                    relieved: 0,
                    waits: 0,
                    allow_new: false,
                    reclaimed: false,
                    polled_for_cache: false,
                    ready_checked: reuse,
                    retries: 0,
                    reused: false,
                    reread: false,
                };
                let (got, locked) = self.place(st, &mut req)?;
                st = locked;
                (got, req.reused)
            }
        };
        // Guards to fill once the lock is released (see below).
        let mut unfilled = None;
        let (slot, id) = match got {
            // A cached range: no guards (`reuse`), the same size and pool; only who holds
            // it is new.
            Got::Ready(slot) => {
                let Some(id) = self.revive(&mut st, slot, size, label_index) else {
                    self.unlock(st);
                    return Err(no_record());
                };
                (slot, id)
            }
            Got::New(range) => {
                let id = st.next_id;
                st.next_id += 1;
                let (created, backtrace) = self.birth();
                let placed = range.placed;
                let offset = placed.offset + guard;
                if guard > 0 && !self.config.dry_run {
                    // `Gpu::write_buffer` takes the queue lock, which a thread submitting
                    // holds while wgpu runs callbacks that may drop an allocation (and so
                    // take this lock): the arena's lock ranks above the queue's, so the
                    // guards are queued after it is released. Until then `check_guards`
                    // passes this allocation over.
                    unfilled = Some(guard::Fill {
                        buffer: range.buffer.clone(),
                        front: placed.offset,
                        front_len: guard,
                        back: offset + size,
                        back_len: placed.size - guard - size,
                    });
                    st.guards_unfilled.push(id);
                }
                let slot = st.live.insert(LiveRecord {
                    phase: Phase::Live,
                    id,
                    label: label_index,
                    size,
                    pool,
                    offset,
                    range_offset: placed.offset,
                    created,
                    backtrace,
                    held: Held::Range(placed),
                    buffer: range.buffer,
                    class: reuse.then_some(size),
                });
                (slot, id)
            }
        };
        let kind = if reused {
            EventKind::Reuse
        } else {
            EventKind::Alloc
        };
        if let Some(hook) = st.loop_hook.as_deref_mut() {
            if hook.applies(pool) {
                hook.note_recorded(size, id);
            }
        }
        let grew = st.counters.blocks_created != blocks_before;
        let allocation = self.hand_out(st, slot, kind);
        if let Some(fill) = unfilled {
            fill.write(&self.gpu);
            let mut st = self.state.lock();
            st.guards_unfilled.retain(|&u| u != id);
            self.unlock(st);
        }
        // On a destroyed device wgpu made the new block's buffer silently invalid: ask,
        // now that no lock is held (a poll runs callbacks). Blocks are rare.
        if grew && !self.config.dry_run {
            self.gpu.notice_loss()?;
        }
        allocation
    }

    /// The allocation loop, for a request the ready cache did not serve: decides each
    /// step under the lock and runs it (polls and waits without it) until a range is
    /// placed, and returns the range with the re-taken lock; or fails, unlocked.
    #[inline(never)]
    fn place<'s>(
        self: &'s Arc<Self>,
        mut st: MutexGuard<'s, State>,
        req: &mut Request<'_>,
    ) -> Result<(Got, MutexGuard<'s, State>)> {
        loop {
            match self.step(&mut st, req) {
                Step::Placed(got) => return Ok((got, st)),
                Step::Again => {}
                Step::Poll { flush } => {
                    st = self.poll_unlocked(st, flush);
                    st.last_poll_at = st.counters.allocations;
                }
                Step::Wait => {
                    req.waits += 1;
                    st = self.wait_oldest_unlocked(st)?;
                }
                Step::Relieve {
                    bytes,
                    whole_blocks,
                } => {
                    if whole_blocks {
                        // Pending frees hold blocks too: collect them first, so the hook
                        // sees which blocks only its allocations keep.
                        st = self.wait_unlocked(st)?;
                        req.waits += 1;
                    }
                    self.unlock(st);
                    let hook = self.relief.lock().as_ref().and_then(|w| w.upgrade());
                    let given = hook.map_or(0, |h| h.relieve(req.pool, bytes, whole_blocks));
                    st = self.state.lock();
                    if given > 0 {
                        req.waits += 1;
                        st = self.wait_oldest_unlocked(st)?;
                    }
                }
                Step::Reread => {
                    // Read with no lock of ours held (a reader may be foreign code).
                    self.unlock(st);
                    self.refresh_live_budget(true);
                    st = self.state.lock();
                }
                Step::Fail(e) => {
                    self.unlock(st);
                    return Err(e);
                }
            }
        }
    }

    /// When an allocation is made, as its record keeps it: the coarse clock (`clock.rs`),
    /// and a backtrace if the arena captures them ([`super::ArenaConfig::backtraces`]).
    #[inline(always)]
    fn birth(&self) -> (clock::Stamp, Option<Box<std::backtrace::Backtrace>>) {
        let backtrace = if self.config.backtraces {
            Some(capture_backtrace())
        } else {
            None
        };
        (clock::now(), backtrace)
    }

    /// Makes the ready record in `slot` live for a request of `size` bytes, born now
    /// ([`State::revive`]); returns its id, `None` if the slot holds no record.
    #[inline(always)]
    fn revive(&self, st: &mut State, slot: u32, size: u64, label_index: u32) -> Option<u64> {
        let (created, backtrace) = self.birth();
        st.revive(slot, size, label_index, created, backtrace)
    }

    /// Counts the live record in `slot` (counters and label, history), releases the lock
    /// and makes the record's handle, with an arena reference handed back by a dropped
    /// allocation or a new one. The handle is built after the lock is released, in the
    /// returned value itself: built before and held across the release, it was copied
    /// (see `alloc`).
    #[inline(always)]
    fn hand_out(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, State>,
        slot: u32,
        kind: EventKind,
    ) -> Result<Allocation> {
        let State { live, history, .. } = &mut *st;
        let Some(r) = live.get(slot) else {
            self.unlock(st);
            return Err(no_record());
        };
        if let Some(h) = history.as_mut() {
            state::record_event(h, kind, r);
        }
        let (label_index, offset, size, placed_size) = (r.label, r.offset, r.size, r.placed_size());
        let buffer = NonNull::from(&*r.buffer);
        st.note_alloc(label_index, placed_size);
        let shared = st.stock.pop().unwrap_or_else(|| self.clone());
        self.unlock(st);
        Ok(Allocation {
            shared: ManuallyDrop::new(shared),
            buffer,
            offset,
            size,
            slot,
        })
    }

    /// Serves a request from the planned loop iteration running on this arena, when it
    /// applies to `pool` and this thread and the request follows the recording
    /// (`planned.rs`): files its record and returns the slot, for
    /// [`hand_out`](Self::hand_out); `None` leaves it to the usual path.
    fn planned(
        self: &Arc<Self>,
        st: &mut MutexGuard<'_, State>,
        pool: usize,
        size: u64,
        label_index: u32,
    ) -> Option<u32> {
        let hook = st.loop_hook.as_deref_mut().filter(|h| h.applies(pool))?;
        let (at, index) = hook.next_planned(size)??;
        let iteration = hook.iteration;
        let HookMode::Replay(replay) = &hook.mode else {
            return None;
        };
        let part = (at / replay.block_bytes) as usize;
        let Some((block, buffer)) = replay.blocks.get(part) else {
            // A table offset beyond the blocks reserved for it: never made so; give up
            // the plan for this iteration rather than serve it.
            hook.deviated = true;
            return None;
        };
        let (block, buffer, at) = (*block, buffer.clone(), at % replay.block_bytes);
        if let Some(lb) = st.loop_block(pool, block) {
            lb.live += 1;
        }
        let id = st.next_id;
        st.next_id += 1;
        let (created, backtrace) = self.birth();
        let record = LiveRecord {
            phase: Phase::Live,
            id,
            label: label_index,
            size,
            pool,
            offset: at,
            range_offset: at,
            created,
            backtrace,
            held: Held::Planned(PlannedRange {
                block,
                size,
                index,
                iteration,
            }),
            buffer,
            class: None,
        };
        Some(st.live.insert(record))
    }

    /// Decides the next step for `req` from the state alone (under the lock).
    fn step(&self, st: &mut State, req: &mut Request<'_>) -> Step {
        if let Some(block) = req.mode.block {
            let p = &mut st.pools[req.pool];
            let range = p
                .set
                .allocate_in(block, req.total, req.align)
                .and_then(|placed| match p.buffer(block).cloned() {
                    Some(buffer) => Some(CachedRange { placed, buffer }),
                    None => {
                        p.set.free(placed);
                        None
                    }
                });
            return range.map_or_else(
                || self.no_room(st, req),
                |range| Step::Placed(Got::New(range)),
            );
        }
        if req.reuse {
            // The first step of a request skips the cache `alloc` has just looked in.
            if !std::mem::take(&mut req.ready_checked) {
                if let Some(slot) = st.take_ready(req.pool, req.total) {
                    req.reused = true;
                    return Step::Placed(Got::Ready(slot));
                }
            }
            // No range of this size is ready but frees are in flight: a poll (cheap
            // without a submit) at most every `poll_interval(total)` allocations brings them
            // back, rather than carving new ranges until the block is full.
            if !req.polled_for_cache
                && !st.sealed.is_empty()
                && !self.polled_recently(st, req.total)
            {
                req.polled_for_cache = true;
                return Step::Poll { flush: false };
            }
        }
        let placed = match self.try_place(st, req) {
            Ok(placed) => placed,
            Err(Reserve::Alloc(e)) => return Step::Fail(e.into()),
            Err(Reserve::NeedBlock) => return self.before_growing(st, req),
            Err(Reserve::Released) => return Step::Again,
            Err(Reserve::Over(limit, bound, block)) => {
                return self.over_limit(st, req, limit, bound, Some(block), None);
            }
            Err(Reserve::Device(message)) => {
                return self.over_limit(st, req, Limit::Device, None, None, Some(message));
            }
            Err(Reserve::Failed(e)) => return Step::Fail(e),
        };
        match st.pools[req.pool].buffer(placed.block).cloned() {
            Some(buffer) => Step::Placed(Got::New(CachedRange { placed, buffer })),
            None => {
                // Unreachable: a placed range always lies in a live block.
                st.pools[req.pool].set.free(placed);
                Step::Fail(Error::Device {
                    during: "allocating".into(),
                    message: "block without a buffer".into(),
                })
            }
        }
    }

    /// No existing block has room. Ranges cached for other sizes go back to their blocks
    /// first (the cache must never be why the arena holds more memory); then every free
    /// the GPU has finished with is collected by one poll, unless the allocation path
    /// polled within `config.poll_interval` allocations: a poll costs far more than an
    /// allocation, so the working set settles where a poll returns many ranges. Requests
    /// for a dedicated block always poll first: a new large buffer costs more than the
    /// poll. The budget still bounds growth.
    fn before_growing(&self, st: &mut State, req: &mut Request<'_>) -> Step {
        if !req.mode.grow {
            return self.no_room(st, req);
        }
        if st.counters.cached > 0 {
            st.flush_ready();
            return Step::Again;
        }
        let dedicated = req.total >= st.pools[req.pool].set.policy().dedicated_threshold;
        // Once pending frees hold four times the live data (and a floor), growing for them
        // would hold memory for nothing: poll, and flush deferred callbacks, however
        // recently the path polled. Below that, growing is cheaper than polling each time
        // (a small floor made a loop of 1 MiB allocations poll on every growth).
        // The chained floor only while frees come back without the arena's polls (an
        // armed callback ran in the program's submit or poll since the last flush): a
        // program that never submits gets nothing back until a flush, and must not gather
        // twice as much first (`tests/it/arena.rs`,
        // `frees_come_back_without_submissions_or_synchronize`: 95-101 MiB reserved for
        // 4 MiB live with the chained floor, against its bound of 96).
        let returning = self.completion.returned_alone() > st.returned_alone_at_flush;
        let floor = if self.chained_callbacks && returning {
            PENDING_FLOOR_CHAINED
        } else {
            PENDING_FLOOR
        };
        let pending_dominates = st.counters.pending >= floor.max(4 * st.counters.allocated);
        let recently = !dedicated && self.polled_recently(st, req.total) && !pending_dominates;
        let nothing_in_flight = st.open.is_empty() && st.sealed.is_empty();
        if req.reclaimed || recently || nothing_in_flight {
            req.allow_new = true;
        }
        let poll = !req.reclaimed && !recently;
        req.reclaimed = true;
        if poll {
            Step::Poll {
                flush: pending_dominates,
            }
        } else {
            Step::Again
        }
    }

    /// A request that may not grow ([`AllocMode::grow`]) found no room where it may go.
    fn no_room(&self, st: &mut State, req: &Request<'_>) -> Step {
        st.counters.ooms += 1;
        let (pool, size, label) = (req.pool, req.size, req.label);
        Step::Fail(self.oom(st, pool, size, label, Limit::Budget, st.budget, 0))
    }

    /// A budget, quota, buffer-size or device limit was hit: give cached ranges and empty
    /// blocks back, then wait for in-flight frees (twice at most), then fail.
    fn over_limit(
        &self,
        st: &mut State,
        req: &mut Request<'_>,
        limit: Limit,
        bound: Option<u64>,
        block: Option<u64>,
        device_message: Option<String>,
    ) -> Step {
        req.retries += 1;
        st.counters.retries += 1;
        // Cached ranges and empty blocks did not serve this request (placement tries
        // them first): give them back so the block it needs fits. After every wait too:
        // the wait may have emptied blocks, which the next placement tries before this.
        let flushed = st.flush_ready();
        let released = match (&limit, block) {
            (Limit::Budget, Some(need)) => st.release_empty_for(need),
            _ => st.release_empty(0),
        };
        if released > 0 || flushed > 0 {
            return Step::Again;
        }
        // A live budget is read at most every `budget_refresh`: before waiting, or moving
        // anything to host memory, read it once more. A neighbour may have given back
        // what this request needs since the last reading.
        if matches!(limit, Limit::Budget) && !req.reread && self.is_live_budget() {
            req.reread = true;
            return Step::Reread;
        }
        let in_flight = !st.sealed.is_empty() || !st.open.is_empty();
        // Frees in flight come back without moving a byte: wait for them once before
        // asking a tier to move movable allocations to host memory.
        if req.waits == 0 && in_flight {
            return Step::Wait;
        }
        let hook = req.mode.relieve && req.relieved < MAX_RELIEFS && self.relief.lock().is_some();
        if hook && !matches!(limit, Limit::MaxBufferSize) {
            req.relieved += 1;
            // Holes for the request in its own pool (cheap: the request's bytes), then
            // whole blocks as large as the one it needed, when the budget is what stops it
            // (holes do not lower reserved bytes) or the holes were too scattered; twice
            // each, the second time larger: another thread may take what was given back
            // before this one retries.
            let round = u64::from(req.relieved.div_ceil(2));
            return if req.relieved % 2 == 1 {
                Step::Relieve {
                    bytes: req.total.saturating_mul(round),
                    whole_blocks: false,
                }
            } else {
                Step::Relieve {
                    bytes: block
                        .unwrap_or(req.total)
                        .max(req.total)
                        .saturating_mul(round),
                    whole_blocks: true,
                }
            };
        }
        // Each wait collects at least the oldest epoch; other threads may seal new ones
        // meanwhile, hence a bound.
        if req.waits < MAX_WAITS && in_flight {
            return Step::Wait;
        }
        st.counters.ooms += 1;
        if let Some(message) = device_message {
            log::warn!("device refused a block: {message}");
        }
        let mut oom = self.oom(st, req.pool, req.size, req.label, limit, bound, req.retries);
        if let Error::OutOfMemory(o) = &mut oom {
            o.new_block = block;
        }
        Step::Fail(oom)
    }
}

#[cold]
#[inline(never)]
fn capture_backtrace() -> Box<std::backtrace::Backtrace> {
    Box::new(std::backtrace::Backtrace::force_capture())
}

/// The error for a slot that should hold a record and does not (unreachable: ready and
/// just-filed slots hold records).
#[cold]
fn no_record() -> Error {
    Error::Device {
        during: "allocating".into(),
        message: "an allocation's slot without its record".into(),
    }
}
