//! Compute kernels dispatched on arena allocations.
//!
//! A [`Batch`] records many dispatches into one command encoder and submits them together,
//! in order. Kernel parameters live in small uniform allocations from the arena's
//! `kernel-params` pool; they are dropped after submission and, like every arena range,
//! reused only once the GPU is done with them.

use crate::arena::{Allocation, PoolConfig, PoolId};
use crate::{shaders, Arena, Error, Gpu, Result};

/// Workgroup size of the 1-D kernels in `shaders/elementwise.wgsl`.
pub const WORKGROUP: u64 = 256;

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

/// The kernel library bound to an arena.
#[derive(Clone, Debug)]
pub struct Kernels {
    arena: Arena,
    params: PoolId,
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ElementwiseParams {
    n: u32,
    alpha: f32,
    beta: f32,
    value: f32,
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
        Ok(Kernels {
            arena: arena.clone(),
            params,
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
        Batch {
            kernels: self,
            encoder: self.arena.gpu().device().create_command_encoder(
                &wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit batch"),
                },
            ),
            keep: Vec::new(),
            dispatches: 0,
            _borrows: std::marker::PhantomData,
        }
    }
}

/// Dispatches recorded into one encoder, submitted together by [`Batch::submit`].
pub struct Batch<'a> {
    kernels: &'a Kernels,
    encoder: wgpu::CommandEncoder,
    keep: Vec<Allocation>,
    dispatches: usize,
    _borrows: std::marker::PhantomData<&'a Allocation>,
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
    /// Number of dispatches recorded so far.
    pub fn len(&self) -> usize {
        self.dispatches
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.dispatches == 0
    }

    fn params(&mut self, p: ElementwiseParams) -> Result<Allocation> {
        let k = self.kernels;
        let a = k.arena.alloc_in(
            k.params,
            std::mem::size_of::<ElementwiseParams>() as u64,
            "kernel params",
        )?;
        k.arena
            .gpu()
            .queue()
            .write_buffer(a.buffer(), a.offset(), bytemuck::bytes_of(&p));
        Ok(a)
    }

    /// Records one elementwise dispatch; `x` is `None` for kernels that read no input
    /// (their pipeline layout has no binding 1).
    fn elementwise(
        &mut self,
        entry: &str,
        n: u64,
        p: ElementwiseParams,
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
        let gpu = self.kernels.arena.gpu().clone();
        let pipeline = gpu.pipeline(&shaders::ELEMENTWISE, entry)?;
        let params = self.params(p)?;
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: params.binding_resource(),
        }];
        if let Some(x) = x {
            entries.push(wgpu::BindGroupEntry {
                binding: 1,
                resource: x.binding_resource(),
            });
        }
        entries.push(wgpu::BindGroupEntry {
            binding: 2,
            resource: y.binding_resource(),
        });
        let bind = gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some(entry),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &entries,
        });
        {
            let mut pass = self
                .encoder
                .begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: Some(entry),
                    timestamp_writes: None,
                });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &bind, &[]);
            let (gx, gy) = grid(n, WORKGROUP, &gpu);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        self.keep.push(params);
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
        self.elementwise(
            "axpy",
            n,
            ElementwiseParams {
                n: n as u32,
                alpha,
                beta: 1.0,
                value: 0.0,
            },
            Some(x),
            y,
        )?;
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
        self.elementwise(
            "axpby",
            n,
            ElementwiseParams {
                n: n as u32,
                alpha,
                beta,
                value: 0.0,
            },
            Some(x),
            y,
        )?;
        Ok(self)
    }

    /// `y[i] = x[i]` for `i < n`. Unlike `copy_buffer_to_buffer`, it works between two
    /// allocations of the same block.
    pub fn copy(&mut self, n: u64, x: &'a Allocation, y: &'a Allocation) -> Result<&mut Self> {
        self.elementwise(
            "copy",
            n,
            ElementwiseParams {
                n: n as u32,
                alpha: 1.0,
                beta: 0.0,
                value: 0.0,
            },
            Some(x),
            y,
        )?;
        Ok(self)
    }

    /// `y[i] = value` for `i < n`.
    pub fn fill(&mut self, n: u64, value: f32, y: &'a Allocation) -> Result<&mut Self> {
        self.elementwise(
            "fill",
            n,
            ElementwiseParams {
                n: n as u32,
                alpha: 0.0,
                beta: 0.0,
                value,
            },
            None,
            y,
        )?;
        Ok(self)
    }

    /// The encoder, to record copies or passes of your own between kernels.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        &mut self.encoder
    }

    /// Submits everything recorded, in order. Parameter allocations are released after the
    /// submit (and reused only once this work is done).
    pub fn submit(self) -> Result<wgpu::SubmissionIndex> {
        let gpu = self.kernels.arena.gpu();
        let encoder = self.encoder;
        let index = gpu.scoped("submitting a kernel batch", || {
            gpu.queue().submit([encoder.finish()])
        })?;
        drop(self.keep);
        Ok(index)
    }
}
