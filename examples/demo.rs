//! The main demo: opens a GPU, runs kernels on arena allocations, checks every result
//! against the CPU, and prints the arena's summary.
//!
//! ```text
//! cargo run --release --example demo
//! ```

use rand::Rng;
use vramkit::kernels::Kernels;
use vramkit::{readback, Arena, ArenaConfig, Gpu};

fn main() {
    // Errors are printed with Display: each says what was asked and what to do.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
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
    let mut failures = Vec::new();
    let mut report = |what: String, ok: bool| {
        println!("{what} -> {}", if ok { "OK" } else { "WRONG" });
        if !ok {
            failures.push(what);
        }
    };
    report(
        format!("axpy: {n} elements, alpha {alpha:.4}, max relative error {worst:.2e}"),
        worst < 1e-6,
    );

    // sum(y) on the GPU against a CPU sum in f64.
    let total = arena.alloc_typed::<f32>(1, "total")?;
    let mut batch = kernels.batch();
    batch.reduce(vramkit::kernels::Reduce::Sum, n as u64, &ya, &total)?;
    batch.submit()?;
    let gpu_sum = readback::read_as::<f32>(&gpu, total.buffer(), total.offset(), 1)?[0];
    let cpu_sum: f64 = got.iter().map(|&v| v as f64).sum();
    let err = (gpu_sum as f64 - cpu_sum).abs() / cpu_sum.abs().max(1.0);
    report(
        format!("sum: GPU {gpu_sum:.3}, CPU {cpu_sum:.3}, relative error {err:.2e}"),
        err < 1e-4,
    );

    // A hot loop: temporaries allocated and dropped every iteration reuse the same blocks;
    // each fills its range with the iteration number, and every tenth is read back.
    let before = arena.stats().blocks_created;
    let mut loop_ok = true;
    for i in 0..1000 {
        let t = arena.alloc_typed::<f32>(4096, "loop temp")?;
        let mut b = kernels.batch();
        b.fill(4096, i as f32, &t)?;
        b.submit()?;
        if i % 10 == 0 {
            let back = readback::read_as::<f32>(&gpu, t.buffer(), t.offset(), 4096)?;
            loop_ok &= back.iter().all(|&v| v == i as f32);
        }
    }
    arena.synchronize()?;
    report(
        "hot loop: every checked fill holds its own value".into(),
        loop_ok,
    );
    println!(
        "hot loop: 1000 iterations, {} new wgpu buffers",
        arena.stats().blocks_created - before
    );
    drop((xa, ya, total));
    arena.synchronize()?;
    println!("{}", arena.summary());
    if !failures.is_empty() {
        return Err(format!("results that do not match the CPU: {failures:?}").into());
    }
    Ok(())
}
