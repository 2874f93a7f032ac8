//! A CPU reference for `vt_sample_level`: the same page arithmetic and bilinear filter
//! over a tile source, as if every tile were resident. Tests and the example compare the
//! GPU's samples with it.

use std::collections::HashMap;

use super::layout::{texel_bytes, TileId, INNER, TILE};
use super::source::TileSource;
use crate::Result;

/// Samples a [`TileSource`] on the CPU as the shader samples a fully resident cache
/// (tiles are read once and kept).
///
/// ```
/// use vramkit::vt::{ProceduralSource, ReferenceSampler};
/// let source = ProceduralSource::new(4096, 4096)?;
/// let mut reference = ReferenceSampler::new(&source);
/// let rgba = reference.sample([0.25, 0.5], 0)?;
/// assert!(rgba.iter().all(|c| (0.0..=1.0).contains(c)));
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct ReferenceSampler<'a> {
    source: &'a dyn TileSource,
    tiles: HashMap<TileId, Vec<u8>>,
}

impl<'a> ReferenceSampler<'a> {
    /// A sampler over `source`.
    pub fn new(source: &'a dyn TileSource) -> ReferenceSampler<'a> {
        ReferenceSampler {
            source,
            tiles: HashMap::new(),
        }
    }

    /// The bilinear sample at `uv` (0..1, clamped) of mip `level` (clamped to the chain),
    /// RGBA in 0..1.
    pub fn sample(&mut self, uv: [f32; 2], level: u32) -> Result<[f32; 4]> {
        let (corners, fx, fy) = self.footprint(uv, level)?;
        let mut out = [0.0; 4];
        for (c, o) in out.iter_mut().enumerate() {
            let top = corners[0][c] * (1.0 - fx) + corners[1][c] * fx;
            let bottom = corners[2][c] * (1.0 - fx) + corners[3][c] * fx;
            *o = top * (1.0 - fy) + bottom * fy;
        }
        Ok(out)
    }

    /// How far a GPU may land from [`sample`](Self::sample) at `uv` by precision alone, per
    /// channel, for a shader that computes `uv` with one multiply-add as the reference's
    /// callers do. Two limits, both scaled by the span of the four texels read:
    /// - texture units weigh the texels with a few bits of sub-texel precision (Vulkan's
    ///   `subTexelPrecisionBits`, 8 on NVIDIA's and Mesa's drivers): each of the two
    ///   lerps may be off by 1/256 of its span;
    /// - `f32` coordinates: SPIR-V lets a driver fuse the multiply-add (one rounding, not
    ///   two), moving the sample by up to an ulp of `uv`, which is 1/16 of a texel at
    ///   level 0 of a 2^20-texel image.
    ///
    /// Add the output's rounding (half a step of the format) to compare. Flat regions get
    /// no slack and edges a few steps: a wrong level or tile still shows.
    ///
    /// ```
    /// use vramkit::vt::{ProceduralSource, ReferenceSampler};
    /// let source = ProceduralSource::new(4096, 4096)?;
    /// let mut reference = ReferenceSampler::new(&source);
    /// let slack = reference.filter_slack([0.25, 0.5], 0)?;
    /// assert!(slack.iter().all(|s| (0.0..=0.05).contains(s)));
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn filter_slack(&mut self, uv: [f32; 2], level: u32) -> Result<[f32; 4]> {
        let layout = self.source.layout();
        let (w, h) = layout.level_size(level.min(layout.levels - 1));
        let ulp = |x: f32| {
            let x = x.abs();
            f32::from_bits(x.to_bits() + 1) - x
        };
        // Texels the sample may move by: two ulps of uv (the rounding the reference makes
        // and the one a fused multiply-add skips), in texels of this level.
        let shift = (2.0 * ulp(uv[0]) * w as f32).max(2.0 * ulp(uv[1]) * h as f32);
        let weight_error = (1.0 / 128.0 + 2.0 * shift).min(1.0);
        let (corners, _, _) = self.footprint(uv, level)?;
        let mut out = [0.0; 4];
        for (c, o) in out.iter_mut().enumerate() {
            let values = corners.map(|t| t[c]);
            let hi = values.iter().copied().fold(f32::MIN, f32::max);
            let lo = values.iter().copied().fold(f32::MAX, f32::min);
            *o = (hi - lo) * weight_error;
        }
        Ok(out)
    }

    /// The four texels the bilinear filter at `uv` of `level` reads (top-left, top-right,
    /// bottom-left, bottom-right) and its weights, with the shader's page arithmetic.
    fn footprint(&mut self, uv: [f32; 2], level: u32) -> Result<([[f32; 4]; 4], f32, f32)> {
        let layout = self.source.layout();
        let level = level.min(layout.levels - 1);
        let (w, h) = layout.level_size(level);
        let (px, py) = layout.pages(level);
        // The shader's arithmetic, in f32 as it does it.
        let t = [
            uv[0].clamp(0.0, 1.0) * w as f32,
            uv[1].clamp(0.0, 1.0) * h as f32,
        ];
        let page = [
            ((t[0] / INNER as f32) as u32).min(px - 1),
            ((t[1] / INNER as f32) as u32).min(py - 1),
        ];
        let tile = TileId::new(level, page[0], page[1]);
        if !self.tiles.contains_key(&tile) {
            let bytes = self.source.read_tile(tile)?;
            self.tiles.insert(tile, bytes);
        }
        let bytes = &self.tiles[&tile];
        let p = [
            t[0] - (page[0] * INNER) as f32 + 4.0 - 0.5,
            t[1] - (page[1] * INNER) as f32 + 4.0 - 0.5,
        ];
        let (x0, y0) = (p[0].floor(), p[1].floor());
        let format = self.source.format();
        let size = texel_bytes(format).unwrap_or(4);
        let texel = |x: f32, y: f32| {
            let x = (x as i64).clamp(0, i64::from(TILE) - 1) as usize;
            let y = (y as i64).clamp(0, i64::from(TILE) - 1) as usize;
            let at = (y * TILE as usize + x) * size;
            decode(format, &bytes[at..at + size])
        };
        let corners = [
            texel(x0, y0),
            texel(x0 + 1.0, y0),
            texel(x0, y0 + 1.0),
            texel(x0 + 1.0, y0 + 1.0),
        ];
        Ok((corners, p[0] - x0, p[1] - y0))
    }

    /// The mip level `vt_level_for` picks for derivatives `ddx`, `ddy` (in uv per pixel).
    pub fn level_for(&self, ddx: [f32; 2], ddy: [f32; 2]) -> u32 {
        self.source.layout().level_for(ddx, ddy)
    }
}

/// One texel of `format` as the sampler returns it: RGBA in floats, missing channels
/// 0 (alpha 1), sRGB decoded to linear.
fn decode(format: wgpu::TextureFormat, b: &[u8]) -> [f32; 4] {
    use wgpu::TextureFormat as F;
    let unorm = |v: u8| f32::from(v) / 255.0;
    let half = |i: usize| half::f16::from_le_bytes([b[2 * i], b[2 * i + 1]]).to_f32();
    let srgb = |v: u8| {
        let c = unorm(v);
        if c <= 0.04045 {
            c / 12.92
        } else {
            ((c + 0.055) / 1.055).powf(2.4)
        }
    };
    match format {
        F::R8Unorm => [unorm(b[0]), 0.0, 0.0, 1.0],
        F::Rg8Unorm => [unorm(b[0]), unorm(b[1]), 0.0, 1.0],
        F::Rgba8UnormSrgb => [srgb(b[0]), srgb(b[1]), srgb(b[2]), unorm(b[3])],
        F::R16Float => [half(0), 0.0, 0.0, 1.0],
        F::Rg16Float => [half(0), half(1), 0.0, 1.0],
        F::Rgba16Float => [half(0), half(1), half(2), half(3)],
        _ => [unorm(b[0]), unorm(b[1]), unorm(b[2]), unorm(b[3])],
    }
}
