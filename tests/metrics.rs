//! The arena's metrics through the `metrics` facade (feature `metrics`): every name is
//! published with consistent values, counters never go back, and publishing twice does
//! not double-count. Run with `cargo test --features metrics --test metrics`.
#![cfg(feature = "metrics")]

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, Key, KeyName, Metadata, Recorder, SharedString,
    Unit,
};
use vramkit::arena::Budget;
use vramkit::{Arena, ArenaConfig};

/// Last value of every metric, by `name{label=value,...}`.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<BTreeMap<String, f64>>>);

struct Slot(Capture, String);

impl CounterFn for Slot {
    fn increment(&self, value: u64) {
        *self.0 .0.lock().unwrap().entry(self.1.clone()).or_default() += value as f64;
    }
    fn absolute(&self, value: u64) {
        let mut m = self.0 .0.lock().unwrap();
        let v = m.entry(self.1.clone()).or_default();
        *v = v.max(value as f64);
    }
}

impl GaugeFn for Slot {
    fn increment(&self, value: f64) {
        *self.0 .0.lock().unwrap().entry(self.1.clone()).or_default() += value;
    }
    fn decrement(&self, value: f64) {
        *self.0 .0.lock().unwrap().entry(self.1.clone()).or_default() -= value;
    }
    fn set(&self, value: f64) {
        self.0 .0.lock().unwrap().insert(self.1.clone(), value);
    }
}

fn key_string(key: &Key) -> String {
    let labels: Vec<String> = key
        .labels()
        .map(|l| format!("{}={}", l.key(), l.value()))
        .collect();
    format!("{}{{{}}}", key.name(), labels.join(","))
}

impl Recorder for Capture {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(Arc::new(Slot(self.clone(), key_string(key))))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(Arc::new(Slot(self.clone(), key_string(key))))
    }
    fn register_histogram(&self, _: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::noop()
    }
}

#[test]
fn every_metric_is_published_consistently_and_counters_only_grow() {
    let arena = Arena::new(
        common::gpu(),
        ArenaConfig {
            name: "metrics-test".into(),
            budget: Budget::Bytes(256 << 20),
            ..Default::default()
        },
    )
    .unwrap();
    let capture = Capture::default();
    let get = |name: &str| -> f64 {
        let m = capture.0.lock().unwrap();
        *m.get(&format!("{name}{{arena=metrics-test}}"))
            .unwrap_or_else(|| panic!("{name} published: {:?}", m.keys()))
    };
    let live: Vec<_> = (0..20)
        .map(|i| arena.alloc(4096 * (i + 1), "m").unwrap())
        .collect();
    metrics::with_local_recorder(&capture, || arena.publish_metrics());
    assert_eq!(get("vramkit_live_allocations"), 20.0);
    assert!(get("vramkit_allocated_bytes") <= get("vramkit_reserved_bytes"));
    assert!(get("vramkit_allocated_bytes") <= get("vramkit_active_bytes"));
    assert_eq!(get("vramkit_budget_bytes"), (256u64 << 20) as f64);
    let allocations = get("vramkit_allocations_total");
    assert_eq!(allocations, 20.0);
    for name in [
        "vramkit_cached_bytes",
        "vramkit_peak_reserved_bytes",
        "vramkit_pending_frees",
        "vramkit_blocks",
        "vramkit_fragmentation_ratio",
        "vramkit_frees_total",
        "vramkit_retries_total",
        "vramkit_out_of_memory_total",
        "vramkit_gpu_waits_total",
        "vramkit_blocks_created_total",
        "vramkit_blocks_released_total",
    ] {
        assert!(get(name) >= 0.0, "{name}");
    }
    {
        let m = capture.0.lock().unwrap();
        let pool_reserved: f64 = m
            .iter()
            .filter(|(k, _)| k.starts_with("vramkit_pool_reserved_bytes{"))
            .map(|(_, v)| v)
            .sum();
        assert_eq!(
            pool_reserved,
            *m.get("vramkit_reserved_bytes{arena=metrics-test}").unwrap(),
            "pools add up"
        );
        assert!(
            m.keys().any(|k| k.contains("pool=default")),
            "{:?}",
            m.keys()
        );
    }
    // Publishing again does not double-count; frees and an OOM move their counters up.
    metrics::with_local_recorder(&capture, || arena.publish_metrics());
    assert_eq!(get("vramkit_allocations_total"), allocations);
    drop(live);
    assert!(arena.alloc(1 << 40, "too big").is_err());
    arena.synchronize().unwrap();
    metrics::with_local_recorder(&capture, || arena.publish_metrics());
    assert_eq!(get("vramkit_frees_total"), 20.0);
    assert!(get("vramkit_out_of_memory_total") >= 1.0);
    assert_eq!(get("vramkit_live_allocations"), 0.0);
    assert_eq!(get("vramkit_allocated_bytes"), 0.0);
}
