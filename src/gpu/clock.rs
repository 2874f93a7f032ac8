//! vramkit's one clock: the time stamped on allocation records ([`now`]) and on memory
//! history events ([`fine_now`]), read in one atomic load on the hot path.
//!
//! # How it works
//! Every allocation record keeps when it was made (for the age in leak reports), and a
//! recording memory history stamps every event. A clock read per allocation would cost
//! a noticeable share of an alloc+free pair on virtualised hosts (BENCHMARKS.md,
//! "Arena"), so one thread of the process (`vramkit-clock`) reads the monotonic clock
//! and publishes the time since the process's first stamp in an atomic, and a stamp is
//! that published value:
//! - **coarse** ticks every [`COARSE_TICK`] while stamps are asked for; a thread that saw
//!   no stamp asked for during [`IDLE_TICKS`] ticks in a row parks, and the next stamp
//!   reads the clock itself and wakes it (a few microseconds, once per idle spell);
//! - **fine** ticks every [`FINE_TICK`] while any memory history records (each holds a
//!   [`Fine`]), for the timeline's resolution; the thread does not park then.
//!
//! Where no thread can be started, every stamp reads the clock.
//!
//! # What it promises
//! - A stamp is never later than the clock at the time it is taken; while the thread
//!   ticks it is earlier by at most one tick plus however long the OS delays the thread.
//! - A stamp taken after the thread parked is read from the clock, never the value it
//!   published last; so is a fine stamp while no thread runs.
//! - Stamps never go down.
//! - The thread holds no lock and runs no callback: it reads the clock, publishes, sleeps.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Duration;
use web_time::Instant;

/// How often the thread publishes the clock while only allocation records ask.
pub(crate) const COARSE_TICK: Duration = Duration::from_millis(2);

/// How often it publishes while a memory history records.
pub(crate) const FINE_TICK: Duration = Duration::from_micros(20);

/// Coarse ticks without a stamp before the thread parks: parking after one would make a
/// program that allocates every few milliseconds wake it every time.
pub(crate) const IDLE_TICKS: u32 = 8;

/// No thread yet.
const NONE: u8 = 0;
/// The thread ticks: the published time is at most a tick old.
const TICKING: u8 = 1;
/// The thread parks (or is about to): the published time may be old.
const PARKED: u8 = 2;
/// No thread could be started: every stamp reads the clock.
const UNAVAILABLE: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(NONE);
/// A stamp was asked for since the thread last looked.
static ASKED: AtomicBool = AtomicBool::new(false);
/// Nanoseconds since [`origin`], as the thread last published them.
static PUBLISHED: AtomicU64 = AtomicU64::new(0);
/// Memory histories recording ([`Fine`] guards alive).
static FINE: AtomicUsize = AtomicUsize::new(0);
static THREAD: OnceLock<std::thread::Thread> = OnceLock::new();

/// The instant stamps count from: the first time the clock was asked.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// Reads the clock and publishes it (never lowering the published value).
fn read_and_publish() -> u64 {
    let now = origin().elapsed().as_nanos() as u64;
    PUBLISHED.fetch_max(now, Ordering::AcqRel).max(now)
}

/// A time on vramkit's clock: nanoseconds since the process's first stamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Stamp(u64);

impl Stamp {
    /// How long ago this stamp was taken, read from the clock itself.
    pub fn elapsed(self) -> Duration {
        Duration::from_nanos(exact_now().0.saturating_sub(self.0))
    }

    /// Nanoseconds since the process's first stamp.
    pub fn nanos(self) -> u64 {
        self.0
    }
}

/// The time now read from the clock itself, not the published tick: for deadlines that
/// must not pass early (a stamp may be a tick behind).
pub(crate) fn exact_now() -> Stamp {
    Stamp(origin().elapsed().as_nanos() as u64)
}

/// The time now, at the coarse tick's resolution (see the module docs).
#[inline(always)]
pub(crate) fn now() -> Stamp {
    if STATE.load(Ordering::Acquire) == TICKING {
        // A load first: the flag is written once per tick, not on every stamp.
        if !ASKED.load(Ordering::Relaxed) {
            ASKED.store(true, Ordering::Relaxed);
        }
        return Stamp(PUBLISHED.load(Ordering::Acquire));
    }
    now_and_wake()
}

/// The time now at the fine tick's resolution, for a holder of a [`Fine`].
#[inline(always)]
pub(crate) fn fine_now() -> Stamp {
    if STATE.load(Ordering::Acquire) == TICKING {
        return Stamp(PUBLISHED.load(Ordering::Acquire));
    }
    now_and_wake()
}

/// [`now`] while the thread is not ticking: reads the clock, publishes it, and starts or
/// wakes the thread.
#[cold]
#[inline(never)]
fn now_and_wake() -> Stamp {
    // Published before the thread is marked ticking, so that no stamp reads an older
    // value once it is.
    let now = read_and_publish();
    ASKED.store(true, Ordering::Relaxed);
    wake();
    Stamp(now)
}

/// Starts the thread, or wakes it if it parked.
fn wake() {
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
}

/// Keeps the clock ticking every [`FINE_TICK`] while alive: what a recording memory
/// history holds.
pub(crate) struct Fine(());

impl Fine {
    pub fn new() -> Fine {
        FINE.fetch_add(1, Ordering::AcqRel);
        read_and_publish();
        wake();
        // A coarse sleep in progress ends now (`park_timeout` in the thread).
        if let Some(thread) = THREAD.get() {
            thread.unpark();
        }
        Fine(())
    }
}

impl Drop for Fine {
    fn drop(&mut self) {
        FINE.fetch_sub(1, Ordering::AcqRel);
    }
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
    if let Err(e) = spawned {
        log::debug!("vramkit: no clock thread ({e}); stamps read the clock");
        STATE.store(UNAVAILABLE, Ordering::Release);
    }
}

/// The thread: publishes the clock every tick while stamps are asked for or a history
/// records, parks otherwise.
fn tick() {
    // Set before the thread can first park, which a waker sees it did (`PARKED` is
    // released after this and acquired by the waker's exchange).
    let _ = THREAD.set(std::thread::current());
    let mut idle = 0;
    loop {
        let fine = FINE.load(Ordering::Acquire) > 0;
        // `park_timeout`, not `sleep`: a history starting to record ends a coarse tick.
        std::thread::park_timeout(if fine { FINE_TICK } else { COARSE_TICK });
        read_and_publish();
        if fine || ASKED.swap(false, Ordering::Relaxed) {
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
        read_and_publish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How far a stamp lies behind the clock read right after it.
    fn lag() -> Duration {
        now().elapsed()
    }

    /// Allowed lag: however long a loaded two-core test machine may delay the thread.
    const SLACK: Duration = Duration::from_millis(250);

    #[test]
    fn stamps_follow_the_clock_while_ticking_and_after_parking() {
        let until = Instant::now() + 10 * COARSE_TICK;
        while Instant::now() < until {
            assert!(lag() <= SLACK, "ticking stamp {:?} behind", lag());
        }
        // Idle long enough for the thread to park, and for the value it published last
        // to be further behind than the slack: the next stamp must not be that value.
        std::thread::sleep(COARSE_TICK * IDLE_TICKS + 2 * SLACK);
        let behind = lag();
        assert!(
            behind <= SLACK,
            "a stamp after an idle spell is {behind:?} behind the clock"
        );
        std::thread::sleep(4 * COARSE_TICK);
        assert!(lag() <= SLACK, "stamp after waking {:?} behind", lag());
    }

    #[test]
    fn stamps_never_run_ahead_of_the_clock_nor_go_down() {
        let _fine = Fine::new();
        let mut last = Stamp(0);
        for i in 0..100_000 {
            let stamp = if i % 2 == 0 { now() } else { fine_now() };
            let clock = origin().elapsed().as_nanos() as u64;
            assert!(stamp.0 <= clock, "a stamp ahead of the clock");
            assert!(stamp >= last, "a stamp went down");
            last = stamp;
        }
    }

    #[test]
    fn fine_stamps_advance_in_fine_ticks_while_a_history_records() {
        let _fine = Fine::new();
        let first = fine_now();
        let until = Instant::now() + Duration::from_millis(50);
        let mut distinct = 0;
        let mut last = first;
        while Instant::now() < until {
            let s = fine_now();
            if s != last {
                distinct += 1;
                last = s;
            }
        }
        // Coarse ticks would give at most 25 in 50 ms; fine ones many more, unless the
        // machine starves the thread (then at least the coarse rate).
        assert!(distinct >= 10, "{distinct} distinct fine stamps in 50 ms");
    }
}
