//! What a frame's submit costs, learned as frames go: the update's time target
//! ([`MipConfig::update_time_target`](super::MipConfig::update_time_target)) stops landing
//! growths once the time spent plus the predicted submit would pass it.
//!
//! A submit (`encoder.finish` and `queue.submit`) costs a fixed part (the driver's
//! submission, wgpu's bookkeeping of the command buffer) and a part per copy recorded
//! (each copy's resources tracked, their barriers made). Dividing a frame's time by its
//! copies alone makes a two-copy frame look twenty times dearer per copy than a fifty-copy
//! one, so the model is a line, `fixed + per_copy * copies`, fitted by least squares over
//! the frames seen, older frames weighing less (a driver's cost drifts with what else it
//! holds).

/// The least-squares line of submit seconds against copies, frames decaying by `DECAY`.
#[derive(Clone, Debug)]
pub(super) struct SubmitCost {
    /// Decayed sums: weight, copies, seconds, copies², copies × seconds.
    w: f64,
    x: f64,
    y: f64,
    xx: f64,
    xy: f64,
}

/// Each frame seen keeps this much of the weight of those before it: about the last 20
/// frames count.
const DECAY: f64 = 0.95;

/// Before a frame has been measured: about what an H200 with driver 580 takes through
/// wgpu 30 (0.1 ms a submit, 3 µs a copy); the first frames replace it.
const FIXED_GUESS: f64 = 1e-4;
const PER_COPY_GUESS: f64 = 3e-6;

impl SubmitCost {
    pub fn new() -> Self {
        SubmitCost {
            w: 0.0,
            x: 0.0,
            y: 0.0,
            xx: 0.0,
            xy: 0.0,
        }
    }

    /// Records a frame whose `copies` took `secs` to submit.
    pub fn observe(&mut self, copies: usize, secs: f64) {
        let c = copies as f64;
        self.w = self.w * DECAY + 1.0;
        self.x = self.x * DECAY + c;
        self.y = self.y * DECAY + secs;
        self.xx = self.xx * DECAY + c * c;
        self.xy = self.xy * DECAY + c * secs;
    }

    /// The predicted seconds of submitting `copies` copies.
    pub fn predict(&self, copies: usize) -> f64 {
        let (fixed, per_copy) = self.line();
        fixed + per_copy * copies as f64
    }

    /// `(fixed, per_copy)`, both at least 0.
    fn line(&self) -> (f64, f64) {
        if self.w < 1e-9 {
            return (FIXED_GUESS, PER_COPY_GUESS);
        }
        let (mx, my) = (self.x / self.w, self.y / self.w);
        let var = self.xx / self.w - mx * mx;
        if var < 1.0 {
            // Frames of (nearly) the same copy count: no slope to read; the guess's
            // share of fixed to per-copy, scaled to what was measured.
            let guess = FIXED_GUESS + PER_COPY_GUESS * mx;
            let scale = my / guess;
            return (FIXED_GUESS * scale, PER_COPY_GUESS * scale);
        }
        let per_copy = ((self.xy / self.w - mx * my) / var).max(0.0);
        let fixed = (my - per_copy * mx).max(0.0);
        (fixed, per_copy)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    #[test]
    fn a_noisy_line_is_recovered_and_follows_a_drift() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut cost = SubmitCost::new();
        let truth = |c: usize| 2e-4 + 5e-6 * c as f64;
        for _ in 0..200 {
            let c = rng.gen_range(0..120);
            let noise = 1.0 + rng.gen_range(-0.05..0.05);
            cost.observe(c, truth(c) * noise);
        }
        for c in [1, 10, 100] {
            let (p, t) = (cost.predict(c), truth(c));
            assert!((p - t).abs() / t < 0.1, "{c} copies: {p} vs {t}");
        }
        // The driver slows down: within about three decay lengths the model follows.
        let slower = |c: usize| 2.0 * truth(c);
        for _ in 0..60 {
            let c = rng.gen_range(0..120);
            cost.observe(c, slower(c));
        }
        let (p, t) = (cost.predict(50), slower(50));
        assert!((p - t).abs() / t < 0.1, "{p} vs {t}");
    }

    #[test]
    fn frames_of_one_copy_count_scale_the_guess_and_nothing_goes_negative() {
        let mut cost = SubmitCost::new();
        assert!((cost.predict(10) - (FIXED_GUESS + 10.0 * PER_COPY_GUESS)).abs() < 1e-12);
        for _ in 0..30 {
            cost.observe(12, 2.0 * (FIXED_GUESS + 12.0 * PER_COPY_GUESS));
        }
        let p = cost.predict(12);
        assert!((p / (2.0 * (FIXED_GUESS + 12.0 * PER_COPY_GUESS)) - 1.0).abs() < 1e-9);
        // Cheaper with more copies (noise): the slope is clamped at 0, not negative.
        let mut odd = SubmitCost::new();
        odd.observe(0, 1e-3);
        odd.observe(100, 1e-4);
        assert!(odd.predict(1000) >= 0.0);
        assert!(odd.predict(0) >= 0.0);
    }
}
