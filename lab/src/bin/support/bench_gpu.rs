//! GPU suites of the runnable benchmark.
use std::time::Instant;

use super::Figures;
use vramkit::kernels::MatmulShape;
use vramkit::{Arena, ArenaConfig, Gpu};

/// The wrapping sum of `bytes` as little-endian u64 words (the tail ignored): one read
/// of every byte, at the speed one thread reads memory.
fn word_sum(bytes: &[u8]) -> u64 {
    bytes
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
        .fold(0u64, u64::wrapping_add)
}

/// The product with inputs of the element type `input` names, chosen at run time.
fn bmm_as<'a, 'b>(
    batch: &'b mut vramkit::kernels::Batch<'a>,
    input: vramkit::kernels::MatmulInput,
    shape: vramkit::kernels::MatmulShape,
    layout: vramkit::kernels::MatmulBatch,
    a: &'a vramkit::Allocation,
    b: &'a vramkit::Allocation,
    c: &'a vramkit::Allocation,
) -> vramkit::Result<&'b mut vramkit::kernels::Batch<'a>> {
    match input {
        vramkit::kernels::MatmulInput::F32 => batch.bmm::<f32>(shape, layout, a, b, c),
        vramkit::kernels::MatmulInput::F16 => batch.bmm::<half::f16>(shape, layout, a, b, c),
    }
}

fn per_op(iters: usize, mut f: impl FnMut(usize)) -> f64 {
    let start = Instant::now();
    for i in 0..iters {
        f(i);
    }
    start.elapsed().as_secs_f64() / iters as f64
}

/// Usage of the buffers the arena and stream suites allocate (and of the peer's buffers).
const BENCH_USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_DST)
    .union(wgpu::BufferUsages::COPY_SRC);

/// An arena whose blocks have [`BENCH_USAGE`].
fn bench_arena(gpu: &Gpu) -> Arena {
    Arena::new(
        gpu,
        ArenaConfig {
            usage: BENCH_USAGE,
            ..Default::default()
        },
    )
    .expect("arena")
}

/// A figure-name suffix for a byte size in its largest exact unit: `256B`, `64KiB`, `1MiB`
/// (`fmt_bytes` prints `64.00 KiB`, whose digits alone would read as 6400).
fn size_key(size: u64) -> String {
    let units = [(1u64 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")];
    units
        .iter()
        .find(|(unit, _)| size >= *unit && size.is_multiple_of(*unit))
        .map_or(format!("{size}B"), |(unit, name)| {
            format!("{}{name}", size / unit)
        })
}

/// The best of `passes` runs of [`per_op`]: on a shared host, other tenants' work lands in
/// some runs of a CPU-bound loop and not in others, and the fastest run is the loop's own
/// cost.
fn best_per_op(passes: usize, iters: usize, mut f: impl FnMut(usize)) -> f64 {
    (0..passes)
        .map(|_| per_op(iters, &mut f))
        .fold(f64::INFINITY, f64::min)
}

/// Arena alloc+free against `create_buffer` + `destroy`, sizes from 256 B to 64 MiB; each
/// the best of five runs (one for 16 MiB and more, where `create_buffer` takes
/// milliseconds).
pub fn suite_arena(gpu: &Gpu, figures: &mut Figures) {
    println!(
        "\n== arena: allocate+free, microseconds per pair, best of 5 runs (lower is better) =="
    );
    println!(
        "{:>10} {:>16} {:>12} {:>10} {:>18}",
        "size", "create+destroy", "arena", "speedup", "arena buffers/iter"
    );
    let arena = bench_arena(gpu);
    for size in [256u64, 64 << 10, 1 << 20, 16 << 20, 64 << 20] {
        let iters = if size >= 16 << 20 { 2_000 } else { 20_000 };
        let passes = if size >= 16 << 20 { 1 } else { 5 };
        // wgpu frees destroyed buffers at the next poll: that poll is part of the peer's cost.
        let create = best_per_op(passes, iters / 4, |i| {
            let b = gpu.device().create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size,
                usage: BENCH_USAGE,
                mapped_at_creation: false,
            });
            b.destroy();
            if i + 1 == iters / 4 {
                gpu.wait_idle().expect("wait");
            }
        });
        // Warm up (the pool grows to cover the allocations between two polls), then measure
        // with the safe-reuse bookkeeping included.
        for _ in 0..1024 {
            drop(arena.alloc(size, "bench").expect("alloc"));
        }
        let warm = arena.stats().blocks_created;
        let ours = best_per_op(passes, iters, |i| {
            drop(arena.alloc(size, "bench").expect("alloc"));
            if i + 1 == iters {
                gpu.wait_idle().expect("wait");
                arena.maintain();
            }
        });
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
        let key = size_key(size);
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
    observability_cost(gpu, figures);
}

/// What observing the arena costs an alloc+free pair of 256 B: the memory history on
/// against off in this process, each the best of 5 runs of 20 000 pairs, interleaved.
/// (The `metrics` feature's cost is this suite's `arena_alloc_free_us_*` in a binary
/// built with `--features metrics`, which installs a Prometheus recorder, against one
/// built without.)
fn observability_cost(gpu: &Gpu, figures: &mut Figures) {
    let arena = bench_arena(gpu);
    let iters = 20_000;
    let run = |history: bool| {
        arena.record_history(history.then(Default::default));
        for _ in 0..1024 {
            drop(arena.alloc(256, "bench").expect("alloc"));
        }
        per_op(iters, |i| {
            drop(arena.alloc(256, "bench").expect("alloc"));
            if i + 1 == iters {
                arena.maintain();
            }
        })
    };
    let (mut off, mut on) = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        off = off.min(run(false));
        on = on.min(run(true));
    }
    arena.record_history(None);
    println!(
        "memory history: alloc+free 256 B {:.3} us off, {:.3} us on ({:.2}x){}",
        off * 1e6,
        on * 1e6,
        on / off,
        if cfg!(feature = "metrics") {
            ", metrics feature on"
        } else {
            ""
        }
    );
    figures.add(
        "arena_alloc_free_us_256B_history_off",
        format!("{:.4}", off * 1e6),
    );
    figures.add(
        "arena_alloc_free_us_256B_history_on",
        format!("{:.4}", on * 1e6),
    );
    figures.add("arena_history_cost_ratio", format!("{:.3}", on / off));
    // The floor of any history of this shape: two events a pair, each a clock read (one
    // atomic load, as vramkit's published clock) and a 48-byte record written into a
    // ring of the default 100 000 slots, with nothing else.
    let floor = history_event_floor(2 * iters);
    println!(
        "  floor: a bare 48-byte ring write {:.1} ns an event: (off + 2 events) / off = {:.2}x",
        floor * 1e9,
        (off + 2.0 * floor) / off
    );
    figures.add("history_event_floor_ns", format!("{:.2}", floor * 1e9));
    figures.add(
        "arena_history_floor_ratio",
        format!("{:.3}", (off + 2.0 * floor) / off),
    );
    figures.add("metrics_feature", u8::from(cfg!(feature = "metrics")));
    // What a direct clock read costs here: what stamping each event would cost, and why
    // the history reads a clock thread's last tick instead (`arena/history/clock.rs`).
    let n = 1_000_000;
    let mut sink = 0u64;
    #[cfg(target_arch = "x86_64")]
    {
        #[allow(unused_unsafe)]
        // SAFETY: RDTSC reads a counter.
        let tsc = per_op(n, |_| {
            sink = sink.wrapping_add(unsafe { std::arch::x86_64::_rdtsc() })
        });
        figures.add("clock_tsc_ns", format!("{:.1}", tsc * 1e9));
        print!("clock reads: TSC {:.1} ns, ", tsc * 1e9);
    }
    let instant = per_op(n, |_| {
        sink = sink.wrapping_add(std::time::Instant::now().elapsed().as_nanos() as u64)
    });
    println!(
        "Instant::now + elapsed {:.1} ns ({})",
        instant * 1e9,
        sink % 2
    );
    figures.add("clock_instant_pair_ns", format!("{:.1}", instant * 1e9));
}

/// Seconds per event of the barest history: `events` 48-byte records written into a
/// ring of 100 000, each stamped with an atomic load; the best of 5 runs, each on a
/// fresh ring as `Arena::record_history` makes one.
fn history_event_floor(events: usize) -> f64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static CLOCK: AtomicU64 = AtomicU64::new(1);
    let mut best = f64::MAX;
    for run in 0..5u64 {
        let mut ring = vec![[run; 6]; 100_000];
        let (mut at, cap) = (0usize, ring.len());
        let start = std::time::Instant::now();
        for i in 0..events as u64 {
            let t = CLOCK.load(Ordering::Acquire);
            ring[at] = [t, i, 256, i << 8, (i & 7) | (3 << 32), 1];
            at += 1;
            if at == cap {
                at = 0;
            }
        }
        best = best.min(start.elapsed().as_secs_f64() / events as f64);
        std::hint::black_box(&ring);
    }
    best
}

/// Kernel bandwidth and CPU cost per dispatch inside a batch.
/// Best seconds per call of `record` over three batches of `reps` calls (after one warm-up
/// batch), each timed on the GPU from its first command to its last
/// (`Batch::submit_timed`: timestamp queries, as PyTorch's side times with CUDA events), or
/// from submit to completion on the host where the adapter has no timestamps inside
/// encoders. On the host's clock, a late wake-up of the waiting thread on a busy host
/// counted against the kernel: the whole-array sum (3 ms batches) read 2353 GB/s in one
/// fresh H100 process against 2685-2697 in two others of the same call.
fn time_batch<'a>(
    kernels: &'a vramkit::kernels::Kernels,
    reps: usize,
    record: impl Fn(&mut vramkit::kernels::Batch<'a>),
) -> f64 {
    let run = |reps: usize| {
        let mut b = kernels.batch();
        for _ in 0..reps {
            record(&mut b);
        }
        b.submit_timed().expect("submit and time").seconds
    };
    run(1);
    (0..3).map(|_| run(reps)).fold(f64::MAX, f64::min) / reps as f64
}

/// Runs `step` (which returns the seconds it measured) until the machine is warm: at
/// least 0.5 s, and until three steps in a row agree within 2 % (at most 10 s). A GPU
/// idles at a low clock (345 MHz on the H100) and the first kernels and transfers of a
/// fresh process ran at half speed. Prints and records `{what}_warmup_ms`.
pub fn warm_until_steady(what: &str, figures: &mut Figures, mut step: impl FnMut() -> f64) {
    let start = Instant::now();
    let mut last: Vec<f64> = Vec::new();
    let mut steps = 0;
    let steady = loop {
        last.push(step());
        steps += 1;
        if last.len() > 3 {
            last.remove(0);
        }
        let elapsed = start.elapsed().as_secs_f64();
        let (lo, hi) = last
            .iter()
            .fold((f64::MAX, 0.0f64), |(lo, hi), &t| (lo.min(t), hi.max(t)));
        let steady = last.len() == 3 && hi <= lo * 1.02;
        if (elapsed >= 0.5 && steady) || elapsed > 10.0 {
            break steady;
        }
    };
    let ms = start.elapsed().as_secs_f64() * 1e3;
    println!(
        "{what} warm-up: {steps} steps, {ms:.0} ms, {}",
        if steady {
            "last three within 2 %"
        } else {
            "NOT steady after 10 s"
        }
    );
    figures.add(format!("{what}_warmup_ms"), format!("{ms:.0}"));
}

/// Axpy batches until the clocks have ramped up ([`warm_until_steady`]).
fn warm_up(
    kernels: &vramkit::kernels::Kernels,
    x: &vramkit::arena::Typed<f32>,
    y: &vramkit::arena::Typed<f32>,
    figures: &mut Figures,
) {
    let n = x.len() as u64;
    warm_until_steady("kernel", figures, || {
        time_batch(kernels, 10, |b| {
            b.axpy(1e-6, (x, n), (y, n)).expect("axpy");
        })
    });
}

/// The operands of one product the matmul figures are taken on: a (m x k) and b (k x n) of
/// fixed values in [-1, 1], in f32 and rounded to f16, and c (m x n, f32).
struct ProductOperands {
    a_data: Vec<f32>,
    b_data: Vec<f32>,
    a: vramkit::arena::Allocation,
    b: vramkit::arena::Allocation,
    ah: vramkit::arena::Allocation,
    bh: vramkit::arena::Allocation,
    c: vramkit::arena::Allocation,
}

impl ProductOperands {
    fn new(arena: &Arena, (m, n, k): (usize, usize, usize)) -> ProductOperands {
        let a_data: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0)
            .collect();
        let b_data: Vec<f32> = (0..k * n)
            .map(|i| ((i * 104729) % 1999) as f32 / 1000.0 - 1.0)
            .collect();
        let upload = |data: &[u8], label: &str| {
            let alloc = arena.alloc(data.len() as u64, label).expect(label);
            arena
                .gpu()
                .queue()
                .write_buffer(alloc.buffer(), alloc.offset(), data);
            alloc
        };
        let half = |v: &[f32]| -> Vec<u16> {
            v.iter()
                .map(|&f| half::f16::from_f32(f).to_bits())
                .collect()
        };
        ProductOperands {
            a: upload(bytemuck::cast_slice(&a_data), "a"),
            b: upload(bytemuck::cast_slice(&b_data), "b"),
            ah: upload(bytemuck::cast_slice(&half(&a_data)), "a f16"),
            bh: upload(bytemuck::cast_slice(&half(&b_data)), "b f16"),
            c: arena.alloc(4 * (m * n) as u64, "c").expect("c"),
            a_data,
            b_data,
        }
    }
}

/// Checks 32 elements of the product `got` (m x n) of `a` (m x k) and `b` (k x n) against
/// an f64 product, each within `tol` of its `sum |a| |b|`.
fn spot_check(
    name: &str,
    got: &[f32],
    (a, b): (&[f32], &[f32]),
    (m, n, k): (usize, usize, usize),
    tol: f64,
) {
    for s in 0..32 {
        let (i, j) = ((s * 131) % m, (s * 977) % n);
        let (want, mag) = (0..k)
            .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
            .fold((0.0, 0.0), |(w, g), t| (w + t, g + t.abs()));
        let err = (got[i * n + j] as f64 - want).abs() / mag;
        assert!(
            err < tol,
            "{name}: c[{i}][{j}] = {} want {want} (err {err:e})",
            got[i * n + j]
        );
    }
}

pub fn suite_kernels(gpu: &Gpu, figures: &mut Figures) {
    use vramkit::kernels::{Binary, KernelOptions, Kernels, MatmulInput, Reduce, ScanKind, Unary};
    let arena = Arena::new(gpu, Default::default()).expect("arena");
    let kernels = Kernels::new(&arena).expect("kernels");
    let portable = Kernels::with_options(&arena, KernelOptions::portable()).expect("kernels");
    println!("\n== kernels: f32, GB/s counting bytes read + written ==");
    let n: usize = if gpu.is_cpu() { 1 << 22 } else { 1 << 26 };
    let x = arena.alloc_typed::<f32>(n, "x").expect("x");
    let y = arena.alloc_typed::<f32>(n, "y").expect("y");
    let z = arena.alloc_typed::<f32>(n, "z").expect("z");
    let data: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 1e-3).collect();
    for a in [&x, &y, &z] {
        gpu.queue()
            .write_buffer(a.buffer(), a.offset(), bytemuck::cast_slice(&data));
    }
    let reps = if gpu.is_cpu() { 3 } else { 30 };
    warm_up(&kernels, &x, &y, figures);
    println!(
        "{:<20} {:>12} {:>10} {:>10}",
        "kernel", "elements", "ms/call", "GB/s"
    );
    let out = arena.alloc_typed::<f32>(1, "sum out").expect("out");
    let nn = n as u64;
    // A square transpose.
    let side = (n as f64).sqrt() as u64;
    // Softmax rows: long rows held in registers, vocabulary-sized rows (a multiple of 4:
    // the long-row sweep; odd: the scalar kernel) and attention-score-sized rows (several
    // per workgroup; 197 is ViT's 14 x 14 + 1 tokens).
    let (rows, cols) = (n as u64 / 16384, 16384u64);
    let (vocab_rows, vocab_cols) = (n as u64 / 32000, 32000u64);
    let (odd_rows, odd_cols) = (n as u64 / 50257, 50257u64);
    let (short_rows, short_cols) = (n as u64 / 128, 128u64);
    let (vit_rows, vit_cols) = (n as u64 / 197, 197u64);
    // (name, bytes per element read + written, elements)
    let cases: [(&str, u64, u64); 19] = [
        ("axpy", 12, nn),
        ("copy", 8, nn),
        ("fill", 4, nn),
        ("add", 12, nn),
        ("gelu", 8, nn),
        ("sum", 4, nn),
        ("sum_portable", 4, nn),
        ("scan_u32", 8, nn),
        ("scan_f32", 8, nn),
        ("scan_u32_portable", 8, nn),
        ("transpose", 8, side * side),
        ("softmax", 8, rows * cols),
        ("softmax_32000", 8, vocab_rows * vocab_cols),
        ("softmax_50257", 8, odd_rows * odd_cols),
        ("softmax_128", 8, short_rows * short_cols),
        ("softmax_197", 8, vit_rows * vit_cols),
        ("softmax_128_portable", 8, short_rows * short_cols),
        ("softmax_197_portable", 8, vit_rows * vit_cols),
        ("to_f16", 6, nn),
    ];
    let mut copy_gbps = 0.0;
    for (name, bytes_per_elem, elems) in cases {
        let k = if name.ends_with("_portable") {
            &portable
        } else {
            &kernels
        };
        let secs = time_batch(k, reps, |b| {
            match name {
                "axpy" => b.axpy(1e-6, (&x, nn), (&y, nn)).map(|_| ()),
                "copy" => b.copy((&x, nn), (&y, nn)).map(|_| ()),
                "fill" => b.fill(1.0, (&y, nn)).map(|_| ()),
                "add" => b
                    .binary(Binary::Add, (&x, nn), (&y, nn), (&z, nn))
                    .map(|_| ()),
                "gelu" => b.map(Unary::Gelu, (&x, nn), (&y, nn)).map(|_| ()),
                "sum" | "sum_portable" => b.reduce(Reduce::Sum, (&x, nn), (&out, 1)).map(|_| ()),
                "scan_u32" | "scan_u32_portable" => b
                    .scan::<u32>(
                        ScanKind::Inclusive,
                        (x.allocation(), nn),
                        (y.allocation(), nn),
                    )
                    .map(|_| ()),
                "scan_f32" => b
                    .scan::<f32>(ScanKind::Inclusive, (&x, nn), (&y, nn))
                    .map(|_| ()),
                "transpose" => b
                    .transpose(side, (&x, side * side), (&y, side * side))
                    .map(|_| ()),
                "softmax" => b
                    .softmax_rows(rows, (&x, rows * cols), (&y, rows * cols))
                    .map(|_| ()),
                "softmax_32000" => b
                    .softmax_rows(
                        vocab_rows,
                        (&x, vocab_rows * vocab_cols),
                        (&y, vocab_rows * vocab_cols),
                    )
                    .map(|_| ()),
                "softmax_50257" => b
                    .softmax_rows(
                        odd_rows,
                        (&x, odd_rows * odd_cols),
                        (&y, odd_rows * odd_cols),
                    )
                    .map(|_| ()),
                "softmax_197" | "softmax_197_portable" => b
                    .softmax_rows(
                        vit_rows,
                        (&x, vit_rows * vit_cols),
                        (&y, vit_rows * vit_cols),
                    )
                    .map(|_| ()),
                "softmax_128" | "softmax_128_portable" => b
                    .softmax_rows(
                        short_rows,
                        (&x, short_rows * short_cols),
                        (&y, short_rows * short_cols),
                    )
                    .map(|_| ()),
                _ => b.to_f16((&x, nn), (y.allocation(), nn)).map(|_| ()),
            }
            .expect("record");
        });
        let gbps = bytes_per_elem as f64 * elems as f64 / secs / 1e9;
        println!(
            "{:<20} {:>12} {:>10.3} {:>10.1}",
            name,
            elems,
            secs * 1e3,
            gbps
        );
        figures.add(format!("kernel_{name}_gbps"), format!("{gbps:.1}"));
        if name == "copy" {
            copy_gbps = gbps;
        }
        if name.starts_with("scan") {
            figures.add(
                format!("kernel_{name}_vs_copy"),
                format!("{:.2}", gbps / copy_gbps),
            );
        }
    }
    drop((x, y, z));

    // Matmul: TFLOP/s at m = n = k, with a spot check of 32 entries against the CPU; on
    // GPUs at 4096 (`kernel_matmul_*_tflops`) and 8192 (`kernel_matmul_*_8192_tflops`).
    let q = gpu.queue();
    let to_half = |v: &[f32]| -> Vec<u16> {
        v.iter()
            .map(|&f| half::f16::from_f32(f).to_bits())
            .collect()
    };
    let mm_reps = if gpu.is_cpu() { 1 } else { 10 };
    // The f16 product on the matrix units where the device has them, and without them in
    // the same process (the register-blocked kernel the f32 product runs), at 4096^3.
    let without_units = Kernels::with_options(
        &arena,
        KernelOptions {
            matrix_units: false,
            ..Default::default()
        },
    )
    .expect("kernels");
    let dims: &[u64] = if gpu.is_cpu() { &[512] } else { &[4096, 8192] };
    for &dim in dims {
        let d = dim as usize;
        let suffix = if dim == 8192 { "_8192" } else { "" };
        let ProductOperands {
            a_data,
            b_data,
            a,
            b,
            ah,
            bh,
            c,
        } = ProductOperands::new(&arena, (d, d, d));
        let mut cases = vec![
            ("matmul_f32", MatmulInput::F32, (&a, &b), &kernels),
            ("matmul_f16", MatmulInput::F16, (&ah, &bh), &kernels),
        ];
        if gpu.has_matrix_units() && dim == 4096 {
            cases.push((
                "matmul_f16_simt",
                MatmulInput::F16,
                (&ah, &bh),
                &without_units,
            ));
        }
        // The bandwidth warm-up above does not settle a compute-bound kernel: the one kernel
        // figure whose fresh processes disagreed by more than 5 % was the f32 product in the
        // first process after a machine start (26.9-31.8 against 36.7-37.2 TFLOP/s). So the
        // products get a warm-up of their own, the f32 kernel until steady.
        warm_until_steady("matmul", figures, || {
            time_batch(&kernels, mm_reps, |batch| {
                batch
                    .matmul::<f32>(
                        MatmulShape {
                            m: dim,
                            k: dim,
                            n: dim,
                        },
                        &a,
                        &b,
                        &c,
                    )
                    .expect("record");
            })
        });
        for (name, input, (ai, bi), kernels) in cases {
            let secs = time_batch(kernels, mm_reps, |batch| {
                let shape = MatmulShape {
                    m: dim,
                    k: dim,
                    n: dim,
                };
                let one = vramkit::kernels::MatmulBatch::packed(1, shape);
                bmm_as(batch, input, shape, one, ai, bi, &c).expect("record");
            });
            let got = vramkit::readback::read_as::<f32>(gpu, c.buffer(), c.offset(), d * d)
                .expect("read");
            let tol = if input == MatmulInput::F32 {
                1e-4
            } else {
                2e-2
            };
            spot_check(name, &got, (&a_data, &b_data), (d, d, d), tol);
            let tflops = 2.0 * (dim as f64).powi(3) / secs / 1e12;
            println!(
                "{:<14} {:>12} {:>10.3} {:>9.2} TFLOP/s (spot-checked)",
                name,
                format!("{dim}^3"),
                secs * 1e3,
                tflops
            );
            figures.add(
                format!("kernel_{name}{suffix}_tflops"),
                format!("{tflops:.2}"),
            );
        }
        // The f16 product with an f16 result, as PyTorch's f16 matmul returns
        // (`kernel_matmul_f16_out*_tflops`).
        let ch = arena
            .alloc((d * d * 2) as u64, "bench matmul f16 out")
            .expect("alloc");
        let shape = MatmulShape {
            m: dim,
            k: dim,
            n: dim,
        };
        let secs = time_batch(&kernels, mm_reps, |batch| {
            batch
                .matmul_f16_out(shape, (&ah, dim * dim), (&bh, dim * dim), (&ch, dim * dim))
                .expect("record");
        });
        let halves =
            vramkit::readback::read_as::<u16>(gpu, ch.buffer(), ch.offset(), d * d).expect("read");
        let got: Vec<f32> = halves
            .iter()
            .map(|&h| half::f16::from_bits(h).to_f32())
            .collect();
        spot_check("matmul_f16_out", &got, (&a_data, &b_data), (d, d, d), 2e-2);
        let tflops = 2.0 * (dim as f64).powi(3) / secs / 1e12;
        println!(
            "{:<14} {:>12} {:>10.3} {:>9.2} TFLOP/s (spot-checked)",
            "matmul_f16_out",
            format!("{dim}^3"),
            secs * 1e3,
            tflops
        );
        figures.add(
            format!("kernel_matmul_f16_out{suffix}_tflops"),
            format!("{tflops:.2}"),
        );
        drop((a, b, ah, bh, c, ch));
    }
    // A small output with a long k, 512 x 512 x 8192 on GPUs: 16 tiles, which the library
    // splits along k (`KernelOptions::split_k`), f16 on the matrix units and f32 on the
    // four-element kernel (`kernel_matmul_*_long_k_tflops`).
    {
        let (m, k) = if gpu.is_cpu() {
            (64, 1024)
        } else {
            (512, 8192)
        };
        let (mu, ku) = (m as usize, k as usize);
        let ProductOperands {
            a_data,
            b_data,
            a,
            b,
            ah,
            bh,
            c,
        } = ProductOperands::new(&arena, (mu, mu, ku));
        let shape = MatmulShape { m, k, n: m };
        for (name, input, (ai, bi), reps, tol) in [
            ("f16", MatmulInput::F16, (&ah, &bh), mm_reps * 10, 2e-2),
            ("f32", MatmulInput::F32, (&a, &b), mm_reps * 2, 1e-4),
        ] {
            let secs = time_batch(&kernels, reps, |batch| {
                let one = vramkit::kernels::MatmulBatch::packed(1, shape);
                bmm_as(batch, input, shape, one, ai, bi, &c).expect("record");
            });
            let got = vramkit::readback::read_as::<f32>(gpu, c.buffer(), c.offset(), mu * mu)
                .expect("read");
            spot_check(
                &format!("long k {name}"),
                &got,
                (&a_data, &b_data),
                (mu, mu, ku),
                tol,
            );
            let tflops = 2.0 * (m * m * k) as f64 / secs / 1e12;
            println!(
                "{:<14} {:>12} {:>10.3} {:>9.2} TFLOP/s (spot-checked)",
                format!("matmul_{name}"),
                format!("{m}x{m}x{k}"),
                secs * 1e3,
                tflops
            );
            figures.add(
                format!("kernel_matmul_{name}_long_k_tflops"),
                format!("{tflops:.2}"),
            );
        }
    }

    // Batched products at the shapes of attention: per head, scores = Q K^T (L x D by
    // D x L) and out = P V (L x L by L x D); 32 heads of L = 2048, D = 128 on GPUs.
    let (heads, l, dh) = if gpu.is_cpu() {
        (4u64, 128u64, 32u64)
    } else {
        (32, 2048, 128)
    };
    let scores = MatmulShape { m: l, k: dh, n: l };
    let values = MatmulShape { m: l, k: l, n: dh };
    let mut seed = 7u64;
    let mut random = |n: u64| -> Vec<f32> {
        (0..n)
            .map(|_| {
                seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (seed >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    };
    let host = [
        random(heads * l * dh),
        random(heads * dh * l),
        random(heads * l * l),
        random(heads * l * dh),
    ];
    let upload = |data: &[f32], half: bool, label: &str| {
        let bytes: Vec<u8> = if half {
            bytemuck::cast_slice(&to_half(data)).to_vec()
        } else {
            bytemuck::cast_slice(data).to_vec()
        };
        let alloc = arena.alloc(bytes.len() as u64, label).expect("bmm operand");
        q.write_buffer(alloc.buffer(), alloc.offset(), &bytes);
        alloc
    };
    let out_scores = arena
        .alloc(4 * heads * l * l, "bmm scores")
        .expect("scores");
    let out_values = arena.alloc(4 * heads * l * dh, "bmm out").expect("out");
    for (name, input, half) in [
        ("bmm_f32", MatmulInput::F32, false),
        ("bmm_f16", MatmulInput::F16, true),
    ] {
        let ops: Vec<_> = host
            .iter()
            .zip(["q", "k^T", "p", "v"])
            .map(|(h, n)| upload(h, half, n))
            .collect();
        // A macro, not a closure: each use is a closure of its own whose borrows of the
        // operands live as long as the batch `time_batch` makes.
        macro_rules! both {
            () => {
                |batch: &mut vramkit::kernels::Batch<'_>| {
                    let packed = vramkit::kernels::MatmulBatch::packed;
                    let (q, kt, p, v) = (&ops[0], &ops[1], &ops[2], &ops[3]);
                    bmm_as(
                        batch,
                        input,
                        scores,
                        packed(heads, scores),
                        q,
                        kt,
                        &out_scores,
                    )
                    .expect("record");
                    bmm_as(
                        batch,
                        input,
                        values,
                        packed(heads, values),
                        p,
                        v,
                        &out_values,
                    )
                    .expect("record");
                }
            };
        }
        // The uploads and the previous case's CPU checks let the GPU's clock fall: warm
        // it again on this case's own products before timing them.
        warm_until_steady(name, figures, || time_batch(&kernels, mm_reps, both!()));
        let secs = time_batch(&kernels, mm_reps, both!());
        // Each product alone too: their shapes differ (n = L against n = D).
        for (part, shape, (x, y), out) in [
            ("scores", scores, (&ops[0], &ops[1]), &out_scores),
            ("values", values, (&ops[2], &ops[3]), &out_values),
        ] {
            let secs = time_batch(&kernels, mm_reps, |batch| {
                let layout = vramkit::kernels::MatmulBatch::packed(heads, shape);
                bmm_as(batch, input, shape, layout, x, y, out).expect("record");
            });
            let tflops = vramkit::kernels::MatmulBatch::packed(heads, shape).flops(shape) as f64
                / secs
                / 1e12;
            figures.add(
                format!("kernel_{name}_{part}_tflops"),
                format!("{tflops:.2}"),
            );
        }
        // Spot checks of both products in the last head against the CPU (on the inputs
        // as the kernel saw them: rounded to f16 for the f16 product).
        let seen = |v: &[f32]| -> Vec<f32> {
            if half {
                v.iter().map(|&x| half::f16::from_f32(x).to_f32()).collect()
            } else {
                v.to_vec()
            }
        };
        let (qh, kh, ph, vh) = (
            seen(&host[0]),
            seen(&host[1]),
            seen(&host[2]),
            seen(&host[3]),
        );
        let got_s = vramkit::readback::read_as::<f32>(
            gpu,
            out_scores.buffer(),
            out_scores.offset(),
            (heads * l * l) as usize,
        )
        .expect("read");
        let got_o = vramkit::readback::read_as::<f32>(
            gpu,
            out_values.buffer(),
            out_values.offset(),
            (heads * l * dh) as usize,
        )
        .expect("read");
        // Element (i, j) of the last head's `a x b` (a: rows x k, b: k x cols, both
        // row-major and packed head after head) against `got`, relative to sum |a||b|.
        let z = (heads - 1) as usize;
        let check = |what: &str,
                     (a, b, got): (&[f32], &[f32], &[f32]),
                     (rows, k, cols): (usize, usize, usize),
                     (i, j): (usize, usize)| {
            let (a, b) = (&a[z * rows * k..], &b[z * k * cols..]);
            let terms = (0..k).map(|p| a[i * k + p] as f64 * b[p * cols + j] as f64);
            let (want, mag) = terms.fold((0.0, 0.0), |(w, m), t| (w + t, m + t.abs()));
            let got = got[z * rows * cols + i * cols + j] as f64;
            assert!(
                (got - want).abs() <= 1e-4 * mag + 1e-6,
                "{name} {what}[{z}][{i}][{j}] = {got}, want {want}"
            );
        };
        let (l, dh) = (l as usize, dh as usize);
        for s in 0..16 {
            let (i, j) = ((s * 131) % l, (s * 977) % l);
            check("scores", (&qh, &kh, &got_s), (l, dh, l), (i, j));
            check("out", (&ph, &vh, &got_o), (l, l, dh), (i, j % dh));
        }
        let flops = vramkit::kernels::MatmulBatch::packed(heads, scores).flops(scores)
            + vramkit::kernels::MatmulBatch::packed(heads, values).flops(values);
        let tflops = flops as f64 / secs / 1e12;
        println!(
            "{:<14} {:>12} {:>10.3} {:>9.2} TFLOP/s (spot-checked)",
            name,
            format!("{heads}x{l}x{l}x{dh}"),
            secs * 1e3,
            tflops
        );
        figures.add(format!("kernel_{name}_tflops"), format!("{tflops:.2}"));
    }
    drop((out_scores, out_values));

    // CPU cost of recording a dispatch inside a batch (small n, nothing waits on the GPU).
    let small = arena.alloc_typed::<f32>(1024, "small").expect("small");
    let small_y = arena.alloc_typed::<f32>(1024, "small y").expect("small y");
    let count = 2000;
    let mut best = f64::MAX;
    for _ in 0..3 {
        let mut b = kernels.batch();
        let t = Instant::now();
        for _ in 0..count {
            b.axpy(1.0, (&small, 1024), (&small_y, 1024))
                .expect("record");
        }
        best = best.min(t.elapsed().as_secs_f64() / count as f64);
        let idx = b.submit().expect("submit");
        gpu.wait_for(idx).expect("wait");
    }
    println!("cpu per dispatch in a batch: {:.2} us", best * 1e6);
    figures.add("kernel_cpu_us_per_dispatch", format!("{:.3}", best * 1e6));
}

/// Seconds of the fastest of `reps` calls of `f`, each timed until the GPU is idle,
/// after one untimed warm-up call whose GPU work is waited for.
pub fn best_of(gpu: &Gpu, reps: usize, f: &mut dyn FnMut()) -> f64 {
    f();
    gpu.wait_idle().expect("wait");
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            gpu.wait_idle().expect("wait");
            t.elapsed().as_secs_f64()
        })
        .fold(f64::MAX, f64::min)
}

/// The host side of the stream paths without the GPU: the upload's fill (a chunk at a time
/// into a ring of the uploader's staging size, in 256 KiB pieces over its threads) and the
/// reverse, a copy out of that ring as download_into's (which streams its stores; these
/// are plain copies).
struct HostCopier {
    chunk: usize,
    ring: Vec<u8>,
    pool: rayon::ThreadPool,
}

impl HostCopier {
    fn new(chunk: usize, threads: usize, ring: usize) -> HostCopier {
        HostCopier {
            chunk,
            ring: vec![0u8; ring],
            pool: rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("thread pool"),
        }
    }

    /// Copies `data` into the ring, a chunk at a time.
    fn fill(&mut self, data: &[u8]) {
        for (k, piece) in data.chunks(self.chunk).enumerate() {
            let at = (k * self.chunk) % self.ring.len();
            copy_in_pieces(&self.pool, &mut self.ring[at..at + piece.len()], piece);
        }
    }

    /// Copies the ring out into `out`, a chunk at a time.
    fn drain(&self, out: &mut [u8]) {
        for (k, piece) in out.chunks_mut(self.chunk).enumerate() {
            let at = (k * self.chunk) % self.ring.len();
            copy_in_pieces(&self.pool, piece, &self.ring[at..at + piece.len()]);
        }
    }
}

/// One chunk's copy, in 256 KiB pieces over `pool`'s threads.
fn copy_in_pieces(pool: &rayon::ThreadPool, dst: &mut [u8], src: &[u8]) {
    use rayon::prelude::*;
    pool.install(|| {
        dst.par_chunks_mut(256 << 10)
            .zip(src.par_chunks(256 << 10))
            .for_each(|(d, s)| d.copy_from_slice(s))
    });
}

/// Runs `dma` (a GPU copy of `bytes` that returns once done) in a loop on another thread
/// while this one times `host` `reps` times; returns the GPU copy's GB/s over the copies
/// that ran wholly inside the host's timed window, and the host's best GB/s there.
fn concurrently(
    bytes: u64,
    mut dma: impl FnMut() + Send,
    mut host: impl FnMut(),
    reps: usize,
) -> (f64, f64) {
    use std::sync::atomic::{AtomicBool, Ordering};
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let copies = s.spawn(|| {
            let mut spans = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                dma();
                spans.push((t, Instant::now()));
            }
            spans
        });
        // Let the copies start before the window opens.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let window = Instant::now();
        let mut best = f64::MAX;
        for _ in 0..reps.max(3) {
            let t = Instant::now();
            host();
            best = best.min(t.elapsed().as_secs_f64());
        }
        let closed = Instant::now();
        stop.store(true, Ordering::Relaxed);
        let spans = copies.join().expect("copy thread");
        let inside: Vec<f64> = spans
            .iter()
            .filter(|(a, b)| *a >= window && *b <= closed)
            .map(|(a, b)| (*b - *a).as_secs_f64())
            .collect();
        let gpu = if inside.is_empty() {
            0.0
        } else {
            inside.len() as f64 * bytes as f64 / inside.iter().sum::<f64>() / 1e9
        };
        (gpu, bytes as f64 / best / 1e9)
    })
}

pub fn suite_stream(gpu: &Gpu, figures: &mut Figures) {
    use vramkit::stream::{Uploader, UploaderConfig};
    let size: u64 = if gpu.is_cpu() { 128 << 20 } else { 1 << 30 };
    let arena = bench_arena(gpu);
    let dst = arena.alloc(size, "upload target").expect("dst");
    let data: Vec<u8> = (0..size as usize)
        .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
        .collect();
    let chunk = 64usize << 20;
    // Timed repetitions per path (best counts): with 3 a single slow spell of the host
    // (seen on fresh device machines) could set a path's figure; VRAMKIT_STREAM_REPS
    // overrides.
    let reps: usize = std::env::var("VRAMKIT_STREAM_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let best = |f: &mut dyn FnMut()| best_of(gpu, reps, f);
    let uploader = Uploader::new(gpu, UploaderConfig::default());
    // Uploads and downloads until their times agree: the first process of a device call
    // ran every host path at half the rate of the next two.
    {
        let downloader = vramkit::stream::Downloader::new(gpu, Default::default());
        let mut out = vec![0u8; size as usize];
        warm_until_steady("stream", figures, || {
            let t = Instant::now();
            uploader.upload(&dst, 0, &data).expect("upload");
            gpu.wait_idle().expect("wait");
            downloader
                .download_into(&dst, 0, &mut out)
                .expect("download");
            t.elapsed().as_secs_f64()
        });
    }
    // VRAMKIT_STREAM_SWEEP=1 also times other chunk sizes, depths and thread counts, once
    // the machine is warm.
    let sweep = std::env::var("VRAMKIT_STREAM_SWEEP").is_ok();
    if sweep {
        let mut out = vec![0u8; size as usize];
        for (chunk_mb, depth, threads) in [
            (2u64, 4usize, 16usize),
            (4, 4, 16),
            (8, 4, 16),
            (8, 8, 16),
            (8, 16, 16),
            (16, 4, 16),
            (16, 8, 16),
            (32, 4, 16),
            (32, 4, 8),
        ] {
            let d = vramkit::stream::Downloader::new(
                gpu,
                vramkit::stream::DownloaderConfig {
                    chunk_size: chunk_mb << 20,
                    depth,
                    copy_threads: threads,
                    host_staging: true,
                },
            );
            let t = best(&mut || d.download_into(&dst, 0, &mut out).expect("download"));
            println!(
                "sweep download_into, chunk {chunk_mb} MiB, depth {depth}, {threads} threads: \
                 {:.2} GB/s",
                size as f64 / t / 1e9
            );
        }
    }
    if sweep {
        for (chunk_mb, threads, ring) in [
            (2u64, 16usize, 4u64),
            (4, 16, 4),
            (4, 16, 8),
            (8, 16, 4),
            (8, 16, 8),
            (16, 16, 4),
            (16, 16, 8),
            (32, 16, 8),
            (32, 8, 8),
        ] {
            let cfg = UploaderConfig {
                chunk_size: chunk_mb << 20,
                max_staging: ring * (chunk_mb << 20),
                copy_threads: threads,
                host_staging: true,
                ..Default::default()
            };
            let u = Uploader::new(gpu, cfg);
            let t = best(&mut || u.upload(&dst, 0, &data).expect("upload"));
            println!(
                "sweep upload, host staging, chunk {chunk_mb} MiB x {ring}, {threads} \
                     threads: {:.2} GB/s",
                size as f64 / t / 1e9
            );
        }
    }
    let before = uploader.stats();
    let ours = best(&mut || uploader.upload(&dst, 0, &data).expect("upload"));
    // Near 1: the fill outpaces the GPU's copies and the ring waits on them; near 0: the
    // host fill is what the upload waits for.
    let after = uploader.stats();
    let ring_waits =
        (after.waits - before.waits) as f64 / (after.chunks - before.chunks).max(1) as f64;
    // The same fill with no GPU: the data copied into a ring of the uploader's default
    // staging size, a chunk at a time in 256 KiB pieces over the same threads. The upload
    // cannot beat this while it is fill-bound (waits per chunk near 0).
    let defaults = UploaderConfig::default();
    let mut host = HostCopier::new(
        defaults.chunk_size as usize,
        defaults.copy_threads,
        (defaults.max_staging as usize).min(data.len()),
    );
    let host_fill = best(&mut || host.fill(&data));
    let mapped_uploader = Uploader::new(
        gpu,
        UploaderConfig {
            host_staging: false,
            ..Default::default()
        },
    );
    let mapped = best(&mut || mapped_uploader.upload(&dst, 0, &data).expect("upload"));
    // Where the arena's blocks are host-visible (CPU and integrated adapters), uploads above
    // were host writes in place; time the staging path too, into a device-memory block.
    let device_arena = Arena::new(
        gpu,
        ArenaConfig {
            usage: BENCH_USAGE,
            block_memory: vramkit::arena::BlockMemory::Device,
            ..Default::default()
        },
    )
    .expect("arena");
    let device_dst = device_arena
        .alloc(size, "device-memory target")
        .expect("dst");
    let staged = best(&mut || uploader.upload(&device_dst, 0, &data).expect("upload"));
    drop(device_dst);
    // The peers write into a plain wgpu buffer, as a program without vramkit would (on CPU
    // adapters the arena's blocks are host-visible memory, which the peers do not get).
    let peer_dst = gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("peer upload target"),
        size,
        usage: wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_DST
            | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let write_buffer = best(&mut || {
        for (k, piece) in data.chunks(chunk).enumerate() {
            gpu.queue()
                .write_buffer(&peer_dst, (k * chunk) as u64, piece);
        }
        gpu.queue().submit([]);
    });
    let mut belt = wgpu::util::StagingBelt::new(gpu.device().clone(), 8 << 20);
    let staging_belt = best(&mut || {
        let mut encoder = gpu.device().create_command_encoder(&Default::default());
        for (k, piece) in data.chunks(8 << 20).enumerate() {
            let len = wgpu::BufferSize::new(piece.len() as u64).expect("non-empty");
            let mut view = belt.write_buffer(&mut encoder, &peer_dst, (k * (8 << 20)) as u64, len);
            view.copy_from_slice(piece);
        }
        belt.finish();
        gpu.queue().submit([encoder.finish()]);
        belt.recall();
    });
    let plain_download = best(&mut || {
        let back = vramkit::readback::read_buffer(gpu, &peer_dst, 0, size).expect("read");
        assert_eq!(back.len() as u64, size);
    });
    use vramkit::stream::{Downloader, DownloaderConfig};
    let downloader = Downloader::new(gpu, Default::default());
    let mapped_downloader = Downloader::new(
        gpu,
        DownloaderConfig {
            host_staging: false,
            ..Default::default()
        },
    );
    // Into host memory kept across calls (as PyTorch's pinned destination is): the bytes
    // are checked once, outside the timing.
    let mut out = vec![0u8; size as usize];
    let download = best(&mut || {
        downloader
            .download_into(&dst, 0, &mut out)
            .expect("download")
    });
    assert!(out == data, "downloaded bytes differ");
    out.fill(0);
    let download_mapped = best(&mut || {
        mapped_downloader
            .download_into(&dst, 0, &mut out)
            .expect("download")
    });
    assert!(out == data, "downloaded bytes differ (mapped staging)");
    drop(out);
    let download_vec = best(&mut || {
        let back = downloader.download(&dst, 0, size).expect("download");
        assert_eq!(back.len() as u64, size);
    });
    // Zero-copy: until the bytes are readable in host memory (the view exists), then the
    // same with every byte compared straight from staging memory.
    let view_ready = best(&mut || {
        let view = downloader.download_view(&dst, 0, size).expect("view");
        assert_eq!(view.len() as u64, size);
    });
    assert!(
        downloader.download_view(&dst, 0, size).expect("view")[..] == data[..],
        "viewed bytes differ"
    );
    // Reading every byte once (a sum of words, one thread) from the view, after its
    // download and alone, against the same read of ordinary memory; and a memcpy (one
    // thread) out of the view against one out of ordinary memory, into the same warm Vec.
    let view_read = best(&mut || {
        let view = downloader.download_view(&dst, 0, size).expect("view");
        std::hint::black_box(word_sum(&view));
    });
    let mut copy = vec![1u8; size as usize];
    let (view_alone, view_memcpy) = {
        let view = downloader.download_view(&dst, 0, size).expect("view");
        let alone = best(&mut || {
            std::hint::black_box(word_sum(&view));
        });
        let memcpy = best(&mut || copy.copy_from_slice(&view));
        (alone, memcpy)
    };
    let host_read = best(&mut || {
        std::hint::black_box(word_sum(&data));
    });
    let host_memcpy = best(&mut || copy.copy_from_slice(&data));
    std::hint::black_box(&copy);
    drop(copy);
    // Pinned buffers: the data already in host memory the GPU copies directly, as a
    // PyTorch pinned tensor is (the bytes are checked once, outside the timing).
    let mut pinned = vramkit::stream::PinnedBuffer::new(gpu, size, "bench pinned").expect("pinned");
    pinned.as_mut_slice().copy_from_slice(&data);
    let pinned_up = best(&mut || {
        uploader
            .upload_pinned(&dst, 0, &pinned, 0..size)
            .expect("upload_pinned")
    });
    pinned.as_mut_slice().fill(0);
    let pinned_down = best(&mut || {
        downloader
            .download_pinned(&dst, 0, &mut pinned, 0..size)
            .expect("download_pinned")
    });
    assert!(pinned.as_slice() == &data[..], "pinned round trip differs");
    let is_pinned = pinned.is_pinned();
    // What limits the pageable paths: the GPU's copy of pinned memory while the host runs
    // the upload's fill (or download_into's copy out of staging) at the same time, on other
    // memory. Both rates fall when they share the host's memory; the pageable paths need
    // both at once for the same bytes.
    let (h2d_during_fill, fill_during_h2d) = concurrently(
        size,
        || {
            uploader
                .upload_pinned(&dst, 0, &pinned, 0..size)
                .expect("upload_pinned")
        },
        || host.fill(&data),
        reps,
    );
    let mut sink = vec![0u8; size as usize];
    host.drain(&mut sink);
    let (d2h_during_drain, drain_during_d2h) = concurrently(
        size,
        || {
            downloader
                .download_pinned(&dst, 0, &mut pinned, 0..size)
                .expect("download_pinned")
        },
        || host.drain(&mut sink),
        reps,
    );
    drop((pinned, sink));
    let gbps = |s: f64| size as f64 / s / 1e9;
    println!(
        "\n== stream: {} host <-> GPU, GB/s (best of {reps}) ==",
        vramkit::fmt_bytes(size)
    );
    println!("{:<44} {:>10}", "path", "GB/s");
    for (name, t) in [
        ("vramkit Uploader (host staging, default)", ours),
        ("vramkit Uploader (wgpu MAP_WRITE staging)", mapped),
        ("vramkit Uploader into a device-memory block", staged),
        ("Queue::write_buffer", write_buffer),
        ("util::StagingBelt", staging_belt),
        ("Downloader::download_into (host staging)", download),
        (
            "Downloader::download_into (MAP_READ staging)",
            download_mapped,
        ),
        ("Downloader::download (new Vec)", download_vec),
        ("DownloadView, ready", view_ready),
        ("DownloadView, every byte compared", view_read),
        ("download (plain map)", plain_download),
        ("Uploader::upload_pinned (PinnedBuffer)", pinned_up),
        ("Downloader::download_pinned (PinnedBuffer)", pinned_down),
    ] {
        println!("{name:<44} {:>10.2}", gbps(t));
    }
    let s = uploader.stats();
    println!(
        "staging buffers created: {} ({} in host memory; {}), waits {}; uploads written in \
         place into host-visible blocks: {} of {}; downloads read in place: {}",
        s.staging_created,
        s.staging_host,
        vramkit::fmt_bytes(s.staging_bytes),
        s.waits,
        s.direct,
        s.bytes / size,
        downloader.direct_reads(),
    );
    if !is_pinned {
        println!("(PinnedBuffer fell back to ordinary memory on this device)");
    }
    figures.add("upload_gbps", format!("{:.2}", gbps(ours)));
    figures.add("upload_ring_waits_per_chunk", format!("{ring_waits:.2}"));
    figures.add("host_fill_gbps", format!("{:.2}", gbps(host_fill)));
    figures.add("upload_vs_host_fill", format!("{:.2}", host_fill / ours));
    figures.add("upload_pinned_gbps", format!("{:.2}", gbps(pinned_up)));
    figures.add("download_pinned_gbps", format!("{:.2}", gbps(pinned_down)));
    println!(
        "sharing host memory: pinned H2D {:.2} GB/s alone, {:.2} while the host fill runs \
         (the fill {:.2} alone, {:.2} meanwhile); pinned D2H {:.2} alone, {:.2} while a host \
         copy out of staging runs (the copy {:.2} meanwhile)",
        gbps(pinned_up),
        h2d_during_fill,
        gbps(host_fill),
        fill_during_h2d,
        gbps(pinned_down),
        d2h_during_drain,
        drain_during_d2h,
    );
    figures.add(
        "pinned_h2d_during_host_fill_gbps",
        format!("{h2d_during_fill:.2}"),
    );
    figures.add(
        "host_fill_during_pinned_h2d_gbps",
        format!("{fill_during_h2d:.2}"),
    );
    figures.add(
        "pinned_d2h_during_host_copy_gbps",
        format!("{d2h_during_drain:.2}"),
    );
    figures.add(
        "host_copy_during_pinned_d2h_gbps",
        format!("{drain_during_d2h:.2}"),
    );
    figures.add("upload_mapped_staging_gbps", format!("{:.2}", gbps(mapped)));
    figures.add("upload_device_block_gbps", format!("{:.2}", gbps(staged)));
    figures.add(
        "upload_vs_write_buffer",
        format!("{:.2}", write_buffer / ours),
    );
    figures.add(
        "upload_vs_staging_belt",
        format!("{:.2}", staging_belt / ours),
    );
    figures.add("upload_vs_mapped_staging", format!("{:.2}", mapped / ours));
    figures.add("write_buffer_gbps", format!("{:.2}", gbps(write_buffer)));
    figures.add("staging_belt_gbps", format!("{:.2}", gbps(staging_belt)));
    texture_uploads(gpu, &uploader, &best, figures);
    small_uploads(gpu, &arena, &uploader, &best, figures);
    // The zero-copy view is the counterpart of PyTorch's pinned D2H copy: DMA into host
    // memory the program then reads in place. download_into adds a host copy into the
    // caller's memory (PyTorch's counterpart: a D2H copy into pageable memory).
    figures.add("download_gbps", format!("{:.2}", gbps(view_ready)));
    figures.add("download_into_gbps", format!("{:.2}", gbps(download)));
    figures.add(
        "download_mapped_staging_gbps",
        format!("{:.2}", gbps(download_mapped)),
    );
    figures.add("download_vec_gbps", format!("{:.2}", gbps(download_vec)));
    figures.add("download_view_read_gbps", format!("{:.2}", gbps(view_read)));
    figures.add("view_read_alone_gbps", format!("{:.2}", gbps(view_alone)));
    figures.add("host_read_gbps", format!("{:.2}", gbps(host_read)));
    figures.add(
        "download_view_read_vs_host_read",
        format!("{:.2}", host_read / view_read),
    );
    figures.add(
        "view_read_alone_vs_host_read",
        format!("{:.2}", host_read / view_alone),
    );
    figures.add("view_memcpy_gbps", format!("{:.2}", gbps(view_memcpy)));
    figures.add("host_memcpy_gbps", format!("{:.2}", gbps(host_memcpy)));
    figures.add(
        "download_view_read_vs_memcpy",
        format!("{:.2}", host_memcpy / view_memcpy),
    );
    figures.add(
        "download_into_vs_pinned",
        format!("{:.2}", pinned_down / download),
    );
    figures.add(
        "download_vs_plain_map",
        format!("{:.2}", plain_download / download),
    );
}

/// A large RGBA8 image with rows that are not a multiple of 256 bytes, through
/// `Uploader::upload_texture` against `Queue::write_texture` of the same tight rows.
fn texture_uploads(
    gpu: &Gpu,
    uploader: &vramkit::stream::Uploader,
    best: &dyn Fn(&mut dyn FnMut()) -> f64,
    figures: &mut Figures,
) {
    let width = 8000u32.min(gpu.limits().max_texture_dimension_2d);
    let height =
        if gpu.is_cpu() { 1024 } else { 8192u32 }.min(gpu.limits().max_texture_dimension_2d);
    let size = wgpu::Extent3d {
        width,
        height,
        depth_or_array_layers: 1,
    };
    let texture = gpu.device().create_texture(&wgpu::TextureDescriptor {
        label: Some("bench texture"),
        size,
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba8Unorm,
        usage: wgpu::TextureUsages::COPY_DST,
        view_formats: &[],
    });
    let bytes = (width * height * 4) as usize;
    let texels: Vec<u8> = (0..bytes).map(|i| ((i * 31) >> 7) as u8).collect();
    let ours = best(&mut || {
        uploader
            .upload_texture(texture.as_image_copy(), size, &texels)
            .expect("texture upload")
    });
    let write_texture = best(&mut || {
        gpu.queue().write_texture(
            texture.as_image_copy(),
            &texels,
            wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(width * 4),
                rows_per_image: Some(height),
            },
            size,
        );
        gpu.queue().submit([]);
    });
    let gbps = |s: f64| bytes as f64 / s / 1e9;
    println!(
        "texture upload {width}x{height} RGBA8 ({}; rows of {} bytes): upload_texture {:.2} GB/s, \
         Queue::write_texture {:.2} GB/s",
        vramkit::fmt_bytes(bytes as u64),
        width * 4,
        gbps(ours),
        gbps(write_texture)
    );
    figures.add("texture_upload_gbps", format!("{:.2}", gbps(ours)));
    figures.add(
        "texture_upload_vs_write_texture",
        format!("{:.2}", write_texture / ours),
    );
}

/// Many small uploads (4096 of 256 bytes into separate allocations): an `UploadBatch`
/// against `Queue::write_buffer` per upload and `Uploader::upload` per upload, each timed
/// until the device is idle.
fn small_uploads(
    gpu: &Gpu,
    arena: &Arena,
    uploader: &vramkit::stream::Uploader,
    best: &dyn Fn(&mut dyn FnMut()) -> f64,
    figures: &mut Figures,
) {
    let count = 4096usize;
    let targets: Vec<_> = (0..count)
        .map(|_| arena.alloc(256, "small").expect("small"))
        .collect();
    let payload = [0x5au8; 256];
    let batch = best(&mut || {
        let mut b = uploader.batch();
        for t in &targets {
            b.add(t, 0, &payload).expect("add");
        }
        b.submit().expect("submit");
    });
    // In reverse order no upload continues the one before, so each records its own copy.
    let scattered = best(&mut || {
        let mut b = uploader.batch();
        for t in targets.iter().rev() {
            b.add(t, 0, &payload).expect("add");
        }
        b.submit().expect("submit");
    });
    let write_buffer = best(&mut || {
        for t in &targets {
            gpu.queue().write_buffer(t.buffer(), t.offset(), &payload);
        }
        gpu.queue().submit([]);
    });
    // Ends with a submit like the write_buffer peer: bytes queued by write_buffer land
    // only with a submission, and the wait alone would not charge for it.
    let each = best(&mut || {
        for t in &targets {
            uploader.upload(t, 0, &payload).expect("upload");
        }
        gpu.queue().submit([]);
    });
    let us = |s: f64| s * 1e6 / count as f64;
    println!(
        "small uploads ({count} x 256 B), us each: batch {:.3} (adjacent targets merged), \
         batch {:.3} (scattered), write_buffer {:.3}, upload {:.3}",
        us(batch),
        us(scattered),
        us(write_buffer),
        us(each)
    );
    figures.add("small_upload_batch_us", format!("{:.3}", us(batch)));
    figures.add(
        "small_upload_batch_scattered_us",
        format!("{:.3}", us(scattered)),
    );
    figures.add(
        "small_upload_write_buffer_us",
        format!("{:.3}", us(write_buffer)),
    );
    figures.add("small_upload_each_us", format!("{:.3}", us(each)));
    figures.add(
        "small_upload_batch_vs_write_buffer",
        format!("{:.2}", write_buffer / batch),
    );
    figures.add(
        "small_upload_scattered_vs_write_buffer",
        format!("{:.2}", write_buffer / scattered),
    );
    figures.add(
        "small_upload_each_vs_write_buffer",
        format!("{:.2}", write_buffer / each),
    );
}
