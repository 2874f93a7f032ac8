//! The arena's state lock: a mutex whose uncontended release is a load and a store.
//!
//! # Why
//! An alloc+free pair through the arena takes its lock twice. parking_lot's mutex, like
//! std's, releases with a compare-and-swap, so a pair pays four atomic read-modify-writes,
//! and on the H100 host one lock+unlock of it took 18.3 ns against 8.9 on the dev VM (a
//! microbenchmark; BENCHMARKS.md, arena section). This lock takes with one
//! compare-and-swap and, when nobody sleeps on it, releases with a plain store: two
//! read-modify-writes per pair.
//!
//! # How it works
//! One byte holds `LOCKED`, and `PARKED` while a thread may sleep waiting for it.
//! - **Lock**: a compare-and-swap that sets `LOCKED` from a state without it. On failure
//!   the thread spins briefly ([`parking_lot_core::SpinWait`]), then sets `PARKED` and
//!   parks on the lock's address ([`parking_lot_core::park`]) until woken or for
//!   [`PARK_TIMEOUT`], and tries again.
//! - **Unlock**: reads the byte; with only `LOCKED` set it stores 0. With `PARKED` set it
//!   swaps in 0 and wakes every parked thread; those that lose the race park again.
//!
//! # What it promises
//! - **Mutual exclusion.** The lock is taken only by a compare-and-swap from a state
//!   without `LOCKED`, and only its holder clears `LOCKED`. The release store (`Release`)
//!   pairs with the next holder's compare-and-swap (`Acquire`).
//! - **No thread waits forever**, but a wake-up can be late. The release's read and its
//!   store are two steps: a waiter that sets `PARKED` between them, and falls asleep before
//!   the store, is not woken by that release. It wakes after [`PARK_TIMEOUT`] at the latest
//!   (or at the next release that sees `PARKED`) and takes the lock then. The window is a
//!   few instructions of the holder, while falling asleep takes the waiter far longer, so
//!   this needs the holder descheduled inside it.
//! - Guards cannot be sent to another thread, as with parking_lot's mutex.

use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

const LOCKED: u8 = 1;
const PARKED: u8 = 2;

/// How long a parked waiter sleeps before it looks at the lock again, woken or not: the
/// most a lost wake-up (see the module docs) can cost it. The arena's lock is held for
/// microseconds on its hot paths, so waiters rarely get this far.
const PARK_TIMEOUT: Duration = Duration::from_micros(200);

/// The raw lock behind [`Mutex`].
pub(crate) struct RawLock {
    state: AtomicU8,
}

/// A mutex over the arena's state, used as `parking_lot::Mutex` is.
pub(crate) type Mutex<T> = lock_api::Mutex<RawLock, T>;
/// The guard of [`Mutex`].
pub(crate) type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawLock, T>;

// SAFETY: `lock` and `try_lock` return only once `LOCKED` was set by this thread's
// compare-and-swap from a state without it, and only `unlock`, which the caller promises to
// call only while holding the lock, clears it; acquire and release orderings order the
// critical sections (see the module docs).
unsafe impl lock_api::RawMutex for RawLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: RawLock = RawLock {
        state: AtomicU8::new(0),
    };

    type GuardMarker = lock_api::GuardNoSend;

    #[inline]
    fn lock(&self) {
        if self
            .state
            .compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
    }

    #[inline]
    fn try_lock(&self) -> bool {
        let mut state = self.state.load(Ordering::Relaxed);
        while state & LOCKED == 0 {
            match self.state.compare_exchange_weak(
                state,
                state | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(now) => state = now,
            }
        }
        false
    }

    #[inline]
    unsafe fn unlock(&self) {
        if self.state.load(Ordering::Relaxed) == LOCKED {
            self.state.store(0, Ordering::Release);
        } else {
            self.unlock_slow();
        }
    }

    #[inline]
    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
    }
}

impl RawLock {
    /// The address threads park on.
    fn key(&self) -> usize {
        self as *const RawLock as usize
    }

    #[cold]
    fn lock_slow(&self) {
        let mut spin = parking_lot_core::SpinWait::new();
        let mut state = self.state.load(Ordering::Relaxed);
        loop {
            if state & LOCKED == 0 {
                match self.state.compare_exchange_weak(
                    state,
                    state | LOCKED,
                    Ordering::Acquire,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return,
                    Err(now) => {
                        state = now;
                        continue;
                    }
                }
            }
            if state & PARKED == 0 {
                if spin.spin() {
                    state = self.state.load(Ordering::Relaxed);
                    continue;
                }
                if let Err(now) = self.state.compare_exchange_weak(
                    state,
                    state | PARKED,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    state = now;
                    continue;
                }
            }
            // SAFETY: the key is this lock's address, which only this lock parks on; the
            // closures neither panic nor call into parking_lot_core.
            unsafe {
                parking_lot_core::park(
                    self.key(),
                    || self.state.load(Ordering::Relaxed) == LOCKED | PARKED,
                    || {},
                    |_, _| {},
                    parking_lot_core::DEFAULT_PARK_TOKEN,
                    Some(Instant::now() + PARK_TIMEOUT),
                );
            }
            spin.reset();
            state = self.state.load(Ordering::Relaxed);
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        self.state.swap(0, Ordering::Release);
        // SAFETY: the key is this lock's address (see `lock_slow`).
        unsafe {
            parking_lot_core::unpark_all(self.key(), parking_lot_core::DEFAULT_UNPARK_TOKEN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Threads that add to a plain counter under the lock lose no update, through spins,
    /// parks and the plain-store release.
    #[test]
    fn increments_under_contention_are_not_lost() {
        let counter = Arc::new(Mutex::new(0u64));
        let threads = 8;
        let per_thread = 20_000;
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let counter = counter.clone();
                std::thread::spawn(move || {
                    for i in 0..per_thread {
                        let mut c = counter.lock();
                        // A read and a write apart, so that an overlap would lose an update.
                        let v = *c;
                        if (i + t) % 512 == 0 {
                            // Held long enough for others to park.
                            std::thread::sleep(Duration::from_micros(50));
                        }
                        *c = v + 1;
                    }
                })
            })
            .collect();
        for h in handles {
            h.join()
                .unwrap_or_else(|_| panic!("a locking thread panicked"));
        }
        assert_eq!(*counter.lock(), threads * per_thread);
    }

    /// `try_lock` fails while the lock is held (parked waiters or not) and succeeds after.
    #[test]
    fn try_lock_sees_the_holder() {
        let m = Arc::new(Mutex::new(()));
        let held = m.lock();
        assert!(m.try_lock().is_none());
        let waiter = {
            let m = m.clone();
            std::thread::spawn(move || drop(m.lock()))
        };
        // Long enough for the waiter to spin out and park.
        std::thread::sleep(Duration::from_millis(20));
        assert!(m.try_lock().is_none());
        drop(held);
        waiter
            .join()
            .unwrap_or_else(|_| panic!("the waiter panicked"));
        assert!(m.try_lock().is_some());
    }

    /// A waiter parked behind a long hold (many of its timeouts) takes the lock only after
    /// the release, and gets it.
    #[test]
    fn a_parked_waiter_takes_the_lock_after_a_long_hold() {
        let m = Arc::new(Mutex::new(0u32));
        let held = m.lock();
        let waiter = {
            let m = m.clone();
            std::thread::spawn(move || {
                let mut g = m.lock();
                *g += 1;
                Instant::now()
            })
        };
        std::thread::sleep(Duration::from_millis(30));
        let released = Instant::now();
        drop(held);
        let took = waiter
            .join()
            .unwrap_or_else(|_| panic!("the waiter panicked"));
        assert_eq!(*m.lock(), 1);
        assert!(took >= released, "the waiter took a held lock");
    }
}
