//! The arena's metrics through the `metrics` facade (feature `metrics`): every name is
//! published with consistent values, counters never go back, and publishing twice does
//! not double-count. Run with `cargo test --features metrics --test it metrics::`.
#![cfg(feature = "metrics")]

use crate::common;
use crate::observe;

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
    assert_eq!(
        get("vramkit_cached_bytes"),
        get("vramkit_reserved_bytes") - get("vramkit_allocated_bytes"),
        "cached as PyTorch users read it"
    );
    for name in [
        "vramkit_cached_bytes",
        "vramkit_size_cache_bytes",
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
        "vramkit_lock_revocations_total",
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

/// A Prometheus text-format scrape, checked strictly: every sample line is
/// `name{label="value",...} number`, every name has a `# TYPE` line before it (histogram
/// and summary series by their base name), and no series appears twice. Returns
/// `series -> value` and `base name -> type`.
fn parse_scrape(text: &str) -> (BTreeMap<String, f64>, BTreeMap<String, String>) {
    let mut samples = BTreeMap::new();
    let mut types = BTreeMap::new();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars().enumerate().all(|(i, c)| {
                c.is_ascii_alphabetic() || c == '_' || c == ':' || (i > 0 && c.is_ascii_digit())
            })
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let mut parts = rest.split_whitespace();
            let (name, ty) = (parts.next().unwrap(), parts.next().unwrap());
            assert!(name_ok(name), "TYPE name {name:?}");
            assert!(
                ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                "{line}"
            );
            types.insert(name.to_string(), ty.to_string());
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("{line}"));
        let value: f64 = value.parse().unwrap_or_else(|_| panic!("value in {line}"));
        let name = series.split('{').next().unwrap();
        assert!(name_ok(name), "{line}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            let inner = labels
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'))
                .unwrap_or_else(|| panic!("labels in {line}"));
            for pair in inner.split("\",") {
                let (k, v) = pair.split_once("=\"").unwrap_or_else(|| panic!("{line}"));
                assert!(name_ok(k), "label {k:?} in {line}");
                assert!(!v.trim_end_matches('"').contains('"'), "{line}");
            }
        }
        let base = ["_sum", "_count", "_bucket"]
            .iter()
            .find_map(|s| name.strip_suffix(s).filter(|b| types.contains_key(*b)))
            .unwrap_or(name);
        assert!(types.contains_key(base), "no TYPE before {line}");
        assert!(
            samples.insert(series.to_string(), value).is_none(),
            "{series} twice"
        );
    }
    (samples, types)
}

#[test]
fn a_prometheus_scrape_has_every_metric_with_consistent_values() {
    use metrics_exporter_prometheus::PrometheusBuilder;
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let rt = vramkit::Runtime::new(
        common::gpu(),
        vramkit::RuntimeConfig {
            arena: ArenaConfig {
                name: "scrape".into(),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    rt.gpu().set_profiling(true).unwrap();
    let tiers = vramkit::tier::Tiers::new(rt.arena(), Default::default()).unwrap();
    let movable = tiers.alloc(1 << 20, "movable").unwrap();
    let scrape = || {
        metrics::with_local_recorder(&recorder, || {
            let report = observe::mixed_workload(&rt, 80, 40, 3).unwrap();
            assert_eq!(report.mismatches, 0, "axpy against the CPU");
            assert!(report.ooms >= 1, "the spike ran out");
            tiers.evict(&[&movable]).unwrap();
            tiers.make_resident(&[&movable]).map(drop).unwrap();
            rt.gpu().collect_profile(true).unwrap();
            tiers.publish_metrics();
        });
        parse_scrape(&handle.render())
    };
    let (first, types) = scrape();
    let value = |m: &BTreeMap<String, f64>, series: &str| -> f64 {
        *m.get(series)
            .unwrap_or_else(|| panic!("{series} in the scrape: {:?}", m.keys()))
    };
    for (name, ty) in [
        ("vramkit_allocated_bytes", "gauge"),
        ("vramkit_active_bytes", "gauge"),
        ("vramkit_reserved_bytes", "gauge"),
        ("vramkit_cached_bytes", "gauge"),
        ("vramkit_live_allocations", "gauge"),
        ("vramkit_fragmentation_ratio", "gauge"),
        ("vramkit_pool_reserved_bytes", "gauge"),
        ("vramkit_pool_used_bytes", "gauge"),
        ("vramkit_allocations_total", "counter"),
        ("vramkit_frees_total", "counter"),
        ("vramkit_retries_total", "counter"),
        ("vramkit_out_of_memory_total", "counter"),
        ("vramkit_uploaded_bytes_total", "counter"),
        ("vramkit_downloaded_bytes_total", "counter"),
        ("vramkit_kernels_dispatched_total", "counter"),
        ("vramkit_allocation_seconds", "summary"),
        ("vramkit_gpu_work_seconds", "summary"),
        ("vramkit_tier_bytes", "gauge"),
        ("vramkit_host_tier_reserved_bytes", "gauge"),
        ("vramkit_movable_allocations", "gauge"),
        ("vramkit_pinned_allocations", "gauge"),
        ("vramkit_restore_stall_seconds", "gauge"),
        ("vramkit_evictions_total", "counter"),
        ("vramkit_restores_total", "counter"),
        ("vramkit_defrag_moves_total", "counter"),
        ("vramkit_host_tier_full_total", "counter"),
        ("vramkit_tier_moved_bytes_total", "counter"),
    ] {
        assert_eq!(types.get(name).map(String::as_str), Some(ty), "{name}");
    }
    let arena = |name: &str| format!("{name}{{arena=\"scrape\"}}");
    assert!(
        value(&first, &arena("vramkit_allocated_bytes"))
            <= value(&first, &arena("vramkit_reserved_bytes"))
    );
    assert!(value(&first, &arena("vramkit_out_of_memory_total")) >= 1.0);
    assert!(value(&first, "vramkit_kernels_dispatched_total") >= 80.0);
    assert!(value(&first, "vramkit_uploaded_bytes_total") > 0.0);
    assert!(value(&first, "vramkit_gpu_work_seconds_count{work=\"axpy\"}") >= 80.0);
    assert!(value(&first, &arena("vramkit_evictions_total")) >= 1.0);
    assert!(value(&first, &arena("vramkit_restores_total")) >= 1.0);
    assert_eq!(
        value(
            &first,
            "vramkit_tier_bytes{arena=\"scrape\",tier=\"device\"}"
        ),
        (1 << 20) as f64
    );
    assert!(
        value(
            &first,
            "vramkit_tier_moved_bytes_total{arena=\"scrape\",direction=\"to_host\"}"
        ) >= (1 << 20) as f64
    );
    let (second, _) = scrape();
    for (series, v) in &first {
        let name = series.split('{').next().unwrap();
        if types.get(name).map(String::as_str) == Some("counter") {
            assert!(value(&second, series) >= *v, "{series} went back");
        }
    }
    assert!(
        value(&second, &arena("vramkit_allocations_total"))
            > value(&first, &arena("vramkit_allocations_total"))
    );
}

/// Each transfer counts its bytes once, whichever path it takes: pinned buffers (one GPU
/// copy, or the staging rings where no pinned memory could be had) and plain slices.
#[test]
fn transfers_count_their_bytes_once() {
    use vramkit::stream::{Downloader, PinnedBuffer, Uploader};
    let gpu = common::gpu();
    let arena = Arena::new(gpu, Default::default()).unwrap();
    let uploader = Uploader::new(gpu, Default::default());
    let downloader = Downloader::new(gpu, Default::default());
    let a = arena.alloc(1 << 16, "transfers").unwrap();
    let mut pinned = PinnedBuffer::new(gpu, 1 << 16, "transfers").unwrap();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || {
        uploader.upload_pinned(&a, 0, &pinned, 0..4096).unwrap();
        downloader
            .download_pinned(&a, 0, &mut pinned, 0..8192)
            .unwrap();
        uploader.upload(&a, 0, &[1u8; 100]).unwrap();
        downloader.download(&a, 0, 300).unwrap();
    });
    let m = capture.0.lock().unwrap();
    let get = |name: &str| m.get(&format!("{name}{{}}")).copied().unwrap_or(0.0);
    assert_eq!(get("vramkit_uploaded_bytes_total"), 4196.0, "{m:?}");
    assert_eq!(get("vramkit_downloaded_bytes_total"), 8492.0, "{m:?}");
}

/// A device set's arenas publish with `device="i"` beside their name, so one dashboard
/// tells the GPUs of a host apart.
#[test]
fn a_device_sets_metrics_carry_the_device_index() {
    common::gpu();
    let set = vramkit::devices::DeviceSet::open_with(&vramkit::devices::DeviceSetOptions {
        count: Some(2),
        ..vramkit::devices::DeviceSetOptions::from_env().unwrap()
    })
    .unwrap();
    let _held = set.device(1).alloc::<f32>(1 << 16, "on device 1").unwrap();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || set.publish_metrics());
    let seen = capture.0.lock().unwrap();
    for device in 0..2 {
        let key = format!("vramkit_live_allocations{{arena=device{device},device={device}}}");
        assert!(
            seen.contains_key(&key),
            "no {key} in {:?}",
            seen.keys().collect::<Vec<_>>()
        );
    }
    assert_eq!(
        seen["vramkit_live_allocations{arena=device1,device=1}"],
        1.0
    );
}

#[test]
fn the_ledger_publishes_one_series_per_line_with_its_bytes() {
    let gpu = vramkit::Gpu::headless().unwrap();
    let ledger = gpu.ledger();
    let mut rng = common::rng();
    let sizes: Vec<u64> = (0..5)
        .map(|_| rand::Rng::gen_range(&mut rng, 1..1000u64) * 4)
        .collect();
    let buffers: Vec<_> = sizes
        .iter()
        .map(|&size| {
            ledger
                .create_buffer(
                    &wgpu::BufferDescriptor {
                        label: Some("metrics-ledger"),
                        size,
                        usage: wgpu::BufferUsages::STORAGE,
                        mapped_at_creation: false,
                    },
                    "meshes",
                )
                .unwrap()
        })
        .collect();
    let arena = Arena::new(
        &gpu,
        ArenaConfig {
            name: "ledger-metrics".into(),
            ..Default::default()
        },
    )
    .unwrap();
    let _a = arena.alloc(1 << 20, "x").unwrap();
    let capture = Capture::default();
    let report = ledger.report();
    metrics::with_local_recorder(&capture, || report.publish_metrics());
    let m = capture.0.lock().unwrap();
    let series = |part: &str, name: &str| {
        m.iter()
            .find(|(k, _)| {
                k.starts_with("vramkit_ledger_bytes{")
                    && k.contains(&format!("part={part}"))
                    && k.contains(&format!("name={name}"))
            })
            .map(|(_, v)| *v)
    };
    assert_eq!(
        series("app", "meshes"),
        Some(sizes.iter().sum::<u64>() as f64)
    );
    assert_eq!(
        series("vramkit", "arena 'ledger-metrics'"),
        Some(arena.stats().reserved as f64)
    );
    assert!(m
        .keys()
        .any(|k| k.starts_with("vramkit_ledger_growing_owners{")));
    drop(buffers);
}

#[test]
fn the_mip_streamer_publishes_its_resident_bytes_and_budget() {
    use std::sync::Arc;
    use vramkit::mips::{MemoryMips, MipConfig, MipStreamer};
    let gpu = common::gpu();
    let mut streamer = MipStreamer::new(
        gpu,
        MipConfig {
            budget: 1 << 20,
            ..Default::default()
        },
    )
    .unwrap();
    let levels = (0..7)
        .map(|l| vec![7u8; (64usize >> l).pow(2) * 4])
        .collect();
    let source = MemoryMips::new(wgpu::TextureFormat::Rgba8Unorm, (64, 64), levels).unwrap();
    let id = streamer.add(Arc::new(source), "m").unwrap();
    streamer.set_wanted(id, 0, 1.0).unwrap();
    streamer.update().unwrap();
    let capture = Capture::default();
    metrics::with_local_recorder(&capture, || streamer.publish_metrics());
    let m = capture.0.lock().unwrap();
    let get = |name: &str| {
        m.iter()
            .find(|(k, _)| k.starts_with(&format!("{name}{{")))
            .map(|(_, v)| *v)
    };
    let s = streamer.stats();
    assert_eq!(
        get("vramkit_mip_resident_bytes"),
        Some(s.resident_bytes as f64)
    );
    assert_eq!(get("vramkit_mip_budget_bytes"), Some((1u64 << 20) as f64));
    assert_eq!(get("vramkit_mip_swaps_total"), Some(s.swaps as f64));
}
