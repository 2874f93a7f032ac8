//! A mixed workload for the observability example and tests: uploads, profiled kernels
//! checked against a CPU reference, downloads, frees, and now and then a spike of
//! allocations past a lowered budget that ends in an out-of-memory error and a trim.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use vramkit::arena::Budget;
use vramkit::{Error, Runtime};

/// What a run of [`mixed_workload`] did.
#[derive(Debug, Default)]
pub struct Report {
    pub iterations: u64,
    /// Elements whose GPU result differed from the CPU reference.
    pub mismatches: u64,
    /// Out-of-memory errors from the spikes (expected), and the last one's message.
    pub ooms: u64,
    pub last_oom: Option<String>,
    pub bytes_trimmed: u64,
}

const LABELS: [&str; 4] = ["weights", "activations", "gradients", "scratch"];

/// Runs `iterations` steps with `seed`; a spike every `spike_every` steps (0: none).
pub fn mixed_workload(
    rt: &Runtime,
    iterations: u64,
    spike_every: u64,
    seed: u64,
) -> Result<Report, Error> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut report = Report::default();
    let mut kept = Vec::new();
    for i in 0..iterations {
        let n = rng.gen_range(1usize..64 << 10);
        let label = LABELS[rng.gen_range(0..LABELS.len())];
        // Integers and alpha = 1: exact in f32 whatever the GPU fuses.
        let x: Vec<f32> = (0..n).map(|_| rng.gen_range(-1000..1000) as f32).collect();
        let y: Vec<f32> = (0..n).map(|_| rng.gen_range(-1000..1000) as f32).collect();
        let gx = rt.alloc_from(&x, label)?;
        let gy = rt.alloc_from(&y, label)?;
        let mut batch = rt.batch();
        batch.axpy(1.0, &gx, &gy)?;
        batch.submit()?;
        let got = rt.download(&gy)?;
        report.mismatches += got
            .iter()
            .zip(x.iter().zip(&y))
            .filter(|(g, (a, b))| **g != *a + *b)
            .count() as u64;
        if rng.gen_bool(0.3) {
            kept.push(gx);
        }
        if kept.len() > 24 {
            kept.swap_remove(rng.gen_range(0..kept.len()));
        }
        if spike_every > 0 && i % spike_every == spike_every - 1 {
            spike(rt, &mut report)?;
        }
        report.iterations += 1;
    }
    Ok(report)
}

/// Lowers the budget to what is reserved plus 8 MiB, allocates 1 MiB pieces under
/// "spike" until refused, then frees them, restores the budget and trims.
fn spike(rt: &Runtime, report: &mut Report) -> Result<(), Error> {
    let arena = rt.arena();
    let old = arena.budget();
    let reserved = arena.stats().reserved;
    arena.set_budget(Budget::Bytes(reserved + (8 << 20)))?;
    let mut pieces = Vec::new();
    let outcome = loop {
        match arena.alloc(1 << 20, "spike") {
            Ok(a) => pieces.push(a),
            Err(Error::OutOfMemory(oom)) => break Ok(Some(oom)),
            Err(e) => break Err(e),
        }
        if pieces.len() > 4096 {
            break Ok(None); // never refused: counted as no OOM
        }
    };
    drop(pieces);
    arena.set_budget(old.map_or(Budget::Unlimited, Budget::Bytes))?;
    if let Some(oom) = outcome? {
        report.ooms += 1;
        report.last_oom = Some(oom.to_string());
    }
    rt.synchronize()?;
    report.bytes_trimmed += arena.trim();
    Ok(())
}
