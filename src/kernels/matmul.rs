//! Matrix products: f32, and f16 inputs with f32 accumulation.
//! - f16 inputs with m and n multiples of 16 and k a multiple of 8 run on the GPU's matrix
//!   units where the context has them ([`Gpu::has_matrix_units`](crate::Gpu::has_matrix_units)):
//!   `shaders/matmul_coop.wgsl`, wgpu's cooperative matrices (tensor cores on NVIDIA).
//! - Other shapes whose k and n are multiples of 4 run `shaders/matmul_vec4.wgsl`
//!   (four-element loads and stores, prefetched steps of 16 along k: faster than
//!   `matmul.wgsl`, BENCHMARKS.md, Kernels); the rest run `shaders/matmul.wgsl`.

use super::{check_no_overlap, shape, Access, Batch, Bindings, Bound, Params};
use crate::arena::Allocation;
use crate::{shaders, Error, Result};

/// Rows and columns of C one workgroup computes.
const TILE: u64 = 128;
/// Rows and columns of C one workgroup of `matmul_coop.wgsl` computes.
const COOP_TILE: (u64, u64) = (128, 256);
/// Workgroup memory of `matmul_coop.wgsl`: its 128 x 40 and 32 x 264 f16 slices.
pub(crate) const COOP_WORKGROUP_BYTES: u32 = (128 * 40 + 32 * 264) * 2;

/// Element type of matmul inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulInput {
    /// f32 inputs.
    F32,
    /// f16 inputs (the layout of [`Batch::to_f16`]'s output), accumulated in f32.
    F16,
}

/// The dimensions of a product `c = a * b`: `a` is m x k, `b` k x n, `c` m x n. Named, so
/// that no call can swap k and n unseen (both APIs take it: [`Batch::matmul`] and
/// [`TypedBatch::matmul`](super::TypedBatch::matmul)).
///
/// ```
/// let shape = vramkit::kernels::MatmulShape { m: 512, k: 1024, n: 256 };
/// assert_eq!(shape.flops(), 2 * 512 * 1024 * 256);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulShape {
    /// Rows of `a` and `c`.
    pub m: u64,
    /// Columns of `a`, rows of `b`.
    pub k: u64,
    /// Columns of `b` and `c`.
    pub n: u64,
}

impl MatmulShape {
    /// Floating-point operations of the product (a multiply and an add per term).
    pub fn flops(&self) -> u64 {
        2 * self.m * self.k * self.n
    }
}

impl<'a> Batch<'a> {
    /// `c = a * b` with `a` (m x k), `b` (k x n) and `c` (m x n) row-major; inputs of type
    /// `input`, `c` in f32. Any m, n, k; `c` must not overlap the inputs.
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// # use vramkit::{kernels::{Kernels, matmul::MatmulInput}, Arena, Gpu};
    /// # let arena = Arena::new(&Gpu::headless()?, Default::default())?;
    /// # let kernels = Kernels::new(&arena)?;
    /// # use vramkit::kernels::MatmulShape;
    /// let (m, k, n) = (512, 1024, 256);
    /// let a = arena.alloc(4 * m * k, "a")?;
    /// let b = arena.alloc(4 * k * n, "b")?;
    /// let c = arena.alloc(4 * m * n, "c")?;
    /// let mut batch = kernels.batch();
    /// batch.matmul(MatmulInput::F32, MatmulShape { m, k, n }, &a, &b, &c)?;
    /// batch.submit()?;
    /// # Ok(()) }
    /// ```
    pub fn matmul(
        &mut self,
        input: MatmulInput,
        dims: MatmulShape,
        a: &'a Allocation,
        b: &'a Allocation,
        c: &'a Allocation,
    ) -> Result<&mut Self> {
        let MatmulShape { m, k, n } = dims;
        let elem = match input {
            MatmulInput::F32 => 4,
            MatmulInput::F16 => 2,
        };
        self.check_len(a, shape(m, k, "matmul input a")?, elem, "a")?;
        self.check_len(b, shape(k, n, "matmul input b")?, elem, "b")?;
        self.check_f32(c, shape(m, n, "matmul output c")?, "c")?;
        check_no_overlap(a, c, false, "matmul")?;
        check_no_overlap(b, c, false, "matmul")?;
        let coop = input == MatmulInput::F16
            && self.kernels.matrix_units
            && m.is_multiple_of(16)
            && n.is_multiple_of(16)
            && k.is_multiple_of(8);
        let (tile_m, tile_n) = if coop { COOP_TILE } else { (TILE, TILE) };
        let (gx, gy) = (n.div_ceil(tile_n), m.div_ceil(tile_m));
        let max = self.gpu().limits().max_compute_workgroups_per_dimension as u64;
        if gx > max || gy > max {
            return Err(Error::invalid(
                format!("a {m} x {n} matmul output needs {gy} x {gx} tiles, over {max}"),
                "split the output",
            ));
        }
        let params: Params = [m as u32, n as u32, k as u32, 0, 0, 0, 0, 0];
        let io = Bindings::three(Bound::of(a), Bound::of(b), Bound::of(c));
        let groups = (gx as u32, gy as u32);
        if coop {
            let io = io.reading_x_and_y_only();
            let whole_tiles =
                m.is_multiple_of(tile_m) && n.is_multiple_of(tile_n) && k.is_multiple_of(32);
            let shader = &shaders::MATMUL_COOP_F16[usize::from(whole_tiles)]
                [usize::from(io.access == Access::ReadOnlyXY)];
            return self
                .record(shader, "matmul", params, io, groups)
                .map(|_| self);
        }
        if !k.is_multiple_of(4) || !n.is_multiple_of(4) {
            let shader = match (input, self.kernels.native_f16) {
                (MatmulInput::F32, _) => &shaders::MATMUL_F32,
                (MatmulInput::F16, true) => &shaders::MATMUL_F16_NATIVE,
                (MatmulInput::F16, false) => &shaders::MATMUL_F16_PACKED,
            };
            return self
                .record(shader, "matmul", params, io, groups)
                .map(|_| self);
        }
        // Inputs in buffers of their own are bound read-only (see `Shared` in mod.rs).
        let io = io.reading_x_and_y_only();
        let variants = match (input, self.kernels.native_f16) {
            (MatmulInput::F32, _) => &shaders::MATMUL_VEC4_F32,
            (MatmulInput::F16, true) => &shaders::MATMUL_VEC4_F16_NATIVE,
            (MatmulInput::F16, false) => &shaders::MATMUL_VEC4_F16_PACKED,
        };
        let shader = &variants[usize::from(io.access == Access::ReadOnlyXY)];
        self.record(shader, "matmul", params, io, groups)?;
        Ok(self)
    }
}
