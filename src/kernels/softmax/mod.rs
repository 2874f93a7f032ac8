//! Row-wise softmax, one kernel per kind of row (`kernel_for` picks it):
//! - rows of at most 512, with subgroups: one row per subgroup,
//!   `shaders/softmax/softmax_subgroup_rows.wgsl`, the row in the lanes' registers and combined by
//!   subgroup operations (vec4 elements when the length is a multiple of 4), where up to
//!   16 elements per lane of the smallest subgroup hold it; `x` is bound read-only when it
//!   lies in another buffer than `y`;
//! - other rows of at most 512, several to a workgroup: `shaders/softmax/softmax_short.wgsl`
//!   (length a multiple of 4, one vec4 per invocation) or
//!   `shaders/softmax/softmax_short_scalar.wgsl`, combined in workgroup memory;
//! - rows of up to 16384 whose length is a multiple of 4: `shaders/softmax/softmax_cached.wgsl`,
//!   the row held in registers, read once and written once;
//! - longer rows whose length is a multiple of 4: `shaders/softmax/softmax_sweep.wgsl` (vec4
//!   loads, 1024 invocations per row, two sweeps), where the device allows workgroups of
//!   1024;
//! - the rest: `shaders/softmax/softmax.wgsl`, scalar loads, two sweeps (1024 invocations per row
//!   past 16384 columns where allowed, 256 below).
//!
//! BENCHMARKS.md has each kind's figure against PyTorch's softmax on the H100.

pub(crate) mod shaders;

use super::params::kernel_params;
use super::{check_no_overlap, grid, shape, Access, Batch, Bindings, Bound};
use crate::arena::Allocation;
use crate::shaders::Shader;
use crate::Result;

kernel_params! {
    /// `Params` of every softmax kernel (`shaders/shared/softmax_params.wgsl`): `x` and `y`
    /// are row-major `rows x cols` f32 matrices.
    pub(crate) struct SoftmaxParams {
        rows: u32,
        cols: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
        _pad3: u32,
        _pad4: u32,
        _pad5: u32,
    }
}

impl<'a> Batch<'a> {
    /// `y[r, c] = exp(x[r, c]) / sum_c' exp(x[r, c'])` for each row of `x` viewed as a
    /// row-major `rows x cols` f32 matrix (computed with the row maximum subtracted, so
    /// large inputs do not overflow). `y` may be `x`.
    pub(crate) fn softmax_rows_n(
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
        let params = SoftmaxParams {
            rows: rows as u32,
            cols: cols as u32,
            ..Default::default()
        };
        let limits = self.gpu().limits();
        let wide = limits.max_compute_invocations_per_workgroup >= 1024
            && limits.max_compute_workgroup_size_x >= 1024;
        let info = self.gpu().info();
        let subgroup_sizes = self
            .kernels
            .subgroups
            .then_some((info.subgroup_min_size, info.subgroup_max_size));
        let kernel = kernel_for(cols, subgroup_sizes, wide);
        let groups = grid(rows, kernel.rows_per_group, self.gpu());
        let mut io = Bindings::two(Bound::of(x), Bound::of(y), self.spare(0));
        let mut shader = kernel.shader;
        if let Some(read_only) = kernel.read_only_x {
            // x in a buffer of its own is bound read-only: its loads may then be cached
            // and reordered (BENCHMARKS.md, Kernels).
            io = io.reading_x_only();
            if io.access == Access::ReadOnlyX {
                shader = read_only;
            }
        }
        self.record(shader, kernel.entry, params.into(), io, groups)?;
        Ok(self)
    }
}

/// A softmax kernel and how to dispatch it.
struct Kernel {
    shader: &'static Shader,
    /// The same kernel with `x` bound read-only, where one exists.
    read_only_x: Option<&'static Shader>,
    entry: &'static str,
    rows_per_group: u64,
}

impl Kernel {
    fn of(shader: &'static Shader, entry: &'static str, rows_per_group: u64) -> Self {
        Kernel {
            shader,
            read_only_x: None,
            entry,
            rows_per_group,
        }
    }
}

/// The kernel for rows of `cols` (see the module docs). `subgroup_sizes`: the smallest and
/// largest subgroup size, when subgroup kernels may run; `wide`: the device allows
/// workgroups of 1024.
fn kernel_for(cols: u64, subgroup_sizes: Option<(u32, u32)>, wide: bool) -> Kernel {
    let vec4 = cols.is_multiple_of(4);
    let subgroups = subgroup_sizes.is_some();
    if let Some(kernel) = subgroup_sizes.and_then(|sizes| subgroup_rows_kernel(cols, sizes)) {
        return kernel;
    }
    if cols <= SHORT_ROW {
        // A power of two from 32 invocations covering the row in vec4s or fours of scalars.
        let per_row = cols.div_ceil(4).next_power_of_two().max(32);
        let slot = per_row.trailing_zeros() as usize - 5;
        let entry = if vec4 {
            "softmax_short"
        } else {
            "softmax_short_scalar"
        };
        return Kernel::of(
            &shaders::SOFTMAX_SHORT[usize::from(!vec4)][slot],
            entry,
            256 / per_row,
        );
    }
    if let Some(shader) = vec4.then(|| cached_shader(cols, subgroups)).flatten() {
        return Kernel::of(shader, "softmax_cached", 1);
    }
    match (vec4, wide) {
        (true, true) => Kernel::of(&shaders::SOFTMAX_SWEEP, "softmax_sweep", 1),
        (false, true) if cols > LONG_ROW => Kernel::of(&shaders::SOFTMAX_WIDE, "softmax", 1),
        _ => Kernel::of(&shaders::SOFTMAX, "softmax", 1),
    }
}

/// The one-row-per-subgroup kernel for rows of `cols`, if a lane's registers hold a row:
/// at most 16 elements (f32, or vec4 when `cols` is a multiple of 4) per lane of the
/// smallest subgroup, within [`SHORT_ROW`]. Rows per workgroup count the largest subgroups,
/// so the grid covers every row whatever size the device picks (the kernel loops over
/// rows past the first). It comes with a twin that binds `x` read-only.
fn subgroup_rows_kernel(cols: u64, (min_size, max_size): (u32, u32)) -> Option<Kernel> {
    if cols > SHORT_ROW || min_size < 4 || max_size < min_size || max_size > 256 {
        return None;
    }
    let vec4 = cols.is_multiple_of(4);
    let elems = if vec4 { cols / 4 } else { cols };
    let per = elems.div_ceil(u64::from(min_size)).next_power_of_two();
    let slot = per.trailing_zeros() as usize;
    Some(Kernel {
        shader: shaders::SOFTMAX_SUBGROUP_ROWS[usize::from(vec4)].get(slot)?,
        read_only_x: shaders::SOFTMAX_SUBGROUP_ROWS_RO[usize::from(vec4)].get(slot),
        entry: "softmax_subgroup_rows",
        rows_per_group: 256 / u64::from(max_size),
    })
}

/// Rows of at most this many f32 share workgroups.
const SHORT_ROW: u64 = 512;

/// Rows longer than this (the longest a cached softmax holds) get 1024 invocations.
const LONG_ROW: u64 = 16384;

/// vec4 per invocation a cached softmax can hold (each of its 256 invocations keeps `PER`).
const CACHED_PER: [u64; 5] = [1, 2, 4, 8, 16];

/// The row-in-registers shader for rows of `cols` (a multiple of 4, so rows start on vec4
/// boundaries), if one fits: at most 256 invocations x 16 vec4.
fn cached_shader(cols: u64, subgroups: bool) -> Option<&'static Shader> {
    let per = (cols / 4).div_ceil(256);
    let slot = CACHED_PER.iter().position(|&p| p >= per)?;
    Some(&shaders::SOFTMAX_CACHED[usize::from(subgroups)][slot])
}
