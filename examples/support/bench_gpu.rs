//! GPU suites of the runnable benchmark.
use std::time::Instant;

use super::Figures;
use vramkit::{Arena, ArenaConfig, Gpu};

fn per_op(iters: usize, mut f: impl FnMut(usize)) -> f64 {
    let start = Instant::now();
    for i in 0..iters {
        f(i);
    }
    start.elapsed().as_secs_f64() / iters as f64
}

/// Arena alloc+free against `create_buffer` + `destroy`, sizes from 256 B to 64 MiB.
pub fn suite_arena(gpu: &Gpu, figures: &mut Figures) {
    let usage =
        wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
    println!("\n== arena: allocate+free, microseconds per pair (lower is better) ==");
    println!(
        "{:>10} {:>16} {:>12} {:>10} {:>18}",
        "size", "create+destroy", "arena", "speedup", "arena buffers/iter"
    );
    let arena = Arena::new(
        gpu,
        ArenaConfig {
            usage,
            ..Default::default()
        },
    )
    .expect("arena");
    for size in [256u64, 64 << 10, 1 << 20, 16 << 20, 64 << 20] {
        let iters = if size >= 16 << 20 { 2_000 } else { 20_000 };
        let create = per_op(iters / 4, |_| {
            let b = gpu.device().create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage,
                mapped_at_creation: false,
            });
            b.destroy();
        });
        gpu.wait_idle().expect("wait");
        // Warm up, then measure with the safe-reuse bookkeeping included (no GPU work is
        // in flight, so each free comes back on the next allocation).
        for _ in 0..16 {
            drop(arena.alloc(size, "bench").expect("alloc"));
        }
        let warm = arena.stats().blocks_created;
        let ours = per_op(iters, |_| drop(arena.alloc(size, "bench").expect("alloc")));
        let created = arena.stats().blocks_created - warm;
        let speedup = create / ours;
        println!(
            "{:>10} {:>16.3} {:>12.3} {:>9.1}x {:>18.4}",
            vramkit::fmt_bytes(size),
            create * 1e6,
            ours * 1e6,
            speedup,
            created as f64 / iters as f64
        );
        let key = vramkit::fmt_bytes(size).replace([' ', '.'], "");
        figures.add(
            format!("arena_alloc_free_us_{key}"),
            format!("{:.4}", ours * 1e6),
        );
        figures.add(
            format!("create_destroy_us_{key}"),
            format!("{:.4}", create * 1e6),
        );
        figures.add(
            format!("arena_speedup_vs_create_buffer_{key}"),
            format!("{speedup:.1}"),
        );
        figures.add(
            format!("arena_buffers_created_per_iter_{key}"),
            format!("{:.4}", created as f64 / iters as f64),
        );
    }
}

pub fn suite_kernels(_gpu: &Gpu, _figures: &mut Figures) {}
