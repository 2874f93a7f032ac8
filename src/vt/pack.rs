//! The tiled pack file: a virtual texture on disk, memory-mapped, one tile per index entry,
//! each optionally LZ4-compressed. Any bytes give a typed error, never a panic or an
//! allocation larger than one tile.
//!
//! Layout (little endian):
//! ```text
//! 0   magic "VRAMKVT1"
//! 8   u32 version (1)      12  u32 width      16  u32 height     20  u32 levels
//! 24  u32 tile (128)       28  u32 border (4) 32  u32 compression (0 none, 1 lz4)
//! 36  u32 texel format (0 Rgba8Unorm, 1 R8Unorm, 2 Rg8Unorm, 3 Rgba8UnormSrgb,
//!     4 R16Float, 5 Rg16Float, 6 Rgba16Float)
//!                          40  u64 tile count 48  u64 index offset 56  u64 data offset
//! index: per tile, level by level, row by row: u64 offset (from the data offset),
//!        u32 stored length, u32 flags (bit 0: LZ4 block)
//! data:  the stored tiles
//! ```

use std::io::Write;
use std::path::Path;

use rayon::prelude::*;

use super::layout::{tile_bytes, TileId, VtLayout, BORDER, TILE};
use super::source::{check_len, check_tile, TileSource};
use crate::{Error, Result};

const MAGIC: &[u8; 8] = b"VRAMKVT1";
const VERSION: u32 = 1;
const HEADER: usize = 64;
const ENTRY: usize = 16;
const LZ4: u32 = 1;
/// Texel formats by their code in the header.
const FORMATS: [wgpu::TextureFormat; 7] = [
    wgpu::TextureFormat::Rgba8Unorm,
    wgpu::TextureFormat::R8Unorm,
    wgpu::TextureFormat::Rg8Unorm,
    wgpu::TextureFormat::Rgba8UnormSrgb,
    wgpu::TextureFormat::R16Float,
    wgpu::TextureFormat::Rg16Float,
    wgpu::TextureFormat::Rgba16Float,
];

/// How tiles are stored in a pack file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// Raw RGBA8 tiles.
    None,
    /// LZ4 blocks (`lz4_flex`), kept raw where compression does not pay.
    Lz4,
}

/// A pack file opened for reading: the [`TileSource`] of a texture stored on disk.
pub struct PackFile {
    map: Bytes,
    layout: VtLayout,
    format: wgpu::TextureFormat,
    tile_bytes: usize,
    /// Index of each level's first tile.
    level_base: Vec<u64>,
    index: usize,
    data: usize,
}

/// A pack's bytes: a read-only map of the file, or bytes in memory.
enum Bytes {
    Map(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Bytes::Map(m) => m,
            Bytes::Owned(v) => v,
        }
    }
}

fn corrupt(place: &str, what: impl Into<String>) -> Error {
    Error::Tile {
        place: format!("pack file {place}"),
        what: what.into(),
        hint: "rebuild the pack (examples/vt_pack.rs) or check that the file is complete".into(),
    }
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(w)
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

impl PackFile {
    /// Opens and checks a pack file: the header, the layout it names, and that the index
    /// lies inside the file. Tiles are checked as they are read.
    pub fn open(path: impl AsRef<Path>) -> Result<PackFile> {
        let path = path.as_ref();
        let io = |e| Error::Io {
            during: format!("opening pack file {}", path.display()),
            source: e,
        };
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; a file changed underneath gives wrong bytes, which
        // the per-tile checks turn into errors, not undefined behaviour of ours.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        PackFile::from_storage(Bytes::Map(map))
    }

    /// A pack held in memory (embedded with `include_bytes!`, downloaded, or fuzzed),
    /// checked as [`open`](Self::open) checks a file.
    ///
    /// ```
    /// assert!(vramkit::vt::PackFile::from_bytes(b"not a pack".to_vec()).is_err());
    /// ```
    pub fn from_bytes(bytes: Vec<u8>) -> Result<PackFile> {
        PackFile::from_storage(Bytes::Owned(bytes))
    }

    fn from_storage(map: Bytes) -> Result<PackFile> {
        let b: &[u8] = &map;
        if b.len() < HEADER {
            return Err(corrupt(
                "header",
                format!("{} bytes, shorter than the 64-byte header", b.len()),
            ));
        }
        if &b[..8] != MAGIC {
            return Err(corrupt("header", "not a vramkit pack (bad magic)"));
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(corrupt(
                "header",
                format!("version {version}, this reader knows {VERSION}"),
            ));
        }
        let layout = VtLayout::new(u32_at(b, 12), u32_at(b, 16))
            .map_err(|e| corrupt("header", e.to_string()))?;
        if u32_at(b, 20) != layout.levels || u32_at(b, 24) != TILE || u32_at(b, 28) != BORDER {
            return Err(corrupt(
                "header",
                format!(
                    "levels {} / tile {} / border {} do not match a {}x{} texture of {TILE}-texel tiles with a {BORDER}-texel border",
                    u32_at(b, 20), u32_at(b, 24), u32_at(b, 28), layout.width, layout.height
                ),
            ));
        }
        let Some(&format) = FORMATS.get(u32_at(b, 36) as usize) else {
            return Err(corrupt(
                "header",
                format!("unknown texel format code {}", u32_at(b, 36)),
            ));
        };
        let count = u64_at(b, 40);
        let index = u64_at(b, 48);
        let data = u64_at(b, 56);
        if count != layout.tiles_from(0) {
            return Err(corrupt(
                "index",
                format!("{count} tiles, the layout has {}", layout.tiles_from(0)),
            ));
        }
        let index_end = count
            .checked_mul(ENTRY as u64)
            .and_then(|n| n.checked_add(index));
        match index_end {
            Some(end) if index >= HEADER as u64 && end <= data && data <= b.len() as u64 => {}
            _ => {
                return Err(corrupt(
                    "index",
                    format!(
                        "index at {index} ({count} entries) and data at {data} do not fit {} bytes",
                        b.len()
                    ),
                ))
            }
        }
        let mut level_base = Vec::with_capacity(layout.levels as usize);
        let mut base = 0;
        for l in 0..layout.levels {
            level_base.push(base);
            let (x, y) = layout.pages(l);
            base += u64::from(x) * u64::from(y);
        }
        Ok(PackFile {
            map,
            layout,
            format,
            tile_bytes: tile_bytes(format).unwrap_or(0),
            level_base,
            index: index as usize,
            data: data as usize,
        })
    }
}

impl TileSource for PackFile {
    fn layout(&self) -> VtLayout {
        self.layout
    }

    fn format(&self) -> wgpu::TextureFormat {
        self.format
    }

    fn read_tile(&self, tile: TileId) -> Result<Vec<u8>> {
        let mut bytes = vec![0; self.tile_bytes];
        self.read_tile_into(tile, &mut bytes)?;
        Ok(bytes)
    }

    fn read_tile_into(&self, tile: TileId, dst: &mut [u8]) -> Result<()> {
        check_tile(&self.layout, tile)?;
        check_len(tile, dst.len(), self.tile_bytes)?;
        let (px, _) = self.layout.pages(tile.level);
        let n = self.level_base[tile.level as usize]
            + u64::from(tile.y) * u64::from(px)
            + u64::from(tile.x);
        let at = self.index + n as usize * ENTRY;
        let b: &[u8] = &self.map;
        let (offset, len, flags) = (
            u64_at(b, at),
            u32_at(b, at + 8) as usize,
            u32_at(b, at + 12),
        );
        let place = format!("{tile}");
        let start = offset
            .checked_add(self.data as u64)
            .filter(|&s| s <= b.len() as u64);
        let Some(stored) = start.and_then(|s| b.get(s as usize..(s as usize).checked_add(len)?))
        else {
            return Err(corrupt(
                &place,
                format!("{len} bytes at {offset} run past the end of the file"),
            ));
        };
        let written = if flags & LZ4 != 0 {
            lz4_flex::block::decompress_into(stored, dst)
                .map_err(|e| corrupt(&place, format!("LZ4 data is corrupt: {e}")))?
        } else {
            if let Some(d) = dst.get_mut(..stored.len()) {
                d.copy_from_slice(stored);
            }
            stored.len()
        };
        if written != self.tile_bytes {
            return Err(corrupt(
                &place,
                format!("{written} bytes, a tile is {}", self.tile_bytes),
            ));
        }
        Ok(())
    }
}

/// Writes every tile of `source` into a pack file at `path` (tiles are read and
/// compressed in parallel, one level at a time). Returns the file's size in bytes.
///
/// ```no_run
/// use vramkit::vt::{write_pack, Compression, ImageSource, PackFile, TileSource};
/// let image = ImageSource::from_rgba8(1000, 600, vec![200u8; 1000 * 600 * 4])?;
/// write_pack("image.vtpack", &image, Compression::Lz4)?;
/// let pack = PackFile::open("image.vtpack")?;
/// assert_eq!(pack.layout(), image.layout());
/// # Ok::<(), vramkit::Error>(())
/// ```
pub fn write_pack(
    path: impl AsRef<Path>,
    source: &dyn TileSource,
    compression: Compression,
) -> Result<u64> {
    let path = path.as_ref();
    let io = |e| Error::Io {
        during: format!("writing pack file {}", path.display()),
        source: e,
    };
    let layout = source.layout();
    let count = layout.tiles_from(0);
    let data_offset = HEADER as u64 + count * ENTRY as u64;
    let mut header = Vec::with_capacity(HEADER);
    header.extend_from_slice(MAGIC);
    for v in [
        VERSION,
        layout.width,
        layout.height,
        layout.levels,
        TILE,
        BORDER,
    ] {
        header.extend_from_slice(&v.to_le_bytes());
    }
    let format = source.format();
    let (Some(code), Some(size)) = (
        FORMATS.iter().position(|&f| f == format),
        tile_bytes(format),
    ) else {
        return Err(Error::invalid(
            format!("a pack of {format:?} tiles"),
            "packs hold the tile formats of vt::texel_bytes",
        ));
    };
    header.extend_from_slice(&u32::from(compression == Compression::Lz4).to_le_bytes());
    header.extend_from_slice(&(code as u32).to_le_bytes());
    for v in [count, HEADER as u64, data_offset] {
        header.extend_from_slice(&v.to_le_bytes());
    }
    let mut index = Vec::with_capacity((count as usize) * ENTRY);
    let mut data: Vec<Vec<u8>> = Vec::new();
    let mut offset = 0u64;
    for level in 0..layout.levels {
        let (px, py) = layout.pages(level);
        let tiles: Vec<TileId> = (0..py)
            .flat_map(|y| (0..px).map(move |x| TileId::new(level, x, y)))
            .collect();
        let stored: Vec<(Vec<u8>, u32)> = tiles
            .par_iter()
            .map(|&t| {
                let raw = source.read_tile(t)?;
                if raw.len() != size {
                    return Err(corrupt(
                        &t.to_string(),
                        "the source gave a tile of the wrong size",
                    ));
                }
                if compression == Compression::Lz4 {
                    let packed = lz4_flex::block::compress(&raw);
                    if packed.len() < raw.len() {
                        return Ok((packed, LZ4));
                    }
                }
                Ok((raw, 0))
            })
            .collect::<Result<_>>()?;
        for (bytes, flags) in stored {
            index.extend_from_slice(&offset.to_le_bytes());
            index.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            index.extend_from_slice(&flags.to_le_bytes());
            offset += bytes.len() as u64;
            data.push(bytes);
        }
    }
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
    out.write_all(&header).map_err(io)?;
    out.write_all(&index).map_err(io)?;
    for d in &data {
        out.write_all(d).map_err(io)?;
    }
    out.flush().map_err(io)?;
    Ok(data_offset + offset)
}

/// An ordinary RGBA8 image held in memory with its mip chain (2x2 box filter), as a
/// [`TileSource`]: what [`write_pack`] turns into a pack file.
pub struct ImageSource {
    layout: VtLayout,
    /// Level by level, tightly packed RGBA8 rows.
    levels: Vec<Vec<u8>>,
}

impl ImageSource {
    /// An image of `width` x `height` RGBA8 texels (`rgba.len() == width * height * 4`).
    pub fn from_rgba8(width: u32, height: u32, rgba: Vec<u8>) -> Result<ImageSource> {
        let layout = VtLayout::new(width, height)?;
        if rgba.len() as u64 != u64::from(width) * u64::from(height) * 4 {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!("{} bytes for a {width}x{height} RGBA8 image", rgba.len()),
                "pass width * height * 4 bytes, rows top to bottom",
            ));
        }
        let mut levels = vec![rgba];
        for l in 1..layout.levels {
            let (pw, ph) = layout.level_size(l - 1);
            let (w, h) = layout.level_size(l);
            let prev = &levels[l as usize - 1];
            let mut next = vec![0u8; (w * h * 4) as usize];
            for y in 0..h {
                for x in 0..w {
                    for c in 0..4 {
                        let at = |xx: u32, yy: u32| {
                            u32::from(
                                prev[((yy.min(ph - 1) * pw + xx.min(pw - 1)) * 4 + c) as usize],
                            )
                        };
                        let sum = at(2 * x, 2 * y)
                            + at(2 * x + 1, 2 * y)
                            + at(2 * x, 2 * y + 1)
                            + at(2 * x + 1, 2 * y + 1);
                        next[((y * w + x) * 4 + c) as usize] = ((sum + 2) / 4) as u8;
                    }
                }
            }
            levels.push(next);
        }
        Ok(ImageSource { layout, levels })
    }

    /// Texel `(x, y)` of `level`.
    pub fn texel(&self, level: u32, x: u32, y: u32) -> [u8; 4] {
        let (w, _) = self.layout.level_size(level);
        let at = ((y * w + x) * 4) as usize;
        let l = &self.levels[level as usize];
        [l[at], l[at + 1], l[at + 2], l[at + 3]]
    }
}

impl TileSource for ImageSource {
    fn layout(&self) -> VtLayout {
        self.layout
    }

    fn read_tile(&self, tile: TileId) -> Result<Vec<u8>> {
        check_tile(&self.layout, tile)?;
        Ok(super::source::tile_from_texels(
            &self.layout,
            tile,
            |x, y| self.texel(tile.level, x, y),
        ))
    }
}
