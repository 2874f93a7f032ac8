//! Row-wise softmax (`shaders/softmax.wgsl`).

use super::{check_no_overlap, grid, shape, Batch, Bindings, Bound, Params};
use crate::arena::Allocation;
use crate::{shaders, Result};

impl<'a> Batch<'a> {
    /// `y[r, c] = exp(x[r, c]) / sum_c' exp(x[r, c'])` for each row of `x` viewed as a
    /// row-major `rows x cols` f32 matrix (computed with the row maximum subtracted, so
    /// large inputs do not overflow). `y` may be `x`.
    pub fn softmax_rows(
        &mut self,
        rows: u64,
        cols: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        let n = shape(rows, cols, "softmax")?;
        self.check_f32(x, n, "x")?;
        self.check_f32(y, n, "y")?;
        check_no_overlap(x, y, true, "softmax_rows")?;
        let params: Params = [rows as u32, cols as u32, 0, 0, 0, 0, 0, 0];
        let groups = grid(rows, 1, self.gpu());
        self.record(
            &shaders::SOFTMAX,
            "softmax",
            params,
            Bindings::two(Bound::of(x), Bound::of(y)),
            groups,
        )?;
        Ok(self)
    }
}
