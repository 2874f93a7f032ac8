//! `bench plan`: memory planning against its peers in the same run. The planner on every
//! shipped trace (and those in `VRAMKIT_TRACES_DIR`) against the lower bound and the
//! published greedy-by-size planner; each trace through the arena, planned against
//! online; and a GPU step of 320 allocations with kernels, planned against online.

use std::time::Instant;

use vramkit::alloc::plan::{intervals_from_trace, lower_bound, plan, plan_with, Heuristic};
use vramkit::Gpu;

use crate::bench_gpu::warm_until_steady;
use crate::plan_measure::{arena_replay, gpu_step, gpu_steps, step_sizes};
use crate::traces;
use crate::Figures;

/// Trace paths: the shipped ones, then any in `VRAMKIT_TRACES_DIR`.
fn trace_paths() -> Vec<std::path::PathBuf> {
    let mut paths = traces::all().unwrap_or_default();
    if let Ok(dir) = std::env::var("VRAMKIT_TRACES_DIR") {
        if let Ok(entries) = std::fs::read_dir(dir) {
            let mut extra: Vec<_> = entries
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.to_string_lossy().ends_with(".csv.gz"))
                .collect();
            extra.sort();
            paths.extend(extra);
        }
    }
    paths
}

pub fn suite_plan(gpu: &Gpu, figures: &mut Figures) {
    println!(
        "\n== plan: the offline planner (best of 3), peak over the lower bound, lower is better =="
    );
    println!(
        "{:<34} {:>8} {:>9} {:>10} {:>12} {:>12}",
        "trace", "events", "plan ms", "planned", "greedy size", "ms/100k ev"
    );
    let (mut worst, mut worst_greedy, mut worst_rate) = (0.0f64, 0.0f64, 0.0f64);
    let mut loaded = Vec::new();
    for path in trace_paths() {
        let name = path
            .file_name()
            .map(|n| {
                n.to_string_lossy()
                    .replace(".csv.gz", "")
                    .replace("trace_", "")
            })
            .unwrap_or_default();
        let events = match traces::load(&path) {
            Ok(e) => e,
            Err(e) => {
                eprintln!("skipping {}: {e}", path.display());
                continue;
            }
        };
        let v = intervals_from_trace(&events, 256);
        let bound = lower_bound(&v).max(1) as f64;
        let mut ms = f64::MAX;
        let mut p = plan(&v);
        for _ in 0..3 {
            let start = Instant::now();
            p = plan(&v);
            ms = ms.min(start.elapsed().as_secs_f64() * 1e3);
        }
        let greedy = plan_with(&v, Heuristic::BySize).peak as f64 / bound;
        let ratio = p.peak as f64 / bound;
        let rate = ms * 100_000.0 / events.len().max(1) as f64;
        println!(
            "{name:<34} {:>8} {ms:>9.1} {ratio:>10.4} {greedy:>12.4} {rate:>12.1}",
            events.len()
        );
        figures.add(format!("plan_{name}_ms"), format!("{ms:.1}"));
        figures.add(format!("plan_{name}_over_bound"), format!("{ratio:.4}"));
        figures.add(
            format!("plan_{name}_greedy_by_size_over_bound"),
            format!("{greedy:.4}"),
        );
        worst = worst.max(ratio);
        worst_greedy = worst_greedy.max(greedy);
        if events.len() >= 50_000 {
            worst_rate = worst_rate.max(rate);
        }
        loaded.push((name, events));
    }
    figures.add("plan_worst_over_bound", format!("{worst:.4}"));
    figures.add(
        "plan_worst_greedy_by_size_over_bound",
        format!("{worst_greedy:.4}"),
    );
    figures.add("plan_worst_ms_per_100k_events", format!("{worst_rate:.1}"));

    println!("\n== plan: each trace through the arena (dry), ns per event, lower is better ==");
    println!(
        "{:<34} {:>10} {:>10} {:>9} {:>14}",
        "trace", "online", "planned", "speedup", "blocks created"
    );
    for (name, events) in &loaded {
        match arena_replay(gpu, events) {
            Ok(r) => {
                let planned = r.planned_ns.as_ref().map_or(f64::NAN, |&ns| ns);
                println!(
                    "{name:<34} {:>10.1} {planned:>10.1} {:>8.2}x {:>14}",
                    r.online_ns,
                    r.online_ns / planned,
                    r.planned_blocks_created
                );
                if let Err(e) = &r.planned_ns {
                    println!("  not planned: {e}");
                }
                figures.add(
                    format!("plan_arena_{name}_online_ns_per_event"),
                    format!("{:.1}", r.online_ns),
                );
                figures.add(
                    format!("plan_arena_{name}_planned_ns_per_event"),
                    format!("{planned:.1}"),
                );
                figures.add(
                    format!("plan_arena_{name}_blocks_created"),
                    r.planned_blocks_created,
                );
            }
            Err(e) => eprintln!("arena replay of {name} failed: {e}"),
        }
    }

    let steps: usize = std::env::var("VRAMKIT_PLAN_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(40);
    let sizes = step_sizes();
    let bytes: u64 = sizes.iter().sum();
    println!(
        "\n== plan: a GPU step of {} allocations ({} in all, 4 live at a time, a kernel each), best of rounds of 8 steps, {steps} in all ==",
        sizes.len(),
        vramkit::fmt_bytes(bytes)
    );
    // Warm the clocks on the online step before anything is timed.
    match vramkit::Runtime::new(gpu, Default::default()) {
        Ok(rt) => warm_until_steady("plan_step", figures, || {
            let start = Instant::now();
            for _ in 0..3 {
                if let Err(e) = gpu_step(&rt, &sizes) {
                    eprintln!("step failed: {e}");
                }
            }
            let _ = gpu.wait_idle();
            start.elapsed().as_secs_f64()
        }),
        Err(e) => eprintln!("no runtime: {e}"),
    }
    println!(
        "{:<22} {:>12} {:>14} {:>16}",
        "", "ms / step", "reserved/live", "blocks created"
    );
    let mut online_ms = f64::NAN;
    for (label, slots) in [
        ("online (arena)", 0usize),
        ("planned, 2 slots", 2),
        ("planned, 1 slot", 1),
    ] {
        match gpu_steps(gpu, slots, steps, 5) {
            Ok((f, stats)) => {
                if slots == 0 {
                    online_ms = f.ms_per_step;
                }
                println!(
                    "{label:<22} {:>12.3} {:>14.3} {:>16}",
                    f.ms_per_step, f.reserved_over_live, f.blocks_created
                );
                let key = match slots {
                    0 => "online".to_string(),
                    s => format!("planned_{s}slot"),
                };
                figures.add(
                    format!("plan_step_{key}_ms"),
                    format!("{:.3}", f.ms_per_step),
                );
                figures.add(
                    format!("plan_step_{key}_reserved_over_live"),
                    format!("{:.3}", f.reserved_over_live),
                );
                figures.add(format!("plan_step_{key}_blocks_created"), f.blocks_created);
                if slots == vramkit::plan::LoopConfig::default().slots {
                    figures.add(
                        "plan_step_planned_default_reserved_over_live",
                        format!("{:.3}", f.reserved_over_live),
                    );
                }
                if slots > 0 {
                    figures.add(
                        format!("plan_step_{key}_speedup_vs_online"),
                        format!("{:.3}", online_ms / f.ms_per_step),
                    );
                    figures.add(format!("plan_step_{key}_replayed"), stats.replayed);
                    figures.add(format!("plan_step_{key}_deviations"), stats.deviations);
                }
            }
            Err(e) => eprintln!("{label} failed: {e}"),
        }
    }
}
