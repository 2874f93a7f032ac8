//! CPU references shared by the native suites and the browser suite (`tests/browser.rs`
//! includes this file by path: nothing here may need what the browser lacks).

use vramkit::kernels::{Binary, ScanKind, Unary};

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
