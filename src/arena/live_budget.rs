//! Live budgets: an arena whose budget follows what the driver says this process may use
//! ([`Budget::FractionOfAvailable`]), so that a second process taking memory on the same
//! GPU makes this one give back its cache instead of both running out.
//!
//! # How it works
//! The budget in force is recomputed from a driver reading ([`Gpu::driver_memory`]):
//!
//! `limit = fraction x budget_from_driver - (process usage - this arena's reserved)`
//!
//! The driver's budget already counts what the process holds and shrinks as other
//! processes allocate; what the process holds outside this arena (staging, other arenas,
//! a host renderer's textures) is subtracted, so the fraction is of everything the
//! process may have. Readings are taken at most once per
//! [`ArenaConfig::budget_refresh`](super::ArenaConfig::budget_refresh), on the
//! allocation path and in [`Arena::maintain`], and at once by [`Arena::refresh_budget`]
//! and by an allocation that would cross the budget (once, before it waits for frees or
//! asks the tiers to spill: a neighbour may have given memory back since the last
//! reading).
//!
//! When the limit drops below what the arena reserves, the arena does what
//! [`Arena::set_budget`] does (cached ranges and empty blocks go back to the device at
//! once), and then asks the tiers' pressure hook ([`crate::tier`]), if one is attached, to
//! spill movable allocations to host memory for the rest; the blocks they leave empty go
//! back at the next reading. Live allocations that are not movable are kept: reserved
//! memory may then stay above the limit until they are dropped, and allocations that
//! would grow it fail meanwhile with [`Error::OutOfMemory`](crate::Error::OutOfMemory).
//!
//! Where no driver reports a budget (lavapipe, WebGPU, Metal and DX12 without an
//! installed reader), the budget is the fraction of the device's memory, fixed, as
//! [`Budget::FractionOfDevice`] would give.
//!
//! # What it promises
//! - The driver is read with no lock of the arena held (an installed reader is foreign
//!   code), and never more often than the refresh interval, except on request and once
//!   per allocation that would cross the budget.
//! - A reading changes only the budget: no allocation moves or fails because of it
//!   (spilling is the tiers' ordinary eviction, and their allocations stay valid).

use std::sync::atomic::Ordering;

use web_time::Duration;

use super::{Arena, Budget, Shared};
use crate::gpu::clock;
use crate::{DriverMemory, Result};

/// `Shared::live_due` of a fixed budget: never due.
pub(super) const NOT_LIVE: u64 = u64::MAX;

/// The live state of an arena's budget (under a leaf lock).
#[derive(Debug, Default)]
pub(super) struct LiveBudget {
    /// The fraction of the driver's budget; `None`: the budget is fixed. When the next
    /// reading is due is `Shared::live_due`.
    pub fraction: Option<f64>,
    /// The last reading, for the summary.
    pub last: Option<DriverMemory>,
}

/// The arena's limit for a reading: see the module docs.
pub(super) fn limit_for(fraction: f64, reading: &DriverMemory, reserved: u64) -> u64 {
    let others = reading.usage.saturating_sub(reserved);
    ((reading.budget as f64 * fraction) as u64).saturating_sub(others)
}

impl Shared {
    /// Whether the budget follows the driver.
    pub(super) fn is_live_budget(&self) -> bool {
        self.live_due.load(Ordering::Relaxed) != NOT_LIVE
    }

    /// Whether a live budget's next reading may be due: the allocation path's test. A
    /// stamp is at most a tick behind the clock, so a reading may come a tick late;
    /// [`refresh_live_budget`](Self::refresh_live_budget) decides exactly, under its lock.
    #[inline]
    pub(super) fn live_reading_due(&self) -> bool {
        let due = self.live_due.load(Ordering::Relaxed);
        due != NOT_LIVE && clock::now().nanos() >= due
    }

    /// Reads the driver and applies the new limit if the budget is live and a reading is
    /// due (or `force`). Returns the budget in force.
    pub(super) fn refresh_live_budget(&self, force: bool) -> Option<u64> {
        let fraction = {
            let live = self.live.lock();
            let fraction = live.fraction?;
            // The clock itself, not a stamp, which may be a tick behind: a reading never
            // comes early. The lock orders this test and store among readers.
            let now = clock::exact_now().nanos();
            if !force && now < self.live_due.load(Ordering::Relaxed) {
                return None;
            }
            let refresh = u64::try_from(self.config.budget_refresh.as_nanos()).unwrap_or(u64::MAX);
            // Below NOT_LIVE: a live budget is always due at some point.
            let due = now.saturating_add(refresh).min(NOT_LIVE - 1);
            self.live_due.store(due, Ordering::Relaxed);
            fraction
        };
        // No lock of ours held: a reader installed by the application is foreign code.
        let reading = self.gpu.driver_memory();
        let mut st = self.state.lock();
        let limit = match &reading {
            Some(r) => limit_for(fraction, r, st.reserved()),
            // No driver reading: the fixed fraction of the device (checked at creation).
            None => st.budget?,
        };
        st.budget = Some(limit);
        let mut over = st.reserved().saturating_sub(limit);
        if over > 0 {
            st.flush_ready();
            st.release_empty(0);
            over = st.reserved().saturating_sub(limit);
        }
        self.unlock(st);
        self.live.lock().last = reading;
        if over > 0 {
            // The tiers spill movable allocations; their emptied blocks go back at the
            // next reading.
            let hook = self.relief.lock().as_ref().and_then(|w| w.upgrade());
            if let Some(hook) = hook {
                let given = hook.relieve(0, over, true);
                log::debug!(
                    "arena '{}': live budget {limit} is {over} bytes under what it reserves; \
                     the tiers gave back {given}",
                    self.config.name
                );
            }
        }
        Some(limit)
    }
}

impl Arena {
    /// Reads the driver now and applies a live budget ([`Budget::FractionOfAvailable`]);
    /// see the module docs of `arena::live_budget`. Returns the budget in bytes now in
    /// force (`None`: unlimited). With a fixed budget it only returns it.
    ///
    /// ```no_run
    /// use vramkit::{arena::Budget, Arena, ArenaConfig};
    /// let gpu = vramkit::Gpu::headless()?;
    /// let arena = Arena::new(&gpu, ArenaConfig {
    ///     budget: Budget::FractionOfAvailable(0.9),
    ///     ..Default::default()
    /// })?;
    /// // ... another process takes memory on the same GPU ...
    /// println!("budget now {:?}", arena.refresh_budget()?);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn refresh_budget(&self) -> Result<Option<u64>> {
        let shared = self.shared();
        if let Some(limit) = shared.refresh_live_budget(true) {
            return Ok(Some(limit));
        }
        Ok(self.budget())
    }

    /// The driver's reading behind a live budget, as last taken (`None`: the budget is
    /// fixed, or no driver reports one).
    pub fn driver_reading(&self) -> Option<DriverMemory> {
        self.shared().live.lock().last
    }

    /// Whether the budget follows the driver ([`Budget::FractionOfAvailable`]).
    pub fn is_budget_live(&self) -> bool {
        self.shared().is_live_budget()
    }

    /// Makes the budget live or fixed as `budget` says (from `set_budget`).
    pub(super) fn set_live(&self, budget: Budget) {
        let mut live = self.shared().live.lock();
        live.fraction = match budget {
            Budget::FractionOfAvailable(f) => Some(f),
            _ => None,
        };
        live.last = None;
        // Due at once when live (the first allocation or `maintain` reads the driver).
        let due = if live.fraction.is_some() { 0 } else { NOT_LIVE };
        self.shared().live_due.store(due, Ordering::Relaxed);
    }
}

/// The default interval between readings: 100 ms, so that a neighbour's allocation is
/// seen within a tenth of a second while a hot loop pays for one query in thousands of
/// allocations.
pub(super) const DEFAULT_REFRESH: Duration = Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(budget: u64, usage: u64) -> DriverMemory {
        DriverMemory {
            budget,
            usage,
            total: 80 << 30,
            source: "test",
        }
    }

    #[test]
    fn the_limit_is_the_fraction_less_what_the_process_holds_elsewhere() {
        // Alone: 80 GiB budget, the arena holds 10 of the 12 the process uses.
        assert_eq!(
            limit_for(0.5, &reading(80 << 30, 12 << 30), 10 << 30),
            (40u64 << 30) - (2 << 30)
        );
        // A neighbour took 60 GiB: the budget fell to 20.
        assert_eq!(
            limit_for(0.75, &reading(20 << 30, 12 << 30), 10 << 30),
            (15u64 << 30) - (2 << 30)
        );
        // Holding more elsewhere than the fraction allows leaves nothing.
        assert_eq!(limit_for(0.1, &reading(20 << 30, 12 << 30), 0), 0);
    }
}
