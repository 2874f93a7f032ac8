//! When freed ranges come back: sealing frees into batches that wait for a work-done
//! epoch, filing (arming) the callbacks that complete them, and pacing the allocation
//! path's polls.
//!
//! # How it works
//! A free goes to the *open* batch. Sealing gives the open batch an epoch of the device's
//! work-done tracker (`gpu/work_done.rs`), which completes once the GPU has finished all
//! work submitted before the frees; [`State::harvest`] returns every batch whose epoch
//! is done to the ready cache or to its blocks. The tracker owns what "done" means; this
//! file decides *when* to seal and how often to file a callback, which is policy:
//! - **On GPUs** the open frees are sealed (a new epoch, one callback) whenever no batch is
//!   in flight, or once a batch is full ([`State::open_batch_full`]).
//! - **On CPU adapters** ([`Shared::chained_callbacks`]) a submission wakes the driver's
//!   threads, and a callback filed between a program's writes and its submit costs it an
//!   extra submission. There one callback at a time is *armed*: when it runs, most often
//!   inside the program's next submit, [`rearm`](Shared::rearm) seals what was freed
//!   meanwhile and files the next. Batches sealed while one is armed wait for an epoch
//!   not yet handed out ([`WorkDone::upcoming`](crate::gpu::WorkDone::upcoming)), which
//!   the next armed callback covers.
//! - Waits, flushes and `maintain` seal and file at once ([`Shared::seal`]).
//! - A dry run records no GPU work: its batches wait for epoch 0, done from the start.
//!
//! The figures behind these choices are in BENCHMARKS.md ("Arena").
//!
//! # What it promises
//! - A batch comes back only once its epoch is done: never before the GPU has finished
//!   the work submitted before its frees.
//! - Every sealed batch is covered by a filed callback, or by the armed one's next epoch;
//!   waits and flushes file one for everything open.
//! - The callback that takes the arena's lock ([`rearm`](Shared::rearm)) only *tries* it:
//!   it may run inside another thread's submit, under the queue lock, while a thread
//!   holding the arena's lock waits for that queue lock.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use super::state::State;
use super::Shared;
use crate::gpu::{Epoch, WorkDone};
use crate::sync::biased::MutexGuard;
use crate::Result;

/// The arena's view of the device's work-done tracker, with the arming state of the
/// allocation path's callback.
pub(crate) struct Completion {
    work: WorkDone,
    /// Whether the allocation path's callback is armed ([`Shared::seal_lazily`]).
    armed: AtomicBool,
    /// Armed callbacks that ran outside the arena's own polls (in the program's submits
    /// or polls).
    returned_alone: AtomicU64,
}

impl Completion {
    pub fn new(work: WorkDone) -> Completion {
        Completion {
            work,
            armed: AtomicBool::new(false),
            returned_alone: AtomicU64::new(0),
        }
    }
    /// The newest epoch known done.
    #[inline(always)]
    pub fn get(&self) -> Epoch {
        self.work.done()
    }
    pub fn armed(&self) -> bool {
        self.armed.load(Ordering::Acquire)
    }
    fn set_armed(&self, armed: bool) {
        self.armed.store(armed, Ordering::Release);
    }
    pub fn returned_alone(&self) -> u64 {
        self.returned_alone.load(Ordering::Acquire)
    }
    fn note_returned_alone(&self) {
        self.returned_alone.fetch_add(1, Ordering::AcqRel);
    }
}

thread_local! {
    /// Set while this thread is in one of the arena's own polls (`Shared::poll_unlocked`),
    /// where wgpu may run the armed callback.
    static IN_OWN_POLL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` as one of the arena's own polls (see [`IN_OWN_POLL`]).
fn in_own_poll<T>(f: impl FnOnce() -> T) -> T {
    let outer = IN_OWN_POLL.replace(true);
    let result = f();
    IN_OWN_POLL.set(outer);
    result
}

/// Bytes of small ranges a loop may keep circulating between the allocation path's polls
/// on GPUs ([`Shared::poll_interval`]).
const POLL_BYTES: u64 = 16 << 20;

/// Most times the allocation path stretches `config.poll_interval` for small requests
/// ([`Shared::poll_interval`]).
const POLL_STRETCH: u64 = 16;

/// `base` allocations between polls, stretched for requests placing `total` bytes until
/// [`POLL_BYTES`] of them circulate, at most [`POLL_STRETCH`] times (see
/// [`Shared::poll_interval`]).
fn stretched_interval(base: u64, total: u64) -> u64 {
    let stretched = (POLL_BYTES / total.max(1)).min(base.saturating_mul(POLL_STRETCH));
    base.max(stretched)
}

/// How long a flushing poll waits for the callbacks its empty submission moved
/// ([`Shared::poll_unlocked`]): rare (once per 64 MiB of frees without submits), and
/// long enough for a loaded machine that deschedules the thread.
const FLUSH_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(5);

impl Shared {
    /// Seals the open frees on the allocation path, and files a callback as each adapter
    /// is best served (module docs). A batch of small frees waits for more (see
    /// [`State::open_batch_full`]): each callback costs a few times an alloc+free pair.
    pub(super) fn seal_lazily(self: &Arc<Self>, st: &mut State) {
        if !self.chained_callbacks {
            if st.sealed.is_empty() || st.open_batch_full() {
                self.seal(st);
            }
            return;
        }
        if self.completion.armed() {
            if st.open.len() >= super::SEAL_BATCH {
                // Covered by the armed callback's next epoch (`rearm`).
                let upcoming = self.completion.work.upcoming();
                st.seal_at(upcoming);
            }
            return;
        }
        if st.has_open() {
            let epoch = self.arm();
            st.seal_at(epoch);
        }
    }

    /// Files the armed callback (under the lock) and returns its epoch: the callback
    /// completes it and everything sealed before it, then rearms. Safe under the lock, as
    /// [`seal`](Self::seal) is.
    fn arm(self: &Arc<Self>) -> Epoch {
        if self.config.dry_run {
            return 0;
        }
        self.completion.set_armed(true);
        let completion = self.completion.clone();
        let arena = Arc::downgrade(self);
        self.gpu.work_epoch_then(move || {
            if !IN_OWN_POLL.get() {
                completion.note_returned_alone();
            }
            match arena.upgrade() {
                Some(arena) => arena.rearm(),
                None => completion.set_armed(false),
            }
        })
    }

    /// The armed callback ran: seal what was freed since and arm the next callback, unless
    /// nothing is left to cover. Runs inside wgpu's callbacks, which may run inside
    /// another thread's `Gpu::submit`, under the queue lock (`gpu::submit`), while this
    /// thread holds the arena's lock and waits for that queue lock (a guard fill's
    /// `write_buffer`): so it only *tries* the lock. When the lock is busy, nothing stays
    /// armed and the next allocation's [`seal_lazily`](Self::seal_lazily) arms instead
    /// (the lock's holder may be in it already, having seen the flag still set: then the
    /// allocation after it).
    fn rearm(self: &Arc<Self>) {
        let Some(mut st) = self.state.try_lock() else {
            self.completion.set_armed(false);
            return;
        };
        self.completion.set_armed(false);
        if self.uncovered(&st) {
            let epoch = self.arm();
            st.seal_at(epoch);
        }
        self.unlock(st);
    }

    /// Whether frees are open, or a sealed batch waits for an epoch that no filed
    /// callback may have covered yet (sealed while a callback was armed).
    fn uncovered(&self, st: &State) -> bool {
        let done = self.completion.get();
        st.has_open() || st.sealed.back().is_some_and(|&(epoch, _)| epoch > done)
    }

    /// Seals the open frees and files their epoch's callback; with chained callbacks, files
    /// one for the newest batch still in flight even when nothing was open (the allocation
    /// path may have sealed some without a callback of their own). Safe under the lock:
    /// filing only flushes queued writes and files the closure, and the callback only
    /// marks an atomic.
    pub(super) fn seal(&self, st: &mut State) {
        let needed = if self.chained_callbacks {
            self.uncovered(st)
        } else {
            st.has_open()
        };
        if !needed {
            return;
        }
        let epoch = if self.config.dry_run {
            0
        } else {
            self.gpu.work_epoch()
        };
        st.seal_at(epoch);
    }

    /// Seals, polls without the lock, and returns the re-taken lock with finished frees
    /// collected. A callback filed while nothing is in flight waits for the next
    /// submission, and a non-blocking poll does not run it (frees of a program that
    /// stopped submitting would wait forever). wgpu's poll status cannot tell that case
    /// from work in flight, so with `flush` (`maintain`, `trim`, and an allocation about
    /// to grow while pending frees dominate), the newest batch still pending after the
    /// poll is flushed by the tracker (an empty submission and a short poll). Either way
    /// a free comes back only through its epoch: the flush is about when, never whether,
    /// the GPU is done.
    pub(super) fn poll_unlocked<'s>(
        self: &'s Arc<Self>,
        mut st: MutexGuard<'s, State>,
        flush: bool,
    ) -> MutexGuard<'s, State> {
        if flush || !self.chained_callbacks {
            self.seal(&mut st);
        } else {
            self.seal_lazily(&mut st);
        }
        self.unlock(st);
        in_own_poll(|| self.gpu.poll());
        let mut st = self.state.lock();
        st.harvest(self.completion.get());
        if let Some(&(newest, _)) = st.sealed.back().filter(|_| flush) {
            self.unlock(st);
            in_own_poll(|| self.gpu.flush_epoch(newest, FLUSH_TIMEOUT));
            st = self.state.lock();
            st.harvest(self.completion.get());
        }
        if flush {
            st.returned_alone_at_flush = self.completion.returned_alone();
        }
        st
    }

    /// Seals, waits for all submitted work without the lock, and returns the re-taken
    /// lock with every free sealed before the wait collected and the by-size cache given
    /// back. The wait completes every epoch filed before it (`gpu/work_done.rs`), so no
    /// free waits for a callback another thread's poll holds.
    pub(super) fn wait_unlocked<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
    ) -> Result<MutexGuard<'s, State>> {
        self.seal(&mut st);
        self.unlock(st);
        self.gpu.wait_idle()?;
        Ok(self.collect_after_wait())
    }

    /// [`wait_unlocked`](Self::wait_unlocked) without blocking, for
    /// [`Arena::synchronize_async`](super::Arena::synchronize_async): no lock is held
    /// across the await.
    pub(super) async fn wait_async(&self) -> Result<()> {
        {
            let mut st = self.state.lock();
            self.seal(&mut st);
            self.unlock(st);
        }
        self.gpu.wait_idle_async().await?;
        let st = self.collect_after_wait();
        self.unlock(st);
        Ok(())
    }

    /// Re-takes the lock after a wait for the GPU, collects every finished free and gives
    /// the by-size cache back.
    fn collect_after_wait(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock();
        st.counters.waits += 1;
        st.harvest(self.completion.get());
        st.flush_ready();
        st
    }

    /// Seals, then waits without the lock until the oldest batch in flight has completed
    /// (not all submitted work: GPU work queued after it keeps running, so a request that
    /// needs the ranges of an eviction queued earlier does not drain the kernels queued
    /// after it), and returns the re-taken lock with every finished free collected and
    /// the by-size cache given back.
    pub(super) fn wait_oldest_unlocked<'s>(
        &'s self,
        mut st: MutexGuard<'s, State>,
    ) -> Result<MutexGuard<'s, State>> {
        self.seal(&mut st);
        let Some(&(oldest, _)) = st.sealed.front() else {
            return Ok(st);
        };
        self.unlock(st);
        self.gpu.wait_epoch(oldest)?;
        Ok(self.collect_after_wait())
    }

    /// Fewer than [`poll_interval`](Self::poll_interval)`(total)` allocations since the
    /// allocation path last polled, for a request placing `total` bytes.
    pub(super) fn polled_recently(&self, st: &State, total: u64) -> bool {
        st.counters.allocations - st.last_poll_at < self.poll_interval(total)
    }

    /// Allocations between two polls of the allocation path, for a request placing
    /// `total` bytes: `config.poll_interval`, stretched for small requests on GPUs until
    /// [`POLL_BYTES`] of them circulate, at most [`POLL_STRETCH`] times.
    ///
    /// A loop settles with about one interval of ranges in circulation (between two polls
    /// it carves a new range whenever none is ready), so a poll and the two completion
    /// callbacks of each interval are spread over that many pairs; small ranges can
    /// circulate by the thousand for little memory. Not where callbacks are chained (CPU
    /// adapters): frees come back a submission later there, and a loop without submits
    /// would gather a stretched interval's frees before each poll.
    fn poll_interval(&self, total: u64) -> u64 {
        if self.chained_callbacks {
            return self.config.poll_interval;
        }
        stretched_interval(self.config.poll_interval, total)
    }
}

#[cfg(test)]
mod tests {
    use super::{stretched_interval, POLL_BYTES, POLL_STRETCH};
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// The stretched interval never polls more often than asked, stretches at most
    /// `POLL_STRETCH` times, and keeps what one interval circulates within `POLL_BYTES` or
    /// within what the base interval alone would, whichever is larger; 0 (poll every time)
    /// stays 0 at any size.
    #[test]
    fn stretched_interval_stays_within_its_bounds() {
        let mut rng = SmallRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.gen::<u64>();
        for _ in 0..100_000 {
            let base = next() % 300;
            let total = 4 * (1 + next() % (1 << (next() % 30)));
            let n = stretched_interval(base, total);
            assert!(n >= base, "{base} {total}: {n}");
            assert!(n <= base * POLL_STRETCH, "{base} {total}: {n}");
            assert!(
                n * total <= POLL_BYTES.max(base * total),
                "{base} {total}: {n} intervals of {total} bytes"
            );
        }
        assert_eq!(stretched_interval(64, 256), 1024);
        assert_eq!(stretched_interval(64, 64 << 10), 256);
        assert_eq!(stretched_interval(64, 1 << 20), 64);
        assert_eq!(stretched_interval(0, 256), 0);
    }
}
