//! Where tiles come from: one small trait, a procedural source of any size for tests,
//! demos and benchmarks, and an adapter for a closure of the user's.

use super::layout::{TileId, VtLayout, BORDER, INNER, TILE, TILE_BYTES};
use crate::{Error, Result};

/// Gives the tiles of a virtual texture. Called from the residency manager's worker
/// threads (hence `Send + Sync`), several tiles at once.
///
/// A tile is [`TILE`] x [`TILE`] texels of [`format`](Self::format) (RGBA8 unless the
/// source says otherwise; see [`texel_bytes`](super::texel_bytes) for the formats),
/// rows top to bottom, *including* a border of
/// [`BORDER`] texels on each side copied from the neighbouring pages (clamped at the edges
/// of the level): texel `(u, v)` of tile `(level, x, y)` is texel
/// `(x * INNER + u - BORDER, y * INNER + v - BORDER)` of that level, clamped to the level.
/// [`tile_from_texels`] builds one from a texel function.
///
/// An error, or bytes of the wrong length, are counted as a failed load
/// ([`VtStats::load_errors`](super::VtStats::load_errors)) and logged; the tile stays
/// unmapped and samples use its nearest resident ancestor.
pub trait TileSource: Send + Sync {
    /// The texture's size and mip chain.
    fn layout(&self) -> VtLayout;

    /// The bytes of `tile`: [`tile_bytes`](super::tile_bytes)`(self.format())`
    /// ([`TILE_BYTES`] for RGBA8).
    fn read_tile(&self, tile: TileId) -> Result<Vec<u8>>;

    /// Writes the bytes of `tile` into `dst` (exactly one tile long). The worker threads
    /// call this to decode straight into the staging memory the GPU copies from, so the
    /// frame thread copies no tile bytes. The default calls
    /// [`read_tile`](Self::read_tile) and copies; override it when the source can write
    /// in place (a decompressor, a generator). Bytes of the wrong length are an error.
    fn read_tile_into(&self, tile: TileId, dst: &mut [u8]) -> Result<()> {
        dst.copy_from_slice(&read_checked(self, tile, dst.len())?);
        Ok(())
    }

    /// The texel format of the tiles: `Rgba8Unorm` unless overridden.
    fn format(&self) -> wgpu::TextureFormat {
        wgpu::TextureFormat::Rgba8Unorm
    }
}

/// Builds a tile (border included) from `texel(x, y)` of its level, clamping coordinates
/// to the level's size.
pub fn tile_from_texels(
    layout: &VtLayout,
    tile: TileId,
    texel: impl FnMut(u32, u32) -> [u8; 4],
) -> Vec<u8> {
    let mut out = vec![0; TILE_BYTES];
    fill_tile_from_texels(layout, tile, &mut out, texel);
    out
}

/// [`tile_from_texels`] into `dst`, one RGBA8 tile ([`TILE_BYTES`]) long.
pub(crate) fn fill_tile_from_texels(
    layout: &VtLayout,
    tile: TileId,
    dst: &mut [u8],
    mut texel: impl FnMut(u32, u32) -> [u8; 4],
) {
    let (w, h) = layout.level_size(tile.level);
    let clamp = |base: u32, t: u32, n: u32| {
        (i64::from(base) + i64::from(t) - i64::from(BORDER)).clamp(0, i64::from(n) - 1) as u32
    };
    for (v, row) in dst.chunks_exact_mut(4 * TILE as usize).enumerate() {
        let y = clamp(tile.y * INNER, v as u32, h);
        for (u, px) in row.chunks_exact_mut(4).enumerate() {
            px.copy_from_slice(&texel(clamp(tile.x * INNER, u as u32, w), y));
        }
    }
}

/// A deterministic procedural texture of any size up to the keys' limit (about 2^20.9
/// texels per side): a colour gradient over the whole texture, blocks of 32 texels with
/// hashed blue, grid lines and a fine checker, so every level and every texel differ. For
/// tests, demos and benchmarks: nothing to store, and [`ProceduralSource::texel`] is the
/// reference.
#[derive(Clone, Copy, Debug)]
pub struct ProceduralSource {
    layout: VtLayout,
}

impl ProceduralSource {
    /// A `width` x `height` procedural texture.
    ///
    /// ```
    /// use vramkit::vt::{ProceduralSource, TileSource, TileId};
    /// let source = ProceduralSource::new(1 << 20, 1 << 20)?;
    /// assert_eq!(source.layout().levels, 15);
    /// let tile = source.read_tile(TileId::new(0, 4000, 123))?;
    /// assert_eq!(tile.len(), vramkit::vt::TILE_BYTES);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn new(width: u32, height: u32) -> Result<ProceduralSource> {
        Ok(ProceduralSource {
            layout: VtLayout::new(width, height)?,
        })
    }

    /// Texel `(x, y)` of `level` (no clamping: the caller stays inside the level).
    pub fn texel(&self, level: u32, x: u32, y: u32) -> [u8; 4] {
        let s = 1u64 << level;
        let gx = (u64::from(x) * s + s / 2) * 255 / u64::from(self.layout.width).max(1);
        let gy = (u64::from(y) * s + s / 2) * 255 / u64::from(self.layout.height).max(1);
        let mut h = (x >> 5).wrapping_mul(0x9E37_79B1) ^ (y >> 5).wrapping_mul(0x85EB_CA77);
        h ^= level.wrapping_mul(0xC2B2_AE3D);
        h ^= h >> 15;
        h = h.wrapping_mul(0x2C1B_3C6D);
        h ^= h >> 12;
        let checker = if (x ^ y) & 4 == 0 { 24 } else { 0 };
        let mut rgb = [
            gx.min(255) as u8,
            gy.min(255) as u8,
            (h & 0xff) as u8 / 2 + 64,
        ];
        for c in &mut rgb {
            *c = c.saturating_add(checker);
            if x.is_multiple_of(32) || y.is_multiple_of(32) {
                *c /= 2;
            }
        }
        [rgb[0], rgb[1], rgb[2], 255]
    }
}

impl TileSource for ProceduralSource {
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

/// The RGBA8 tile `tile` of a source computed texel by texel (`texel(level, x, y)`),
/// checked against `layout`: what [`ProceduralSource`] and
/// [`Mandelbrot`](super::Mandelbrot) give.
pub(crate) fn texel_tile(
    layout: &VtLayout,
    tile: TileId,
    texel: impl Fn(u32, u32, u32) -> [u8; 4],
) -> Result<Vec<u8>> {
    check_tile(layout, tile)?;
    Ok(tile_from_texels(layout, tile, |x, y| {
        texel(tile.level, x, y)
    }))
}

/// [`texel_tile`] into `dst`, which must be one RGBA8 tile long.
pub(crate) fn texel_tile_into(
    layout: &VtLayout,
    tile: TileId,
    dst: &mut [u8],
    texel: impl Fn(u32, u32, u32) -> [u8; 4],
) -> Result<()> {
    check_tile(layout, tile)?;
    check_len(tile, dst.len(), TILE_BYTES)?;
    fill_tile_from_texels(layout, tile, dst, |x, y| texel(tile.level, x, y));
    Ok(())
}

/// Adapts the user's own tile reader (a closure) to [`TileSource`].
///
/// ```
/// use vramkit::vt::{FnSource, TileSource, TileId, VtLayout, TILE_BYTES};
/// let layout = VtLayout::new(4096, 4096)?;
/// let grey = FnSource::new(layout, |_tile: TileId| Ok(vec![128u8; TILE_BYTES]));
/// assert_eq!(grey.read_tile(TileId::new(0, 1, 2))?.len(), TILE_BYTES);
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct FnSource<F> {
    layout: VtLayout,
    read: F,
    format: wgpu::TextureFormat,
}

impl<F> FnSource<F>
where
    F: Fn(TileId) -> Result<Vec<u8>> + Send + Sync,
{
    /// A source of `layout` whose RGBA8 tiles `read` gives.
    pub fn new(layout: VtLayout, read: F) -> FnSource<F> {
        FnSource {
            layout,
            read,
            format: wgpu::TextureFormat::Rgba8Unorm,
        }
    }

    /// The same source giving tiles of `format` (see [`texel_bytes`](super::texel_bytes)).
    pub fn with_format(self, format: wgpu::TextureFormat) -> FnSource<F> {
        FnSource { format, ..self }
    }
}

impl<F> TileSource for FnSource<F>
where
    F: Fn(TileId) -> Result<Vec<u8>> + Send + Sync,
{
    fn layout(&self) -> VtLayout {
        self.layout
    }

    fn read_tile(&self, tile: TileId) -> Result<Vec<u8>> {
        check_tile(&self.layout, tile)?;
        (self.read)(tile)
    }

    fn format(&self) -> wgpu::TextureFormat {
        self.format
    }
}

/// A typed error for a tile outside `layout`.
pub(crate) fn check_tile(layout: &VtLayout, tile: TileId) -> Result<()> {
    if layout.contains(tile) {
        return Ok(());
    }
    let (px, py) = layout.pages(tile.level.min(layout.levels - 1));
    Err(Error::Tile {
        place: tile.to_string(),
        what: format!(
            "outside the texture ({} levels; {px}x{py} pages at level {})",
            layout.levels,
            tile.level.min(layout.levels - 1)
        ),
        hint: "ask for tiles of the source's layout".into(),
    })
}

/// `source.read_tile(tile)`, with bytes of any length but `tile_bytes` a typed error.
pub(crate) fn read_checked<S: TileSource + ?Sized>(
    source: &S,
    tile: TileId,
    tile_bytes: usize,
) -> Result<Vec<u8>> {
    let bytes = source.read_tile(tile)?;
    if bytes.len() != tile_bytes {
        return Err(Error::Tile {
            place: tile.to_string(),
            what: format!(
                "the source gave {} bytes, a tile is {tile_bytes}",
                bytes.len()
            ),
            hint: "return TILE x TILE texels of the source's format, border included".into(),
        });
    }
    Ok(bytes)
}

/// A typed error for a destination that is not one tile long.
pub(crate) fn check_len(tile: TileId, len: usize, tile_bytes: usize) -> Result<()> {
    if len == tile_bytes {
        return Ok(());
    }
    Err(Error::misuse(
        crate::Misuse::Length,
        format!("a {len}-byte destination for tile {tile}"),
        format!("pass exactly one tile, {tile_bytes} bytes"),
    ))
}
