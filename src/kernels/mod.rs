//! Compute kernels dispatched on arena allocations.
//!
//! A [`Batch`] records many dispatches into one command encoder and one compute pass, and
//! submits them together, in order. Kernel parameters go into a per-batch ring of uniform
//! slots (one arena allocation per 64 dispatches, written with one `write_buffer`) and are
//! selected with dynamic offsets, so a dispatch costs no buffer creation and, when the same
//! allocations are used again, no bind group creation either.
//!
//! Every kernel uses one shape of bind group: a 32-byte parameter block (dynamic uniform)
//! and three storage ranges `x`, `y`, `z`. A kernel that needs fewer binds the same range
//! twice; one bind group then serves every kernel over the same allocations. All three
//! ranges are writable, since arena ranges share buffers; where the inputs lie in buffers
//! of their own, the matmul, the short-row softmax and the reduction's first pass bind
//! them read-only instead (a layout per `Access`), which the H100 rewards.
//!
//! | file | kernels |
//! |---|---|
//! | [`elementwise`] | fill, copy, axpy, axpby, scale, unary maps (relu, gelu, exp, ...), binary ops |
//! | [`reduce`] | sum, max, min, mean over arrays and rows, subgroup and portable variants |
//! | [`scan`] | inclusive and exclusive prefix sums of u32 and f32 (single pass, decoupled look-back) |
//! | [`transpose`] | tiled 2-D transpose |
//! | [`matmul`] | f32 and f16-input matrix products, register-blocked |
//! | [`softmax`] | row-wise softmax |
//! | [`cast`] | f32 <-> f16 storage |
//!
//! Every kernel has a CPU reference in the tests (`tests/it/kernels.rs`), run on random inputs
//! at awkward sizes.

mod batch;
mod bind;
pub mod cast;
pub mod elementwise;
pub mod matmul;
mod operands;
mod params;
pub mod reduce;
pub mod scan;
pub mod softmax;
pub mod transpose;

pub use batch::Batch;
use batch::{check_count, check_no_overlap, shape};
use bind::{Access, BindCache, Bindings, Bound};
pub use elementwise::{Binary, Unary};
pub use matmul::{MatmulBatch, MatmulInput, MatmulShape};
pub use operands::{MatmulElement, Operand, ScanElement};
pub use reduce::Reduce;
pub use scan::{ScanKind, ScanType};

use std::collections::HashMap;
use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::sync::rank::{self as lock_rank, Mutex};

use crate::arena::{Allocation, PoolConfig, PoolId};
use crate::gpu::profile::BatchProfile;
use crate::shaders::{self, NamedLayout};
use crate::{Arena, Error, Gpu, Result, Timing};

/// Workgroup size of the 1-D kernels.
pub const WORKGROUP: u64 = 256;
/// Parameter slots per uniform allocation of a batch.
const SLOTS_PER_CHUNK: u64 = 64;
/// Bind groups kept per kernel library before the cache is cleared.
const BIND_CACHE_LIMIT: usize = 4096;
/// Bytes of every kernel's parameter block (eight 32-bit words).
const PARAMS_SIZE: u64 = 32;

pub use crate::gpu::grid;

/// A kernel's parameter block as the uniform ring holds it: eight 32-bit words, made from
/// the family's struct (`params.rs`), which its WGSL `Params` mirrors.
type Params = [u32; 8];

/// The kernels' layouts, one per [`Access`], and bind groups. Every storage binding is
/// writable in the shared layout (arena ranges share buffers, see
/// `shaders/elementwise/elementwise.wgsl`); the others bind inputs read-only, for kernels whose inputs
/// are in buffers of their own (the compiler may then cache and reorder their loads; what
/// that gains the matmuls and the softmax is in BENCHMARKS.md, Kernels).
struct Shared {
    /// By `Access as usize`: the bind group layout and its pipeline layout.
    layouts: [(wgpu::BindGroupLayout, wgpu::PipelineLayout); 3],
    cache: Mutex<BindCache>,
    /// The one-dispatch whole-array reduction's state (`shaders/shared/reduce_whole.wgsl`): a done
    /// counter and two words per segment, zeroed by wgpu at creation and left reset by
    /// each call. Outside the arena: 4 KiB that lives as long as the kernels.
    reduce_state: wgpu::Buffer,
    /// The last epoch a whole-array reduction took (see [`Shared::next_reduce_epoch`]).
    reduce_epoch: AtomicU32,
    /// The scans' state (see [`scan::ScanState`]).
    scan_state: Mutex<scan::ScanState>,
    /// Bound where a kernel leaves a binding unused (`bind::spare`).
    spare: wgpu::Buffer,
    /// The partial sums of split products (`matmul::split_scratch`): taken from the arena
    /// at the first split product, kept as long as the kernels. One allocation serves
    /// every batch: each split product writes and sums its parts in one batch, and the
    /// queue runs batches one after the other.
    split_scratch: Mutex<Option<Allocation>>,
}

/// The epoch after `previous` (0 before the first) among `1..=epochs`: the tag a call's
/// published state words carry (`shaders/shared/split_word.wgsl`). Never 0, which unwritten state
/// reads as, and never the previous call's; a plain counter would repeat one where it
/// wraps at 2^32.
fn next_epoch(previous: u32, epochs: u32) -> u32 {
    previous % epochs + 1
}

impl Shared {
    /// The next whole-array reduction's epoch, 1..=65535 (16 bits of each published word).
    fn next_reduce_epoch(&self) -> u32 {
        let next = |e: u32| next_epoch(e, 65535);
        let previous = self
            .reduce_epoch
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |e| Some(next(e)))
            .unwrap_or_else(|e| e);
        next(previous)
    }
}

/// Which implementation of a kernel runs where the adapter offers a choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KernelOptions {
    /// Use subgroup operations in reductions and the row softmax when the device has
    /// `SUBGROUP`.
    pub subgroups: bool,
    /// Read and write f16 natively (`enable f16`) when the device has `SHADER_F16`; when
    /// false or absent, f16 pairs are packed in `u32` words with `pack2x16float`. The
    /// memory layout is the same either way.
    pub native_f16: bool,
    /// Run the f16 matmul on the GPU's matrix units (tensor cores) where the context has
    /// them ([`Gpu::has_matrix_units`](crate::Gpu::has_matrix_units)).
    pub matrix_units: bool,
    /// Split a product with few output tiles and a long k into parts along k that run side
    /// by side, then sum them (split-k; [`Batch::matmul`], on the matrix units and the
    /// four-element kernel). The first split product takes a 16 MiB allocation for the
    /// partial sums from the kernels' arena (labelled `vramkit matmul partial sums`), kept
    /// as long as the kernels; without room for it products run unsplit. False (and in
    /// [`portable`](Self::portable)): every product runs in one pass.
    pub split_k: bool,
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            subgroups: true,
            native_f16: true,
            matrix_units: true,
            split_k: true,
        }
    }
}

impl KernelOptions {
    /// The portable kernels only: what runs on an adapter without optional features.
    pub fn portable() -> KernelOptions {
        KernelOptions {
            subgroups: false,
            native_f16: false,
            matrix_units: false,
            split_k: false,
        }
    }
}

/// The kernel library bound to an arena.
///
/// ```no_run
/// # fn main() -> vramkit::Result<()> {
/// use vramkit::{kernels::Kernels, Arena, Gpu};
/// let arena = Arena::new(&Gpu::headless()?, Default::default())?;
/// let kernels = Kernels::new(&arena)?;
/// let x = arena.alloc(4 << 20, "x")?;
/// let y = arena.alloc(4 << 20, "y")?;
/// let mut batch = kernels.batch();
/// let (x, y) = ((&x, 1 << 20), (&y, 1 << 20)); // the first 2^20 f32 of each
/// batch.fill(1.0, x)?.fill(2.0, y)?.axpy(0.5, x, y)?;
/// batch.submit()?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct Kernels {
    arena: Arena,
    params: PoolId,
    stride: u64,
    subgroups: bool,
    native_f16: bool,
    matrix_units: bool,
    split_k: bool,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("arena", &self.arena)
            .field("subgroups", &self.subgroups)
            .field("native_f16", &self.native_f16)
            .field("matrix_units", &self.matrix_units)
            .field("split_k", &self.split_k)
            .finish()
    }
}

impl Kernels {
    /// Binds the kernels to `arena`, adding its `kernel-params` uniform pool if missing, and
    /// uses every optional feature the device has.
    pub fn new(arena: &Arena) -> Result<Kernels> {
        Kernels::with_options(arena, KernelOptions::default())
    }

    /// Like [`new`](Self::new), choosing the variants: [`KernelOptions::portable`] runs the
    /// kernels an adapter without optional features would run (tests compare both).
    pub fn with_options(arena: &Arena, options: KernelOptions) -> Result<Kernels> {
        let params = match arena.pool("kernel-params") {
            Some(p) => p,
            None => arena.add_pool(
                "kernel-params",
                PoolConfig {
                    quota: Some(64 << 20),
                    usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                    ..Default::default()
                },
            )?,
        };
        // Every batch frees its parameters; under a full budget an empty parameter block
        // given back would be created again by the next batch, trading places with the
        // blocks the data needs.
        arena.keep_one_block(params);
        let gpu = arena.gpu();
        let device = gpu.device();
        let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
            binding,
            visibility: wgpu::ShaderStages::COMPUTE,
            ty: wgpu::BindingType::Buffer {
                ty: wgpu::BufferBindingType::Storage { read_only },
                has_dynamic_offset: false,
                // None: the vec4 pipelines need 16 bytes, the scalar ones 4; wgpu checks the
                // bound size against the pipeline at each dispatch.
                min_binding_size: None,
            },
            count: None,
        };
        // Downlevel devices (WebGL2 limits: no storage buffers in compute) refuse this
        // layout: a typed error, not a panic in wgpu's uncaptured-error handler.
        let layouts = gpu
            .scoped("creating the kernels' bind group layouts", || {
                Access::ALL.map(|access| Self::layouts(device, |b| storage(b, access.read_only(b))))
            })
            .map_err(|e| {
                Error::invalid(
                    format!("this device cannot run vramkit's kernels: {e}"),
                    "kernels need compute shaders with 4 storage buffers per stage; use an \
                     adapter with full WebGPU limits",
                )
            })?;
        let stride = (gpu.limits().min_uniform_buffer_offset_alignment as u64).max(PARAMS_SIZE);
        let spare = gpu.scoped("creating the kernels' spare binding", || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("vramkit unused bindings"),
                size: bind::SPARE_BYTES,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        })?;
        let reduce_state = gpu.scoped("creating the reductions' state", || {
            device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("vramkit reduce state"),
                size: reduce::STATE_BYTES,
                usage: wgpu::BufferUsages::STORAGE,
                mapped_at_creation: false,
            })
        })?;
        Ok(Kernels {
            arena: arena.clone(),
            params,
            stride,
            subgroups: options.subgroups && gpu.has(wgpu::Features::SUBGROUP),
            native_f16: options.native_f16 && gpu.has(wgpu::Features::SHADER_F16),
            matrix_units: options.matrix_units && gpu.has_matrix_units(),
            split_k: options.split_k,
            shared: Arc::new(Shared {
                spare,
                layouts,
                cache: Mutex::new(
                    lock_rank::KERNEL_BINDINGS,
                    BindCache {
                        released: 0,
                        groups: HashMap::new(),
                    },
                ),
                reduce_state,
                reduce_epoch: AtomicU32::new(0),
                scan_state: Mutex::new(lock_rank::SCAN_STATE, scan::ScanState::default()),
                split_scratch: Mutex::new(lock_rank::SPLIT_SCRATCH, None),
            }),
        })
    }

    /// A bind group layout (parameters, `x`, `y`, `z`) and its pipeline layout.
    fn layouts(
        device: &wgpu::Device,
        storage: impl Fn(u32) -> wgpu::BindGroupLayoutEntry,
    ) -> (wgpu::BindGroupLayout, wgpu::PipelineLayout) {
        let layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("vramkit kernels"),
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
                storage(3),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("vramkit kernels"),
            bind_group_layouts: &[Some(&layout)],
            immediate_size: 0,
        });
        (layout, pipeline_layout)
    }

    /// The arena.
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// The variants in use: what was asked for, limited to what the device has.
    pub fn options(&self) -> KernelOptions {
        KernelOptions {
            subgroups: self.subgroups,
            native_f16: self.native_f16,
            matrix_units: self.matrix_units,
            split_k: self.split_k,
        }
    }

    /// Starts a batch of dispatches. The batch borrows every allocation it is given until
    /// it is submitted, so an allocation cannot be dropped (and its range reused) while
    /// commands that read it are recorded but not yet submitted.
    pub fn batch<'a>(&'a self) -> Batch<'a> {
        let dry = self.arena.is_dry_run();
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
            scratch: Vec::new(),
            staged: Vec::new(),
            dispatches: 0,
            dry,
            profile: if dry {
                None
            } else {
                BatchProfile::start(self.arena.gpu())
            },
            _borrows: PhantomData,
        }
    }

    /// The pipeline of `shader`'s `entry` in the layout `io` is bound with
    /// (`Bindings::access`; the shader must declare the same bindings read-only).
    fn pipeline(
        &self,
        shader: &shaders::Shader,
        entry: &str,
        io: &Bindings,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let layout = NamedLayout {
            name: io.access.name(),
            layout: &self.shared.layouts[io.access as usize].1,
        };
        self.arena.gpu().pipeline_with_layout(shader, entry, layout)
    }
}
