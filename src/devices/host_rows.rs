//! The all-reduce whose additions run on the GPUs, reading the other devices' values
//! straight out of host memory that every device imports (`VK_EXT_external_memory_host`,
//! `gpu::host_import`): no copy and no addition on the host.
//!
//! # How it works
//! One host allocation, imported into every device of the set ([`HostRows`]), holds
//! [`SLOTS`] slots, each of `N` *rows* (one per device) and a *result row*, `stride`
//! floats each. The array is cut into pieces of at most `stride` floats, and each piece
//! into `N` segments (boundaries on 64-float lines); piece `j` uses slot `j % 2`. Step
//! `s` (`0..pieces + 2`) is one dispatch per device (`shaders/devices/all_reduce_step.wgsl`,
//! by vec4 where the array's length is a multiple of 4: 16-byte accesses across the bus)
//! of three jobs on disjoint memory:
//! 1. **publish** piece `s`: device `d` writes its values of every segment but its own
//!    into its row (device to host);
//! 2. **sum** piece `s - 1`: device `k` sums segment `k` over the devices, its own values
//!    from its replica and the others' read from their rows across the bus, and writes
//!    the sum into its replica and into the result row (host to device, and back);
//! 3. **gather** piece `s - 2`: device `d` reads the others' sums out of the result row
//!    into its replica (host to device).
//!
//! So each step moves bytes both ways over each device's link at once, from one kernel:
//! per array byte a device sends 1 (its rows `(N - 1) / N`, its sums `1 / N`) and
//! receives `2 (N - 1) / N`. The host waits for every device's step `s` before
//! submitting step `s + 1` anywhere (wgpu gives one device no way to wait for another's
//! work): piece `s`'s rows are then complete for the sums, and the slot piece `s + 1`
//! writes was last read (by piece `s - 1`'s sums and gather) in a finished step.
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

/// One step of [`all_reduce`] on one device: publish, sum and gather (module docs), an
/// f32 an invocation.
pub(crate) const ALL_REDUCE_STEP: Shader =
    shader!("all_reduce_step.wgsl (f32)", "devices/all_reduce_step.wgsl");
/// [`ALL_REDUCE_STEP`] a vec4 an invocation (16-byte accesses across the bus), for arrays
/// whose length is a multiple of 4.
pub(crate) const ALL_REDUCE_STEP_VEC4: Shader = shader!(
    "all_reduce_step.wgsl (vec4)",
    "devices/all_reduce_step.wgsl"
)
.with(&[("VEC4", "")]);

/// Slots of host rows: a piece's rows are read while the next piece's are written.
const SLOTS: u64 = 2;

/// Floats a segment boundary is aligned to: 256 bytes, the storage binding offset
/// alignment most devices require, so a piece's replica range can be bound.
const LINE: u64 = 64;

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
        let host = Arc::new(HostMemory::new(bytes_for(devices, stride), align)?);
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

    /// Whether these rows serve an all-reduce over `devices` devices in rows of `stride`
    /// floats (wider rows serve too: pieces are as wide as the rows).
    pub(crate) fn serve(&self, devices: usize, stride: u64) -> bool {
        self.devices == devices && self.stride >= stride
    }

    /// Byte offset of row `row` of slot `slot` (row `devices` is the result row).
    fn row(&self, slot: u64, row: usize) -> u64 {
        (slot * (self.devices as u64 + 1) + row as u64) * self.stride * 4
    }

    /// Bytes of all slots.
    fn bytes(&self) -> u64 {
        bytes_for(self.devices, self.stride)
    }
}

/// Bytes of host memory the rows of `devices` devices, `stride` floats each, take.
pub(crate) fn bytes_for(devices: usize, stride: u64) -> u64 {
    SLOTS * (devices as u64 + 1) * stride * 4
}

/// Floats per row for an all-reduce of `len` floats over `gpus`, in rows of about
/// `chunk` bytes: no wider than the array needs, nor than the kernel can bind (every
/// slot as one storage buffer, three pieces of a replica as another; `u32` indices).
pub(crate) fn stride_for(gpus: &[&Gpu], chunk: u64, len: u64) -> u64 {
    let binding = gpus
        .iter()
        .map(|g| g.limits().max_storage_buffer_binding_size)
        .min()
        .unwrap_or(0)
        .min(u32::MAX as u64);
    let slots = SLOTS * (gpus.len() as u64 + 1);
    let widest = (binding / 4 / slots.max(3)) / LINE * LINE;
    (chunk / 4).min(widest).min(len.next_multiple_of(LINE))
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
    let len = replicas.first().map_or(0, |r| r.len() as u64);
    let stride = rows.stride;
    let run = Run {
        devices,
        replicas,
        rows,
        pieces: (0..len.div_ceil(stride))
            .map(|j| j * stride..((j + 1) * stride).min(len))
            .collect(),
        wide: len.is_multiple_of(4),
    };
    let result = run.steps(start);
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
    /// The array's pieces.
    pieces: Vec<Range<u64>>,
    /// Steps run by vec4 (the array's length is a multiple of 4).
    wide: bool,
}

/// `Params` of `all_reduce_step.wgsl` (same fields, same order; element indices).
#[repr(C)]
#[derive(Clone, Copy, Default, bytemuck::Pod, bytemuck::Zeroable)]
struct StepParams {
    devices: u32,
    own: u32,
    stride: u32,
    publish_count: u32,
    sum_count: u32,
    gather_count: u32,
    publish_at: u32,
    publish_skip: u32,
    publish_skip_len: u32,
    publish_row: u32,
    sum_at: u32,
    sum_start: u32,
    sum_rows: u32,
    gather_at: u32,
    gather_skip: u32,
    gather_skip_len: u32,
    gather_result: u32,
    _pad: [u32; 3],
}

impl StepParams {
    /// The same, every index and count in vec4s (each a multiple of 4 floats).
    fn in_vec4s(self) -> StepParams {
        let q = |v: u32| {
            debug_assert!(v.is_multiple_of(4), "{v} floats is no whole vec4");
            v / 4
        };
        StepParams {
            devices: self.devices,
            own: self.own,
            stride: q(self.stride),
            publish_count: q(self.publish_count),
            sum_count: q(self.sum_count),
            gather_count: q(self.gather_count),
            publish_at: q(self.publish_at),
            publish_skip: q(self.publish_skip),
            publish_skip_len: q(self.publish_skip_len),
            publish_row: q(self.publish_row),
            sum_at: q(self.sum_at),
            sum_start: q(self.sum_start),
            sum_rows: q(self.sum_rows),
            gather_at: q(self.gather_at),
            gather_skip: q(self.gather_skip),
            gather_skip_len: q(self.gather_skip_len),
            gather_result: q(self.gather_result),
            _pad: [0; 3],
        }
    }
}

impl Run<'_> {
    /// Steps `0..pieces + 2`, each on every device once all finished the step before.
    /// Returns the seconds from `start` to the end of the last step that summed.
    fn steps(&self, start: web_time::Instant) -> Result<f64> {
        let last = self.pieces.len() + 2;
        let mut summed_at = 0.0;
        for s in 0..last {
            let submitted = self.submit_step(s)?;
            for (d, index) in submitted.into_iter().enumerate() {
                if let Some(index) = index {
                    let gpu = self.devices[d].gpu();
                    gpu.wait_for(index)
                        .map_err(|e| super::on_device(d, &gpu.info().name, e))?;
                }
            }
            // Step `pieces` summed the last piece.
            if s == self.pieces.len() {
                summed_at = start.elapsed().as_secs_f64();
            }
        }
        Ok(summed_at)
    }

    /// Records step `s` on device `d` (module docs); `false` where it has nothing to do.
    fn record(
        &self,
        s: usize,
        d: usize,
        gpu: &Gpu,
        encoder: &mut wgpu::CommandEncoder,
    ) -> Result<bool> {
        let n = self.devices.len();
        let piece = |k: Option<usize>| k.and_then(|k| self.pieces.get(k));
        let (publish, sum, gather) = (
            piece(Some(s)),
            piece(s.checked_sub(1)),
            piece(s.checked_sub(2)),
        );
        // The replica's window: pieces s - 2 to s (those there are).
        let Some(window) = [gather, sum, publish]
            .into_iter()
            .flatten()
            .cloned()
            .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end))
        else {
            return Ok(false);
        };
        let slot = |k: usize| k as u64 % SLOTS;
        let own = |r: &Range<u64>| segment(d, n, r.end - r.start);
        let at = |r: &Range<u64>| (r.start - window.start) as u32;
        // A job over piece `r` but this device's segment: its count, where the piece is
        // in the window, and the segment passed over.
        let all_but_own = |r: &Range<u64>| {
            let o = own(r);
            let own_len = (o.end - o.start) as u32;
            let count = (r.end - r.start) as u32 - own_len;
            (count, at(r), o.start as u32, own_len)
        };
        let mut p = StepParams {
            devices: n as u32,
            own: d as u32,
            stride: self.rows.stride as u32,
            ..Default::default()
        };
        if let Some(r) = publish {
            (
                p.publish_count,
                p.publish_at,
                p.publish_skip,
                p.publish_skip_len,
            ) = all_but_own(r);
            p.publish_row = (self.rows.row(slot(s), d) / 4) as u32;
        }
        if let Some(r) = sum {
            let o = own(r);
            p.sum_count = (o.end - o.start) as u32;
            p.sum_at = at(r);
            p.sum_start = o.start as u32;
            p.sum_rows = (self.rows.row(slot(s - 1), 0) / 4) as u32;
        }
        if let Some(r) = gather {
            (
                p.gather_count,
                p.gather_at,
                p.gather_skip,
                p.gather_skip_len,
            ) = all_but_own(r);
            p.gather_result = (self.rows.row(slot(s - 2), n) / 4) as u32;
        }
        // By vec4 where every index is a multiple of 4: the array's length is (segments
        // and rows are on lines).
        let (p, shader) = match self.wide {
            true => (p.in_vec4s(), &ALL_REDUCE_STEP_VEC4),
            false => (p, &ALL_REDUCE_STEP),
        };
        let total = u64::from(p.publish_count) + u64::from(p.sum_count) + u64::from(p.gather_count);
        if total == 0 {
            return Ok(false);
        }
        let replica = self.replicas[d].allocation();
        let pipeline = gpu.pipeline(shader, "all_reduce_step")?;
        let uniform = gpu
            .device()
            .create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("vramkit all-reduce step"),
                contents: bytemuck::bytes_of(&p),
                usage: wgpu::BufferUsages::UNIFORM,
            });
        let host = self.rows.on[d].buffer();
        let bind = gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("vramkit all-reduce step"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: uniform.as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: range(host, 0, self.rows.bytes()),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: range(
                        replica.buffer(),
                        replica.offset() + window.start * 4,
                        (window.end - window.start) * 4,
                    ),
                },
            ],
        });
        let (x, y) = crate::gpu::grid(total, 256, gpu);
        let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: Some("vramkit all-reduce step"),
            timestamp_writes: None,
        });
        pass.set_pipeline(&pipeline);
        pass.set_bind_group(0, &bind, &[]);
        pass.dispatch_workgroups(x, y, 1);
        Ok(true)
    }

    /// Records step `s` on every device and submits it (where the device has something
    /// to do) with a host-read barrier after it, inside an error scope.
    fn submit_step(&self, s: usize) -> Result<Vec<Option<wgpu::SubmissionIndex>>> {
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
                    if !self.record(s, d, gpu, &mut encoder)? {
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
