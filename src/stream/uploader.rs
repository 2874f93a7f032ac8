//! The upload ring.
//!
//! Its locks rank `lock_rank::STAGING_RETURNS` (the receiver of buffers callbacks send
//! back) and `lock_rank::STAGING` (the ring), in that order, above the queue lock and below
//! the tiers' and the arena's (`src/sync/rank.rs`).

use std::future::Future;
use std::sync::mpsc;

use std::sync::Arc;
use std::time::Duration;
use web_time::Instant;

use crate::sync::rank::{self as lock_rank, Mutex};

use super::host_copy::copy_parallel;
use super::staging::{Staging, Writer};
use super::UPLOADED;
use crate::arena::Allocation;
use crate::shaders::{shader, Shader};
use crate::{Error, Gpu, Result};

/// Writes the partial words at the unaligned edges of an upload.
pub(crate) const PATCH_WORDS: Shader = shader!("patch_words.wgsl", "memory/patch_words.wgsl");

/// Smallest staging buffer the ring creates: smaller uploads share it.
pub(super) const MIN_STAGING: u64 = 1 << 20;

/// Word-aligned uploads up to this size go through `Queue::write_buffer`: wgpu gathers
/// them into the next submission, which costs a few microseconds where a staging chunk
/// of our own costs a command buffer and a submit each (tens of microseconds on a CPU
/// adapter).
pub const SMALL_UPLOAD: u64 = 64 << 10;

/// Settings of an [`Uploader`].
#[derive(Clone, Debug)]
pub struct UploaderConfig {
    /// Bytes per staging buffer (and per copy command). Rounded up to 4 and capped at the
    /// device's largest buffer.
    pub chunk_size: u64,
    /// Most staging bytes held at once; a full ring waits for the GPU (back-pressure).
    pub max_staging: u64,
    /// Threads that write one chunk into mapped memory when it is large (1 = no threads).
    pub copy_threads: usize,
    /// Staging buffers unused for this long are destroyed at the next upload, so a burst
    /// does not hold host-visible memory for good (`None`: keep them). Idle loops can
    /// call [`Uploader::release_idle`] instead of waiting for an upload.
    pub idle_release: Option<Duration>,
    /// Put staging in plain host memory that the GPU copies from directly (Vulkan; the
    /// counterpart of CUDA's pinned memory), instead of wgpu's `MAP_WRITE` buffers, which
    /// live in device memory the CPU writes across the bus where the GPU offers it. Falls
    /// back to wgpu buffers on other backends. See BENCHMARKS.md for the difference.
    pub host_staging: bool,
    /// Word-aligned uploads of at most this many bytes go through `Queue::write_buffer`
    /// ([`SMALL_UPLOAD`] by default; 0 sends everything through the staging ring).
    pub small_upload: u64,
}

impl Default for UploaderConfig {
    fn default() -> Self {
        // 16 MiB chunks: smaller ones lose to the cost per chunk, larger ones upload more
        // slowly, and shorter first and last chunks measured no faster (BENCHMARKS.md,
        // Streaming).
        // Staging is created only as far as it is used.
        UploaderConfig {
            chunk_size: 16 << 20,
            max_staging: 256 << 20,
            copy_threads: std::thread::available_parallelism().map_or(1, |n| n.get().min(16)),
            idle_release: Some(Duration::from_secs(10)),
            host_staging: true,
            small_upload: SMALL_UPLOAD,
        }
    }
}

/// Counters of an [`Uploader`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UploaderStats {
    /// Bytes uploaded.
    pub bytes: u64,
    /// Chunks copied.
    pub chunks: u64,
    /// Staging buffers created (zero per upload once warm).
    pub staging_created: u64,
    /// Staging bytes held now.
    pub staging_bytes: u64,
    /// Staging buffers destroyed after sitting idle.
    pub staging_released: u64,
    /// Staging buffers created in host memory the GPU copies from directly (the others are
    /// wgpu `MAP_WRITE` buffers); see [`UploaderConfig::host_staging`].
    pub staging_host: u64,
    /// Uploads written straight into a host-visible arena block (one host copy, no
    /// staging; see [`crate::arena::BlockMemory`]).
    pub direct: u64,
    /// Times an upload waited for the GPU to release a staging buffer.
    pub waits: u64,
    /// Uploads whose unaligned edges needed the patch kernel.
    pub patches: u64,
    /// Small uploads handed to `Queue::write_buffer` ([`SMALL_UPLOAD`]).
    pub small: u64,
}

/// A staging slot the GPU is done with, as its callback reports it: slot, lease, when.
type Returned = (usize, u64, Instant);

struct Ring {
    /// Staging buffers by slot; `None` once released for idleness (the slot is reused).
    buffers: Vec<Option<Staging>>,
    /// When each slot was last handed out or came back from the GPU.
    last_used: Vec<Instant>,
    /// Released slots.
    dead: Vec<usize>,
    /// Staging buffers mapped and ready to be written.
    free: Vec<usize>,
    /// Submissions of copies whose staging buffer is not back yet, oldest first, with the
    /// slot and its lease: a full ring waits for the oldest one only, so the GPU keeps
    /// copying the others meanwhile.
    in_flight: std::collections::VecDeque<(wgpu::SubmissionIndex, usize, u64)>,
    /// By slot: the lease of the copy in flight from it, 0 when none. A slot comes back
    /// once per lease, through its callback or through [`Ring::reclaim`] after a wait,
    /// whichever is first; the other finds the lease gone.
    lease: Vec<u64>,
    /// The last lease handed out.
    leases: u64,
    stats: UploaderStats,
}

impl Ring {
    /// Puts `slot` back on the free list if `lease` is still its copy in flight.
    /// `back`: when the GPU gave the buffer back. Idle time counts from then, so a buffer
    /// whose copy took longer than `idle_release` (a GPU busy with other work) is not idle
    /// the moment it comes back.
    fn reclaim(&mut self, slot: usize, lease: u64, back: Instant) {
        if lease != 0 && self.lease.get(slot) == Some(&lease) {
            self.lease[slot] = 0;
            self.free.push(slot);
            self.last_used[slot] = back;
        }
    }

    /// Puts `slot` back on the free list after a blocking wait for its copy of `lease`
    /// returned, if the buffer says the CPU owns it again (`Staging::owned_after_wait`).
    ///
    /// The lease is checked first: its callback may already have brought the slot back
    /// and another thread taken it and be writing it, and asking a buffer in someone
    /// else's hands whether it is mapped opens a view of its first bytes beside theirs
    /// (wgpu then refuses their write as aliasing: seen as a failed upload under four
    /// threads in CI). While the lease is current the slot is on no free list, and the
    /// ring's lock, held here, keeps it so.
    fn reclaim_after_wait(&mut self, slot: usize, lease: u64) {
        if lease == 0 || self.lease.get(slot) != Some(&lease) {
            return;
        }
        let owned = self.buffers[slot]
            .as_ref()
            .is_some_and(Staging::owned_after_wait);
        if owned {
            self.reclaim(slot, lease, Instant::now());
        }
    }

    /// Reclaims every slot whose callback has reported it back since the last call.
    fn take_returned(&mut self, returned: &mpsc::Receiver<Returned>) {
        while let Ok((slot, lease, back)) = returned.try_recv() {
            self.reclaim(slot, lease, back);
        }
    }
}

/// Uploads host bytes into arena allocations through a ring of mapped staging buffers.
/// `Send + Sync`; several threads may upload at once.
///
/// ```no_run
/// # let gpu = vramkit::Gpu::headless()?;
/// let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
/// let dst = arena.alloc(1 << 20, "weights")?;
/// uploader.upload(&dst, 0, &vec![1u8; 1 << 20])?;
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct Uploader {
    gpu: Gpu,
    config: UploaderConfig,
    ring: Mutex<Ring>,
    /// Staging buffers the GPU has released (see [`Returned`]), sent by their callbacks.
    ready_tx: mpsc::Sender<Returned>,
    ready_rx: Mutex<mpsc::Receiver<Returned>>,
}

impl std::fmt::Debug for Uploader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Uploader")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

impl Uploader {
    /// A new, empty ring; staging buffers are created on demand up to `max_staging`.
    pub fn new(gpu: &Gpu, config: UploaderConfig) -> Uploader {
        let chunk_size = super::chunk_size(gpu, config.chunk_size);
        let config = UploaderConfig {
            chunk_size,
            max_staging: config.max_staging.max(chunk_size),
            copy_threads: config.copy_threads.max(1),
            idle_release: config.idle_release,
            host_staging: config.host_staging,
            small_upload: config.small_upload,
        };
        let (ready_tx, ready_rx) = mpsc::channel();
        Uploader {
            gpu: gpu.clone(),
            config,
            ring: Mutex::new(
                lock_rank::STAGING,
                Ring {
                    buffers: Vec::new(),
                    last_used: Vec::new(),
                    dead: Vec::new(),
                    free: Vec::new(),
                    in_flight: std::collections::VecDeque::new(),
                    lease: Vec::new(),
                    leases: 0,
                    stats: UploaderStats::default(),
                },
            ),
            ready_tx,
            ready_rx: Mutex::new(lock_rank::STAGING_RETURNS, ready_rx),
        }
    }

    /// Counters so far.
    pub fn stats(&self) -> UploaderStats {
        self.ring.lock().stats
    }

    /// Copies `data` into `dst` at byte `offset`. Returns once every byte is in staging
    /// memory with its copy submitted, or queued by `Queue::write_buffer` (small uploads):
    /// GPU work submitted afterwards sees the data (queue order); the call does not wait
    /// for the copy to finish.
    ///
    /// Small word-aligned uploads (up to `config.small_upload`, [`SMALL_UPLOAD`] by
    /// default) are handed to
    /// `Queue::write_buffer`, which gathers them into the next submission. Where `dst`
    /// lives in a host-visible block (CPU and integrated adapters, see
    /// [`BlockMemory`](crate::arena::BlockMemory)) and no GPU work is in flight, larger
    /// bytes are written straight into the block instead: one host copy, no staging, same
    /// ordering (queued `Queue::write_buffer` data is submitted first).
    ///
    /// Any size and offset work: whole words go through staging buffers; the 1 to 3 bytes
    /// at an unaligned start or end are merged into their words on the GPU, leaving the
    /// neighbouring bytes as they were.
    ///
    /// Errors: a range past the end of `dst`, or a `dst` whose buffer lacks `COPY_DST`
    /// (and, for unaligned edges, `STORAGE`).
    pub fn upload(&self, dst: &Allocation, offset: u64, data: &[u8]) -> Result<()> {
        let len = data.len() as u64;
        let end = self.check_dst(dst, offset, len)?;
        if len == 0 || dst.is_virtual() {
            // A dry run moves no bytes (see `crate::plan`).
            return Ok(());
        }
        if len <= self.config.small_upload && offset.is_multiple_of(4) && len.is_multiple_of(4) {
            // Queue order holds: the bytes land before the next submission's commands.
            self.gpu
                .write_buffer(dst.buffer(), dst.offset() + offset, data);
            let mut ring = self.ring.lock();
            ring.stats.bytes += len;
            super::publish_moved(UPLOADED, len);
            ring.stats.small += 1;
            return Ok(());
        }
        let threads = self.config.copy_threads;
        if dst
            .write_in_place(offset..end, |bytes| copy_parallel(bytes, data, threads))
            .is_some()
        {
            let mut ring = self.ring.lock();
            ring.stats.bytes += len;
            super::publish_moved(UPLOADED, len);
            ring.stats.direct += 1;
            return Ok(());
        }
        let first_word = offset.next_multiple_of(4);
        let last_word = end / 4 * 4;
        if first_word < last_word {
            let body = &data[(first_word - offset) as usize..(last_word - offset) as usize];
            self.copy_words(dst, first_word, body)?;
        }
        self.patch_edges(dst, offset, data, first_word, last_word)?;
        self.ring.lock().stats.bytes += len;
        super::publish_moved(UPLOADED, len);
        Ok(())
    }

    /// Uploads `data` into typed elements (a whole [`Typed`](crate::arena::Typed) or its
    /// first elements): exactly as many elements as the destination holds.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
    /// let x = arena.alloc_typed::<f32>(3, "x")?;
    /// uploader.upload_typed(&x, &[1.0, 2.0, 3.0])?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn upload_typed<'a, T: bytemuck::Pod>(
        &self,
        dst: impl Into<crate::arena::Elements<'a, T>>,
        data: &[T],
    ) -> Result<()> {
        let dst = dst.into();
        if data.len() != dst.len() {
            return Err(Error::misuse(
                crate::Misuse::Length,
                format!(
                    "an upload of {} elements into '{}', which holds {}",
                    data.len(),
                    dst.allocation().label(),
                    dst.len()
                ),
                "upload exactly as many elements as the destination holds (Typed::first(n) \
                 takes the first n)",
            ));
        }
        self.upload(dst.allocation(), 0, bytemuck::cast_slice(data))
    }

    /// [`upload`](Self::upload), then a future that resolves once the GPU has finished the
    /// copies, for code that must know when the bytes have landed (to hand the buffer to
    /// another queue or API, to account for transfer time) without blocking a thread. The
    /// bytes are in staging when this returns, so `data` is free at once; the call blocks
    /// only while staging is full (back-pressure). The device's polling thread (one per
    /// device) drives it while such futures are pending, so they resolve on any executor.
    /// GPU work submitted after the call sees the data whether or not the future is
    /// awaited.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
    /// let dst = arena.alloc(1 << 20, "weights")?;
    /// let landed = uploader.upload_async(&dst, 0, &vec![1u8; 1 << 20])?;
    /// // ... other work ...
    /// pollster::block_on(landed)?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn upload_async(
        &self,
        dst: &Allocation,
        offset: u64,
        data: &[u8],
    ) -> Result<impl Future<Output = Result<()>> + Send + 'static> {
        let poller = self.gpu.poller()?;
        self.upload(dst, offset, data)?;
        Ok(self.gpu.driven_work_done(poller))
    }

    /// Uploads `len` bytes into `dst` at `offset` by letting `fill` write them straight
    /// into mapped staging memory, chunk by chunk: `fill(position, bytes)` gets the
    /// position of `bytes` within the upload. Nothing is copied on the host besides what
    /// `fill` writes (copy from a memory-mapped file, decode, generate). The view is
    /// write-only ([`wgpu::WriteOnly`]): mapped memory may be write-combined, where reads
    /// are slow.
    ///
    /// `offset` and `len` must be multiples of 4 (staging copies move whole words; use
    /// [`upload`](Self::upload) for unaligned ranges). When `fill` fails, its error is
    /// returned and the chunks before it stay uploaded.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// # let uploader = vramkit::stream::Uploader::new(&gpu, Default::default());
    /// let dst = arena.alloc(4 << 20, "ramp")?;
    /// let source: Vec<u8> = (0..4 << 20).map(|i| i as u8).collect(); // or a memory map
    /// uploader.upload_with(&dst, 0, 4 << 20, |pos, mut bytes| {
    ///     let pos = pos as usize;
    ///     bytes.copy_from_slice(&source[pos..pos + bytes.len()]);
    ///     Ok(())
    /// })?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn upload_with(
        &self,
        dst: &Allocation,
        offset: u64,
        len: u64,
        mut fill: impl FnMut(u64, wgpu::WriteOnly<'_, [u8]>) -> Result<()>,
    ) -> Result<()> {
        self.check_dst(dst, offset, len)?;
        if !offset.is_multiple_of(4) || !len.is_multiple_of(4) {
            return Err(Error::misuse(
                crate::Misuse::Alignment,
                format!("an in-place upload of {len} bytes at offset {offset} (not whole words)"),
                "use offsets and lengths that are multiples of 4, or Uploader::upload",
            ));
        }
        if dst.is_virtual() {
            // A dry run moves no bytes and calls no `fill`.
            return Ok(());
        }
        let chunk = self.config.chunk_size;
        let mut pos = 0;
        while pos < len {
            let n = chunk.min(len - pos);
            self.copy_chunk(dst, offset + pos, n, |writer| fill(pos, writer.bytes()))?;
            pos += n;
        }
        self.ring.lock().stats.bytes += len;
        super::publish_moved(UPLOADED, len);
        Ok(())
    }

    fn copy_words(&self, dst: &Allocation, at: u64, body: &[u8]) -> Result<()> {
        // In the browser a ring buffer comes back only after the page yields, so a full
        // ring could not wait: WebGPU's own `writeBuffer` stages the bytes instead (one
        // copy into the browser's memory, never a wait), in queue order like the rings.
        if cfg!(web) {
            self.gpu.write_buffer(dst.buffer(), dst.offset() + at, body);
            return Ok(());
        }
        let chunk = self.config.chunk_size as usize;
        for (k, piece) in body.chunks(chunk).enumerate() {
            let target = at + (k * chunk) as u64;
            self.copy_chunk(dst, target, piece.len() as u64, |writer| {
                writer.copy_at(0, piece, self.config.copy_threads);
                Ok(())
            })?;
        }
        Ok(())
    }

    /// One chunk: a mapped staging buffer from the ring, `write` fills its first `n`
    /// bytes through a writer, then the copy into `dst` at byte `at` of the allocation is submitted and the
    /// buffer re-mapped (wgpu resolves the map once the copy has finished). When `write`
    /// fails the buffer goes back to the ring unsubmitted.
    fn copy_chunk(
        &self,
        dst: &Allocation,
        at: u64,
        n: u64,
        write: impl FnOnce(&mut Writer) -> Result<()>,
    ) -> Result<()> {
        let (index, staging) = self.acquire_written(n, write)?;
        let mut encoder =
            self.gpu
                .device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit upload"),
                });
        encoder.copy_buffer_to_buffer(staging.buffer(), 0, dst.buffer(), dst.offset() + at, n);
        self.submit_staged(index, &staging, encoder)
    }

    /// Hands the filled staging buffer of slot `index` to the GPU, submits `encoder` (its
    /// copies out of that buffer) and gives the buffer back to the ring once the GPU is
    /// done with it.
    pub(super) fn submit_staged(
        &self,
        index: usize,
        staging: &Staging,
        encoder: wgpu::CommandEncoder,
    ) -> Result<()> {
        let lease = {
            let mut ring = self.ring.lock();
            ring.leases += 1;
            let lease = ring.leases;
            ring.lease[index] = lease;
            lease
        };
        staging.to_gpu();
        let submitted = self.gpu.scoped("submitting an upload chunk", || {
            self.gpu.submit_timed("upload", [encoder.finish()])
        });
        let tx = self.ready_tx.clone();
        // Even after a failed submit: the buffer must come back to the ring.
        staging.when_cpu_owned(&self.gpu, wgpu::MapMode::Write, staging.size(), move |ok| {
            if ok {
                let _ = tx.send((index, lease, Instant::now()));
            }
        });
        let submitted = submitted?;
        let mut ring = self.ring.lock();
        ring.stats.chunks += 1;
        ring.in_flight.push_back((submitted, index, lease));
        // Bounded by the ring: older entries than the ring's size are certainly done.
        while ring.in_flight.len() > ring.buffers.len() {
            ring.in_flight.pop_front();
        }
        Ok(())
    }

    /// Gives an acquired, still mapped staging slot back unsubmitted.
    pub(super) fn return_unsubmitted(&self, index: usize) {
        self.ring.lock().free.push(index);
    }

    /// [`super::check_range`] for an upload into `dst`: same device, inside, `COPY_DST`.
    pub(super) fn check_dst(&self, dst: &Allocation, offset: u64, len: u64) -> Result<u64> {
        super::check_range(
            &self.gpu,
            dst,
            offset,
            len,
            wgpu::BufferUsages::COPY_DST,
            "upload",
        )
    }

    /// Counts bytes uploaded by a batch.
    pub(super) fn count_bytes(&self, bytes: u64) {
        self.ring.lock().stats.bytes += bytes;
        super::publish_moved(UPLOADED, bytes);
    }

    /// Bytes per staging buffer.
    pub(super) fn chunk_size(&self) -> u64 {
        self.config.chunk_size
    }

    /// Threads for one large staging fill.
    pub(super) fn copy_threads(&self) -> usize {
        self.config.copy_threads
    }

    pub(super) fn gpu(&self) -> &Gpu {
        &self.gpu
    }

    /// A staging slot of at least `need` bytes whose first `need` bytes `write` has
    /// filled; when the write (or mapping the range) fails, the slot goes back to the ring
    /// unsubmitted. Every staged upload path fills its slot through here.
    pub(super) fn acquire_written(
        &self,
        need: u64,
        write: impl FnOnce(&mut Writer) -> Result<()>,
    ) -> Result<(usize, Staging)> {
        let (index, staging) = self.acquire(need)?;
        // SAFETY: an acquired slot is owned by the CPU until it is submitted.
        let written = unsafe { staging.writer(0..need) }.and_then(|mut w| write(&mut w));
        match written {
            Ok(()) => Ok((index, staging)),
            Err(e) => {
                self.return_unsubmitted(index);
                Err(e)
            }
        }
    }

    /// Destroys the staging buffers that are mapped and waiting and were last used more
    /// than `older_than` ago; returns the bytes released. Buffers with a copy in flight
    /// are kept. The next uploads create buffers again as they need them.
    pub fn release_idle(&self, older_than: Duration) -> u64 {
        let rx = self.ready_rx.lock();
        let mut ring = self.ring.lock();
        ring.take_returned(&rx);
        self.release_idle_locked(&mut ring, older_than)
    }

    fn release_idle_locked(&self, ring: &mut Ring, older_than: Duration) -> u64 {
        let now = Instant::now();
        let Ring {
            buffers,
            last_used,
            dead,
            free,
            stats,
            ..
        } = ring;
        let before = stats.staging_bytes;
        free.retain(|&i| {
            if now.duration_since(last_used[i]) < older_than {
                return true;
            }
            if let Some(buffer) = buffers[i].take() {
                stats.staging_bytes -= buffer.size();
                buffer.destroy();
                dead.push(i);
                stats.staging_released += 1;
            }
            false
        });
        before - stats.staging_bytes
    }

    /// A mapped staging buffer of at least `need` bytes (`need` <= `chunk_size`): the
    /// smallest free one that fits; else a new one while under `max_staging`, sized to
    /// what is moved (`need` rounded up to a power of two, at least [`MIN_STAGING`], at
    /// most `chunk_size`), so small uploads do not hold chunk-sized buffers; else, making
    /// room, a free buffer too small is given back and a fitting one created; else (the
    /// ring is full) the next one the GPU releases.
    pub(super) fn acquire(&self, need: u64) -> Result<(usize, Staging)> {
        let need = need.clamp(4, self.config.chunk_size);
        loop {
            let oldest = {
                let rx = self.ready_rx.lock();
                let mut ring = self.ring.lock();
                ring.take_returned(&rx);
                if let Some(idle) = self.config.idle_release {
                    self.release_idle_locked(&mut ring, idle);
                }
                let now = Instant::now();
                let fitting = ring
                    .free
                    .iter()
                    .enumerate()
                    .filter_map(|(k, &i)| Some((k, ring.buffers[i].as_ref()?.size())))
                    .filter(|&(_, size)| size >= need)
                    .min_by_key(|&(_, size)| size)
                    .map(|(k, _)| k);
                if let Some(k) = fitting {
                    let i = ring.free.swap_remove(k);
                    if let Some(buffer) = ring.buffers[i].clone() {
                        ring.last_used[i] = now;
                        return Ok((i, buffer));
                    }
                    // Unreachable: released slots leave the free list. Skip it.
                    continue;
                }
                let size = need.next_power_of_two().clamp(
                    MIN_STAGING.min(self.config.chunk_size),
                    self.config.chunk_size,
                );
                // No room: give back free buffers that are too small, smallest first.
                while ring.stats.staging_bytes + size > self.config.max_staging {
                    let Some(k) = ring
                        .free
                        .iter()
                        .enumerate()
                        .min_by_key(|&(_, &i)| ring.buffers[i].as_ref().map_or(0, Staging::size))
                        .map(|(k, _)| k)
                    else {
                        break;
                    };
                    let i = ring.free.swap_remove(k);
                    if let Some(buffer) = ring.buffers[i].take() {
                        ring.stats.staging_bytes -= buffer.size();
                        ring.stats.staging_released += 1;
                        ring.dead.push(i);
                        buffer.destroy();
                    }
                }
                if ring.stats.staging_bytes + size <= self.config.max_staging {
                    let buffer = Staging::new(
                        &self.gpu,
                        size,
                        wgpu::MapMode::Write,
                        self.config.host_staging,
                        "vramkit upload staging",
                    )?;
                    ring.stats.staging_host += u64::from(buffer.is_host());
                    let i = match ring.dead.pop() {
                        Some(i) => {
                            ring.buffers[i] = Some(buffer.clone());
                            ring.last_used[i] = now;
                            i
                        }
                        None => {
                            ring.buffers.push(Some(buffer.clone()));
                            ring.last_used.push(now);
                            ring.lease.push(0);
                            ring.buffers.len() - 1
                        }
                    };
                    ring.stats.staging_created += 1;
                    ring.stats.staging_bytes += size;
                    return Ok((i, buffer));
                }
                ring.stats.waits += 1;
                ring.in_flight.pop_front()
            };
            // Back-pressure: wait for the oldest copy only; later copies keep the GPU busy
            // meanwhile. Its buffer is then taken back without waiting for its callback:
            // wgpu runs that on whichever thread's poll resolved the mapping, which may be
            // inside another callback waiting for a lock this thread holds (an upload in
            // a callback of `Gpu::submit` holds the queue lock). See
            // `Staging::owned_after_wait`.
            match oldest {
                Some((index, slot, lease)) => {
                    self.gpu.wait_for(index)?;
                    self.ring.lock().reclaim_after_wait(slot, lease);
                }
                // Another thread is waiting for the oldest copy and takes its buffer back.
                None => self.gpu.wait_idle()?,
            }
        }
    }

    /// Merges the bytes outside `[first_word, last_word)` into their words on the GPU.
    fn patch_edges(
        &self,
        dst: &Allocation,
        offset: u64,
        data: &[u8],
        first_word: u64,
        last_word: u64,
    ) -> Result<()> {
        let end = offset + data.len() as u64;
        // (word index, value, byte mask) for each partially written word.
        let mut words: Vec<[u32; 4]> = Vec::new();
        let mut add_bytes = |from: u64, to: u64| {
            if from >= to {
                return;
            }
            let word = from / 4;
            let (mut value, mut mask) = (0u32, 0u32);
            for b in from..to {
                let shift = 8 * (b % 4) as u32;
                value |= (data[(b - offset) as usize] as u32) << shift;
                mask |= 0xFF << shift;
            }
            words.push([word as u32, value, mask, 0]);
        };
        if first_word > last_word {
            add_bytes(offset, end); // all bytes inside one word
        } else {
            add_bytes(offset, first_word.min(end));
            add_bytes(last_word.max(offset), end);
        }
        if words.is_empty() {
            return Ok(());
        }
        if !dst.buffer().usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(Error::misuse(
                crate::Misuse::Usage,
                format!(
                    "unaligned upload into '{}', whose buffer lacks STORAGE usage",
                    dst.label()
                ),
                "upload at 4-byte aligned offsets and lengths, or use a STORAGE pool",
            ));
        }
        #[repr(C)]
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        struct Patch {
            words: [[u32; 4]; 2],
            count: u32,
            _pad: [u32; 3],
        }
        let mut patch = Patch {
            words: [[0; 4]; 2],
            count: words.len() as u32,
            _pad: [0; 3],
        };
        patch.words[..words.len()].copy_from_slice(&words);
        use wgpu::util::DeviceExt;
        let pipeline = self.gpu.pipeline(&PATCH_WORDS, "patch_words")?;
        let uniform = self
            .gpu
            .device()
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("vramkit upload patch"),
                contents: bytemuck::bytes_of(&patch),
                usage: wgpu::BufferUsages::UNIFORM,
            });
        self.gpu.dispatch_once(
            "patching unaligned upload edges",
            &pipeline,
            &[uniform.as_entire_binding(), dst.binding_resource()],
            (1, 1),
        )?;
        self.ring.lock().stats.patches += 1;
        Ok(())
    }
}

// The ring holds only wgpu handles and plain data; make the thread-safety promise checked.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Uploader>();
    assert_send_sync::<Arc<Uploader>>();
};
