//! Elementwise kernels (`shaders/elementwise/elementwise.wgsl`): fill, copy, axpy, axpby, scale, unary
//! maps and binary operations on f32 arrays.
//!
//! Each runs as a vec4 body (16-byte loads and stores) plus a scalar tail for the last
//! `n % 4` elements, both on the same bind group.

use super::params::kernel_params;
use super::{check_count, check_no_overlap, grid, Batch, Bindings, Bound, WORKGROUP};
use crate::arena::Allocation;
use crate::shaders::{shader, Shader};
use crate::Result;

/// f32 elementwise kernels, one element per invocation (tails and short arrays).
pub(crate) const ELEMENTWISE: Shader =
    shader!("elementwise.wgsl (f32)", "elementwise/elementwise.wgsl");
/// f32 elementwise kernels, one vec4 per invocation (the aligned body of each array).
pub(crate) const ELEMENTWISE_VEC4: Shader =
    shader!("elementwise.wgsl (vec4)", "elementwise/elementwise.wgsl").with(&[("VEC4", "")]);
/// Every variant, for the catalogue ([`crate::SHADERS`]).
pub(crate) const SHADERS: [Shader; 2] = [ELEMENTWISE, ELEMENTWISE_VEC4];

kernel_params! {
    /// `Params` of `elementwise.wgsl`: indices `[start, end)` (in `Elem`s), the scalars
    /// and the op of `map` and `binary`.
    pub(crate) struct ElementwiseParams {
        end: u32,
        start: u32,
        alpha: f32,
        beta: f32,
        value: f32,
        op: u32,
        _pad0: u32,
        _pad1: u32,
    }
}

/// A function applied to every element by [`Batch::map`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unary {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `max(x, 0)`
    Relu,
    /// `x * Φ(x)`, the exact (erf) GELU as PyTorch's default; erf is approximated to 1.5e-7.
    Gelu,
    /// `e^x`
    Exp,
    /// natural logarithm (NaN below 0, -inf at 0)
    Log,
    /// square root (NaN below 0)
    Sqrt,
    /// hyperbolic tangent
    Tanh,
    /// `1 / (1 + e^-x)`
    Sigmoid,
}

impl Unary {
    /// Every unary function, for tests and benchmarks.
    pub const ALL: [Unary; 9] = [
        Unary::Neg,
        Unary::Abs,
        Unary::Relu,
        Unary::Gelu,
        Unary::Exp,
        Unary::Log,
        Unary::Sqrt,
        Unary::Tanh,
        Unary::Sigmoid,
    ];

    /// The `op` code of the `unary` entry point.
    fn code(self) -> u32 {
        self as u32
    }
}

/// An operation between two arrays, applied by [`Batch::binary`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// `x + y`
    Add,
    /// `x - y`
    Sub,
    /// `x * y`
    Mul,
    /// `x / y`
    Div,
    /// `max(x, y)`
    Max,
    /// `min(x, y)`
    Min,
}

impl Binary {
    /// Every binary operation, for tests and benchmarks.
    pub const ALL: [Binary; 6] = [
        Binary::Add,
        Binary::Sub,
        Binary::Mul,
        Binary::Div,
        Binary::Max,
        Binary::Min,
    ];

    fn code(self) -> u32 {
        self as u32
    }
}

/// What an elementwise call reads and writes.
struct Call<'b> {
    entry: &'static str,
    op: u32,
    /// `[alpha, beta, value]`
    scalars: [f32; 3],
    inputs: &'b [&'b Allocation],
    out: &'b Allocation,
}

impl<'a> Batch<'a> {
    /// Records one elementwise kernel over `n` elements: a vec4 body and a scalar tail.
    /// Bindings: the inputs as `x` (and `y`), the output as the next binding.
    fn elementwise(&mut self, n: u64, call: Call<'_>) -> Result<()> {
        check_count(n, call.entry)?;
        for (a, name) in call.inputs.iter().zip(["x", "y"]) {
            self.check_f32(a, n, name)?;
        }
        self.check_f32(call.out, n, "output")?;
        for a in call.inputs {
            check_no_overlap(a, call.out, true, call.entry)?;
        }
        // Two inputs sharing a range are two writable bindings of it (`check_no_overlap`).
        if let (true, [x, y]) = (cfg!(web), call.inputs) {
            check_no_overlap(x, y, false, call.entry)?;
        }
        if n == 0 {
            return Ok(());
        }
        let io = match call.inputs {
            // Fill writes `y` and reads nothing.
            [] => Bindings::three(self.spare(0), Bound::of(call.out), self.spare(1)),
            [x] => Bindings::two(Bound::of(x), Bound::of(call.out), self.spare(0)),
            [x, y, ..] => Bindings::three(Bound::of(x), Bound::of(y), Bound::of(call.out)),
        };
        self.elementwise_bound(n, call.entry, call.op, call.scalars, io)?;
        self.dispatches += 1;
        Ok(())
    }

    /// The dispatches of an elementwise kernel on already-checked ranges (also used on the
    /// scans' state).
    pub(super) fn elementwise_bound(
        &mut self,
        n: u64,
        entry: &'static str,
        op: u32,
        [alpha, beta, value]: [f32; 3],
        io: Bindings,
    ) -> Result<()> {
        let gpu = self.gpu();
        let body = n / 4;
        let tail = n % 4;
        let params = |end: u64, start: u64| {
            ElementwiseParams {
                end: end as u32,
                start: start as u32,
                alpha,
                beta,
                value,
                op,
                ..Default::default()
            }
            .into()
        };
        if body > 0 {
            self.run(
                &ELEMENTWISE_VEC4,
                entry,
                params(body, 0),
                io.clone(),
                grid(body, WORKGROUP, gpu),
            )?;
        }
        if tail > 0 {
            self.run(
                &ELEMENTWISE,
                entry,
                params(n, body * 4),
                io,
                grid(tail, WORKGROUP, gpu),
            )?;
        }
        Ok(())
    }

    /// `y[i] = alpha * x[i] + y[i]` for `i < n`.
    pub(crate) fn axpy_n(
        &mut self,
        n: u64,
        alpha: f32,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.elementwise(
            n,
            Call {
                entry: "axpy",
                op: 0,
                scalars: [alpha, 1.0, 0.0],
                inputs: &[x],
                out: y,
            },
        )?;
        Ok(self)
    }

    /// `y[i] = alpha * x[i] + beta * y[i]` for `i < n`.
    pub(crate) fn axpby_n(
        &mut self,
        n: u64,
        alpha: f32,
        x: &'a Allocation,
        beta: f32,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.elementwise(
            n,
            Call {
                entry: "axpby",
                op: 0,
                scalars: [alpha, beta, 0.0],
                inputs: &[x],
                out: y,
            },
        )?;
        Ok(self)
    }

    /// `y[i] = x[i]` for `i < n`. Unlike `copy_buffer_to_buffer`, it works between two
    /// allocations of the same block.
    pub(crate) fn copy_n(
        &mut self,
        n: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.elementwise(
            n,
            Call {
                entry: "copy",
                op: 0,
                scalars: [1.0, 0.0, 0.0],
                inputs: &[x],
                out: y,
            },
        )?;
        Ok(self)
    }

    /// `y[i] = value` for `i < n`.
    pub(crate) fn fill_n(&mut self, n: u64, value: f32, y: &'a Allocation) -> Result<&mut Self> {
        self.elementwise(
            n,
            Call {
                entry: "fill",
                op: 0,
                scalars: [0.0, 0.0, value],
                inputs: &[],
                out: y,
            },
        )?;
        Ok(self)
    }

    /// `y[i] = alpha * x[i] + beta` for `i < n` (`x` and `y` may be the same allocation).
    pub(crate) fn scale_n(
        &mut self,
        n: u64,
        alpha: f32,
        beta: f32,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.elementwise(
            n,
            Call {
                entry: "unary",
                op: u32::MAX,
                scalars: [alpha, beta, 0.0],
                inputs: &[x],
                out: y,
            },
        )?;
        Ok(self)
    }

    /// `y[i] = f(x[i])` for `i < n` (`x` and `y` may be the same allocation).
    pub(crate) fn map_n(
        &mut self,
        f: Unary,
        n: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.elementwise(
            n,
            Call {
                entry: "unary",
                op: f.code(),
                scalars: [1.0, 0.0, 0.0],
                inputs: &[x],
                out: y,
            },
        )?;
        Ok(self)
    }

    /// `z[i] = x[i] op y[i]` for `i < n` (`z` may be `x` or `y`).
    pub(crate) fn binary_n(
        &mut self,
        op: Binary,
        n: u64,
        x: &'a Allocation,
        y: &'a Allocation,
        z: &'a Allocation,
    ) -> Result<&mut Self> {
        self.elementwise(
            n,
            Call {
                entry: "binary",
                op: op.code(),
                scalars: [1.0, 0.0, 0.0],
                inputs: &[x, y],
                out: z,
            },
        )?;
        Ok(self)
    }
}
