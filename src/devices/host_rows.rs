//! The all-reduce whose additions run on the GPUs, reading the other devices' values
//! straight out of host memory that every device imports (`VK_EXT_external_memory_host`,
//! `gpu::host_import`): no copy and no addition on the host.
//!
//! # How it works
//! One host allocation, imported into every device of the set ([`HostRows`]), holds
//! [`SLOTS`] slots, each of `N` *rows* (one per device) and a *result row*, `stride`
//! floats each. The array is cut into pieces of at most `stride` floats, and each piece
//! into `N` segments (boundaries on 64-float lines). For piece `j`, in slot `j % SLOTS`:
//! 1. **Publish**: device `d` copies its values of every segment but its own into its row.
//! 2. **Sum**: once every device has published, device `k`'s kernel
//!    (`shaders/devices/sum_rows.wgsl`) sums segment `k` over the devices, reading its own
//!    values from its replica and the others' from their rows across the bus, and writes
//!    the sum into its replica and into the result row.
//! 3. **Gather**: once every device has summed, device `d` copies the result row's other
//!    segments into its replica.
//!
//! The host waits between the steps: wgpu gives one device no way to wait for another's
//! work. Piece `j + 1` is published while piece `j` is summed, into the other slot, once
//! piece `j - 1`'s gather (the last reader of that slot) is done. Each device sends
//! `B (N - 1) / N` (its rows) plus `B / N` (its sums) and receives `2 B (N - 1) / N`
//! for an array of `B` bytes: what the ring moves, with no host copy and no extra pass
//! over device memory for the additions.
//!
//! # Numerics
//! Segment `k`'s sum is made once, on device `k`, adding the devices' values in device
//! order from 0; every device copies that result, so all hold the same bits. Against the
//! exact sum the error is at most `(N - 1) u sum|x_i|` (u = 2^-24), and sums of integers
//! below 2^24 in magnitude are exact, as for the ring.
//!
//! # What it promises
//! - It returns once every device holds the sum; on an error it waits for every device
//!   to finish what it submitted first, so no copy outlives the caller's arrays.
//! - Writes a GPU makes into the host memory are made available to the host before the
//!   fence the next step waits for (`Gpu::host_read_barrier`, as the links do).

use std::ops::Range;
use std::sync::Arc;

use wgpu::util::DeviceExt;

use crate::arena::Typed;
use crate::gpu::{HostBuffer, HostMemory};
use crate::shaders::{shader, Shader};
use crate::{Gpu, Result, Runtime};

/// The additions of [`all_reduce`]: one segment of one piece, summed over the devices.
pub(crate) const SUM_ROWS: Shader = shader!("sum_rows.wgsl", "devices/sum_rows.wgsl");

/// Slots of host rows: the piece being summed and gathered, and the next one published.
pub(crate) const SLOTS: u64 = 2;

/// Floats a segment boundary is aligned to: 256 bytes, the storage binding offset
/// alignment most devices require, so a piece's replica range can be bound.
const LINE: u64 = 64;

/// `Params` of `sum_rows.wgsl` (same fields, same order).
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SumParams {
    start: u32,
    len: u32,
    devices: u32,
    own: u32,
    stride: u32,
    _pad: [u32; 3],
}

/// One host allocation imported into every device of a set: [`SLOTS`] slots of one row
/// per device and a result row, `stride` floats each (module docs).
pub(crate) struct HostRows {
    /// Floats per row.
    stride: u64,
    devices: usize,
    /// The same memory, as each device's buffer.
    on: Vec<HostBuffer>,
}

impl HostRows {
    /// Rows of `stride` floats (rounded up to a line) for `gpus`; `None` where a device
    /// does not import host memory or an import fails (the caller then runs the ring).
    pub(crate) fn new(gpus: &[&Gpu], stride: u64) -> Option<HostRows> {
        let align = gpus
            .iter()
            .map(|g| g.host_import_alignment())
            .collect::<Option<Vec<u64>>>()?
            .into_iter()
            .max()?;
        let stride = stride.max(LINE).next_multiple_of(LINE);
        let devices = gpus.len();
        let bytes = SLOTS * (devices as u64 + 1) * stride * 4;
        let host = Arc::new(HostMemory::new(bytes, align)?);
        let usage = wgpu::BufferUsages::STORAGE
            | wgpu::BufferUsages::COPY_SRC
            | wgpu::BufferUsages::COPY_DST;
        let on = gpus
            .iter()
            .map(|g| HostBuffer::import(g, &host, usage, "vramkit all-reduce rows"))
            .collect::<Option<Vec<_>>>()?;
        Some(HostRows {
            stride,
            devices,
            on,
        })
    }

    /// Floats per row.
    pub(crate) fn stride(&self) -> u64 {
        self.stride
    }

    /// Devices it serves.
    pub(crate) fn devices(&self) -> usize {
        self.devices
    }

    /// Byte offset of row `row` of slot `slot` (row `devices` is the result row).
    fn row(&self, slot: u64, row: usize) -> u64 {
        (slot * (self.devices as u64 + 1) + row as u64) * self.stride * 4
    }
}

/// The largest row (floats) `gpus` can bind: the kernel binds a slot (`devices` rows and
/// the result row) as one storage buffer, and a piece of a replica as another.
pub(crate) fn widest_row(gpus: &[&Gpu]) -> u64 {
    let binding = gpus
        .iter()
        .map(|g| g.limits().max_storage_buffer_binding_size)
        .min()
        .unwrap_or(0);
    (binding / 4 / (gpus.len() as u64 + 1)) / LINE * LINE
}

/// Whether `replica` can be a binding of the kernel on its device: a buffer with
/// `STORAGE` usage, at an offset the device can bind.
pub(crate) fn bindable(rt: &Runtime, replica: &Typed<f32>) -> bool {
    let a = replica.allocation();
    let align = u64::from(rt.gpu().limits().min_storage_buffer_offset_alignment).max(4);
    a.buffer().usage().contains(wgpu::BufferUsages::STORAGE) && a.offset().is_multiple_of(align)
}

/// `bytes` of `buffer` at `offset`, as a binding.
fn range(buffer: &wgpu::Buffer, offset: u64, bytes: u64) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset,
        size: std::num::NonZeroU64::new(bytes),
    })
}

/// Segment `k` of a piece of `len` floats cut among `n` devices, on [`LINE`]s.
fn segment(k: usize, n: usize, len: u64) -> Range<u64> {
    let cut = |k: usize| ((k as u64 * len / n as u64).next_multiple_of(LINE)).min(len);
    cut(k)..if k + 1 == n { len } else { cut(k + 1) }
}

/// Sums `replicas` (one per device of `devices`, in order, every one of the same length,
/// checked by the caller, each [`bindable`]) through `rows`; see the module docs.
/// Returns the seconds from `start` until the last sum was made.
pub(crate) fn all_reduce(
    devices: &[Runtime],
    replicas: &[&Typed<f32>],
    rows: &HostRows,
    start: web_time::Instant,
) -> Result<f64> {
    let run = Run {
        devices,
        replicas,
        rows,
    };
    let result = run.pipeline(start);
    if result.is_err() {
        // No copy may outlive the caller's arrays (a device that is gone runs nothing).
        for rt in devices {
            let _ = rt.gpu().wait_idle();
        }
    }
    result
}

/// One all-reduce under way.
struct Run<'a> {
    devices: &'a [Runtime],
    replicas: &'a [&'a Typed<f32>],
    rows: &'a HostRows,
}

/// One submission per device of a step of a piece (`None` where a device had nothing).
type Submitted = Vec<Option<wgpu::SubmissionIndex>>;

impl Run<'_> {
    fn pipeline(&self, start: web_time::Instant) -> Result<f64> {
        let len = self.replicas[0].len() as u64;
        let stride = self.rows.stride;
        let pieces: Vec<Range<u64>> = (0..len.div_ceil(stride))
            .map(|j| j * stride..((j + 1) * stride).min(len))
            .collect();
        let Some(first) = pieces.first() else {
            return Ok(0.0);
        };
        let mut published = self.publish(first, 0)?;
        let mut gathered: Option<Submitted> = None;
        let mut summed_at = 0.0;
        for (j, piece) in pieces.iter().enumerate() {
            let slot = j as u64 % SLOTS;
            self.wait(std::mem::take(&mut published))?;
            let summed = self.sum(piece, slot)?;
            if let Some(next) = pieces.get(j + 1) {
                // The next slot was piece j - 1's: its gather read it last.
                if let Some(g) = gathered.take() {
                    self.wait(g)?;
                }
                published = self.publish(next, (j as u64 + 1) % SLOTS)?;
            }
            self.wait(summed)?;
            summed_at = start.elapsed().as_secs_f64();
            if let Some(g) = gathered.take() {
                self.wait(g)?;
            }
            gathered = Some(self.gather(piece, slot)?);
        }
        if let Some(g) = gathered {
            self.wait(g)?;
        }
        Ok(summed_at)
    }

    /// Waits for each device's submission of a step.
    fn wait(&self, submitted: Submitted) -> Result<()> {
        for (d, index) in submitted.into_iter().enumerate() {
            if let Some(index) = index {
                let gpu = self.devices[d].gpu();
                gpu.wait_for(index)
                    .map_err(|e| super::on_device(d, &gpu.info().name, e))?;
            }
        }
        Ok(())
    }

    /// Step 1 for `piece` into `slot`, on every device.
    fn publish(&self, piece: &Range<u64>, slot: u64) -> Result<Submitted> {
        self.each(|d, _, encoder| {
            let replica = self.replicas[d].allocation();
            let n = self.devices.len();
            let mut any = false;
            for k in (0..n).filter(|&k| k != d) {
                let seg = segment(k, n, piece.end - piece.start);
                if seg.is_empty() {
                    continue;
                }
                encoder.copy_buffer_to_buffer(
                    replica.buffer(),
                    replica.offset() + (piece.start + seg.start) * 4,
                    self.rows.on[d].buffer(),
                    self.rows.row(slot, d) + seg.start * 4,
                    (seg.end - seg.start) * 4,
                );
                any = true;
            }
            Ok(any)
        })
    }

    /// Step 2 for `piece` in `slot`, on every device.
    fn sum(&self, piece: &Range<u64>, slot: u64) -> Result<Submitted> {
        self.each(|k, gpu, encoder| {
            let n = self.devices.len();
            let piece_len = piece.end - piece.start;
            let seg = segment(k, n, piece_len);
            if seg.is_empty() {
                return Ok(false);
            }
            let replica = self.replicas[k].allocation();
            let host = self.rows.on[k].buffer();
            let stride = self.rows.stride;
            let pipeline = gpu.pipeline(&SUM_ROWS, "sum_rows")?;
            let params = SumParams {
                start: seg.start as u32,
                len: (seg.end - seg.start) as u32,
                devices: n as u32,
                own: k as u32,
                stride: stride as u32,
                _pad: [0; 3],
            };
            let uniform = gpu
                .device()
                .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                    label: Some("vramkit all-reduce sum params"),
                    contents: bytemuck::bytes_of(&params),
                    usage: wgpu::BufferUsages::UNIFORM,
                });
            let bind = gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("vramkit all-reduce sum"),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: uniform.as_entire_binding(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: range(host, self.rows.row(slot, 0), (n as u64 + 1) * stride * 4),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: range(
                            replica.buffer(),
                            replica.offset() + piece.start * 4,
                            piece_len * 4,
                        ),
                    },
                ],
            });
            let (x, y) = crate::gpu::grid(seg.end - seg.start, 256, gpu);
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: Some("vramkit all-reduce sum"),
                timestamp_writes: None,
            });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            pass.dispatch_workgroups(x, y, 1);
            Ok(true)
        })
    }

    /// Step 3 for `piece` out of `slot`, on every device.
    fn gather(&self, piece: &Range<u64>, slot: u64) -> Result<Submitted> {
        self.each(|d, _, encoder| {
            let replica = self.replicas[d].allocation();
            let n = self.devices.len();
            let mut any = false;
            for k in (0..n).filter(|&k| k != d) {
                let seg = segment(k, n, piece.end - piece.start);
                if seg.is_empty() {
                    continue;
                }
                encoder.copy_buffer_to_buffer(
                    self.rows.on[d].buffer(),
                    self.rows.row(slot, n) + seg.start * 4,
                    replica.buffer(),
                    replica.offset() + (piece.start + seg.start) * 4,
                    (seg.end - seg.start) * 4,
                );
                any = true;
            }
            Ok(any)
        })
    }

    /// Records `record(d, gpu, encoder)` on every device `d` and submits what it recorded
    /// (when it says so) with a host-read barrier after it, inside an error scope.
    fn each(
        &self,
        record: impl Fn(usize, &Gpu, &mut wgpu::CommandEncoder) -> Result<bool>,
    ) -> Result<Submitted> {
        const DURING: &str = "an all-reduce through host memory";
        let mut submitted = Vec::with_capacity(self.devices.len());
        for (d, rt) in self.devices.iter().enumerate() {
            let gpu = rt.gpu();
            let blame = |e| super::on_device(d, &gpu.info().name, e);
            let index = gpu
                .scoped(DURING, || -> Result<Option<wgpu::SubmissionIndex>> {
                    let mut encoder =
                        gpu.device()
                            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                                label: Some(DURING),
                            });
                    if !record(d, gpu, &mut encoder)? {
                        return Ok(None);
                    }
                    let barrier = gpu.host_read_barrier();
                    Ok(Some(
                        gpu.submit(std::iter::once(encoder.finish()).chain(barrier)),
                    ))
                })
                .map_err(blame)?
                .map_err(blame)?;
            submitted.push(index);
        }
        Ok(submitted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Segments tile the piece, in order, on lines (but the last end), some empty when
    /// the piece is shorter than a line per device.
    #[test]
    fn segments_tile_a_piece_on_lines() {
        for n in 1..=8 {
            for len in [0u64, 1, 63, 64, 65, 1000, 4096, 100_003] {
                let mut at = 0;
                for k in 0..n {
                    let s = segment(k, n, len);
                    assert_eq!(s.start, at, "n {n} len {len} k {k}");
                    assert!(s.end >= s.start && s.end <= len);
                    assert!(s.start.is_multiple_of(LINE) || s.start == len);
                    at = s.end;
                }
                assert_eq!(at, len, "n {n} len {len}");
            }
        }
    }
}
