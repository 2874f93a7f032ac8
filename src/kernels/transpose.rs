//! Tiled transpose (`shaders/transpose.wgsl`).

use super::{check_f32, grid, overlaps, shape, Batch, Bindings, Bound, Params};
use crate::arena::Allocation;
use crate::{shaders, Error, Result};

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
        check_f32(x, n, "x")?;
        check_f32(y, n, "y")?;
        if overlaps(x, y) {
            return Err(Error::invalid(
                "an in-place transpose",
                "transpose into a second allocation",
            ));
        }
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
            Bindings::two(Bound::of(x), Bound::of(y)),
            groups,
        )?;
        Ok(self)
    }
}
