//! Compute kernels dispatched on arena allocations.
//!
//! A [`Batch`] records many dispatches into one command encoder and one compute pass, and
//! submits them together, in order. Kernel parameters go into a per-batch ring of uniform
//! slots (one arena allocation per 32 to 64 dispatches, written with one `write_buffer`) and are
//! selected with dynamic offsets, so a dispatch costs no buffer creation and, when the same
//! allocations are used again, no bind group creation either.
//!
//! Every elementwise kernel runs as a vec4 body (16-byte loads and stores) plus a scalar
//! tail for the last `n % 4` elements, both on the same bind group.

use std::collections::HashMap;
use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::arena::{Allocation, PoolConfig, PoolId};
use crate::shaders::{self, NamedLayout};
use crate::{Arena, Error, Gpu, Result};

/// Workgroup size of the 1-D kernels in `shaders/elementwise*.wgsl`.
pub const WORKGROUP: u64 = 256;
/// Parameter slots per uniform allocation of a batch.
const SLOTS_PER_CHUNK: u64 = 64;
/// Bind groups kept per kernel library before the cache is cleared.
const BIND_CACHE_LIMIT: usize = 4096;

/// Splits `units` work items, `per_group` per workgroup, into a 2-D grid that respects
/// `max_compute_workgroups_per_dimension` (so counts beyond 65535 workgroups work). Shaders
/// rebuild the linear index as `wg.y * num_workgroups.x + wg.x`.
pub fn grid(units: u64, per_group: u64, gpu: &Gpu) -> (u32, u32) {
    let groups = units.div_ceil(per_group.max(1)).max(1);
    let max = gpu.limits().max_compute_workgroups_per_dimension.max(1) as u64;
    if groups <= max {
        (groups as u32, 1)
    } else {
        (max as u32, groups.div_ceil(max).min(max) as u32)
    }
}

/// Parameters of the elementwise kernels; matches `Params` in the WGSL.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ElementwiseParams {
    end: u32,
    start: u32,
    alpha: f32,
    beta: f32,
    value: f32,
    _pad: [u32; 3],
}

const PARAMS_SIZE: u64 = std::mem::size_of::<ElementwiseParams>() as u64;

/// A buffer range as a bind group sees it. Owned (a buffer handle is a cheap clone), so the
/// batch can bind scratch ranges it owns itself.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Bound {
    buffer: wgpu::Buffer,
    offset: u64,
    size: u64,
}

impl Bound {
    fn of(a: &Allocation) -> Bound {
        Bound {
            buffer: a.buffer().clone(),
            offset: a.offset(),
            size: a.size(),
        }
    }

    fn resource(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: NonZeroU64::new(self.size),
        })
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct BindKey {
    params: Bound,
    x: Bound,
    y: Bound,
}

/// What a reduction computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reduce {
    /// Sum of the elements.
    Sum,
    /// Largest element.
    Max,
    /// Smallest element.
    Min,
    /// Sum divided by the element count.
    Mean,
}

impl Reduce {
    fn code(self) -> u32 {
        match self {
            Reduce::Sum | Reduce::Mean => 0,
            Reduce::Max => 1,
            Reduce::Min => 2,
        }
    }
}

/// Parameters of `shaders/reduce.wgsl`; same size as the elementwise ones.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ReduceParams {
    n: u32,
    cols: u32,
    rows: u32,
    op: u32,
    scale: f32,
    base: u32,
    out_base: u32,
    _pad: u32,
}

/// One pass of `shaders/reduce.wgsl`: rows of `cols` elements from `base` (in the
/// pass's element unit, f32 or vec4), at most `n` of them, into `y[out_base..]`.
#[derive(Clone, Copy)]
struct ReducePass {
    vec4: bool,
    n: u64,
    cols: u64,
    rows: u64,
    base: u64,
    out_base: u64,
    scale: f32,
}

/// vec4s one workgroup reduces in the first pass of a whole-array reduction: 8 per
/// invocation (32 floats) keeps enough loads in flight without leaving the second pass
/// much to do.
const REDUCE_SEGMENT_VEC4: u64 = 256 * 8;

struct BindCache {
    released: u64,
    groups: HashMap<BindKey, wgpu::BindGroup>,
}

struct Shared {
    layout: wgpu::BindGroupLayout,
    pipeline_layout: wgpu::PipelineLayout,
    cache: Mutex<BindCache>,
}

/// The kernel library bound to an arena.
#[derive(Clone)]
pub struct Kernels {
    arena: Arena,
    params: PoolId,
    stride: u64,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("arena", &self.arena)
            .finish()
    }
}

impl Kernels {
    /// Binds the kernels to `arena`, adding its `kernel-params` uniform pool if missing.
    pub fn new(arena: &Arena) -> Result<Kernels> {
        let params = match arena.pool("kernel-params") {
            Some(p) => p,
            None => arena.add_pool(
                "kernel-params",
                PoolConfig {
                    quota: Some(64 << 20),
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                },
            )?,
        };
        let device = arena.gpu().device();
        let storage = |binding| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only: false },
                has_dynamic_offset: false,
                // None: the vec4 pipelines need 16 bytes, the scalar ones 4; wgpu checks the
                // bound size against the pipeline at each dispatch.
                min_binding_size: None,
            },
            count: None,
        };
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("vramkit elementwise"),
            entries: &[
                wgpu::BindGroupLayoutEntry {
                    binding: 0,
                    visibility: wgpu::ShaderStages::COMPUTE,
                    ty: wgpu::BindingType::Buffer {
                        ty: wgpu::BufferBindingType::Uniform,
                        has_dynamic_offset: true,
                        min_binding_size: NonZeroU64::new(PARAMS_SIZE),
                    },
                    count: None,
                },
                storage(1),
                storage(2),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("vramkit elementwise"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        let stride =
            (arena.gpu().limits().min_uniform_buffer_offset_alignment as u64).max(PARAMS_SIZE);
        Ok(Kernels {
            arena: arena.clone(),
            params,
            stride,
            shared: Arc::new(Shared {
                layout,
                pipeline_layout,
                cache: Mutex::new(BindCache {
                    released: 0,
                    groups: HashMap::new(),
                }),
            }),
        })
    }

    /// The arena.
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// Starts a batch of dispatches. The batch borrows every allocation it is given until
    /// it is submitted, so an allocation cannot be dropped (and its range reused) while
    /// commands that read it are recorded but not yet submitted.
    pub fn batch<'a>(&'a self) -> Batch<'a> {
        let encoder =
            self.arena
                .gpu()
                .device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit batch"),
                });
        Batch {
            kernels: self,
            encoder,
            pass: None,
            chunks: Vec::new(),
            staged: Vec::new(),
            dispatches: 0,
            scratch: Vec::new(),
            _borrows: PhantomData,
        }
    }

    fn pipeline(&self, vec4: bool, entry: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        let shader = if vec4 {
            &shaders::ELEMENTWISE_VEC4
        } else {
            &shaders::ELEMENTWISE
        };
        self.pipeline_of(shader, entry)
    }

    /// A pipeline of any shader written for the shared layout (parameters, `x`, `y`).
    fn pipeline_of(
        &self,
        shader: &shaders::Shader,
        entry: &str,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let layout = NamedLayout {
            name: "elementwise",
            layout: &self.shared.pipeline_layout,
        };
        self.arena.gpu().pipeline_with_layout(shader, entry, layout)
    }

    fn bind_group(&self, params: &Allocation, x: Bound, y: Bound) -> wgpu::BindGroup {
        let key = BindKey {
            params: Bound {
                size: PARAMS_SIZE,
                ..Bound::of(params)
            },
            x,
            y,
        };
        let released = self.arena.blocks_released();
        let mut cache = self.shared.cache.lock();
        if cache.released != released || cache.groups.len() >= BIND_CACHE_LIMIT {
            // A block was destroyed (its bind groups are dead) or the cache is full.
            cache.groups.clear();
            cache.released = released;
        }
        if let Some(g) = cache.groups.get(&key) {
            return g.clone();
        }
        let group = self
            .arena
            .gpu()
            .device()
            .create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("vramkit elementwise"),
                layout: &self.shared.layout,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: key.params.resource(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: key.x.resource(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: key.y.resource(),
                    },
                ],
            });
        cache.groups.insert(key, group.clone());
        group
    }
}

/// Dispatches recorded into one encoder, submitted together by [`Batch::submit`].
pub struct Batch<'a> {
    kernels: &'a Kernels,
    encoder: wgpu::CommandEncoder,
    pass: Option<wgpu::ComputePass<'static>>,
    /// Uniform allocations holding this batch's parameter slots; the last one is filling.
    chunks: Vec<Allocation>,
    /// Scratch ranges (reduction partials) kept until submit.
    scratch: Vec<Allocation>,
    /// Parameter bytes of the chunk being filled, written to it when it is full or at submit.
    staged: Vec<u8>,
    dispatches: usize,
    _borrows: PhantomData<&'a Allocation>,
}

fn check_f32(a: &Allocation, n: u64, name: &str) -> Result<()> {
    if n * 4 > a.size() {
        return Err(Error::invalid(
            format!(
                "{name} ('{}') holds {} f32 elements, the kernel needs {n}",
                a.label(),
                a.size() / 4
            ),
            "allocate at least n * 4 bytes",
        ));
    }
    Ok(())
}

impl<'a> Batch<'a> {
    /// Number of kernel calls recorded so far.
    pub fn len(&self) -> usize {
        self.dispatches
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.dispatches == 0
    }

    fn slots_used(&self) -> u64 {
        self.staged.len() as u64 / self.kernels.stride
    }

    /// Makes sure the current chunk has `slots` free parameter slots.
    fn reserve_slots(&mut self, slots: u64) -> Result<()> {
        if !self.chunks.is_empty() && self.slots_used() + slots <= SLOTS_PER_CHUNK {
            return Ok(());
        }
        self.flush_params();
        let k = self.kernels;
        let chunk = k
            .arena
            .alloc_in(k.params, SLOTS_PER_CHUNK * k.stride, "kernel params")?;
        // Initialise the whole chunk now, before any dispatch that reads it is recorded.
        // wgpu zero-fills buffer ranges that are uninitialised when a command buffer is
        // recorded; a slot written only at submit could be zeroed after our write when
        // another thread's submission flushes it first (seen as kernels that did nothing).
        let zeros = vec![0u8; chunk.size() as usize];
        k.arena
            .gpu()
            .queue()
            .write_buffer(chunk.buffer(), chunk.offset(), &zeros);
        self.chunks.push(chunk);
        Ok(())
    }

    fn flush_params(&mut self) {
        if let Some(chunk) = self.chunks.last() {
            if !self.staged.is_empty() {
                self.kernels.arena.gpu().queue().write_buffer(
                    chunk.buffer(),
                    chunk.offset(),
                    &self.staged,
                );
            }
        }
        self.staged.clear();
    }

    fn push_params(&mut self, p: &[u8]) -> u32 {
        let offset = self.staged.len();
        self.staged.extend_from_slice(p);
        self.staged.resize(offset + self.kernels.stride as usize, 0);
        offset as u32
    }

    fn pass(&mut self) -> &mut wgpu::ComputePass<'static> {
        let encoder = &mut self.encoder;
        self.pass.get_or_insert_with(|| {
            encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some("vramkit batch"),
                    timestamp_writes: None,
                })
                .forget_lifetime()
        })
    }

    /// Records one dispatch of a kernel that uses the shared layout (parameters, `x`, `y`):
    /// its parameters go into the next slot of the batch's uniform ring.
    fn dispatch(
        &mut self,
        pipeline: &wgpu::ComputePipeline,
        params: &[u8],
        x: Bound,
        y: Bound,
        (gx, gy): (u32, u32),
    ) -> Result<()> {
        debug_assert_eq!(params.len() as u64, PARAMS_SIZE);
        self.reserve_slots(1)?;
        let k = self.kernels;
        let bind = {
            let chunk = self
                .chunks
                .last()
                .ok_or_else(|| Error::invalid("no parameter chunk", "internal"))?;
            k.bind_group(chunk, x, y)
        };
        let offset = self.push_params(params);
        let pass = self.pass();
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind, &[offset]);
        pass.dispatch_workgroups(gx, gy, 1);
        Ok(())
    }

    /// Records one elementwise kernel over `n` elements: a vec4 body and a scalar tail.
    /// The scalars are `[alpha, beta, value]`; `x` is `None` for kernels that read no input.
    fn elementwise(
        &mut self,
        entry: &str,
        n: u64,
        [alpha, beta, value]: [f32; 3],
        x: Option<&'a Allocation>,
        y: &'a Allocation,
    ) -> Result<()> {
        if n > u32::MAX as u64 {
            return Err(Error::invalid(
                format!("{n} elements exceed the 2^32 - 1 a kernel indexes"),
                "split the work",
            ));
        }
        if let Some(x) = x {
            check_f32(x, n, "x")?;
        }
        check_f32(y, n, "y")?;
        if n == 0 {
            return Ok(());
        }
        let k = self.kernels;
        let gpu = k.arena.gpu().clone();
        let body = n / 4;
        let tail = n % 4;
        let vec4_pipeline = if body > 0 {
            Some(k.pipeline(true, entry)?)
        } else {
            None
        };
        let scalar_pipeline = if tail > 0 {
            Some(k.pipeline(false, entry)?)
        } else {
            None
        };
        let params = |end: u64, start: u64| ElementwiseParams {
            end: end as u32,
            start: start as u32,
            alpha,
            beta,
            value,
            _pad: [0; 3],
        };
        let x = x.unwrap_or(y);
        if let Some(pipeline) = vec4_pipeline {
            self.dispatch(
                &pipeline,
                bytemuck::bytes_of(&params(body, 0)),
                Bound::of(x),
                Bound::of(y),
                grid(body, WORKGROUP, &gpu),
            )?;
        }
        if let Some(pipeline) = scalar_pipeline {
            self.dispatch(
                &pipeline,
                bytemuck::bytes_of(&params(n, body * 4)),
                Bound::of(x),
                Bound::of(y),
                grid(tail, WORKGROUP, &gpu),
            )?;
        }
        self.dispatches += 1;
        Ok(())
    }

    /// `y[i] = alpha * x[i] + y[i]` for `i < n`.
    pub fn axpy(
        &mut self,
        n: u64,
        alpha: f32,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.elementwise("axpy", n, [alpha, 1.0, 0.0], Some(x), y)?;
        Ok(self)
    }

    /// `y[i] = alpha * x[i] + beta * y[i]` for `i < n`.
    pub fn axpby(
        &mut self,
        n: u64,
        alpha: f32,
        x: &'a Allocation,
        beta: f32,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        self.elementwise("axpby", n, [alpha, beta, 0.0], Some(x), y)?;
        Ok(self)
    }

    /// `y[i] = x[i]` for `i < n`. Unlike `copy_buffer_to_buffer`, it works between two
    /// allocations of the same block.
    pub fn copy(&mut self, n: u64, x: &'a Allocation, y: &'a Allocation) -> Result<&mut Self> {
        self.elementwise("copy", n, [1.0, 0.0, 0.0], Some(x), y)?;
        Ok(self)
    }

    /// `y[i] = value` for `i < n`.
    pub fn fill(&mut self, n: u64, value: f32, y: &'a Allocation) -> Result<&mut Self> {
        self.elementwise("fill", n, [0.0, 0.0, value], None, y)?;
        Ok(self)
    }

    fn reduce_pass(&mut self, op: Reduce, pass: ReducePass, x: Bound, y: Bound) -> Result<()> {
        let k = self.kernels;
        let gpu = k.arena.gpu().clone();
        let shader = if pass.vec4 {
            &shaders::REDUCE_VEC4
        } else {
            &shaders::REDUCE
        };
        let pipeline = k.pipeline_of(shader, "reduce_rows")?;
        let params = ReduceParams {
            n: pass.n as u32,
            cols: pass.cols as u32,
            rows: pass.rows as u32,
            op: op.code(),
            scale: pass.scale,
            base: pass.base as u32,
            out_base: pass.out_base as u32,
            _pad: 0,
        };
        self.dispatch(
            &pipeline,
            bytemuck::bytes_of(&params),
            x,
            y,
            grid(pass.rows, 1, &gpu),
        )
    }

    /// `y[r] = op(x[r * cols .. r * cols + cols])` for every row `r < rows` of `x` viewed
    /// as a row-major `rows x cols` matrix; one workgroup per row.
    pub fn reduce_rows(
        &mut self,
        op: Reduce,
        rows: u64,
        cols: u64,
        x: &'a Allocation,
        y: &'a Allocation,
    ) -> Result<&mut Self> {
        if rows == 0 || cols == 0 {
            return Err(Error::invalid(
                "a reduction over no elements",
                "pass at least one row and one column",
            ));
        }
        let n = rows
            .checked_mul(cols)
            .filter(|&n| n <= u32::MAX as u64)
            .ok_or_else(|| {
                Error::invalid(
                    format!("{rows} x {cols} elements exceed the 2^32 - 1 a kernel indexes"),
                    "split the rows",
                )
            })?;
        check_f32(x, n, "x")?;
        check_f32(y, rows, "y")?;
        let scale = if op == Reduce::Mean {
            1.0 / cols as f32
        } else {
            1.0
        };
        let pass = ReducePass {
            vec4: false,
            n,
            cols,
            rows,
            base: 0,
            out_base: 0,
            scale,
        };
        self.reduce_pass(op, pass, Bound::of(x), Bound::of(y))?;
        self.dispatches += 1;
        Ok(self)
    }

    /// `out[0] = op(x[0..n])`. Large arrays take two passes: segments of 8192 elements read
    /// as vec4s into partials (scratch the batch allocates and keeps until submit; the 1..3
    /// trailing floats make one more partial), then the partials.
    pub fn reduce(
        &mut self,
        op: Reduce,
        n: u64,
        x: &'a Allocation,
        out: &'a Allocation,
    ) -> Result<&mut Self> {
        if n == 0 || n > u32::MAX as u64 {
            return Err(Error::invalid(
                format!("cannot reduce {n} elements"),
                "pass 1 to 2^32 - 1 elements",
            ));
        }
        check_f32(x, n, "x")?;
        check_f32(out, 1, "out")?;
        let scale = if op == Reduce::Mean {
            1.0 / n as f32
        } else {
            1.0
        };
        let single = |n| ReducePass {
            vec4: false,
            n,
            cols: n,
            rows: 1,
            base: 0,
            out_base: 0,
            scale,
        };
        let vec4s = n / 4;
        let rows = vec4s.div_ceil(REDUCE_SEGMENT_VEC4);
        if rows <= 1 {
            self.reduce_pass(op, single(n), Bound::of(x), Bound::of(out))?;
        } else {
            // Pass 1: the whole vec4s in segments, one partial each; the 1..3 floats past
            // the last vec4 add one more partial; pass 2 reduces the partials.
            let tail = n % 4;
            let slots = rows + u64::from(tail > 0);
            let partials = self.kernels.arena.alloc(slots * 4, "reduce partials")?;
            let p = Bound::of(&partials);
            self.scratch.push(partials);
            let body = ReducePass {
                vec4: true,
                n: vec4s,
                cols: REDUCE_SEGMENT_VEC4,
                rows,
                base: 0,
                out_base: 0,
                scale: 1.0,
            };
            self.reduce_pass(op, body, Bound::of(x), p.clone())?;
            if tail > 0 {
                let rest = ReducePass {
                    vec4: false,
                    n: tail,
                    cols: tail,
                    rows: 1,
                    base: vec4s * 4,
                    out_base: rows,
                    scale: 1.0,
                };
                self.reduce_pass(op, rest, Bound::of(x), p.clone())?;
            }
            self.reduce_pass(op, single(slots), p, Bound::of(out))?;
        }
        self.dispatches += 1;
        Ok(self)
    }

    /// The encoder, to record copies or passes of your own between kernels. Ends the
    /// batch's current compute pass; the next kernel starts a new one.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.encoder
    }

    /// Submits everything recorded, in order. Parameter allocations are released after the
    /// submit (and reused only once this work is done).
    pub fn submit(mut self) -> Result<wgpu::SubmissionIndex> {
        self.pass = None;
        self.flush_params();
        let gpu = self.kernels.arena.gpu().clone();
        let encoder = self.encoder;
        let index = gpu.scoped("submitting a kernel batch", || {
            gpu.queue().submit([encoder.finish()])
        })?;
        drop(self.chunks);
        drop(self.scratch);
        Ok(index)
    }
}
