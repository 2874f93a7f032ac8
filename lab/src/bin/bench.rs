//! The runnable benchmark: prints a short table, then one `name: value` line per figure.
//!
//! ```text
//! cargo run --release -p vramkit-lab --bin bench -- [alloc] [arena] [kernels] [stream] [vt] [tier] [plan] [recovery] [ledger] [all]
//! ```
//! With no argument every suite runs. Suites that need a GPU open one with
//! `Gpu::headless()` (VRAMKIT_BACKEND / VRAMKIT_ADAPTER pick it).

#[path = "support/alloc_bench.rs"]
mod alloc_bench;
#[path = "support/bench_defrag.rs"]
mod bench_defrag;
#[path = "support/bench_gpu.rs"]
mod bench_gpu;
#[path = "support/bench_labels.rs"]
mod bench_labels;
#[path = "support/bench_ledger.rs"]
mod bench_ledger;
#[path = "support/bench_plan.rs"]
mod bench_plan;
#[path = "support/bench_recovery.rs"]
mod bench_recovery;
#[path = "support/bench_tier.rs"]
mod bench_tier;
#[path = "support/bench_vt.rs"]
mod bench_vt;
#[path = "../../../examples/support/defrag_measure.rs"]
mod defrag_measure;
#[path = "../../../examples/support/plan_measure.rs"]
mod plan_measure;
#[path = "../../../examples/support/traces.rs"]
mod traces;
#[path = "../../../examples/support/vt_demo.rs"]
mod vt_demo;

use std::io::BufReader;

use alloc_bench::{churn, duel, fifo, from_trace, lifo, ns_per_op, Offset, RangeAlloc};
use vramkit::alloc::RangeAllocator;

/// Collects `name: value` lines to print after the tables.
#[derive(Default)]
pub struct Figures(Vec<(String, String)>);

impl Figures {
    pub fn add(&mut self, name: impl Into<String>, value: impl std::fmt::Display) {
        self.0.push((name.into(), value.to_string()));
    }
}

fn trace_path() -> String {
    std::env::var("VRAMKIT_TRACE").unwrap_or_else(|_| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/data/trace_resnet50_train.csv.gz"
        )
        .into()
    })
}

fn suite_alloc(figures: &mut Figures) {
    let mut workloads = vec![churn(400_000, 1), lifo(400_000, 2), fifo(400_000, 3)];
    match std::fs::File::open(trace_path()) {
        Ok(f) => {
            match vramkit::alloc::trace::parse_csv(BufReader::new(flate2::read::GzDecoder::new(f)))
            {
                Ok(events) => workloads.push(from_trace(&events)),
                Err(e) => eprintln!("skipping the real trace: {e}"),
            }
        }
        Err(e) => eprintln!("skipping the real trace ({}): {e}", trace_path()),
    }
    if let Ok(only) = std::env::var("VRAMKIT_ALLOC_WORKLOADS") {
        workloads.retain(|w| only.split(',').any(|o| o == w.name));
    }
    println!("\n== alloc: alloc+free, ns per operation (best of >= 7 interleaved runs), lower is better ==");
    println!(
        "{:<10} {:>10} {:>12} {:>12} {:>12} {:>10} {:>10}",
        "workload", "ops", "vramkit", "offset-all.", "range-alloc", "vs offset", "vs range"
    );
    for w in &workloads {
        // At least 7 runs and about two million operations each, interleaved.
        let runs = (2_000_000 / w.ops.len().max(1)).clamp(7, 400);
        let ((ours, f0), (off, f1)) = duel::<RangeAllocator, Offset>(w, runs);
        // range-alloc is O(n) per operation: one run is enough to rank it (and 20 s).
        let runs = if w.name == "churn80" { 1 } else { 3 };
        let (ra, f2) = if std::env::var("VRAMKIT_SKIP_RANGE_ALLOC").is_ok() {
            (f64::NAN, 0)
        } else {
            ns_per_op::<RangeAlloc>(w, runs)
        };
        println!(
            "{:<10} {:>10} {:>12.1} {:>12.1} {:>12.1} {:>9.2}x {:>9.2}x",
            w.name,
            w.ops.len(),
            ours,
            off,
            ra,
            off / ours,
            ra / ours
        );
        if f0 + f1 + f2 > 0 {
            println!(
                "{:<10} failed allocations: vramkit {f0}, offset-allocator {f1}, range-alloc {f2}",
                ""
            );
        }
        figures.add(format!("alloc_{}_ns_per_op", w.name), format!("{ours:.2}"));
        figures.add(
            format!("alloc_{}_speed_vs_offset_allocator", w.name),
            format!("{:.3}", off / ours),
        );
        figures.add(
            format!("alloc_{}_speed_vs_range_alloc", w.name),
            format!("{:.3}", ra / ours),
        );
        figures.add(format!("alloc_{}_failed_vramkit", w.name), f0);
        figures.add(format!("alloc_{}_failed_offset_allocator", w.name), f1);
    }
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let want = |s: &str| args.is_empty() || args.iter().any(|a| a == s || a == "all");
    let mut figures = Figures::default();
    // Built with `--features metrics`, the facade calls reach a real recorder, so the
    // arena figures include what the feature costs.
    #[cfg(feature = "metrics")]
    if let Err(e) = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder() {
        eprintln!("no Prometheus recorder: {e}");
    }
    if want("alloc") {
        suite_alloc(&mut figures);
    }
    let gpu_suites = [
        "arena", "kernels", "stream", "vt", "tier", "plan", "labels", "defrag", "recovery",
        "ledger",
    ];
    if gpu_suites.iter().any(|s| want(s)) {
        match vramkit::Gpu::headless() {
            Ok(gpu) => {
                println!("\ndevice: {}", gpu.describe());
                figures.add("device", gpu.info().name.clone());
                if want("arena") {
                    bench_gpu::suite_arena(&gpu, &mut figures);
                }
                if want("kernels") {
                    bench_gpu::suite_kernels(&gpu, &mut figures);
                }
                if want("stream") {
                    bench_gpu::suite_stream(&gpu, &mut figures);
                }
                if want("vt") {
                    bench_vt::suite_vt(&gpu, &mut figures);
                }
                if want("tier") {
                    bench_tier::suite_tier(&gpu, &mut figures);
                }
                if want("plan") {
                    bench_plan::suite_plan(&gpu, &mut figures);
                }
                if want("labels") {
                    bench_labels::suite_labels(&gpu, &mut figures);
                }
                if want("defrag") {
                    bench_defrag::suite_defrag(&gpu, &mut figures);
                }
                if want("recovery") {
                    bench_recovery::suite_recovery(&gpu, &mut figures);
                }
                if want("ledger") {
                    bench_ledger::suite_ledger(&gpu, &mut figures);
                }
            }
            Err(e) => {
                eprintln!("GPU suites need an adapter: {e}");
                std::process::exit(1);
            }
        }
    }
    println!();
    for (name, value) in &figures.0 {
        println!("{name}: {value}");
    }
}
