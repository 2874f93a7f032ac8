//! Matrix products: f32, and f16 inputs with f32 accumulation; one product
//! ([`Batch::matmul`]) or a batch of them with strides ([`Batch::bmm`], one dispatch whose
//! third grid dimension picks the product); f16 results rounded once from the f32 sums
//! ([`Batch::matmul_f16_out`], [`Batch::bmm_f16_out`]: fused into the matrix-unit kernel's
//! stores, through f32 scratch and a cast elsewhere).
//! - f16 inputs with m and n multiples of 16 and k a multiple of 8 run on the GPU's matrix
//!   units where the context has them ([`Gpu::has_matrix_units`](crate::Gpu::has_matrix_units)):
//!   `shaders/matmul/matmul_coop.wgsl`, wgpu's cooperative matrices (tensor cores on NVIDIA), on
//!   128 x 128 tiles, one workgroup per tile (several in turn only where the grid would
//!   pass its limit).
//! - Other shapes whose k and n are multiples of 4 run `shaders/matmul/matmul_vec4.wgsl`
//!   (four-element loads and stores, prefetched steps of 16 along k: faster than
//!   `matmul.wgsl`, BENCHMARKS.md, Kernels); the rest run `shaders/matmul/matmul.wgsl`.
//! - On either of the first two, a single product with few tiles and a long k is split
//!   along k (split-k, [`KernelOptions::split_k`](super::KernelOptions::split_k)): 512 x 512
//!   x 8192 has 16 tiles for a GPU's 100 or more cores. Its parts run side by side as a
//!   batch over k-ranges of the same a and b, each into its own plane of the kernels'
//!   scratch allocation, and `shaders/matmul/matmul_split_sum.wgsl` adds the planes into c.
//!
//! # Numerics
//! Every kernel accumulates in f32. The portable and four-element kernels sum each output's
//! k products one after the other in increasing k (one invocation per output); the
//! matrix-unit kernel has the hardware sum 16-deep fragments (the order inside one is the
//! device's) and takes the fragments in increasing k; a split product sums each part's k-range
//! so, then adds the parts' sums in increasing k. Products of two f16 values are exact
//! in f32, so for f16 inputs the error against the exact product of the f32 values they were
//! rounded from is at most `(2^-10 + 2^-21 + g(k) (1 + 2^-10)) x sum_k |a| |b|` with
//! `g(k) = k 2^-24 / (1 - k 2^-24)`: rounding each input to f16 costs up to 2^-11 of it, and
//! f32 summation in any order at most `g(k)` of the sum of magnitudes. For f32 inputs the
//! bound is `g(k) x sum_k |a| |b|` (no TF32). `tests/it/kernels_math.rs` checks the f16 bound
//! at k = 8 to 4096 (largest errors 4.4e-4 down to 1.6e-5 of `sum |a| |b|` on lavapipe,
//! 3.8e-4 down to 2.0e-5 on the H100's matrix units: the inputs' rounding dominates) and
//! every product of the property tests within 1e-5 of `sum |a| |b|` against the rounded
//! inputs.

pub(crate) mod shaders;

use super::params::kernel_params;
use super::{check_no_overlap, grid, shape, Access, Batch, Bindings, Bound, Kernels, WORKGROUP};
use crate::arena::Allocation;
use crate::shaders::Shader;
use crate::{Error, Result};

kernel_params! {
    /// `Params` of every product kernel (`shaders/shared/matmul_params.wgsl`): the shape,
    /// the batch strides of a, b and c in the units each kernel indexes them, the number of
    /// products, and `lda`, the distance between a's rows in elements.
    pub(crate) struct MatmulParams {
        m: u32,
        n: u32,
        k: u32,
        stride_a: u32,
        stride_b: u32,
        stride_c: u32,
        batch: u32,
        lda: u32,
    }
}

kernel_params! {
    /// `Params` of `matmul_split_sum.wgsl`: the fours of c, the parts, and the fours from
    /// one part's partial product to the next's.
    pub(crate) struct SplitSumParams {
        fours: u32,
        parts: u32,
        plane: u32,
        _pad3: u32,
        _pad4: u32,
        _pad5: u32,
        _pad6: u32,
        _pad7: u32,
    }
}

/// Rows and columns of C one workgroup computes.
const TILE: u64 = 128;
/// Rows and columns of one tile of C in `matmul_coop.wgsl`.
const COOP_TILE: u64 = 128;
/// Tiles each workgroup of `matmul_coop.wgsl` computes in turn (at least; more where the
/// grid would otherwise pass its limit). One, not two: two workgroups of this kernel share
/// a core, and halving the grid left half of those places empty wherever a product has
/// fewer tiles than twice the cores. On an H200 one tile each read 1.3-2x the speed of
/// two on mid-sized products (2048^3: 285.6-286.2 against 211.0-213.0 TFLOP/s; 4096 x 1024
/// x 4096: 284.0-285.7 against 162.6-163.2; 1024 x 1024 x 4096: 117.5 against 59.9-60.0),
/// and within 1.3 % either way on 4096^3, 8192^3 and attention's products (BENCHMARKS.md,
/// Matrix products).
const COOP_TILES_PER_GROUP: u64 = 1;

/// Workgroups a split product aims for: two per core on a GPU of 128 cores. Parts are
/// added while the workgroups stay at most this many, so the partial sums of all parts
/// never take more than this many tiles of f32 ([`SPLIT_SCRATCH_BYTES`]).
const SPLIT_GROUPS: u64 = 256;
/// The shortest k-range of a part: shorter ones spend more of their time on the tile's
/// first loads and its stores than on multiply-adds.
const SPLIT_MIN_K: u64 = 512;
/// Bytes of the split products' partial sums: [`SPLIT_GROUPS`] tiles of 128 x 128 f32.
const SPLIT_SCRATCH_BYTES: u64 = SPLIT_GROUPS * COOP_TILE * COOP_TILE * 4;

/// The kernel that computes a split product's parts.
#[derive(Clone, Copy)]
enum PartKernel {
    /// `matmul_coop.wgsl`: f16 inputs in eights of halves, tiles walked by a 1-D grid.
    MatrixUnits,
    /// A `matmul_vec4.wgsl` variant (inputs writable, read-only): inputs and c in fours, a
    /// workgroup per tile and `workgroup_id.z` the part.
    Fours(&'static [Shader; 2]),
}

/// Parts to split a product of `tiles` tiles (of 128 x 128 in either kernel) along `k`
/// into: the most that keep [`SPLIT_GROUPS`] workgroups or fewer and k-ranges of
/// [`SPLIT_MIN_K`] or more that divide k in multiples of 32 (so every part runs whole
/// steps, and the whole-tiles variant where m and n allow it); 1 where none does.
fn split_parts(tiles: u64, k: u64) -> u64 {
    let most = (SPLIT_GROUPS / tiles.max(1)).min(k / SPLIT_MIN_K);
    (2..=most)
        .rev()
        .find(|&parts| k.is_multiple_of(32 * parts))
        .unwrap_or(1)
}

/// The kernels' `Params` of `batch` products of `dims`, the batch strides in the units
/// the kernel indexes its inputs (`unit_in` elements) and output (`unit_out`) in; one
/// product has strides 0.
fn product_params(
    dims: MatmulShape,
    batch: MatmulBatch,
    unit_in: u64,
    unit_out: u64,
) -> MatmulParams {
    let MatmulShape { m, k, n } = dims;
    let one = batch.count == 1;
    let stride = |s: u64, unit: u64| if one { 0 } else { (s / unit) as u32 };
    MatmulParams {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        stride_a: stride(batch.stride_a, unit_in),
        stride_b: stride(batch.stride_b, unit_in),
        stride_c: stride(batch.stride_c, unit_out),
        batch: batch.count as u32,
        lda: k as u32,
    }
}

/// Element type of matmul inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatmulInput {
    /// f32 inputs.
    F32,
    /// f16 inputs (the layout of [`Batch::to_f16`]'s output), accumulated in f32.
    F16,
}

/// Element type of a product's output `c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum MatmulOutput {
    /// f32, as accumulated.
    F32,
    /// f16, rounded from the f32 accumulators (PyTorch's f16 products): fused into the
    /// matrix-unit kernel's stores where that kernel runs; elsewhere the product is made
    /// in f32 scratch and cast (see [`Batch::bmm_n`]).
    F16,
}

/// The dimensions of a product `c = a * b`: `a` is m x k, `b` k x n, `c` m x n. Named, so
/// that no call can swap k and n unseen (both APIs take it: [`Batch::matmul`] and
/// [`Batch::matmul`](super::Batch::matmul)).
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
    /// An `m` x `k` by `k` x `n` product, from the `usize` lengths a program has.
    ///
    /// ```
    /// let shape = vramkit::kernels::MatmulShape::new(128, 64, 32);
    /// assert_eq!((shape.m, shape.k, shape.n), (128, 64, 32));
    /// ```
    pub fn new(m: usize, k: usize, n: usize) -> MatmulShape {
        MatmulShape {
            m: m as u64,
            k: k as u64,
            n: n as u64,
        }
    }
}

/// How a batch of products lies in its allocations ([`Batch::bmm`]): how many, and how
/// many elements one product's operand starts after the previous one's.
///
/// ```
/// use vramkit::kernels::{matmul::MatmulBatch, MatmulShape};
/// let shape = MatmulShape { m: 64, k: 32, n: 16 };
/// let packed = MatmulBatch::packed(8, shape);
/// assert_eq!((packed.stride_a, packed.stride_b, packed.stride_c), (64 * 32, 32 * 16, 64 * 16));
/// // Every product multiplies by the same b:
/// let shared_b = MatmulBatch { stride_b: 0, ..packed };
/// # let _ = shared_b;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MatmulBatch {
    /// Number of products.
    pub count: u64,
    /// Elements from one product's `a` to the next's (0: every product reads one `a`).
    pub stride_a: u64,
    /// Elements from one product's `b` to the next's (0: every product reads one `b`).
    pub stride_b: u64,
    /// Elements from one product's `c` to the next's; at least m x n (outputs never
    /// overlap) when there is more than one product.
    pub stride_c: u64,
}

impl MatmulBatch {
    /// Whether the strides keep every product's operands where a kernel that loads
    /// `unit_in` input elements (and stores `unit_out` outputs) at a time indexes them.
    fn aligned(&self, unit_in: u64, unit_out: u64) -> bool {
        self.count == 1
            || (self.stride_a.is_multiple_of(unit_in)
                && self.stride_b.is_multiple_of(unit_in)
                && self.stride_c.is_multiple_of(unit_out))
    }

    /// `count` products stored one after the other in each allocation.
    pub fn packed(count: u64, shape: MatmulShape) -> MatmulBatch {
        MatmulBatch {
            count,
            stride_a: shape.m * shape.k,
            stride_b: shape.k * shape.n,
            stride_c: shape.m * shape.n,
        }
    }

    /// Floating-point operations of the whole batch.
    pub fn flops(&self, shape: MatmulShape) -> u64 {
        self.count * shape.flops()
    }
}

impl MatmulShape {
    /// Floating-point operations of the product (a multiply and an add per term).
    pub fn flops(&self) -> u64 {
        2 * self.m * self.k * self.n
    }
}

impl<'a> Batch<'a> {
    /// The byte-level product under [`bmm`](Self::bmm) (whose docs say what it checks); `a`,
    /// `b` and `c` must hold at least up to the end of their last product; `c` holds
    /// `output` elements.
    ///
    /// An f16 output comes straight from the matrix-unit kernel where it runs unsplit.
    /// Elsewhere the product runs into f32 scratch taken from the arena for this batch,
    /// which a cast turns into c: where the products' outputs lie apart (`stride_c > m x
    /// n`) the scratch first takes c's present values, so the elements between them come
    /// back as they were (f16 -> f32 -> f16 is exact).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn bmm_n(
        &mut self,
        input: MatmulInput,
        output: MatmulOutput,
        dims: MatmulShape,
        batch: MatmulBatch,
        a: &'a Allocation,
        b: &'a Allocation,
        c: &'a Allocation,
    ) -> Result<&mut Self> {
        let MatmulShape { m, k, n } = dims;
        let MatmulBatch {
            count,
            stride_a,
            stride_b,
            stride_c,
        } = batch;
        let elem = match input {
            MatmulInput::F32 => 4,
            MatmulInput::F16 => 2,
        };
        let max = self.gpu().limits().max_compute_workgroups_per_dimension as u64;
        if count == 0 || count > max {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                format!("a batch of {count} products"),
                format!("pass between 1 and {max} products (the grid's third dimension)"),
            ));
        }
        let (mk, kn, mn) = (
            shape(m, k, "matmul input a")?,
            shape(k, n, "matmul input b")?,
            shape(m, n, "matmul output c")?,
        );
        if count > 1 && stride_c < mn {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                format!("products' outputs {stride_c} elements apart, each {m} x {n}"),
                "give each product's output its own m x n elements (stride_c >= m * n)",
            ));
        }
        // Elements up to the end of the last product's operand.
        let reach = |stride: u64, one: u64, what: &str| {
            (count - 1)
                .checked_mul(stride)
                .and_then(|v| v.checked_add(one))
                .filter(|&v| v <= u32::MAX as u64)
                .ok_or_else(|| {
                    Error::misuse(
 crate::Misuse::Shape,
                        format!("{what} of {count} products {stride} elements apart reach past 2^32 - 1 elements"),
                        "split the batch",
                    )
                })
        };
        let reach_c = reach(stride_c, mn, "output c")?;
        self.check_len(a, reach(stride_a, mk, "input a")?, elem, "a")?;
        self.check_len(b, reach(stride_b, kn, "input b")?, elem, "b")?;
        match output {
            MatmulOutput::F32 => self.check_f32(c, reach_c, "c")?,
            MatmulOutput::F16 => self.check_len(c, reach_c, 2, "c")?,
        }
        check_no_overlap(a, c, false, "matmul")?;
        check_no_overlap(b, c, false, "matmul")?;
        let coop = input == MatmulInput::F16
            && self.kernels.matrix_units
            && m.is_multiple_of(16)
            && n.is_multiple_of(16)
            && k.is_multiple_of(8)
            && batch.aligned(8, 16);
        let tile = if coop { COOP_TILE } else { TILE };
        let (gx, gy) = (n.div_ceil(tile), m.div_ceil(tile));
        if gx > max || gy > max {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                format!("a {m} x {n} matmul output needs {gy} x {gx} tiles, over {max}"),
                "split the output",
            ));
        }
        let whole_tiles =
            coop && m.is_multiple_of(tile) && n.is_multiple_of(tile) && k.is_multiple_of(32);
        if coop && output == MatmulOutput::F16 {
            // Straight into c, unsplit: the split's partial sums are f32.
            let io = Bindings::three(Bound::of(a), Bound::of(b), Bound::of(c));
            let params = product_params(dims, batch, 8, 1);
            self.coop_dispatch(params, io, gx * gy * count, whole_tiles, output)?;
            return Ok(self);
        }
        // Where the f32 product goes: c, or scratch an f16 c is cast from.
        let out = match output {
            MatmulOutput::F32 => Bound::of(c),
            MatmulOutput::F16 => {
                let scratch = self.scratch_f32(reach_c, "vramkit f16-output product")?;
                if count > 1 && stride_c > mn {
                    self.cast_bound("to_f32", reach_c, scratch.clone(), Bound::of(c))?;
                }
                scratch
            }
        };
        let kernel = (coop, whole_tiles);
        self.bmm_f32_out(input, dims, batch, kernel, (gx, gy), (a, b, out.clone()))?;
        if output == MatmulOutput::F16 {
            self.cast_bound("to_f16", reach_c, out, Bound::of(c))?;
        }
        Ok(self)
    }

    /// The kernels of [`bmm_n`](Self::bmm_n) into an f32 `c` (an allocation's range or
    /// scratch), after its checks: on the matrix units where `coop`, on `(gx, gy)` tiles
    /// a product.
    #[allow(clippy::too_many_arguments)]
    fn bmm_f32_out(
        &mut self,
        input: MatmulInput,
        dims: MatmulShape,
        batch: MatmulBatch,
        (coop, whole_tiles): (bool, bool),
        (gx, gy): (u64, u64),
        (a, b, c): (&Allocation, &Allocation, Bound),
    ) -> Result<()> {
        let MatmulShape { k, n, .. } = dims;
        let count = batch.count;
        let io = Bindings::three(Bound::of(a), Bound::of(b), c.clone());
        let groups = (gx as u32, gy as u32, count as u32);
        if coop {
            let kernel = PartKernel::MatrixUnits;
            if count == 1 && self.try_split_product(dims, (gx, gy), (a, b, c), kernel)? {
                return Ok(());
            }
            let params = product_params(dims, batch, 8, 1);
            return self.coop_dispatch(params, io, gx * gy * count, whole_tiles, MatmulOutput::F32);
        }
        if !k.is_multiple_of(4) || !n.is_multiple_of(4) || !batch.aligned(4, 4) {
            let shader = match (input, self.kernels.native_f16) {
                (MatmulInput::F32, _) => &shaders::MATMUL_F32,
                (MatmulInput::F16, true) => &shaders::MATMUL_F16_NATIVE,
                (MatmulInput::F16, false) => &shaders::MATMUL_F16_PACKED,
            };
            return self.record_3d(
                shader,
                "matmul",
                product_params(dims, batch, 1, 1).into(),
                io,
                groups,
            );
        }
        let variants = match (input, self.kernels.native_f16) {
            (MatmulInput::F32, _) => &shaders::MATMUL_VEC4_F32,
            (MatmulInput::F16, true) => &shaders::MATMUL_VEC4_F16_NATIVE,
            (MatmulInput::F16, false) => &shaders::MATMUL_VEC4_F16_PACKED,
        };
        let kernel = PartKernel::Fours(variants);
        if count == 1 && self.try_split_product(dims, (gx, gy), (a, b, c), kernel)? {
            return Ok(());
        }
        let params = product_params(dims, batch, 4, 4);
        self.fours_dispatch(variants, params, io, groups)
    }

    /// One dispatch of a `matmul_vec4.wgsl` variant (`variants`: inputs writable, then
    /// read-only), a workgroup per tile and `workgroup_id.z` the product. Inputs in buffers
    /// of their own are bound read-only (see `Shared` in mod.rs).
    fn fours_dispatch(
        &mut self,
        variants: &'static [Shader; 2],
        params: MatmulParams,
        io: Bindings,
        groups: (u32, u32, u32),
    ) -> Result<()> {
        let io = io.reading_x_and_y_only();
        let shader = &variants[usize::from(io.access == Access::ReadOnlyXY)];
        self.record_3d(shader, "matmul", params.into(), io, groups)
    }

    /// One dispatch of the matrix-unit kernel on `tiles` tiles (of every product in
    /// `params`), walked by a 1-D grid of workgroups, writing `output` elements.
    fn coop_dispatch(
        &mut self,
        params: MatmulParams,
        io: Bindings,
        tiles: u64,
        whole_tiles: bool,
        output: MatmulOutput,
    ) -> Result<()> {
        let io = io.reading_x_and_y_only();
        let variants = match output {
            MatmulOutput::F32 => &shaders::MATMUL_COOP_F16,
            MatmulOutput::F16 => &shaders::MATMUL_COOP_F16_OUT,
        };
        let shader =
            &variants[usize::from(whole_tiles)][usize::from(io.access == Access::ReadOnlyXY)];
        // The workgroups walk the tiles of every product in turn: a 1-D grid of one per
        // COOP_TILES_PER_GROUP tiles, or more tiles each where that would pass the grid's
        // limit.
        let max = self.gpu().limits().max_compute_workgroups_per_dimension as u64;
        let per_group = COOP_TILES_PER_GROUP.max(tiles.div_ceil(max));
        let workgroups = tiles.div_ceil(per_group);
        if tiles + workgroups > u32::MAX as u64 {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                format!(
                    "{} products of {} x {}: {tiles} tiles of {COOP_TILE} x {COOP_TILE}, \
                     past the 2^32 - 1 the matrix-unit kernel counts",
                    params.batch, params.m, params.n
                ),
                "split the batch or the output",
            ));
        }
        let groups = (workgroups as u32, 1, 1);
        self.record_3d(shader, "matmul", params.into(), io, groups)
    }

    /// Records one product split along k where split-k is on and pays
    /// ([`split_parts`]) and the partial sums have room: the parts run as a batch of
    /// `kernel` over k-ranges of a and b, each into its own plane of the partial sums, then
    /// `matmul_split_sum.wgsl` adds the planes into c. False where it recorded nothing
    /// (the product is then the caller's to run unsplit).
    fn try_split_product(
        &mut self,
        MatmulShape { m, k, n }: MatmulShape,
        (gx, gy): (u64, u64),
        (a, b, c): (&Allocation, &Allocation, Bound),
        kernel: PartKernel,
    ) -> Result<bool> {
        let parts = split_parts(gx * gy, k);
        if !self.kernels.split_k || parts < 2 {
            return Ok(false);
        }
        let Some(scratch) = self.kernels.split_scratch() else {
            return Ok(false);
        };
        let (range, plane) = (k / parts, m * n);
        debug_assert!(range.is_multiple_of(32) && parts * plane * 4 <= SPLIT_SCRATCH_BYTES);
        // Part z reads a's columns and b's rows z * range onwards (a's rows stay k apart)
        // and writes plane z, in the units its kernel indexes them in.
        let (unit_in, unit_out) = match kernel {
            PartKernel::MatrixUnits => (8, 1),
            PartKernel::Fours(_) => (4, 4),
        };
        let params = MatmulParams {
            m: m as u32,
            n: n as u32,
            k: range as u32,
            stride_a: (range / unit_in) as u32,
            stride_b: (range * n / unit_in) as u32,
            stride_c: (plane / unit_out) as u32,
            batch: parts as u32,
            lda: k as u32,
        };
        let io = Bindings::three(Bound::of(a), Bound::of(b), scratch.clone());
        match kernel {
            PartKernel::MatrixUnits => {
                let whole_tiles = m.is_multiple_of(COOP_TILE) && n.is_multiple_of(COOP_TILE);
                let tiles = gx * gy * parts;
                self.coop_dispatch(params, io, tiles, whole_tiles, MatmulOutput::F32)?;
            }
            PartKernel::Fours(variants) => {
                let groups = (gx as u32, gy as u32, parts as u32);
                self.fours_dispatch(variants, params, io, groups)?;
            }
        }
        let fours = plane / 4;
        let params = SplitSumParams {
            fours: fours as u32,
            parts: parts as u32,
            plane: fours as u32,
            ..Default::default()
        };
        let io = Bindings::two(scratch, c, self.spare(0));
        let groups = grid(fours, WORKGROUP, self.gpu());
        self.run(
            &shaders::MATMUL_SPLIT_SUM,
            "split_sum",
            params.into(),
            io,
            groups,
        )?;
        Ok(true)
    }
}

impl Kernels {
    /// The split products' partial sums, taken from the arena at the first call; `None`
    /// where the arena has no room for them (the product then runs unsplit).
    fn split_scratch(&self) -> Option<Bound> {
        if let Some(scratch) = self.shared.split_scratch.lock().as_ref() {
            return Some(Bound::of(scratch));
        }
        // Allocated outside the lock: the arena takes its own locks, ranked before this
        // leaf one. Two first calls at once may both allocate; the second is dropped
        // after the lock is released.
        let fresh = self
            .arena
            .alloc(SPLIT_SCRATCH_BYTES, "vramkit matmul partial sums")
            .ok()?;
        let mut slot = self.shared.split_scratch.lock();
        let (bound, spare) = match slot.as_ref() {
            Some(kept) => (Bound::of(kept), Some(fresh)),
            None => (Bound::of(&fresh), slot.replace(fresh)),
        };
        drop(slot);
        drop(spare);
        Some(bound)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shaders::{check, COOP_WORKGROUP_BYTES, TWO_PER_CORE_WORKGROUP_BYTES};

    /// Workgroup memory a shipped shader declares.
    fn workgroup_bytes(shader: &Shader) -> u32 {
        let source = shader.source().expect("shipped shaders expand");
        let module = naga::front::wgsl::parse_str(&source).expect("shipped WGSL parses");
        check::workgroup_bytes(shader.name, &module).expect("its types lay out")
    }

    #[test]
    fn matmul_workgroups_fit_two_per_core() {
        // What the host asks the device for is what the matrix-unit kernel declares.
        for shader in shaders::MATMUL_COOP_F16.iter().flatten() {
            assert_eq!(
                workgroup_bytes(shader),
                COOP_WORKGROUP_BYTES,
                "{}",
                shader.name
            );
        }
        // The four-element kernel's two 8 KiB tiles, in every input form.
        for shader in shaders::MATMUL_VEC4_F32
            .iter()
            .chain(&shaders::MATMUL_VEC4_F16_PACKED)
            .chain(&shaders::MATMUL_VEC4_F16_NATIVE)
        {
            let bytes = workgroup_bytes(shader);
            assert!(
                bytes <= TWO_PER_CORE_WORKGROUP_BYTES,
                "{}: {bytes} bytes of workgroup memory run one workgroup per core on NVIDIA",
                shader.name
            );
        }
    }

    #[test]
    fn split_parts_fill_the_workgroups_with_whole_steps() {
        // (tiles, k) -> parts, at the shapes BENCHMARKS.md measured.
        for ((tiles, k), want) in [
            ((16, 8192), 16), // 512 x 512 x 8192
            ((1, 16384), 32), // 128 x 128 x 16384
            ((64, 4096), 4),  // 1024 x 1024 x 4096
            ((36, 6144), 6),  // 768 x 768 x 6144 (7 parts would not divide k)
            ((117, 8192), 2), // 1040 x 1552 x 8192
            ((64, 1024), 2),  // 1024^3
            ((256, 4096), 1), // 2048 x 2048 x 4096: the cores are full
            ((1, 1000), 1),   // no k-range of 512 or more in multiples of 32
            ((1, 1024 + 32), 1),
        ] {
            assert_eq!(split_parts(tiles, k), want, "{tiles} tiles, k = {k}");
        }
        for tiles in 1..300 {
            for k in (8..20_000).step_by(8) {
                let parts = split_parts(tiles, k);
                if parts > 1 {
                    assert!(tiles * parts <= SPLIT_GROUPS);
                    assert!(k.is_multiple_of(32 * parts) && k / parts >= SPLIT_MIN_K);
                    // The partial sums fit the scratch, whatever m and n the tiles hold.
                    assert!(parts * tiles * COOP_TILE * COOP_TILE * 4 <= SPLIT_SCRATCH_BYTES);
                }
            }
        }
    }
}
