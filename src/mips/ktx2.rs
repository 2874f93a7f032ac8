//! [`Ktx2Mips`]: the levels of a KTX2 file (read with the `ktx2` crate) as a
//! [`MipSource`], without copying them until a level is asked for.
//!
//! Supported: 2D textures (one layer, one face) of the uncompressed 8-bit, half- and
//! single-float RGBA formats and the BC formats, with no supercompression. Anything else
//! is a typed error that names what the file holds: Basis Universal and zstd-compressed
//! files need a transcoder first, and the BC formats need the device's
//! `TEXTURE_COMPRESSION_BC` (which creating the texture checks).

use std::ops::Range;
use std::sync::Arc;

use super::source::{full_chain, level_bytes, missing_level};
use super::MipSource;
use crate::{Error, Misuse, Result};

/// A KTX2 file's levels (see the module docs of `mips::ktx2`).
///
/// ```no_run
/// let mips = vramkit::mips::Ktx2Mips::open("rock.ktx2")?;
/// # Ok::<(), vramkit::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Ktx2Mips {
    data: Arc<[u8]>,
    format: wgpu::TextureFormat,
    size: (u32, u32),
    /// Byte ranges of the levels in `data`, finest first.
    levels: Vec<Range<usize>>,
}

/// wgpu's format for a KTX2 `VkFormat` value, where vramkit streams it.
fn wgpu_format(vk: u32) -> Option<wgpu::TextureFormat> {
    use wgpu::TextureFormat as F;
    Some(match vk {
        9 => F::R8Unorm,
        16 => F::Rg8Unorm,
        37 => F::Rgba8Unorm,
        43 => F::Rgba8UnormSrgb,
        44 => F::Bgra8Unorm,
        50 => F::Bgra8UnormSrgb,
        97 => F::Rgba16Float,
        109 => F::Rgba32Float,
        133 => F::Bc1RgbaUnorm,
        134 => F::Bc1RgbaUnormSrgb,
        135 => F::Bc2RgbaUnorm,
        136 => F::Bc2RgbaUnormSrgb,
        137 => F::Bc3RgbaUnorm,
        138 => F::Bc3RgbaUnormSrgb,
        139 => F::Bc4RUnorm,
        140 => F::Bc4RSnorm,
        141 => F::Bc5RgUnorm,
        142 => F::Bc5RgSnorm,
        143 => F::Bc6hRgbUfloat,
        144 => F::Bc6hRgbFloat,
        145 => F::Bc7RgbaUnorm,
        146 => F::Bc7RgbaUnormSrgb,
        _ => return None,
    })
}

fn refused(what: String, fix: &str) -> Error {
    Error::misuse(Misuse::Shape, what, fix)
}

impl Ktx2Mips {
    /// Reads the KTX2 file at `path` (whole, into memory).
    pub fn open(path: impl AsRef<std::path::Path>) -> Result<Ktx2Mips> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|e| Error::Io {
            during: format!("reading the KTX2 file {}", path.display()),
            source: e,
        })?;
        Self::from_bytes(bytes)
    }

    /// Parses a KTX2 file held in memory; an error (nothing kept) for a malformed file or
    /// one the module docs do not cover.
    pub fn from_bytes(bytes: impl Into<Arc<[u8]>>) -> Result<Ktx2Mips> {
        let data: Arc<[u8]> = bytes.into();
        let reader = ktx2::Reader::new(&data[..]).map_err(|e| {
            refused(
                format!("not a KTX2 file vramkit can read: {e}"),
                "give a KTX2 file (the ktx2 crate parses it)",
            )
        })?;
        let h = reader.header();
        if let Some(scheme) = h.supercompression_scheme {
            return Err(refused(
                format!("a KTX2 file supercompressed with {scheme:?}"),
                "decompress or transcode it first (ktx create without --zstd / --encode)",
            ));
        }
        if h.pixel_depth > 1 || h.layer_count > 1 || h.face_count != 1 || h.pixel_height == 0 {
            return Err(refused(
                format!(
                    "a KTX2 file of {}x{}x{}, {} layers, {} faces",
                    h.pixel_width, h.pixel_height, h.pixel_depth, h.layer_count, h.face_count
                ),
                "stream 2D textures of one layer and one face",
            ));
        }
        let vk = h.format.map_or(0, |f| f.value());
        let format = wgpu_format(vk).ok_or_else(|| {
            refused(
                format!("a KTX2 file of VkFormat {vk} ({:?})", h.format),
                "use RGBA8, BGRA8, R8, RG8, RGBA16F, RGBA32F or a BC format",
            )
        })?;
        let size = (h.pixel_width, h.pixel_height);
        let base = data.as_ptr() as usize;
        let mut levels = Vec::new();
        for (l, level) in reader.levels().enumerate() {
            let want = level_bytes(format, size, l as u32)?;
            if level.data.len() as u64 != want {
                return Err(refused(
                    format!(
                        "level {l} of a {}x{} {format:?} KTX2 file holds {} bytes",
                        size.0,
                        size.1,
                        level.data.len()
                    ),
                    &format!("a level of that size holds {want} bytes: check the file"),
                ));
            }
            let start = level.data.as_ptr() as usize - base;
            levels.push(start..start + level.data.len());
        }
        let full = full_chain(size);
        if levels.is_empty() || levels.len() as u32 > full {
            return Err(refused(
                format!(
                    "a {}x{} KTX2 file with {} levels",
                    size.0,
                    size.1,
                    levels.len()
                ),
                "give between one level and the full chain",
            ));
        }
        drop(reader);
        Ok(Ktx2Mips {
            data,
            format,
            size,
            levels,
        })
    }
}

impl MipSource for Ktx2Mips {
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
        let range = self
            .levels
            .get(level as usize)
            .ok_or_else(|| missing_level("a KTX2 file", level, self.levels.len()))?;
        Ok(self.data[range.clone()].to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A KTX2 file of `levels` (finest first) of a `size` texture of VkFormat `vk`.
    fn ktx2_file(vk: u32, size: (u32, u32), levels: &[Vec<u8>]) -> Vec<u8> {
        let index_end = 80 + 24 * levels.len();
        let dfd_offset = index_end;
        let dfd_len = 4usize;
        let mut at = (dfd_offset + dfd_len).next_multiple_of(16);
        let mut out = Vec::new();
        out.extend_from_slice(&[
            0xAB, 0x4B, 0x54, 0x58, 0x20, 0x32, 0x30, 0xBB, 0x0D, 0x0A, 0x1A, 0x0A,
        ]);
        for v in [vk, 1, size.0, size.1, 0, 0, 1, levels.len() as u32, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [dfd_offset as u32, dfd_len as u32, 0, 0] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&0u64.to_le_bytes());
        out.extend_from_slice(&0u64.to_le_bytes());
        let mut placed = Vec::new();
        for l in levels {
            placed.push(at);
            at = (at + l.len()).next_multiple_of(16);
        }
        for (l, p) in levels.iter().zip(&placed) {
            for v in [*p as u64, l.len() as u64, l.len() as u64] {
                out.extend_from_slice(&v.to_le_bytes());
            }
        }
        out.extend_from_slice(&(dfd_len as u32).to_le_bytes());
        for (l, p) in levels.iter().zip(&placed) {
            out.resize(*p, 0);
            out.extend_from_slice(l);
        }
        out.resize(out.len() + 16, 0);
        out
    }

    #[test]
    fn a_ktx2_files_levels_come_back_as_written_and_bad_files_are_errors() {
        let levels: Vec<Vec<u8>> = (0..4u32)
            .map(|l| {
                (0..(8 >> l) * (8 >> l) * 4)
                    .map(|i| (i * 7 + l) as u8)
                    .collect()
            })
            .collect();
        let file = ktx2_file(37, (8, 8), &levels);
        let mips = Ktx2Mips::from_bytes(file.clone()).unwrap();
        assert_eq!(mips.format(), wgpu::TextureFormat::Rgba8Unorm);
        assert_eq!((mips.size(), mips.level_count()), ((8, 8), 4));
        for (l, want) in levels.iter().enumerate() {
            assert_eq!(&mips.read_level(l as u32).unwrap(), want);
        }
        // A format vramkit does not stream, a short level, a truncated file.
        let e = Ktx2Mips::from_bytes(ktx2_file(30, (8, 8), &levels)).unwrap_err();
        assert!(e.to_string().contains("VkFormat 30"), "{e}");
        let mut short = levels.clone();
        short[1].pop();
        let e = Ktx2Mips::from_bytes(ktx2_file(37, (8, 8), &short)).unwrap_err();
        assert!(e.to_string().contains("level 1"), "{e}");
        assert!(Ktx2Mips::from_bytes(file[..100].to_vec()).is_err());
    }
}
