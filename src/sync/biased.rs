//! The arena's state lock: a mutex that a thread taking it over and over takes and releases
//! with plain loads and stores, and others with one compare-and-swap.
//!
//! # Why
//! An alloc+free pair through the arena takes its lock twice. parking_lot's mutex, like
//! std's, releases with a compare-and-swap, so a pair pays four atomic read-modify-writes,
//! and on virtualised hosts a locked instruction is slow (BENCHMARKS.md, Arena). A lock
//! word taken with one compare-and-swap and released with a plain store halves that, but
//! each of the two remaining compare-and-swaps is still a large share of the pair: a
//! locked instruction waits for every store before it to drain. Most programs allocate from one
//! thread, so the lock is *biased* to the thread that takes it, as JVMs bias their
//! monitors: that thread enters with a store and a load and leaves with a store, and any
//! other thread first revokes the bias with one process-wide barrier (Linux `membarrier`,
//! about a microsecond). What the bias saves per alloc+free pair, against an arena never
//! biased in the same process, is in BENCHMARKS.md (Arena).
//!
//! # How it works
//! - **The lock word.** One byte holds `LOCKED`, and `PARKED` while a thread may sleep
//!   waiting for it. Taking it is a compare-and-swap that sets `LOCKED` from a state
//!   without it; on failure the thread spins briefly ([`parking_lot_core::SpinWait`]),
//!   then sets `PARKED` and parks on the lock's address ([`parking_lot_core::park`]) until
//!   woken or for [`PARK_TIMEOUT`], and tries again. Releasing reads the byte; with only
//!   `LOCKED` set it stores 0. Otherwise it swaps in 0 and, if `PARKED` was set, wakes
//!   every parked thread; those that lose the race park again.
//! - **The bias.** The lock has [`OWNER_SLOTS`] owner slots, each given for good to one
//!   thread (identified by the address of a thread-local, unique among live threads) the
//!   first time the lock is biased to it. `bias` names the slot of the thread the lock is
//!   biased to, or none. That thread takes the lock by setting its slot's `inside` flag
//!   and then reading `bias` again: if it still names its slot, the thread holds the lock
//!   without touching the lock word; if not, it clears the flag and takes the lock word.
//!   It releases by clearing the flag. A release that finds the word clear is therefore
//!   the owner's (every other holder set the word), which keeps it to two loads and a
//!   store; with the word set, a lock that was ever biased checks whether the releasing
//!   thread is its owner inside while a revoker waits.
//! - **Revoking.** A thread that holds the lock word and finds a bias clears `bias`, runs
//!   the process-wide barrier, and waits until the owner's `inside` flag is clear. The
//!   barrier makes the owner's store of its flag visible before the revoker reads it, or
//!   the revoker's clearing of `bias` visible before the owner reads it (the owner's side
//!   of the pair is a compiler fence only): so either the revoker sees the owner inside
//!   and waits, or the owner sees the bias gone and takes the lock word, where it waits.
//!   `try_lock` must not wait (the arena's completion callback tries the lock from inside
//!   another thread's submit, which the holder may be waiting for), so a try that takes
//!   the word and finds a bias clears it, runs the barrier and looks once: with the owner
//!   outside, the try holds the lock and the bias is revoked; with the owner inside, it
//!   stores the bias back before releasing the word, so the next holder of the word still
//!   revokes and waits. Nobody else held the lock meanwhile, so the bias stands as it was.
//!   An owner that found it gone meanwhile comes through the word and finds its own bias
//!   there: it clears it (nothing to wait for), since a thread holding the word must not
//!   also be able to enter through the bias (a callback's try inside its critical
//!   section). A try that left the bias cleared would leave the owner inside with nothing
//!   to tell the next holder; one that failed on every lock biased
//!   to another thread would fail forever once the owner stopped taking it.
//! - **Biasing.** Each thread that takes the lock word counts it; once `bias_after`
//!   acquisitions (64 at first) went by since the last bias, the thread that just took it
//!   sets `BIAS_PENDING` in the word, and its release biases the lock to it before
//!   clearing the word (so the release's fast path stays a load and a store). Each
//!   revocation doubles `bias_after` (up to [`MAX_BIAS_AFTER`]), so where threads take
//!   turns the lock soon stays unbiased: at most one revocation per `bias_after`
//!   acquisitions of the lock word, whoever the threads are.
//!
//! Its rank is `lock_rank::ARENA` (`src/sync/rank.rs`): above the queue lock, under which
//! callbacks drop allocations, and above the tiers' lock, under which a move drops one.
//! Debug builds check every acquisition against the ranks the thread holds.
//!
//! # What it promises
//! - **Mutual exclusion.** The lock word is taken only by a compare-and-swap from a state
//!   without `LOCKED`, and only its holder clears `LOCKED`; acquire and release orderings
//!   order those critical sections. Between the biased owner and a holder of the lock
//!   word, the barrier argument above: no holder of the lock word proceeds while the owner
//!   is inside, and the owner does not enter while `bias` is clear. Only the lock word's
//!   holder changes `bias`, and only its slot's thread writes a slot's `inside`.
//! - **No barrier where it is not available.** Without `membarrier` (other systems, or a
//!   sandbox that refuses it), or with `VRAMKIT_LOCK_BIAS=off`, the lock is never biased
//!   and every thread takes the lock word. A lock is biased to at most [`OWNER_SLOTS`]
//!   distinct threads over its life; after that the others use the lock word.
//! - **No thread waits forever**, but a wake-up can be late. The release's read and its
//!   store are two steps: a waiter that sets `PARKED` between them, and falls asleep before
//!   the store, is not woken by that release. It wakes after [`PARK_TIMEOUT`] at the latest
//!   (or at the next release that sees `PARKED`) and takes the lock then. The window is a
//!   few instructions of the holder, while falling asleep takes the waiter far longer, so
//!   this needs the holder descheduled inside it.
//! - Guards cannot be sent to another thread, as with parking_lot's mutex: a biased
//!   owner's release must run on the thread whose flag it clears.

use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU32, AtomicU8, AtomicUsize, Ordering};
use std::time::Duration;

use crate::sync::rank as lock_rank;

const LOCKED: u8 = 1;
const PARKED: u8 = 2;
/// Set by the holder of the lock word once the lock is to be biased to it: its release,
/// which this sends down the slow path, biases the lock before clearing the word.
const BIAS_PENDING: u8 = 4;

/// How long a parked waiter sleeps before it looks at the lock again, woken or not: the
/// most a lost wake-up (see the module docs) can cost it. The arena's lock is held for
/// microseconds on its hot paths, so waiters rarely get this far.
const PARK_TIMEOUT: Duration = Duration::from_micros(200);

/// How many distinct threads one lock can be biased to over its life.
pub(crate) const OWNER_SLOTS: usize = 8;

/// Acquisitions of the lock word after which a new lock is biased to the acquiring thread.
const FIRST_BIAS_AFTER: u32 = 64;

/// The most acquisitions asked for after revocations: tens of milliseconds of
/// back-to-back acquisitions, so revocations (about a microsecond each) cost threads that
/// take turns at most a few hundredths of a percent.
pub(crate) const MAX_BIAS_AFTER: u32 = 1 << 20;

/// Whether this system has a barrier to revoke a bias with (`membarrier`); elsewhere the
/// lock is the lock word alone, with no bias checks.
const BIAS_SUPPORTED: bool = cfg!(any(target_os = "linux", target_os = "android"));

/// `bias_after` where the lock is never biased (no `membarrier`).
const NEVER: u32 = u32::MAX;

/// One thread's claim on a biased lock.
struct OwnerSlot {
    /// The thread the slot was given to (see [`this_thread`]); 0 while free.
    thread: AtomicUsize,
    /// Set by that thread while it holds the lock through the bias, or tries to.
    inside: AtomicBool,
}

/// The raw lock behind [`Mutex`]. In declaration order, so that what every pair reads
/// (`state`, `bias`, `last_bias` and the first slot) shares the first cache line.
#[repr(C)]
pub(crate) struct RawLock {
    state: AtomicU8,
    /// The slot (index + 1) of the thread the lock is biased to; 0 for none. Changed only
    /// by the holder of the lock word.
    bias: AtomicU8,
    /// The slot `bias` named last, kept after a revocation so that an owner inside can
    /// find its flag on release. Changed only by the holder of the lock word, and never
    /// while an owner is inside (the bias is revoked first).
    last_bias: AtomicU8,
    /// Acquisitions of the lock word since the lock was last biased (under the lock word).
    acquisitions: AtomicU32,
    /// How many of them bias the lock to the acquiring thread (under the lock word).
    bias_after: AtomicU32,
    /// Biases this lock went through, and revocations (`ArenaStats`).
    biases: AtomicU32,
    revocations: AtomicU32,
    slots: [OwnerSlot; OWNER_SLOTS],
}

/// The raw lock the arena's state lives under: [`RawLock`], or, with the lab-only feature
/// `lock-parking-lot`, [`PlainLock`] (a plain `parking_lot` mutex, for the comparison the
/// biased lock has to win).
#[cfg(not(any(feature = "lock-parking-lot", feature = "lock-none")))]
pub(crate) type Raw = RawLock;
/// See above.
#[cfg(all(feature = "lock-parking-lot", not(feature = "lock-none")))]
pub(crate) type Raw = PlainLock;
/// See above: with the lab-only feature `lock-none`, [`NoLock`] (no lock at all, one
/// thread only: the floor the lock comparison is measured against).
#[cfg(feature = "lock-none")]
pub(crate) type Raw = NoLock;

/// A mutex over the arena's state, used as `parking_lot::Mutex` is.
pub(crate) type Mutex<T> = lock_api::Mutex<Raw, T>;
/// The guard of [`Mutex`].
pub(crate) type MutexGuard<'a, T> = lock_api::MutexGuard<'a, Raw, T>;

/// A raw lock of the lab's comparisons at the arena's rank: the rank bookkeeping the
/// biased lock does, around `R` (features `lock-parking-lot` and `lock-none`).
#[cfg(any(feature = "lock-parking-lot", feature = "lock-none"))]
pub(crate) struct Ranked<R>(R);

// SAFETY: every call is forwarded to `R`, which upholds the contract; the rank
// bookkeeping around it touches no lock state.
#[cfg(any(feature = "lock-parking-lot", feature = "lock-none"))]
unsafe impl<R: lock_api::RawMutex> lock_api::RawMutex for Ranked<R> {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Ranked<R> = Ranked(R::INIT);
    type GuardMarker = lock_api::GuardNoSend;

    #[inline(always)]
    fn lock(&self) {
        lock_rank::before(lock_rank::ARENA);
        lock_rank::taken(lock_rank::ARENA);
        self.0.lock();
    }

    #[inline(always)]
    fn try_lock(&self) -> bool {
        let took = self.0.try_lock();
        if took {
            lock_rank::taken(lock_rank::ARENA);
        }
        took
    }

    #[inline(always)]
    unsafe fn unlock(&self) {
        lock_rank::released(lock_rank::ARENA);
        // SAFETY: forwarded: the caller holds the lock.
        unsafe { self.0.unlock() }
    }
}

#[cfg(any(feature = "lock-parking-lot", feature = "lock-none"))]
impl<R> Ranked<R> {
    /// No biases: (0, 0).
    pub(crate) fn bias_counts(&self) -> (u64, u64) {
        (0, 0)
    }
}

/// A plain `parking_lot` mutex at the arena's rank (feature `lock-parking-lot`, for the
/// lab's lock comparison only: `bench arena` and `soak` built with it against without).
#[cfg(feature = "lock-parking-lot")]
pub(crate) type PlainLock = Ranked<parking_lot::RawMutex>;

/// No lock at all, for one thread (feature `lock-none`, for the lab only): what an
/// alloc+free pair costs with nothing to take or release is the least that any design
/// keeping the arena's bookkeeping current on every operation could reach, per-thread
/// caches of freed ranges included.
#[cfg(feature = "lock-none")]
pub(crate) type NoLock = Ranked<OneThread>;

/// The inside of [`NoLock`]: the first thread to take it owns it; another thread, or a
/// nested take, aborts the process (a try from inside a critical section fails, as it
/// does on the biased lock).
#[cfg(feature = "lock-none")]
pub(crate) struct OneThread {
    owner: AtomicUsize,
    held: AtomicBool,
}

#[cfg(feature = "lock-none")]
impl OneThread {
    /// Claims the lock for this thread; false when it is held already (by this thread).
    #[inline(always)]
    fn claim(&self) -> bool {
        let me = this_thread();
        let owner = self.owner.load(Ordering::Relaxed);
        if owner != me
            && self
                .owner
                .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            eprintln!("the lab's `lock-none` build is for one thread: a second took the lock");
            std::process::abort();
        }
        if self.held.load(Ordering::Relaxed) {
            return false;
        }
        self.held.store(true, Ordering::Relaxed);
        true
    }
}

// SAFETY: one thread only (any other aborts in `claim`), and a take while held fails or
// aborts, so no two guards exist at once.
#[cfg(feature = "lock-none")]
unsafe impl lock_api::RawMutex for OneThread {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: OneThread = OneThread {
        owner: AtomicUsize::new(0),
        held: AtomicBool::new(false),
    };
    type GuardMarker = lock_api::GuardNoSend;

    #[inline(always)]
    fn lock(&self) {
        if !self.claim() {
            eprintln!("the lab's `lock-none` build: a nested take of the arena's lock");
            std::process::abort();
        }
    }

    #[inline(always)]
    fn try_lock(&self) -> bool {
        self.claim()
    }

    #[inline(always)]
    unsafe fn unlock(&self) {
        self.held.store(false, Ordering::Relaxed);
    }
}

thread_local! {
    static THREAD_MARK: u8 = const { 0 };
}

/// This thread's identity: the address of a thread-local, unique among live threads and
/// never 0. A thread that ends may pass it on to a later one, which is harmless: one
/// thread is gone before the other begins.
#[inline(always)]
fn this_thread() -> usize {
    THREAD_MARK.with(|mark| mark as *const u8 as usize)
}

// SAFETY: `lock` and `try_lock` return only once this thread either set `LOCKED` by a
// compare-and-swap from a state without it and then waited out any biased owner, or set
// its own slot's `inside` flag and then read `bias` naming its slot; `unlock`, which the
// caller promises to call only while holding the lock and on the thread that took it,
// undoes whichever of the two this thread did. The module docs give the argument.
unsafe impl lock_api::RawMutex for RawLock {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: RawLock = RawLock {
        state: AtomicU8::new(0),
        bias: AtomicU8::new(0),
        last_bias: AtomicU8::new(0),
        acquisitions: AtomicU32::new(0),
        bias_after: AtomicU32::new(FIRST_BIAS_AFTER),
        biases: AtomicU32::new(0),
        revocations: AtomicU32::new(0),
        slots: [const {
            OwnerSlot {
                thread: AtomicUsize::new(0),
                inside: AtomicBool::new(false),
            }
        }; OWNER_SLOTS],
    };

    type GuardMarker = lock_api::GuardNoSend;

    #[inline(always)]
    fn lock(&self) {
        lock_rank::before(lock_rank::ARENA);
        lock_rank::taken(lock_rank::ARENA);
        if self.enter_biased() {
            return;
        }
        if self
            .state
            .compare_exchange_weak(0, LOCKED, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            self.lock_slow();
        }
        self.took_lock_word();
    }

    #[inline(always)]
    fn try_lock(&self) -> bool {
        let took = self.try_lock_unranked();
        if took {
            lock_rank::taken(lock_rank::ARENA);
        }
        took
    }

    #[inline(always)]
    unsafe fn unlock(&self) {
        lock_rank::released(lock_rank::ARENA);
        let state = self.state.load(Ordering::Relaxed);
        if state & LOCKED == 0 {
            // The word is clear only while the holder is inside through the bias, and
            // `last_bias` names its slot until it leaves (module docs).
            let last = usize::from(self.last_bias.load(Ordering::Relaxed));
            if let Some(slot) = self.slots.get(last.wrapping_sub(1)) {
                slot.inside.store(false, Ordering::Release);
            }
            return;
        }
        if state == LOCKED && self.last_bias.load(Ordering::Relaxed) == 0 {
            // Never biased: the holder took the word.
            self.state.store(0, Ordering::Release);
            return;
        }
        self.unlock_other();
    }

    #[inline(always)]
    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) & LOCKED != 0
            || self
                .slots
                .iter()
                .any(|slot| slot.inside.load(Ordering::Relaxed))
    }
}

impl RawLock {
    /// `try_lock` without the rank bookkeeping.
    #[inline(always)]
    fn try_lock_unranked(&self) -> bool {
        let bias = self.bias.load(Ordering::Relaxed);
        if bias != 0 {
            if let Some(slot) = self.own_slot(bias) {
                // Held by this very thread (a callback inside its own critical section).
                if slot.inside.load(Ordering::Relaxed) {
                    return false;
                }
                if self.enter_biased() {
                    return true;
                }
            }
            // Biased to another thread: take the lock word, then revoke without waiting.
        }
        let mut state = self.state.load(Ordering::Relaxed);
        while state & LOCKED == 0 {
            match self.state.compare_exchange_weak(
                state,
                state | LOCKED,
                Ordering::Acquire,
                Ordering::Relaxed,
            ) {
                Ok(_) => {
                    let bias = self.bias.load(Ordering::Relaxed);
                    if bias != 0 && !self.clear_own_bias(bias) && !self.try_revoke(bias) {
                        // The owner is inside, and the bias is back for the next holder
                        // of the word to wait for (module docs).
                        self.release_lock_word();
                        return false;
                    }
                    return true;
                }
                Err(now) => state = now,
            }
        }
        false
    }

    /// The address threads park on.
    fn key(&self) -> usize {
        self as *const RawLock as usize
    }

    /// The slot `named` (a value of `bias` or `last_bias`), if it is this thread's.
    #[inline(always)]
    fn own_slot(&self, named: u8) -> Option<&OwnerSlot> {
        let slot = self.slots.get(usize::from(named).checked_sub(1)?)?;
        (slot.thread.load(Ordering::Relaxed) == this_thread()).then_some(slot)
    }

    /// Takes the lock through the bias if it is this thread's: the owner's half of the
    /// barrier pair (module docs).
    #[inline(always)]
    fn enter_biased(&self) -> bool {
        if !BIAS_SUPPORTED {
            return false;
        }
        let bias = self.bias.load(Ordering::Relaxed);
        let Some(slot) = self.own_slot(bias) else {
            return false;
        };
        slot.inside.store(true, Ordering::Relaxed);
        // The light half: the revoker's `membarrier` orders this thread's store above and
        // load below as a full fence would, so only the compiler must keep them in order.
        compiler_fence(Ordering::SeqCst);
        if self.bias.load(Ordering::Acquire) == bias {
            return true;
        }
        slot.inside.store(false, Ordering::Release);
        false
    }

    /// Releases the lock with the word set, by a lock that was biased once: the holder is
    /// inside through the bias while a revoker holds the word, or holds the word itself.
    #[inline(never)]
    fn unlock_other(&self) {
        if let Some(slot) = self.own_slot(self.last_bias.load(Ordering::Relaxed)) {
            // Only this thread sets its slot's flag, and it is not between an attempt's
            // store and clear here: a set flag of its own means it is inside through the
            // bias.
            if slot.inside.load(Ordering::Relaxed) {
                slot.inside.store(false, Ordering::Release);
                return;
            }
        }
        self.release_lock_word();
    }

    /// Just took the lock word: waits out a biased owner, and biases the lock to this
    /// thread once `bias_after` acquisitions went by since the last bias. The thread holds
    /// the lock word until it releases it, and then takes the lock through the bias.
    #[inline(always)]
    fn took_lock_word(&self) {
        if !BIAS_SUPPORTED {
            return;
        }
        let bias = self.bias.load(Ordering::Relaxed);
        if bias != 0 && !self.clear_own_bias(bias) {
            self.revoke(bias);
        }
        let bias_after = self.bias_after.load(Ordering::Relaxed);
        if bias_after == NEVER {
            // No store where there is nothing to count: each one is another that the next
            // compare-and-swap waits to drain.
            return;
        }
        let acquisitions = self.acquisitions.load(Ordering::Relaxed).saturating_add(1);
        self.acquisitions.store(acquisitions, Ordering::Relaxed);
        if acquisitions >= bias_after {
            self.ask_for_bias();
        }
    }

    /// Marks the lock word so that this holder's release biases the lock (a
    /// read-modify-write: waiters may set `PARKED` meanwhile).
    #[cold]
    #[inline(never)]
    fn ask_for_bias(&self) {
        self.acquisitions.store(0, Ordering::Relaxed);
        self.state.fetch_or(BIAS_PENDING, Ordering::Relaxed);
    }

    /// Under the lock word just taken: clears `bias` if it names this very thread, and says
    /// whether it did. That happens only when a `try_lock` gave back a bias that its owner,
    /// meanwhile, had found gone (module docs): the owner is not inside, so there is
    /// nothing to wait for, but holding the word it must not keep a bias it could also
    /// enter through (a callback's `try_lock` inside its critical section would).
    #[cold]
    #[inline(never)]
    fn clear_own_bias(&self, bias: u8) -> bool {
        if self.own_slot(bias).is_none() {
            return false;
        }
        self.bias.store(0, Ordering::Relaxed);
        true
    }

    /// Under the lock word: clears the bias, runs the barrier, and waits for the owner to
    /// leave.
    #[cold]
    #[inline(never)]
    fn revoke(&self, bias: u8) {
        let slot = self.clear_bias(bias);
        let mut spin = parking_lot_core::SpinWait::new();
        let mut nap = Duration::from_micros(1);
        while slot.inside.load(Ordering::Acquire) {
            // The owner's critical sections are short, but it may be descheduled in one,
            // or wait in one for something this thread holds: after the spins, sleep, a
            // little longer each time (at most PARK_TIMEOUT), rather than burn a core.
            if !spin.spin() {
                std::thread::sleep(nap);
                nap = (nap * 2).min(PARK_TIMEOUT);
            }
        }
        self.count_revocation();
    }

    /// Under the lock word, for `try_lock`: revokes the bias if the owner is outside, and
    /// otherwise gives it back, so that the next holder of the word still waits for the
    /// owner. Returns whether the bias is gone.
    #[cold]
    #[inline(never)]
    fn try_revoke(&self, bias: u8) -> bool {
        let slot = self.clear_bias(bias);
        if slot.inside.load(Ordering::Acquire) {
            // Inside, or about to find the bias gone and leave: either way nobody else
            // held the lock meanwhile, so the bias can stand as it was.
            self.bias.store(bias, Ordering::Release);
            return false;
        }
        self.count_revocation();
        true
    }

    /// Under the lock word: clears the bias and runs the barrier. Then the owner is seen
    /// inside, or it will see the bias gone (module docs). Returns the owner's slot.
    fn clear_bias(&self, bias: u8) -> &OwnerSlot {
        let slot = &self.slots[usize::from(bias - 1)];
        debug_assert_ne!(
            slot.thread.load(Ordering::Relaxed),
            this_thread(),
            "the biased owner revoked its own bias"
        );
        self.bias.store(0, Ordering::SeqCst);
        heavy_barrier();
        slot
    }

    /// A revocation done: counted, and the next bias asks for twice the acquisitions.
    fn count_revocation(&self) {
        self.revocations.fetch_add(1, Ordering::Relaxed);
        let after = self.bias_after.load(Ordering::Relaxed);
        self.bias_after.store(
            after.saturating_mul(2).min(MAX_BIAS_AFTER),
            Ordering::Relaxed,
        );
    }

    #[cold]
    #[inline(never)]
    fn bias_to_this_thread(&self) {
        if !heavy_barrier_available() {
            self.bias_after.store(NEVER, Ordering::Relaxed);
            return;
        }
        let me = this_thread();
        let Some(index) = self.slots.iter().position(|slot| {
            let thread = slot.thread.load(Ordering::Relaxed);
            thread == me || thread == 0
        }) else {
            // Every slot is given to another thread.
            return;
        };
        self.slots[index].thread.store(me, Ordering::Relaxed);
        // `index < OWNER_SLOTS`, which fits a byte with room for the + 1.
        let bias = index as u8 + 1;
        self.last_bias.store(bias, Ordering::Relaxed);
        self.bias.store(bias, Ordering::Release);
        self.biases.fetch_add(1, Ordering::Relaxed);
    }

    #[inline(always)]
    fn release_lock_word(&self) {
        if self.state.load(Ordering::Relaxed) == LOCKED {
            self.state.store(0, Ordering::Release);
        } else {
            self.unlock_slow();
        }
    }

    /// How many times the lock was biased to a thread, and revoked.
    pub(crate) fn bias_counts(&self) -> (u64, u64) {
        (
            u64::from(self.biases.load(Ordering::Relaxed)),
            u64::from(self.revocations.load(Ordering::Relaxed)),
        )
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
                    || self.state.load(Ordering::Relaxed) & (LOCKED | PARKED) == LOCKED | PARKED,
                    || {},
                    |_, _| {},
                    parking_lot_core::DEFAULT_PARK_TOKEN,
                    Some(std::time::Instant::now() + PARK_TIMEOUT),
                );
            }
            spin.reset();
            state = self.state.load(Ordering::Relaxed);
        }
    }

    #[cold]
    fn unlock_slow(&self) {
        if self.state.load(Ordering::Relaxed) & BIAS_PENDING != 0 {
            self.bias_to_this_thread();
        }
        if self.state.swap(0, Ordering::Release) & PARKED != 0 {
            // SAFETY: the key is this lock's address (see `lock_slow`).
            unsafe {
                parking_lot_core::unpark_all(self.key(), parking_lot_core::DEFAULT_UNPARK_TOKEN);
            }
        }
    }
}

/// Whether this process can run [`heavy_barrier`]: asked of the kernel once (registering
/// the process for `MEMBARRIER_CMD_PRIVATE_EXPEDITED`), and off with `VRAMKIT_LOCK_BIAS=off`.
fn heavy_barrier_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        match crate::knobs::Knob::LockBias.get().as_deref() {
            Some("off") => return false,
            Some("on") | None => {}
            Some(other) => log::warn!("VRAMKIT_LOCK_BIAS={other} ignored: it takes on or off"),
        }
        let available = membarrier::register();
        if !available {
            log::debug!("no membarrier: the arena's lock is not biased to a thread");
        }
        available
    })
}

/// The revoker's half of the barrier pair: once it returns, every other thread of the
/// process has run a full memory barrier since this thread's earlier stores, as if each had
/// executed one where it was. Only called once [`heavy_barrier_available`] said yes.
fn heavy_barrier() {
    membarrier::private_expedited();
}

#[cfg(any(target_os = "linux", target_os = "android"))]
mod membarrier {
    const CMD_QUERY: libc::c_long = 0;
    const CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

    /// Registers the process for private expedited barriers; false if the kernel (before
    /// 4.14) or a sandbox does not offer them.
    pub(super) fn register() -> bool {
        // SAFETY: `membarrier` takes integer arguments only and touches no memory of ours.
        let supported = unsafe { libc::syscall(libc::SYS_membarrier, CMD_QUERY, 0, 0) };
        if supported < 0 || supported & CMD_PRIVATE_EXPEDITED == 0 {
            return false;
        }
        // SAFETY: as above.
        unsafe { libc::syscall(libc::SYS_membarrier, CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0 }
    }

    pub(super) fn private_expedited() {
        // SAFETY: as above; registered in `register`, which returned true.
        let done = unsafe { libc::syscall(libc::SYS_membarrier, CMD_PRIVATE_EXPEDITED, 0, 0) };
        // It cannot fail once registered; if it did, no bias could be trusted.
        if done != 0 {
            std::process::abort();
        }
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod membarrier {
    pub(super) fn register() -> bool {
        false
    }

    pub(super) fn private_expedited() {
        unreachable!("the lock is never biased without membarrier")
    }
}

#[cfg(test)]
#[path = "biased_tests.rs"]
mod tests;
