//! The arena's statistics through the [`metrics`] crate facade (cargo feature `metrics`):
//! the application installs the recorder it wants (Prometheus, StatsD, ...), vramkit
//! publishes into it.
//!
//! # What is published
//! [`Arena::publish_metrics`] takes one [`Arena::stats`] snapshot and sets, with the label
//! `arena` (`device` too on a device set's arenas, and `pool` for the per-pool gauges), following Prometheus conventions (base
//! units, `_total` for counters):
//! - gauges `vramkit_allocated_bytes`, `vramkit_active_bytes` (live plus pending frees),
//!   `vramkit_reserved_bytes`, `vramkit_cached_bytes` (reserved minus allocated, as
//!   PyTorch users read it), `vramkit_size_cache_bytes`, `vramkit_budget_bytes` (when a
//!   budget is set), `vramkit_peak_reserved_bytes`, `vramkit_live_allocations`,
//!   `vramkit_pending_frees`, `vramkit_blocks`, `vramkit_fragmentation_ratio`;
//! - per pool: `vramkit_pool_reserved_bytes` and `vramkit_pool_used_bytes` (bytes in
//!   ranges that are live, pending or cached);
//! - counters `vramkit_allocations_total`, `vramkit_frees_total`, `vramkit_retries_total`,
//!   `vramkit_out_of_memory_total`, `vramkit_gpu_waits_total`,
//!   `vramkit_blocks_created_total`, `vramkit_blocks_released_total`,
//!   `vramkit_lock_revocations_total` (another thread took the arena's lock from the
//!   thread it was biased to), all set with `absolute`, so publishing twice never
//!   double-counts.
//!
//!
//! The histogram `vramkit_allocation_seconds` is fed by `publish_metrics` too: one
//! allocation in [`LATENCY_SAMPLE`] per thread is timed, and the times wait in the arena
//! (up to 4096 of them, then they go to the recorder at once). Published as they happen:
//! the counters `vramkit_uploaded_bytes_total`, `vramkit_downloaded_bytes_total`
//! and `vramkit_kernels_dispatched_total`, and, while GPU profiling is on
//! ([`Gpu::set_profiling`](crate::Gpu::set_profiling)), the histogram
//! `vramkit_gpu_work_seconds{work="..."}` (a kernel's name, "upload" or "download"). Eviction and restore counters
//! and per-tier gauges are published by `Tiers::publish_metrics` (`tier::metrics`).
//!
//! # Cost
//! On the allocation path, a thread-local counter and, on one allocation in 64, two
//! clock reads and a push under a lock (the latency sample); the arena already keeps the
//! other counters. Publishing is a snapshot (one lock, a walk over the
//! blocks) plus one facade call per metric. Call it where a dashboard needs fresh values:
//! once a frame or step, or from a timer thread.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::Duration;

use metrics::{counter, gauge, histogram};

/// One allocation in this many (per thread) is timed for `vramkit_allocation_seconds`:
/// two clock reads on every allocation would cost more than the 5 % the feature may.
pub const LATENCY_SAMPLE: u32 = 64;

/// Timed allocations kept for [`Arena::publish_metrics`] at most; more are handed to the
/// recorder at once.
const MAX_HELD_SAMPLES: usize = 4096;

thread_local! {
    static UNTIL_SAMPLE: Cell<u32> = const { Cell::new(0) };
}

/// Whether this allocation is the thread's sampled one.
#[inline]
pub(in crate::arena) fn sample_latency() -> bool {
    UNTIL_SAMPLE.with(|c| {
        let n = c.get();
        if n == 0 {
            c.set(LATENCY_SAMPLE - 1);
            true
        } else {
            c.set(n - 1);
            false
        }
    })
}

use crate::arena::Arena;

impl Arena {
    /// Keeps one sampled allocation's latency for the next [`publish_metrics`]
    /// (`Self::publish_metrics`). Handing each to the recorder as it came cost the
    /// recorder's lookup of the metric per sample, microseconds on a virtualised host: far
    /// more than the feature may add to a pair (BENCHMARKS.md, Observability).
    pub(in crate::arena) fn note_latency(&self, took: Duration) {
        let mut held = self.shared().latency_samples.lock();
        held.push(took.as_secs_f64());
        if held.len() >= MAX_HELD_SAMPLES {
            let samples = std::mem::take(&mut *held);
            drop(held);
            self.record_latencies(&samples);
        }
    }

    /// Hands `samples` to the recorder with one lookup of the histogram.
    fn record_latencies(&self, samples: &[f64]) {
        if samples.is_empty() {
            return;
        }
        let histogram = histogram!("vramkit_allocation_seconds", self.metric_labels());
        for &s in samples {
            histogram.record(s);
        }
    }

    /// Publishes a snapshot of the statistics through the `metrics` facade (see the module
    /// docs of `arena::metrics` for the names). Without an installed recorder this costs
    /// the snapshot and does nothing else.
    ///
    /// ```no_run
    /// let gpu = vramkit::Gpu::headless()?;
    /// let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// // metrics_exporter_prometheus::PrometheusBuilder::new().install()?; (your choice)
    /// let _a = arena.alloc(1 << 20, "weights")?;
    /// arena.publish_metrics();
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn publish_metrics(&self) {
        let samples = std::mem::take(&mut *self.shared().latency_samples.lock());
        self.record_latencies(&samples);
        let s = self.stats();
        let labels = self.metric_labels();
        let set = |name: &'static str, value: f64| {
            gauge!(name, labels.clone()).set(value);
        };
        set("vramkit_allocated_bytes", s.allocated as f64);
        set("vramkit_active_bytes", s.active as f64);
        set("vramkit_reserved_bytes", s.reserved as f64);
        set("vramkit_cached_bytes", s.cached as f64);
        set("vramkit_size_cache_bytes", s.size_cache as f64);
        set("vramkit_peak_reserved_bytes", s.peak_reserved as f64);
        set("vramkit_live_allocations", s.live_allocations as f64);
        set("vramkit_pending_frees", s.pending_frees as f64);
        set("vramkit_blocks", s.blocks as f64);
        set("vramkit_fragmentation_ratio", s.fragmentation);
        if let Some(budget) = s.budget {
            set("vramkit_budget_bytes", budget as f64);
        }
        let total = |name: &'static str, value: u64| {
            counter!(name, labels.clone()).absolute(value);
        };
        total("vramkit_allocations_total", s.allocations);
        total("vramkit_frees_total", s.frees);
        total("vramkit_retries_total", s.retries);
        total("vramkit_out_of_memory_total", s.ooms);
        total("vramkit_gpu_waits_total", s.waits);
        total("vramkit_blocks_created_total", s.blocks_created);
        total("vramkit_blocks_released_total", s.blocks_released);
        total("vramkit_lock_revocations_total", s.lock_revocations);
        let mut pools: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for b in &s.per_block {
            let p = pools.entry(b.pool.as_str()).or_default();
            p.0 += b.size;
            p.1 += b.used;
        }
        for (pool, (reserved, used)) in pools {
            let mut with_pool = labels.clone();
            with_pool.push(metrics::Label::new("pool", pool.to_string()));
            gauge!("vramkit_pool_reserved_bytes", with_pool.clone()).set(reserved as f64);
            gauge!("vramkit_pool_used_bytes", with_pool).set(used as f64);
        }
    }

    /// `arena="name"`, and `device="i"` for an arena of a device set
    /// ([`ArenaConfig::device_index`](crate::arena::ArenaConfig::device_index)).
    fn metric_labels(&self) -> Vec<metrics::Label> {
        let config = &self.shared().config;
        let mut labels = vec![metrics::Label::new("arena", config.name.clone())];
        if let Some(i) = config.device_index {
            labels.push(metrics::Label::new("device", i.to_string()));
        }
        labels
    }
}
