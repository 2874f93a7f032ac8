//! The geometry of a virtual texture: its mip levels, their pages, and the one 32-bit key
//! the CPU and the shaders both use to name a tile.

use crate::{Error, Result};

/// Texels of a tile side, border included: a 128-texel RGBA8 row is 512 bytes, a multiple
/// of the 256-byte copy pitch, so tiles go from staging to the cache with no padding.
pub const TILE: u32 = 128;
/// Texels of border on each side of a tile, copied from its neighbours (clamped at the
/// image's edges), so bilinear filtering never reads across a slot boundary.
pub const BORDER: u32 = 4;
/// Texels of a tile side that belong to its page (`TILE - 2 * BORDER`).
pub const INNER: u32 = TILE - 2 * BORDER;
/// Bytes of one RGBA8 tile (the default format).
pub const TILE_BYTES: usize = (TILE * TILE * 4) as usize;

/// Bytes per texel of the tile formats virtual textures take: filterable colour formats
/// whose texels the reference sampler can read. `None` for any other format.
pub fn texel_bytes(format: wgpu::TextureFormat) -> Option<usize> {
    use wgpu::TextureFormat as F;
    match format {
        F::R8Unorm => Some(1),
        F::Rg8Unorm | F::R16Float => Some(2),
        F::Rgba8Unorm | F::Rgba8UnormSrgb | F::Rg16Float => Some(4),
        F::Rgba16Float => Some(8),
        _ => None,
    }
}

/// Bytes of one tile of `format` (`None` for a format tiles cannot have).
pub fn tile_bytes(format: wgpu::TextureFormat) -> Option<usize> {
    texel_bytes(format).map(|b| b * (TILE * TILE) as usize)
}
/// Most mip levels a key can name (4 bits hold `level + 1`; 0 means "no request").
pub const MAX_LEVELS: u32 = 15;
/// Most pages per side at level 0 (14 bits per coordinate): 16384 pages of 120 texels,
/// 1 966 080 texels per side.
pub const MAX_PAGES: u32 = 1 << 14;

/// One tile: mip level (0 is the full resolution) and page coordinates at that level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileId {
    /// Mip level, 0 = full resolution.
    pub level: u32,
    /// Page column at that level.
    pub x: u32,
    /// Page row at that level.
    pub y: u32,
}

impl TileId {
    /// A tile.
    pub fn new(level: u32, x: u32, y: u32) -> TileId {
        TileId { level, x, y }
    }

    /// The tile one level coarser that covers this one.
    pub fn parent(self) -> TileId {
        TileId::new(self.level + 1, self.x / 2, self.y / 2)
    }

    /// The key the page table and the feedback use: `(level + 1) << 28 | y << 14 | x`,
    /// never 0 (0 marks "no request" in the feedback buffer).
    pub fn key(self) -> u32 {
        ((self.level + 1) << 28) | (self.y << 14) | self.x
    }

    /// The tile a key names; `None` for 0 or a key whose level is out of range.
    pub fn from_key(key: u32) -> Option<TileId> {
        let level = key >> 28;
        (level >= 1).then(|| TileId::new(level - 1, key & 0x3fff, (key >> 14) & 0x3fff))
    }
}

impl std::fmt::Display for TileId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "tile (level {}, {}, {})", self.level, self.x, self.y)
    }
}

/// Sizes of a virtual texture and its mip chain. Level `l` is `max(1, size >> l)` texels
/// per side (as GPU mips are), cut into pages of [`INNER`] texels; the chain ends at the
/// first level that is one page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VtLayout {
    /// Level-0 width in texels.
    pub width: u32,
    /// Level-0 height in texels.
    pub height: u32,
    /// Mip levels, the last being a single page.
    pub levels: u32,
}

impl VtLayout {
    /// The layout of a `width` x `height` texture: errors for an empty one or one larger
    /// than the keys can name ([`MAX_PAGES`] pages per side, [`MAX_LEVELS`] levels).
    pub fn new(width: u32, height: u32) -> Result<VtLayout> {
        let pages = |n: u32| n.div_ceil(INNER);
        if width == 0 || height == 0 || pages(width) > MAX_PAGES || pages(height) > MAX_PAGES {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                format!("a virtual texture of {width}x{height} texels"),
                format!(
                    "sizes go from 1 to {} texels per side ({MAX_PAGES} pages of {INNER})",
                    MAX_PAGES * INNER
                ),
            ));
        }
        let mut levels = 1;
        while pages((width >> (levels - 1)).max(1)) > 1
            || pages((height >> (levels - 1)).max(1)) > 1
        {
            levels += 1;
        }
        if levels > MAX_LEVELS {
            return Err(Error::misuse(
                crate::Misuse::Shape,
                format!("a virtual texture of {width}x{height} texels needs {levels} levels"),
                format!("at most {MAX_LEVELS} levels fit a key"),
            ));
        }
        Ok(VtLayout {
            width,
            height,
            levels,
        })
    }

    /// Texels per side of `level`.
    pub fn level_size(&self, level: u32) -> (u32, u32) {
        ((self.width >> level).max(1), (self.height >> level).max(1))
    }

    /// Pages per side of `level`.
    pub fn pages(&self, level: u32) -> (u32, u32) {
        let (w, h) = self.level_size(level);
        (w.div_ceil(INNER), h.div_ceil(INNER))
    }

    /// Whether `tile` exists in this texture.
    pub fn contains(&self, tile: TileId) -> bool {
        let (px, py) = self.pages(tile.level);
        tile.level < self.levels && tile.x < px && tile.y < py
    }

    /// Tiles of all levels from `level` to the coarsest.
    pub fn tiles_from(&self, level: u32) -> u64 {
        (level..self.levels)
            .map(|l| {
                let (x, y) = self.pages(l);
                u64::from(x) * u64::from(y)
            })
            .sum()
    }

    /// The mip level the shaders' `vt_level_for` picks for derivatives `ddx`, `ddy` (uv
    /// per pixel): the floor of log2 of the longer one in texels, within the chain.
    ///
    /// ```
    /// let layout = vramkit::vt::VtLayout::new(4096, 4096)?;
    /// // a 4096-texel image drawn into 1024 pixels: four texels a pixel, level 2
    /// assert_eq!(layout.level_for([1.0 / 1024.0, 0.0], [0.0, 1.0 / 1024.0]), 2);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn level_for(&self, ddx: [f32; 2], ddy: [f32; 2]) -> u32 {
        let (w, h) = (self.width as f32, self.height as f32);
        let len = |d: [f32; 2]| ((d[0] * w).powi(2) + (d[1] * h).powi(2)).sqrt();
        let lod = len(ddx).max(len(ddy)).max(1e-12).log2().floor();
        lod.clamp(0.0, (self.levels - 1) as f32) as u32
    }

    /// Every page of `level` that a view of the uv rectangle `min..max` touches (clamped
    /// to the image), row by row: what a view at rest will ask for, to
    /// [`prefetch`](super::VirtualTexture::prefetch) before the feedback finds it.
    ///
    /// ```
    /// let layout = vramkit::vt::VtLayout::new(4096, 4096)?;
    /// let all = layout.pages_covering(0, [0.0, 0.0], [1.0, 1.0]);
    /// let (x, y) = layout.pages(0);
    /// assert_eq!(all.len() as u32, x * y);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn pages_covering(&self, level: u32, min: [f32; 2], max: [f32; 2]) -> Vec<TileId> {
        let level = level.min(self.levels - 1);
        let a = self.page_at(level, min);
        let b = self.page_at(level, max);
        let mut out = Vec::with_capacity(((b.x - a.x + 1) * (b.y - a.y + 1)) as usize);
        for y in a.y..=b.y {
            for x in a.x..=b.x {
                out.push(TileId::new(level, x, y));
            }
        }
        out
    }

    /// The page of `level` that holds virtual coordinate `uv` (0..1 on each side).
    pub fn page_at(&self, level: u32, uv: [f32; 2]) -> TileId {
        let (w, h) = self.level_size(level);
        let (px, py) = self.pages(level);
        let page = |t: f32, n: u32, pages: u32| {
            ((t.clamp(0.0, 1.0) * n as f32 / INNER as f32) as u32).min(pages - 1)
        };
        TileId::new(level, page(uv[0], w, px), page(uv[1], h, py))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_layouts_end_at_one_page() {
        for t in [
            TileId::new(0, 0, 0),
            TileId::new(14, 16383, 16383),
            TileId::new(3, 7, 9),
        ] {
            assert_eq!(TileId::from_key(t.key()), Some(t));
            assert_ne!(t.key(), 0);
        }
        assert_eq!(TileId::from_key(0), None);
        let l = VtLayout::new(1 << 20, 1 << 20).unwrap();
        assert_eq!(l.levels, 15);
        assert_eq!(l.pages(0), (8739, 8739));
        assert_eq!(l.pages(14), (1, 1));
        let small = VtLayout::new(100, 7).unwrap();
        assert_eq!((small.levels, small.pages(0)), (1, (1, 1)));
        assert!(VtLayout::new(0, 5).is_err());
        assert!(VtLayout::new(MAX_PAGES * INNER + 1, 5).is_err());
    }
}
