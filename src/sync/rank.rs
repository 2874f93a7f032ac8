//! Lock ranks: every lock of vramkit's that can be held while another is taken has a
//! rank, a thread takes locks only in rising rank, and debug builds check it.
//!
//! # Why
//! wgpu runs callbacks (work done, buffer maps, device loss) inside `Queue::submit` and
//! `Device::poll` on whichever thread calls them, and vramkit holds its queue lock across
//! every submit and queued write (`gpu/submit.rs`). A callback may drop an allocation, a
//! movable or a staging buffer, or upload and submit, from any thread at any time: that
//! is the contract users rely on. So whatever a callback may take must rank above every
//! lock held around a submit or a queued write, and nothing may take the queue lock while
//! holding a lock a callback takes. Two locks taken in both orders by two threads is a
//! deadlock that waits for the right interleaving (a guard fill under the arena's lock
//! against a callback's drop under the queue lock was one); a rank check finds the first
//! out-of-order acquisition on any interleaving, in every debug test run, as wgpu-core
//! ranks its own locks.
//!
//! # The ranks, lowest first
//! | rank | lock | why there |
//! |---|---|---|
//! | [`LIFECYCLE`] | `Gpu::lifecycle_lock` (devices made and dropped one at a time) | held around device creation, before anything else |
//! | [`QUEUE`] | the queue lock (`gpu/submit.rs`), re-entrant | held across `Queue::submit`, where callbacks run: below all they take |
//! | [`SUBMIT_GATE`] | the submission gate's count (`gpu/submit.rs`) | taken inside a submit, held for an increment |
//! | [`STAGING_RETURNS`] | the upload ring's receiver of returned buffers | taken before the ring, to collect what callbacks sent back |
//! | [`STAGING`] | the upload ring, download rings, view pools, virtual-texture staging slots | a callback returns staging memory |
//! | [`TIER`] | the tiers' state (`tier/`) | a callback drops a `Resident` or a `Movable`; a move drops a device allocation under it |
//! | [`ARENA`] | the arena's state (`sync/biased.rs`) | a callback drops an allocation |
//! | [`WORK_DONE`] | the work-done tracker's epoch lock (`gpu/work_done.rs`) | epochs are handed out under the tiers' and the arena's locks |
//! | [`LAZY_POLLER`] | a device's polling thread, started on first use (`gpu/poller.rs`) | starting it files a loss hook |
//! | 90: [`DEVICE_LINKS`], [`DEVICE_ROWS`], [`KERNEL_BINDINGS`], [`SCAN_STATE`], [`SPLIT_SCRATCH`], [`ARENA_RELIEF`], [`LIVE_BUDGET`], [`LATENCY_SAMPLES`], [`EPOCH_WAKERS`], [`DRIVER_MEMORY_READER`], [`PROFILE_PENDING`], [`PROFILE_SPANS`], [`TIMER_SLOTS`], [`SHADER_MODULES`], [`PIPELINES`], [`POLLER_PENDING`], [`VT_LOAD_QUEUE`], [`TIER_DEVICE`] | caches and counters: no two are held at once, and only the loss state's locks below are taken under them (a cache filled inside an error scope ends with the loss probe) | |
//! | [`LOST_HOOKS`] | what a recorded loss runs (`gpu/lost.rs`) | filed when a poller starts; run after it is released |
//! | [`LOST_REASON`] | why the device was lost | read by every `DeviceLost` error, whatever its caller holds |
//! | [`LOST_WAKERS`] | futures a loss resolves | |
//! | [`GPU_REGISTRY`] | the live devices (`gpu/registry.rs`) | filed while a device is made, under the lifecycle lock |
//! | [`REAPER`] | the reaper's channel (`gpu/lifecycle.rs`) | a last handle drops with anything held |
//! | [`LOST_PROBE`] | the device-loss probe (`gpu/lost.rs`) | ends every call that records GPU work, whatever it holds |
//!
//! # What it promises
//! - In builds with `validate_locks` (debug builds, and optimised builds made with
//!   `VRAMKIT_VALIDATE_LOCKS=1` or `RUSTFLAGS="--cfg vramkit_validate_locks"`, as
//!   wgpu-core's `wgpu_validate_locks`; `build.rs`), taking a lock whose rank is not
//!   above every rank this thread holds panics, naming both locks; the test suite runs
//!   with it, and the GPU machine's release runs are built with it. A re-entrant lock
//!   may be taken again at its own rank. A *try* never waits, so it is not checked, but
//!   what it takes is held (and checked against) like any other lock.
//! - Every lock has a rank of its own, named in the table; there is no default rank.
//! - Other optimised builds compile all of it away.
//! - Waiting on a condition variable keeps the rank held: the thread is blocked, and
//!   takes the same lock back before it goes on.

/// A lock's place in the order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Rank {
    level: u16,
    name: &'static str,
    reentrant: bool,
}

/// `Gpu::lifecycle_lock`.
pub(crate) const LIFECYCLE: Rank = Rank::new(10, "gpu lifecycle");
/// The queue lock, held across submits and queued writes.
pub(crate) const QUEUE: Rank = Rank {
    reentrant: true,
    ..Rank::new(20, "gpu queue")
};
/// The submission gate's read side.
pub(crate) const SUBMIT_GATE: Rank = Rank {
    reentrant: true,
    ..Rank::new(25, "gpu submit gate")
};
/// The upload ring's receiver of returned staging buffers, taken before the ring.
pub(crate) const STAGING_RETURNS: Rank = Rank::new(28, "staging returns");
/// Staging rings and pools.
pub(crate) const STAGING: Rank = Rank::new(30, "staging ring");
/// The tiers' state.
pub(crate) const TIER: Rank = Rank::new(40, "tier state");
/// The arena's state.
pub(crate) const ARENA: Rank = Rank::new(50, "arena state");
/// The work-done tracker's epoch lock: held while an epoch's callback is filed.
pub(crate) const WORK_DONE: Rank = Rank::new(60, "work-done tracker");
/// A device's polling thread, started on first use (`gpu/poller.rs`): held while the
/// thread is started, which files a loss hook.
pub(crate) const LAZY_POLLER: Rank = Rank::new(85, "lazy poller");

// Leaves: nothing else of ours is taken under these (level 90; two of them are never
// held at once, which the checks confirm).
/// A device set's idle links (`devices/mod.rs`).
#[cfg(native)]
pub(crate) const DEVICE_LINKS: Rank = Rank::new(90, "device links");
/// A device set's idle host rows for all-reduces (`devices/host_rows.rs`).
#[cfg(native)]
pub(crate) const DEVICE_ROWS: Rank = Rank::new(90, "device all-reduce rows");
/// The kernels' bind-group cache (`kernels/mod.rs`).
pub(crate) const KERNEL_BINDINGS: Rank = Rank::new(90, "kernel bind groups");
/// The scans' look-back state (`kernels/scan.rs`).
pub(crate) const SCAN_STATE: Rank = Rank::new(90, "scan state");
/// The split product's scratch allocation (`kernels/matmul.rs`).
pub(crate) const SPLIT_SCRATCH: Rank = Rank::new(90, "split-k scratch");
/// The arena's pressure hook to its tiers (`arena/relief.rs`).
pub(crate) const ARENA_RELIEF: Rank = Rank::new(90, "arena relief hook");
/// A live budget's readings (`arena/live_budget.rs`).
pub(crate) const LIVE_BUDGET: Rank = Rank::new(90, "live budget");
/// Allocation latencies waiting for the metrics recorder (`arena/metrics.rs`).
#[cfg(feature = "metrics")]
pub(crate) const LATENCY_SAMPLES: Rank = Rank::new(90, "latency samples");
/// Futures waiting for an epoch (`gpu/work_done.rs`).
pub(crate) const EPOCH_WAKERS: Rank = Rank::new(90, "epoch wakers");
/// The work-done tracker's callbacks waiting for their epochs (`gpu/work_done.rs`): taken
/// under the tracker's epoch lock to file one, and alone where an epoch completes.
pub(crate) const EPOCH_THENS: Rank = Rank::new(90, "epoch callbacks");
/// A replacement reader of the driver's memory budget (`gpu/driver_memory.rs`).
pub(crate) const DRIVER_MEMORY_READER: Rank = Rank::new(90, "driver memory reader");
/// Profiled submissions whose timestamps are on their way (`gpu/profile.rs`).
pub(crate) const PROFILE_PENDING: Rank = Rank::new(90, "profile pending");
/// The ring of GPU spans (`gpu/profile.rs`).
pub(crate) const PROFILE_SPANS: Rank = Rank::new(90, "profile spans");
/// `Gpu::time`'s query set and buffers (`gpu/timer.rs`).
pub(crate) const TIMER_SLOTS: Rank = Rank::new(90, "timer slots");
/// Compiled shader modules (`shaders/pipelines.rs`).
pub(crate) const SHADER_MODULES: Rank = Rank::new(90, "shader modules");
/// Compute pipelines (`shaders/pipelines.rs`).
pub(crate) const PIPELINES: Rank = Rank::new(90, "pipelines");
/// The polling thread's count of pending transfers (`gpu/poller.rs`): taken inside
/// callbacks (a transfer's completion) and by a loss hook.
pub(crate) const POLLER_PENDING: Rank = Rank::new(90, "poller pending");
/// A virtual texture's queue of tiles to load (`vt/loader.rs`).
pub(crate) const VT_LOAD_QUEUE: Rank = Rank::new(90, "vt load queue");
/// The arena and device the tiers live on (`tier/mod.rs`), read for a clone; replaced
/// when the runtime recovers.
pub(crate) const TIER_DEVICE: Rank = Rank::new(90, "tier device");
/// The hooks a recorded loss runs (`gpu/lost.rs`), taken to file or take them; they run
/// after it is released.
pub(crate) const LOST_HOOKS: Rank = Rank::new(91, "loss hooks");
/// Why the device was lost: read by every `DeviceLost` error, whatever the caller holds.
pub(crate) const LOST_REASON: Rank = Rank::new(92, "loss reason");
/// The wakers of futures a loss resolves (`gpu/lost.rs`).
pub(crate) const LOST_WAKERS: Rank = Rank::new(93, "loss wakers");
/// The list of live devices (`gpu/registry.rs`): taken to file one or to list them, with
/// at most the lifecycle lock held.
pub(crate) const GPU_REGISTRY: Rank = Rank::new(94, "gpu registry");
/// The reaper's channel (`gpu/lifecycle.rs`): taken to send it the last handle of a
/// device, wherever that drops, with whatever held.
#[cfg(native)]
pub(crate) const REAPER: Rank = Rank::new(95, "gpu reaper");
/// The device-loss probe (`gpu/lost.rs`): taken at the end of every call that records
/// GPU work, whatever that call holds (a cache being filled, say); nothing of ours is
/// taken under it.
pub(crate) const LOST_PROBE: Rank = Rank::new(96, "loss probe");
/// The device's book of accounts (`gpu/accounts.rs`): taken to open an account or copy
/// the book out, anywhere (a resource may be charged inside any call); nothing is taken
/// under it and nothing foreign runs under it.
pub(crate) const ACCOUNTS: Rank = Rank::new(97, "device accounts");
/// The growth watch of the device ledger (`ledger/growth.rs`): taken by `end_frame` only,
/// before the book.
pub(crate) const LEDGER_GROWTH: Rank = Rank::new(90, "ledger growth watch");

impl Rank {
    const fn new(level: u16, name: &'static str) -> Rank {
        Rank {
            level,
            name,
            reentrant: false,
        }
    }
}

#[cfg(validate_locks)]
mod check {
    use super::Rank;
    use std::cell::RefCell;

    thread_local! {
        /// The ranks this thread holds, in the order taken.
        static HELD: RefCell<Vec<Rank>> = const { RefCell::new(Vec::new()) };
        /// Set while a unit test of a raw lock nests locks of one rank on purpose.
        pub(super) static SUSPENDED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }

    pub(super) fn before(rank: Rank) {
        if SUSPENDED.with(|s| s.get()) {
            return;
        }
        HELD.with(|held| {
            let held = held.borrow();
            if let Some(top) = held.iter().max_by_key(|r| r.level) {
                let again = rank.reentrant && *top == rank;
                if top.level >= rank.level && !again {
                    panic!(
                        "lock order: taking the {} lock (rank {}) while holding the {} lock \
                         (rank {}); locks are taken in rising rank (src/sync/rank.rs)",
                        rank.name, rank.level, top.name, top.level
                    );
                }
            }
        });
    }

    pub(super) fn taken(rank: Rank) {
        HELD.with(|held| held.borrow_mut().push(rank));
    }

    pub(super) fn held_any() -> bool {
        HELD.with(|held| !held.borrow().is_empty())
    }

    pub(super) fn released(rank: Rank) {
        HELD.with(|held| {
            let mut held = held.borrow_mut();
            if let Some(i) = held.iter().rposition(|r| *r == rank) {
                held.remove(i);
            }
        });
    }
}

/// Checks that `rank` may be taken now (debug builds; panics if not).
#[inline(always)]
pub(crate) fn before(rank: Rank) {
    #[cfg(validate_locks)]
    check::before(rank);
    #[cfg(not(validate_locks))]
    let _ = rank;
}

/// Records that this thread now holds `rank` (after a lock or a successful try).
#[inline(always)]
pub(crate) fn taken(rank: Rank) {
    #[cfg(validate_locks)]
    check::taken(rank);
    #[cfg(not(validate_locks))]
    let _ = rank;
}

/// Records that this thread released one hold of `rank`.
#[inline(always)]
pub(crate) fn released(rank: Rank) {
    #[cfg(validate_locks)]
    check::released(rank);
    #[cfg(not(validate_locks))]
    let _ = rank;
}

/// Whether this thread holds any ranked lock; false where ranks are not tracked
/// (optimised builds without `validate_locks`).
#[inline]
pub(crate) fn held_any() -> bool {
    #[cfg(validate_locks)]
    return check::held_any();
    #[cfg(not(validate_locks))]
    false
}

/// Runs `f` with this thread's rank checks off: for unit tests of the raw locks, which
/// nest two locks of one rank on purpose.
#[cfg(all(test, validate_locks))]
pub(crate) fn unchecked<R>(f: impl FnOnce() -> R) -> R {
    check::SUSPENDED.with(|s| s.set(true));
    let out = f();
    check::SUSPENDED.with(|s| s.set(false));
    out
}

/// Builds that check no ranks: `f` runs as it is (so that the unit tests build and run
/// in release too, as the GPU machine's do).
#[cfg(all(test, not(validate_locks)))]
pub(crate) fn unchecked<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// A hold of a rank, released on drop: put beside a guard of a lock that has no rank
/// check of its own.
pub(crate) struct Held(Rank);

impl Held {
    /// Checks and records `rank`; call right before taking the lock.
    #[inline(always)]
    pub(crate) fn take(rank: Rank) -> Held {
        before(rank);
        taken(rank);
        Held(rank)
    }

    /// Records `rank` without the check: for a lock taken by a try, which never waits.
    #[inline(always)]
    pub(crate) fn tried(rank: Rank) -> Held {
        taken(rank);
        Held(rank)
    }
}

impl Drop for Held {
    #[inline(always)]
    fn drop(&mut self) {
        released(self.0);
    }
}

/// A `parking_lot` mutex with a rank: its guard holds the rank as long as the lock.
pub(crate) struct Mutex<T> {
    rank: Rank,
    inner: parking_lot::Mutex<T>,
}

/// The guard of a ranked [`Mutex`]; `guard` is parking_lot's, for condition variables.
pub(crate) struct MutexGuard<'a, T> {
    // Declared first: the lock is released before the rank.
    pub(crate) guard: parking_lot::MutexGuard<'a, T>,
    _held: Held,
}

impl<T> Mutex<T> {
    pub(crate) const fn new(rank: Rank, value: T) -> Mutex<T> {
        Mutex {
            rank,
            inner: parking_lot::Mutex::new(value),
        }
    }

    /// Takes the lock, checking its rank first (debug builds).
    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        let held = Held::take(self.rank);
        MutexGuard {
            guard: self.inner.lock(),
            _held: held,
        }
    }
}

impl<T> std::ops::Deref for MutexGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.guard
    }
}

impl<T> std::ops::DerefMut for MutexGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.guard
    }
}

#[cfg(all(test, validate_locks))]
mod tests {
    use super::*;

    #[test]
    fn rising_ranks_pass_and_a_falling_one_panics() {
        let queue = Mutex::new(QUEUE, ());
        let arena = Mutex::new(ARENA, ());
        {
            let _q = queue.lock();
            let _q_again = Held::take(QUEUE); // re-entrant
            let _a = arena.lock();
        }
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _a = arena.lock();
            let _q = queue.lock();
        }));
        let message = caught.expect_err("the queue lock under the arena's must panic");
        let text = message
            .downcast_ref::<String>()
            .cloned()
            .unwrap_or_default();
        assert!(
            text.contains("gpu queue") && text.contains("arena state"),
            "{text}"
        );
        // The unwinding released both: the rising order works again.
        let _q = queue.lock();
        let _a = arena.lock();
    }

    #[test]
    fn a_try_is_not_checked_but_is_held() {
        let arena = Mutex::new(ARENA, ());
        let _a = arena.lock();
        let _t = Held::tried(TIER);
        let other = Mutex::new(ARENA, ());
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let _other = other.lock();
        }));
        assert!(
            caught.is_err(),
            "a second arena-rank lock under the first must panic"
        );
    }
}
