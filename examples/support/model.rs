//! A small model-like step whose memory scales with the batch: two dense layers (matmul),
//! a GELU, a row softmax and the temporaries between them, with a CPU reference. Shared
//! by `examples/plan.rs` (the dry-run and max-batch demo) and `tests/it/dry_run.rs`.
#![allow(dead_code)]

use vramkit::kernels::MatmulShape;
use vramkit::kernels::Unary;
use vramkit::{Result, Runtime};

/// Input features per sample.
pub const D_IN: usize = 64;
/// Hidden units.
pub const HIDDEN: usize = 256;
/// Output classes.
pub const CLASSES: usize = 32;

/// The layers' weights, row-major (`w1`: D_IN x HIDDEN, `w2`: HIDDEN x CLASSES).
pub struct Weights {
    pub w1: Vec<f32>,
    pub w2: Vec<f32>,
}

impl Weights {
    /// Weights from a deterministic pseudo-random sequence of `seed`.
    pub fn new(seed: u64) -> Weights {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move || {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.25
        };
        Weights {
            w1: (0..D_IN * HIDDEN).map(|_| next()).collect(),
            w2: (0..HIDDEN * CLASSES).map(|_| next()).collect(),
        }
    }
}

/// One forward step of `batch` samples (`input`: batch x D_IN) on the GPU; returns the
/// class probabilities (batch x CLASSES). Every temporary is dropped as soon as the next
/// layer has been submitted, as eager code does.
pub fn step(rt: &Runtime, weights: &Weights, batch: usize, input: &[f32]) -> Result<Vec<f32>> {
    let w1 = rt.alloc_from(&weights.w1, "w1")?;
    let w2 = rt.alloc_from(&weights.w2, "w2")?;
    let x = rt.alloc_from(input, "input")?;
    let h = rt.alloc::<f32>(batch * HIDDEN, "hidden")?;
    let mut b = rt.batch();
    b.matmul(
        MatmulShape {
            m: batch as u64,
            k: D_IN as u64,
            n: HIDDEN as u64,
        },
        &x,
        &w1,
        &h,
    )?
    .map(Unary::Gelu, &h, &h)?;
    b.submit()?;
    drop(x);
    let logits = rt.alloc::<f32>(batch * CLASSES, "logits")?;
    let mut b = rt.batch();
    b.matmul(
        MatmulShape {
            m: batch as u64,
            k: HIDDEN as u64,
            n: CLASSES as u64,
        },
        &h,
        &w2,
        &logits,
    )?;
    b.submit()?;
    drop(h);
    let probs = rt.alloc::<f32>(batch * CLASSES, "probs")?;
    let mut b = rt.batch();
    b.softmax_rows(batch as u64, &logits, &probs)?;
    b.submit()?;
    drop(logits);
    rt.download(&probs)
}

/// The same step on the CPU.
pub fn reference(weights: &Weights, batch: usize, input: &[f32]) -> Vec<f32> {
    let matmul = |a: &[f32], b: &[f32], m: usize, k: usize, n: usize| -> Vec<f32> {
        let mut c = vec![0.0f32; m * n];
        for i in 0..m {
            for p in 0..k {
                let av = a[i * k + p];
                for j in 0..n {
                    c[i * n + j] += av * b[p * n + j];
                }
            }
        }
        c
    };
    let mut h = matmul(input, &weights.w1, batch, D_IN, HIDDEN);
    for v in &mut h {
        *v = *v * 0.5 * (1.0 + libm::erff(*v / std::f32::consts::SQRT_2));
    }
    let logits = matmul(&h, &weights.w2, batch, HIDDEN, CLASSES);
    let mut probs = vec![0.0f32; batch * CLASSES];
    for r in 0..batch {
        let row = &logits[r * CLASSES..(r + 1) * CLASSES];
        let max = row.iter().cloned().fold(f32::MIN, f32::max);
        let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
        for (c, v) in row.iter().enumerate() {
            probs[r * CLASSES + c] = (v - max).exp() / sum;
        }
    }
    probs
}

/// Bytes the step's data holds at its peak for `batch` samples: the weights, then the
/// input and hidden activations together (the first layer), or the hidden activations
/// and logits (the second), whichever is larger. Kernel parameters come on top.
pub fn data_peak_bytes(batch: usize) -> u64 {
    let weights = (D_IN * HIDDEN + HIDDEN * CLASSES) * 4;
    let first = batch * (D_IN + HIDDEN) * 4;
    let second = batch * (HIDDEN + CLASSES) * 4;
    let third = batch * 2 * CLASSES * 4;
    (weights + first.max(second).max(third)) as u64
}
