//! CPU references shared by the native suites and the browser suite (`tests/browser.rs`
//! includes this file by path: nothing here may need what the browser lacks).

use vramkit::kernels::Unary;

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
