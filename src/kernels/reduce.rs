//! Reductions (`shaders/reduce.wgsl`): sum, max, min and mean over whole arrays and over
//! the rows of a 2-D view. Each workgroup combines its values with subgroup operations
//! where the device has them ([`KernelOptions::subgroups`](super::KernelOptions)) and with
//! a tree in workgroup memory where not.

use super::{check_no_overlap, grid, Access, Batch, Bindings, Bound, Params};
use crate::arena::Allocation;
use crate::{shaders, Error, Result};

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

/// One pass of `shaders/reduce.wgsl`: rows of `cols` elements from `base` (in the
/// pass's element unit, f32 or vec4), at most `n` of them, into `y[out_base..]`.
#[derive(Clone, Copy)]
struct ReducePass {
    vec4: bool,
    n: u64,
    cols: u64,
    rows: u64,
    base: u64,
    out_base: u64,
    scale: f32,
}

/// The fewest vec4s one workgroup reduces in the first pass of a whole-array reduction: 8
/// per invocation (32 floats) keeps enough loads in flight without leaving the second pass
/// much to do.
const REDUCE_SEGMENT_VEC4: u64 = 256 * 8;

/// The most partials the first pass leaves: past `REDUCE_SEGMENT_VEC4 * MAX_PARTIALS`
/// vec4s the segments grow instead. On the H100 a 64 Mi-float sum read 2171-2205 GB/s with
/// 8192 segments of 2048 vec4, 2400-2431 with 1024 larger ones, 2318-2346 with 512 and
/// 1862 with 256 (too few workgroups to fill 132 SMs).
const MAX_PARTIALS: u64 = 1024;

/// vec4s per segment for a first pass over `vec4s`: at least [`REDUCE_SEGMENT_VEC4`], and
/// large enough that at most [`MAX_PARTIALS`] remain, in whole rounds of four loads.
fn segment_vec4(vec4s: u64) -> u64 {
    REDUCE_SEGMENT_VEC4.max(vec4s.div_ceil(MAX_PARTIALS).next_multiple_of(4 * 256))
}

impl<'a> Batch<'a> {
    fn reduce_pass(&mut self, op: Reduce, pass: ReducePass, mut io: Bindings) -> Result<()> {
        // The vec4 pass reads x through a read-only binding when x lies in another buffer
        // than its output. H100, sum of 64 Mi floats: 2399-2440 GB/s against 2312-2405
        // read_write, paired.
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
        let params: Params = [
            pass.n as u32,
            pass.cols as u32,
            pass.rows as u32,
            op.code(),
            pass.scale.to_bits(),
            pass.base as u32,
            pass.out_base as u32,
            0,
        ];
        let groups = grid(pass.rows, 1, self.gpu());
        self.run(shader, "reduce_rows", params, io, groups)
    }

    /// `y[r] = op(x[r * cols .. r * cols + cols])` for every row `r < rows` of `x` viewed
    /// as a row-major `rows x cols` matrix; one workgroup per row.
    pub fn reduce_rows(
        &mut self,
        op: Reduce,
        rows: u64,
        cols: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        if rows == 0 || cols == 0 {
            return Err(Error::invalid(
                "a reduction over no elements",
                "pass at least one row and one column",
            ));
        }
        let n = rows
            .checked_mul(cols)
            .filter(|&n| n <= u32::MAX as u64)
            .ok_or_else(|| {
                Error::invalid(
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
            n,
            cols,
            rows,
            base: 0,
            out_base: 0,
            scale,
        };
        self.reduce_pass(op, pass, Bindings::two(Bound::of(x), Bound::of(y)))?;
        self.dispatches += 1;
        Ok(self)
    }

    /// `out[0] = op(x[0..n])`. Large arrays take two passes: segments of 8192 elements read
    /// as vec4s into partials (scratch the batch allocates and keeps until submit; the 1..3
    /// trailing floats make one more partial), then the partials.
    pub fn reduce(
        &mut self,
        op: Reduce,
        n: u64,
        x: &'a Allocation,
        out: &'a Allocation,
    ) -> Result<&mut Self> {
        if n == 0 || n > u32::MAX as u64 {
            return Err(Error::invalid(
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
            self.reduce_pass(op, single(n), Bindings::two(Bound::of(x), Bound::of(out)))?;
        } else {
            // Pass 1: the whole vec4s in segments, one partial each; the 1..3 floats past
            // the last vec4 add one more partial; pass 2 reduces the partials.
            let tail = n % 4;
            let slots = rows + u64::from(tail > 0);
            let p = self.scratch(slots * 4, "reduce partials")?;
            let body = ReducePass {
                vec4: true,
                n: vec4s,
                cols: segment,
                rows,
                base: 0,
                out_base: 0,
                scale: 1.0,
            };
            self.reduce_pass(op, body, Bindings::two(Bound::of(x), p.clone()))?;
            if tail > 0 {
                let rest = ReducePass {
                    vec4: false,
                    n: tail,
                    cols: tail,
                    rows: 1,
                    base: vec4s * 4,
                    out_base: rows,
                    scale: 1.0,
                };
                self.reduce_pass(op, rest, Bindings::two(Bound::of(x), p.clone()))?;
            }
            self.reduce_pass(op, single(slots), Bindings::two(p, Bound::of(out)))?;
        }
        self.dispatches += 1;
        Ok(self)
    }
}
