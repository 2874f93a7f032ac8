//! `Allocation`: an RAII range of a GPU buffer.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::num::NonZeroU64;
use std::sync::Arc;

use super::block::BlockBuffer;
use super::state::{CachedRange, PendingFree, Placed};
use super::Shared;

/// A range of an arena block. Dropping it frees the range; the arena hands it out again only
/// after all GPU work submitted before the drop has finished, so a kernel still reading it
/// never sees another allocation's data.
///
/// # The rule: drop only what is submitted
/// Dropping an allocation is a promise that all GPU work on it has been *submitted*: work
/// recorded but not yet submitted would run after the range may have gone to another
/// allocation. vramkit's own recorders keep the promise for you: [`kernels::Batch`] and
/// [`stream::UploadBatch`] borrow every allocation they are given until they submit, so
/// dropping one earlier does not compile; every other call (uploads, downloads, views,
/// texture uploads, the pipeline) submits before it returns. Work you record yourself on
/// [`buffer`](Self::buffer) or [`binding`](Self::binding) must be submitted before the
/// allocation drops.
///
/// [`kernels::Batch`]: crate::kernels::Batch
/// [`stream::UploadBatch`]: crate::stream::UploadBatch
///
/// ```no_run
/// # let gpu = vramkit::Gpu::headless()?;
/// let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// let a = arena.alloc(4096, "activations")?;
/// let entry = wgpu::BindGroupEntry { binding: 0, resource: a.binding_resource() };
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct Allocation {
    // The three references are moved out on drop and kept by the arena for the next
    // allocation (`Shared::release`), hence `ManuallyDrop`.
    pub(super) shared: ManuallyDrop<Arc<Shared>>,
    pub(super) id: u64,
    pub(super) slot: u32,
    pub(super) label_index: u32,
    pub(super) pool: usize,
    /// Taken by `drop` (not `Copy`: the block set frees it by value).
    pub(super) placed: ManuallyDrop<Placed>,
    pub(super) buffer: ManuallyDrop<Arc<BlockBuffer>>,
    pub(super) offset: u64,
    pub(super) size: u64,
    pub(super) label: ManuallyDrop<Arc<str>>,
    /// The range may be kept for reuse by size (no guards, not a dedicated block).
    pub(super) reuse: bool,
}

/// What a dropped [`Allocation`] hands back to its arena: its live record and label, and
/// the range to wait for the GPU.
pub(crate) struct Freed {
    pub slot: u32,
    pub label: Arc<str>,
    pub label_index: u32,
    pub pending: PendingFree,
}

impl Allocation {
    /// The wgpu buffer that holds this range (shared with other allocations).
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.buffer.buffer()
    }

    /// Byte offset of the range inside [`buffer`](Self::buffer); a multiple of the device's
    /// storage (and, for uniform pools, uniform) offset alignment.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// Usable bytes: the request rounded up to 4.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The GPU context of the arena this range belongs to.
    pub fn gpu(&self) -> &crate::Gpu {
        &self.shared.gpu
    }

    /// Fails unless this allocation lives on `gpu`'s device ([`crate::Gpu::same_device`]);
    /// `what` names the call for the message.
    pub(crate) fn check_device(&self, gpu: &crate::Gpu, what: &str) -> crate::Result<()> {
        if self.shared.gpu.same_device(gpu) {
            return Ok(());
        }
        Err(crate::Error::invalid(
            format!(
                "{what}: allocation '{}' belongs to another device than this call's ({})",
                &**self.label,
                gpu.info().name
            ),
            "use allocations of an arena on the same Gpu (clone the Gpu rather than wrapping \
             one device twice); move data between devices through host memory",
        ))
    }

    /// The label given at allocation.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Arena-unique id, as shown in leak reports and dumps.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// A binding of exactly this range, for a bind group entry.
    pub fn binding(&self) -> wgpu::BufferBinding<'_> {
        wgpu::BufferBinding {
            buffer: self.buffer.buffer(),
            offset: self.offset,
            size: NonZeroU64::new(self.size),
        }
    }

    /// [`binding`](Self::binding) as a `BindingResource`.
    pub fn binding_resource(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(self.binding())
    }

    /// A slice of exactly this range (for copies and vertex/index binding).
    pub fn slice(&self) -> wgpu::BufferSlice<'_> {
        self.buffer().slice(self.offset..self.offset + self.size)
    }

    /// Runs `write` on bytes `range` (relative to the allocation) of the block's mapped
    /// memory, for host-visible blocks ([`super::BlockMemory`]) while no vramkit GPU work is
    /// in flight and none can be submitted (`Gpu::exclusive_host_access`); `None`
    /// otherwise (the caller then goes through staging). Queue order is kept: pending
    /// `Queue::write_buffer` data is submitted and found complete before the host write,
    /// and work submitted after the call sees the bytes (a submission makes earlier host
    /// writes to coherent memory visible to the device). `range` must lie inside the
    /// allocation (callers check it first).
    pub(crate) fn write_in_place<R>(
        &self,
        range: std::ops::Range<u64>,
        write: impl FnOnce(&mut [u8]) -> R,
    ) -> Option<R> {
        // SAFETY (of the closure): see `in_place`, which guarantees exclusive host access
        // and an idle GPU for the closure's duration.
        self.in_place(range, false, |memory, bytes| {
            write(unsafe { memory.bytes_mut(bytes) })
        })
    }

    /// Like [`write_in_place`](Self::write_in_place), reading: the bytes as all GPU work
    /// submitted so far left them, made visible to the host by a `HOST_READ` barrier.
    /// Only where the block's memory is host-cached: reading write-combined memory (some
    /// integrated GPUs' device-local types) is far slower than the staging path.
    pub(crate) fn read_in_place<R>(
        &self,
        range: std::ops::Range<u64>,
        read: impl FnOnce(&[u8]) -> R,
    ) -> Option<R> {
        if !self.buffer.host()?.cached() {
            return None;
        }
        // SAFETY (of the closure): as above.
        self.in_place(range, true, |memory, bytes| {
            read(unsafe { memory.bytes(bytes) })
        })
    }

    /// Calls `access` with the block's mapped memory and the byte range of `range` in it,
    /// under the device's exclusive host access (no vramkit work in flight or submitted
    /// meanwhile, and no other in-place access anywhere on the device).
    fn in_place<R>(
        &self,
        range: std::ops::Range<u64>,
        host_reads: bool,
        access: impl FnOnce(&crate::gpu::HostBuffer, std::ops::Range<usize>) -> R,
    ) -> Option<R> {
        let memory = self.buffer.host()?;
        let start = usize::try_from(self.offset + range.start).ok()?;
        let end = usize::try_from(self.offset + range.end.min(self.size)).ok()?;
        self.shared
            .gpu
            .exclusive_host_access(host_reads, || access(memory, start..end))
    }

    /// Views the range as an array of `T`; fails if the size or offset is not a multiple of
    /// `T`'s size.
    pub fn typed<T: bytemuck::Pod>(self) -> crate::Result<Typed<T>> {
        let elem = std::mem::size_of::<T>() as u64;
        if elem == 0 || !self.size.is_multiple_of(elem) || !self.offset.is_multiple_of(elem) {
            return Err(crate::Error::invalid(
                format!(
                    "allocation '{}' of {} bytes at offset {} cannot hold whole {}-byte elements",
                    &**self.label, self.size, self.offset, elem
                ),
                "allocate with Arena::alloc_typed, which sizes the range in elements",
            ));
        }
        Ok(Typed {
            inner: self,
            _element: PhantomData,
        })
    }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("id", &self.id)
            .field("label", &&*self.label)
            .field("offset", &self.offset)
            .field("size", &self.size)
            .finish()
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads these fields after it takes them.
        let (shared, buffer, label, placed) = unsafe {
            (
                ManuallyDrop::take(&mut self.shared),
                ManuallyDrop::take(&mut self.buffer),
                ManuallyDrop::take(&mut self.label),
                ManuallyDrop::take(&mut self.placed),
            )
        };
        Shared::release(
            shared,
            Freed {
                slot: self.slot,
                label,
                label_index: self.label_index,
                pending: PendingFree {
                    pool: self.pool,
                    range: CachedRange { placed, buffer },
                    class: self.reuse.then_some(self.size),
                },
            },
        );
    }
}

/// An [`Allocation`] viewed as `len()` elements of `T`.
pub struct Typed<T: bytemuck::Pod> {
    inner: Allocation,
    _element: PhantomData<fn() -> T>,
}

impl<T: bytemuck::Pod> Typed<T> {
    /// Number of `T` elements.
    pub fn len(&self) -> usize {
        (self.inner.size / std::mem::size_of::<T>() as u64) as usize
    }

    /// True when it holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The untyped allocation.
    pub fn allocation(&self) -> &Allocation {
        &self.inner
    }

    /// Gives back the untyped allocation.
    pub fn into_inner(self) -> Allocation {
        self.inner
    }
}

impl<T: bytemuck::Pod> std::ops::Deref for Typed<T> {
    type Target = Allocation;
    fn deref(&self) -> &Allocation {
        &self.inner
    }
}
