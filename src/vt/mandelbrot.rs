//! The Mandelbrot set as a tile source: an image of any size with detail at every level,
//! computed tile by tile when asked for (the demos', the tour's and the egui viewer's
//! picture; a test of streaming on content that does not repeat).

use super::layout::{TileId, VtLayout};
use super::source::{texel_tile, texel_tile_into, TileSource};
use crate::Result;

/// The square `[-2.2, 1.0] x [-1.6, 1.6]` of the complex plane, `side` texels a side at
/// level 0, coloured by smooth escape time through a cosine palette (the set itself deep
/// blue). Each texel costs up to 256 iterations, on the loader threads.
///
/// ```
/// use vramkit::vt::{Mandelbrot, TileSource, TileId};
/// let m = Mandelbrot::new(1 << 20)?;
/// assert_eq!(m.layout().width, 1 << 20);
/// assert_eq!(m.read_tile(TileId::new(0, 5000, 4000))?.len(), vramkit::vt::TILE_BYTES);
/// let [u, v] = Mandelbrot::uv(-0.7453, 0.1127); // the seahorse valley
/// assert!((0.0..1.0).contains(&u) && (0.0..1.0).contains(&v));
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct Mandelbrot {
    layout: VtLayout,
}

const RE0: f64 = -2.2;
const IM0: f64 = -1.6;
const SPAN: f64 = 3.2;
const MAX_ITER: u32 = 256;

impl Mandelbrot {
    /// The set `side` x `side` texels at level 0 (at most 2^24 - 1, [`VtLayout::new`]).
    pub fn new(side: u32) -> Result<Mandelbrot> {
        Ok(Mandelbrot {
            layout: VtLayout::new(side, side)?,
        })
    }

    /// The texture coordinates of the point `re + im i` of the plane.
    /// The same at every size.
    pub fn uv(re: f64, im: f64) -> [f32; 2] {
        [((re - RE0) / SPAN) as f32, ((im - IM0) / SPAN) as f32]
    }

    /// Texel `(x, y)` of `level`.
    pub fn texel(&self, level: u32, x: u32, y: u32) -> [u8; 4] {
        let step = SPAN * f64::from(1u32 << level.min(31)) / f64::from(self.layout.width);
        escape_colour(
            RE0 + (f64::from(x) + 0.5) * step,
            IM0 + (f64::from(y) + 0.5) * step,
        )
    }
}

impl TileSource for Mandelbrot {
    fn layout(&self) -> VtLayout {
        self.layout
    }

    fn read_tile(&self, tile: TileId) -> Result<Vec<u8>> {
        texel_tile(&self.layout, tile, |l, x, y| self.texel(l, x, y))
    }

    fn read_tile_into(&self, tile: TileId, dst: &mut [u8]) -> Result<()> {
        texel_tile_into(&self.layout, tile, dst, |l, x, y| self.texel(l, x, y))
    }
}

/// Smooth escape-time colouring through a cosine palette; the set itself deep blue.
fn escape_colour(cr: f64, ci: f64) -> [u8; 4] {
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
