//! Unit tests of the arena's lock (`lock.rs`): exclusion, the biased owner's fast path,
//! revocation, and try-locks, under threads.

use super::*;
use std::sync::Arc;
use web_time::Instant;

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

/// Locks `m` `times` times on this thread, as a loop of allocations does.
fn take_turns(m: &Mutex<u64>, times: u64) {
    for _ in 0..times {
        *m.lock() += 1;
    }
}

/// A thread that takes the lock over and over gets the bias and then holds the lock
/// without setting the lock word; another thread revokes it and both keep every update.
#[test]
fn acquisitions_bias_the_lock_and_another_thread_revokes_it() {
    let m = Arc::new(Mutex::new(0u64));
    take_turns(&m, u64::from(FIRST_BIAS_AFTER) + 1);
    // SAFETY: only reads the raw lock's counters and state.
    let raw = unsafe { m.raw() };
    if !heavy_barrier_available() {
        assert_eq!(raw.bias_counts(), (0, 0));
        return;
    }
    assert_eq!(
        raw.bias_counts(),
        (1, 0),
        "{FIRST_BIAS_AFTER} acquisitions did not bias"
    );
    {
        let _held = m.lock();
        assert_eq!(
            raw.state.load(Ordering::Relaxed),
            0,
            "the owner set the lock word"
        );
        assert!(m.is_locked());
    }
    let other = {
        let m = m.clone();
        std::thread::spawn(move || take_turns(&m, 10))
    };
    other
        .join()
        .unwrap_or_else(|_| panic!("the other thread panicked"));
    assert_eq!(raw.bias_counts(), (1, 1));
    assert_eq!(raw.bias_after.load(Ordering::Relaxed), 2 * FIRST_BIAS_AFTER);
    // The owner takes the lock word again, and gets the bias back after twice as many
    // acquisitions.
    take_turns(&m, u64::from(2 * FIRST_BIAS_AFTER) + 1);
    assert_eq!(raw.bias_counts(), (2, 1));
    assert_eq!(*m.lock(), u64::from(3 * FIRST_BIAS_AFTER) + 12);
}

/// A biased owner in long streaks and threads that come in now and then (locking or
/// trying) never hold the lock at once and lose no update, through biases,
/// revocations, spins and parks.
#[test]
fn a_biased_owner_and_revoking_threads_exclude_each_other() {
    let m = Arc::new(Mutex::new(0u64));
    let occupied = Arc::new(AtomicBool::new(false));
    // Visitors mix `lock` with `try_lock` (every third visit tries until it gets in).
    let critical = |m: &Mutex<u64>, occupied: &AtomicBool, i: u64, tries: bool| {
        let mut c = if tries && i.is_multiple_of(3) {
            loop {
                if let Some(c) = m.try_lock() {
                    break c;
                }
                std::thread::yield_now();
            }
        } else {
            m.lock()
        };
        assert!(
            !occupied.swap(true, Ordering::Relaxed),
            "two threads inside"
        );
        let v = *c;
        if i.is_multiple_of(97) {
            std::hint::spin_loop();
            std::thread::yield_now();
        }
        *c = v + 1;
        occupied.store(false, Ordering::Relaxed);
    };
    let visitors = 3;
    let visits = 300;
    let handles: Vec<_> = (0..visitors)
        .map(|_| {
            let (m, occupied) = (m.clone(), occupied.clone());
            std::thread::spawn(move || {
                for i in 0..visits {
                    critical(&m, &occupied, i, true);
                    std::thread::sleep(Duration::from_micros(100));
                }
            })
        })
        .collect();
    let owner_turns = 400_000;
    for i in 0..owner_turns {
        critical(&m, &occupied, i, false);
    }
    for h in handles {
        h.join()
            .unwrap_or_else(|_| panic!("a visiting thread panicked"));
    }
    assert_eq!(*m.lock(), owner_turns + visitors * visits);
    if heavy_barrier_available() {
        // SAFETY: only reads the raw lock's counters.
        let (biases, revocations) = unsafe { m.raw() }.bias_counts();
        assert!(
            biases >= 2 && revocations >= 1,
            "{biases} biases, {revocations} revocations"
        );
    }
}

/// `try_lock` from another thread fails while the biased owner holds the lock and leaves
/// the bias standing: a `lock` from a third thread after it still waits for the owner
/// to leave (a try that revoked and gave up would let that `lock` in beside the
/// owner). With the owner outside, a try revokes the bias and gets the lock
/// (a try that failed on every biased lock left threads trying forever once the owner
/// went idle). The owner's own `try_lock` inside fails.
#[test]
fn try_lock_revokes_a_bias_only_while_the_owner_is_outside() {
    let m = Arc::new(Mutex::new(0u64));
    take_turns(&m, u64::from(FIRST_BIAS_AFTER) + 1);
    let biased = heavy_barrier_available();
    // SAFETY: only reads the raw lock's counters.
    let raw = unsafe { m.raw() };
    let held = m.lock();
    assert!(m.try_lock().is_none(), "the owner took its own lock twice");
    let try_from_another = |m: &Arc<Mutex<u64>>| {
        let m = m.clone();
        std::thread::spawn(move || m.try_lock().map(|mut c| *c += 1).is_some())
            .join()
            .unwrap_or_else(|_| panic!("the trying thread panicked"))
    };
    assert!(!try_from_another(&m), "another thread took a held lock");
    if biased {
        assert_eq!(raw.bias_counts(), (1, 0), "a failed try revoked the bias");
    }
    let waiter = {
        let m = m.clone();
        std::thread::spawn(move || *m.lock() += 1)
    };
    std::thread::sleep(Duration::from_millis(20));
    assert!(!waiter.is_finished(), "a lock went in beside the owner");
    drop(held);
    waiter
        .join()
        .unwrap_or_else(|_| panic!("the waiting thread panicked"));
    if biased {
        // Only the waiter's `lock` revoked.
        assert_eq!(raw.bias_counts(), (1, 1));
    }
    // Unbiased now, so a try from another thread gets it.
    assert!(try_from_another(&m));
    assert_eq!(*m.lock(), u64::from(FIRST_BIAS_AFTER) + 3);
    // Biased again, with the owner outside: a try from another thread revokes and
    // gets in.
    take_turns(&m, u64::from(2 * FIRST_BIAS_AFTER) + 1);
    if biased {
        assert_eq!(raw.bias_counts(), (2, 1));
    }
    assert!(try_from_another(&m), "a try failed on a free lock");
    if biased {
        assert_eq!(raw.bias_counts(), (2, 2));
    }
    assert_eq!(*m.lock(), u64::from(3 * FIRST_BIAS_AFTER) + 5);
}

/// The state a `try_lock` that gave a bias back can leave its owner in: the owner holds
/// the lock word while the bias still names it. Its own `try_lock` inside (a callback in
/// its critical section) must fail, so taking the word clears the bias; another thread
/// then waits, and the lock is biased again later.
#[test]
fn an_owner_that_takes_the_word_over_its_own_bias_clears_it() {
    if !heavy_barrier_available() {
        return;
    }
    let m = Arc::new(Mutex::new(0u64));
    take_turns(&m, u64::from(FIRST_BIAS_AFTER) + 1);
    // SAFETY: reads and drives the raw lock as `lock` does, on this thread.
    let raw = unsafe { m.raw() };
    assert_eq!(raw.bias_counts(), (1, 0));
    assert_ne!(raw.bias.load(Ordering::Relaxed), 0);
    // The owner takes the word, as after `enter_biased` found the bias gone.
    assert!(raw
        .state
        .compare_exchange(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
        .is_ok());
    raw.took_lock_word();
    assert_eq!(
        raw.bias.load(Ordering::Relaxed),
        0,
        "the owner kept its bias"
    );
    assert!(
        m.try_lock().is_none(),
        "the holder entered again through its bias"
    );
    let other = {
        let m = m.clone();
        std::thread::spawn(move || *m.lock() += 1)
    };
    std::thread::sleep(Duration::from_millis(20));
    assert!(
        !other.is_finished(),
        "another thread went in beside the holder"
    );
    // SAFETY: this thread holds the lock word, taken above.
    unsafe { lock_api::RawMutex::unlock(raw) };
    other
        .join()
        .unwrap_or_else(|_| panic!("the other thread panicked"));
    // Nothing was revoked (the bias was this thread's), and it comes back.
    assert_eq!(raw.bias_counts(), (1, 0));
    take_turns(&m, u64::from(FIRST_BIAS_AFTER) + 1);
    assert_eq!(raw.bias_counts(), (2, 0));
    assert_eq!(*m.lock(), 2 * u64::from(FIRST_BIAS_AFTER) + 3);
}

/// One thread holds two locks biased to it at once, and another thread waits for each.
#[test]
fn two_locks_biased_to_one_thread_nest() {
    // Two locks of the arena's rank nested on purpose: the rank check is off here.
    crate::sync::rank::unchecked(two_locks_nest);
}

fn two_locks_nest() {
    let a = Arc::new(Mutex::new(0u64));
    let b = Arc::new(Mutex::new(0u64));
    for _ in 0..=FIRST_BIAS_AFTER {
        let mut ga = a.lock();
        let mut gb = b.lock();
        *ga += 1;
        *gb += 1;
    }
    let ga = a.lock();
    let gb = b.lock();
    let other = {
        let (a, b) = (a.clone(), b.clone());
        std::thread::spawn(move || {
            crate::sync::rank::unchecked(|| {
                *b.lock() += 1;
                *a.lock() += 1;
            })
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    assert!(!other.is_finished(), "the other thread took a held lock");
    drop(gb);
    drop(ga);
    other
        .join()
        .unwrap_or_else(|_| panic!("the other thread panicked"));
    let each = u64::from(FIRST_BIAS_AFTER) + 2;
    assert_eq!((*a.lock(), *b.lock()), (each, each));
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
