//! Blocking reads of GPU buffers: the simple path tests, timers and dumps use.
//!
//! This is deliberately the plain way (copy into a fresh `MAP_READ` buffer, map, copy out):
//! it is the reference the faster streaming path is checked against.

use crate::{Error, Gpu, Result};

/// Maps `size` bytes of a `MAP_READ` buffer at `offset`, copies them out and unmaps.
pub(crate) fn map_read(
    gpu: &Gpu,
    buffer: &wgpu::Buffer,
    offset: u64,
    size: u64,
) -> Result<Vec<u8>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let slice = buffer.slice(offset..offset + size);
    slice.map_async(wgpu::MapMode::Read, move |r| {
        // The receiver lives until after the wait below, so the send cannot fail.
        let _ = tx.send(r);
    });
    gpu.wait_idle()?;
    match rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            return Err(Error::Device {
                during: "mapping a buffer for reading".into(),
                message: e.to_string(),
            })
        }
        Err(_) => {
            return Err(Error::Device {
                during: "mapping a buffer for reading".into(),
                message: "the map callback never ran".into(),
            })
        }
    }
    let data = slice
        .get_mapped_range()
        .map_err(|e| Error::Device {
            during: "reading a mapped buffer".into(),
            message: e.to_string(),
        })?
        .to_vec();
    buffer.unmap();
    Ok(data)
}

/// Copies `size` bytes of `buffer` from `offset` into host memory (blocking).
///
/// `offset` and `size` must be multiples of 4 (wgpu's copy alignment); the buffer needs
/// `COPY_SRC`.
pub fn read_buffer(gpu: &Gpu, buffer: &wgpu::Buffer, offset: u64, size: u64) -> Result<Vec<u8>> {
    if !offset.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
        || !size.is_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT)
    {
        return Err(Error::invalid(
            format!("read of {size} bytes at offset {offset} is not 4-byte aligned"),
            "read a 4-byte aligned range that covers what you need",
        ));
    }
    if size == 0 {
        return Ok(Vec::new());
    }
    let staging = gpu.device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("vramkit readback"),
        size,
        usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    gpu.scoped("copying a buffer range for readback", || {
        let mut encoder = gpu.device().create_command_encoder(&Default::default());
        encoder.copy_buffer_to_buffer(buffer, offset, &staging, 0, size);
        gpu.queue().submit([encoder.finish()]);
    })?;
    let data = map_read(gpu, &staging, 0, size);
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
    let bytes = read_buffer(
        gpu,
        buffer,
        offset,
        (count * std::mem::size_of::<T>()) as u64,
    )?;
    Ok(bytemuck::pod_collect_to_vec(&bytes))
}
