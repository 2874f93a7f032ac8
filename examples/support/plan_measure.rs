//! Measurements of memory planning shared by `examples/plan.rs` and `bench plan`:
//! a trace replayed through the arena itself (online against a planned loop), and a
//! step of a few hundred allocations with kernels on the GPU (online against planned).
#![allow(dead_code)]

use std::time::Instant;

use vramkit::alloc::trace::TraceEvent;
use vramkit::plan::{LoopConfig, PlannedLoop};
use vramkit::{Allocation, Arena, ArenaConfig, Gpu, Runtime, RuntimeConfig};

/// A trace through the arena on a dry arena (the same allocation path, no memory).
pub struct ArenaReplay {
    /// Plain `Arena::alloc` and drop, ns per event (best of three passes).
    pub online_ns: f64,
    /// Inside a planned loop's replays, ns per event (best of three); `None` with the
    /// reason when the plan could not be reserved.
    pub planned_ns: Result<f64, String>,
    /// Blocks the replays created.
    pub planned_blocks_created: u64,
    /// Allocations planned per iteration, of those recorded.
    pub planned: (usize, usize),
    /// Replays that followed the recording to the end, and deviations.
    pub replays: (u64, u64),
}

/// Replays `events` through a dry arena on `gpu`: online, then as a planned loop.
pub fn arena_replay(gpu: &Gpu, events: &[TraceEvent]) -> vramkit::Result<ArenaReplay> {
    let config = ArenaConfig {
        dry_run: true,
        ..ArenaConfig::default()
    };
    let arena = Arena::new(gpu, config)?;
    let ids = events
        .iter()
        .map(|e| match *e {
            TraceEvent::Alloc { id, .. } | TraceEvent::Free { id } => id as usize + 1,
        })
        .max()
        .unwrap_or(0);
    let mut slots: Vec<Option<Allocation>> = (0..ids).map(|_| None).collect();
    let pass = |slots: &mut Vec<Option<Allocation>>| -> vramkit::Result<f64> {
        let start = Instant::now();
        for e in events {
            match *e {
                TraceEvent::Alloc { id, size } => {
                    slots[id as usize] = Some(arena.alloc(size, "trace")?);
                }
                TraceEvent::Free { id } => slots[id as usize] = None,
            }
        }
        slots.iter_mut().for_each(|s| *s = None);
        Ok(start.elapsed().as_nanos() as f64 / events.len().max(1) as f64)
    };
    let best = |f: &mut dyn FnMut() -> vramkit::Result<f64>| -> vramkit::Result<f64> {
        (0..3).try_fold(f64::MAX, |best, _| Ok(best.min(f()?)))
    };
    pass(&mut slots)?;
    let online_ns = best(&mut || pass(&mut slots))?;
    let mut planned = PlannedLoop::new(&arena, LoopConfig::default())?;
    let recorded = planned.begin()?;
    pass(&mut slots)?;
    if let Err(e) = recorded.end() {
        return Ok(ArenaReplay {
            online_ns,
            planned_ns: Err(e.to_string()),
            planned_blocks_created: 0,
            planned: (0, 0),
            replays: (0, 0),
        });
    }
    let blocks = arena.stats().blocks_created;
    let planned_ns = best(&mut || {
        let it = planned.begin()?;
        let ns = pass(&mut slots)?;
        it.end()?;
        Ok(ns)
    })?;
    let s = planned.stats();
    Ok(ArenaReplay {
        online_ns,
        planned_ns: Ok(planned_ns),
        planned_blocks_created: arena.stats().blocks_created - blocks,
        planned: (s.planned_per_iteration, s.recorded_allocations),
        replays: (s.replayed, s.deviations),
    })
}

/// Allocations per step of [`gpu_step`].
pub const STEP_ALLOCATIONS: usize = 320;

/// The sizes of one step's allocations: log-uniform from 16 KiB to 4 MiB, fixed.
pub fn step_sizes() -> Vec<u64> {
    let mut s = 0x9e37_79b9_7f4a_7c15u64;
    (0..STEP_ALLOCATIONS)
        .map(|_| {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1);
            let bits = 14.0 + 8.0 * ((s >> 11) as f64 / (1u64 << 53) as f64);
            (2f64.powf(bits) as u64).next_multiple_of(256)
        })
        .collect()
}

/// One step of eager code: each allocation is filled by a kernel and added into the one
/// two before it, a batch is submitted every 8 allocations, and every allocation is
/// dropped four allocations after it was made (activations that die as the next layers
/// run), the last at the end.
pub fn gpu_step(rt: &Runtime, sizes: &[u64]) -> vramkit::Result<()> {
    let mut live: std::collections::VecDeque<vramkit::arena::Typed<f32>> = Default::default();
    let mut batch = rt.batch();
    let mut pending = Vec::new();
    for (i, &bytes) in sizes.iter().enumerate() {
        let t = rt.alloc::<f32>((bytes / 4) as usize, "step")?;
        pending.push(t);
        if i % 8 == 7 || i + 1 == sizes.len() {
            for t in &pending {
                batch.fill(1.0, t)?;
            }
            if let (Some(prev), Some(t)) = (live.back(), pending.first()) {
                let n = prev.len().min(t.len());
                if let (Some(x), Some(y)) = (prev.first(n), t.first(n)) {
                    batch.axpy(0.5, x, y)?;
                }
            }
            batch.submit()?;
            batch = rt.batch();
            live.extend(pending.drain(..));
            while live.len() > 4 {
                live.pop_front();
            }
        }
    }
    drop(batch);
    drop(live);
    Ok(())
}

/// One way of running [`gpu_step`]s, measured.
pub struct StepFigures {
    /// Milliseconds per step: the best of rounds of 8 steps, each timed until the GPU
    /// finished.
    pub ms_per_step: f64,
    /// Reserved bytes over the most bytes live in a step.
    pub reserved_over_live: f64,
    /// Blocks created during the timed steps.
    pub blocks_created: u64,
}

/// About `steps` steps (rounds of 8) on a fresh runtime of `gpu` after `warm` steps:
/// online (`slots` 0) or as a planned loop with `slots` slots; with the plan's stats.
pub fn gpu_steps(
    gpu: &Gpu,
    slots: usize,
    steps: usize,
    warm: usize,
) -> vramkit::Result<(StepFigures, vramkit::plan::LoopStats)> {
    let sizes = step_sizes();
    let rt = Runtime::new(gpu, RuntimeConfig::default())?;
    let mut lp = if slots > 0 {
        let config = LoopConfig { pool: None, slots };
        Some(PlannedLoop::new(rt.arena(), config)?)
    } else {
        None
    };
    let mut one = |rt: &Runtime| -> vramkit::Result<()> {
        let it = lp.as_mut().map(|l| l.begin()).transpose()?;
        gpu_step(rt, &sizes)?;
        if let Some(it) = it {
            it.end()?;
        }
        Ok(())
    };
    for _ in 0..warm {
        one(&rt)?;
    }
    // Both ways start from what they hold after the warm-up, without empty blocks (for a
    // planned loop, those of its recorded iteration).
    rt.synchronize()?;
    rt.arena().trim();
    rt.arena().reset_peak();
    let blocks = rt.arena().stats().blocks_created;
    // The best of rounds of ROUND steps, each from its first step to the GPU's last work
    // (a mean over all steps let one slow spell of the host set the figure: 35-41 %
    // spread between fresh processes on the H100).
    const ROUND: usize = 8;
    let mut ms = f64::MAX;
    for _ in 0..steps.div_ceil(ROUND).max(1) {
        let start = Instant::now();
        for _ in 0..ROUND {
            one(&rt)?;
        }
        gpu.wait_idle()?;
        ms = ms.min(start.elapsed().as_secs_f64() * 1e3 / ROUND as f64);
    }
    let s = rt.arena().stats();
    let figures = StepFigures {
        ms_per_step: ms,
        reserved_over_live: s.peak_reserved as f64 / s.peak_allocated.max(1) as f64,
        blocks_created: s.blocks_created - blocks,
    };
    Ok((figures, lp.map(|l| l.stats()).unwrap_or_default()))
}
