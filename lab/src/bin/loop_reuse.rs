//! "Allocate inside the loop, or preallocate?" Every iteration needs a fresh buffer of
//! `SIZE` bytes, writes into it and lets it go. Three ways, same work:
//! `create_buffer` + `destroy`; the arena; one buffer preallocated by hand. The arena's
//! loop and the preallocated one take turns, five runs each, and each reports its best
//! run (and prints its worst).
//!
//! ```text
//! cargo run --release -p vramkit-lab --bin loop_reuse [ITERATIONS] [SIZE_BYTES]
//! ```

use std::time::Instant;

use vramkit::{Arena, ArenaConfig, Gpu};

/// Timed runs of the arena's loop and of the preallocated one, taken in turns.
const RUNS: usize = 5;

fn main() {
    // Errors are printed with Display: each says what was asked and what to do.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let iters: usize = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(20_000);
    let size: u64 = args
        .next()
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(1 << 20);
    let gpu = Gpu::headless()?;
    println!("device: {}", gpu.describe());
    println!(
        "{iters} iterations, {} per buffer, a 256-byte write each, a submit every 64\n",
        vramkit::fmt_bytes(size)
    );
    let payload = vec![7u8; 256];
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    let flush = |i: usize| {
        if i % 64 == 63 {
            gpu.queue().submit([]);
        }
    };

    // 1. create_buffer + destroy every iteration.
    let start = Instant::now();
    for i in 0..iters {
        let b = gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("loop"),
            size,
            usage,
            mapped_at_creation: false,
        });
        gpu.queue().write_buffer(&b, 0, &payload);
        b.destroy();
        flush(i);
    }
    gpu.wait_idle()?;
    let create_s = start.elapsed().as_secs_f64() / iters as f64;

    // 2. The arena, warmed up first, as a long-running loop would be: with frees waiting
    //    for the GPU, the working set grows until the first frees come back. Warm-up runs
    //    a tenth of the loop at a time until one such run creates no block (ten at most):
    //    on CPU adapters the arena lets more frees wait once it sees them come back on
    //    their own, which one tenth did not always reach, and the growth then landed in
    //    the timed loop (lavapipe: 63 blocks and 1.13x-1.24x in 2 of 19 runs).
    let arena = Arena::new(
        &gpu,
        ArenaConfig {
            usage,
            ..Default::default()
        },
    )?;
    let mut warmup_runs = 0;
    for _ in 0..10 {
        warmup_runs += 1;
        let before = arena.stats().blocks_created;
        for i in 0..(iters / 10).max(256) {
            let a = arena.alloc(size, "loop")?;
            gpu.queue().write_buffer(a.buffer(), a.offset(), &payload);
            flush(i);
        }
        if arena.stats().blocks_created == before {
            break;
        }
    }
    arena.synchronize()?;
    arena.reset_peak();
    let warm_blocks = arena.stats().blocks_created;

    // 3. One buffer preallocated by hand. The arena's loop and this one take turns, five
    //    runs each, and each reports its best run: on a shared host other tenants' work
    //    slows whichever loop runs at that moment (on the H100 host either loop read up
    //    to twice its usual time in about one run of twenty).
    let pre = gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("pre"),
        size,
        usage,
        mapped_at_creation: false,
    });
    let (mut arena_runs, mut pre_runs) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let start = Instant::now();
        for i in 0..iters {
            let a = arena.alloc(size, "loop")?;
            gpu.queue().write_buffer(a.buffer(), a.offset(), &payload);
            drop(a);
            flush(i);
        }
        gpu.wait_idle()?;
        arena_runs.push(start.elapsed().as_secs_f64() / iters as f64);
        let start = Instant::now();
        for i in 0..iters {
            gpu.queue().write_buffer(&pre, 0, &payload);
            flush(i);
        }
        gpu.wait_idle()?;
        pre_runs.push(start.elapsed().as_secs_f64() / iters as f64);
    }
    let stats = arena.stats();
    let best = |runs: &[f64]| runs.iter().copied().fold(f64::INFINITY, f64::min);
    let worst = |runs: &[f64]| runs.iter().copied().fold(0.0, f64::max);
    let (arena_s, pre_s) = (best(&arena_runs), best(&pre_runs));

    println!(
        "{:<26} {:>14} {:>16} {:>14}",
        "strategy", "us/iteration", "buffers created", "peak reserved"
    );
    // wgpu reports no memory figure for buffers it keeps until the GPU is done with
    // them, so the create_buffer row has none (not a guess).
    println!(
        "{:<26} {:>14.2} {:>16} {:>14}",
        "create_buffer + destroy",
        create_s * 1e6,
        iters,
        "not measured"
    );
    println!(
        "{:<26} {:>14.2} {:>16} {:>14}",
        "vramkit arena",
        arena_s * 1e6,
        stats.blocks_created - warm_blocks,
        vramkit::fmt_bytes(stats.peak_reserved)
    );
    println!(
        "{:<26} {:>14.2} {:>16} {:>14}",
        "preallocated by hand",
        pre_s * 1e6,
        1,
        vramkit::fmt_bytes(pre.size())
    );
    println!();
    println!("create_us_per_iteration: {:.3}", create_s * 1e6);
    println!("arena_us_per_iteration: {:.3}", arena_s * 1e6);
    println!("prealloc_us_per_iteration: {:.3}", pre_s * 1e6);
    println!("speedup_vs_create_buffer: {:.2}", create_s / arena_s);
    println!(
        "arena_overhead_vs_prealloc_us: {:.3}",
        (arena_s - pre_s) * 1e6
    );
    println!(
        "buffers_created_after_warmup: {}",
        stats.blocks_created - warm_blocks
    );
    println!("arena_warmup_runs: {warmup_runs}");
    println!(
        "arena_lock_biases: {}\narena_lock_revocations: {}",
        stats.lock_biases, stats.lock_revocations
    );
    println!(
        "arena_us_worst_run: {:.3}\nprealloc_us_worst_run: {:.3}",
        worst(&arena_runs) * 1e6,
        worst(&pre_runs) * 1e6
    );
    Ok(())
}
