//! Kernel profiling: the GPU time of every dispatch, from timestamp queries, into the
//! arena's memory history (a GPU track next to the allocations) and, with the `metrics`
//! feature, the histogram `vramkit_kernel_gpu_seconds{kernel="..."}`.
//!
//! # How it works
//! While profiling is on ([`Kernels::set_profiling`]), each dispatch of a batch gets its
//! own compute pass whose beginning and end write a timestamp (this needs only
//! `TIMESTAMP_QUERY`). At submit the batch resolves its queries into a buffer that is
//! mapped for reading; the map callback only raises a flag (no wgpu call, no lock of
//! ours, in wgpu's callback). [`Kernels::collect_profile`], and every later submit, read
//! the batches whose flag is up on the caller's thread and file their spans.
//!
//! # Costs and limits
//! A pass per dispatch and the query traffic cost GPU and CPU time: profiling is for
//! looking, not for benchmarks. At most [`MAX_TIMED`] dispatches per batch are timed;
//! later ones run untimed. GPU clocks are not the host's: a batch's spans are placed at
//! the host time it was submitted, keeping their GPU offsets.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::Kernels;
use crate::{Error, Result};

/// Dispatches timed per batch.
pub const MAX_TIMED: u32 = 512;

/// Profiling state shared by a [`Kernels`] and its batches.
#[derive(Default)]
pub(super) struct Profiler {
    on: AtomicBool,
    pending: Mutex<Vec<Pending>>,
}

/// A submitted batch whose timestamps are on their way back.
struct Pending {
    names: Vec<&'static str>,
    readback: wgpu::Buffer,
    ready: Arc<AtomicBool>,
    submitted: Instant,
}

/// The queries of one batch being recorded.
pub(super) struct BatchProfile {
    queries: wgpu::QuerySet,
    names: Vec<&'static str>,
}

impl BatchProfile {
    /// Queries for a new batch, when profiling is on.
    pub fn start(kernels: &Kernels) -> Option<BatchProfile> {
        if !kernels.profiler.on.load(Ordering::Relaxed) {
            return None;
        }
        let device = kernels.arena.gpu().device();
        Some(BatchProfile {
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("vramkit kernel profile"),
                ty: wgpu::QueryType::Timestamp,
                count: 2 * MAX_TIMED,
            }),
            names: Vec::new(),
        })
    }

    /// The timestamp writes of the next dispatch (`name`), or `None` past [`MAX_TIMED`].
    pub fn next(&mut self, name: &'static str) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        let k = self.names.len() as u32;
        if k >= MAX_TIMED {
            return None;
        }
        self.names.push(name);
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(2 * k),
            end_of_pass_write_index: Some(2 * k + 1),
        })
    }

    /// Records the resolve and read-back copy; returns what [`Profiler::submitted`] needs.
    pub fn finish(
        self,
        kernels: &Kernels,
        encoder: &mut wgpu::CommandEncoder,
    ) -> Option<(Vec<&'static str>, wgpu::Buffer)> {
        if self.names.is_empty() {
            return None;
        }
        let device = kernels.arena.gpu().device();
        let bytes = 16 * self.names.len() as u64;
        let resolve = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("vramkit kernel profile resolve"),
            size: bytes,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let readback = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("vramkit kernel profile readback"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let n = 2 * self.names.len() as u32;
        encoder.resolve_query_set(&self.queries, 0..n, &resolve, 0);
        encoder.copy_buffer_to_buffer(&resolve, 0, &readback, 0, bytes);
        Some((self.names, readback))
    }
}

impl Profiler {
    /// Call right after the submit of a batch's [`BatchProfile::finish`] output.
    pub fn submitted(&self, names: Vec<&'static str>, readback: wgpu::Buffer) {
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        // The callback only raises the flag: the read happens on a caller's thread.
        readback.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            flag.store(r.is_ok(), Ordering::Release)
        });
        self.pending.lock().push(Pending {
            names,
            readback,
            ready,
            submitted: Instant::now(),
        });
    }
}

impl Kernels {
    /// Turns kernel profiling on or off (see the module docs of `kernels::profile`).
    /// Errors on a device without timestamp queries.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// arena.record_history(Some(Default::default()));
    /// let kernels = vramkit::kernels::Kernels::new(&arena)?;
    /// kernels.set_profiling(true)?;
    /// // ... batches ...
    /// kernels.collect_profile(true)?;
    /// arena.history().unwrap().write_chrome_trace("trace.json")?; // kernels on the GPU track
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn set_profiling(&self, on: bool) -> Result<()> {
        if on && !self.arena.gpu().has(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(Error::invalid(
                "kernel profiling on a device without timestamp queries",
                "use an adapter with TIMESTAMP_QUERY (Vulkan, Metal and DX12 GPUs have it)",
            ));
        }
        self.profiler.on.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Files the GPU times of profiled batches that have come back: into the arena's
    /// memory history when it records, and the `vramkit_kernel_gpu_seconds` histogram with
    /// the `metrics` feature. With `wait`, first waits for all submitted GPU work. Returns
    /// the dispatches filed.
    pub fn collect_profile(&self, wait: bool) -> Result<usize> {
        let gpu = self.arena.gpu();
        if wait {
            gpu.wait_idle()?;
        } else {
            gpu.device()
                .poll(wgpu::PollType::Poll)
                .map_err(|e| Error::Device {
                    during: "polling for kernel timestamps".into(),
                    message: e.to_string(),
                })?;
        }
        let done: Vec<Pending> = {
            let mut pending = self.profiler.pending.lock();
            let (done, waiting) = std::mem::take(&mut *pending)
                .into_iter()
                .partition(|p| p.ready.load(Ordering::Acquire));
            *pending = waiting;
            done
        };
        let period = f64::from(gpu.queue().get_timestamp_period());
        let mut filed = 0;
        for p in done {
            let spans: Vec<(String, u64, u64)> = {
                let Ok(view) = p.readback.slice(..).get_mapped_range() else {
                    continue;
                };
                let ticks: &[u64] = bytemuck::cast_slice(&view);
                p.names
                    .iter()
                    .zip(ticks.chunks_exact(2))
                    .filter(|(_, t)| t[1] >= t[0])
                    .map(|(name, t)| {
                        let ns = |tick: u64| (tick as f64 * period) as u64;
                        (name.to_string(), ns(t[0]), ns(t[1]))
                    })
                    .collect()
            };
            p.readback.unmap();
            #[cfg(feature = "metrics")]
            for (name, start, end) in &spans {
                metrics::histogram!("vramkit_kernel_gpu_seconds", "kernel" => name.clone())
                    .record((end - start) as f64 * 1e-9);
            }
            filed += spans.len();
            self.arena.note_gpu_spans(p.submitted, &spans);
        }
        Ok(filed)
    }
}
