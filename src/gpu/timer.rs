//! GPU timing for benchmarks.
//!
//! Timestamp queries measure only the GPU's work; where the adapter lacks them
//! (`TIMESTAMP_QUERY_INSIDE_ENCODERS`), the wall clock around submit-and-wait is used and
//! the result says so, because it then includes submission and driver latency.

use web_time::Instant;

use crate::sync::rank::Mutex;

use super::Gpu;
use crate::{Error, Result};

/// Where a [`Timing`] came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimingSource {
    /// GPU timestamp queries around the recorded work.
    GpuTimestamps,
    /// Host wall clock around submit and wait (includes submission latency).
    WallClock,
}

/// A measured duration and how it was measured.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// Seconds the work took.
    pub seconds: f64,
    /// How it was measured.
    pub source: TimingSource,
    /// Host wall clock from submit to completion, always measured.
    pub wall_seconds: f64,
}

/// Query set and buffers reused across timings, created on first use.
pub(super) struct TimerState {
    slots: Mutex<Option<TimerSlots>>,
}

impl Default for TimerState {
    fn default() -> Self {
        TimerState {
            slots: Mutex::new(crate::sync::rank::TIMER_SLOTS, None),
        }
    }
}

struct TimerSlots {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
}

impl Gpu {
    /// Records the commands `record` writes, submits them and measures how long the GPU
    /// took. Blocks until the work is done.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// let t = gpu.time(|encoder| { /* record passes */ })?;
    /// println!("{:.3} ms ({:?})", t.seconds * 1e3, t.source);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn time(&self, record: impl FnOnce(&mut wgpu::CommandEncoder)) -> Result<Timing> {
        let mut encoder = self.device().create_command_encoder(&Default::default());
        record(&mut encoder);
        self.time_submission([encoder.finish()])
    }

    /// Submits `buffers` in one submission between two command buffers that only write a
    /// timestamp, waits for them, and returns the GPU time from the first to the last
    /// (the host's wall clock around submit and wait where the adapter has no timestamps
    /// inside encoders). What the host does meanwhile (a late wake-up of the waiting
    /// thread, say) is not in a GPU timing, as with events recorded on a CUDA stream.
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// let encoder = gpu.device().create_command_encoder(&Default::default());
    /// let t = gpu.time_submission([encoder.finish()])?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn time_submission<I>(&self, buffers: I) -> Result<Timing>
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        self.submit_timestamped(buffers).wait()
    }

    /// The first half of [`time_submission`](Self::time_submission): submits `buffers`
    /// between the two timestamps and returns without waiting, so that a caller can submit
    /// inside an error scope and wait outside it.
    pub(crate) fn submit_timestamped<I>(&self, buffers: I) -> TimedSubmission
    where
        I: IntoIterator<Item = wgpu::CommandBuffer>,
    {
        let device = self.device();
        let use_queries = self.has(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS);
        // Taken out of the lock until the timing is read and put back after: the wait
        // runs wgpu callbacks, which may time work themselves (they then make their own).
        let slots = use_queries.then(|| {
            let kept = self.inner.timer.slots.lock().take();
            kept.unwrap_or_else(|| TimerSlots {
                queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                    label: Some("vramkit timer"),
                    ty: wgpu::QueryType::Timestamp,
                    count: 2,
                }),
                resolve: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("vramkit timer resolve"),
                    size: 16,
                    usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                    mapped_at_creation: false,
                }),
                readback: device.create_buffer(&wgpu::BufferDescriptor {
                    label: Some("vramkit timer readback"),
                    size: 16,
                    usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                    mapped_at_creation: false,
                }),
            })
        });
        let stamp = |index: u32| {
            slots.as_ref().map(|s| {
                let mut encoder = device.create_command_encoder(&Default::default());
                encoder.write_timestamp(&s.queries, index);
                if index == 1 {
                    encoder.resolve_query_set(&s.queries, 0..2, &s.resolve, 0);
                    encoder.copy_buffer_to_buffer(&s.resolve, 0, &s.readback, 0, 16);
                }
                encoder.finish()
            })
        };
        let (begin, end) = (stamp(0), stamp(1));
        let start = Instant::now();
        let index = self.submit(begin.into_iter().chain(buffers).chain(end));
        TimedSubmission {
            gpu: self.clone(),
            index,
            slots,
            start,
        }
    }
}

/// Work submitted by [`Gpu::submit_timestamped`], not yet waited for.
pub(crate) struct TimedSubmission {
    gpu: Gpu,
    index: wgpu::SubmissionIndex,
    slots: Option<TimerSlots>,
    start: Instant,
}

impl TimedSubmission {
    /// Waits for the work and reads its timing; the query slots go back to the [`Gpu`].
    pub(crate) fn wait(mut self) -> Result<Timing> {
        let result = self.read();
        if let Some(s) = self.slots.take() {
            self.gpu.inner.timer.slots.lock().get_or_insert(s);
        }
        result
    }

    fn read(&self) -> Result<Timing> {
        let gpu = &self.gpu;
        gpu.wait_for(self.index.clone())?;
        let wall_seconds = self.start.elapsed().as_secs_f64();
        let Some(s) = &self.slots else {
            return Ok(Timing {
                seconds: wall_seconds,
                source: TimingSource::WallClock,
                wall_seconds,
            });
        };
        let ticks = gpu.map_read(&s.readback, 0, 16)?;
        let t: &[u64] = bytemuck::cast_slice(&ticks);
        let period = gpu.queue().get_timestamp_period() as f64;
        if t[1] < t[0] || period == 0.0 {
            return Err(Error::Device {
                during: "reading GPU timestamps".into(),
                message: format!("timestamps went backwards ({} -> {})", t[0], t[1]),
            });
        }
        Ok(Timing {
            seconds: (t[1] - t[0]) as f64 * period * 1e-9,
            source: TimingSource::GpuTimestamps,
            wall_seconds,
        })
    }
}
