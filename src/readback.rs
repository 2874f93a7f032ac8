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
