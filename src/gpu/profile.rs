//! GPU profiling: the GPU time of vramkit's kernels, uploads and downloads, from
//! timestamp queries, kept in a bounded ring on the [`Gpu`] that the arena's memory
//! history shows as its GPU track, and, with the `metrics` feature, the histogram
//! `vramkit_gpu_work_seconds{work="..."}` (a kernel's name, "upload" or "download").
//!
//! # How it works
//! While profiling is on ([`Gpu::set_profiling`]):
//! - each kernel dispatch of a batch gets its own compute pass whose beginning and end
//!   write a timestamp ([`BatchProfile`]; needs `TIMESTAMP_QUERY`);
//! - each upload and download copy is submitted between two command buffers that only
//!   write a timestamp ([`Gpu::submit_timed`]; needs `TIMESTAMP_QUERY_INSIDE_ENCODERS`,
//!   untimed without it).
//!
//! The queries are resolved into a buffer that is mapped for reading; the map callback
//! only raises a flag (no wgpu call and no lock of ours inside wgpu's callback).
//! [`Gpu::collect_profile`], and every later profiled submit, read the flagged buffers
//! on the caller's thread and file their spans.
//!
//! # Costs and limits
//! A pass per dispatch, a query set per submit and the read-back cost GPU and CPU time:
//! profiling is for looking, not for benchmarks. At most [`MAX_TIMED`] dispatches per
//! batch are timed. GPU clocks are not the host's: a submission's spans are placed at the
//! host time it was submitted, keeping their GPU offsets. The ring keeps the last
//! [`MAX_SPANS`] spans.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;
use web_time::Instant;

use crate::sync::rank::Mutex;

use super::Gpu;
use crate::{Error, Result};

/// Dispatches timed per kernel batch.
pub const MAX_TIMED: u32 = 512;
/// Spans the ring keeps.
pub const MAX_SPANS: usize = 100_000;

/// One measured stretch of GPU work.
#[derive(Clone, Debug)]
pub(crate) struct Span {
    pub name: &'static str,
    /// Host time of the start (the submit, plus the GPU offset of the span in it).
    pub start: Instant,
    pub dur_ns: u64,
}

/// Profiling state of one [`Gpu`].
pub(crate) struct Profiler {
    on: AtomicBool,
    pending: Mutex<Vec<Pending>>,
    spans: Mutex<VecDeque<Span>>,
}

impl Default for Profiler {
    fn default() -> Self {
        Profiler {
            on: AtomicBool::new(false),
            pending: Mutex::new(crate::sync::rank::PROFILE_PENDING, Vec::new()),
            spans: Mutex::new(crate::sync::rank::PROFILE_SPANS, VecDeque::new()),
        }
    }
}

/// A submission whose timestamps are on their way back.
struct Pending {
    names: Vec<&'static str>,
    readback: wgpu::Buffer,
    ready: Arc<AtomicBool>,
    submitted: Instant,
}

/// The queries of one kernel batch being recorded.
pub(crate) struct BatchProfile {
    queries: wgpu::QuerySet,
    names: Vec<&'static str>,
}

impl BatchProfile {
    /// Queries for a new batch, when profiling is on.
    pub fn start(gpu: &Gpu) -> Option<BatchProfile> {
        if !gpu.profiling() {
            return None;
        }
        Some(BatchProfile {
            queries: queries(gpu, 2 * MAX_TIMED),
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

    /// Records the resolve and read-back copy at the end of the batch; hand the result to
    /// [`Gpu::profiled_submitted`] right after the submit.
    pub fn finish(
        self,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
    ) -> Option<(Vec<&'static str>, wgpu::Buffer)> {
        if self.names.is_empty() {
            return None;
        }
        let readback = resolve(gpu, encoder, &self.queries, self.names.len());
        Some((self.names, readback))
    }
}

fn queries(gpu: &Gpu, count: u32) -> wgpu::QuerySet {
    gpu.device().create_query_set(&wgpu::QuerySetDescriptor {
        label: Some("vramkit profile"),
        ty: wgpu::QueryType::Timestamp,
        count,
    })
}

/// Resolves `spans` pairs of queries into a new buffer to map for reading.
fn resolve(
    gpu: &Gpu,
    encoder: &mut wgpu::CommandEncoder,
    queries: &wgpu::QuerySet,
    spans: usize,
) -> wgpu::Buffer {
    let bytes = 16 * spans as u64;
    let buffer = |usage, label| {
        gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes,
            usage,
            mapped_at_creation: false,
        })
    };
    let resolved = buffer(
        wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
        "vramkit profile resolve",
    );
    let readback = buffer(
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        "vramkit profile readback",
    );
    encoder.resolve_query_set(queries, 0..2 * spans as u32, &resolved, 0);
    encoder.copy_buffer_to_buffer(&resolved, 0, &readback, 0, bytes);
    readback
}

impl Gpu {
    /// Turns GPU profiling on or off (see the module docs of `gpu::profile`). Errors on a
    /// device without timestamp queries.
    ///
    /// ```no_run
    /// let gpu = vramkit::Gpu::headless()?;
    /// let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// arena.record_history(Some(Default::default()));
    /// gpu.set_profiling(true)?;
    /// // ... kernels, uploads, downloads ...
    /// gpu.collect_profile(true)?;
    /// arena.history().unwrap().write_chrome_trace("trace.json")?; // GPU work on its own track
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn set_profiling(&self, on: bool) -> Result<()> {
        if on && !self.has(wgpu::Features::TIMESTAMP_QUERY) {
            return Err(Error::invalid(
                "GPU profiling on a device without timestamp queries",
                "use an adapter with TIMESTAMP_QUERY (Vulkan, Metal and DX12 GPUs have it)",
            ));
        }
        self.inner.profiler.on.store(on, Ordering::Relaxed);
        Ok(())
    }

    /// Whether profiling is on.
    pub fn profiling(&self) -> bool {
        self.inner.profiler.on.load(Ordering::Relaxed)
    }

    /// Submits `buffers` as [`Gpu::submit`] does; while profiling, between two timestamps,
    /// filed as one span named `name` ("upload", "download").
    pub(crate) fn submit_timed<I>(&self, name: &'static str, buffers: I) -> wgpu::SubmissionIndex
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        if !self.profiling() || !self.has(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS) {
            return self.submit(buffers);
        }
        let set = queries(self, 2);
        let device = self.device();
        let mut begin = device.create_command_encoder(&Default::default());
        begin.write_timestamp(&set, 0);
        let mut end = device.create_command_encoder(&Default::default());
        end.write_timestamp(&set, 1);
        let readback = resolve(self, &mut end, &set, 1);
        let index = self.submit(
            std::iter::once(begin.finish())
                .chain(buffers)
                .chain(std::iter::once(end.finish())),
        );
        self.profiled_submitted(vec![name], readback);
        index
    }

    /// Call right after submitting what a [`BatchProfile::finish`] (or `submit_timed`)
    /// resolved: its timestamps are read back without blocking.
    pub(crate) fn profiled_submitted(&self, names: Vec<&'static str>, readback: wgpu::Buffer) {
        let ready = Arc::new(AtomicBool::new(false));
        let flag = ready.clone();
        // The callback only raises the flag: the read happens on a caller's thread.
        readback.slice(..).map_async(wgpu::MapMode::Read, move |r| {
            flag.store(r.is_ok(), Ordering::Release)
        });
        let p = &self.inner.profiler;
        p.pending.lock().push(Pending {
            names,
            readback,
            ready,
            submitted: Instant::now(),
        });
        // Earlier submissions' timestamps that have come back, filed without waiting.
        self.file_ready();
    }

    /// Files the spans of profiled submissions that have come back: into the ring the
    /// arena's memory history reads, and the `vramkit_gpu_work_seconds` histogram with
    /// the `metrics` feature. With `wait`, first waits for all submitted GPU work; without,
    /// polls once. Returns the spans filed.
    pub fn collect_profile(&self, wait: bool) -> Result<usize> {
        if wait {
            self.wait_idle()?;
        } else {
            match self.poll_device(wgpu::PollType::Poll) {
                Ok(_) => {}
                Err(super::PollFailure::Lost) => return Err(self.lost_error()),
                Err(super::PollFailure::Wgpu(e)) => {
                    return Err(Error::Device {
                        during: "polling for GPU timestamps".into(),
                        message: e.to_string(),
                    })
                }
            }
        }
        Ok(self.file_ready())
    }

    /// Files what has come back, without polling.
    fn file_ready(&self) -> usize {
        let p = &self.inner.profiler;
        let done: Vec<Pending> = {
            let mut pending = p.pending.lock();
            if !pending.iter().any(|x| x.ready.load(Ordering::Acquire)) {
                return 0;
            }
            let (done, waiting) = std::mem::take(&mut *pending)
                .into_iter()
                .partition(|x| x.ready.load(Ordering::Acquire));
            *pending = waiting;
            done
        };
        let period = f64::from(self.queue().get_timestamp_period());
        let mut spans = Vec::new();
        for d in done {
            {
                let Ok(view) = d.readback.slice(..).get_mapped_range() else {
                    continue;
                };
                let ticks: &[u64] = bytemuck::cast_slice(&view);
                let ns = |tick: u64| (tick as f64 * period) as u64;
                let first = ticks.iter().step_by(2).copied().min().unwrap_or(0);
                for (name, t) in d.names.iter().zip(ticks.chunks_exact(2)) {
                    if t[1] < t[0] {
                        continue;
                    }
                    spans.push(Span {
                        name,
                        start: d.submitted + Duration::from_nanos(ns(t[0]) - ns(first)),
                        dur_ns: ns(t[1]) - ns(t[0]),
                    });
                }
            }
            d.readback.unmap();
        }
        #[cfg(feature = "metrics")]
        for s in &spans {
            metrics::histogram!("vramkit_gpu_work_seconds", "work" => s.name)
                .record(s.dur_ns as f64 * 1e-9);
        }
        let n = spans.len();
        let mut ring = p.spans.lock();
        for s in spans {
            if ring.len() >= MAX_SPANS {
                ring.pop_front();
            }
            ring.push_back(s);
        }
        n
    }

    /// The spans filed so far that started at or after `since`, oldest first.
    pub(crate) fn profile_spans(&self, since: Instant) -> Vec<Span> {
        self.inner
            .profiler
            .spans
            .lock()
            .iter()
            .filter(|s| s.start >= since)
            .cloned()
            .collect()
    }
}
