//! `BlockBuffer`: the wgpu buffer behind one arena block, and where it lives.
//!
//! On most GPUs a block is an ordinary wgpu buffer in device memory. On adapters whose
//! device memory the CPU reaches at full speed (a CPU driver such as lavapipe, integrated
//! GPUs sharing system memory) the arena can place blocks in host-visible memory that stays
//! mapped ([`BlockMemory`]); an upload into such a block is then one host `memcpy` (when no
//! GPU work is in flight) instead of a copy into staging followed by a GPU copy.

use crate::gpu::{HostBuffer, HostPlacement};
use crate::Gpu;

/// Where the arena places its blocks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BlockMemory {
    /// Host-visible memory on Vulkan CPU and integrated adapters (where device memory is
    /// system memory), device memory everywhere else. The default.
    #[default]
    Auto,
    /// Always ordinary wgpu buffers in device memory.
    Device,
    /// Host-visible, persistently mapped memory wherever the backend allows (Vulkan),
    /// device-local when such a type exists. On a discrete GPU this is the PCIe BAR, which
    /// the CPU writes slowly, reads very slowly (uncached) and which may be small: meant for
    /// testing and for unified-memory devices that [`Auto`](Self::Auto) does not recognise.
    HostVisible,
}

impl BlockMemory {
    /// Whether blocks should be tried in host-visible memory on `gpu`.
    pub(crate) fn host_visible_on(self, gpu: &Gpu) -> bool {
        match self {
            BlockMemory::Device => false,
            BlockMemory::HostVisible => true,
            BlockMemory::Auto => {
                let info = gpu.info();
                info.backend == wgpu::Backend::Vulkan
                    && matches!(
                        info.device_type,
                        wgpu::DeviceType::Cpu | wgpu::DeviceType::IntegratedGpu
                    )
            }
        }
    }
}

/// One block's buffer.
pub(crate) enum BlockBuffer {
    /// An ordinary wgpu buffer.
    Device(wgpu::Buffer),
    /// Host-visible memory, mapped for the block's life. The host touches it only under
    /// the device's exclusive host access (`Gpu::exclusive_host_access`): one thread at a
    /// time, with no vramkit GPU work in flight or submitted meanwhile.
    Host(HostBuffer),
    /// A dry run's block ([`ArenaConfig::dry_run`](super::ArenaConfig::dry_run)): offsets
    /// and sizes only, no memory behind them. The buffer is a placeholder of
    /// [`VIRTUAL_PLACEHOLDER`] bytes with the pool's usage, so that checks of usage and
    /// identity (`Allocation::buffer`) behave as in a real run; nothing is ever recorded
    /// on it.
    Virtual(wgpu::Buffer),
}

/// Bytes of the placeholder buffer behind each virtual block.
pub(crate) const VIRTUAL_PLACEHOLDER: u64 = 256;

impl BlockBuffer {
    /// A block of `size` bytes with `usage`: host-visible when `host_visible` and the
    /// backend allows, otherwise (or if that fails) an ordinary wgpu buffer. Errors are
    /// wgpu's validation or out-of-memory errors, caught by an error scope.
    /// With `dry`, a [`BlockBuffer::Virtual`] block.
    pub(crate) fn create(
        gpu: &Gpu,
        size: u64,
        usage: wgpu::BufferUsages,
        host_visible: bool,
        dry: bool,
        label: &str,
    ) -> crate::Result<BlockBuffer> {
        if dry {
            return gpu
                .scoped("creating a dry run's placeholder block", || {
                    gpu.device().create_buffer(&wgpu::BufferDescriptor {
                        label: Some(label),
                        size: VIRTUAL_PLACEHOLDER,
                        usage,
                        mapped_at_creation: false,
                    })
                })
                .map(BlockBuffer::Virtual);
        }
        let host = host_visible
            .then(|| HostBuffer::new(gpu, size, usage, HostPlacement::DeviceLocal, label))
            .flatten();
        let block = match host {
            Some(memory) => BlockBuffer::Host(memory),
            None => BlockBuffer::Device(gpu.scoped("creating an arena block", || {
                gpu.device().create_buffer(&wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: false,
                })
            })?),
        };
        // (wgpu creates a silently invalid buffer on a destroyed device: the allocation
        // path asks whether the device is still there once its lock is released.)
        Ok(block)
    }

    /// The wgpu buffer.
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        match self {
            BlockBuffer::Device(b) | BlockBuffer::Virtual(b) => b,
            BlockBuffer::Host(memory) => memory.buffer(),
        }
    }

    /// The mapped memory, for host-visible blocks.
    pub(crate) fn host(&self) -> Option<&HostBuffer> {
        match self {
            BlockBuffer::Device(_) | BlockBuffer::Virtual(_) => None,
            BlockBuffer::Host(memory) => Some(memory),
        }
    }

    /// True for a dry run's block, which has no memory behind it.
    pub(crate) fn is_virtual(&self) -> bool {
        matches!(self, BlockBuffer::Virtual(_))
    }

    /// Destroys the buffer (and with it the mapping).
    pub(crate) fn destroy(&self) {
        self.buffer().destroy();
    }
}
