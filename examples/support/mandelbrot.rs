//! The Mandelbrot texture of the web demo and the tour: the square `[-2.2, 1.0] x
//! [-1.6, 1.6]` of the complex plane, 32768 texels a side, each tile computed when it is
//! asked for (smooth escape-time colouring through a cosine palette).
#![allow(dead_code)]

use vramkit::vt::{tile_from_texels, FnSource, TileId, TileSource, VtLayout};

/// Texels per side at level 0.
pub const SIZE: u32 = 1 << 15;
const RE0: f64 = -2.2;
const IM0: f64 = -1.6;
const SPAN: f64 = 3.2;
const MAX_ITER: u32 = 256;

/// The texture coordinates of a point of the plane.
pub fn uv(re: f64, im: f64) -> [f32; 2] {
    [((re - RE0) / SPAN) as f32, ((im - IM0) / SPAN) as f32]
}

/// A tile source that computes each tile when it is asked for.
pub fn source() -> vramkit::Result<impl TileSource> {
    let layout = VtLayout::new(SIZE, SIZE)?;
    Ok(FnSource::new(layout, move |tile: TileId| {
        let step = SPAN * f64::from(1u32 << tile.level) / f64::from(SIZE);
        Ok(tile_from_texels(&layout, tile, |x, y| {
            texel(
                RE0 + (f64::from(x) + 0.5) * step,
                IM0 + (f64::from(y) + 0.5) * step,
            )
        }))
    }))
}

/// Smooth escape-time colouring through a cosine palette; the set itself deep blue.
fn texel(cr: f64, ci: f64) -> [u8; 4] {
    let (mut zr, mut zi) = (0.0f64, 0.0f64);
    for i in 0..MAX_ITER {
        let (r2, i2) = (zr * zr, zi * zi);
        if r2 + i2 > 256.0 {
            let mu = f64::from(i) + 1.0 - ((r2 + i2).ln() / 2.0).ln() / std::f64::consts::LN_2;
            let t = (mu / 48.0).fract();
            let c = |phase: f64| {
                let v = 0.5 + 0.5 * (std::f64::consts::TAU * (t + phase)).cos();
                (v * 255.0) as u8
            };
            return [c(0.0), c(0.10), c(0.20), 255];
        }
        zi = 2.0 * zr * zi + ci;
        zr = r2 - i2 + cr;
    }
    [8, 10, 40, 255]
}
