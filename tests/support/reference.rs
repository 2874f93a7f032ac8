//! The CPU reference of every kernel family, in one place: shared by the native suites and
//! the browser suite (`tests/browser.rs` includes this file by path: nothing here may need
//! what the browser lacks).

use vramkit::kernels::{Binary, Reduce, ScanKind, Unary};

/// What the GPU's unary map must give for `v`, in f64 then rounded.
pub fn cpu_unary(f: Unary, v: f32) -> f32 {
    let v = v as f64;
    (match f {
        Unary::Neg => -v,
        Unary::Abs => v.abs(),
        Unary::Relu => v.max(0.0),
        Unary::Gelu => 0.5 * v * (1.0 + libm::erf(v / std::f64::consts::SQRT_2)),
        Unary::Exp => v.exp(),
        Unary::Log => v.ln(),
        Unary::Sqrt => v.sqrt(),
        Unary::Tanh => v.tanh(),
        Unary::Sigmoid => 1.0 / (1.0 + (-v).exp()),
    }) as f32
}

/// What the GPU's binary op must give for `a` and `b`.
pub fn cpu_binary(op: Binary, a: f32, b: f32) -> f32 {
    match op {
        Binary::Add => a + b,
        Binary::Sub => a - b,
        Binary::Mul => a * b,
        Binary::Div => a / b,
        Binary::Max => a.max(b),
        Binary::Min => a.min(b),
    }
}

/// A scan of u32 with wrapping sums, inclusive or exclusive.
pub fn cpu_scan_u32(x: &[u32], kind: ScanKind) -> Vec<u32> {
    let mut acc = 0u32;
    x.iter()
        .map(|&v| {
            let before = acc;
            acc = acc.wrapping_add(v);
            if kind == ScanKind::Inclusive {
                acc
            } else {
                before
            }
        })
        .collect()
}

/// Softmax of each row of `cols` elements, in f64.
pub fn cpu_softmax(x: &[f32], cols: usize) -> Vec<f32> {
    let mut want = Vec::with_capacity(x.len());
    for row in x.chunks(cols) {
        let m = row.iter().fold(f64::MIN, |a, &v| a.max(v as f64));
        let s: f64 = row.iter().map(|&v| (v as f64 - m).exp()).sum();
        want.extend(row.iter().map(|&v| ((v as f64 - m).exp() / s) as f32));
    }
    want
}

/// A scan of f32 in f64 (the reference the GPU's f32 sums are held to), inclusive or
/// exclusive.
pub fn cpu_scan_f32(x: &[f32], kind: ScanKind) -> Vec<f64> {
    let mut acc = 0f64;
    x.iter()
        .map(|&v| {
            let before = acc;
            acc += v as f64;
            if kind == ScanKind::Inclusive {
                acc
            } else {
                before
            }
        })
        .collect()
}

/// Sum, mean, max or min of `x`, in f64.
pub fn cpu_reduce(op: Reduce, x: &[f32]) -> f64 {
    match op {
        Reduce::Sum => x.iter().map(|&v| v as f64).sum(),
        Reduce::Mean => x.iter().map(|&v| v as f64).sum::<f64>() / x.len() as f64,
        Reduce::Max => x.iter().fold(f64::MIN, |a, &v| a.max(v as f64)),
        Reduce::Min => x.iter().fold(f64::MAX, |a, &v| a.min(v as f64)),
    }
}

/// The transpose (`cols x rows`) of the row-major `rows x cols` matrix `x`.
pub fn cpu_transpose(x: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut y = vec![0f32; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            y[c * rows + r] = x[r * cols + c];
        }
    }
    y
}

/// Element (i, j) of `a x b` (a: _ x k, b: k x n, row-major) in f64, and `sum_k |a| |b|`,
/// the scale its f32 error is held to.
pub fn cpu_matmul_element(
    a: &[f32],
    b: &[f32],
    (n, k): (usize, usize),
    (i, j): (usize, usize),
) -> (f64, f64) {
    (0..k)
        .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
        .fold((0.0, 0.0), |(w, m), t| (w + t, m + t.abs()))
}

/// f32 to f16 bits, rounded to nearest (what `Batch::to_f16` must give).
pub fn cpu_to_f16_bits(x: &[f32]) -> Vec<u16> {
    x.iter()
        .map(|&v| half::f16::from_f32(v).to_bits())
        .collect()
}

/// The f32 values of f16 bits (what `Batch::to_f32` must give, and what the GPU
/// multiplies after `cpu_to_f16_bits`).
pub fn cpu_from_f16_bits(h: &[u16]) -> Vec<f32> {
    h.iter()
        .map(|&v| half::f16::from_bits(v).to_f32())
        .collect()
}
