//! Blocking reads of GPU buffers: the simple path tests, timers and dumps use.
//!
//! This is deliberately the plain way (copy into a fresh `MAP_READ` buffer, map, copy out):
//! it is the reference the faster streaming path is checked against.

use crate::{Error, Gpu, Result};

/// Copies `size` bytes of `buffer` from `offset` into host memory (blocking).
///
/// `offset` and `size` must be multiples of 4 (wgpu's copy alignment); the buffer needs
/// `COPY_SRC`.
pub fn read_buffer(gpu: &Gpu, buffer: &wgpu::Buffer, offset: u64, size: u64) -> Result<Vec<u8>> {
    if !offset.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
        || !size.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
    {
        return Err(Error::misuse(
            crate::Misuse::Alignment,
            format!("read of {size} bytes at offset {offset} is not 4-byte aligned"),
            "read a 4-byte aligned range that covers what you need",
        ));
    }
    if size == 0 {
        return Ok(Vec::new());
    }
    if offset
        .checked_add(size)
        .is_none_or(|end| end > buffer.size())
    {
        return Err(Error::misuse(
            crate::Misuse::Length,
            format!(
                "read of {size} bytes at offset {offset} of a {}-byte buffer",
                buffer.size()
            ),
            "keep offset + size within the buffer",
        ));
    }
    let max = gpu.limits().max_buffer_size;
    if size > max {
        return Err(Error::misuse(
            crate::Misuse::Length,
            format!("read of {size} bytes in one piece (the device's largest buffer is {max})"),
            "read in parts, or use stream::Downloader, which streams in chunks",
        ));
    }
    let staging = gpu.scoped("copying a buffer range for readback", || {
        let staging = gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("vramkit readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = gpu.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
        gpu.submit([encoder.finish()]);
        staging
    })?;
    let data = gpu.map_read(&staging, 0, size);
    staging.destroy();
    data
}

/// Reads a buffer range as `T` elements.
pub fn read_as<T: bytemuck::Pod>(
    gpu: &Gpu,
    buffer: &wgpu::Buffer,
    offset: u64,
    count: usize,
) -> Result<Vec<T>> {
    let size = (count as u64)
        .checked_mul(std::mem::size_of::<T>() as u64)
        .ok_or_else(|| {
            Error::misuse(
                crate::Misuse::Shape,
                format!("a read of {count} elements overflows a 64-bit byte count"),
                "read fewer elements",
            )
        })?;
    let bytes = read_buffer(gpu, buffer, offset, size)?;
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}

/// Reads mip level `level` of layer 0 of a 2D `texture` into host memory in tight rows of
/// blocks (blocking), as [`Uploader::upload_texture`](crate::stream::Uploader::upload_texture)
/// takes them. The texture needs `COPY_SRC` and a format copies can read whole (not depth
/// or stencil of the combined formats, not multi-planar).
///
/// ```no_run
/// # let gpu = vramkit::Gpu::headless()?;
/// # let texture: wgpu::Texture = unimplemented!();
/// let texels = vramkit::readback::read_texture_level(&gpu, &texture, 0)?;
/// # Ok::<(), vramkit::Error>(())
/// ```
pub fn read_texture_level(gpu: &Gpu, texture: &wgpu::Texture, level: u32) -> Result<Vec<u8>> {
    let format = texture.format();
    let block = format.block_copy_size(Some(wgpu::TextureAspect::All));
    let (Some(block), true) = (
        block,
        texture.usage().contains(wgpu::TextureUsages::COPY_SRC),
    ) else {
        return Err(Error::misuse(
            crate::Misuse::Usage,
            format!(
                "a readback of a {format:?} texture with usage {:?}",
                texture.usage()
            ),
            "read textures made with COPY_SRC, of a format copies read whole",
        ));
    };
    if level >= texture.mip_level_count() {
        return Err(Error::misuse(
            crate::Misuse::Length,
            format!(
                "a readback of level {level} of a texture with {} levels",
                texture.mip_level_count()
            ),
            "ask for a level below mip_level_count()",
        ));
    }
    let (bw, bh) = format.block_dimensions();
    let w = (texture.width() >> level).max(1);
    let h = (texture.height() >> level).max(1);
    // A copy covers whole blocks: the level's size rounded up to them (the physical size).
    let (cw, ch) = (w.next_multiple_of(bw), h.next_multiple_of(bh));
    let row = (cw / bw) * block;
    let rows = ch / bh;
    let pitch = row.next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
    let size = u64::from(pitch) * u64::from(rows);
    let padded = gpu.scoped("copying a texture level for readback", || {
        let staging = gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("vramkit texture readback"),
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut encoder = gpu.device().create_command_encoder(&Default::default());
        encoder.copy_texture_to_buffer(
            wgpu::TexelCopyTextureInfo {
                texture,
                mip_level: level,
                origin: wgpu::Origin3d::ZERO,
                aspect: wgpu::TextureAspect::All,
            },
            wgpu::TexelCopyBufferInfo {
                buffer: &staging,
                layout: wgpu::TexelCopyBufferLayout {
                    offset: 0,
                    bytes_per_row: Some(pitch),
                    rows_per_image: Some(rows),
                },
            },
            wgpu::Extent3d {
                width: cw,
                height: ch,
                depth_or_array_layers: 1,
            },
        );
        gpu.submit([encoder.finish()]);
        staging
    })?;
    let data = gpu.map_read(&padded, 0, size);
    padded.destroy();
    Ok(data?
        .chunks(pitch as usize)
        .flat_map(|r| r[..row as usize].iter().copied())
        .collect())
}
