//! `HostBuffer`: a buffer in host-visible memory that stays mapped for its whole life.
//!
//! Two uses. Staging ([`HostPlacement::System`]): plain host memory that the GPU copies from
//! and into directly, the Vulkan counterpart of CUDA's pinned memory. Arena blocks on
//! adapters whose device memory the CPU reaches at full speed (a CPU driver such as
//! lavapipe, integrated GPUs: [`HostPlacement::DeviceLocal`]): an upload into such a
//! block can be one host `memcpy` instead of a copy into staging and a GPU copy out of it.
//!
//! Why not a wgpu `MAP_WRITE` buffer: wgpu-hal asks gpu-allocator for `CpuToGpu` memory,
//! which prefers `DEVICE_LOCAL | HOST_VISIBLE` (the PCIe BAR on a discrete GPU with
//! resizable BAR). Filling such a buffer means the CPU writes every byte across PCIe, at
//! about half the link's rate (BENCHMARKS.md, Streaming). In host memory the fill
//! is a host `memcpy` and the GPU's copy engine pulls the bytes at link speed. wgpu has no
//! way to ask for that memory, so on Vulkan we allocate it through wgpu-hal and hand the
//! buffer to wgpu; elsewhere (and where the Vulkan calls fail) staging falls back to wgpu
//! mapped buffers.
//!
//! The memory stays mapped for the buffer's whole life and is `HOST_COHERENT`: no flush or
//! invalidate is needed, but nothing stops the CPU and the GPU from touching it at the same
//! time either. Every access is therefore `unsafe`, with one rule: the CPU touches the
//! bytes only while no submitted GPU work uses them (the staging rings hand a buffer back
//! to the CPU from the queue's "work done" callback of its last submission; arena blocks
//! are touched only while the queue is idle).

// Without a Vulkan backend (`build.rs`) only the fallback of `HostBuffer::new` is reached:
// nothing constructs a `HostBuffer`.
#![cfg_attr(not(vulkan_hal), allow(dead_code))]

use std::ops::Range;
use std::ptr::NonNull;

#[cfg(vulkan_hal)]
use ash::vk;

use crate::Gpu;

/// Which host-visible memory a [`HostBuffer`] prefers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostPlacement {
    /// System memory (not device-local), host-cached where offered: staging.
    System,
    /// Device-local memory that is also host-visible: arena blocks on unified-memory
    /// adapters. Falls back to any host-visible type.
    DeviceLocal,
}

/// The Vulkan buffer and memory behind a [`HostBuffer`], destroyed and freed when the last
/// of its two owners lets go: the `HostBuffer` (vramkit's code may touch the mapped bytes
/// while it lives) and wgpu-hal's buffer object (the GPU may use the buffer until wgpu
/// drops it, after the work that uses it). wgpu destroys every buffer of a lost device at
/// once (`release_gpu_resources`); memory it owned would be unmapped under a thread that
/// is copying into it, so wgpu owns none of it.
#[cfg(vulkan_hal)]
struct Backing {
    device: ash::Device,
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// The host allocation an imported buffer's memory is (`HostBuffer::import`): freed
    /// after the Vulkan memory that aliases it (fields drop after `Drop::drop`).
    _host: Option<std::sync::Arc<HostMemory>>,
}

/// Plain host memory, aligned for import into several devices
/// ([`HostBuffer::import`]): one allocation that each GPU copies from and into directly.
pub(crate) struct HostMemory {
    ptr: NonNull<u8>,
    layout: std::alloc::Layout,
}

// SAFETY: plain owned memory; the access rule of the module docs governs its bytes.
unsafe impl Send for HostMemory {}
// SAFETY: as above.
unsafe impl Sync for HostMemory {}

impl HostMemory {
    /// `len` bytes (rounded up to `align`) aligned to `align` (a power of two), zeroed;
    /// `None` if the host refuses.
    pub(crate) fn new(len: u64, align: u64) -> Option<HostMemory> {
        let align = usize::try_from(align.max(64)).ok()?;
        let len = usize::try_from(len.max(1))
            .ok()?
            .checked_next_multiple_of(align)?;
        let layout = std::alloc::Layout::from_size_align(len, align).ok()?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some(HostMemory { ptr, layout })
    }

    /// Its length in bytes.
    pub(crate) fn len(&self) -> u64 {
        self.layout.size() as u64
    }
}

impl Drop for HostMemory {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; every buffer importing it holds an
        // `Arc` of it, so no device memory aliases it any more.
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

#[cfg(vulkan_hal)]
impl Drop for Backing {
    fn drop(&mut self) {
        // SAFETY: both handles were made on `device` by `HostBuffer::new` and are used by
        // nobody now: wgpu-hal has dropped its buffer object (its drop callback held the
        // other reference) and the `HostBuffer` is gone. The device outlives both owners:
        // the `HostBuffer` drops this before its wgpu buffer, which holds the device, and
        // wgpu-hal drops its buffer objects before the device.
        unsafe {
            self.device.destroy_buffer(self.buffer, None);
            self.device.free_memory(self.memory, None);
        }
    }
}

/// A buffer in host-visible, host-coherent memory, mapped for its whole life. See the
/// module docs for the access rule.
pub(crate) struct HostBuffer {
    /// Declared before `buffer`: dropped first, while the wgpu buffer still holds the
    /// device.
    #[cfg(vulkan_hal)]
    _backing: std::sync::Arc<Backing>,
    buffer: wgpu::Buffer,
    ptr: NonNull<u8>,
    len: usize,
    /// The memory is host-cached: CPU reads run at memory speed. Uncached (write-combined)
    /// memory takes writes well but reads very slowly.
    cached: bool,
}

// SAFETY: the mapping is plain memory kept alive by this value (its `Backing` is freed only
// once this value and wgpu's buffer object are both gone, so neither a destroy nor a lost
// device unmaps it under a thread touching it); the access rule in the
// module docs, which every `unsafe` accessor states, keeps CPU and GPU accesses apart, and
// callers keep concurrent CPU accesses to disjoint bytes.
unsafe impl Send for HostBuffer {}
// SAFETY: as above.
unsafe impl Sync for HostBuffer {}

impl std::fmt::Debug for HostBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostBuffer")
            .field("len", &self.len)
            .finish()
    }
}

impl HostBuffer {
    /// A new buffer of `size` bytes (a non-zero multiple of 4) with `usage`, or `None`
    /// where the device is not Vulkan, has no host-visible coherent memory type for
    /// buffers, `usage` has flags a hal buffer cannot serve (`MAP_*`: wgpu would map it
    /// itself), or a Vulkan call fails (out of host memory, say): callers then create an
    /// ordinary wgpu buffer. The reason is logged at debug level.
    pub(crate) fn new(
        gpu: &Gpu,
        size: u64,
        usage: wgpu::BufferUsages,
        placement: HostPlacement,
        label: &str,
    ) -> Option<HostBuffer> {
        #[cfg(vulkan_hal)]
        return Self::new_vulkan(gpu, size, usage, placement, label);
        // No Vulkan backend in this build (Metal, WebGPU): callers take wgpu's buffers.
        #[cfg(not(vulkan_hal))]
        {
            let _ = (gpu, size, usage, placement, label);
            None
        }
    }

    /// [`new`](Self::new) through wgpu-hal's Vulkan backend.
    #[cfg(vulkan_hal)]
    fn new_vulkan(
        gpu: &Gpu,
        size: u64,
        usage: wgpu::BufferUsages,
        placement: HostPlacement,
        label: &str,
    ) -> Option<HostBuffer> {
        if size == 0 || !size.is_multiple_of(4) || size > gpu.limits().max_buffer_size {
            return None;
        }
        let vk_usage = vk_buffer_usage(usage)?;
        let len = usize::try_from(size).ok()?;
        // SAFETY: the handles are used as wgpu-hal's docs allow: a buffer and its memory
        // are created on the device, bound and mapped, and owned by a `Backing` shared by
        // the `HostBuffer` and wgpu-hal's buffer object (`from_raw_externally_owned`: wgpu
        // never destroys them). Every failure path destroys what was created so far. The
        // hal guard is dropped before the buffer is handed to wgpu.
        let (backing, raw_buffer, ptr, flags) = unsafe {
            let hal = gpu.device().as_hal::<wgpu::hal::api::Vulkan>()?;
            let device = hal.raw_device();
            let instance = hal.shared_instance().raw_instance();
            let props = instance.get_physical_device_memory_properties(hal.raw_physical_device());
            let info = vk::BufferCreateInfo::default()
                .size(size)
                .usage(vk_usage)
                .sharing_mode(vk::SharingMode::EXCLUSIVE);
            let raw_buffer = device
                .create_buffer(&info, None)
                .map_err(|e| log::debug!("host buffer {label}: vkCreateBuffer failed: {e}"))
                .ok()?;
            let requirements = device.get_buffer_memory_requirements(raw_buffer);
            let Some((type_index, flags)) =
                pick_memory_type(&props, requirements.memory_type_bits, placement)
            else {
                log::debug!(
                    "host buffer {label}: no host-visible coherent memory type for buffers"
                );
                device.destroy_buffer(raw_buffer, None);
                return None;
            };
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(requirements.size)
                .memory_type_index(type_index);
            let memory = allocate_bound(device, raw_buffer, &alloc, label)?;
            let mapped = device.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty());
            let ptr = match mapped.map(|p| NonNull::new(p.cast::<u8>())) {
                Ok(Some(p)) => p,
                failed => {
                    log::debug!("host buffer {label}: mapping failed: {failed:?}");
                    device.free_memory(memory, None);
                    device.destroy_buffer(raw_buffer, None);
                    return None;
                }
            };
            let backing = std::sync::Arc::new(Backing {
                device: device.clone(),
                buffer: raw_buffer,
                memory,
                _host: None,
            });
            (backing, raw_buffer, ptr, flags)
        };
        // SAFETY: `raw_buffer` is bound to memory of at least `size` bytes from offset 0,
        // both made on this device and used nowhere else.
        let buffer = unsafe { wrap(gpu, &backing, raw_buffer, size, usage, label) };
        log::debug!(
            "host buffer {label}: {size} bytes in {} memory",
            if !flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL) {
                "system"
            } else {
                "device-local, host-visible"
            }
        );
        Some(HostBuffer {
            _backing: backing,
            buffer,
            ptr,
            len,
            cached: flags.contains(vk::MemoryPropertyFlags::HOST_CACHED),
        })
    }

    /// A buffer on `gpu` whose memory is `host` itself (`VK_EXT_external_memory_host`):
    /// several devices import the same [`HostMemory`], and what one GPU copies into it the
    /// others copy out of it, with no copy on the host. `None` where the device was not
    /// opened with the extension, `host` is not aligned to what it requires, or a Vulkan
    /// call fails (the reason is logged at debug level); callers then copy on the host
    /// between two [`HostBuffer`]s.
    pub(crate) fn import(
        gpu: &Gpu,
        host: &std::sync::Arc<HostMemory>,
        usage: wgpu::BufferUsages,
        label: &str,
    ) -> Option<HostBuffer> {
        #[cfg(vulkan_hal)]
        return Self::import_vulkan(gpu, host, usage, label);
        #[cfg(not(vulkan_hal))]
        {
            let _ = (gpu, host, usage, label);
            None
        }
    }

    #[cfg(vulkan_hal)]
    fn import_vulkan(
        gpu: &Gpu,
        host: &std::sync::Arc<HostMemory>,
        usage: wgpu::BufferUsages,
        label: &str,
    ) -> Option<HostBuffer> {
        let align = gpu.host_import_alignment()?;
        let size = host.len();
        let addr = host.ptr.as_ptr() as u64;
        if !addr.is_multiple_of(align)
            || !size.is_multiple_of(align)
            || size > gpu.limits().max_buffer_size
        {
            log::debug!("host import {label}: {size} bytes at {addr:#x} not aligned to {align}");
            return None;
        }
        let vk_usage = vk_buffer_usage(usage)?;
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        // SAFETY: as in `new_vulkan`; the memory imported is `host`'s, which the `Backing`
        // keeps alive until the Vulkan memory aliasing it is freed.
        let (backing, raw_buffer) = unsafe {
            let hal = gpu.device().as_hal::<wgpu::hal::api::Vulkan>()?;
            let device = hal.raw_device();
            let instance = hal.shared_instance().raw_instance();
            let external = ash::ext::external_memory_host::Device::new(instance, device);
            let mut pointer_props = vk::MemoryHostPointerPropertiesEXT::default();
            let queried = (external.fp().get_memory_host_pointer_properties_ext)(
                device.handle(),
                handle,
                host.ptr.as_ptr().cast(),
                &mut pointer_props,
            );
            if queried != vk::Result::SUCCESS {
                log::debug!("host import {label}: pointer properties: {queried}");
                return None;
            }
            let mut external_info =
                vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle);
            let info = vk::BufferCreateInfo::default()
                .size(size)
                .usage(vk_usage)
                .sharing_mode(vk::SharingMode::EXCLUSIVE)
                .push_next(&mut external_info);
            let raw_buffer = device
                .create_buffer(&info, None)
                .map_err(|e| log::debug!("host import {label}: vkCreateBuffer failed: {e}"))
                .ok()?;
            let requirements = device.get_buffer_memory_requirements(raw_buffer);
            let props = instance.get_physical_device_memory_properties(hal.raw_physical_device());
            let allowed = requirements.memory_type_bits & pointer_props.memory_type_bits;
            let Some((type_index, _)) = pick_memory_type(&props, allowed, HostPlacement::System)
            else {
                log::debug!("host import {label}: no coherent memory type imports host pointers");
                device.destroy_buffer(raw_buffer, None);
                return None;
            };
            let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
                .handle_type(handle)
                .host_pointer(host.ptr.as_ptr().cast());
            let alloc = vk::MemoryAllocateInfo::default()
                .allocation_size(size)
                .memory_type_index(type_index)
                .push_next(&mut import);
            let memory = allocate_bound(device, raw_buffer, &alloc, label)?;
            let backing = std::sync::Arc::new(Backing {
                device: device.clone(),
                buffer: raw_buffer,
                memory,
                _host: Some(host.clone()),
            });
            (backing, raw_buffer)
        };
        // SAFETY: `raw_buffer` is bound to `size` bytes of imported memory from offset 0.
        let buffer = unsafe { wrap(gpu, &backing, raw_buffer, size, usage, label) };
        log::debug!("host import {label}: {size} bytes shared with the host");
        Some(HostBuffer {
            _backing: backing,
            buffer,
            ptr: host.ptr,
            len: usize::try_from(size).ok()?,
            cached: true,
        })
    }

    /// Whether CPU reads of the memory are cached (fast); see the field.
    pub(crate) fn cached(&self) -> bool {
        self.cached
    }

    /// The wgpu buffer, for recording copies.
    pub(crate) fn buffer(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// The bytes in `range` (clamped to the buffer), writable.
    ///
    /// # Safety
    /// No submitted GPU work may use these bytes while the returned slice lives, and no
    /// other slice of the same bytes may exist.
    #[allow(clippy::mut_from_ref)] // the access rule above is the exclusivity proof
    pub(crate) unsafe fn bytes_mut(&self, range: Range<usize>) -> &mut [u8] {
        let end = range.end.min(self.len);
        let start = range.start.min(end);
        // SAFETY: the caller upholds exclusivity; `ptr` is valid for `self.len` bytes and
        // `start..end` lies inside them.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr().add(start), end - start) }
    }

    /// The bytes in `range` (clamped to the buffer), readable.
    ///
    /// # Safety
    /// No submitted GPU work may write these bytes while the returned slice lives, and no
    /// mutable slice of the same bytes may exist.
    pub(crate) unsafe fn bytes(&self, range: Range<usize>) -> &[u8] {
        let end = range.end.min(self.len);
        let start = range.start.min(end);
        // SAFETY: as for `bytes_mut`.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr().add(start), end - start) }
    }
}

/// Allocates memory as `alloc` says and binds `raw_buffer` to it from offset 0; on a
/// failure frees what it made, destroys `raw_buffer` and logs why (at debug level).
///
/// # Safety
/// `raw_buffer` was made on `device` and is bound to nothing yet; `alloc` is valid for it.
#[cfg(vulkan_hal)]
unsafe fn allocate_bound(
    device: &ash::Device,
    raw_buffer: vk::Buffer,
    alloc: &vk::MemoryAllocateInfo,
    label: &str,
) -> Option<vk::DeviceMemory> {
    // SAFETY: the caller's promise; each handle is released once, on its failure path.
    unsafe {
        let memory = match device.allocate_memory(alloc, None) {
            Ok(m) => m,
            Err(e) => {
                log::debug!(
                    "host buffer {label}: vkAllocateMemory of {} bytes failed: {e}",
                    alloc.allocation_size
                );
                device.destroy_buffer(raw_buffer, None);
                return None;
            }
        };
        if let Err(e) = device.bind_buffer_memory(raw_buffer, memory, 0) {
            log::debug!("host buffer {label}: binding failed: {e}");
            device.free_memory(memory, None);
            device.destroy_buffer(raw_buffer, None);
            return None;
        }
        Some(memory)
    }
}

/// Hands `raw_buffer` to wgpu as a buffer of `size` bytes with `usage`; the drop callback
/// keeps `backing` until wgpu-hal drops its object (it never destroys the buffer itself).
///
/// # Safety
/// `raw_buffer` is `backing`'s buffer, made on `gpu`'s device and bound to at least `size`
/// bytes from offset 0. wgpu-core treats a buffer from hal as initialised and never maps
/// it (no MAP_* usage: `vk_buffer_usage` refused those).
#[cfg(vulkan_hal)]
unsafe fn wrap(
    gpu: &Gpu,
    backing: &std::sync::Arc<Backing>,
    raw_buffer: vk::Buffer,
    size: u64,
    usage: wgpu::BufferUsages,
    label: &str,
) -> wgpu::Buffer {
    let held = backing.clone();
    // SAFETY: the caller's promise.
    unsafe {
        let hal_buffer = wgpu::hal::vulkan::Buffer::from_raw_externally_owned(
            raw_buffer,
            Box::new(move || drop(held)),
        );
        gpu.device()
            .create_buffer_from_hal::<wgpu::hal::api::Vulkan>(
                hal_buffer,
                &wgpu::BufferDescriptor {
                    label: Some(label),
                    size,
                    usage,
                    mapped_at_creation: false,
                },
            )
    }
}

/// The Vulkan usage for wgpu `usage`, as wgpu-hal would set it; `None` for flags a buffer
/// made outside wgpu cannot carry (mapping, ray tracing, query resolve).
#[cfg(vulkan_hal)]
fn vk_buffer_usage(usage: wgpu::BufferUsages) -> Option<vk::BufferUsageFlags> {
    use wgpu::BufferUsages as U;
    let served =
        U::COPY_SRC | U::COPY_DST | U::STORAGE | U::UNIFORM | U::VERTEX | U::INDEX | U::INDIRECT;
    if !served.contains(usage) {
        log::debug!("host buffer: usage {usage:?} is not served by a hal buffer");
        return None;
    }
    let pairs = [
        (U::COPY_SRC, vk::BufferUsageFlags::TRANSFER_SRC),
        (U::COPY_DST, vk::BufferUsageFlags::TRANSFER_DST),
        (U::STORAGE, vk::BufferUsageFlags::STORAGE_BUFFER),
        (U::UNIFORM, vk::BufferUsageFlags::UNIFORM_BUFFER),
        (U::VERTEX, vk::BufferUsageFlags::VERTEX_BUFFER),
        (U::INDEX, vk::BufferUsageFlags::INDEX_BUFFER),
        (U::INDIRECT, vk::BufferUsageFlags::INDIRECT_BUFFER),
    ];
    Some(
        pairs
            .iter()
            .filter(|(w, _)| usage.contains(*w))
            .fold(vk::BufferUsageFlags::empty(), |acc, (_, v)| acc | *v),
    )
}

/// The memory type: host-visible and coherent (required; no flushes), then for
/// [`HostPlacement::System`] preferably not device-local (system memory the copy engine
/// reads at link speed, rather than the BAR the CPU writes across PCIe) and for
/// [`HostPlacement::DeviceLocal`] preferably device-local, then host-cached (fast CPU reads).
/// Returns the index and the type's flags.
#[cfg(vulkan_hal)]
fn pick_memory_type(
    props: &vk::PhysicalDeviceMemoryProperties,
    allowed: u32,
    placement: HostPlacement,
) -> Option<(u32, vk::MemoryPropertyFlags)> {
    let required = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
    let excluded = vk::MemoryPropertyFlags::PROTECTED | vk::MemoryPropertyFlags::LAZILY_ALLOCATED;
    let count = (props.memory_type_count as usize).min(props.memory_types.len());
    props.memory_types[..count]
        .iter()
        .enumerate()
        .filter(|(i, t)| {
            allowed & (1 << i) != 0
                && t.property_flags.contains(required)
                && !t.property_flags.intersects(excluded)
        })
        .max_by_key(|(i, t)| {
            let device_local = t
                .property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL);
            let preferred = device_local == (placement == HostPlacement::DeviceLocal);
            let cached = t
                .property_flags
                .contains(vk::MemoryPropertyFlags::HOST_CACHED);
            // Lowest index wins ties, as Vulkan orders types by preference.
            (preferred, cached, std::cmp::Reverse(*i))
        })
        .map(|(i, t)| (i as u32, t.property_flags))
}
