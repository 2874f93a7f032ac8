//! Data parallelism over the GPUs of one host: one training step of a two-layer MLP
//! (matmul, tanh, squared-error reduction; forward and the gradients) on every device's
//! shard of the batch, the gradients all-reduced, the result checked against one device
//! doing the whole batch, and both timed.
//!
//! ```text
//! cargo run --release --example data_parallel
//! cargo run --release --example data_parallel -- --batch 8192 --dim 2048 --steps 5
//! ```
//!
//! It opens every GPU of the best kind (`VRAMKIT_DEVICES=n` for `n`; a host with one
//! adapter gets two devices on it, as CI runs on lavapipe) and prints `name: value` lines:
//! `devices`, `mismatches` (gradient elements off the single-device result by more than
//! the tolerance), `device_to_device_gbps` (1 GiB from device 0 to 1 on GPUs), the serial
//! host path beside it, `allreduce_gbps` and `speedup_vs_one_device`.

use std::time::Instant;

use vramkit::arena::Typed;
use vramkit::devices::{AllReduceAlgorithm, DeviceSet, DeviceSetOptions, Split, TransferConfig};
use vramkit::kernels::{Binary, MatmulShape, Reduce, Unary};
use vramkit::stream::PinnedBuffer;
use vramkit::{Result, Runtime};

/// The model's sizes.
#[derive(Clone, Copy, Debug)]
struct Sizes {
    /// Rows of the whole batch.
    batch: usize,
    /// Input features, hidden units and outputs (`dim` each).
    dim: usize,
}

/// One device's weights, inputs and the buffers of a step.
struct Replica<'a> {
    rt: &'a Runtime,
    rows: usize,
    dim: usize,
    x: Typed<f32>,
    xt: Typed<f32>,
    target: Typed<f32>,
    w1: Typed<f32>,
    w2: Typed<f32>,
    w2t: Typed<f32>,
    h: Typed<f32>,
    a: Typed<f32>,
    at: Typed<f32>,
    y: Typed<f32>,
    diff: Typed<f32>,
    sq: Typed<f32>,
    loss: Typed<f32>,
    dy: Typed<f32>,
    da: Typed<f32>,
    dh: Typed<f32>,
    dw1: Typed<f32>,
    dw2: Typed<f32>,
}

impl<'a> Replica<'a> {
    fn new(
        rt: &'a Runtime,
        x: &[f32],
        target: &[f32],
        w1: &[f32],
        w2: &[f32],
        s: Sizes,
    ) -> Result<Self> {
        let d = s.dim;
        let rows = x.len() / d;
        let alloc = |n: usize, label: &str| rt.alloc::<f32>(n, label);
        let r = Replica {
            rt,
            rows,
            dim: d,
            x: rt.alloc_from(x, "x")?,
            xt: alloc(rows * d, "x^T")?,
            target: rt.alloc_from(target, "target")?,
            w1: rt.alloc_from(w1, "w1")?,
            w2: rt.alloc_from(w2, "w2")?,
            w2t: alloc(d * d, "w2^T")?,
            h: alloc(rows * d, "h")?,
            a: alloc(rows * d, "a")?,
            at: alloc(rows * d, "a^T")?,
            y: alloc(rows * d, "y")?,
            diff: alloc(rows * d, "diff")?,
            sq: alloc(rows * d, "sq")?,
            loss: alloc(1, "loss")?,
            dy: alloc(rows * d, "dy")?,
            da: alloc(rows * d, "da")?,
            dh: alloc(rows * d, "dh")?,
            dw1: alloc(d * d, "dw1")?,
            dw2: alloc(d * d, "dw2")?,
        };
        // The inputs are fixed: their transpose is made once.
        let mut batch = rt.batch();
        batch.transpose(rows as u64, &r.x, &r.xt)?;
        batch.submit()?;
        Ok(r)
    }

    /// Records and submits one step: forward, loss, gradients of both weights.
    fn submit_step(&self) -> Result<()> {
        let (m, d) = (self.rows as u64, self.dim as u64);
        let mut b = self.rt.batch();
        b.matmul(MatmulShape { m, k: d, n: d }, &self.x, &self.w1, &self.h)?
            .map(Unary::Tanh, &self.h, &self.a)?
            .matmul(MatmulShape { m, k: d, n: d }, &self.a, &self.w2, &self.y)?
            .binary(Binary::Sub, &self.y, &self.target, &self.diff)?
            .binary(Binary::Mul, &self.diff, &self.diff, &self.sq)?
            .reduce(Reduce::Sum, &self.sq, &self.loss)?
            // d loss / d y = 2 (y - t)
            .scale(2.0, 0.0, &self.diff, &self.dy)?
            // dW2 = A^T dY
            .transpose(m, &self.a, &self.at)?
            .matmul(
                MatmulShape { m: d, k: m, n: d },
                &self.at,
                &self.dy,
                &self.dw2,
            )?
            // dA = dY W2^T
            .transpose(d, &self.w2, &self.w2t)?
            .matmul(MatmulShape { m, k: d, n: d }, &self.dy, &self.w2t, &self.da)?
            // dH = dA (1 - A^2)
            .binary(Binary::Mul, &self.a, &self.a, &self.sq)?
            .scale(-1.0, 1.0, &self.sq, &self.sq)?
            .binary(Binary::Mul, &self.da, &self.sq, &self.dh)?
            // dW1 = X^T dH
            .matmul(
                MatmulShape { m: d, k: m, n: d },
                &self.xt,
                &self.dh,
                &self.dw1,
            )?;
        b.submit()?;
        Ok(())
    }
}

fn arg(name: &str) -> Option<usize> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
}

fn random(n: usize, seed: u64, scale: f32) -> Vec<f32> {
    // A small LCG: the example needs no dependency for its inputs.
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
        })
        .collect()
}

/// GB/s per device of pinned uploads and of pinned downloads of `bytes`, every device at
/// once (one direction at a time), best of three.
fn pinned_rates(set: &DeviceSet, bytes: u64) -> Result<(f64, f64)> {
    let mut ends = Vec::new();
    for d in 0..set.len() {
        let rt = set.device(d);
        let on_gpu = rt.alloc::<u32>((bytes / 4) as usize, "link bound")?;
        let pinned = PinnedBuffer::new(rt.gpu(), bytes, "link bound")?;
        ends.push((rt, on_gpu, pinned));
    }
    let mut rate = |upload: bool| -> Result<f64> {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            std::thread::scope(|scope| -> Result<()> {
                let runs: Vec<_> = ends
                    .iter_mut()
                    .map(|(rt, on_gpu, pinned)| {
                        scope.spawn(move || -> Result<()> {
                            match upload {
                                true => rt.uploader().upload_pinned(
                                    on_gpu.allocation(),
                                    0,
                                    pinned,
                                    0..bytes,
                                ),
                                false => rt.downloader().download_pinned(
                                    on_gpu.allocation(),
                                    0,
                                    pinned,
                                    0..bytes,
                                ),
                            }
                        })
                    })
                    .collect();
                for run in runs {
                    run.join().expect("a copy's thread panicked")?;
                }
                Ok(())
            })?;
            best = best.min(start.elapsed().as_secs_f64());
        }
        Ok(bytes as f64 / best / 1e9)
    };
    Ok((rate(true)?, rate(false)?))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() -> Result<()> {
    env_logger::init();
    let mut options = DeviceSetOptions::from_env()?;
    let mut set = DeviceSet::open_with(&options)?;
    if set.len() == 1 && options.count.is_none() {
        // One adapter: two devices on it, so that the path between devices runs.
        options.count = Some(2);
        set = DeviceSet::open_with(&options)?;
    }
    let cpu = set.device(0).gpu().is_cpu();
    // Transfer settings to try (`--chunk-mib`, `--depth`); the defaults otherwise.
    let transfer = TransferConfig {
        chunk: arg("--chunk-mib").map(|m| (m as u64) << 20),
        depth: arg("--depth").unwrap_or(TransferConfig::default().depth),
        ..Default::default()
    };
    set.set_transfer(transfer.clone());
    let sizes = Sizes {
        // A compute-bound step on GPUs: 2.7 TFLOP per device per step against 128 MiB of
        // gradients to sum.
        batch: arg("--batch").unwrap_or(if cpu { 512 } else { 65536 }),
        dim: arg("--dim").unwrap_or(if cpu { 128 } else { 4096 }),
    };
    let steps = arg("--steps").unwrap_or(if cpu { 2 } else { 5 });
    let n = set.len();
    println!("devices: {n}");
    for rt in set.runtimes() {
        println!("device: {}", rt.gpu().describe());
    }
    println!("batch: {}", sizes.batch);
    println!("dim: {}", sizes.dim);
    let d = sizes.dim;
    let x = random(sizes.batch * d, 1, 1.0);
    let target = random(sizes.batch * d, 2, 1.0);
    let scale = 1.0 / (d as f32).sqrt();
    let w1 = random(d * d, 3, scale);
    let w2 = random(d * d, 4, scale);

    // One device, the whole batch.
    let one = Replica::new(set.device(0), &x, &target, &w1, &w2, sizes)?;
    let mut one_times = Vec::new();
    for i in 0..=steps {
        let start = Instant::now();
        one.submit_step()?;
        one.rt.gpu().wait_idle()?;
        if i > 0 {
            one_times.push(start.elapsed().as_secs_f64());
        }
    }
    let reference = (
        one.rt.download(&one.dw1)?,
        one.rt.download(&one.dw2)?,
        one.rt.download(&one.loss)?[0],
    );
    drop(one);

    // Every device on its shard; gradients all-reduced.
    let parts = set.split_rows(sizes.batch, &Split::Even)?;
    let replicas: Vec<Replica> = parts
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let rows = r.start * d..r.end * d;
            Replica::new(
                set.device(i),
                &x[rows.clone()],
                &target[rows],
                &w1,
                &w2,
                sizes,
            )
        })
        .collect::<Result<_>>()?;
    let mut many_times = Vec::new();
    let mut compute_times = Vec::new();
    let mut allreduce_times = Vec::new();
    let mut losses = 0.0f32;
    for i in 0..=steps {
        let start = Instant::now();
        for r in &replicas {
            r.submit_step()?;
        }
        // The ring's copies wait for each device's step anyway (one queue per device);
        // waiting here first splits the step's time into its two parts.
        set.synchronize()?;
        let computed = start.elapsed().as_secs_f64();
        // Both gradients in one bucket, as PyTorch's data-parallel training sums them.
        let grads: Vec<Vec<&Typed<f32>>> = replicas.iter().map(|r| vec![&r.dw1, &r.dw2]).collect();
        set.all_reduce_sum_bucket(&grads)?;
        set.synchronize()?;
        if i > 0 {
            let total = start.elapsed().as_secs_f64();
            many_times.push(total);
            compute_times.push(computed);
            allreduce_times.push(total - computed);
        }
        losses = 0.0;
        for r in &replicas {
            losses += r.rt.download(&r.loss)?[0];
        }
    }
    // Check every device's gradients against the single device.
    let tolerance = |reference: &[f32]| {
        let rms = (reference.iter().map(|v| (*v as f64).powi(2)).sum::<f64>()
            / reference.len() as f64)
            .sqrt();
        move |got: f32, want: f32| ((got - want).abs() as f64) <= 1e-3 * (want.abs() as f64 + rms)
    };
    let mut mismatches = 0usize;
    let ok1 = tolerance(&reference.0);
    let ok2 = tolerance(&reference.1);
    for r in &replicas {
        let g1 = r.rt.download(&r.dw1)?;
        let g2 = r.rt.download(&r.dw2)?;
        mismatches += g1
            .iter()
            .zip(&reference.0)
            .filter(|(g, w)| !ok1(**g, **w))
            .count();
        mismatches += g2
            .iter()
            .zip(&reference.1)
            .filter(|(g, w)| !ok2(**g, **w))
            .count();
    }
    let loss_error = ((losses - reference.2) / reference.2).abs();
    if loss_error > 1e-3 {
        mismatches += 1;
    }
    println!("loss: {:.6e}", reference.2);
    println!("loss_relative_error: {loss_error:.2e}");
    println!("mismatches: {mismatches}");

    // One device's step alone (after the check: it overwrites the gradients), to see whether the devices overlap.
    let mut alone = Vec::new();
    for _ in 0..steps.min(3) {
        let start = Instant::now();
        replicas[0].submit_step()?;
        replicas[0].rt.gpu().wait_idle()?;
        alone.push(start.elapsed().as_secs_f64());
    }

    // Transfers: device 0 to 1, overlapped and serial, best of three.
    let bytes: usize = if cpu { 64 << 20 } else { 1 << 30 };
    let src = set.device(0).alloc::<u32>(bytes / 4, "transfer src")?;
    let dst = set.device(1 % n).alloc::<u32>(bytes / 4, "transfer dst")?;
    let time_copy = |s: &DeviceSet| -> Result<f64> {
        let mut best = f64::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            s.copy_typed(&src, &dst)?;
            best = best.min(start.elapsed().as_secs_f64());
        }
        Ok(bytes as f64 / best / 1e9)
    };
    let gbps = time_copy(&set)?;
    println!("device_to_device_gbps: {gbps:.1}");
    // Smaller copies, as an all-reduce's segments are: the cost per chunk shows.
    for mib in [16usize, 32, 128] {
        let len = (mib << 20).min(bytes);
        let mut best = f64::MAX;
        for _ in 0..5 {
            let start = Instant::now();
            set.copy((src.allocation(), 0), (dst.allocation(), 0), len as u64)?;
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!("copy_{mib}mib_gbps: {:.1}", len as f64 / best / 1e9);
    }
    if n > 1 {
        // Both directions at once: what each device's one queue gives two copies.
        let back_src = set.device(1).alloc::<u32>(bytes / 4, "transfer src 1")?;
        let back_dst = set.device(0).alloc::<u32>(bytes / 4, "transfer dst 0")?;
        let mut best = f64::MAX;
        for _ in 0..3 {
            let start = Instant::now();
            std::thread::scope(|scope| -> Result<()> {
                let there = scope.spawn(|| set.copy_typed(&src, &dst));
                set.copy_typed(&back_src, &back_dst)?;
                there.join().expect("the copy's thread panicked")
            })?;
            best = best.min(start.elapsed().as_secs_f64());
        }
        println!(
            "both_directions_gbps: {:.1}",
            2.0 * bytes as f64 / best / 1e9
        );
    }
    println!("shared_host_memory: {}", set.shares_host_memory(0, 1 % n)?);
    set.set_transfer(TransferConfig {
        overlap: false,
        ..transfer.clone()
    });
    let serial_gbps = time_copy(&set)?;
    set.set_transfer(transfer.clone());
    println!("device_to_device_serial_gbps: {serial_gbps:.1}");
    println!("overlap_vs_serial: {:.2}", gbps / serial_gbps);
    drop((src, dst));

    // The bound the links allow an all-reduce: every device's pinned copies, all devices
    // at once, one direction at a time (256 MiB each; 16 MiB on CPU adapters).
    let link_bytes: u64 = if cpu { 16 << 20 } else { 256 << 20 };
    let (up, down) = pinned_rates(&set, link_bytes)?;
    println!("link_up_gbps: {up:.1}");
    println!("link_down_gbps: {down:.1}");
    // Summed on the GPUs from host rows, a device sends B (its rows and its sums) and
    // receives 2 B (N - 1) / N for B array bytes: with both directions of a link busy at
    // once, B / max(B / down, 2 B (N - 1) / N / up); one after the other, the sum.
    let receive = 2.0 * (n as f64 - 1.0) / n as f64;
    let duplex = 1.0 / (1.0 / down).max(receive / up);
    let one_way = 1.0 / (1.0 / down + receive / up);
    println!("allreduce_link_bound_gbps: {duplex:.1}");
    println!("allreduce_link_bound_one_way_gbps: {one_way:.1}");

    // The all-reduce alone, on 256 MiB per device (16 MiB on CPU adapters), as the set
    // runs it by default and as the ring.
    let elems: usize = if cpu { 4 << 20 } else { 64 << 20 };
    for (name, algorithm) in [
        ("allreduce", AllReduceAlgorithm::Fastest),
        ("allreduce_ring", AllReduceAlgorithm::Ring),
    ] {
        set.set_transfer(TransferConfig {
            all_reduce: algorithm,
            ..transfer.clone()
        });
        let grads = set.broadcast(&vec![1.0f32; elems], "all-reduce bench")?;
        let mut best = f64::MAX;
        let mut report = None;
        for _ in 0..3 {
            let r = set.all_reduce_sum(&grads)?;
            best = best.min(r.seconds);
            report = Some(r);
        }
        let expected = (n as f32).powi(3);
        for (d, g) in grads.iter().enumerate() {
            if set.device(d).download(g)?.iter().any(|v| *v != expected) {
                println!("{name}_check: FAILED on device {d}");
                mismatches += 1;
            }
        }
        if let Some(r) = report {
            let algbw = r.bytes as f64 / best / 1e9;
            println!("{name}_algorithm: {:?}", r.algorithm);
            println!("{name}_gbps: {algbw:.1}");
            println!(
                "{name}_bus_gbps: {:.1}",
                algbw * 2.0 * (n as f64 - 1.0) / n as f64
            );
            println!(
                "{name}_reduce_scatter_share: {:.2}",
                r.reduce_scatter_seconds / r.seconds
            );
            if algorithm == AllReduceAlgorithm::Fastest {
                println!("{name}_vs_link_bound: {:.2}", algbw / duplex);
            }
        }
    }
    set.set_transfer(transfer);
    let step_allreduce = median(allreduce_times);
    println!("step_compute_ms: {:.2}", median(compute_times) * 1e3);
    println!("one_shard_alone_ms: {:.2}", median(alone) * 1e3);
    println!("step_allreduce_ms: {:.2}", step_allreduce * 1e3);
    println!(
        "step_allreduce_gbps: {:.1}",
        (2 * d * d * 4) as f64 / step_allreduce.max(1e-12) / 1e9
    );

    let t_one = median(one_times);
    let t_many = median(many_times);
    let flops = 2.0 * sizes.batch as f64 * (d * d) as f64 * 5.0;
    println!("one_device_step_ms: {:.2}", t_one * 1e3);
    println!("all_devices_step_ms: {:.2}", t_many * 1e3);
    println!("one_device_tflops: {:.1}", flops / t_one / 1e12);
    println!("all_devices_tflops: {:.1}", flops / t_many / 1e12);
    println!("speedup_vs_one_device: {:.2}", t_one / t_many);
    println!("\n{}", set.summary());
    if mismatches > 0 {
        std::process::exit(1);
    }
    Ok(())
}
