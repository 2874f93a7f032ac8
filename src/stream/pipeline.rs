//! Computing over data larger than GPU memory through a fixed device window.

use std::io::Read;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use super::Uploader;
use crate::arena::Allocation;
use crate::kernels::{Batch, Kernels};
use crate::{Error, Result};

/// Where a [`Pipeline`] reads its input.
pub enum Source<'s> {
    /// Bytes in memory, including a memory-mapped file (`memmap2::Mmap` derefs to `[u8]`):
    /// uploaded with the [`Uploader`]'s multi-threaded copy, no other host copy.
    Bytes(&'s [u8]),
    /// Any reader, with the number of bytes to take from it; each chunk is read into a
    /// host buffer, then uploaded.
    Reader(&'s mut dyn Read, u64),
}

impl Source<'_> {
    fn len(&self) -> u64 {
        match self {
            Source::Bytes(b) => b.len() as u64,
            Source::Reader(_, n) => *n,
        }
    }
}

/// Settings of a [`Pipeline`].
#[derive(Clone, Copy, Debug)]
pub struct PipelineConfig {
    /// Input bytes per chunk (a multiple of 4). The device window is `slots` chunks. Best
    /// equal to the uploader's `chunk_size` (16 MiB by default): chunks much larger than
    /// the staging chunks stream far below the plain upload rate (BENCHMARKS.md,
    /// Streaming).
    pub chunk_bytes: u64,
    /// Chunks in flight: 3 lets chunk k+1 upload while chunk k computes and chunk k-1's
    /// result comes back.
    pub slots: usize,
    /// Bytes of result per chunk that come back to the host.
    pub result_bytes: u64,
}

impl Default for PipelineConfig {
    fn default() -> Self {
        PipelineConfig {
            chunk_bytes: 16 << 20,
            slots: 3,
            result_bytes: 4,
        }
    }
}

/// What a [`Pipeline::run`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct PipelineReport {
    /// Input bytes streamed.
    pub bytes: u64,
    /// Chunks processed.
    pub chunks: u64,
    /// Device bytes the window held (chunks and results).
    pub window_bytes: u64,
    /// Seconds from the first upload to the last result.
    pub seconds: f64,
}

impl PipelineReport {
    /// Input throughput in GB/s.
    pub fn gbps(&self) -> f64 {
        self.bytes as f64 / self.seconds.max(1e-12) / 1e9
    }
}

/// One slot of the window: a chunk on the device, its result, and the result's readback.
struct Slot {
    chunk: Allocation,
    result: Allocation,
    readback: wgpu::Buffer,
    /// 0 idle, 1 map requested, 2 mapped, 3 map failed.
    state: Arc<AtomicU8>,
    /// The chunk whose result is in flight here, and the submission that produces it.
    pending: Option<(u64, wgpu::SubmissionIndex)>,
}

/// Streams a source through a window of device chunks: upload chunk k+1 while a kernel
/// works on chunk k and chunk k-1's result comes back. The GPU never holds more than the
/// window, whatever the source's size.
///
/// ```no_run
/// # fn main() -> vramkit::Result<()> {
/// use vramkit::kernels::{Kernels, Reduce};
/// use vramkit::stream::{Pipeline, PipelineConfig, Source, Uploader};
/// let gpu = vramkit::Gpu::headless()?;
/// let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// let kernels = Kernels::new(&arena)?;
/// let uploader = Uploader::new(&gpu, Default::default());
/// let data = vec![0u8; 1 << 30]; // or a memory-mapped file
/// let mut pipeline = Pipeline::new(&kernels, &uploader, PipelineConfig::default())?;
/// let mut total = 0.0f64;
/// pipeline.run(
///     Source::Bytes(&data),
///     |batch, chunk, bytes, result| {
///         batch.reduce(Reduce::Sum, (chunk, bytes / 4), (result, 1))?;
///         Ok(())
///     },
///     |_chunk, result| total += f32::from_le_bytes(result[..4].try_into().unwrap()) as f64,
/// )?;
/// # Ok(()) }
/// ```
pub struct Pipeline<'k> {
    kernels: &'k Kernels,
    uploader: &'k Uploader,
    config: PipelineConfig,
    slots: Vec<Slot>,
}

impl<'k> Pipeline<'k> {
    /// Allocates the window (`slots` chunks and results) in the kernels' arena.
    pub fn new(
        kernels: &'k Kernels,
        uploader: &'k Uploader,
        config: PipelineConfig,
    ) -> Result<Pipeline<'k>> {
        if config.chunk_bytes == 0 || !config.chunk_bytes.is_multiple_of(4) || config.slots < 1 {
            return Err(Error::invalid(
                format!(
                    "a pipeline of {} chunks of {} bytes",
                    config.slots, config.chunk_bytes
                ),
                "use at least one slot and a chunk size that is a positive multiple of 4",
            ));
        }
        let result_bytes = config.result_bytes.max(4).next_multiple_of(4);
        let arena = kernels.arena();
        let mut slots = Vec::with_capacity(config.slots);
        for _ in 0..config.slots {
            slots.push(Slot {
                chunk: arena.alloc(config.chunk_bytes, "stream chunk")?,
                result: arena.alloc(result_bytes, "stream result")?,
                readback: arena.gpu().device().create_buffer(&wgpu::BufferDescriptor {
                    label: Some("vramkit stream result"),
                    size: result_bytes,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
                state: Arc::new(AtomicU8::new(0)),
                pending: None,
            });
        }
        Ok(Pipeline {
            kernels,
            uploader,
            config: PipelineConfig {
                result_bytes,
                ..config
            },
            slots,
        })
    }

    /// Runs `kernel(batch, chunk, bytes, result)` on every chunk of `source` (the last one
    /// may be shorter; `bytes` says how many are valid) and hands each chunk's result to
    /// `collect(chunk_index, bytes)`, in order. Errors from the source, the kernel or
    /// `collect` stop the run and are returned.
    pub fn run<K, C>(
        &mut self,
        mut source: Source<'_>,
        mut kernel: K,
        mut collect: C,
    ) -> Result<PipelineReport>
    where
        K: for<'a> FnMut(&mut Batch<'a>, &'a Allocation, u64, &'a Allocation) -> Result<()>,
        C: FnMut(u64, &[u8]),
    {
        let gpu = self.kernels.arena().gpu().clone();
        let total = source.len();
        let chunk = self.config.chunk_bytes;
        let start = web_time::Instant::now();
        let mut host = Vec::new();
        let mut k = 0u64;
        let mut pos = 0u64;
        while pos < total {
            let n = chunk.min(total - pos);
            let s = (k % self.slots.len() as u64) as usize;
            // The slot's previous result must be home before the slot is reused.
            self.finish_slot(s, &mut collect)?;
            let slot = &self.slots[s];
            match &mut source {
                Source::Bytes(b) => {
                    self.uploader
                        .upload(&slot.chunk, 0, &b[pos as usize..(pos + n) as usize])?;
                }
                Source::Reader(r, _) => {
                    host.resize(n as usize, 0);
                    r.read_exact(&mut host).map_err(|e| Error::Io {
                        during: format!("reading bytes {pos}..{} of the stream", pos + n),
                        source: e,
                    })?;
                    self.uploader.upload(&slot.chunk, 0, &host)?;
                }
            }
            let mut batch = self.kernels.batch();
            kernel(&mut batch, &slot.chunk, n, &slot.result)?;
            batch.encoder().copy_buffer_to_buffer(
                slot.result.buffer(),
                slot.result.offset(),
                &slot.readback,
                0,
                self.config.result_bytes,
            );
            let submitted = batch.submit()?;
            slot.state.store(1, Ordering::Release);
            let state = slot.state.clone();
            slot.readback
                .slice(..)
                .map_async(wgpu::MapMode::Read, move |r| {
                    state.store(if r.is_ok() { 2 } else { 3 }, Ordering::Release);
                });
            self.slots[s].pending = Some((k, submitted));
            pos += n;
            k += 1;
            gpu.poll(); // run map callbacks that are ready, without blocking
        }
        for i in 0..self.slots.len() {
            let s = ((k + i as u64) % self.slots.len() as u64) as usize;
            self.finish_slot(s, &mut collect)?;
        }
        Ok(PipelineReport {
            bytes: total,
            chunks: k,
            window_bytes: self
                .slots
                .iter()
                .map(|s| s.chunk.size() + s.result.size())
                .sum(),
            seconds: start.elapsed().as_secs_f64(),
        })
    }

    /// Waits for slot `s`'s result (if one is in flight) and hands it to `collect`.
    fn finish_slot(&mut self, s: usize, collect: &mut impl FnMut(u64, &[u8])) -> Result<()> {
        let Some((k, submitted)) = self.slots[s].pending.take() else {
            return Ok(());
        };
        let gpu = self.kernels.arena().gpu();
        let slot = &self.slots[s];
        // Wait for this slot's own submission only: waiting for the whole queue would
        // also wait for the uploads of later chunks and serialise the pipeline.
        while slot.state.load(Ordering::Acquire) == 1 {
            gpu.wait_for(submitted.clone())?;
        }
        if slot.state.load(Ordering::Acquire) == 3 {
            return Err(Error::Device {
                during: format!("reading back the result of chunk {k}"),
                message: "mapping the result buffer failed".into(),
            });
        }
        {
            let view = slot
                .readback
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Device {
                    during: format!("reading back the result of chunk {k}"),
                    message: e.to_string(),
                })?;
            collect(k, &view);
        }
        slot.readback.unmap();
        slot.state.store(0, Ordering::Release);
        Ok(())
    }
}
