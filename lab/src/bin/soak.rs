//! Soak test: several threads run random mixes of allocations (two pools, sizes from
//! 16 B to 4 MiB), uploads, kernels (f16 matmuls on the matrix units where the device
//! has them, and u32 prefix sums, checked exactly), verified downloads, frees, trims and budget changes
//! against one runtime for a given time, and one more runs a planned loop
//! (`vramkit::plan::PlannedLoop`) among them, every iteration checked, some deviating.
//! Tiered memory shares the arena: one thread pins, writes, evicts, prefetches, drops and
//! remakes movable allocations (each checked against a shadow), and one more defragments
//! in bounded passes, while the budget changes under them. Every allocation has a CPU shadow copy; every
//! download is compared with it. At the end it prints `name: value` lines and exits
//! non-zero on any mismatch, any unexpected error, or memory that crept up.
//!
//! ```text
//! cargo run --release -p vramkit-lab --bin soak -- 600     # seconds (default 30)
//! ```
//!
//! With `SOAK_LOSS=1` one more thread loses the device at random points (`Device::destroy`
//! or `Gpu::mark_lost`, in turn), waits until the others have seen it, recovers
//! (`Runtime::recover`, the runtime shared as `RwLock<Runtime>`), and checks that every
//! movable came back equal to its shadow (from the host tier or its restore function) or,
//! without either, fails with `DeviceLost`; then a virtual texture rebuilt on the new
//! device, settled, sampled against the CPU reference. Errors after a loss must be
//! `DeviceLost`; a watchdog ends the run with exit code 1 if no operation completes for
//! 60 s.
//!
//! Knobs: `SOAK_THREADS`, `SOAK_LOSS=1`, `SOAK_CHECK=1` (read each axpy back at once and
//! classify a mismatch), `SOAK_SMALL_UPLOAD=0` and `SOAK_HOST_STAGING=0` (upload paths),
//! and the library's `VRAMKIT_QUEUE_LOCK=0` (reproduces the wgpu-core race `gpu::submit`
//! guards).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};

use half::f16;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vramkit::arena::{Budget, PoolConfig, PoolId, Typed};
use vramkit::kernels::MatmulShape;
use vramkit::kernels::ScanKind;
use vramkit::plan::{LoopConfig, PlannedLoop};
use vramkit::tier::{DefragLimits, DefragOptions, Movable, TierConfig, Tiers};
use vramkit::{Error, Runtime, RuntimeConfig};

/// What every thread counts.
#[derive(Default)]
struct Counts {
    operations: AtomicU64,
    mismatches: AtomicU64,
    unexpected: AtomicU64,
    out_of_memory: AtomicU64,
    /// The planned loop's iterations replayed from the plan, deviations, and iterations
    /// that ran without it.
    planned_replayed: AtomicU64,
    planned_deviations: AtomicU64,
    planned_unplanned: AtomicU64,
    /// f16 matmuls checked (on the matrix units where the device has them).
    matmuls: AtomicU64,
    /// u32 prefix sums checked.
    scans: AtomicU64,
    /// Movable allocations read back and checked.
    tier_checks: AtomicU64,
    /// Defragmentation passes, and the movables they moved.
    defrag_passes: AtomicU64,
    /// Device losses caused, recoveries made, and their slowest time (microseconds).
    losses: AtomicU64,
    recoveries: AtomicU64,
    recovery_max_us: AtomicU64,
    /// `DeviceLost` errors after a loss (expected), movables checked after recoveries,
    /// movables lost as expected, virtual-texture samples checked after recoveries.
    lost_errors: AtomicU64,
    recovered_checks: AtomicU64,
    recovered_lost: AtomicU64,
    vt_samples: AtomicU64,
}

impl Counts {
    /// Counts `e`, an error of an operation: out-of-memory is part of the mix,
    /// `DeviceLost` once a loss was caused; anything else is unexpected.
    fn error(&self, e: &Error, what: &str) {
        match e {
            Error::OutOfMemory(_) => {
                self.out_of_memory.fetch_add(1, Ordering::Relaxed);
            }
            Error::DeviceLost { .. } if self.losses.load(Ordering::Acquire) > 0 => {
                self.lost_errors.fetch_add(1, Ordering::Relaxed);
            }
            e => {
                eprintln!("unexpected error during {what}: {e}");
                self.unexpected.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// A live allocation and what its bytes must be.
struct Live {
    gpu: Typed<f32>,
    shadow: Vec<f32>,
}

const BUDGET_HIGH: u64 = 512 << 20;
const BUDGET_LOW: u64 = 24 << 20;

fn main() {
    // RUST_LOG=wgpu_hal=warn (say) shows what the driver said around a loss.
    let _ = env_logger::try_init();
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: u64 = std::env::args().nth(1).map_or(Ok(30), |s| s.parse())?;
    let losing = knob("SOAK_LOSS") == Some(1);
    let rt = Arc::new(RwLock::new(Runtime::new(
        &vramkit::Gpu::headless()?,
        RuntimeConfig {
            arena: vramkit::ArenaConfig {
                name: "soak".into(),
                budget: Budget::Bytes(BUDGET_HIGH),
                ..Default::default()
            },
            // Knobs for bisecting a failure: SOAK_SMALL_UPLOAD=0 sends every upload through
            // the staging ring, SOAK_HOST_STAGING=0 uses wgpu's mapped staging buffers.
            uploader: vramkit::stream::UploaderConfig {
                small_upload: knob("SOAK_SMALL_UPLOAD").unwrap_or(vramkit::stream::SMALL_UPLOAD),
                host_staging: knob("SOAK_HOST_STAGING") != Some(0),
                ..Default::default()
            },
            downloader: vramkit::stream::DownloaderConfig {
                host_staging: knob("SOAK_HOST_STAGING") != Some(0),
                ..Default::default()
            },
            ..Default::default()
        },
    )?));
    println!("{}", rt.read().gpu().describe());
    let aux = rt.read().arena().add_pool(
        "aux",
        PoolConfig {
            quota: Some(64 << 20),
            usage: wgpu::BufferUsages::STORAGE
                | wgpu::BufferUsages::COPY_DST
                | wgpu::BufferUsages::COPY_SRC,
            ..Default::default()
        },
    )?;
    let counts = Arc::new(Counts::default());
    let tiers = Tiers::new(
        rt.read().arena(),
        TierConfig {
            host_budget: Some(256 << 20),
        },
    )?;
    // The tier thread's movables, shared with the loss thread, which checks them after a
    // recovery.
    let held: Arc<Mutex<Vec<Held>>> = Arc::default();
    watchdog(counts.clone());
    let threads = knob("SOAK_THREADS").map_or_else(
        || std::thread::available_parallelism().map_or(2, |n| n.get().clamp(2, 8)),
        |t| t.max(1) as usize,
    );
    let start = Instant::now();
    let deadline = start + Duration::from_secs(seconds);
    let warm_until = start + Duration::from_secs(seconds / 5);
    // Reserved memory once warm (everything of the warm-up freed and trimmed), compared
    // with the same at the end: memory must not creep.
    let run_phase = |until: Instant, seed: u64| {
        std::thread::scope(|s| {
            for t in 0..threads {
                let (rt, counts) = (rt.clone(), counts.clone());
                s.spawn(move || worker(&rt, aux, &counts, until, seed * 1000 + t as u64));
            }
            let (r, c) = (rt.clone(), counts.clone());
            s.spawn(move || planned_worker(&r, &c, until, seed * 1000 + 999));
            let (r, t, h, c) = (rt.clone(), tiers.clone(), held.clone(), counts.clone());
            s.spawn(move || tier_worker(&r, &t, &h, &c, until, seed * 1000 + 998));
            let (r, t, c) = (rt.clone(), tiers.clone(), counts.clone());
            s.spawn(move || defrag_worker(&r, &t, &c, until));
            if losing {
                let (r, t, h, c) = (rt.clone(), tiers.clone(), held.clone(), counts.clone());
                s.spawn(move || loss_worker(&r, &t, &h, &c, until, seed * 1000 + 997));
            }
        });
    };
    run_phase(warm_until, 1);
    let settle = || -> vramkit::Result<u64> {
        let rt = rt.read();
        rt.arena().set_budget(Budget::Bytes(BUDGET_HIGH))?;
        rt.synchronize()?;
        rt.arena().trim();
        Ok(rt.arena().stats().reserved)
    };
    let reserved_warm = settle()?;
    let losses_warm = counts.losses.load(Ordering::Acquire);
    run_phase(deadline, 2);
    held.lock().clear();
    let reserved_end = settle()?;
    // Memory creeping is measured within one device: a recovery starts a new arena.
    let same_device = counts.losses.load(Ordering::Acquire) == losses_warm;
    let rt = rt.read();
    rt.uploader().release_idle(Duration::ZERO);
    let staging_end = rt.uploader().stats().staging_bytes;
    let c = &counts;
    println!("seconds: {}", start.elapsed().as_secs());
    println!("threads: {threads}");
    println!("operations: {}", c.operations.load(Ordering::Relaxed));
    println!("mismatches: {}", c.mismatches.load(Ordering::Relaxed));
    println!(
        "f16_matmuls: {} (matrix units: {})",
        c.matmuls.load(Ordering::Relaxed),
        rt.gpu().has_matrix_units()
    );
    println!("scans: {}", c.scans.load(Ordering::Relaxed));
    println!("tier_checks: {}", c.tier_checks.load(Ordering::Relaxed));
    println!("defrag_passes: {}", c.defrag_passes.load(Ordering::Relaxed));
    let ts = tiers.stats();
    println!("tier_evictions: {}", ts.evictions);
    println!("tier_restores: {}", ts.restores);
    println!("defrag_moves: {}", ts.defrag_moves);
    println!(
        "errors_unexpected: {}",
        c.unexpected.load(Ordering::Relaxed)
    );
    println!(
        "out_of_memory_expected: {}",
        c.out_of_memory.load(Ordering::Relaxed)
    );
    println!(
        "reserved_growth_after_warmup_bytes: {}",
        reserved_end.saturating_sub(reserved_warm)
    );
    println!("staging_bytes_end: {staging_end}");
    let (losses, recoveries) = (
        c.losses.load(Ordering::Relaxed),
        c.recoveries.load(Ordering::Relaxed),
    );
    println!("device_losses: {losses}");
    println!("devices_alive_end: {}", vramkit::Gpu::live_count());
    println!("recoveries: {recoveries}");
    println!(
        "recovery_max_ms: {:.1}",
        c.recovery_max_us.load(Ordering::Relaxed) as f64 / 1e3
    );
    println!(
        "device_lost_errors_expected: {}",
        c.lost_errors.load(Ordering::Relaxed)
    );
    println!(
        "movables_checked_after_recovery: {}",
        c.recovered_checks.load(Ordering::Relaxed)
    );
    println!(
        "movables_lost_as_expected: {}",
        c.recovered_lost.load(Ordering::Relaxed)
    );
    println!(
        "vt_samples_checked_after_recovery: {}",
        c.vt_samples.load(Ordering::Relaxed)
    );
    let replayed = c.planned_replayed.load(Ordering::Relaxed);
    println!("planned_iterations_replayed: {replayed}");
    println!(
        "planned_iterations_deviating: {}",
        c.planned_deviations.load(Ordering::Relaxed)
    );
    println!(
        "planned_iterations_unplanned: {}",
        c.planned_unplanned.load(Ordering::Relaxed)
    );
    let failed = replayed == 0
        || c.tier_checks.load(Ordering::Relaxed) == 0
        || ts.movables > 0
        || c.mismatches.load(Ordering::Relaxed) > 0
        || c.unexpected.load(Ordering::Relaxed) > 0
        || (same_device && reserved_end > reserved_warm)
        || staging_end > 0
        || (losing && (recoveries == 0 || recoveries != losses));
    if failed {
        return Err("the soak found a problem (see the lines above)".into());
    }
    Ok(())
}

/// A numeric environment knob.
fn knob(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.parse().ok()
}

/// One thread's random mix until `until`; its allocations are its own (those of a lost
/// device are dropped once the runtime has recovered).
fn worker(shared: &RwLock<Runtime>, aux: PoolId, counts: &Counts, until: Instant, seed: u64) {
    let mut r = SmallRng::seed_from_u64(seed);
    // SOAK_CHECK=1 reads every axpy's result back at once and says what went wrong.
    let check_each = knob("SOAK_CHECK") == Some(1);
    let mut live: Vec<Live> = Vec::new();
    let fail = |e: Error, what: &str| counts.error(&e, what);
    let mut generation = 0;
    while Instant::now() < until {
        let rt = &*shared.read();
        let now = counts.recoveries.load(Ordering::Acquire);
        if now != generation {
            live.clear();
            generation = now;
        }
        counts.operations.fetch_add(1, Ordering::Relaxed);
        match r.gen_range(0..100) {
            // Allocate (default pool or the quota'd one) and upload random values.
            0..=29 => {
                let len = 1usize << r.gen_range(2..20);
                let len = r.gen_range(len / 2..=len).max(4);
                let allocated = if r.gen_bool(0.3) {
                    rt.arena()
                        .alloc_in(aux, 4 * len as u64, "soak aux")
                        .and_then(|a| a.typed::<f32>())
                } else {
                    rt.alloc::<f32>(len, "soak")
                };
                match allocated {
                    Ok(gpu) => {
                        let shadow: Vec<f32> = (0..gpu.len())
                            .map(|_| r.gen_range(-8i32..=8) as f32)
                            .collect();
                        match rt.upload(&gpu, &shadow) {
                            Ok(()) => live.push(Live { gpu, shadow }),
                            Err(e) => fail(e, "upload"),
                        }
                    }
                    Err(e) => fail(e, "alloc"),
                }
            }
            // y += a * x on two live allocations (the shorter length), checked later.
            30..=54 if live.len() >= 2 => {
                let (i, j) = (r.gen_range(0..live.len()), r.gen_range(0..live.len()));
                if i == j {
                    continue;
                }
                let n = live[i].gpu.len().min(live[j].gpu.len());
                // Integers and alpha = +-1: every result is exact in f32 (fused or not), so a
                // download must equal its shadow bit for bit.
                let alpha: f32 = if r.gen_bool(0.5) { 1.0 } else { -1.0 };
                let mut batch = rt.batch();
                let recorded = batch
                    .axpy(
                        alpha,
                        live[i].gpu.first(n).expect("n > 0"),
                        live[j].gpu.first(n).expect("n > 0"),
                    )
                    .map(|_| ());
                match recorded.and_then(|()| batch.submit().map(|_| ())) {
                    Ok(()) => {
                        let x = live[i].shadow[..n].to_vec();
                        for (y, x) in live[j].shadow[..n].iter_mut().zip(&x) {
                            *y += alpha * x;
                        }
                        if check_each {
                            check_axpy(rt, &mut live[j], &x, alpha, counts);
                        }
                        // Past 2^20 the sums could leave f32's exact integers: refill.
                        if live[j].shadow.iter().any(|v| v.abs() > (1 << 20) as f32) {
                            let l = &mut live[j];
                            l.shadow
                                .iter_mut()
                                .for_each(|v| *v = r.gen_range(-8i32..=8) as f32);
                            if let Err(e) = rt.upload(&l.gpu, &l.shadow) {
                                fail(e, "refill");
                                live.swap_remove(j);
                            }
                        }
                    }
                    Err(e) => fail(e, "axpy"),
                }
            }
            // Download and compare with the shadow, exactly.
            55..=74 if !live.is_empty() => {
                let l = &live[r.gen_range(0..live.len())];
                match rt.download(&l.gpu) {
                    Ok(got) => {
                        let bad: Vec<usize> =
                            (0..got.len()).filter(|&k| got[k] != l.shadow[k]).collect();
                        if let Some(&k) = bad.first() {
                            eprintln!(
                                "mismatch in '{}' ({} elements, offset {} of a {}-byte block): \
                                 {} wrong, first at {k}: got {} want {}",
                                l.gpu.label(),
                                l.gpu.len(),
                                l.gpu.offset(),
                                l.gpu.buffer().size(),
                                bad.len(),
                                got[k],
                                l.shadow[k]
                            );
                            counts.mismatches.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => fail(e, "download"),
                }
            }
            // An f16 matmul of small integers, checked exactly (products and sums stay
            // well inside f32's exact integers): on the matrix units where the device has
            // them (m and n multiples of 16, k of 8), among the other threads' work.
            93..=94 => {
                let (m, n, k) = (
                    16 * r.gen_range(1..=10),
                    16 * r.gen_range(1..=20),
                    8 * r.gen_range(1..=40),
                );
                let mut ints = |len: usize| -> Vec<f16> {
                    (0..len)
                        .map(|_| f16::from_f32(r.gen_range(-4i32..=4) as f32))
                        .collect()
                };
                let (a, b) = (ints(m * k), ints(k * n));
                let run = || -> vramkit::Result<Vec<f32>> {
                    let aa = rt.alloc_from(&a, "soak matmul a")?;
                    let ba = rt.alloc_from(&b, "soak matmul b")?;
                    let c = rt.alloc::<f32>(m * n, "soak matmul c")?;
                    let mut batch = rt.batch();
                    batch.matmul(
                        MatmulShape {
                            m: m as u64,
                            k: k as u64,
                            n: n as u64,
                        },
                        &aa,
                        &ba,
                        &c,
                    )?;
                    batch.submit()?;
                    rt.download(&c)
                };
                match run() {
                    Ok(got) => {
                        counts.matmuls.fetch_add(1, Ordering::Relaxed);
                        let want = |i: usize, j: usize| -> f32 {
                            (0..k)
                                .map(|p| a[i * k + p].to_f32() * b[p * n + j].to_f32())
                                .sum()
                        };
                        let bad = (0..m * n).find(|&e| got[e] != want(e / n, e % n));
                        if let Some(e) = bad {
                            eprintln!(
                                "mismatch in a {m}x{n}x{k} f16 matmul at ({}, {}): got {} want {}",
                                e / n,
                                e % n,
                                got[e],
                                want(e / n, e % n)
                            );
                            counts.mismatches.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => fail(e, "matmul"),
                }
            }
            // A u32 prefix sum (wrapping) of a live allocation's bits into a new one, read
            // back and compared exactly with the CPU's.
            91..=92 if !live.is_empty() => {
                let l = &live[r.gen_range(0..live.len())];
                let kind = if r.gen_bool(0.5) {
                    ScanKind::Inclusive
                } else {
                    ScanKind::Exclusive
                };
                let run = || -> vramkit::Result<Vec<u32>> {
                    let out = rt.alloc::<u32>(l.gpu.len(), "soak scan")?;
                    let mut batch = rt.batch();
                    batch.scan::<u32>(kind, l.gpu.allocation(), &out)?;
                    batch.submit()?;
                    rt.download(&out)
                };
                match run() {
                    Ok(got) => {
                        counts.scans.fetch_add(1, Ordering::Relaxed);
                        let mut sum = 0u32;
                        let want: Vec<u32> = l
                            .shadow
                            .iter()
                            .map(|v| {
                                let before = sum;
                                sum = sum.wrapping_add(v.to_bits());
                                if kind == ScanKind::Inclusive {
                                    sum
                                } else {
                                    before
                                }
                            })
                            .collect();
                        if let Some(k) = (0..want.len()).find(|&k| got[k] != want[k]) {
                            eprintln!(
                                "mismatch in a {kind:?} scan of {} elements at {k}: got {} want {}",
                                want.len(),
                                got[k],
                                want[k]
                            );
                            counts.mismatches.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Err(e) => fail(e, "scan"),
                }
            }
            // Free.
            75..=90 if !live.is_empty() => {
                live.swap_remove(r.gen_range(0..live.len()));
            }
            // Trim, or budget pressure (lowered, then raised again by another draw).
            95..=97 => {
                rt.arena().trim();
            }
            98 => {
                let _ = rt.arena().set_budget(Budget::Bytes(BUDGET_LOW));
            }
            99 => {
                let _ = rt.arena().set_budget(Budget::Bytes(BUDGET_HIGH));
            }
            _ => {}
        }
        // Bound each thread's live set so the mix keeps freeing.
        if live.len() > 48 {
            live.swap_remove(r.gen_range(0..live.len()));
        }
    }
}

/// A planned loop among the other threads' load: each iteration allocates the same
/// temporaries (one in 16 adds one of another size: a deviation), computes
/// `out = a - b` and `out += a` on integers, reads `out` back and compares it exactly
/// with the CPU. Re-plans every 64 iterations (budget pressure may have stopped the plan
/// from fitting, `LoopStats::plan_failures`).
fn planned_worker(shared: &RwLock<Runtime>, counts: &Counts, until: Instant, seed: u64) {
    let mut r = SmallRng::seed_from_u64(seed);
    let sizes: Vec<usize> = (0..4).map(|_| 1usize << r.gen_range(8..16)).collect();
    let make = |rt: &Runtime| match PlannedLoop::new(rt.arena(), LoopConfig::default()) {
        Ok(p) => Some(p),
        Err(e) => {
            counts.error(&e, "making the planned loop");
            None
        }
    };
    let Some(mut planned) = make(&shared.read()) else {
        return;
    };
    let mut generation = 0;
    let mut iteration = 0u64;
    while Instant::now() < until {
        let rt = &*shared.read();
        let now = counts.recoveries.load(Ordering::Acquire);
        if now != generation {
            // The loop's arena was the lost device's: plan on the new one.
            collect_loop_stats(&planned, counts);
            match make(rt) {
                Some(p) => planned = p,
                None => continue,
            }
            generation = now;
        }
        iteration += 1;
        if iteration.is_multiple_of(64) {
            planned.replan();
        }
        let deviate = iteration > 1 && r.gen_range(0..16) == 0;
        let a: Vec<f32> = (0..sizes[0])
            .map(|_| r.gen_range(-8i32..=8) as f32)
            .collect();
        let b: Vec<f32> = (0..sizes[0])
            .map(|_| r.gen_range(-8i32..=8) as f32)
            .collect();
        let result = (|| -> vramkit::Result<Vec<f32>> {
            let it = planned.begin()?;
            let x = rt.alloc_from(&a, "planned a")?;
            let scratch = rt.alloc::<f32>(sizes[1], "planned scratch")?;
            let detour = if deviate {
                Some(rt.alloc::<f32>(sizes[2] + 4, "planned detour")?)
            } else {
                None
            };
            let y = rt.alloc_from(&b, "planned b")?;
            let out = rt.alloc::<f32>(sizes[0], "planned out")?;
            let mut batch = rt.batch();
            batch
                .fill(3.0, &scratch)?
                .copy(&x, &out)?
                .axpy(-1.0, &y, &out)?
                .axpy(1.0, &x, &out)?;
            batch.submit()?;
            drop((x, y, scratch, detour));
            let tail = rt.alloc::<f32>(sizes[3], "planned tail")?;
            let mut batch = rt.batch();
            batch.fill(1.0, &tail)?;
            batch.submit()?;
            drop(tail);
            let got = rt.download(&out)?;
            drop(out);
            it.end()?;
            Ok(got)
        })();
        counts.operations.fetch_add(1, Ordering::Relaxed);
        match result {
            Ok(got) => {
                let want: Vec<f32> = a.iter().zip(&b).map(|(a, b)| 2.0 * a - b).collect();
                if got != want {
                    eprintln!("mismatch in planned iteration {iteration}");
                    counts.mismatches.fetch_add(1, Ordering::Relaxed);
                }
            }
            Err(e) => counts.error(&e, "a planned iteration"),
        }
    }
    collect_loop_stats(&planned, counts);
}

/// Adds a planned loop's statistics to the counts.
fn collect_loop_stats(planned: &PlannedLoop, counts: &Counts) {
    let s = planned.stats();
    counts
        .planned_replayed
        .fetch_add(s.replayed, Ordering::Relaxed);
    counts
        .planned_deviations
        .fetch_add(s.deviations, Ordering::Relaxed);
    let unplanned = s
        .iterations
        .saturating_sub(s.replayed + s.deviations + s.recorded);
    counts
        .planned_unplanned
        .fetch_add(unplanned, Ordering::Relaxed);
}

/// Reads `y` back right after `y += alpha * x` and, on a mismatch, says whether the axpy
/// was lost, applied twice or something else; the shadow then follows the GPU so one fault
/// is counted once.
fn check_axpy(rt: &Runtime, y: &mut Live, x: &[f32], alpha: f32, counts: &Counts) {
    let got = match rt.download(&y.gpu) {
        Ok(got) => got,
        Err(e) => {
            eprintln!("unexpected error during check: {e}");
            counts.unexpected.fetch_add(1, Ordering::Relaxed);
            return;
        }
    };
    let bad: Vec<usize> = (0..got.len()).filter(|&k| got[k] != y.shadow[k]).collect();
    if bad.is_empty() {
        return;
    }
    let all = |f: &dyn Fn(usize) -> bool| bad.iter().all(|&k| f(k));
    let kind = if all(&|k| k < x.len() && got[k] == y.shadow[k] - alpha * x[k]) {
        "axpy lost"
    } else if all(&|k| k < x.len() && got[k] == y.shadow[k] + alpha * x[k]) {
        "axpy applied twice"
    } else {
        "other"
    };
    eprintln!(
        "mismatch right after axpy on '{}' ({} elements, offset {}): {} wrong from {}: {kind}",
        y.gpu.label(),
        y.gpu.len(),
        y.gpu.offset(),
        bad.len(),
        bad[0]
    );
    counts.mismatches.fetch_add(1, Ordering::Relaxed);
    y.shadow = got;
}

/// A movable allocation of the tier thread and what its bytes must be; most have a restore
/// function that gives the shadow back after a device loss.
struct Held {
    m: Movable,
    shadow: Arc<Mutex<Vec<f32>>>,
    restorable: bool,
}

/// Counts `result`: an out-of-memory error is expected under the soak's budgets, anything
/// else is not. Returns the value when there is one.
fn counted<T>(counts: &Counts, what: &str, result: vramkit::Result<T>) -> Option<T> {
    counts.operations.fetch_add(1, Ordering::Relaxed);
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            counts.error(&e, what);
            None
        }
    }
}

/// Tiered memory among the other threads: movables pinned and written on the GPU (small
/// integers, so every sum is exact), evicted, prefetched, read back and checked, dropped
/// and made anew in other sizes.
fn tier_worker(
    shared: &RwLock<Runtime>,
    tiers: &Tiers,
    held: &Mutex<Vec<Held>>,
    counts: &Counts,
    until: Instant,
    seed: u64,
) {
    let mut r = SmallRng::seed_from_u64(seed);
    while Instant::now() < until {
        let rt = &*shared.read();
        let mut held = held.lock();
        let op = r.gen_range(0..10);
        if held.len() < 4 || (op == 0 && held.len() < 16) {
            let n = r.gen_range(1usize..=64) << 10;
            let shadow: Vec<f32> = (0..n).map(|_| r.gen_range(-64i32..64) as f32).collect();
            let Some(m) = counted(counts, "alloc", tiers.alloc(4 * n as u64, "soak movable"))
            else {
                continue;
            };
            let written = tiers.make_resident(&[&m]).and_then(|res| {
                let x = res.elements::<f32>(&m)?;
                rt.upload(x, &shadow)
            });
            if counted(counts, "first write", written).is_some() {
                let shadow = Arc::new(Mutex::new(shadow));
                // Two in three come back from their shadow after a loss; the rest only
                // from the host tier.
                let restorable = r.gen_range(0..3) > 0;
                if restorable {
                    let source = shadow.clone();
                    m.set_restore(move |bytes: &mut [u8]| {
                        bytes.copy_from_slice(bytemuck::cast_slice(&source.lock()));
                        Ok(())
                    });
                }
                held.push(Held {
                    m,
                    shadow,
                    restorable,
                });
            }
            continue;
        }
        let i = r.gen_range(0..held.len());
        match op {
            1 => {
                held.swap_remove(i);
            }
            2 => {
                counted(counts, "evict", tiers.evict(&[&held[i].m]));
            }
            3 => {
                counted(counts, "prefetch", tiers.prefetch(&[&held[i].m]));
            }
            4..=7 => {
                let k = r.gen_range(-3i32..=3) as f32;
                let h = &held[i];
                let done = tiers.make_resident(&[&h.m]).and_then(|res| {
                    let x = res.elements::<f32>(&h.m)?;
                    let mut batch = rt.batch();
                    batch.scale(1.0, k, x, x)?;
                    batch.submit().map(drop)
                });
                if counted(counts, "touch", done).is_some() {
                    h.shadow.lock().iter_mut().for_each(|v| *v += k);
                }
            }
            _ => {
                let h = &held[i];
                let got = tiers
                    .make_resident(&[&h.m])
                    .and_then(|res| rt.download(res.elements::<f32>(&h.m)?));
                if let Some(got) = counted(counts, "read", got) {
                    counts.tier_checks.fetch_add(1, Ordering::Relaxed);
                    if got != *h.shadow.lock() {
                        eprintln!("mismatch in a movable of {} floats", got.len());
                        counts.mismatches.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }
}

/// Defragments in bounded passes (a whole one now and then) while the others work. It
/// holds the runtime's read lock while it does: a recovery moves the tiers too.
fn defrag_worker(shared: &RwLock<Runtime>, tiers: &Tiers, counts: &Counts, until: Instant) {
    let mut passes = 0u64;
    while Instant::now() < until {
        let rt = shared.read();
        let limits = if passes % 8 == 7 {
            DefragLimits::default()
        } else {
            DefragLimits {
                max_bytes: 4 << 20,
                max_moves: 16,
            }
        };
        // Every other round in passes of its own, a frame's worth apart, without waiting
        // for the whole device; the rest through the one call that stops the world.
        let ran = if passes.is_multiple_of(2) {
            counted(counts, "defragment", tiers.defragment(limits)).is_some()
        } else {
            counted(
                counts,
                "defragment in passes",
                defragment_in_passes(tiers, limits),
            )
            .is_some()
        };
        if ran {
            counts.defrag_passes.fetch_add(1, Ordering::Relaxed);
        }
        drop(rt);
        passes += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A defragmentation in up to eight bounded passes, a millisecond apart.
fn defragment_in_passes(tiers: &Tiers, per_pass: DefragLimits) -> vramkit::Result<()> {
    let mut d = tiers.begin_defragmentation(DefragOptions {
        pool: None,
        per_pass,
    })?;
    for _ in 0..8 {
        if d.is_done() {
            break;
        }
        d.pass_submit()?;
        std::thread::sleep(Duration::from_millis(1));
    }
    d.end().map(drop)
}

/// Exits the process with code 1 when no operation completes for 60 s (a hang), naming
/// the counts it saw last.
fn watchdog(counts: Arc<Counts>) {
    std::thread::spawn(move || {
        let mut last = u64::MAX;
        loop {
            std::thread::sleep(Duration::from_secs(60));
            let now = counts.operations.load(Ordering::Relaxed);
            if now == last {
                eprintln!(
                    "watchdog: no operation completed in 60 s ({now} in all, {} losses, {} \
                     recoveries): a hang",
                    counts.losses.load(Ordering::Relaxed),
                    counts.recoveries.load(Ordering::Relaxed)
                );
                std::process::exit(1);
            }
            last = now;
        }
    });
}

/// Loses the device at random points, in turn destroyed and marked lost, lets the other
/// threads run into it, then recovers and checks what came back (module docs).
fn loss_worker(
    shared: &RwLock<Runtime>,
    tiers: &Tiers,
    held: &Mutex<Vec<Held>>,
    counts: &Counts,
    until: Instant,
    seed: u64,
) {
    use vramkit::vt::{ProceduralSource, ReferenceSampler, TileId, TileSource, VirtualTexture};
    let mut r = SmallRng::seed_from_u64(seed);
    let source = Arc::new(ProceduralSource::new(900, 700).expect("a small source"));
    let tiles: Vec<TileId> = {
        let layout = source.layout();
        (0..layout.levels)
            .flat_map(|l| {
                let (px, py) = layout.pages(l);
                (0..py).flat_map(move |y| (0..px).map(move |x| TileId::new(l, x, y)))
            })
            .collect()
    };
    let config = vramkit::vt::VtConfig {
        cache_slots: 256,
        render_size: (128, 128),
        ..Default::default()
    };
    let mut vt = {
        let rt = shared.read();
        match VirtualTexture::new(rt.gpu(), rt.arena(), source.clone(), config.clone()) {
            Ok(vt) => vt,
            Err(e) => return counts.error(&e, "making the virtual texture"),
        }
    };
    let mut destroy = true;
    loop {
        let wait = Duration::from_millis(r.gen_range(1500..4000));
        if Instant::now() + wait >= until {
            return;
        }
        std::thread::sleep(wait);
        let gpu = shared.read().gpu().clone();
        counts.losses.fetch_add(1, Ordering::AcqRel);
        let how = if destroy {
            gpu.device().destroy();
            "destroyed"
        } else {
            gpu.mark_lost("soak: marked lost by the loss thread");
            "marked lost"
        };
        destroy = !destroy;
        // The others run into the loss for a moment.
        std::thread::sleep(Duration::from_millis(200));
        let mut rt = shared.write();
        // Where each movable was at the loss decides what must come back.
        let expected: Vec<(vramkit::tier::MovableId, bool)> = held
            .lock()
            .iter()
            .map(|h| {
                let on_host = h.m.tier() == vramkit::tier::Tier::Host;
                (h.m.id(), h.restorable || on_host)
            })
            .collect();
        let start = Instant::now();
        let report = match rt.recover() {
            Ok(report) => report,
            Err(e) => {
                eprintln!("unexpected error recovering: {e}");
                counts.unexpected.fetch_add(1, Ordering::Relaxed);
                return;
            }
        };
        let took = start.elapsed().as_micros() as u64;
        eprintln!(
            "loss {} ({}): {report}; devices alive: {}",
            counts.losses.load(Ordering::Relaxed),
            how,
            vramkit::Gpu::live_count()
        );
        counts.recovery_max_us.fetch_max(took, Ordering::Relaxed);
        counts.recoveries.fetch_add(1, Ordering::AcqRel);
        // Every movable: its shadow, or DeviceLost where nothing could bring it back.
        let mut held = held.lock();
        let mut lost = Vec::new();
        for (i, h) in held.iter().enumerate() {
            let must_return = expected
                .iter()
                .find(|(id, _)| *id == h.m.id())
                .is_none_or(|(_, back)| *back);
            let got = tiers
                .make_resident(&[&h.m])
                .and_then(|res| rt.download(res.elements::<f32>(&h.m)?));
            match (got, must_return) {
                (Ok(got), true) => {
                    counts.recovered_checks.fetch_add(1, Ordering::Relaxed);
                    if got != *h.shadow.lock() {
                        eprintln!("mismatch in a movable after recovery: {report}");
                        counts.mismatches.fetch_add(1, Ordering::Relaxed);
                    }
                }
                (Err(Error::DeviceLost { .. }), false) => {
                    counts.recovered_lost.fetch_add(1, Ordering::Relaxed);
                    lost.push(i);
                }
                (Ok(_), false) => {
                    eprintln!("a movable with no way back came back after recovery");
                    counts.mismatches.fetch_add(1, Ordering::Relaxed);
                }
                (Err(e), _) => counts.error(&e, "reading a movable after recovery"),
            }
        }
        for i in lost.into_iter().rev() {
            held.swap_remove(i);
        }
        drop(held);
        // The virtual texture on the new device, every tile read again and sampled.
        let checked = (|| -> vramkit::Result<usize> {
            vt.recover(rt.gpu(), rt.arena())?;
            vt.prefetch(&tiles);
            vt.settle(200)?;
            let points: Vec<([f32; 2], u32)> = (0..64)
                .map(|_| {
                    let level = r.gen_range(0..source.layout().levels);
                    ([r.gen_range(0.0..1.0), r.gen_range(0.0..1.0)], level)
                })
                .collect();
            let got = vt.sample_points(rt.arena(), &points)?;
            let mut reference = ReferenceSampler::new(source.as_ref());
            for (&(uv, level), g) in points.iter().zip(&got) {
                let want = reference.sample(uv, level)?;
                if (0..4).any(|c| (g[c] - want[c]).abs() > 3.0 / 255.0) {
                    eprintln!("virtual texture after recovery: got {g:?}, want {want:?} at {uv:?}");
                    counts.mismatches.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(points.len())
        })();
        match checked {
            Ok(n) => {
                counts.vt_samples.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) => counts.error(&e, "the virtual texture after recovery"),
        }
        counts.operations.fetch_add(1, Ordering::Relaxed);
    }
}
