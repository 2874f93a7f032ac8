//! `TypedBatch`: the kernels on typed allocations, element counts taken from them.
//!
//! The untyped [`Batch`] takes byte allocations and an element count per call, which is
//! what a runtime layered on vramkit wants; applications want `batch.axpy(2.0, &x, &y)`.
//! A `TypedBatch` wraps a `Batch` and takes [`Typed`](crate::arena::Typed) allocations (or
//! the first `n` elements of one, [`Typed::first`](crate::arena::Typed::first)) whose element type the compiler checks: f32 for
//! the float kernels, `u32` or `f32` for the scan, `f32` or `half::f16` for matmul inputs,
//! and exactly one side of each cast. Every call takes its element count from its output
//! and requires each input to hold exactly as many elements (shapes: from the arguments
//! given), so a short input is an error, never a silently shorter kernel.
//!
//! ```no_run
//! # fn main() -> vramkit::Result<()> {
//! let rt = vramkit::Runtime::headless()?;
//! let x = rt.alloc_from(&[1.0f32, 2.0, 3.0], "x")?;
//! let y = rt.alloc_from(&[10.0f32, 20.0, 30.0], "y")?;
//! let mut batch = rt.batch();
//! batch.axpy(2.0, &x, &y)?.map(vramkit::kernels::Unary::Relu, &y, &y)?;
//! batch.submit()?;
//! assert_eq!(rt.download(&y)?, vec![12.0, 24.0, 36.0]);
//! # Ok(()) }
//! ```

use half::f16;

use super::{Batch, Binary, MatmulInput, Reduce, ScanKind, ScanType, Unary};
use super::{MatmulBatch, MatmulShape};
use crate::arena::Elements;
use crate::{Error, Result};

/// Element types the scan runs on (`u32` wraps, `f32` rounds).
pub trait ScanElement: bytemuck::Pod {
    /// The scan variant.
    const TYPE: ScanType;
}
impl ScanElement for u32 {
    const TYPE: ScanType = ScanType::U32;
}
impl ScanElement for f32 {
    const TYPE: ScanType = ScanType::F32;
}

/// Element types matmul takes as inputs (the output is always f32).
pub trait MatmulElement: bytemuck::Pod {
    /// The matmul variant.
    const INPUT: MatmulInput;
}
impl MatmulElement for f32 {
    const INPUT: MatmulInput = MatmulInput::F32;
}
impl MatmulElement for f16 {
    const INPUT: MatmulInput = MatmulInput::F16;
}

/// A [`Batch`] on typed allocations; see the module docs. Submit it with
/// [`submit`](Self::submit); [`untyped`](Self::untyped) reaches the byte-level calls.
///
/// Element types are checked by the compiler: a float kernel on `u32` elements does not
/// compile.
///
/// ```compile_fail,E0277
/// # let rt = vramkit::Runtime::headless()?;
/// let counts = rt.alloc::<u32>(1024, "counts")?;
/// let y = rt.alloc::<f32>(1024, "y")?;
/// rt.batch().axpy(2.0, &counts, &y)?; // error: u32 elements are not f32
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct TypedBatch<'a> {
    batch: Batch<'a>,
}

/// An operand: a whole typed allocation or its first elements.
type Op<'a, T> = Elements<'a, T>;

/// Fails unless every input holds exactly `n` elements (`what` names the kernel).
fn same_len(what: &str, n: usize, inputs: &[(&str, usize)]) -> Result<u64> {
    for &(name, len) in inputs {
        if len != n {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!("{what}: {name} holds {len} elements, the output {n}"),
                "pass operands of one length (Typed::first(n) takes the first n elements)",
            ));
        }
    }
    Ok(n as u64)
}

/// `len` split into `rows` rows of whole columns.
fn columns(what: &str, rows: u64, len: usize) -> Result<u64> {
    if rows == 0 || !(len as u64).is_multiple_of(rows) {
        return Err(Error::misuse(
            crate::Misuse::Shape,
            format!("{what}: {len} elements do not split into {rows} rows"),
            "pass a row count that divides the element count",
        ));
    }
    Ok(len as u64 / rows)
}

impl<'a> TypedBatch<'a> {
    pub(crate) fn new(batch: Batch<'a>) -> Self {
        TypedBatch { batch }
    }

    /// The byte-level batch under this one (same encoder, same order).
    pub fn untyped(&mut self) -> &mut Batch<'a> {
        &mut self.batch
    }

    /// Kernel calls recorded so far.
    pub fn len(&self) -> usize {
        self.batch.len()
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.batch.is_empty()
    }

    /// Submits everything recorded, in order.
    pub fn submit(self) -> Result<wgpu::SubmissionIndex> {
        self.batch.submit()
    }

    /// `y[i] = value`.
    pub fn fill(&mut self, value: f32, y: impl Into<Op<'a, f32>>) -> Result<&mut Self> {
        let y = y.into();
        self.batch.fill(y.len() as u64, value, y.allocation())?;
        Ok(self)
    }

    /// `y[i] = x[i]`.
    pub fn copy(
        &mut self,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let n = same_len("copy", y.len(), &[("x", x.len())])?;
        self.batch.copy(n, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y[i] += alpha * x[i]` (`x` and `y` may be the same allocation).
    pub fn axpy(
        &mut self,
        alpha: f32,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let n = same_len("axpy", y.len(), &[("x", x.len())])?;
        self.batch.axpy(n, alpha, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y[i] = alpha * x[i] + beta * y[i]`.
    pub fn axpby(
        &mut self,
        alpha: f32,
        x: impl Into<Op<'a, f32>>,
        beta: f32,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let n = same_len("axpby", y.len(), &[("x", x.len())])?;
        self.batch
            .axpby(n, alpha, x.allocation(), beta, y.allocation())?;
        Ok(self)
    }

    /// `y[i] = alpha * x[i] + beta`.
    pub fn scale(
        &mut self,
        alpha: f32,
        beta: f32,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let n = same_len("scale", y.len(), &[("x", x.len())])?;
        self.batch
            .scale(n, alpha, beta, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y[i] = f(x[i])`.
    pub fn map(
        &mut self,
        f: Unary,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let n = same_len("map", y.len(), &[("x", x.len())])?;
        self.batch.map(f, n, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `z[i] = x[i] op y[i]`.
    pub fn binary(
        &mut self,
        op: Binary,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f32>>,
        z: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y, z) = (x.into(), y.into(), z.into());
        let n = same_len("binary", z.len(), &[("x", x.len()), ("y", y.len())])?;
        self.batch
            .binary(op, n, x.allocation(), y.allocation(), z.allocation())?;
        Ok(self)
    }

    /// `out[0] = op(x)` over all of `x`.
    pub fn reduce(
        &mut self,
        op: Reduce,
        x: impl Into<Op<'a, f32>>,
        out: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, out) = (x.into(), out.into());
        self.batch
            .reduce(op, x.len() as u64, x.allocation(), out.allocation())?;
        Ok(self)
    }

    /// `y[r] = op(row r of x)`, `x` split into as many rows as `y` has elements.
    pub fn reduce_rows(
        &mut self,
        op: Reduce,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let rows = y.len() as u64;
        let cols = columns("reduce_rows", rows, x.len())?;
        self.batch
            .reduce_rows(op, rows, cols, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// Prefix sums of `x` into `y` (`u32` wrapping or `f32`).
    pub fn scan<T: ScanElement>(
        &mut self,
        kind: ScanKind,
        x: impl Into<Op<'a, T>>,
        y: impl Into<Op<'a, T>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let n = same_len("scan", y.len(), &[("x", x.len())])?;
        self.batch
            .scan(T::TYPE, kind, n, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// Softmax of each of `rows` rows of `x` into `y` (in place when the same).
    pub fn softmax_rows(
        &mut self,
        rows: u64,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        same_len("softmax_rows", y.len(), &[("x", x.len())])?;
        let cols = columns("softmax_rows", rows, x.len())?;
        self.batch
            .softmax_rows(rows, cols, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y` (cols x rows) = transpose of `x` (rows x cols), both row-major.
    pub fn transpose(
        &mut self,
        rows: u64,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        same_len("transpose", y.len(), &[("x", x.len())])?;
        let cols = columns("transpose", rows, x.len())?;
        self.batch
            .transpose(rows, cols, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `c = a * b` with `a` (m x k) and `b` (k x n) of `f32` or `f16`, `c` (m x n) f32.
    pub fn matmul<T: MatmulElement>(
        &mut self,
        shape: MatmulShape,
        a: impl Into<Op<'a, T>>,
        b: impl Into<Op<'a, T>>,
        c: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        self.bmm(shape, MatmulBatch::packed(1, shape), a, b, c)
    }

    /// A batch of products `c[z] = a[z] * b[z]` laid out as `batch` says (`a[z]` m x k,
    /// `b[z]` k x n of `f32` or `f16`, `c[z]` m x n f32; see [`Batch::bmm`]). Each operand
    /// must hold exactly up to the end of its last product.
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// use vramkit::kernels::{matmul::MatmulBatch, MatmulShape};
    /// let rt = vramkit::Runtime::headless()?;
    /// let shape = MatmulShape { m: 2, k: 3, n: 2 };
    /// let heads = MatmulBatch::packed(4, shape);
    /// let a = rt.alloc_from(&[1.0f32; 4 * 6], "a")?;
    /// let b = rt.alloc_from(&[1.0f32; 4 * 6], "b")?;
    /// let c = rt.alloc::<f32>(4 * 4, "c")?;
    /// let mut batch = rt.batch();
    /// batch.bmm(shape, heads, &a, &b, &c)?;
    /// batch.submit()?;
    /// assert_eq!(rt.download(&c)?, vec![3.0; 16]);
    /// # Ok(()) }
    /// ```
    pub fn bmm<T: MatmulElement>(
        &mut self,
        shape: MatmulShape,
        batch: MatmulBatch,
        a: impl Into<Op<'a, T>>,
        b: impl Into<Op<'a, T>>,
        c: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (a, b, c) = (a.into(), b.into(), c.into());
        let MatmulShape { m, k, n } = shape;
        let last = batch.count.saturating_sub(1);
        for (name, len, stride, (rows, cols)) in [
            ("a", a.len(), batch.stride_a, (m, k)),
            ("b", b.len(), batch.stride_b, (k, n)),
            ("c", c.len(), batch.stride_c, (m, n)),
        ] {
            let reach = rows
                .checked_mul(cols)
                .and_then(|one| last.checked_mul(stride)?.checked_add(one));
            if reach != Some(len as u64) {
                let what = if batch.count == 1 {
                    format!("matmul: {name} holds {len} elements, not {rows} x {cols}")
                } else {
                    format!(
                        "bmm: {name} holds {len} elements, but {} products of {rows} x {cols}, \
                         {stride} apart, end at element {}",
                        batch.count,
                        reach.map_or_else(|| "past 2^64".to_string(), |r| r.to_string())
                    )
                };
                return Err(Error::misuse(
                    crate::Misuse::Length,
                    what,
                    "pass operands of exactly the shapes given, ending with the last product",
                ));
            }
        }
        self.batch.bmm(
            T::INPUT,
            shape,
            batch,
            a.allocation(),
            b.allocation(),
            c.allocation(),
        )?;
        Ok(self)
    }

    /// `y[i] = f16(x[i])`.
    pub fn to_f16(
        &mut self,
        x: impl Into<Op<'a, f32>>,
        y: impl Into<Op<'a, f16>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let n = same_len("to_f16", y.len(), &[("x", x.len())])?;
        self.batch.to_f16(n, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y[i] = f32(x[i])` (exact).
    pub fn to_f32(
        &mut self,
        x: impl Into<Op<'a, f16>>,
        y: impl Into<Op<'a, f32>>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.into(), y.into());
        let n = same_len("to_f32", y.len(), &[("x", x.len())])?;
        self.batch.to_f32(n, x.allocation(), y.allocation())?;
        Ok(self)
    }
}

impl super::Kernels {
    /// A batch on typed allocations ([`TypedBatch`]).
    pub fn typed_batch(&self) -> TypedBatch<'_> {
        TypedBatch::new(self.batch())
    }
}
