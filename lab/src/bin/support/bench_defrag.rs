//! The `defrag` suite: a frame loop (GPU work each frame, two frames in flight) over a
//! fragmented set of movables, defragmented two ways: `Tiers::defragment`, which stops
//! the world, and bounded passes, one per frame (`Tiers::begin_defragmentation`). It
//! prints the longest pass's GPU time, the frame loop's throughput while passes run
//! against the same loop with nothing to move, and the frame that held the one-call
//! defragmentation.

use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use vramkit::arena::{Budget, HistoryConfig};
use vramkit::tier::{DefragLimits, DefragOptions, Movable, TierConfig, Tiers};
use vramkit::{Gpu, Runtime, RuntimeConfig};

use crate::bench_tier::env_or;
use crate::Figures;

const MIB: u64 = 1 << 20;

/// A runtime with tiers, `count` movables of 16-252 KiB, a random half freed.
fn fragmented(gpu: &Gpu, count: usize, seed: u64) -> (Runtime, Tiers, Vec<Movable>) {
    let rt = Runtime::new(
        gpu,
        RuntimeConfig {
            arena: vramkit::ArenaConfig {
                name: "bench-defrag".into(),
                budget: Budget::Unlimited,
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .expect("runtime");
    let tiers = Tiers::new(rt.arena(), TierConfig::default()).expect("tiers");
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let all: Vec<Movable> = (0..count)
        .map(|j| {
            let size = rng.gen_range(4u64..64) * 4096;
            tiers
                .alloc(size, &format!("small{}", j % 16))
                .expect("alloc")
        })
        .collect();
    let kept: Vec<Movable> = all.into_iter().filter(|_| rng.gen_bool(0.5)).collect();
    rt.arena().synchronize().expect("synchronize");
    (rt, tiers, kept)
}

/// The frame loop's own work: `passes` axpys over two arrays of `bytes`, in one batch.
struct FrameWork {
    x: vramkit::arena::Typed<f32>,
    y: vramkit::arena::Typed<f32>,
    passes: u32,
}

impl FrameWork {
    fn new(rt: &Runtime, bytes: u64, passes: u32) -> FrameWork {
        let n = (bytes / 4) as usize;
        let x = rt.alloc::<f32>(n, "frame x").expect("x");
        let y = rt.alloc::<f32>(n, "frame y").expect("y");
        rt.upload(&x, &vec![1.0; n]).expect("upload");
        rt.upload(&y, &vec![0.0; n]).expect("upload");
        FrameWork { x, y, passes }
    }

    /// Records and submits one frame's work.
    fn submit(&self, rt: &Runtime) -> wgpu::SubmissionIndex {
        let mut batch = rt.batch();
        for _ in 0..self.passes {
            batch.axpy(1e-6, &self.x, &self.y).expect("axpy");
        }
        batch.submit().expect("submit")
    }
}

/// Frame times of a loop of `frames` frames, two in flight: `between(frame)` runs after
/// each frame's work is submitted (a defragmentation pass, or nothing).
fn frame_loop(
    rt: &Runtime,
    work: &FrameWork,
    frames: usize,
    mut between: impl FnMut(usize),
) -> Vec<Duration> {
    let mut times = Vec::with_capacity(frames);
    let mut previous: Option<wgpu::SubmissionIndex> = None;
    for f in 0..frames {
        let start = Instant::now();
        let index = work.submit(rt);
        between(f);
        if let Some(p) = previous.take() {
            rt.gpu().wait_for(p).expect("wait");
        }
        previous = Some(index);
        times.push(start.elapsed());
    }
    rt.gpu().wait_idle().expect("idle");
    times
}

fn mean_ms(t: &[Duration]) -> f64 {
    t.iter().map(Duration::as_secs_f64).sum::<f64>() / t.len().max(1) as f64 * 1e3
}

fn max_ms(t: &[Duration]) -> f64 {
    t.iter().map(Duration::as_secs_f64).fold(0.0, f64::max) * 1e3
}

pub fn suite_defrag(gpu: &Gpu, figures: &mut Figures) {
    let cpu = gpu.is_cpu();
    let count: usize = env_or("VRAMKIT_DEFRAG_MOVABLES", if cpu { 2048 } else { 32768 });
    let frame_mib: u64 = env_or("VRAMKIT_DEFRAG_FRAME_MIB", if cpu { 4 } else { 256 });
    let frame_passes: u32 = env_or("VRAMKIT_DEFRAG_FRAME_WORK", if cpu { 2 } else { 8 });
    let per_pass_mib: u64 = env_or("VRAMKIT_DEFRAG_PASS_MIB", if cpu { 4 } else { 16 });
    let frames: usize = env_or("VRAMKIT_DEFRAG_FRAMES", if cpu { 60 } else { 400 });
    // Moves a pass at most (0: no cap): a pass's CPU time follows its moves (about a
    // microsecond each to plan on the H200), and the late passes that fill holes with
    // small movables reach 600-950 moves under the byte cap alone.
    let per_pass_moves: usize = match env_or::<usize>("VRAMKIT_DEFRAG_PASS_MOVES", 0) {
        0 => usize::MAX,
        n => n,
    };

    // 1. Stop the world: the frame loop with one `defragment()` call in its middle.
    let (rt, tiers, kept) = fragmented(gpu, count, 21);
    let work = FrameWork::new(&rt, frame_mib * MIB, frame_passes);
    frame_loop(&rt, &work, 20, |_| {}); // warm-up
    let baseline = frame_loop(&rt, &work, frames, |_| {});
    let mut world = None;
    let stopped = frame_loop(&rt, &work, frames, |f| {
        if f == frames / 2 {
            world = Some(
                tiers
                    .defragment(DefragLimits::default())
                    .expect("defragment"),
            );
        }
    });
    let world = world.expect("the defragmentation ran");
    drop((kept, tiers, work, rt));

    // 2. Passes: the same loop and the same fragmentation, one bounded pass per frame.
    let (rt, tiers, kept) = fragmented(gpu, count, 21);
    let work = FrameWork::new(&rt, frame_mib * MIB, frame_passes);
    frame_loop(&rt, &work, 20, |_| {});
    // The passes' GPU time comes from profiled spans kept in the memory history, whose
    // recording the passes' CPU time then includes; `VRAMKIT_DEFRAG_PROFILE=0` leaves
    // both off (no GPU figures) to time the passes alone.
    let profile = env_or::<u32>("VRAMKIT_DEFRAG_PROFILE", 1) != 0;
    if profile {
        rt.arena().record_history(Some(HistoryConfig::default()));
        rt.gpu().set_profiling(true).expect("profiling");
    }
    let mut defrag = tiers
        .begin_defragmentation(DefragOptions {
            pool: None,
            per_pass: DefragLimits {
                max_bytes: per_pass_mib * MIB,
                max_moves: per_pass_moves,
            },
        })
        .expect("begin");
    let mut converged_at = None;
    let mut pass_cpu: Vec<Duration> = Vec::new();
    let during = frame_loop(&rt, &work, frames, |f| {
        if converged_at.is_some() {
            return;
        }
        let t = Instant::now();
        defrag.pass_submit().expect("pass");
        pass_cpu.push(t.elapsed());
        if defrag.is_done() {
            converged_at = Some(f + 1);
        }
    });
    let report = defrag.end().expect("end");
    let spans = if profile {
        rt.gpu().collect_profile(true).expect("profile");
        rt.gpu().set_profiling(false).expect("profiling");
        let spans = crate::defrag_measure::defragment_spans(&rt);
        rt.arena().record_history(None);
        spans
    } else {
        Vec::new()
    };
    let converged = converged_at.unwrap_or(frames);
    let while_passes = &during[..converged.min(during.len())];
    let longest_pass_ms = spans.iter().copied().max().unwrap_or(0) as f64 / 1e6;
    let pass_gpu_ms: f64 = spans.iter().sum::<u64>() as f64 / 1e6;
    drop((kept, tiers, work, rt));

    let base = mean_ms(&baseline);
    println!(
        "\n== defrag: {count} movables of 16-252 KiB, a random half freed; frames of {frame_passes} \
         axpys over {frame_mib} MiB, two in flight =="
    );
    println!(
        "frame loop alone: {base:.3} ms a frame (max {:.3})\n\
         stop the world: defragment() {:.1} ms wall ({} moves, {}), the frame holding it \
         {:.1} ms; reserved/allocated {:.3} -> {:.3}\n\
         passes of {per_pass_mib} MiB, one per frame: {} passes over {converged} frames, \
         longest pass {longest_pass_ms:.3} ms on the GPU ({pass_gpu_ms:.1} ms in all), \
         {:.3} ms on the CPU (mean {:.3}); \
         frames meanwhile {:.3} ms (max {:.3}): {:.3}x the loop's throughput; \
         reserved/allocated {:.3} -> {:.3}",
        max_ms(&baseline),
        world.elapsed.as_secs_f64() * 1e3,
        world.moves,
        vramkit::fmt_bytes(world.bytes_moved),
        max_ms(&stopped),
        world.ratio_before(),
        world.ratio_after(),
        spans.len(),
        max_ms(&pass_cpu),
        mean_ms(&pass_cpu),
        mean_ms(while_passes),
        max_ms(while_passes),
        base / mean_ms(while_passes),
        report.ratio_before(),
        report.ratio_after(),
    );
    figures.add("defrag_frame_ms", format!("{base:.3}"));
    figures.add(
        "defrag_world_wall_ms",
        format!("{:.1}", world.elapsed.as_secs_f64() * 1e3),
    );
    figures.add(
        "defrag_world_frame_max_ms",
        format!("{:.1}", max_ms(&stopped)),
    );
    figures.add(
        "defrag_world_ratio_after",
        format!("{:.3}", world.ratio_after()),
    );
    figures.add("defrag_pass_max_gpu_ms", format!("{longest_pass_ms:.3}"));
    figures.add(
        "defrag_pass_max_cpu_ms",
        format!("{:.3}", max_ms(&pass_cpu)),
    );
    figures.add(
        "defrag_pass_mean_cpu_ms",
        format!("{:.3}", mean_ms(&pass_cpu)),
    );
    figures.add("defrag_passes", spans.len());
    figures.add("defrag_passes_frames", converged);
    // Moves against the live movables: a movable moved twice is churn.
    figures.add("defrag_passes_moves", report.moves);
    figures.add(
        "defrag_passes_frame_ms",
        format!("{:.3}", mean_ms(while_passes)),
    );
    figures.add(
        "defrag_passes_frame_max_ms",
        format!("{:.3}", max_ms(while_passes)),
    );
    figures.add(
        "defrag_passes_throughput_vs_loop",
        format!("{:.3}", base / mean_ms(while_passes)),
    );
    figures.add(
        "defrag_passes_ratio_after",
        format!("{:.3}", report.ratio_after()),
    );
}
