//! Tiled transpose (`shaders/transpose.wgsl`).

use super::{check_no_overlap, grid, shape, Batch, Bindings, Bound, Params};
use crate::arena::Allocation;
use crate::{shaders, Result};

impl<'a> Batch<'a> {
    /// `y[c * rows + r] = x[r * cols + c]`: `y` (cols x rows) is the transpose of `x`
    /// (rows x cols), both row-major f32. `x` and `y` must not overlap.
    pub fn transpose(
        &mut self,
        rows: u64,
        cols: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        let n = shape(rows, cols, "transpose")?;
        self.check_f32(x, n, "x")?;
        self.check_f32(y, n, "y")?;
        check_no_overlap(x, y, false, "transpose")?;
        let tiles_x = cols.div_ceil(32);
        let tiles = tiles_x * rows.div_ceil(32);
        let params: Params = [
            rows as u32,
            cols as u32,
            tiles_x as u32,
            tiles as u32,
            0,
            0,
            0,
            0,
        ];
        let groups = grid(tiles, 1, self.gpu());
        self.record(
            &shaders::TRANSPOSE,
            "transpose",
            params,
            Bindings::two(Bound::of(x), Bound::of(y), self.spare(0)),
            groups,
        )?;
        Ok(self)
    }
}
