//! The main demo: opens a GPU, runs kernels on arena allocations, checks every result
//! against the CPU, and prints the arena's summary.
//!
//! ```text
//! cargo run --release --example demo
//! ```

use rand::Rng;
use vramkit::kernels::Kernels;
use vramkit::{readback, Arena, ArenaConfig, Gpu};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let gpu = Gpu::headless()?;
    println!("adapter: {}", gpu.describe());

    let arena = Arena::new(
        &gpu,
        ArenaConfig {
            name: "demo".into(),
            ..Default::default()
        },
    )?;
    let kernels = Kernels::new(&arena)?;
    let mut rng = rand::thread_rng();

    // y = alpha * x + y on a million random elements.
    let n = 1 << 20;
    let x: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let y: Vec<f32> = (0..n).map(|_| rng.gen_range(-1.0..1.0)).collect();
    let alpha = rng.gen_range(-2.0f32..2.0);
    let xa = arena.alloc_typed::<f32>(n, "x")?;
    let ya = arena.alloc_typed::<f32>(n, "y")?;
    gpu.queue()
        .write_buffer(xa.buffer(), xa.offset(), bytemuck::cast_slice(&x));
    gpu.queue()
        .write_buffer(ya.buffer(), ya.offset(), bytemuck::cast_slice(&y));
    let mut batch = kernels.batch();
    batch.axpy(n as u64, alpha, &xa, &ya)?;
    batch.submit()?;
    let got = readback::read_as::<f32>(&gpu, ya.buffer(), ya.offset(), n)?;
    let mut worst = 0.0f32;
    for i in 0..n {
        let want = alpha * x[i] + y[i];
        worst = worst.max((got[i] - want).abs() / want.abs().max(1.0));
    }
    let ok = worst < 1e-6;
    println!(
        "axpy: {n} elements, alpha {alpha:.4}, max relative error {worst:.2e} -> {}",
        if ok { "OK" } else { "WRONG" }
    );

    // A hot loop: temporaries allocated and dropped every iteration reuse the same blocks.
    let before = arena.stats().blocks_created;
    for _ in 0..1000 {
        let t = arena.alloc_typed::<f32>(4096, "loop temp")?;
        let mut b = kernels.batch();
        b.fill(4096, 1.0, &t)?;
        b.submit()?;
    }
    arena.synchronize()?;
    println!(
        "hot loop: 1000 iterations, {} new wgpu buffers",
        arena.stats().blocks_created - before
    );
    drop((xa, ya));
    arena.synchronize()?;
    println!("{}", arena.summary());
    if !ok {
        return Err("axpy result does not match the CPU".into());
    }
    Ok(())
}
