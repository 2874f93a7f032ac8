//! `Allocation`: an RAII range of a GPU buffer.

use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::num::NonZeroU64;
use std::ptr::NonNull;
use std::sync::Arc;

use super::block::BlockBuffer;
use super::planned::PlannedRange;
use super::state::Placed;
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
/// It is a range of a block, one `wgpu::Buffer` other allocations share. In your own
/// bind groups that matters twice: wgpu refuses a pass that binds one buffer `read_write`
/// beside another binding of it (allocate what is written that way with
/// [`Arena::alloc_own_buffer_in`](super::Arena::alloc_own_buffer_in)), and a bind group
/// keeps the buffer alive, not this range. [`BindGroup`](super::BindGroup) checks the
/// first and holds the allocations it binds (README, "Embedding vramkit in a wgpu app").
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
    // Moved out on drop and kept by the arena for the next allocation (`Shared::release`),
    // hence `ManuallyDrop`.
    pub(super) shared: ManuallyDrop<Arc<Shared>>,
    /// The buffer of its block, owned by its record, which lives until after the drop.
    pub(super) buffer: NonNull<BlockBuffer>,
    pub(super) offset: u64,
    pub(super) size: u64,
    /// The slot of its record (`state::LiveRecord`), which holds its range and the rest of
    /// its details (id, label, block): the handle keeps only what GPU work needs, because
    /// every `?` or `unwrap` moves it and each word moved is a store the next lock waits
    /// for.
    pub(super) slot: u32,
}

// SAFETY: the buffer pointer is a shared reference the handle may use from any thread
// (`BlockBuffer` is `Sync`), to a buffer the arena keeps alive and unchanged while the
// handle exists: it is owned by the allocation's record, which only its drop releases; the
// handle holds the arena.
unsafe impl Send for Allocation {}
// SAFETY: as for `Send`; `&Allocation` hands out only shared references to it.
unsafe impl Sync for Allocation {}

/// The `Send` and `Sync` impls above rest on these: the handle's arena reference and the
/// buffer behind its pointer may be shared between threads.
const _: () = {
    const fn shared_between_threads<T: Send + Sync + ?Sized>() {}
    shared_between_threads::<Arc<Shared>>();
    shared_between_threads::<BlockBuffer>();
};

/// What an allocation holds in its block: a range of the block set, or a place in a
/// planned loop's block (`planned.rs`).
pub(crate) enum Held {
    Range(Placed),
    Planned(PlannedRange),
}

impl Held {
    pub(crate) fn size(&self) -> u64 {
        match self {
            Held::Range(p) => p.size,
            Held::Planned(p) => p.size,
        }
    }

    pub(crate) fn block(&self) -> crate::alloc::BlockId {
        match self {
            Held::Range(p) => p.block,
            Held::Planned(p) => p.block,
        }
    }
}

impl Allocation {
    /// The wgpu buffer that holds this range (shared with other allocations).
    pub fn buffer(&self) -> &wgpu::Buffer {
        self.block_buffer().buffer()
    }

    fn block_buffer(&self) -> &BlockBuffer {
        // SAFETY: see the `Send` impl: the record owns the buffer until after our drop.
        unsafe { self.buffer.as_ref() }
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

    /// Which buffer this range lies in, for messages: the arena, the pool and the block.
    pub(crate) fn buffer_name(&self) -> String {
        let st = self.shared.state.lock();
        let Some(r) = st.live.get(self.slot) else {
            return format!("{}, a freed range", self.shared.config.name);
        };
        let block = r.block().0;
        let pool = st.pools.get(r.pool).map_or("?", |p| p.name.as_str());
        format!("{}/{pool}/block{block}", self.shared.config.name)
    }

    /// The GPU context of the arena this range belongs to.
    pub fn gpu(&self) -> &crate::Gpu {
        &self.shared.gpu
    }

    /// Fails unless this allocation lives on `gpu`'s device ([`crate::Gpu::same_device`]);
    /// `what` names the call for the message.
    /// An allocation of a lost device (one a runtime has since recovered from, say) fails
    /// with [`crate::Error::DeviceLost`]: its bytes are gone.
    pub(crate) fn check_device(&self, gpu: &crate::Gpu, what: &str) -> crate::Result<()> {
        if self.shared.gpu.same_device(gpu) {
            return Ok(());
        }
        self.shared.gpu.check_alive()?;
        Err(crate::Error::misuse(
            crate::Misuse::Foreign,
            format!(
                "{what}: allocation '{}' belongs to another device than this call's ({})",
                self.label(),
                gpu.info().name
            ),
            "use allocations of an arena on the same Gpu; move data between devices through \
             host memory",
        ))
    }

    /// Records a tier event about this allocation in the arena's memory history, if it is
    /// recording.
    pub(crate) fn note(&self, kind: super::history::EventKind) {
        let mut st = self.shared.state.lock();
        let super::state::State { live, history, .. } = &mut *st;
        if let (Some(h), Some(r)) = (history.as_mut(), live.get(self.slot)) {
            super::state::record_event(h, kind, r);
        }
    }

    /// Reads its record under the arena's lock (`None` cannot happen: the record lives
    /// until the handle's drop has taken it back).
    fn with_record<R>(&self, read: impl FnOnce(&super::state::LiveRecord) -> R) -> Option<R> {
        let st = self.shared.state.lock();
        let record = st.live.get(self.slot);
        debug_assert!(record.is_some(), "a live handle without its record");
        record.map(read)
    }

    /// The block this range lies in, and the index of its pool in its arena.
    pub(crate) fn place(&self) -> (crate::alloc::BlockId, usize) {
        self.with_record(|r| (r.block(), r.pool))
            .unwrap_or((crate::alloc::BlockId(u32::MAX), usize::MAX))
    }

    /// True in a dry run ([`crate::Runtime::dry_run`]): the range has an offset and a size
    /// but no memory behind it, and [`buffer`](Self::buffer) is a small placeholder.
    /// Record no GPU work of your own on it.
    pub fn is_virtual(&self) -> bool {
        self.block_buffer().is_virtual()
    }

    /// The label given at allocation.
    ///
    /// Takes the arena's lock, as a drop does (the text is in the arena's label table).
    pub fn label(&self) -> &str {
        let text = {
            let st = self.shared.state.lock();
            st.live.get(self.slot).map(|r| st.label_text(r.label))
        };
        // SAFETY: the arena's label table never folds a label with a live allocation and
        // keeps each text at a fixed address until it folds it (`arena/labels.rs`); this
        // handle is live for as long as the borrow, and holds the arena.
        text.map_or("", |t| unsafe { t.as_ref() })
    }

    /// Arena-unique id, as shown in leak reports and dumps. Takes the arena's lock, as a
    /// drop does.
    pub fn id(&self) -> u64 {
        self.with_record(|r| r.id).unwrap_or(0)
    }

    /// A binding of exactly this range, for a bind group entry.
    pub fn binding(&self) -> wgpu::BufferBinding<'_> {
        wgpu::BufferBinding {
            buffer: self.buffer(),
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
        if !self.block_buffer().host()?.cached() {
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
        let memory = self.block_buffer().host()?;
        let start = usize::try_from(self.offset + range.start).ok()?;
        let end = usize::try_from(self.offset + range.end.min(self.size)).ok()?;
        self.shared
            .gpu
            .exclusive_host_access(host_reads, || access(memory, start..end))
    }

    /// Views the range as an array of `T`, as many as fit; fails if the offset is not a
    /// multiple of `T`'s size or not one element fits.
    pub fn typed<T: bytemuck::Pod>(self) -> crate::Result<Typed<T>> {
        let elem = std::mem::size_of::<T>() as u64;
        let len = self.size.checked_div(elem).unwrap_or(0);
        self.typed_len(len)
    }

    /// Fails unless `len` whole elements of `T` fit in the range and its offset is a
    /// multiple of `T`'s size; `hint` says what to do instead.
    fn check_elements<T: bytemuck::Pod>(&self, len: u64, hint: &str) -> crate::Result<()> {
        let elem = std::mem::size_of::<T>() as u64;
        let fits = len.checked_mul(elem).is_some_and(|b| b <= self.size);
        if elem == 0 || len == 0 || !fits || !self.offset.is_multiple_of(elem) {
            return Err(crate::Error::misuse(
 crate::Misuse::Alignment,
                format!(
                    "allocation '{}' of {} bytes at offset {} cannot hold {len} whole {elem}-byte elements",
                    self.label(), self.size, self.offset
                ),
                hint,
            ));
        }
        Ok(())
    }

    /// Views the first `len` elements of the range as `T` (the arena rounds sizes up to
    /// 4 bytes, so an odd number of 2-byte elements leaves a spare half word).
    pub(crate) fn typed_len<T: bytemuck::Pod>(self, len: u64) -> crate::Result<Typed<T>> {
        self.check_elements::<T>(
            len,
            "allocate with Arena::alloc_typed, which sizes the range in elements",
        )?;
        Ok(Typed {
            inner: self,
            len: len as usize,
            _element: PhantomData,
        })
    }
}

impl std::fmt::Debug for Allocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Allocation")
            .field("id", &self.id())
            .field("label", &self.label())
            .field("offset", &self.offset)
            .field("size", &self.size)
            .finish()
    }
}

impl Allocation {
    /// Moves out the arena reference, which goes back with the slot (`Shared::release`).
    ///
    /// # Safety
    /// Once only, and the allocation is neither used nor dropped afterwards (it is being
    /// dropped, or it is wrapped in `ManuallyDrop`).
    #[inline]
    unsafe fn take_shared(&mut self) -> Arc<Shared> {
        // SAFETY: the caller takes it out exactly once and never reads it again.
        unsafe { ManuallyDrop::take(&mut self.shared) }
    }

    /// Frees an allocation on which no GPU work was ever recorded, at once (its range is
    /// not held back for in-flight work, as a drop would hold it).
    pub(crate) fn discard_unused(self) {
        let mut this = ManuallyDrop::new(self);
        // SAFETY: `this` is never dropped or used again.
        let shared = unsafe { this.take_shared() };
        shared.release_unused(this.slot);
    }
}

impl Drop for Allocation {
    fn drop(&mut self) {
        // SAFETY: `drop` runs once and nothing reads the reference after it takes it.
        let shared = unsafe { self.take_shared() };
        Shared::release(shared, self.slot);
    }
}

/// An [`Allocation`] viewed as `len()` elements of `T`. Kernels and transfers of the
/// typed API ([`crate::kernels::Batch`], [`crate::Runtime`]) take it directly, check
/// the element type at compile time and take the element count from it.
pub struct Typed<T: bytemuck::Pod> {
    inner: Allocation,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T: bytemuck::Pod> Typed<T> {
    /// Number of `T` elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first `n` elements, for a typed kernel or transfer on part of the allocation;
    /// `None` when `n` is 0 or more than [`len`](Self::len).
    pub fn first(&self, n: usize) -> Option<Elements<'_, T>> {
        (n > 0 && n <= self.len).then_some(Elements {
            allocation: &self.inner,
            len: n,
            _element: PhantomData,
        })
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

impl<T: bytemuck::Pod> std::fmt::Debug for Typed<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Typed")
            .field("element", &std::any::type_name::<T>())
            .field("len", &self.len)
            .field("allocation", &self.inner)
            .finish()
    }
}

impl<T: bytemuck::Pod> std::ops::Deref for Typed<T> {
    type Target = Allocation;
    fn deref(&self) -> &Allocation {
        &self.inner
    }
}

/// The first `len` elements of a [`Typed`] allocation (see [`Typed::first`]); a whole
/// `&Typed<T>` converts into one too.
pub struct Elements<'a, T: bytemuck::Pod> {
    allocation: &'a Allocation,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T: bytemuck::Pod> Clone for Elements<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T: bytemuck::Pod> Copy for Elements<'_, T> {}

impl<'a, T: bytemuck::Pod> Elements<'a, T> {
    /// The first `len` elements of `allocation`, checked like [`Allocation::typed`].
    pub(crate) fn of(allocation: &'a Allocation, len: u64) -> crate::Result<Self> {
        allocation.check_elements::<T>(len, "allocate a multiple of the element size")?;
        Ok(Elements {
            allocation,
            len: len as usize,
            _element: PhantomData,
        })
    }

    /// The allocation the elements live in.
    pub fn allocation(&self) -> &'a Allocation {
        self.allocation
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// The first `n` of these elements (as [`Typed::first`]); `None` when `n` is 0 or
    /// more than [`len`](Self::len). For a kernel on part of a movable:
    /// `resident.elements::<f32>(&m)?.first(16)`.
    pub fn first(&self, n: usize) -> Option<Elements<'a, T>> {
        (n > 0 && n <= self.len).then_some(Elements {
            allocation: self.allocation,
            len: n,
            _element: PhantomData,
        })
    }

    /// Never true: a view has at least one element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl<'a, T: bytemuck::Pod> From<&'a Typed<T>> for Elements<'a, T> {
    fn from(t: &'a Typed<T>) -> Self {
        Elements {
            allocation: &t.inner,
            len: t.len,
            _element: PhantomData,
        }
    }
}
