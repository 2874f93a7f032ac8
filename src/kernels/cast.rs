//! f32 <-> f16 casts: `shaders/cast_x8.wgsl` over groups of eight elements, then
//! `shaders/cast.wgsl` over the last `n % 8`, pair by pair. An f16 array of `n` elements takes
//! `2 * n` bytes rounded up to 4, pairs of halves in little-endian words: the layout of
//! WGSL's `array<f16>` and of `half::f16` slices. The casts convert with
//! `pack2x16float` / `unpack2x16float` on every adapter (no feature needed).

use super::{check_count, check_no_overlap, grid, Batch, Bindings, Bound, Params, WORKGROUP};
use crate::arena::Allocation;
use crate::{shaders, Result};

impl<'a> Batch<'a> {
    fn cast(
        &mut self,
        entry: &'static str,
        n: u64,
        f32s: &'a Allocation,
        f16s: &'a Allocation,
    ) -> Result<()> {
        check_count(n, entry)?;
        self.check_len(f32s, n, 4, "f32 array")?;
        self.check_len(f16s, n, 2, "f16 array")?;
        // Halves and floats have different strides: no cast can run in place.
        let (input, output) = if entry == "to_f16" {
            (f32s, f16s)
        } else {
            (f16s, f32s)
        };
        check_no_overlap(input, output, false, entry)?;
        if n == 0 {
            return Ok(());
        }
        let io = Bindings::two(Bound::of(f32s), Bound::of(f16s), self.spare(0));
        let eights = n / 8;
        if eights > 0 {
            let params: Params = [eights as u32, 0, 0, 0, 0, 0, 0, 0];
            let groups = grid(eights, WORKGROUP, self.gpu());
            self.run(&shaders::CAST_F16_X8, entry, params, io.clone(), groups)?;
        }
        let rest = n - eights * 8;
        if rest > 0 {
            // Pairs from 4 * eights on; an odd n ends in a half-used word.
            let params: Params = [n as u32, (eights * 4) as u32, 0, 0, 0, 0, 0, 0];
            let groups = grid(rest.div_ceil(2), WORKGROUP, self.gpu());
            self.run(&shaders::CAST_F16_PACKED, entry, params, io, groups)?;
        }
        self.dispatches += 1;
        Ok(())
    }

    /// `y[i] = f16(x[i])` for `i < n`: f32 `x` into f16 `y` (round to nearest; values
    /// beyond +-65504 give implementation-defined results).
    pub fn to_f16(&mut self, n: u64, x: &'a Allocation, y: &'a Allocation) -> Result<&mut Self> {
        self.cast("to_f16", n, x, y)?;
        Ok(self)
    }

    /// `y[i] = f32(x[i])` for `i < n`: f16 `x` into f32 `y` (exact).
    pub fn to_f32(&mut self, n: u64, x: &'a Allocation, y: &'a Allocation) -> Result<&mut Self> {
        self.cast("to_f32", n, y, x)?;
        Ok(self)
    }
}
