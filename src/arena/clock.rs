//! The coarse clock that stamps allocation records ([`now`]), read in one atomic load
//! while the program allocates.
//!
//! # How it works
//! Every record keeps when its allocation was made, for the age in leak reports. Reading
//! the coarse monotonic clock (the vDSO) costs 3 ns on the dev VM but 9-10 ns on the H100
//! host, a sixth of an arena alloc+free pair there. So while stamps are asked for, one
//! thread of the process (`vramkit-clock`) reads the clock every [`TICK`] and publishes
//! it through `coarsetime`'s cached instant, and a stamp is that cached value. A thread
//! that saw no stamp asked for during [`IDLE_TICKS`] ticks in a row parks; the next stamp
//! reads the clock itself and wakes it (a few microseconds, once per idle spell). Where
//! no thread can be started, every stamp reads the clock.
//!
//! The memory history has a clock thread of its own (`history/clock.rs`): it ticks every
//! 20 us for the timeline's resolution, and only while a history records. Records need
//! the age in leak reports, to milliseconds, whenever the program allocates.
//!
//! # What it promises
//! - A stamp is never later than the clock at the time it is taken, and while the thread
//!   ticks, earlier by at most one tick plus however long the OS delays the thread: the
//!   coarse clock's own resolution is one to four milliseconds.
//! - A stamp taken after the thread parked is read from the clock, never the value it
//!   published last.
//! - The thread holds no lock and runs no callback: it only reads the clock and parks.

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::Duration;

/// How often the thread publishes the clock.
pub(crate) const TICK: Duration = Duration::from_millis(2);

/// Ticks without a stamp before the thread parks: parking after one would make a program
/// that allocates every few milliseconds wake it every time.
pub(crate) const IDLE_TICKS: u32 = 8;

/// No thread yet.
const NONE: u8 = 0;
/// The thread ticks: the cached instant is at most a tick old.
const TICKING: u8 = 1;
/// The thread parks (or is about to): the cached instant may be old.
const PARKED: u8 = 2;
/// No thread could be started: every stamp reads the clock.
const UNAVAILABLE: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(NONE);
/// A stamp was asked for since the thread last looked.
static ASKED: AtomicBool = AtomicBool::new(false);
static THREAD: std::sync::OnceLock<std::thread::Thread> = std::sync::OnceLock::new();

/// The time now, at the coarse clock's resolution (see the module docs).
#[inline(always)]
pub(crate) fn now() -> coarsetime::Instant {
    if STATE.load(Ordering::Acquire) == TICKING {
        // A load first: the flag is written once per tick, not on every stamp.
        if !ASKED.load(Ordering::Relaxed) {
            ASKED.store(true, Ordering::Relaxed);
        }
        return coarsetime::Instant::recent();
    }
    now_and_wake()
}

/// [`now`] while the thread is not ticking: reads the clock, publishes it, and starts or
/// wakes the thread.
#[cold]
#[inline(never)]
fn now_and_wake() -> coarsetime::Instant {
    // Published before the thread is marked ticking, so that no stamp reads an older
    // cached value once it is.
    let now = coarsetime::Instant::now();
    ASKED.store(true, Ordering::Relaxed);
    match STATE.load(Ordering::Acquire) {
        NONE => start(),
        PARKED
            if STATE
                .compare_exchange(PARKED, TICKING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok() =>
        {
            if let Some(thread) = THREAD.get() {
                thread.unpark();
            }
        }
        _ => {}
    }
    now
}

/// Starts the thread, once; marks the clock unavailable if it cannot be started.
fn start() {
    if STATE
        .compare_exchange(NONE, TICKING, Ordering::AcqRel, Ordering::Acquire)
        .is_err()
    {
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("vramkit-clock".into())
        .spawn(tick);
    match spawned {
        Ok(_) => {}
        Err(e) => {
            log::debug!("vramkit: no clock thread ({e}); allocation stamps read the clock");
            STATE.store(UNAVAILABLE, Ordering::Release);
        }
    }
}

/// The thread: publishes the clock every tick while stamps are asked for, parks
/// otherwise.
fn tick() {
    // Set before the thread can first park, which a waker sees it did (`PARKED` is
    // released after this and acquired by the waker's exchange).
    let _ = THREAD.set(std::thread::current());
    let mut idle = 0;
    loop {
        std::thread::sleep(TICK);
        coarsetime::Instant::update();
        if ASKED.swap(false, Ordering::Relaxed) {
            idle = 0;
            continue;
        }
        idle += 1;
        if idle < IDLE_TICKS {
            continue;
        }
        // A stamp that still sees `TICKING` reads the value just published.
        STATE.store(PARKED, Ordering::Release);
        while STATE.load(Ordering::Acquire) == PARKED {
            // Until a stamp marks it ticking and unparks it; spurious wake-ups loop.
            std::thread::park();
        }
        idle = 0;
        coarsetime::Instant::update();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How far a stamp lies from the clock read right after it.
    fn lag() -> Duration {
        let stamp = now();
        let clock = coarsetime::Instant::now_without_cache_update();
        (clock - stamp).into()
    }

    /// Allowed lag: however long a loaded two-core test machine may delay the thread,
    /// plus the coarse clock's resolution.
    const SLACK: Duration = Duration::from_millis(250);

    #[test]
    fn stamps_follow_the_clock_while_ticking_and_after_parking() {
        // Ticking: stamps asked for continuously over several ticks.
        let until = std::time::Instant::now() + 10 * TICK;
        while std::time::Instant::now() < until {
            assert!(lag() <= SLACK, "ticking stamp {:?} behind", lag());
        }
        // Idle long enough for the thread to park, and for the value it published last
        // to be further behind than the slack: the next stamp must not be that value.
        std::thread::sleep(TICK * IDLE_TICKS + 2 * SLACK);
        let stamp = now();
        let clock = coarsetime::Instant::now_without_cache_update();
        let behind: Duration = (clock - stamp).into();
        assert!(
            behind <= SLACK,
            "a stamp after an idle spell is {behind:?} behind the clock"
        );
        // And it ticks again.
        std::thread::sleep(4 * TICK);
        assert!(lag() <= SLACK, "stamp after waking {:?} behind", lag());
    }

    #[test]
    fn stamps_never_run_ahead_of_the_clock() {
        for _ in 0..100_000 {
            let stamp = now();
            let clock = coarsetime::Instant::now_without_cache_update();
            assert!(stamp <= clock, "a stamp ahead of the clock");
        }
    }
}
