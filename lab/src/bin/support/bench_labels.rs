//! The `labels` suite: a server's loop that labels every allocation differently
//! (`format!("request {i}")`), a million alloc+free pairs, against the same loop under one
//! label: host memory held after it, the summary's size, and the time per pair.

use std::time::Instant;

use vramkit::{Arena, ArenaConfig, Gpu};

use crate::Figures;

/// Resident host memory of this process in bytes (Linux; 0 elsewhere).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// `pairs` alloc+free pairs of 256 bytes, each labelled by `label(i)`; ns per pair.
fn pairs(arena: &Arena, pairs: u64, label: impl Fn(u64) -> String) -> f64 {
    let start = Instant::now();
    for i in 0..pairs {
        let l = label(i);
        match arena.alloc(256, &l) {
            Ok(a) => drop(a),
            Err(e) => panic!("labels suite: {e}"),
        }
    }
    start.elapsed().as_nanos() as f64 / pairs as f64
}

pub fn suite_labels(gpu: &Gpu, figures: &mut Figures) {
    let n: u64 = std::env::var("VRAMKIT_LABEL_PAIRS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let arena = |name: &str| {
        Arena::new(
            gpu,
            ArenaConfig {
                name: name.into(),
                ..Default::default()
            },
        )
        .unwrap_or_else(|e| panic!("labels suite: {e}"))
    };
    // The peer: the same loop, the same label text work, one label.
    let same = arena("one-label");
    pairs(&same, n / 10, |_| "request".to_string());
    // The label is formatted from an integer as the distinct ones are, to the same text.
    let one_ns = pairs(&same, n, |_| {
        format!("request {}", std::hint::black_box(0u64))
    });
    let distinct = arena("distinct-labels");
    pairs(&distinct, 10_000, |i| format!("warm {i}"));
    let before = resident_bytes();
    let distinct_ns = pairs(&distinct, n, |i| format!("request {i}"));
    let after = resident_bytes();
    let s = distinct.stats();
    let summary = distinct.summary();
    println!(
        "\nlabels: {n} distinct labels: {:.0} ns/pair ({one_ns:.0} under one label), \
         host memory {:+} bytes, {} labels kept, {} folded, summary {} bytes in {} lines",
        distinct_ns,
        after as i64 - before as i64,
        s.per_label.len(),
        s.folded_labels.labels,
        summary.len(),
        summary.lines().count()
    );
    figures.add("labels_pairs", n);
    figures.add("labels_distinct_ns_per_pair", format!("{distinct_ns:.1}"));
    figures.add("labels_one_label_ns_per_pair", format!("{one_ns:.1}"));
    figures.add(
        "labels_distinct_vs_one_label",
        format!("{:.2}", distinct_ns / one_ns),
    );
    figures.add("labels_host_bytes_growth", after as i64 - before as i64);
    figures.add("labels_kept", s.per_label.len());
    figures.add("labels_folded", s.folded_labels.labels);
    figures.add("labels_summary_bytes", summary.len());
    figures.add("labels_summary_lines", summary.lines().count());
}
