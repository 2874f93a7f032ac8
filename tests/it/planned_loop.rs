//! Planned loops on a real adapter: iterations replayed from the offset table compute
//! what the CPU computes (with GPU work in flight across iterations), create no buffer,
//! and an iteration that deviates, or an allocation kept past its iteration, falls back
//! to the arena without corrupting anything.

use crate::common;

use common::{assert_close, random_f32, rng};
use rand::rngs::SmallRng;
use rand::Rng;
use vramkit::arena::Typed;
use vramkit::kernels::{Binary, Unary};
use vramkit::plan::{LoopConfig, PlannedLoop};
use vramkit::{Runtime, RuntimeConfig};

fn runtime() -> Runtime {
    Runtime::new(common::gpu(), RuntimeConfig::default()).unwrap()
}

/// A planned loop on `rt`'s default pool with one slot: every replay waits for the one
/// before it, and a planned allocation kept alive blocks the slot.
fn one_slot_loop(rt: &Runtime) -> PlannedLoop {
    let config = LoopConfig {
        pool: None,
        slots: 1,
    };
    PlannedLoop::new(rt.arena(), config).unwrap()
}

/// One iteration: temporaries of several sizes, some dropped before others are made (so
/// the plan shares their bytes), each filled from the inputs, folded into `acc` on the
/// GPU without waiting. `extra` adds an allocation of another size in the middle (a
/// deviation). Returns what `acc` gains, computed on the CPU.
fn iteration(
    rt: &Runtime,
    acc: &Typed<f32>,
    x: &[f32],
    scale: f32,
    extra: bool,
) -> vramkit::Result<Vec<f32>> {
    let n = x.len();
    let a = rt.alloc_from(x, "a")?;
    let b = rt.alloc::<f32>(n, "b")?;
    let mut batch = rt.batch();
    batch.fill(scale, &b)?.binary(Binary::Mul, &a, &b, &b)?;
    batch.submit()?;
    drop(a);
    // Takes a's bytes in the plan; written while b is still live.
    let c = rt.alloc::<f32>(n, "c")?;
    let wide = rt.alloc::<f32>(3 * n, "wide")?;
    let mut batch = rt.batch();
    batch
        .map(Unary::Relu, &b, &c)?
        .fill(2.0, &wide)?
        .axpy(1.0, wide.first(n).unwrap(), &c)?;
    batch.submit()?;
    drop(b);
    drop(wide);
    let detour = if extra {
        Some(rt.alloc::<f32>(n + 8, "detour")?)
    } else {
        None
    };
    let d = rt.alloc::<f32>(n, "d")?;
    let mut batch = rt.batch();
    batch.copy(&c, &d)?.axpy(1.0, &d, acc)?;
    batch.submit()?;
    drop((c, d, detour));
    Ok(x.iter().map(|v| (v * scale).max(0.0) + 2.0).collect())
}

fn run_loop(
    rt: &Runtime,
    planned: &mut PlannedLoop,
    r: &mut SmallRng,
    n: usize,
    iterations: usize,
    deviate_at: Option<usize>,
) -> Vec<f32> {
    let acc = rt.alloc_from(&vec![0.0f32; n], "acc").unwrap();
    let mut want = vec![0.0f32; n];
    for i in 0..iterations {
        let x = random_f32(r, n);
        let scale = r.gen_range(-2.0f32..2.0);
        let it = planned.begin().unwrap();
        let gain = iteration(rt, &acc, &x, scale, deviate_at == Some(i)).unwrap();
        it.end().unwrap();
        for (w, g) in want.iter_mut().zip(gain) {
            *w += g;
        }
    }
    let got = rt.download(&acc).unwrap();
    assert_close(&got, &want, 1e-4, "accumulated over planned iterations");
    got
}

#[test]
fn replayed_iterations_match_the_cpu_and_create_no_buffer() {
    let rt = runtime();
    let mut r = rng();
    for n in [1usize, 1000, 70_001] {
        let mut planned = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
        // Warm-up: the first iteration records; the plan's blocks are made at its end.
        run_loop(&rt, &mut planned, &mut r, n, 2, None);
        let blocks = rt.arena().stats().blocks_created;
        run_loop(&rt, &mut planned, &mut r, n, 24, None);
        let s = planned.stats();
        assert_eq!((s.recorded, s.deviations, s.fallbacks), (1, 0, 0), "{s:?}");
        assert_eq!(s.replayed, 25);
        assert_eq!(s.planned_per_iteration, 5, "a, b, c, wide, d");
        assert_eq!(s.planned_allocations, 25 * 5);
        assert!(s.plan_bytes >= s.lower_bound && s.lower_bound > 0, "{s:?}");
        // a and c, b and d share bytes: the plan needs less than the five apart (7 n
        // floats, wide counting 3), down to the 5 n live at once plus alignment.
        if n >= 1000 {
            assert!(s.plan_bytes < 7 * n as u64 * 4, "{s:?}");
            assert!(s.plan_bytes <= 5 * n as u64 * 4 + 4096, "{s:?}");
        }
        // Replays only took offsets (the accumulator's and kernels' own allocations
        // reuse the arena's blocks).
        assert_eq!(rt.arena().stats().blocks_created, blocks);
    }
}

#[test]
fn a_deviating_iteration_falls_back_without_corruption() {
    let rt = runtime();
    let mut r = rng();
    let mut planned = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
    run_loop(&rt, &mut planned, &mut r, 4099, 12, Some(5));
    let s = planned.stats();
    assert_eq!((s.recorded, s.deviations, s.replayed), (1, 1, 10), "{s:?}");
    // The deviating iteration served its first allocations from the plan.
    assert!(s.planned_allocations > 10 * 5 && s.planned_allocations < 11 * 5);
    // A deviation in the recorded iteration itself is just what gets planned.
    let mut planned = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
    run_loop(&rt, &mut planned, &mut r, 513, 6, Some(0));
    let s = planned.stats();
    assert_eq!((s.deviations, s.replayed), (5, 0), "{s:?}");
    planned.replan();
    run_loop(&rt, &mut planned, &mut r, 513, 6, None);
    let s = planned.stats();
    assert_eq!((s.recorded, s.replayed), (2, 5), "{s:?}");
}

/// An allocation made in an iteration and kept past its end is never planned; one that
/// was planned and is kept keeps its block out of use, and its bytes are never handed out
/// while it lives.
#[test]
fn allocations_kept_past_their_iteration_stay_intact() {
    let rt = runtime();
    let mut r = rng();
    let n = 2048;
    let mut planned = one_slot_loop(&rt);
    let mut kept = Vec::new();
    let acc = rt.alloc_from(&vec![0.0f32; n], "acc").unwrap();
    let mut want = vec![0.0f32; n];
    for i in 0..8 {
        let x = random_f32(&mut r, n);
        let it = planned.begin().unwrap();
        // Kept in every iteration: never planned (it outlived the recording).
        let keep = rt.alloc_from(&x, "kept").unwrap();
        let gain = iteration(&rt, &acc, &x, 1.5, false).unwrap();
        for (w, g) in want.iter_mut().zip(gain) {
            *w += g;
        }
        // In iteration 3 a planned temporary outlives its iteration.
        let late = (i == 3).then(|| rt.alloc_from(&x, "late").unwrap());
        it.end().unwrap();
        kept.push((keep, x.clone()));
        if let Some(late) = late {
            kept.push((late, x));
        }
    }
    for (a, x) in &kept {
        assert_eq!(
            &rt.download(a).unwrap(),
            x,
            "'{}' was overwritten",
            a.label()
        );
    }
    assert_close(&rt.download(&acc).unwrap(), &want, 1e-4, "acc");
    let s = planned.stats();
    // "late" was not in the recording: a deviation, served by the arena.
    assert_eq!(s.deviations, 1, "{s:?}");
    assert_eq!(s.fallbacks, 0, "{s:?}");
    drop(kept);
    drop(planned);
}

/// A planned allocation that outlives its iteration blocks its loop block: the next
/// iteration on that block runs without the plan, and the kept bytes stay intact.
#[test]
fn a_planned_allocation_kept_alive_blocks_its_block() {
    let rt = runtime();
    let n = 1024;
    let mut planned = one_slot_loop(&rt);
    let make = |v: f32| rt.alloc_from(&vec![v; n], "tmp").unwrap();
    // Recording: one allocation, freed inside the iteration.
    let it = planned.begin().unwrap();
    drop(make(0.0));
    it.end().unwrap();
    // A replay whose planned allocation is kept.
    let it = planned.begin().unwrap();
    let kept = make(1.0);
    it.end().unwrap();
    let s = planned.stats();
    assert_eq!(s.deviations, 1, "its free never came: {s:?}");
    for v in 2..5 {
        let it = planned.begin().unwrap();
        let other = make(v as f32);
        assert_eq!(rt.download(&other).unwrap(), vec![v as f32; n]);
        drop(other);
        it.end().unwrap();
    }
    assert_eq!(rt.download(&kept).unwrap(), vec![1.0; n]);
    let s = planned.stats();
    assert_eq!(s.fallbacks, 3, "{s:?}");
    drop(kept);
    let it = planned.begin().unwrap();
    drop(make(9.0));
    it.end().unwrap();
    assert_eq!(planned.stats().replayed, 1);
    // The loop's block goes back when the loop is dropped.
    let reserved = rt.arena().stats().reserved;
    drop(planned);
    assert!(rt.arena().stats().reserved < reserved);
}

/// A planned loop inside a dry run: the plan is made from virtual allocations and its
/// replays count the same.
#[test]
fn planned_loops_run_dry() {
    let rt = runtime();
    let dry = rt
        .dry_run(|rt| {
            let mut planned = PlannedLoop::new(rt.arena(), LoopConfig::default())?;
            let acc = rt.alloc::<f32>(4096, "acc")?;
            for _ in 0..5 {
                let it = planned.begin()?;
                iteration(rt, &acc, &vec![1.0; 4096], 1.0, false)?;
                it.end()?;
            }
            Ok(planned.stats())
        })
        .unwrap();
    assert_eq!((dry.value.replayed, dry.value.deviations), (4, 0));
    assert!(dry.peak_reserved >= 2 * dry.value.plan_bytes);
}

#[test]
fn misuse_is_a_typed_error() {
    let rt = runtime();
    assert!(PlannedLoop::new(
        rt.arena(),
        LoopConfig {
            pool: None,
            slots: 0
        }
    )
    .is_err());
    let other = runtime();
    let foreign = LoopConfig {
        pool: Some(other.arena().default_pool()),
        slots: 2,
    };
    assert!(PlannedLoop::new(rt.arena(), foreign).is_err());
    let mut one = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
    let mut two = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
    let it = one.begin().unwrap();
    let err = two.begin().unwrap_err();
    assert!(err.to_string().contains("another"), "{err}");
    drop(it);
    two.begin().unwrap().end().unwrap();
}

/// On a device whose largest buffer is 1 MiB, a loop that keeps 1.25 MiB live is planned
/// into several loop blocks per slot, no allocation across two, and computes what the CPU
/// computes.
#[test]
fn plans_larger_than_the_largest_buffer_span_several_blocks() {
    let limits = wgpu::Limits {
        max_buffer_size: 1 << 20,
        max_storage_buffer_binding_size: 1 << 20,
        ..wgpu::Limits::downlevel_defaults()
    };
    let (device, queue) = common::host_device(limits);
    let rt = Runtime::from_wgpu(device, queue).unwrap();
    let mut r = rng();
    let mut planned = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
    // 5 n floats live at once (1.25 MiB at n = 64 Ki), the largest allocation ("wide",
    // 3 n floats: 768 KiB) within one buffer.
    let n = 64 << 10;
    run_loop(&rt, &mut planned, &mut r, n, 6, None);
    let s = planned.stats();
    assert_eq!((s.replayed, s.deviations), (5, 0), "{s:?}");
    assert!(s.blocks_per_slot >= 2, "{s:?}");
    assert!(s.plan_bytes > 1 << 20, "{s:?}");
}

/// An iteration forgotten instead of ended: dropping its loop takes the hook away, so the
/// thread's later allocations are ordinary ones and another loop can begin.
#[test]
fn a_forgotten_iteration_does_not_outlive_its_loop() {
    let rt = runtime();
    let mut planned = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
    for _ in 0..2 {
        let it = planned.begin().unwrap();
        drop(rt.alloc::<f32>(1000, "tmp").unwrap());
        it.end().unwrap();
    }
    std::mem::forget(planned.begin().unwrap());
    drop(planned);
    // The loop's blocks are gone; an allocation of the planned size must come from the
    // arena and hold its data.
    let a = rt.alloc_from(&vec![7.0f32; 1000], "after").unwrap();
    assert_eq!(rt.download(&a).unwrap(), vec![7.0f32; 1000]);
    let mut other = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
    other.begin().unwrap().end().unwrap();
}

/// Re-planning over and over (each plan reserves fresh loop blocks) while another thread
/// allocates and frees in the same pool: no error, and every iteration's result right.
/// (The soak found a fresh loop block taken by the other thread's allocation between two
/// locks; reserving and holding a block is now one step.)
#[test]
fn replanning_while_another_thread_allocates() {
    let rt = runtime();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let a = rt.alloc::<f32>(64, "other").unwrap();
                let b = rt.alloc::<f32>(1 << 12, "other").unwrap();
                drop((a, b));
            }
        });
        let mut planned = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
        for i in 0..300 {
            if i % 3 == 0 {
                planned.replan();
            }
            let it = planned.begin().unwrap();
            let x = rt.alloc_from(&vec![i as f32; 1 << 12], "x").unwrap();
            let y = rt.alloc::<f32>(1 << 12, "y").unwrap();
            let mut batch = rt.batch();
            batch.copy(&x, &y).unwrap();
            batch.submit().unwrap();
            assert_eq!(rt.download(&y).unwrap(), vec![i as f32; 1 << 12]);
            drop((x, y));
            it.end().unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(planned.stats().replayed > 100, "{:?}", planned.stats());
    });
}

/// The suite again, under the completion path this adapter does not take
/// ([`common::rerun_under_the_other_sealing_path`]).
#[test]
fn the_suite_passes_under_the_other_sealing_path() {
    common::rerun_under_the_other_sealing_path(module_path!());
}

/// At steady state a planned loop with the default settings reserves no more than the
/// plain loop it replaces (it reserved 8.95 MiB against 7.06 at batch 128 with two slots
/// and the recorded iteration's blocks kept), without the caller trimming anything.
#[test]
fn a_default_planned_loop_reserves_no_more_than_the_plain_loop() {
    // Eager code: temporaries of varied sizes, each filled by a kernel, the last four
    // kept alive, a submit every four.
    let sizes: Vec<usize> = (0..24u64)
        .map(|i| ((i * 7919 % 23 + 1) as usize) << 15)
        .collect();
    let step = |rt: &Runtime| -> vramkit::Result<()> {
        let mut live = std::collections::VecDeque::new();
        for (i, &n) in sizes.iter().enumerate() {
            let t = rt.alloc::<f32>(n / 4, "activation")?;
            let mut batch = rt.batch();
            batch.fill(i as f32, &t)?;
            batch.submit()?;
            live.push_back(t);
            if live.len() > 4 {
                live.pop_front();
            }
        }
        Ok(())
    };
    let plain = runtime();
    for _ in 0..12 {
        step(&plain).unwrap();
    }
    plain.synchronize().unwrap();
    let plain_reserved = plain.arena().stats().reserved;

    let rt = runtime();
    let mut lp = PlannedLoop::new(rt.arena(), LoopConfig::default()).unwrap();
    for _ in 0..12 {
        let it = lp.begin().unwrap();
        step(&rt).unwrap();
        it.end().unwrap();
    }
    rt.synchronize().unwrap();
    let s = lp.stats();
    assert!(s.replayed >= 10, "{s:?}");
    let planned_reserved = rt.arena().stats().reserved;
    assert!(
        planned_reserved <= plain_reserved,
        "planned {} against plain {}:\n{}\n{}",
        vramkit::fmt_bytes(planned_reserved),
        vramkit::fmt_bytes(plain_reserved),
        rt.arena().summary(),
        plain.arena().summary()
    );
}
