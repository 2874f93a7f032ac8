//! The tiers' statistics through the [`metrics`] facade (cargo feature `metrics`), next to
//! the arena's ([`Arena::publish_metrics`](crate::Arena::publish_metrics)), labelled with
//! the arena's name:
//! - gauges `vramkit_tier_bytes{tier="device"|"host"}` (bytes of movable allocations in
//!   each tier), `vramkit_host_tier_reserved_bytes`, `vramkit_host_tier_budget_bytes`
//!   (when set), `vramkit_movable_allocations`, `vramkit_pinned_allocations`;
//! - counters `vramkit_evictions_total`, `vramkit_restores_total`,
//!   `vramkit_defrag_moves_total`, `vramkit_tier_moved_bytes_total{direction="to_host"|
//!   "to_device"|"defragment"}` and `vramkit_host_tier_full_total` (set with `absolute`: publishing twice never
//!   double-counts).

use metrics::{counter, gauge};

use super::Tiers;

impl Tiers {
    /// Publishes the arena's metrics and the tiers' (see the module docs of
    /// `tier::metrics`).
    pub fn publish_metrics(&self) {
        self.arena().publish_metrics();
        let s = self.stats();
        let arena = self.arena().name().to_string();
        for (tier, bytes) in [("device", s.device_bytes), ("host", s.host_bytes)] {
            gauge!("vramkit_tier_bytes", "arena" => arena.clone(), "tier" => tier)
                .set(bytes as f64);
        }
        let set = |name: &'static str, value: f64| {
            gauge!(name, "arena" => arena.clone()).set(value);
        };
        set("vramkit_host_tier_reserved_bytes", s.host_reserved as f64);
        if let Some(b) = s.host_budget {
            set("vramkit_host_tier_budget_bytes", b as f64);
        }
        set("vramkit_movable_allocations", s.movables as f64);
        set("vramkit_pinned_allocations", s.pinned as f64);
        let total = |name: &'static str, value: u64| {
            counter!(name, "arena" => arena.clone()).absolute(value);
        };
        total("vramkit_evictions_total", s.evictions);
        total("vramkit_restores_total", s.restores);
        total("vramkit_defrag_moves_total", s.defrag_moves);
        total("vramkit_host_tier_full_total", s.host_full);
        for (direction, bytes) in [
            ("to_host", s.bytes_evicted),
            ("to_device", s.bytes_restored),
            ("defragment", s.bytes_defrag_moved),
        ] {
            counter!("vramkit_tier_moved_bytes_total", "arena" => arena.clone(), "direction" => direction)
                .absolute(bytes);
        }
        // Cumulative, but a gauge: the facade's counters hold whole numbers.
        set(
            "vramkit_restore_stall_seconds",
            s.restore_stall.as_secs_f64(),
        );
    }
}
