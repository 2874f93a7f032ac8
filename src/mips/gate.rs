//! The frame goes first: while the frame's thread is inside
//! [`MipStreamer::update`](super::MipStreamer::update), the reaper waits before it drops
//! a replaced texture.
//!
//! Why: a driver frees a texture's memory under locks of its own (and wgpu-hal's memory
//! allocator under one lock per device), which the frame's thread needs to make its
//! shrinks' textures and to submit. After a budget cut replaces 85 textures, the reaper
//! frees them over the next frames; on an H200's host those frames took up to 2-3 ms to
//! make 7 shrinks' textures. Measured there, three processes each in one call, `update`'s
//! p99: 1.22 / 1.76 / 2.39 ms with no gate, 1.07 / 1.07 / 0.95 with the reaper yielding
//! (2.12 / 0.98 / 0.98 in another call), 1.30 / 1.30 / 1.15 with the loaders yielding as
//! well (they then make their textures later, and growths bunch up), so only the reaper
//! yields.
//!
//! It yields only to a frame loop's update: it waits while an update runs that began
//! less than [`YIELD_TO`] ago and at least [`FRAME_GAP`] after the last one ended. A frame
//! loop's updates (well under a millisecond, a frame apart) run alone; a loop that calls
//! `update` back to back (a loading screen, a test) has no frame to protect, and the
//! textures it replaces are freed at once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use web_time::Instant;

/// How long into an update the reaper waits for it.
pub(crate) const YIELD_TO: Duration = Duration::from_millis(1);

/// The least time between the end of one update and the start of the next for the next
/// to be yielded to: a frame loop's updates are a frame apart.
pub(crate) const FRAME_GAP: Duration = Duration::from_millis(2);

/// Times in nanoseconds after the gate was made (never 0); clones share them.
struct Times {
    made: Instant,
    /// When the update to yield to began (0: none).
    began: AtomicU64,
    /// When the last update ended.
    ended: AtomicU64,
}

/// Whether the frame's thread is inside an update to yield to (module docs).
#[derive(Clone)]
pub(crate) struct FrameGate(Arc<Times>);

/// Marks the frame's thread inside `update` until dropped.
pub(crate) struct InUpdate(FrameGate);

impl InUpdate {
    /// Whether this update is a frame loop's (it began at least [`FRAME_GAP`] after the
    /// last one ended): one with a frame to protect.
    pub fn in_frame_loop(&self) -> bool {
        self.0 .0.began.load(Ordering::Acquire) != 0
    }
}

impl Drop for InUpdate {
    fn drop(&mut self) {
        let t = &self.0 .0;
        t.began.store(0, Ordering::Release);
        t.ended.store(self.0.now(), Ordering::Release);
    }
}

impl Default for FrameGate {
    fn default() -> Self {
        FrameGate(Arc::new(Times {
            made: Instant::now(),
            began: AtomicU64::new(0),
            ended: AtomicU64::new(0),
        }))
    }
}

impl FrameGate {
    /// Nanoseconds since the gate was made, never 0.
    fn now(&self) -> u64 {
        (self.0.made.elapsed().as_nanos() as u64).max(1)
    }

    /// Called by the frame's thread as `update` begins.
    pub fn enter(&self) -> InUpdate {
        let now = self.now();
        let gap = now.saturating_sub(self.0.ended.load(Ordering::Acquire));
        if gap >= FRAME_GAP.as_nanos() as u64 {
            self.0.began.store(now, Ordering::Release);
        }
        InUpdate(self.clone())
    }

    /// Called by the reaper before it drops a texture: returns once no update to yield
    /// to has run for less than [`YIELD_TO`].
    pub fn wait_for_frame(&self) {
        while self.yielding() {
            std::thread::sleep(Duration::from_micros(50));
        }
    }

    /// Whether an update to yield to runs, begun less than [`YIELD_TO`] ago.
    fn yielding(&self) -> bool {
        let began = self.0.began.load(Ordering::Acquire);
        began != 0 && self.now().saturating_sub(began) < YIELD_TO.as_nanos() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::{FrameGate, FRAME_GAP, YIELD_TO};
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    /// Whether the update under way is one to yield to (its time aside).
    fn frame_update(gate: &FrameGate) -> bool {
        gate.0.began.load(Ordering::Acquire) != 0
    }

    #[test]
    fn the_reaper_yields_to_a_frame_loops_update_and_not_to_back_to_back_ones() {
        let gate = FrameGate::default();
        std::thread::sleep(FRAME_GAP);
        // A frame's update: yielded to, for YIELD_TO at most.
        let update = gate.enter();
        assert!(frame_update(&gate));
        let reaper = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                let waited = Instant::now();
                gate.wait_for_frame();
                waited.elapsed()
            })
        };
        let waited = reaper.join().unwrap();
        assert!(waited < YIELD_TO * 100, "{waited:?}");
        assert!(!gate.yielding());
        drop(update);
        assert!(!frame_update(&gate));
        // The next update right after it: back to back, not yielded to.
        let next = gate.enter();
        assert!(!frame_update(&gate));
        assert!(!gate.yielding());
        drop(next);
        // A frame later: yielded to again, until it ends.
        std::thread::sleep(FRAME_GAP);
        let later = gate.enter();
        assert!(frame_update(&gate));
        drop(later);
        assert!(!frame_update(&gate));
        assert!(!gate.yielding());
    }
}
