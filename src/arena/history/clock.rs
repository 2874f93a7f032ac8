//! The clock history events are stamped with: a clock thread that stores the time since
//! recording started in an atomic every few tens of microseconds, while recording.
//!
//! An event's stamp is then one relaxed load. A direct clock read per event was most of
//! what recording cost: the CPU's time-stamp counter took 35-50 ns a read on the H100
//! host (a virtual machine) and `Instant::now` about as long, twice per alloc+free pair,
//! for a pair that costs 100-130 ns. The price is resolution: events are stamped to the
//! clock thread's last tick, [`TICK`] apart plus the scheduler's slack (about 60-100 us
//! on Linux); events inside one tick share its time and keep their order (the ring's).
//! The thread stops within a tick of the history being dropped.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long the clock thread sleeps between ticks.
pub(crate) const TICK: Duration = Duration::from_micros(20);

/// See the module docs.
pub(crate) struct EventClock {
    start: Instant,
    now_ns: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl EventClock {
    pub fn new() -> Self {
        let start = Instant::now();
        let now_ns = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (tick_ns, tick_stop) = (now_ns.clone(), stop.clone());
        let spawned = std::thread::Builder::new()
            .name("vramkit-history-clock".into())
            .spawn(move || {
                while !tick_stop.load(Ordering::Relaxed) {
                    tick_ns.store(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
                    std::thread::sleep(TICK);
                }
            });
        if let Err(e) = spawned {
            // Events then all carry time 0 (in order); the history still balances.
            log::warn!("memory history: no clock thread ({e}); events carry no times");
        }
        EventClock {
            start,
            now_ns,
            stop,
        }
    }

    /// The time of an event happening now, in nanoseconds since the start (to the last
    /// tick).
    #[inline]
    pub fn now(&self) -> u64 {
        self.now_ns.load(Ordering::Relaxed)
    }

    /// When recording started.
    pub fn start(&self) -> Instant {
        self.start
    }
}

impl Drop for EventClock {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
