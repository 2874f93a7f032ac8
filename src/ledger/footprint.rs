//! The bytes a texture's texels take: every mip level, array layer and sample, in blocks
//! for block-compressed formats, per plane for the two-plane video formats.
//!
//! This is the texture's *logical* size, the same on every backend; a driver adds
//! alignment and sometimes compression metadata, which wgpu's allocator report shows
//! where the backend has one (the ledger's `untracked` remainder holds the difference).
//! Depth formats whose layout the driver chooses count as wgpu's
//! `TextureFormat::theoretical_memory_footprint` counts them: `Depth24Plus` and
//! `Depth24PlusStencil8` 4 bytes a texel, `Depth32FloatStencil8` 8.

use crate::{Error, Misuse, Result};

/// Bytes of one block (one texel outside the compressed formats) of `format`, or `None`
/// for the two-plane formats and any format this build does not know.
fn block_bytes(format: wgpu::TextureFormat) -> Option<u64> {
    use wgpu::TextureFormat as F;
    if let Some(b) = format.block_copy_size(None) {
        return Some(u64::from(b));
    }
    match format {
        F::Depth24Plus | F::Depth24PlusStencil8 => Some(4),
        F::Depth32FloatStencil8 => Some(8),
        _ => None,
    }
}

/// Bytes of one mip level's one layer, `width` x `height` texels.
fn plane_bytes(format: wgpu::TextureFormat, width: u32, height: u32) -> Option<u64> {
    use wgpu::TextureFormat as F;
    let (w, h) = (u64::from(width), u64::from(height));
    // Full-resolution luma plus two-channel chroma at half resolution each way.
    let chroma = w.div_ceil(2) * h.div_ceil(2) * 2;
    match format {
        F::NV12 => return Some(w * h + chroma),
        F::P010 => return Some(2 * (w * h + chroma)),
        _ => {}
    }
    let (bw, bh) = format.block_dimensions();
    let blocks = w.div_ceil(u64::from(bw)) * h.div_ceil(u64::from(bh));
    Some(blocks * block_bytes(format)?)
}

/// Bytes of a texture as described: the sum over its mip levels of each level's texels
/// (width and height halved per level, never below 1; depth too for 3D textures, array
/// layers kept), times its sample count. An error for a format whose size is unknown.
///
/// ```
/// use wgpu::{Extent3d, TextureDimension, TextureFormat};
/// // 256 x 256 RGBA8 with its full chain of 9 levels: 4/3 of the top level, nearly.
/// let size = Extent3d { width: 256, height: 256, depth_or_array_layers: 1 };
/// let bytes = vramkit::ledger::texture_bytes(size, 9, 1, TextureDimension::D2, TextureFormat::Rgba8Unorm)?;
/// assert_eq!(bytes, 4 * (65536 + 16384 + 4096 + 1024 + 256 + 64 + 16 + 4 + 1));
/// # Ok::<(), vramkit::Error>(())
/// ```
pub fn texture_bytes(
    size: wgpu::Extent3d,
    mip_level_count: u32,
    sample_count: u32,
    dimension: wgpu::TextureDimension,
    format: wgpu::TextureFormat,
) -> Result<u64> {
    let unknown = || {
        Error::misuse(
            Misuse::Shape,
            format!(
                "the ledger has no size for texture format {format:?} ({}x{}x{}, {mip_level_count} levels)",
                size.width, size.height, size.depth_or_array_layers
            ),
            "charge the texture's bytes yourself with Owner::charge_bytes",
        )
    };
    let mut total: u64 = 0;
    for level in 0..mip_level_count.max(1) {
        let w = (size.width >> level).max(1);
        let (h, slices) = match dimension {
            wgpu::TextureDimension::D1 => (1, size.depth_or_array_layers.max(1)),
            wgpu::TextureDimension::D2 => (
                (size.height >> level).max(1),
                size.depth_or_array_layers.max(1),
            ),
            wgpu::TextureDimension::D3 => (
                (size.height >> level).max(1),
                (size.depth_or_array_layers >> level).max(1),
            ),
        };
        let plane = plane_bytes(format, w, h).ok_or_else(unknown)?;
        total += plane * u64::from(slices);
    }
    Ok(total * u64::from(sample_count.max(1)))
}

/// [`texture_bytes`] of a texture wgpu made, from its own description.
pub fn bytes_of(texture: &wgpu::Texture) -> Result<u64> {
    texture_bytes(
        texture.size(),
        texture.mip_level_count(),
        texture.sample_count(),
        texture.dimension(),
        texture.format(),
    )
}
