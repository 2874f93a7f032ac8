//! The memory history on a real adapter: the ring stays bounded and its timeline exact,
//! the Perfetto trace parses and balances, the timeline is well-formed SVG, profiled
//! kernels land on the GPU track, and an out-of-memory error names who holds the memory.

use crate::common;
use crate::observe;

use std::collections::{HashMap, HashSet};

use rand::Rng;
use vramkit::arena::{Budget, HistoryConfig};
use vramkit::{Arena, ArenaConfig, Error, Runtime, RuntimeConfig};

#[test]
fn the_ring_is_bounded_and_its_timeline_ends_where_the_arena_is() {
    let arena = Arena::new(common::gpu(), Default::default()).unwrap();
    let mut rng = common::rng();
    // Allocations made before recording starts are the baseline.
    let early: Vec<_> = (0..5)
        .map(|i| arena.alloc(4096 << i, "early").unwrap())
        .collect();
    let capacity = 64;
    arena.record_history(Some(HistoryConfig {
        capacity,
        backtraces: false,
    }));
    let labels = ["a", "b", "c"];
    let mut live = Vec::new();
    let mut events = 0u64;
    for _ in 0..600 {
        if live.is_empty() || rng.gen_bool(0.55) {
            let size = rng.gen_range(1..256 << 10);
            live.push(arena.alloc(size, labels[rng.gen_range(0..3)]).unwrap());
        } else {
            live.swap_remove(rng.gen_range(0..live.len()));
        }
        events += 1;
        if rng.gen_bool(0.02) {
            arena.synchronize().unwrap();
            arena.trim();
        }
    }
    drop(early);
    let h = arena.history().unwrap();
    assert!(h.events.len() <= capacity, "{} events kept", h.events.len());
    // 605 allocations and frees at least (block events come on top) through 64 places.
    assert!(
        h.dropped >= events + 5 - capacity as u64,
        "dropped {}",
        h.dropped
    );
    // Folding kept the baseline exact: the timeline ends where the arena is.
    let (by_label, reserved) = h.bytes_at_end();
    let stats = arena.stats();
    let want: Vec<(String, u64)> = stats
        .per_label
        .iter()
        .filter(|(_, l)| l.bytes > 0)
        .map(|(n, l)| (n.clone(), l.bytes))
        .collect();
    let got: HashMap<_, _> = by_label.into_iter().collect();
    assert_eq!(got, want.into_iter().collect::<HashMap<_, _>>());
    assert_eq!(reserved, stats.reserved);
    assert!(
        !got.contains_key("early"),
        "the early allocations were freed"
    );
}

#[test]
fn backtraces_follow_their_allocations_through_a_ring_that_wraps() {
    let arena = Arena::new(common::gpu(), Default::default()).unwrap();
    let mut rng = common::rng();
    let capacity = 16;
    arena.record_history(Some(HistoryConfig {
        capacity,
        backtraces: true,
    }));
    // More events than slots, so slots are reused by events of other kinds.
    for _ in 0..(3 * capacity + rng.gen_range(0..capacity)) {
        drop(arena.alloc(rng.gen_range(1..4096), "traced").unwrap());
    }
    let history = arena.history().unwrap();
    assert_eq!(history.events.len(), capacity);
    for e in &history.events {
        match e.kind {
            vramkit::arena::EventKind::Alloc | vramkit::arena::EventKind::Reuse => {
                let bt = e.backtrace.as_ref().expect("an allocation's backtrace");
                assert_eq!(bt.status(), std::backtrace::BacktraceStatus::Captured);
            }
            _ => assert!(e.backtrace.is_none(), "{:?} with a backtrace", e.kind),
        }
    }
}

#[test]
fn the_chrome_trace_parses_balances_and_shows_profiled_kernels() {
    // A device of its own: profiling is per device, and on the shared one the spans of
    // tests running beside this one (an `axpby`, seen on the H200) landed in its trace.
    let gpu = vramkit::Gpu::headless().unwrap();
    let rt = Runtime::new(
        &gpu,
        RuntimeConfig {
            arena: ArenaConfig {
                name: "trace".into(),
                // Device memory even on CPU adapters: uploads then go through staging
                // and a GPU copy, which the profile times.
                block_memory: vramkit::arena::BlockMemory::Device,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    rt.arena().record_history(Some(HistoryConfig::default()));
    rt.gpu().set_profiling(true).unwrap();
    let report = observe::mixed_workload(&rt, 30, 15, 7).unwrap();
    assert_eq!(report.mismatches, 0, "axpy against the CPU");
    assert_eq!(report.ooms, 2, "each spike ends in an out-of-memory error");
    let filed = rt.gpu().collect_profile(true).unwrap();
    let h = rt.arena().history().unwrap();
    let json: serde_json::Value = serde_json::from_str(&h.to_chrome_trace()).unwrap();
    let events = json["traceEvents"].as_array().unwrap();
    let live: HashSet<u64> = json["vramkit"]["live"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let ids = |ph: &str| -> HashSet<u64> {
        events
            .iter()
            .filter(|e| e["ph"] == ph)
            .map(|e| e["id"].as_u64().unwrap())
            .collect()
    };
    let (begun, ended) = (ids("b"), ids("e"));
    assert!(!begun.is_empty());
    for id in &begun {
        assert!(
            ended.contains(id) != live.contains(id),
            "allocation {id}: freed in the trace or live at the copy, exactly one"
        );
    }
    assert!(ended.is_subset(&begun), "every end has its begin");
    for e in events.iter().filter(|e| e["ph"] == "C") {
        let (a, r) = (
            e["args"]["allocated"].as_u64(),
            e["args"]["reserved"].as_u64(),
        );
        assert!(a.is_some() && r.is_some(), "{e}");
    }
    // Kernels, uploads and downloads, timed on the GPU, on their own track.
    let gpu: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(
        filed > 0 && gpu.len() >= filed,
        "{filed} filed, {} spans",
        gpu.len()
    );
    assert!(gpu.iter().all(|e| e["pid"] == 2));
    let work: HashSet<&str> = gpu.iter().map(|e| e["name"].as_str().unwrap()).collect();
    assert!(work.contains("axpy"), "{work:?}");
    if common::gpu().has(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS) {
        assert!(
            work.contains("upload") && work.contains("download"),
            "{work:?}"
        );
    }
    assert!(
        work.is_subset(&["axpy", "upload", "download"].into()),
        "{work:?}"
    );
    assert!(gpu.iter().any(|e| e["dur"].as_f64().unwrap() > 0.0));
    let labels: HashSet<&str> = events
        .iter()
        .filter(|e| e["ph"] == "b")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert!(
        labels.contains("spike") && labels.contains("weights"),
        "{labels:?}"
    );
}

#[cfg(feature = "timeline")]
#[test]
fn the_timeline_is_well_formed_svg_with_a_legend() {
    let arena = Arena::new(common::gpu(), Default::default()).unwrap();
    arena.record_history(Some(HistoryConfig::default()));
    let mut kept = Vec::new();
    for i in 0..200u64 {
        let label = ["weights & biases", "acts <fp16>", "scratch"][(i % 3) as usize];
        kept.push(arena.alloc(1024 * (1 + i % 17), label).unwrap());
        if i % 4 == 3 {
            kept.remove(0);
        }
    }
    let svg = arena.history().unwrap().to_timeline_svg(800, 400).unwrap();
    let doc = roxmltree::Document::parse(&svg).expect("well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let text: String = doc
        .descendants()
        .filter(|n| n.is_text())
        .map(|n| n.text().unwrap_or(""))
        .collect();
    for want in ["weights & biases", "acts <fp16>", "reserved"] {
        assert!(text.contains(want), "legend has {want:?}");
    }
}

/// An arena on the test GPU under a budget of `bytes`.
fn budgeted(bytes: u64) -> Arena {
    let config = ArenaConfig {
        budget: Budget::Bytes(bytes),
        ..Default::default()
    };
    Arena::new(common::gpu(), config).unwrap()
}

#[test]
fn out_of_memory_names_the_labels_that_hold_the_memory() {
    let arena = budgeted(16 << 20);
    let _big = arena.alloc(9 << 20, "big tensor").unwrap();
    let _small = arena.alloc(1 << 20, "small").unwrap();
    let Err(Error::OutOfMemory(oom)) = arena.alloc(8 << 20, "too much") else {
        panic!("expected an out-of-memory error");
    };
    assert_eq!(oom.top_labels[0].0, "big tensor");
    assert!(oom.top_labels[0].1 >= 9 << 20);
    assert_eq!(oom.top_labels[1].0, "small");
    let message = oom.to_string();
    assert!(
        message.contains("largest holders: 'big tensor'"),
        "{message}"
    );
}

/// A refused request is on the history, in the trace and on the timeline: a red bar as
/// tall as the request, standing on what was live, inside the plot's range (it was a
/// one-pixel line, or nothing, while the reserved line jumped beside it).
#[test]
fn refused_requests_are_marked_on_the_history_and_the_timeline() {
    let arena = budgeted(16 << 20);
    arena.record_history(Some(HistoryConfig::default()));
    let _held = arena.alloc(3 << 20, "held").unwrap();
    assert!(arena.alloc(20 << 20, "spike").is_err());
    let history = arena.history().unwrap();
    let refused: Vec<_> = history
        .events
        .iter()
        .filter(|e| e.kind == vramkit::arena::EventKind::Failed)
        .collect();
    assert_eq!(refused.len(), 1, "{:?}", history.events);
    assert_eq!(refused[0].size, 20 << 20);
    assert_eq!(history.labels[refused[0].label as usize], "spike");
    #[cfg(feature = "timeline")]
    {
        let svg = history.to_timeline_svg(800, 400).unwrap();
        assert!(svg.contains("refused request"), "no legend for the refusal");
        // The y axis reaches the bar's top: 3 MiB live + 20 MiB asked, above 16 MiB reserved
        // at most.
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let ticks: Vec<f64> = doc
            .descendants()
            .filter(|n| n.is_text())
            .filter_map(|n| n.text()?.trim().parse::<f64>().ok())
            .collect();
        assert!(
            ticks.iter().any(|&t| t >= 20.0),
            "the axis stops below the refused request: {ticks:?}"
        );
    }
    let dir = std::env::temp_dir().join(format!("vramkit-refused-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let trace = dir.join("trace.json");
    history.write_chrome_trace(&trace).unwrap();
    let text = std::fs::read_to_string(&trace).unwrap();
    assert!(text.contains("out of memory: 'spike'"), "{text}");
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs `tests/support/memory_viz_check.py` on `snapshot`; its output.
fn memory_viz_check(snapshot: &[u8], min_events: usize) -> String {
    let dir = std::env::temp_dir().join(format!("vramkit-memviz-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("{}.pickle", common::rng().gen::<u64>()));
    std::fs::write(&path, snapshot).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/memory_viz_check.py"
    );
    let out = std::process::Command::new("python3")
        .arg(script)
        .arg(&path)
        .arg(min_events.to_string())
        .output()
        .expect("python3 runs the memory_viz check (install it: apt-get install -y python3)");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let _ = std::fs::remove_file(&path);
    text
}

#[test]
fn the_memory_viz_snapshot_loads_in_python_and_replays_as_pytorchs_viewer_reads_it() {
    let arena = Arena::new(common::gpu(), Default::default()).unwrap();
    let mut rng = common::rng();
    let early: Vec<_> = (0..3)
        .map(|i| arena.alloc(8192 << i, "before recording").unwrap())
        .collect();
    // A full ring, then one that folded its oldest events away.
    for capacity in [100_000, 300] {
        arena.record_history(Some(HistoryConfig {
            capacity,
            backtraces: false,
        }));
        let labels = ["weights", "activations", "scratch"];
        let mut live = Vec::new();
        for _ in 0..800 {
            if live.is_empty() || rng.gen_bool(0.55) {
                let size = if rng.gen_bool(0.05) {
                    rng.gen_range(16 << 20..40 << 20)
                } else {
                    rng.gen_range(1..512 << 10)
                };
                live.push(arena.alloc(size, labels[rng.gen_range(0..3)]).unwrap());
            } else {
                live.swap_remove(rng.gen_range(0..live.len()));
            }
            if rng.gen_bool(0.02) {
                arena.synchronize().unwrap();
                arena.trim();
            }
        }
        let snapshot = arena.memory_viz_snapshot();
        let stats = arena.stats();
        let out = memory_viz_check(&snapshot, capacity.min(800));
        assert!(
            out.contains(&format!("ok: {} segments", stats.blocks)),
            "{out} (the arena holds {} blocks)",
            stats.blocks
        );
    }
    drop(early);
}
