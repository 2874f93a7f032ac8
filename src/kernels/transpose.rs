//! Tiled transpose (`shaders/transpose/transpose.wgsl`).

use super::params::kernel_params;
use super::{check_no_overlap, grid, shape, Batch, Bindings, Bound};
use crate::arena::Allocation;
use crate::shaders::{shader, Shader};
use crate::Result;

/// Trusted (compiled without injected checks, [`Shader::unchecked`]): the 32 x 33 tile is
/// indexed by `(lid.y + j) * 33 + lid.x` with `lid.x < 32`, `lid.y + j < 32` (at most 1054
/// of 1056); loads and stores are behind `r < rows && c < cols` and the host checks `rows x
/// cols` elements fit. Its loops run four times.
///
/// Tiled 2-D transpose of f32 through workgroup memory.
pub(crate) const TRANSPOSE: Shader =
    shader!("transpose.wgsl", "transpose/transpose.wgsl").trusted();

kernel_params! {
    /// `Params` of `transpose.wgsl`: x's shape, and its tiles (`tiles_x` per row of tiles).
    pub(crate) struct TransposeParams {
        rows: u32,
        cols: u32,
        tiles_x: u32,
        tiles: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
        _pad3: u32,
    }
}

impl<'a> Batch<'a> {
    /// `y[c * rows + r] = x[r * cols + c]`: `y` (cols x rows) is the transpose of `x`
    /// (rows x cols), both row-major f32. `x` and `y` must not overlap.
    pub(crate) fn transpose_n(
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
        let params = TransposeParams {
            rows: rows as u32,
            cols: cols as u32,
            tiles_x: tiles_x as u32,
            tiles: tiles as u32,
            ..Default::default()
        };
        let groups = grid(tiles, 1, self.gpu());
        self.record(
            &TRANSPOSE,
            "transpose",
            params.into(),
            Bindings::two(Bound::of(x), Bound::of(y), self.spare(0)),
            groups,
        )?;
        Ok(self)
    }
}
