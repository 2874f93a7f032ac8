//! The clock history events are stamped with: the CPU's time-stamp counter on x86-64
//! (about 10 ns a read on the dev VM, where `Instant::now` took 28 ns, and 35-50 ns on the
//! H100 host: two stamps per alloc+free pair were most of what recording cost), mapped to
//! nanoseconds linearly through two (counter, `Instant`) pairs: when recording started
//! and when the history is copied out. Elsewhere it is `Instant` itself.
//!
//! The counter runs at a constant rate on every x86-64 CPU of the last fifteen years
//! (invariant TSC) and is synchronised across cores on current servers; a read that
//! still lands before the start counts as the start.

use std::time::Instant;

/// See the module docs.
pub(crate) struct EventClock {
    start: Instant,
    start_ticks: u64,
}

impl EventClock {
    pub fn new() -> Self {
        let start_ticks = ticks(None);
        EventClock {
            start: Instant::now(),
            start_ticks,
        }
    }

    /// A raw reading, for [`to_ns`](Self::to_ns) to convert later.
    #[inline]
    pub fn now(&self) -> u64 {
        ticks(Some(self.start))
    }

    /// When recording started.
    pub fn start(&self) -> Instant {
        self.start
    }

    /// Converts readings to nanoseconds since the start, at the rate measured between the
    /// start and this call.
    pub fn to_ns(&self) -> impl Fn(u64) -> u64 {
        let (ticks_now, elapsed) = (ticks(Some(self.start)), self.start.elapsed());
        let span = ticks_now.saturating_sub(self.start_ticks).max(1) as f64;
        let ns_per_tick = if cfg!(target_arch = "x86_64") {
            elapsed.as_nanos() as f64 / span
        } else {
            1.0
        };
        let start_ticks = self.start_ticks;
        move |raw| (raw.saturating_sub(start_ticks) as f64 * ns_per_tick) as u64
    }
}

/// The time-stamp counter on x86-64; elsewhere nanoseconds since `start` (0 without one).
#[inline]
#[allow(unused_variables)]
fn ticks(start: Option<Instant>) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: RDTSC exists on every x86-64 CPU and reads a counter; nothing else.
        #[allow(unused_unsafe)]
        unsafe {
            std::arch::x86_64::_rdtsc()
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        start.map_or(0, |s| s.elapsed().as_nanos() as u64)
    }
}
