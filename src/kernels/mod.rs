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
//! Every kernel has a CPU reference in the tests (`tests/kernels.rs`), run on random inputs
//! at awkward sizes.

pub mod cast;
pub mod elementwise;
pub mod matmul;
pub mod reduce;
pub mod scan;
pub mod softmax;
pub mod transpose;
mod typed;

pub use elementwise::{Binary, Unary};
pub use matmul::MatmulInput;
pub use reduce::Reduce;
pub use scan::{ScanKind, ScanType};
pub use typed::{MatmulElement, ScanElement, TypedBatch};

use std::collections::HashMap;
use std::marker::PhantomData;
use std::num::NonZeroU64;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use crate::lock_rank::{self, Mutex};

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

/// A kernel's parameter block: eight 32-bit words, each kernel's `Params` struct in WGSL.
type Params = [u32; 8];

/// A buffer range as a bind group sees it. Owned (a buffer handle is a cheap clone), so the
/// batch can bind buffers the kernels own themselves (the reductions' and scans' state).
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

    /// The first `n` words of the range bound up to the next 16 bytes, for shaders that
    /// read and write it as `vec4` words; `None` where the buffer ends before that.
    fn widened(mut self, n: u64) -> Option<Bound> {
        let size = (4 * n).next_multiple_of(16);
        (self.offset + size <= self.buffer.size()).then(|| {
            self.size = size;
            self
        })
    }

    fn resource(&self) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffer,
            offset: self.offset,
            size: NonZeroU64::new(self.size),
        })
    }
}

/// The storage ranges of one dispatch: bindings 1, 2 and 3.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Bindings {
    x: Bound,
    y: Bound,
    z: Bound,
    /// Which bindings are read-only (the layout; see [`Shared`]).
    access: Access,
}

/// Which storage bindings a dispatch binds read-only: one pipeline layout each. A range
/// may be bound read-only only where it shares no buffer with a writable one: WebGPU
/// refuses one buffer bound both read-only and writable in a dispatch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
enum Access {
    /// Every binding writable (arena ranges share buffers; see `shaders/elementwise.wgsl`).
    #[default]
    Writable,
    /// `x` read-only; `y` and `z` writable.
    ReadOnlyX,
    /// `x` and `y` read-only; `z` writable.
    ReadOnlyXY,
}

impl Access {
    const ALL: [Access; 3] = [Access::Writable, Access::ReadOnlyX, Access::ReadOnlyXY];

    /// Whether storage binding `binding` (1, 2 or 3) is read-only.
    fn read_only(self, binding: u32) -> bool {
        match self {
            Access::Writable => false,
            Access::ReadOnlyX => binding == 1,
            Access::ReadOnlyXY => binding < 3,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Access::Writable => "kernels",
            Access::ReadOnlyX => "kernels (read-only x)",
            Access::ReadOnlyXY => "kernels (read-only x, y)",
        }
    }
}

impl Bindings {
    /// `x` and `y`; `z` repeats `y` for kernels that bind two ranges.
    fn two(x: Bound, y: Bound) -> Bindings {
        Bindings {
            z: y.clone(),
            x,
            y,
            access: Access::Writable,
        }
    }

    /// `x`, `y` and `z`, all writable.
    fn three(x: Bound, y: Bound, z: Bound) -> Bindings {
        Bindings {
            x,
            y,
            z,
            access: Access::Writable,
        }
    }

    /// These bindings with `x` read-only where its buffer holds neither `y` nor `z`.
    fn reading_x_only(mut self) -> Bindings {
        if self.x.buffer != self.y.buffer && self.x.buffer != self.z.buffer {
            self.access = Access::ReadOnlyX;
        }
        self
    }

    /// These bindings with `x` and `y` read-only where neither buffer holds `z`.
    fn reading_x_and_y_only(mut self) -> Bindings {
        if self.x.buffer != self.z.buffer && self.y.buffer != self.z.buffer {
            self.access = Access::ReadOnlyXY;
        }
        self
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct BindKey {
    params: Bound,
    io: Bindings,
}

struct BindCache {
    released: u64,
    groups: HashMap<BindKey, wgpu::BindGroup>,
}

/// The kernels' layouts, one per [`Access`], and bind groups. Every storage binding is
/// writable in the shared layout (arena ranges share buffers, see
/// `shaders/elementwise.wgsl`); the others bind inputs read-only, for kernels whose inputs
/// are in buffers of their own (the compiler may then cache and reorder their loads). On
/// the H100: the f32 matmul 33.2 TFLOP/s with writable inputs and 36.7 read-only, the f16
/// one 30.9 and 36.3; the softmax of rows of 197 floats 2257-2273 GB/s and 2753-2785.
struct Shared {
    /// By `Access as usize`: the bind group layout and its pipeline layout.
    layouts: [(wgpu::BindGroupLayout, wgpu::PipelineLayout); 3],
    cache: Mutex<BindCache>,
    /// The one-dispatch whole-array reduction's state (`shaders/reduce_whole.wgsl`): a done
    /// counter and two words per segment, zeroed by wgpu at creation and left reset by
    /// each call. Outside the arena: 4 KiB that lives as long as the kernels.
    reduce_state: wgpu::Buffer,
    /// The last epoch a whole-array reduction took (see [`Shared::next_reduce_epoch`]).
    reduce_epoch: AtomicU32,
    /// The scans' state (see [`scan::ScanState`]).
    scan_state: Mutex<scan::ScanState>,
}

/// The epoch after `previous` (0 before the first) among `1..=epochs`: the tag a call's
/// published state words carry (`shaders/split_word.wgsl`). Never 0, which unwritten state
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
}

impl Default for KernelOptions {
    fn default() -> Self {
        KernelOptions {
            subgroups: true,
            native_f16: true,
            matrix_units: true,
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
/// batch.fill(1 << 20, 1.0, &x)?.fill(1 << 20, 2.0, &y)?.axpy(1 << 20, 0.5, &x, &y)?;
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
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Kernels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernels")
            .field("arena", &self.arena)
            .field("subgroups", &self.subgroups)
            .field("native_f16", &self.native_f16)
            .field("matrix_units", &self.matrix_units)
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
            shared: Arc::new(Shared {
                layouts,
                cache: Mutex::new(
                    lock_rank::LEAF,
                    BindCache {
                        released: 0,
                        groups: HashMap::new(),
                    },
                ),
                reduce_state,
                reduce_epoch: AtomicU32::new(0),
                scan_state: Mutex::new(lock_rank::LEAF, scan::ScanState::default()),
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

    fn bind_group(&self, params: &Allocation, io: Bindings) -> wgpu::BindGroup {
        let key = BindKey {
            params: Bound {
                size: PARAMS_SIZE,
                ..Bound::of(params)
            },
            io,
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
                label: Some("vramkit kernels"),
                layout: &self.shared.layouts[key.io.access as usize].0,
                entries: &[
                    wgpu::BindGroupEntry {
                        binding: 0,
                        resource: key.params.resource(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 1,
                        resource: key.io.x.resource(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 2,
                        resource: key.io.y.resource(),
                    },
                    wgpu::BindGroupEntry {
                        binding: 3,
                        resource: key.io.z.resource(),
                    },
                ],
            });
        cache.groups.insert(key, group.clone());
        group
    }
}

/// Dispatches recorded into one encoder, submitted together by [`Batch::submit`].
///
/// The batch borrows every allocation it is given until it is submitted (or dropped), so
/// an allocation cannot be freed, and its range handed out again, while a recorded kernel
/// still has to run on it. This does not compile:
///
/// ```compile_fail,E0505
/// # let gpu = vramkit::Gpu::headless()?;
/// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// # let kernels = vramkit::kernels::Kernels::new(&arena)?;
/// let x = arena.alloc(4096, "x")?;
/// let mut batch = kernels.batch();
/// batch.fill(1024, 1.0, &x)?;
/// drop(x); // error: `x` is still borrowed by the batch
/// batch.submit()?;
/// # Ok::<(), vramkit::Error>(())
/// ```
///
/// Kernel methods return `&mut Self` so calls chain; each checks its arguments (element
/// counts against allocation sizes, shapes) and records nothing when it returns an error.
pub struct Batch<'a> {
    kernels: &'a Kernels,
    encoder: wgpu::CommandEncoder,
    pass: Option<wgpu::ComputePass<'static>>,
    /// Uniform allocations holding this batch's parameter slots; the last one is filling.
    chunks: Vec<Allocation>,
    /// Parameter bytes of the chunk being filled, written to it when it is full or at submit.
    staged: Vec<u8>,
    dispatches: usize,
    /// Timestamp queries of this batch while profiling is on (`gpu/profile.rs`).
    profile: Option<BatchProfile>,
    /// A dry run's batch: arguments are checked and parameter memory is allocated as in a
    /// real run, but nothing is written or dispatched.
    dry: bool,
    _borrows: PhantomData<&'a Allocation>,
}

/// Fails when `n` elements cannot be indexed with 32-bit invocation indices.
fn check_count(n: u64, what: &str) -> Result<()> {
    if n > u32::MAX as u64 {
        return Err(Error::invalid(
            format!("{what}: {n} elements exceed the 2^32 - 1 a kernel indexes"),
            "split the work",
        ));
    }
    Ok(())
}

/// Checks a `rows x cols` shape: non-empty and indexable with 32-bit indices; returns
/// the element count.
fn shape(rows: u64, cols: u64, what: &str) -> Result<u64> {
    if rows == 0 || cols == 0 {
        return Err(Error::invalid(
            format!("{what} of a {rows} x {cols} matrix"),
            "pass at least one row and one column",
        ));
    }
    rows.checked_mul(cols)
        .filter(|&n| n <= u32::MAX as u64)
        .ok_or_else(|| {
            Error::invalid(
                format!("{what}: {rows} x {cols} elements exceed the 2^32 - 1 a kernel indexes"),
                "split the matrix",
            )
        })
}

/// True when `a` and `b` share bytes (for kernels whose output must not alias an input).
fn overlaps(a: &Allocation, b: &Allocation) -> bool {
    a.buffer() == b.buffer()
        && a.offset() < b.offset() + b.size()
        && b.offset() < a.offset() + a.size()
}

/// Fails when output `out` shares bytes with input `x` (`what` names the kernel). With
/// `in_place`, the very same range is allowed: kernels whose every invocation reads an
/// element before writing that same element (elementwise maps, row softmax) work in
/// place; any other overlap would let one invocation overwrite what another still reads.
fn check_no_overlap(x: &Allocation, out: &Allocation, in_place: bool, what: &str) -> Result<()> {
    if !overlaps(x, out) || (in_place && x.offset() == out.offset()) {
        return Ok(());
    }
    let allowed = if in_place {
        "in place (the same allocation as input and output) or into a range of its own"
    } else {
        "into an allocation of its own (this kernel cannot run in place)"
    };
    Err(Error::invalid(
        format!(
            "{what}: output '{}' overlaps input '{}'",
            out.label(),
            x.label()
        ),
        format!("write the result {allowed}"),
    ))
}

impl<'a> Batch<'a> {
    /// Checks a kernel operand before anything is recorded: that it lives on this batch's
    /// device (an allocation of another `Gpu` would name a buffer id that means another
    /// buffer here), in a buffer kernels can bind (`STORAGE`), no larger than one storage
    /// binding, and holds `n` elements of `elem_bytes` each (f16 counts round up to words).
    fn check_len(&self, a: &Allocation, n: u64, elem_bytes: u64, name: &str) -> Result<()> {
        let gpu = self.gpu();
        gpu.check_alive()?;
        a.check_device(gpu, &format!("kernel operand {name}"))?;
        if !a.buffer().usage().contains(wgpu::BufferUsages::STORAGE) {
            return Err(Error::invalid(
                format!(
                    "{name} ('{}') lives in a buffer without STORAGE usage ({:?})",
                    a.label(),
                    a.buffer().usage()
                ),
                "allocate kernel operands from a pool whose usage includes STORAGE",
            ));
        }
        let max = gpu.limits().max_storage_buffer_binding_size;
        if a.size() > max {
            return Err(Error::invalid(
                format!(
                    "{name} ('{}') is {} bytes, more than the device's storage-binding limit \
                     of {max} bytes that one kernel operand can be",
                    a.label(),
                    a.size()
                ),
                "split the data into allocations of at most the binding limit (see \
                 Gpu::limits().max_storage_buffer_binding_size)",
            ));
        }
        let need = n
            .checked_mul(elem_bytes)
            .map(|b| b.next_multiple_of(4))
            .filter(|&b| b <= a.size());
        if need.is_none() {
            return Err(Error::invalid(
                format!(
                    "{name} ('{}') holds {} elements of {elem_bytes} bytes, the kernel needs {n}",
                    a.label(),
                    a.size() / elem_bytes
                ),
                format!(
                    "allocate at least {} bytes",
                    n.saturating_mul(elem_bytes).next_multiple_of(4)
                ),
            ));
        }
        Ok(())
    }

    fn check_f32(&self, a: &Allocation, n: u64, name: &str) -> Result<()> {
        self.check_len(a, n, 4, name)
    }

    /// Number of kernel calls recorded so far.
    pub fn len(&self) -> usize {
        self.dispatches
    }

    /// True when nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.dispatches == 0
    }

    fn gpu(&self) -> &'a Gpu {
        self.kernels.arena.gpu()
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
        if !self.dry {
            let zeros = vec![0u8; chunk.size() as usize];
            k.arena
                .gpu()
                .write_buffer(chunk.buffer(), chunk.offset(), &zeros);
        }
        self.chunks.push(chunk);
        Ok(())
    }

    fn flush_params(&mut self) {
        if let Some(chunk) = self.chunks.last() {
            if !self.staged.is_empty() && !self.dry {
                self.kernels
                    .arena
                    .gpu()
                    .write_buffer(chunk.buffer(), chunk.offset(), &self.staged);
            }
        }
        self.staged.clear();
    }

    fn push_params(&mut self, p: &Params) -> u32 {
        let offset = self.staged.len();
        self.staged.extend_from_slice(bytemuck::bytes_of(p));
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

    /// Records one dispatch of a kernel that uses the shared layout: its parameters go into
    /// the next slot of the batch's uniform ring.
    fn dispatch(
        &mut self,
        name: &'static str,
        pipeline: &wgpu::ComputePipeline,
        params: Params,
        io: Bindings,
        (gx, gy): (u32, u32),
    ) -> Result<()> {
        self.reserve_slots(1)?;
        if self.dry {
            // The parameter slot is taken (its memory counts); nothing is recorded.
            self.push_params(&params);
            return Ok(());
        }
        let k = self.kernels;
        let bind = {
            let chunk = self
                .chunks
                .last()
                .ok_or_else(|| Error::invalid("no parameter chunk", "internal"))?;
            k.bind_group(chunk, io)
        };
        let offset = self.push_params(&params);
        // Profiling: a pass of its own, timed at its beginning and end, ended after it.
        let timed = match self.profile.as_mut().and_then(|p| p.next(name)) {
            Some(writes) => {
                // The shared pass must end before another begins on the encoder.
                self.pass = None;
                self.pass = Some(
                    self.encoder
                        .begin_compute_pass(&wgpu::ComputePassDescriptor {
                            label: Some(name),
                            timestamp_writes: Some(writes),
                        })
                        .forget_lifetime(),
                );
                true
            }
            None => false,
        };
        let pass = self.pass();
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, &bind, &[offset]);
        pass.dispatch_workgroups(gx, gy, 1);
        if timed {
            self.pass = None;
        }
        Ok(())
    }

    /// One kernel call that is a single dispatch of `entry` in `shader`, counted as one call.
    fn record(
        &mut self,
        shader: &shaders::Shader,
        entry: &'static str,
        params: Params,
        io: Bindings,
        groups: (u32, u32),
    ) -> Result<()> {
        self.run(shader, entry, params, io, groups)?;
        self.dispatches += 1;
        Ok(())
    }

    /// Dispatches `entry` of `shader` on `io`, in the pipeline layout `io` asks for, without
    /// counting a kernel (one kernel may take several dispatches).
    fn run(
        &mut self,
        shader: &shaders::Shader,
        entry: &'static str,
        params: Params,
        io: Bindings,
        groups: (u32, u32),
    ) -> Result<()> {
        let pipeline = self.kernels.pipeline(shader, entry, &io)?;
        self.dispatch(entry, &pipeline, params, io, groups)
    }

    /// The encoder, to record copies or passes of your own between kernels. Ends the
    /// batch's current compute pass; the next kernel starts a new one.
    pub fn encoder(&mut self) -> &mut wgpu::CommandEncoder {
        self.pass = None;
        &mut self.encoder
    }

    /// Submits everything recorded, in order. Parameter allocations are released after the
    /// submit (and reused only once this work is done).
    pub fn submit(self) -> Result<wgpu::SubmissionIndex> {
        self.submit_with(|gpu, commands| gpu.submit([commands]))
    }

    /// Submits everything recorded, as [`submit`](Self::submit) does, waits for it, and
    /// returns how long the GPU took from the batch's first command to its last
    /// ([`Gpu::time_submission`]: timestamps where the adapter has them inside encoders,
    /// else the wall clock, as [`Timing::source`] says).
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// let kernels = vramkit::kernels::Kernels::new(&arena)?;
    /// let x = arena.alloc_typed::<f32>(1 << 20, "x")?;
    /// let y = arena.alloc_typed::<f32>(1 << 20, "y")?;
    /// let mut batch = kernels.batch();
    /// batch.axpy(1 << 20, 2.0, &x, &y)?;
    /// let t = batch.submit_timed()?;
    /// println!("{:.1} us on the GPU", t.seconds * 1e6);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn submit_timed(self) -> Result<Timing> {
        // Only the submission in the batch's error scope; the wait outside it.
        self.submit_with(|gpu, commands| gpu.submit_timestamped([commands]))?
            .wait()
    }

    fn submit_with<T>(mut self, submit: impl FnOnce(&Gpu, wgpu::CommandBuffer) -> T) -> Result<T> {
        self.pass = None;
        let kernels = self.kernels;
        let gpu = kernels.arena.gpu().clone();
        // The parameters are queued writes: in the scope too, as the submit is.
        gpu.scoped("queueing a kernel batch's parameters", || {
            self.flush_params()
        })?;
        let profile = self
            .profile
            .take()
            .and_then(|p| p.finish(kernels.arena.gpu(), &mut self.encoder));
        let encoder = self.encoder;
        let submitted = gpu.scoped("submitting a kernel batch", || {
            submit(&gpu, encoder.finish())
        })?;
        // After `Device::destroy` wgpu drops a submission without a word: a poll (no lock
        // held; it runs callbacks) lets it run the device-lost callback, so a batch on a
        // destroyed device says so. About a microsecond on the H100 host, beside the
        // batch's own submit; plain `Gpu::submit` (uploads, copies) does not pay it, and a
        // loss shows there at the next wait.
        gpu.notice_loss()?;
        #[cfg(feature = "metrics")]
        metrics::counter!("vramkit_kernels_dispatched_total").increment(self.dispatches as u64);
        if let Some((names, readback)) = profile {
            gpu.profiled_submitted(names, readback);
        }
        drop(self.chunks);
        Ok(submitted)
    }
}
