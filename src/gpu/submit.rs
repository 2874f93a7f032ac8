//! Submissions: every command buffer vramkit submits goes through [`Gpu::submit`], so that
//! host code touching device-visible memory in place can exclude them for real.
//!
//! # Why a gate
//! On CPU and integrated adapters arena blocks live in host-visible memory, and an upload
//! may be one `memcpy` into the block instead of a staging copy. That is sound only while
//! no GPU work touches those bytes. Checking "the queue is idle" and then writing is not
//! enough: another thread can submit work between the check and the write. So every
//! vramkit submission first counts itself under a shared (read) lock, and in-place host
//! access ([`Gpu::exclusive_host_access`]) takes the write lock with `try_write`, then
//! proves with the counters that nothing was submitted since the queue was found idle.
//! Submitters hold the read lock only for the counter increment (never across
//! `Queue::submit`, which runs wgpu callbacks), and the writer never blocks: it falls back
//! to staging instead. So no thread ever waits on a lock of ours while foreign code runs.
//!
//! Work a host application submits through its own `wgpu::Queue` is not counted: a host
//! app sharing its device must not submit work on vramkit allocations in host-visible
//! blocks while another thread uploads into or downloads from the same bytes (or choose
//! `BlockMemory::Device`, which turns the in-place path off).
//!
//! # One queue writer at a time (a wgpu-core 30 race)
//! `Queue::submit` computes the barriers of its command buffers from wgpu-core's device
//! tracker, releases the tracker, and only then takes the queue's pending writes (data
//! queued by `Queue::write_buffer`), which it executes *before* those command buffers. A
//! `write_buffer` from another thread that lands in that window updates the tracker to
//! `COPY_DST` after the barriers were computed: its copy runs ahead of command buffers
//! that were barriered against the older state, and the tracker forgets their last use. The
//! next command buffer on that buffer then waits for a transfer instead of, say, the
//! compute shader that last wrote it, and two kernels on the same bytes overlap: one
//! result is lost (seen on the H100 as a value exactly one `axpy` term off, under several
//! threads only). So vramkit serialises its own submits and queued writes behind one
//! re-entrant lock ([`Gpu::submit`], [`Gpu::write_buffer`]). A host application sharing
//! its device must do the same for *its* `write_buffer`/`write_texture` calls made while
//! vramkit works from another thread: call them through [`Gpu::write_buffer`], or not
//! concurrently. `VRAMKIT_QUEUE_LOCK=0` turns the lock off (to reproduce the race).
//!
//! Its rank is `lock_rank::QUEUE`, the lowest but the lifecycle lock's: whatever a callback
//! takes ranks above it, and no lock of ours is held while it is taken (`src/sync/rank.rs`).
//!
//! This lock is the one exception to "no foreign code under our locks": the race window is
//! inside `Queue::submit`, which also runs wgpu callbacks (work-done and map callbacks,
//! ours and the host's), so they run with it held. It is re-entrant, so a callback may
//! upload, write or submit on its own thread; a callback must not block on *another*
//! thread's vramkit submit or write, which would wait for this lock.
//!
//! For the same reason vramkit never waits for one of its own callbacks after a blocking
//! wait has covered the work: wgpu runs a callback on whichever thread's poll collected
//! it, and that thread may be inside an earlier callback, waiting for this lock while the
//! waiting thread holds it (a download inside a work-done callback, on the H100). Reads
//! and the upload ring ask the staging buffer itself once the wait returns
//! (`Staging::owned_after_wait`); the arena completes the epochs its wait covered.
//!
//! # GPU writes and host reads (the Vulkan memory model)
//! A fence wait makes the *device's* accesses complete, not *available* to the host: a
//! memory dependency with destination `HOST` / `HOST_READ` is needed before the host may
//! read what the GPU wrote (Vulkan spec, "Host Access Types" and `vkWaitForFences`: "the
//! access scope of a memory dependency defined by a fence only includes device access").
//! wgpu-hal records one only for its own `MAP_READ` buffers. For memory vramkit maps
//! itself ([`super::HostBuffer`]) [`Gpu::host_read_barrier`] records it in a command
//! buffer of its own, submitted after the copies (a pipeline barrier's first scope is all
//! earlier work in submission order, across command buffers). The other direction needs
//! nothing: a queue submission makes earlier host writes to host-coherent memory visible
//! to the device ("host write ordering guarantee").

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{ReentrantMutex, RwLock};

use super::Gpu;
use crate::sync::rank::{self as lock_rank, Held};

/// The queue lock's guard and its rank (the guard first: released before the rank).
struct QueueGuard<'a> {
    _guard: Option<parking_lot::ReentrantMutexGuard<'a, ()>>,
    _held: Held,
    _here: QueueHeldHere,
}

thread_local! {
    /// How many queue locks (of any device) this thread holds: callbacks run under them,
    /// and the last handle of a device dropped there goes to the reaper
    /// (`gpu/lifecycle.rs`) instead of taking the lifecycle lock out of rank. Counted in
    /// every build, unlike the rank checks.
    static QUEUE_HELD: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// One count of [`QUEUE_HELD`], released on drop.
struct QueueHeldHere;

impl QueueHeldHere {
    fn new() -> QueueHeldHere {
        QUEUE_HELD.with(|n| n.set(n.get() + 1));
        QueueHeldHere
    }
}

impl Drop for QueueHeldHere {
    fn drop(&mut self) {
        QUEUE_HELD.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// Whether this thread holds a queue lock now (it runs inside a submit or a queued write,
/// perhaps in a wgpu callback there).
pub(super) fn queue_held_here() -> bool {
    QUEUE_HELD.with(|n| n.get() > 0)
}

/// Counts vramkit's submissions and lets in-place host access exclude them.
#[derive(Default)]
pub(super) struct SubmitGate {
    gate: RwLock<()>,
    /// Submissions begun (counted before `Queue::submit`).
    started: AtomicU64,
    /// Submissions that have returned from `Queue::submit`.
    finished: AtomicU64,
    /// Held across each submit and queued write (see "One queue writer at a time").
    /// Re-entrant: wgpu runs callbacks inside `Queue::submit`, and one may write or submit.
    queue: ReentrantMutex<()>,
}

impl Gpu {
    /// Submits `buffers` on the queue. Every vramkit submission goes through here: it is
    /// counted for in-place host access and serialised with queued writes (see the module
    /// docs of `gpu::submit`). A host app sharing its device and submitting from several
    /// threads while vramkit works can submit through here too.
    ///
    /// ```no_run
    /// let gpu = vramkit::Gpu::headless()?;
    /// let encoder = gpu.device().create_command_encoder(&Default::default());
    /// gpu.submit([encoder.finish()]);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn submit<I>(&self, buffers: I) -> wgpu::SubmissionIndex
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        self.submit_counted(buffers).1
    }

    /// Records one buffer copy in its own command buffer and submits it inside an error
    /// scope (`during` names it in errors); the caller checked the ranges.
    pub(crate) fn submit_copy(
        &self,
        during: &str,
        src: (&wgpu::Buffer, u64),
        dst: (&wgpu::Buffer, u64),
        len: u64,
    ) -> crate::Result<wgpu::SubmissionIndex> {
        self.submit_copies(during, src, dst, len, false)
    }

    /// [`submit_copy`](Self::submit_copy) into host memory vramkit maps itself
    /// ([`super::HostBuffer`]) that the host will read once the copy's fence is waited
    /// for: the host-read barrier follows the copy (module docs, "GPU writes and host
    /// reads").
    pub(crate) fn submit_copy_for_host(
        &self,
        during: &str,
        src: (&wgpu::Buffer, u64),
        dst: (&wgpu::Buffer, u64),
        len: u64,
    ) -> crate::Result<wgpu::SubmissionIndex> {
        self.submit_copies(during, src, dst, len, true)
    }

    fn submit_copies(
        &self,
        during: &str,
        (src, src_offset): (&wgpu::Buffer, u64),
        (dst, dst_offset): (&wgpu::Buffer, u64),
        len: u64,
        host_reads: bool,
    ) -> crate::Result<wgpu::SubmissionIndex> {
        let mut encoder = self
            .device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some(during),
            });
        encoder.copy_buffer_to_buffer(src, src_offset, dst, dst_offset, len);
        let barrier = host_reads.then(|| self.host_read_barrier()).flatten();
        self.scoped(during, || {
            self.submit(std::iter::once(encoder.finish()).chain(barrier))
        })
    }

    /// `Queue::write_buffer`, serialised with vramkit's submits: a write racing another
    /// thread's `Queue::submit` can lose a barrier in wgpu-core 30 (module docs of
    /// `gpu::submit`). The bytes land before the next submission's commands, as with wgpu.
    ///
    /// ```no_run
    /// let gpu = vramkit::Gpu::headless()?;
    /// let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// let a = arena.alloc(16, "a")?;
    /// gpu.write_buffer(a.buffer(), a.offset(), &[0u8; 16]);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn write_buffer(&self, buffer: &wgpu::Buffer, offset: u64, data: &[u8]) {
        let _queue = self.queue_lock();
        self.inner.queue.write_buffer(buffer, offset, data);
    }

    /// The queue lock, or nothing when `VRAMKIT_QUEUE_LOCK=0`; its rank is held either way
    /// (`lock_rank::QUEUE`: callbacks run under it).
    fn queue_lock(&self) -> QueueGuard<'_> {
        static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        let off = *OFF.get_or_init(|| crate::knobs::Knob::QueueLock.is("0"));
        let held = Held::take(lock_rank::QUEUE);
        QueueGuard {
            _guard: (!off).then(|| self.inner.submits.queue.lock()),
            _held: held,
            _here: QueueHeldHere::new(),
        }
    }

    /// [`submit`](Self::submit), also returning the count of started submissions
    /// including this one.
    fn submit_counted<I>(&self, buffers: I) -> (u64, wgpu::SubmissionIndex)
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        let gate = &self.inner.submits;
        let mine = {
            // `read_recursive`: a wgpu callback running inside a submit of this same
            // thread may submit again; the lock is held for the increment only.
            let _rank = Held::take(lock_rank::SUBMIT_GATE);
            let _shared = gate.gate.read_recursive();
            gate.started.fetch_add(1, Ordering::SeqCst) + 1
        };
        let index = {
            let _queue = self.queue_lock();
            self.inner.queue.submit(buffers)
        };
        gate.finished.fetch_add(1, Ordering::SeqCst);
        (mine, index)
    }

    /// Runs `access` while no vramkit GPU work is in flight and none can be submitted, or
    /// returns `None` at once when work is in flight or another thread holds the gate (the
    /// caller then goes through staging). Before `access`, queued `write_buffer` data is
    /// submitted and found complete, and, when `host_reads`, a `HOST_READ` barrier is the
    /// last submitted work (see the module docs). Polls the device with no lock held.
    pub(crate) fn exclusive_host_access<R>(
        &self,
        host_reads: bool,
        access: impl FnOnce() -> R,
    ) -> Option<R> {
        let empty = |poll: std::result::Result<wgpu::PollStatus, _>| {
            matches!(poll, Ok(wgpu::PollStatus::QueueEmpty))
        };
        if !empty(self.poll_device(wgpu::PollType::Poll)) {
            return None;
        }
        // The flush carries pending `write_buffer` data (and the barrier) to the GPU.
        let barrier = if host_reads {
            self.host_read_barrier()
        } else {
            None
        };
        let (mine, flush) = self.submit_counted(barrier);
        let gate = &self.inner.submits;
        // Everything counted up to `mine` has returned from `Queue::submit` before this
        // wait, so the wait covers it.
        if gate.finished.load(Ordering::SeqCst) != mine {
            return None;
        }
        if !empty(self.poll_device(wgpu::PollType::Wait {
            submission_index: Some(flush),
            timeout: None,
        })) {
            return None;
        }
        let _exclusive = gate.gate.try_write()?;
        let _rank = Held::tried(lock_rank::SUBMIT_GATE);
        // Nothing was submitted since the flush: the queue is still idle, and any submitter
        // now waits for the write lock until `access` is done.
        if gate.started.load(Ordering::SeqCst) != mine {
            return None;
        }
        Some(access())
    }

    /// A command buffer holding only a pipeline barrier that makes all earlier device
    /// writes available and visible to host reads, on Vulkan; `None` elsewhere (vramkit
    /// maps memory itself only on Vulkan; other backends read back through wgpu's own
    /// mapped buffers, which wgpu synchronises). Submit it after the copies it covers.
    pub(crate) fn host_read_barrier(&self) -> Option<wgpu::CommandBuffer> {
        if self.inner.info.backend != wgpu::Backend::Vulkan || barrier_disabled() {
            return None;
        }
        self.record_host_read_barrier()
    }

    /// The barrier of [`host_read_barrier`](Self::host_read_barrier), recorded through
    /// wgpu-hal; `None` in builds without the Vulkan backend (`build.rs`).
    #[cfg(not(vulkan_hal))]
    fn record_host_read_barrier(&self) -> Option<wgpu::CommandBuffer> {
        None
    }

    #[cfg(vulkan_hal)]
    fn record_host_read_barrier(&self) -> Option<wgpu::CommandBuffer> {
        let mut encoder =
            self.inner
                .device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit host-read barrier"),
                });
        // SAFETY: the encoder is used through the raw API only (wgpu-core forbids mixing
        // the two on one encoder), records one barrier, is not ended here (wgpu ends it
        // in `finish`) and its handle is not kept. The device handle is used only to
        // record into that command buffer.
        let recorded = unsafe {
            let hal_device = self.inner.device.as_hal::<wgpu::hal::api::Vulkan>();
            encoder.as_hal_mut::<wgpu::hal::api::Vulkan, _, _>(|raw| {
                let (Some(raw), Some(hal_device)) = (raw, hal_device.as_ref()) else {
                    return false;
                };
                let barrier = ash::vk::MemoryBarrier::default()
                    .src_access_mask(ash::vk::AccessFlags::MEMORY_WRITE)
                    .dst_access_mask(ash::vk::AccessFlags::HOST_READ);
                hal_device.raw_device().cmd_pipeline_barrier(
                    raw.raw_handle(),
                    ash::vk::PipelineStageFlags::ALL_COMMANDS,
                    ash::vk::PipelineStageFlags::HOST,
                    ash::vk::DependencyFlags::empty(),
                    &[barrier],
                    &[],
                    &[],
                );
                true
            })
        };
        recorded.then(|| encoder.finish())
    }
}

/// `VRAMKIT_HOST_READ_BARRIER=0` leaves the barrier out, to measure what it costs (the
/// benchmark's A/B); without it host reads of device writes are not ordered by the spec.
fn barrier_disabled() -> bool {
    static DISABLED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *DISABLED.get_or_init(|| crate::knobs::Knob::HostReadBarrier.is("0"))
}
