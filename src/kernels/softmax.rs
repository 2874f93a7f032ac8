//! Row-wise softmax. Rows of at most 512 run several to a workgroup:
//! `shaders/softmax_short.wgsl` when their length is a multiple of 4,
//! `shaders/softmax_short_scalar.wgsl` otherwise. Longer ones whose length is a multiple
//! of 4, up to 16384, run
//! `shaders/softmax_cached.wgsl`: the row is held in registers, read once and written once
//! (on the H100 it moved 1.07x the bytes per second of PyTorch's softmax at rows of 16384,
//! against 0.55x for the two-sweep kernel). Longer rows whose length is a multiple of 4
//! run `shaders/softmax_sweep.wgsl` (vec4 loads, 1024 invocations per row, two sweeps)
//! where the device allows workgroups of 1024; other rows run `shaders/softmax.wgsl`,
//! which reads the row twice with scalar loads (1024 invocations per row past 16384
//! columns, 256 below).

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
        let io = Bindings::two(Bound::of(x), Bound::of(y));
        let limits = self.gpu().limits();
        let wide = limits.max_compute_invocations_per_workgroup >= 1024
            && limits.max_compute_workgroup_size_x >= 1024;
        if let Some((shader, per_row)) = short_shader(cols) {
            let groups = grid(rows, 256 / per_row, self.gpu());
            let entry = if cols.is_multiple_of(4) {
                "softmax_short"
            } else {
                "softmax_short_scalar"
            };
            self.record(shader, entry, params, io, groups)?;
            return Ok(self);
        }
        match cached_shader(cols, self.kernels.subgroups) {
            Some(shader) => self.record(shader, "softmax_cached", params, io, groups)?,
            None if cols.is_multiple_of(4) && wide => {
                self.record(&shaders::SOFTMAX_SWEEP, "softmax_sweep", params, io, groups)?
            }
            // Long rows of any length: 1024 invocations each (short rows leave most of a
            // wide workgroup idle, so they keep 256).
            None if cols > LONG_ROW && wide => {
                self.record(&shaders::SOFTMAX_WIDE, "softmax", params, io, groups)?
            }
            None => self.record(&shaders::SOFTMAX, "softmax", params, io, groups)?,
        }
        Ok(self)
    }
}

/// The short-row shader for rows of `cols` and its invocations per row, if `cols` is at
/// most 512: a power of two from 32 covering the row in vec4s (lengths that are multiples
/// of 4) or in fours of scalars (any other).
fn short_shader(cols: u64) -> Option<(&'static shaders::Shader, u64)> {
    if cols == 0 || cols > 512 {
        return None;
    }
    let per_row = cols.div_ceil(4).next_power_of_two().max(32);
    let slot = per_row.trailing_zeros() as usize - 5;
    let scalar = usize::from(!cols.is_multiple_of(4));
    Some((&shaders::SOFTMAX_SHORT[scalar][slot], per_row))
}

/// Rows longer than this (the longest a cached softmax holds) get 1024 invocations.
const LONG_ROW: u64 = 16384;

/// vec4 per invocation a cached softmax can hold (each of its 256 invocations keeps `PER`).
const CACHED_PER: [u64; 5] = [1, 2, 4, 8, 16];

/// The row-in-registers shader for rows of `cols`, if one fits: `cols` a multiple of 4 (so
/// rows start on vec4 boundaries) and at most 256 invocations x 16 vec4.
fn cached_shader(cols: u64, subgroups: bool) -> Option<&'static shaders::Shader> {
    if cols == 0 || !cols.is_multiple_of(4) {
        return None;
    }
    let per = (cols / 4).div_ceil(256);
    let slot = CACHED_PER.iter().position(|&p| p >= per)?;
    Some(&shaders::SOFTMAX_CACHED[usize::from(subgroups)][slot])
}
