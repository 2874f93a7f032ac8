//! The kernels' one public face: every call on a [`Batch`] takes operands that carry their
//! element type and count.
//!
//! An operand is a [`Typed`](crate::arena::Typed) allocation, the first `n` elements of one
//! ([`Typed::first`](crate::arena::Typed::first), [`Elements`]), or, for code that keeps
//! byte allocations (a runtime layered on vramkit), `(&allocation, n)`: the first `n`
//! elements of an untyped [`Allocation`], checked to fit and to be aligned ([`Operand`]).
//! The compiler checks element types where it knows them: f32 for the float kernels, `u32`
//! or `f32` for the scan, `f32` or `half::f16` for matmul inputs, and exactly one side of
//! each cast. Every call takes its element count from its output and requires each input
//! to hold exactly as many elements (shapes: from the arguments given), so a short input
//! is an error, never a silently shorter kernel.
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
//!
//! The same kernels on byte allocations (the first 1024 elements of a 16 KiB range):
//!
//! ```no_run
//! # fn main() -> vramkit::Result<()> {
//! # use vramkit::{kernels::{Kernels, Unary}, Arena, Gpu};
//! # let arena = Arena::new(&Gpu::headless()?, Default::default())?;
//! # let kernels = Kernels::new(&arena)?;
//! let x = arena.alloc(16 << 10, "activations")?;
//! let mut batch = kernels.batch();
//! batch.fill(0.5, (&x, 1024))?.map(Unary::Gelu, (&x, 1024), (&x, 1024))?;
//! batch.submit()?;
//! # Ok(()) }
//! ```

use half::f16;

use super::matmul::MatmulOutput;
use super::{Batch, Binary, MatmulInput, Reduce, ScanKind, ScanType, Unary};
use super::{MatmulBatch, MatmulShape};
use crate::arena::{Allocation, Elements, Typed};
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

/// Element types a product writes (crate-private: `matmul` writes f32, `matmul_f16_out`
/// f16).
trait MatmulOut: bytemuck::Pod {
    const OUTPUT: MatmulOutput;
}
impl MatmulOut for f32 {
    const OUTPUT: MatmulOutput = MatmulOutput::F32;
}
impl MatmulOut for f16 {
    const OUTPUT: MatmulOutput = MatmulOutput::F16;
}

/// What a kernel call takes as an operand: `n` elements of type `T` in one allocation.
///
/// Implemented for `&Typed<T>` (all of it), [`Elements`] (the first elements of one, from
/// [`Typed::first`](crate::arena::Typed::first) or a tier guard), `&Allocation` (a byte
/// allocation as whole elements; its size must be a multiple of the element size) and
/// `(&Allocation, n)` or `(&Typed<T>, n)` (the first `n` elements, which the allocation
/// must hold, starting at a multiple of the element size). A type mismatch does not compile:
///
/// ```compile_fail,E0277
/// # let rt = vramkit::Runtime::headless()?;
/// let counts = rt.alloc::<u32>(1024, "counts")?;
/// let y = rt.alloc::<f32>(1024, "y")?;
/// rt.batch().axpy(2.0, &counts, &y)?; // error: u32 elements are not f32
/// # Ok::<(), vramkit::Error>(())
/// ```
pub trait Operand<'a, T: bytemuck::Pod> {
    /// The elements, or an error naming what does not fit.
    fn elements(self) -> Result<Elements<'a, T>>;
}

impl<'a, T: bytemuck::Pod> Operand<'a, T> for Elements<'a, T> {
    fn elements(self) -> Result<Elements<'a, T>> {
        Ok(self)
    }
}

impl<'a, T: bytemuck::Pod> Operand<'a, T> for &'a Typed<T> {
    fn elements(self) -> Result<Elements<'a, T>> {
        Ok(Elements::from(self))
    }
}

impl<'a, T: bytemuck::Pod> Operand<'a, T> for &'a Allocation {
    fn elements(self) -> Result<Elements<'a, T>> {
        let element = std::mem::size_of::<T>() as u64;
        if !self.size().is_multiple_of(element) {
            return Err(Error::misuse(
                crate::Misuse::Alignment,
                format!(
                    "'{}' holds {} bytes, not a whole number of {element}-byte elements",
                    self.label(),
                    self.size()
                ),
                "pass (&allocation, n) for its first n elements",
            ));
        }
        Elements::of(self, self.size() / element)
    }
}

impl<'a, T: bytemuck::Pod> Operand<'a, T> for (&'a Typed<T>, u64) {
    fn elements(self) -> Result<Elements<'a, T>> {
        Elements::of(self.0.allocation(), self.1)
    }
}

impl<'a, T: bytemuck::Pod> Operand<'a, T> for (&'a Allocation, u64) {
    fn elements(self) -> Result<Elements<'a, T>> {
        Elements::of(self.0, self.1)
    }
}

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

impl<'a> Batch<'a> {
    /// `y[i] = value`.
    pub fn fill(&mut self, value: f32, y: impl Operand<'a, f32>) -> Result<&mut Self> {
        let y = y.elements()?;
        self.fill_n(y.len() as u64, value, y.allocation())?;
        Ok(self)
    }

    /// `y[i] = x[i]`.
    pub fn copy(
        &mut self,
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let n = same_len("copy", y.len(), &[("x", x.len())])?;
        self.copy_n(n, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y[i] += alpha * x[i]` (`x` and `y` may be the same allocation).
    pub fn axpy(
        &mut self,
        alpha: f32,
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let n = same_len("axpy", y.len(), &[("x", x.len())])?;
        self.axpy_n(n, alpha, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y[i] = alpha * x[i] + beta * y[i]`.
    pub fn axpby(
        &mut self,
        alpha: f32,
        x: impl Operand<'a, f32>,
        beta: f32,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let n = same_len("axpby", y.len(), &[("x", x.len())])?;
        self.axpby_n(n, alpha, x.allocation(), beta, y.allocation())?;
        Ok(self)
    }

    /// `y[i] = alpha * x[i] + beta`.
    pub fn scale(
        &mut self,
        alpha: f32,
        beta: f32,
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let n = same_len("scale", y.len(), &[("x", x.len())])?;
        self.scale_n(n, alpha, beta, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y[i] = f(x[i])` (`x` and `y` may be the same allocation).
    pub fn map(
        &mut self,
        f: Unary,
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let n = same_len("map", y.len(), &[("x", x.len())])?;
        self.map_n(f, n, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `z[i] = x[i] op y[i]`.
    pub fn binary(
        &mut self,
        op: Binary,
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f32>,
        z: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y, z) = (x.elements()?, y.elements()?, z.elements()?);
        let n = same_len("binary", z.len(), &[("x", x.len()), ("y", y.len())])?;
        self.binary_n(op, n, x.allocation(), y.allocation(), z.allocation())?;
        Ok(self)
    }

    /// `out[0] = op(x)` over all of `x`.
    pub fn reduce(
        &mut self,
        op: Reduce,
        x: impl Operand<'a, f32>,
        out: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, out) = (x.elements()?, out.elements()?);
        self.reduce_n(op, x.len() as u64, x.allocation(), out.allocation())?;
        Ok(self)
    }

    /// `y[r] = op(row r of x)`, `x` split into as many rows as `y` has elements.
    pub fn reduce_rows(
        &mut self,
        op: Reduce,
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let rows = y.len() as u64;
        let cols = columns("reduce_rows", rows, x.len())?;
        self.reduce_rows_n(op, rows, cols, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// Prefix sums of `x` into `y` (`u32` wrapping or `f32`); `y` must not overlap `x` (a
    /// workgroup may read another tile's input while that tile writes its output).
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// # use vramkit::{kernels::{Kernels, ScanKind}, Arena, Gpu};
    /// # let arena = Arena::new(&Gpu::headless()?, Default::default())?;
    /// # let kernels = Kernels::new(&arena)?;
    /// let counts = arena.alloc(4 * 1000, "counts")?;
    /// let offsets = arena.alloc(4 * 1000, "offsets")?;
    /// let mut batch = kernels.batch();
    /// batch.scan::<u32>(ScanKind::Exclusive, (&counts, 1000), (&offsets, 1000))?;
    /// batch.submit()?;
    /// # Ok(()) }
    /// ```
    pub fn scan<T: ScanElement>(
        &mut self,
        kind: ScanKind,
        x: impl Operand<'a, T>,
        y: impl Operand<'a, T>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let n = same_len("scan", y.len(), &[("x", x.len())])?;
        self.scan_n(T::TYPE, kind, n, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// Softmax of each of `rows` rows of `x` into `y` (in place when the same).
    pub fn softmax_rows(
        &mut self,
        rows: u64,
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        same_len("softmax_rows", y.len(), &[("x", x.len())])?;
        let cols = columns("softmax_rows", rows, x.len())?;
        self.softmax_rows_n(rows, cols, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y` (cols x rows) = transpose of `x` (rows x cols), both row-major.
    pub fn transpose(
        &mut self,
        rows: u64,
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        same_len("transpose", y.len(), &[("x", x.len())])?;
        let cols = columns("transpose", rows, x.len())?;
        self.transpose_n(rows, cols, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `c = a * b` with `a` (m x k), `b` (k x n) and `c` (m x n) row-major; inputs of `f32`
    /// or `half::f16`, `c` f32 (f16 results: [`matmul_f16_out`](Self::matmul_f16_out)).
    /// Any m, n, k; `c` must not overlap the inputs.
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// # use vramkit::{kernels::{Kernels, MatmulShape}, Arena, Gpu};
    /// # let arena = Arena::new(&Gpu::headless()?, Default::default())?;
    /// # let kernels = Kernels::new(&arena)?;
    /// let (m, k, n) = (512, 1024, 256);
    /// let a = arena.alloc_typed::<f32>(m * k, "a")?;
    /// let b = arena.alloc_typed::<f32>(k * n, "b")?;
    /// let c = arena.alloc_typed::<f32>(m * n, "c")?;
    /// let (m, k, n) = (m as u64, k as u64, n as u64);
    /// let mut batch = kernels.batch();
    /// batch.matmul(MatmulShape { m, k, n }, &a, &b, &c)?;
    /// batch.submit()?;
    /// # Ok(()) }
    /// ```
    pub fn matmul<T: MatmulElement>(
        &mut self,
        shape: MatmulShape,
        a: impl Operand<'a, T>,
        b: impl Operand<'a, T>,
        c: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        self.bmm(shape, MatmulBatch::packed(1, shape), a, b, c)
    }

    /// A batch of independent products `c[z] = a[z] * b[z]` for `z` in `0..batch.count`,
    /// each `a[z]` (m x k), `b[z]` (k x n) and `c[z]` (m x n) row-major and starting
    /// `z * stride` elements into its allocation ([`MatmulBatch`]): `torch.bmm`, and with
    /// strides the shapes of attention (heads side by side, or one operand shared with
    /// stride 0). One dispatch for the whole batch (`workgroup_id.z` picks the product),
    /// with the kernel [`matmul`](Self::matmul) picks for one product of this shape, as
    /// long as the strides keep each product's rows as aligned as the kernel loads them
    /// (multiples of 8 elements for the matrix units, of 4 for the four-element kernel);
    /// otherwise the portable kernel.
    ///
    /// Errors: a shape or count of 0, outputs that overlap each other (`stride_c < m x n`
    /// with more than one product) or an input, an allocation too short for the last
    /// product, more products than a grid dimension allows.
    ///
    /// Inputs of `f32` or `half::f16`, `c` f32; each operand must hold at least up to the
    /// end of its last product.
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
        a: impl Operand<'a, T>,
        b: impl Operand<'a, T>,
        c: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        self.product(shape, batch, a, b, c)
    }

    /// f16 products with f16 results, accumulated in f32 and rounded once (PyTorch's
    /// `torch.matmul` of f16 tensors): [`matmul`](Self::matmul) with `c` in f16. On the
    /// matrix units the rounding is fused into the kernel's stores; elsewhere the
    /// product goes through f32 scratch the batch takes from its arena and a cast.
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// use half::f16;
    /// use vramkit::kernels::MatmulShape;
    /// let rt = vramkit::Runtime::headless()?;
    /// let shape = MatmulShape { m: 2, k: 3, n: 2 };
    /// let a = rt.alloc_from(&[f16::ONE; 6], "a")?;
    /// let b = rt.alloc_from(&[f16::from_f32(0.5); 6], "b")?;
    /// let c = rt.alloc::<f16>(4, "c")?;
    /// let mut batch = rt.batch();
    /// batch.matmul_f16_out(shape, &a, &b, &c)?;
    /// batch.submit()?;
    /// assert_eq!(rt.download(&c)?, vec![f16::from_f32(1.5); 4]);
    /// # Ok(()) }
    /// ```
    pub fn matmul_f16_out(
        &mut self,
        shape: MatmulShape,
        a: impl Operand<'a, f16>,
        b: impl Operand<'a, f16>,
        c: impl Operand<'a, f16>,
    ) -> Result<&mut Self> {
        self.bmm_f16_out(shape, MatmulBatch::packed(1, shape), a, b, c)
    }

    /// [`bmm`](Self::bmm) with f16 results ([`matmul_f16_out`](Self::matmul_f16_out)).
    /// Where the outputs lie apart (`stride_c > m x n`) the elements between them keep
    /// their values (a NaN stays a NaN).
    pub fn bmm_f16_out(
        &mut self,
        shape: MatmulShape,
        batch: MatmulBatch,
        a: impl Operand<'a, f16>,
        b: impl Operand<'a, f16>,
        c: impl Operand<'a, f16>,
    ) -> Result<&mut Self> {
        self.product(shape, batch, a, b, c)
    }

    /// The checks and the call under `bmm` and `bmm_f16_out`.
    fn product<T: MatmulElement, O: MatmulOut>(
        &mut self,
        shape: MatmulShape,
        batch: MatmulBatch,
        a: impl Operand<'a, T>,
        b: impl Operand<'a, T>,
        c: impl Operand<'a, O>,
    ) -> Result<&mut Self> {
        let (a, b, c) = (a.elements()?, b.elements()?, c.elements()?);
        let MatmulShape { m, k, n } = shape;
        let last = batch.count.saturating_sub(1);
        for (name, (op, len), stride, (rows, cols)) in [
            ("a", (a.allocation(), a.len()), batch.stride_a, (m, k)),
            ("b", (b.allocation(), b.len()), batch.stride_b, (k, n)),
            ("c", (c.allocation(), c.len()), batch.stride_c, (m, n)),
        ] {
            let reach = rows
                .checked_mul(cols)
                .and_then(|one| last.checked_mul(stride)?.checked_add(one));
            if reach.is_none_or(|r| r > len as u64) {
                let reach = reach.map_or_else(|| "past 2^64".to_string(), |r| r.to_string());
                return Err(Error::misuse(
                    crate::Misuse::Length,
                    format!(
                        "{}: {name} ('{}') holds {len} elements; {} product(s) of {rows} x {cols}, \
                         {stride} apart, need {reach}",
                        if batch.count == 1 { "matmul" } else { "bmm" },
                        op.label(),
                        batch.count,
                    ),
                    "pass operands that hold the shapes given, up to the end of the last product",
                ));
            }
        }
        self.bmm_n(
            T::INPUT,
            O::OUTPUT,
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
        x: impl Operand<'a, f32>,
        y: impl Operand<'a, f16>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let n = same_len("to_f16", y.len(), &[("x", x.len())])?;
        self.cast_f16_n(n, x.allocation(), y.allocation())?;
        Ok(self)
    }

    /// `y[i] = f32(x[i])` (exact).
    pub fn to_f32(
        &mut self,
        x: impl Operand<'a, f16>,
        y: impl Operand<'a, f32>,
    ) -> Result<&mut Self> {
        let (x, y) = (x.elements()?, y.elements()?);
        let n = same_len("to_f32", y.len(), &[("x", x.len())])?;
        self.cast_f32_n(n, x.allocation(), y.allocation())?;
        Ok(self)
    }
}
