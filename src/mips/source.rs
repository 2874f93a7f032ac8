//! Where a streamed texture's levels come from: [`MipSource`], and [`MemoryMips`], a
//! source of levels already in memory.

use crate::ledger::texture_bytes;
use crate::{Error, Misuse, Result};

/// The levels of one 2D texture, read on demand (a file, a decoder, a generator).
///
/// `read_level` returns level `level`'s texels in tight rows of blocks (no padding): for
/// an RGBA8 level of `w x h`, `w * h * 4` bytes. It is called on one of the streamer's
/// loader threads ([`MipConfig::loader_threads`](super::MipConfig::loader_threads); on the
/// thread that runs [`MipStreamer::update`](super::MipStreamer::update) where there are
/// none), once per level each time the level is loaded.
pub trait MipSource: Send + Sync {
    /// The texel format (uncompressed, or block-compressed where the device has it).
    fn format(&self) -> wgpu::TextureFormat;
    /// Width and height of level 0.
    fn size(&self) -> (u32, u32);
    /// Levels in the full chain.
    fn level_count(&self) -> u32;
    /// Level `level`'s texels (see the trait docs).
    fn read_level(&self, level: u32) -> Result<Vec<u8>>;
}

/// Levels in the full chain of a `size` texture (down to 1 x 1).
pub(crate) fn full_chain((w, h): (u32, u32)) -> u32 {
    32 - w.max(h).leading_zeros()
}

/// The error for a level a source does not have.
pub(crate) fn missing_level(what: &str, level: u32, count: usize) -> Error {
    Error::misuse(
        Misuse::Length,
        format!("level {level} of {what} with {count}"),
        "ask for a level below level_count()",
    )
}

/// Width and height of `level` of a `size` texture.
pub(crate) fn level_size((w, h): (u32, u32), level: u32) -> (u32, u32) {
    ((w >> level).max(1), (h >> level).max(1))
}

/// The extent a copy of a whole level covers: its size rounded up to whole blocks (a 2x2
/// level of a BC texture is one 4x4 block), as wgpu requires of copies at a level's edge.
pub(crate) fn copy_extent(
    format: wgpu::TextureFormat,
    size: (u32, u32),
    level: u32,
) -> wgpu::Extent3d {
    let (w, h) = level_size(size, level);
    let (bw, bh) = format.block_dimensions();
    wgpu::Extent3d {
        width: w.next_multiple_of(bw),
        height: h.next_multiple_of(bh),
        depth_or_array_layers: 1,
    }
}

/// Bytes of one level of a `size` texture of `format`.
pub(crate) fn level_bytes(
    format: wgpu::TextureFormat,
    size: (u32, u32),
    level: u32,
) -> Result<u64> {
    let (w, h) = level_size(size, level);
    texture_bytes(
        wgpu::Extent3d {
            width: w,
            height: h,
            depth_or_array_layers: 1,
        },
        1,
        1,
        wgpu::TextureDimension::D2,
        format,
    )
}

/// Levels held in memory.
///
/// ```
/// // A 4 x 4 RGBA8 texture with its chain: 64, 16 and 4 bytes.
/// let levels = vec![vec![255u8; 64], vec![128u8; 16], vec![0u8; 4]];
/// let mips = vramkit::mips::MemoryMips::new(wgpu::TextureFormat::Rgba8Unorm, (4, 4), levels)?;
/// # Ok::<(), vramkit::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MemoryMips {
    format: wgpu::TextureFormat,
    size: (u32, u32),
    levels: Vec<Vec<u8>>,
}

impl MemoryMips {
    /// The levels of a `size` texture of `format`, finest first; each of the length its
    /// size and format give, or an error naming the first that is not.
    pub fn new(
        format: wgpu::TextureFormat,
        size: (u32, u32),
        levels: Vec<Vec<u8>>,
    ) -> Result<MemoryMips> {
        if levels.is_empty() || size.0 == 0 || size.1 == 0 {
            return Err(Error::misuse(
                Misuse::Shape,
                format!(
                    "a mip source of {}x{} with {} levels",
                    size.0,
                    size.1,
                    levels.len()
                ),
                "give a non-empty size and at least one level",
            ));
        }
        let full = full_chain(size);
        if levels.len() as u32 > full {
            return Err(Error::misuse(
                Misuse::Shape,
                format!(
                    "{} levels for a {}x{} texture, whose full chain has {full}",
                    levels.len(),
                    size.0,
                    size.1
                ),
                "give at most the full chain",
            ));
        }
        for (l, bytes) in levels.iter().enumerate() {
            let want = level_bytes(format, size, l as u32)?;
            if bytes.len() as u64 != want {
                return Err(Error::misuse(
                    Misuse::Length,
                    format!(
                        "level {l} of a {}x{} {format:?} texture has {} bytes",
                        size.0,
                        size.1,
                        bytes.len()
                    ),
                    format!(
                        "give {want} bytes: tight rows of its {:?} texels",
                        level_size(size, l as u32)
                    ),
                ));
            }
        }
        Ok(MemoryMips {
            format,
            size,
            levels,
        })
    }
}

impl MipSource for MemoryMips {
    fn format(&self) -> wgpu::TextureFormat {
        self.format
    }
    fn size(&self) -> (u32, u32) {
        self.size
    }
    fn level_count(&self) -> u32 {
        self.levels.len() as u32
    }
    fn read_level(&self, level: u32) -> Result<Vec<u8>> {
        self.levels
            .get(level as usize)
            .cloned()
            .ok_or_else(|| missing_level("a source", level, self.levels.len()))
    }
}
