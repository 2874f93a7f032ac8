//! Reductions (`shaders/reduce/reduce.wgsl`): sum, max, min and mean over whole arrays and over
//! the rows of a 2-D view. Each workgroup combines its values with subgroup operations
//! where the device has them ([`KernelOptions::subgroups`](super::KernelOptions)) and with
//! a tree in workgroup memory where not. A whole array too large for one workgroup is
//! one dispatch (`shaders/shared/reduce_whole.wgsl`): segments fold into partials, and the
//! workgroup that finishes last folds the partials.

pub(crate) mod shaders;

use super::params::kernel_params;
use super::{check_no_overlap, grid, Access, Batch, Bindings, Bound};
use crate::arena::Allocation;
use crate::{Error, Result};

kernel_params! {
    /// `Params` of `reduce.wgsl`: `rows` rows of `cols` (elements or vec4s) from `base`,
    /// `n` of them valid, results from `out_base`; the whole-array entry's `epoch`.
    pub(crate) struct ReduceParams {
        n: u32,
        cols: u32,
        rows: u32,
        op: u32,
        scale: f32,
        base: u32,
        out_base: u32,
        epoch: u32,
    }
}

/// What a reduction computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// Sum of the elements.
    Sum,
    /// Largest element.
    Max,
    /// Smallest element.
    Min,
    /// Sum divided by the element count.
    Mean,
}

impl Reduce {
    fn code(self) -> u32 {
        match self {
            Reduce::Sum | Reduce::Mean => 0,
            Reduce::Max => 1,
            Reduce::Min => 2,
        }
    }
}

/// One pass of `shaders/reduce/reduce.wgsl`: rows of `cols` elements from `base` (in the
/// pass's element unit, f32 or vec4), at most `n` of them, into `y[out_base..]`. With
/// `whole` (vec4 only), the `reduce_whole` entry point: the rows' partials fold into
/// `y[0]`, and `out_base` is 1 when `y[0]` already holds a reduction to fold in.
#[derive(Clone, Copy)]
struct ReducePass {
    vec4: bool,
    whole: bool,
    n: u64,
    cols: u64,
    rows: u64,
    base: u64,
    out_base: u64,
    scale: f32,
}

/// The fewest vec4s one workgroup reduces in a whole-array reduction: 8 per invocation
/// (32 floats) keeps enough loads in flight without leaving the last workgroup many
/// partials to fold.
const REDUCE_SEGMENT_VEC4: u64 = 256 * 8;

/// The most segments (partials) of a whole-array reduction: past
/// `REDUCE_SEGMENT_VEC4 * MAX_PARTIALS` vec4s the segments grow instead. Why 512: more
/// segments leave a second wave of workgroups on a large GPU, fewer leave SMs idle; 512
/// read fastest of 256 to 2048 in one dispatch (BENCHMARKS.md, Kernels).
const MAX_PARTIALS: u64 = 512;

/// Bytes of the whole-array reduction's state: the done counter and two words for each of
/// [`MAX_PARTIALS`] segments (`MAX_SLOTS` in `shaders/shared/reduce_whole.wgsl`).
pub(super) const STATE_BYTES: u64 = (1 + 2 * MAX_PARTIALS) * 4;

/// vec4s per segment for a first pass over `vec4s`: at least [`REDUCE_SEGMENT_VEC4`], and
/// large enough that at most [`MAX_PARTIALS`] remain, in whole rounds of four loads.
fn segment_vec4(vec4s: u64) -> u64 {
    REDUCE_SEGMENT_VEC4.max(vec4s.div_ceil(MAX_PARTIALS).next_multiple_of(4 * 256))
}

impl<'a> Batch<'a> {
    fn reduce_pass(&mut self, op: Reduce, pass: ReducePass, mut io: Bindings) -> Result<()> {
        debug_assert!(!pass.whole || (pass.vec4 && pass.rows <= MAX_PARTIALS));
        // The whole-array entry binds the kernels' state as `z` and takes an epoch.
        let (entry, epoch) = if pass.whole {
            let shared = &self.kernels.shared;
            io.z = Bound {
                buffer: shared.reduce_state.clone(),
                offset: 0,
                size: STATE_BYTES,
            };
            ("reduce_whole", shared.next_reduce_epoch())
        } else {
            ("reduce_rows", 0)
        };
        // The vec4 pass reads x through a read-only binding when x lies in another buffer
        // than its output: the compiler may then cache its loads (BENCHMARKS.md, Kernels).
        if pass.vec4 {
            io = io.reading_x_only();
        }
        let read_only = io.access == Access::ReadOnlyX;
        let shader = match (pass.vec4, self.kernels.subgroups, read_only) {
            (true, true, true) => &shaders::REDUCE_VEC4_SUBGROUP_READ_ONLY,
            (true, false, true) => &shaders::REDUCE_VEC4_READ_ONLY,
            (true, true, false) => &shaders::REDUCE_VEC4_SUBGROUP,
            (true, false, false) => &shaders::REDUCE_VEC4,
            (false, true, _) => &shaders::REDUCE_SUBGROUP,
            (false, false, _) => &shaders::REDUCE,
        };
        let params = ReduceParams {
            n: pass.n as u32,
            cols: pass.cols as u32,
            rows: pass.rows as u32,
            op: op.code(),
            scale: pass.scale,
            base: pass.base as u32,
            out_base: pass.out_base as u32,
            epoch,
        };
        let groups = grid(pass.rows, 1, self.gpu());
        self.run(shader, entry, params.into(), io, groups)
    }

    /// `y[r] = op(x[r * cols .. r * cols + cols])` for every row `r < rows` of `x` viewed
    /// as a row-major `rows x cols` matrix; one workgroup per row.
    pub(crate) fn reduce_rows_n(
        &mut self,
        op: Reduce,
        rows: u64,
        cols: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        if rows == 0 || cols == 0 {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                "a reduction over no elements",
                "pass at least one row and one column",
            ));
        }
        let n = rows
            .checked_mul(cols)
            .filter(|&n| n <= u32::MAX as u64)
            .ok_or_else(|| {
                Error::misuse(
                    crate::Misuse::Shape,
                    format!("{rows} x {cols} elements exceed the 2^32 - 1 a kernel indexes"),
                    "split the rows",
                )
            })?;
        self.check_f32(x, n, "x")?;
        self.check_f32(y, rows, "y")?;
        check_no_overlap(x, y, false, "reduce_rows")?;
        let scale = if op == Reduce::Mean {
            1.0 / cols as f32
        } else {
            1.0
        };
        let pass = ReducePass {
            vec4: false,
            whole: false,
            n,
            cols,
            rows,
            base: 0,
            out_base: 0,
            scale,
        };
        self.reduce_pass(
            op,
            pass,
            Bindings::two(Bound::of(x), Bound::of(y), self.spare(0)),
        )?;
        self.dispatches += 1;
        Ok(self)
    }

    /// `out[0] = op(x[0..n])`. Up to 8192 elements, one workgroup reduces them. Larger
    /// arrays are one dispatch: segments of at least 8192 elements (at most 512 segments)
    /// read as vec4s fold into partials, and the workgroup that finishes last folds the
    /// partials; the 1..3 trailing floats past the last vec4 are a small dispatch before
    /// it. No scratch memory: the partials live in the kernels' own 4 KiB of state.
    pub(crate) fn reduce_n(
        &mut self,
        op: Reduce,
        n: u64,
        x: &'a Allocation,
        out: &'a Allocation,
    ) -> Result<&mut Self> {
        if n == 0 || n > u32::MAX as u64 {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                format!("cannot reduce {n} elements"),
                "pass 1 to 2^32 - 1 elements",
            ));
        }
        self.check_f32(x, n, "x")?;
        self.check_f32(out, 1, "out")?;
        check_no_overlap(x, out, false, "reduce")?;
        let scale = if op == Reduce::Mean {
            1.0 / n as f32
        } else {
            1.0
        };
        let single = |n| ReducePass {
            vec4: false,
            whole: false,
            n,
            cols: n,
            rows: 1,
            base: 0,
            out_base: 0,
            scale,
        };
        let vec4s = n / 4;
        let segment = segment_vec4(vec4s);
        let rows = vec4s.div_ceil(segment);
        if rows <= 1 {
            self.reduce_pass(
                op,
                single(n),
                Bindings::two(Bound::of(x), Bound::of(out), self.spare(0)),
            )?;
        } else {
            // The 1..3 floats past the last vec4 are reduced into `out` first; the
            // one-dispatch pass over the vec4s folds `out` in with the partials.
            let tail = n % 4;
            if tail > 0 {
                let rest = ReducePass {
                    base: vec4s * 4,
                    scale: 1.0,
                    ..single(tail)
                };
                self.reduce_pass(
                    op,
                    rest,
                    Bindings::two(Bound::of(x), Bound::of(out), self.spare(0)),
                )?;
            }
            let body = ReducePass {
                vec4: true,
                whole: true,
                n: vec4s,
                cols: segment,
                rows,
                base: 0,
                out_base: u64::from(tail > 0),
                scale,
            };
            self.reduce_pass(
                op,
                body,
                Bindings::two(Bound::of(x), Bound::of(out), self.spare(0)),
            )?;
        }
        self.dispatches += 1;
        Ok(self)
    }
}
