//! f32 <-> f16 casts: `shaders/cast/cast_x8.wgsl` over groups of eight elements, then
//! `shaders/cast/cast.wgsl` over the last `n % 8`, pair by pair. An f16 array of `n` elements takes
//! `2 * n` bytes rounded up to 4, pairs of halves in little-endian words: the layout of
//! WGSL's `array<f16>` and of `half::f16` slices. The casts convert with
//! `pack2x16float` / `unpack2x16float` on every adapter (no feature needed).

use super::params::kernel_params;
use super::{check_count, check_no_overlap, grid, Batch, Bindings, Bound, WORKGROUP};
use crate::arena::Allocation;
use crate::shaders::{shader, Shader};
use crate::Result;

/// f32 <-> f16 casts, f16 pairs packed in u32 words on every adapter: the tail of an odd
/// count needs the words' bits, which naga cannot bitcast out of `vec2<f16>`.
pub(crate) const CAST_F16_PACKED: Shader = shader!("cast.wgsl (packed)", "cast/cast.wgsl");
/// Trusted (compiled without injected checks, [`Shader::unchecked`]): group `i` reads and
/// writes `f[2i]`, `f[2i + 1]` and `h[i]` behind `i < groups`, and the host sets `groups =
/// n / 8` after checking that `n` f32 and `n` f16 fit the bound allocations (`32 * groups
/// <= 4n`, `16 * groups <= 2n`). It has no loop.
///
/// f32 <-> f16 casts, eight elements per invocation (the bulk of each array).
pub(crate) const CAST_F16_X8: Shader = shader!("cast_x8.wgsl", "cast/cast_x8.wgsl").trusted();

kernel_params! {
    /// `Params` of `cast.wgsl`: `n` elements, pairs from `first` on.
    pub(crate) struct CastParams {
        n: u32,
        first: u32,
        _pad1: u32,
        _pad2: u32,
        _pad3: u32,
        _pad4: u32,
        _pad5: u32,
        _pad6: u32,
    }
}

kernel_params! {
    /// `Params` of `cast_x8.wgsl`: the groups of eight elements.
    pub(crate) struct CastX8Params {
        groups: u32,
        _pad0: u32,
        _pad1: u32,
        _pad2: u32,
        _pad3: u32,
        _pad4: u32,
        _pad5: u32,
        _pad6: u32,
    }
}

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
        self.cast_bound(entry, n, Bound::of(f32s), Bound::of(f16s))
    }

    /// The dispatches of a cast of `n` elements between bound ranges (`entry`: "to_f16"
    /// or "to_f32"), after the caller's checks: each range holds `n` elements and the two
    /// do not overlap.
    pub(super) fn cast_bound(
        &mut self,
        entry: &'static str,
        n: u64,
        f32s: Bound,
        f16s: Bound,
    ) -> Result<()> {
        check_count(n, entry)?;
        let io = Bindings::two(f32s, f16s, self.spare(0));
        let eights = n / 8;
        if eights > 0 {
            let params = CastX8Params {
                groups: eights as u32,
                ..Default::default()
            };
            let groups = grid(eights, WORKGROUP, self.gpu());
            self.run(&CAST_F16_X8, entry, params.into(), io.clone(), groups)?;
        }
        let rest = n - eights * 8;
        if rest > 0 {
            // Pairs from 4 * eights on; an odd n ends in a half-used word.
            let params = CastParams {
                n: n as u32,
                first: (eights * 4) as u32,
                ..Default::default()
            };
            let groups = grid(rest.div_ceil(2), WORKGROUP, self.gpu());
            self.run(&CAST_F16_PACKED, entry, params.into(), io, groups)?;
        }
        self.dispatches += 1;
        Ok(())
    }

    /// `y[i] = f16(x[i])` for `i < n`: f32 `x` into f16 `y` (round to nearest; values
    /// beyond +-65504 give implementation-defined results).
    pub(crate) fn cast_f16_n(
        &mut self,
        n: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.cast("to_f16", n, x, y)?;
        Ok(self)
    }

    /// `y[i] = f32(x[i])` for `i < n`: f16 `x` into f32 `y` (exact).
    pub(crate) fn cast_f32_n(
        &mut self,
        n: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.cast("to_f32", n, y, x)?;
        Ok(self)
    }
}
