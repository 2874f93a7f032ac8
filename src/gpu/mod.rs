//! The GPU context: one device and queue, opened headless or borrowed from a host app.
//!
//! [`Gpu`] is a cheap-to-clone handle (an `Arc` inside) that every other part of vramkit
//! holds. It records the limits and features the device really has, so the arena can size
//! blocks from the real storage-binding limit and kernels can pick f16 or subgroup variants.

pub(crate) mod accounts;
pub(crate) mod clock;
mod driver_memory;
mod host_buffer;
mod host_import;
mod lifecycle;
mod lost;
mod nonblocking;
pub(crate) mod poller;
pub(crate) use lost::PollFailure;
pub(crate) use scope::scoped;
pub(crate) mod profile;
mod registry;
pub(crate) mod scope;
mod select;
mod submit;
mod timer;
mod work_done;

pub use driver_memory::{DriverMemory, DriverMemoryReader};
pub use lifecycle::LifecycleGuard;
pub use select::{parse_backends, GpuOptions};
// For the device set, which the browser build has not.
#[cfg(native)]
pub(crate) use select::{rank, seen};
pub use timer::{Timing, TimingSource};

#[cfg(native)]
pub(crate) use host_buffer::HostMemory;
pub(crate) use host_buffer::{HostBuffer, HostPlacement};
pub(crate) use work_done::{Epoch, WorkDone};

use std::sync::Arc;

use crate::shaders::{PipelineCache, Shader};
use crate::{Error, Result};
pub(crate) use nonblocking::would_block;

/// What to install when no adapter exists; shown by every "no adapter" error.
pub const INSTALL_HINT: &str = "Install a Vulkan driver: on Debian/Ubuntu run \
`sudo apt-get update && sudo apt-get install -y mesa-vulkan-drivers` (lavapipe, a CPU \
driver) or your GPU vendor's driver; check with `vulkaninfo --summary`. \
VRAMKIT_BACKEND and VRAMKIT_ADAPTER narrow the choice.";

/// Optional features vramkit turns on whenever the adapter offers them. Kernels check
/// [`Gpu::has`] to choose a variant, so enabling them costs nothing where unused. BC
/// textures are for the app's own and for mip streaming (`mips`), where the device has
/// them (desktop GPUs; not lavapipe).
pub const OPTIONAL_FEATURES: wgpu::Features = wgpu::Features::SHADER_F16
    .union(wgpu::Features::SUBGROUP)
    .union(wgpu::Features::SUBGROUP_BARRIER)
    .union(wgpu::Features::TIMESTAMP_QUERY)
    .union(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS)
    .union(wgpu::Features::TEXTURE_COMPRESSION_BC);

/// Splits `units` work items, `per_group` per workgroup, into a 2-D grid that respects
/// `max_compute_workgroups_per_dimension` (so counts beyond 65535 workgroups work). Shaders
/// rebuild the linear index as `wg.y * num_workgroups.x + wg.x`.
///
/// The two sides are balanced, so the grid overshoots by fewer than `y` workgroups: a
/// full-width first row (65535 x 2 for 65536 workgroups) launched almost twice the work,
/// and empty workgroups still cost a large axpy measurably.
pub fn grid(units: u64, per_group: u64, gpu: &Gpu) -> (u32, u32) {
    let max = gpu.limits().max_compute_workgroups_per_dimension.max(1) as u64;
    grid_within(units.div_ceil(per_group.max(1)).max(1), max)
}

/// [`grid`] for `groups` workgroups and a per-dimension limit `max`.
fn grid_within(groups: u64, max: u64) -> (u32, u32) {
    if groups <= max {
        return (groups as u32, 1);
    }
    let y = groups.div_ceil(max).min(max);
    (groups.div_ceil(y).min(max) as u32, y as u32)
}

/// A GPU device and queue with the facts vramkit needs about them.
///
/// ```no_run
/// let gpu = vramkit::Gpu::headless()?;
/// println!("{}", gpu.describe());
/// # Ok::<(), vramkit::Error>(())
/// ```
#[derive(Clone)]
pub struct Gpu {
    /// Dropped by hand: the last handle goes under the lifecycle lock (`lifecycle.rs`).
    inner: std::mem::ManuallyDrop<Arc<GpuInner>>,
}

/// A handle of a [`Gpu`] that does not keep its device alive ([`Gpu::downgrade`]): for
/// closures that the device itself keeps, such as a host's device-lost callback, where a
/// `Gpu` would make a cycle and keep the device (its memory and its driver's threads) for
/// ever.
#[derive(Clone, Debug)]
pub struct WeakGpu(std::sync::Weak<GpuInner>);

impl WeakGpu {
    /// The `Gpu`, while a handle of it lives.
    pub fn upgrade(&self) -> Option<Gpu> {
        self.0.upgrade().map(|inner| Gpu {
            inner: std::mem::ManuallyDrop::new(inner),
        })
    }
}

impl Gpu {
    /// A [`WeakGpu`] of this device.
    ///
    /// ```no_run
    /// let gpu = vramkit::Gpu::headless()?;
    /// let weak = gpu.downgrade();
    /// assert!(weak.upgrade().is_some_and(|g| g.same_device(&gpu)));
    /// drop(gpu);
    /// assert!(weak.upgrade().is_none());
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn downgrade(&self) -> WeakGpu {
        WeakGpu(Arc::downgrade(&self.inner))
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // SAFETY: `inner` is not used after this; `drop` runs once.
        let inner = unsafe { std::mem::ManuallyDrop::take(&mut self.inner) };
        // Only the last handle takes the lock (two clones dropped at the same instant may
        // both see another and skip it: best effort, see `lifecycle.rs`).
        if Arc::strong_count(&inner) != 1 {
            return;
        }
        // Inside a submit or a queued write (a callback there), the lock would be taken
        // out of rank: the reaper drops it instead (`lifecycle.rs`).
        if submit::queue_held_here() || crate::sync::rank::held_any() {
            lifecycle::reap(Box::new(inner));
            return;
        }
        let _guard = lifecycle::lock();
        drop(inner);
    }
}

impl Drop for GpuInner {
    fn drop(&mut self) {
        // Breaks the cycle device -> lost callback -> hooks -> queue -> device
        // (`LostState::clear_hooks`), and drops what waits for work that will not be
        // waited for any more.
        self.lost.clear_hooks();
        self.work_done.drop_callbacks();
    }
}

struct GpuInner {
    // Kept alive for headless contexts: dropping the instance early would tear down the
    // backend under a live device on some platforms.
    instance: Option<wgpu::Instance>,
    device: wgpu::Device,
    queue: wgpu::Queue,
    info: wgpu::AdapterInfo,
    features: wgpu::Features,
    /// The f16 matmul may run on cooperative matrices ([`Gpu::has_matrix_units`]).
    matrix_units: bool,
    limits: wgpu::Limits,
    pipelines: PipelineCache,
    timer: timer::TimerState,
    /// GPU profiling (`profile.rs`).
    profiler: profile::Profiler,
    device_memory: Option<u64>,
    submits: submit::SubmitGate,
    /// When submitted work is done (`work_done.rs`).
    work_done: WorkDone,
    /// Drives the device while a future of `nonblocking.rs` waits (no thread in the
    /// browser).
    poller: poller::LazyPoller,
    /// Whether and why the device was lost (`lost.rs`).
    lost: Arc<lost::LostState>,
    /// The loss probe's buffer (`lost.rs`); `None` in the browser.
    probe: Option<lost::Probe>,
    /// How vramkit opened this device (`None`: a host app's device), for
    /// [`Gpu::reopen`].
    opened_with: Option<GpuOptions>,
    /// Unique per context built (clones share it): wgpu compares devices and buffers by
    /// ids that repeat across instances, so two `Gpu`s' buffers can compare equal.
    id: u64,
    /// Who holds how much of the device, as the holders declare it (`accounts.rs`).
    accounts: accounts::Accounts,
    /// Replaces the Vulkan reading of [`Gpu::driver_memory`] (`driver_memory.rs`).
    driver_memory_reader: crate::sync::rank::Mutex<Option<DriverMemoryReader>>,
    /// The alignment of host memory this device can import (`VK_EXT_external_memory_host`
    /// enabled when vramkit opened it), or `None`.
    #[cfg_attr(web, allow(dead_code))]
    host_import_alignment: Option<u64>,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Gpu {
    /// Opens the best adapter with no window, honouring `VRAMKIT_BACKEND` and
    /// `VRAMKIT_ADAPTER` (see [`GpuOptions::from_env`]).
    pub fn headless() -> Result<Gpu> {
        Self::headless_with(&GpuOptions::from_env()?)
    }

    /// Opens the best adapter that matches `options`, requesting its real limits and every
    /// feature in [`OPTIONAL_FEATURES`] it has.
    pub fn headless_with(options: &GpuOptions) -> Result<Gpu> {
        would_block("Gpu::headless", "Gpu::headless_async().await")?;
        pollster::block_on(Self::open(options))
    }

    async fn open(options: &GpuOptions) -> Result<Gpu> {
        // Instances, adapters and devices are made one thread at a time (`lifecycle.rs`);
        // the page has one thread, and a second open awaiting the lock would park it.
        #[cfg(native)]
        let _guard = lifecycle::lock();
        let (instance, adapter) = match options.backends {
            Some(backends) => Self::pick(backends, options).await?,
            // The native APIs first; GL only when they offer nothing: probing GL opens
            // EGL and DRI, which print errors on headless machines even where a Vulkan
            // adapter exists.
            None => match Self::pick(wgpu::Backends::PRIMARY, options).await {
                Ok(found) => found,
                Err(_) => Self::pick(wgpu::Backends::all(), options).await?,
            },
        };
        Self::open_adapter(instance, &adapter, options).await
    }

    /// Opens a device on `adapter` (of `instance`), requesting its real limits and every
    /// feature in [`OPTIONAL_FEATURES`] it has. Called with the lifecycle lock held.
    pub(crate) async fn open_adapter(
        instance: wgpu::Instance,
        adapter: &wgpu::Adapter,
        options: &GpuOptions,
    ) -> Result<Gpu> {
        let info = adapter.get_info();
        let offered = adapter.features();
        let missing = options.required_features - offered;
        if !missing.is_empty() {
            return Err(Error::MissingFeature {
                feature: format!("{missing:?}"),
                adapter: info.name.clone(),
                hint: "pick another adapter with VRAMKIT_ADAPTER, or drop the requirement".into(),
            });
        }
        let matrix_units = !options.disable_matrix_units && runs_f16_matrix_units(adapter);
        let mut features = (offered & OPTIONAL_FEATURES) | options.required_features;
        let experimental = if matrix_units {
            features |= wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
            // SAFETY: wgpu marks its experimental features as possibly containing bugs
            // with undefined behaviour. vramkit uses this one in a single shader
            // (matmul_coop.wgsl), whose results the tests check against the CPU on the
            // devices that run it, and only where the adapter reports the exact
            // configuration that shader uses; `disable_matrix_units` turns it off.
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        };
        // The adapter's own limits, not WebGPU's defaults: the default 128 MiB storage
        // binding would cap every arena block at 128 MiB.
        let limits = adapter.limits();
        let desc = wgpu::DeviceDescriptor {
            label: Some("vramkit"),
            required_features: features,
            required_limits: limits,
            experimental_features: experimental,
            memory_hints: wgpu::MemoryHints::Performance,
            trace: wgpu::Trace::Off,
        };
        let (device, queue) =
            host_import::request_device(adapter, &desc)
                .await
                .map_err(|source| Error::RequestDevice {
                    adapter: info.name.clone(),
                    hint: request_device_hint(&info),
                    source,
                })?;
        let gpu = Self::build(
            Some(instance),
            device,
            queue,
            info,
            matrix_units,
            Some(options.clone()),
        );
        // vramkit owns this device, so the device-lost callback is ours.
        lost::LostState::install(&gpu.inner.lost, &gpu.inner.device);
        Ok(gpu)
    }

    /// A new device for one that was lost: on the same adapter (same name, vendor, device
    /// id and backend) where it is still there, else on the best adapter the options that
    /// opened this one allow (a driver reset can renumber or remove adapters). The new
    /// device has nothing of the old one's: see [`crate::Runtime::recover`], which
    /// rebuilds what a runtime had on top of it. Only for devices vramkit opened; a host
    /// app's device comes back through the host ([`crate::Runtime::recover_with`]).
    ///
    /// ```no_run
    /// let gpu = vramkit::Gpu::headless()?;
    /// // ... the device is lost ...
    /// let fresh = gpu.reopen()?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn reopen(&self) -> Result<Gpu> {
        let Some(options) = self.inner.opened_with.clone() else {
            return Err(Error::invalid(
                format!("reopening '{}', a device a host app owns", self.info().name),
                "the host opens a new device and hands it to Runtime::recover_with",
            ));
        };
        would_block("Gpu::reopen", "Gpu::headless_async().await")?;
        pollster::block_on(async {
            let wanted = self.info();
            let same = |a: &wgpu::AdapterInfo| {
                (a.name.as_str(), a.vendor, a.device, a.backend)
                    == (
                        wanted.name.as_str(),
                        wanted.vendor,
                        wanted.device,
                        wanted.backend,
                    )
            };
            {
                #[cfg(native)]
                let _guard = lifecycle::lock();
                let backends = wgpu::Backends::from(wanted.backend);
                // The lost device's instance where vramkit made one: an instance outlives
                // its devices, and a new one per recovery is a driver's instance made and
                // destroyed every time.
                let instance = self
                    .inner
                    .instance
                    .clone()
                    .unwrap_or_else(|| wgpu::Instance::new(instance_descriptor(backends)));
                let adapters = instance.enumerate_adapters(backends).await;
                if let Some(adapter) = adapters.into_iter().find(|a| same(&a.get_info())) {
                    return Self::open_adapter(instance, &adapter, &options).await;
                }
            }
            log::warn!(
                "reopening '{}': the adapter is gone; opening the best one the options allow",
                wanted.name
            );
            Self::open(&options).await
        })
    }

    /// An instance on `backends` and the best adapter on it that passes the filters.
    async fn pick(
        backends: wgpu::Backends,
        options: &GpuOptions,
    ) -> Result<(wgpu::Instance, wgpu::Adapter)> {
        let instance = wgpu::Instance::new(instance_descriptor(backends));
        let adapters = instance.enumerate_adapters(backends).await;
        let adapter = select::choose(adapters, options)?;
        Ok((instance, adapter))
    }

    /// Wraps a device and queue that a host application already owns (a renderer sharing
    /// its device with vramkit). Limits and features are read from the device itself, so
    /// vramkit uses exactly what the host enabled.
    ///
    /// ```no_run
    /// # fn host() -> (wgpu::Device, wgpu::Queue) { unimplemented!() }
    /// let (device, queue) = host();
    /// let gpu = vramkit::Gpu::from_wgpu(device, queue);
    /// ```
    ///
    /// The matrix units stay off ([`has_matrix_units`](Self::has_matrix_units)): a device
    /// does not say which cooperative-matrix shapes its adapter runs; hand over the
    /// adapter too with [`from_wgpu_with_adapter`](Self::from_wgpu_with_adapter).
    ///
    /// One wgpu device has one `Gpu`: wrapping a device that a live `Gpu` already wraps
    /// (this call twice, or a device vramkit opened) returns a clone of that `Gpu`, with
    /// its queue lock, its work-done tracker and its loss state, so that the two are the
    /// same device to every check ([`same_device`](Self::same_device)) and their writes
    /// and submits are serialised by one lock.
    /// Not from inside a wgpu callback: wrapping takes the lifecycle lock
    /// ([`lifecycle_lock`](Self::lifecycle_lock)), as opening a device does.
    pub fn from_wgpu(device: wgpu::Device, queue: wgpu::Queue) -> Gpu {
        registry::wrap(&device.clone(), || {
            let info = device.adapter_info();
            Self::build(None, device, queue, info, false, None)
        })
    }

    /// [`from_wgpu`](Self::from_wgpu) for a host that also hands over the adapter its
    /// device came from, so that the f16 matmul can run on the matrix units: they are used
    /// when the host enabled `EXPERIMENTAL_COOPERATIVE_MATRIX` (with `SHADER_F16` and
    /// `SUBGROUP`) on the device and the adapter runs the configuration vramkit's kernel
    /// needs ([`has_matrix_units`](Self::has_matrix_units)). An adapter other than the
    /// device's leaves them off.
    ///
    /// ```no_run
    /// # fn host() -> (wgpu::Adapter, wgpu::Device, wgpu::Queue) { unimplemented!() }
    /// let (adapter, device, queue) = host();
    /// let gpu = vramkit::Gpu::from_wgpu_with_adapter(&adapter, device, queue);
    /// println!("matrix units: {}", gpu.has_matrix_units());
    /// ```
    pub fn from_wgpu_with_adapter(
        adapter: &wgpu::Adapter,
        device: wgpu::Device,
        queue: wgpu::Queue,
    ) -> Gpu {
        // One `Gpu` per wgpu device (see `from_wgpu`).
        registry::wrap(&device.clone(), || {
            let info = device.adapter_info();
            let same = {
                let a = adapter.get_info();
                (a.name.as_str(), a.vendor, a.device, a.backend)
                    == (info.name.as_str(), info.vendor, info.device, info.backend)
            };
            // All three features on the device itself: the adapter offering f16 or
            // subgroups does not mean the host enabled them, and the kernel needs them.
            let units = same
                && device.features().contains(crate::shaders::MATRIX_UNITS)
                && runs_f16_matrix_units(adapter);
            Self::build(None, device, queue, info, units, None)
        })
    }

    fn build(
        instance: Option<wgpu::Instance>,
        device: wgpu::Device,
        queue: wgpu::Queue,
        info: wgpu::AdapterInfo,
        matrix_units: bool,
        opened_with: Option<GpuOptions>,
    ) -> Gpu {
        let host_import_alignment = host_import::alignment(&device);
        let features = device.features();
        let limits = device.limits();
        let device_memory = device_local_memory(&device);
        let work_done = WorkDone::new(queue.clone());
        let lost = Arc::<lost::LostState>::default();
        // A loss wakes every future waiting for an epoch (`work_done.rs`).
        let tracker = work_done.clone();
        lost.on_lost(move || tracker.abandon_all());
        let probe = lost::Probe::new(&device);
        let gpu = Gpu {
            inner: std::mem::ManuallyDrop::new(Arc::new(GpuInner {
                instance,
                device,
                queue,
                work_done,
                poller: Default::default(),
                info,
                features,
                matrix_units: matrix_units && matrix_kernel_fits(&limits),
                limits,
                pipelines: PipelineCache::default(),
                timer: timer::TimerState::default(),
                profiler: Default::default(),
                device_memory,
                submits: submit::SubmitGate::default(),
                lost,
                probe,
                opened_with,
                accounts: Default::default(),
                driver_memory_reader: crate::sync::rank::Mutex::new(
                    crate::sync::rank::DRIVER_MEMORY_READER,
                    None,
                ),
                host_import_alignment,
                id: {
                    static NEXT: std::sync::atomic::AtomicU64 =
                        std::sync::atomic::AtomicU64::new(1);
                    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
                },
            })),
        };
        registry::register(&gpu);
        gpu
    }

    /// The process-wide lock under which vramkit creates devices and drops the last
    /// handle of a `Gpu`: take it around wgpu instance and device creation of your own
    /// that may run while other threads open or close vramkit contexts (NVIDIA's Vulkan
    /// driver hung on such races; see `gpu::lifecycle` in the source). Do not hold it
    /// while calling into vramkit, which takes it itself.
    ///
    /// ```no_run
    /// let _lock = vramkit::Gpu::lifecycle_lock();
    /// let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    /// // ... request an adapter and a device ...
    /// ```
    pub fn lifecycle_lock() -> LifecycleGuard {
        lifecycle::lock()
    }

    /// True when `other` is this context or a clone of it. Allocations, pools and views
    /// are checked with this at every vramkit entry point: wgpu ids repeat across
    /// instances, so a buffer of another device can name a buffer of this one. A device
    /// wrapped twice ([`from_wgpu`](Self::from_wgpu)) is one `Gpu`, so the two wrappers
    /// are the same device here too.
    pub fn same_device(&self, other: &Gpu) -> bool {
        self.inner.id == other.inner.id
    }

    /// How many devices vramkit holds in this process (opened or wrapped, with a handle
    /// alive): a program that recovers from losses can check that the lost devices were
    /// let go (every allocation, arena and view of one holds it).
    ///
    /// ```no_run
    /// let gpu = vramkit::Gpu::headless()?;
    /// assert!(vramkit::Gpu::live_count() >= 1);
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn live_count() -> usize {
        registry::live()
    }

    /// The wgpu device.
    pub fn device(&self) -> &wgpu::Device {
        &self.inner.device
    }

    /// The wgpu queue.
    pub fn queue(&self) -> &wgpu::Queue {
        &self.inner.queue
    }

    /// The adapter's name, backend, driver and type.
    pub fn info(&self) -> &wgpu::AdapterInfo {
        &self.inner.info
    }

    /// Features enabled on the device.
    pub fn features(&self) -> wgpu::Features {
        self.inner.features
    }

    /// Limits of the device (the adapter's real ones for headless contexts).
    pub fn limits(&self) -> &wgpu::Limits {
        &self.inner.limits
    }

    /// Bytes of device-local memory, where the backend can tell: the largest
    /// `DEVICE_LOCAL` heap on Vulkan. `None` on Metal, DX12 and GL, where wgpu exposes no
    /// heap sizes; give the arena a byte budget there.
    pub fn device_memory(&self) -> Option<u64> {
        self.inner.device_memory
    }

    /// True if every feature in `features` is enabled.
    pub fn has(&self, features: wgpu::Features) -> bool {
        self.inner.features.contains(features)
    }

    /// True if the f16 matmul runs on the GPU's matrix units (tensor cores): vramkit
    /// opened the device (or was handed its adapter and the features were on), the adapter
    /// runs 16 x 16 x 16 f16 -> f32 cooperative matrices on subgroups of exactly 32, and
    /// the limits fit the kernel (`shaders/matmul/matmul_coop.wgsl`).
    pub fn has_matrix_units(&self) -> bool {
        self.inner.matrix_units
    }

    /// True if this is a CPU implementation (lavapipe, WARP, SwiftShader).
    pub fn is_cpu(&self) -> bool {
        self.inner.info.device_type == wgpu::DeviceType::Cpu
    }

    /// One line for logs and benchmark tables: adapter, backend, driver, type, key limits
    /// and the optional features that are on.
    pub fn describe(&self) -> String {
        let i = &self.inner.info;
        let l = &self.inner.limits;
        let mut on = Vec::new();
        for (flag, name) in [
            (wgpu::Features::SHADER_F16, "f16"),
            (wgpu::Features::SUBGROUP, "subgroup"),
            (wgpu::Features::TIMESTAMP_QUERY, "timestamps"),
        ] {
            if self.has(flag) {
                on.push(name);
            }
        }
        if self.has_matrix_units() {
            on.push("matrix-units");
        }
        let driver = format!("{} {}", i.driver, i.driver_info);
        format!(
            "{} | {:?} | driver {} | {:?} | memory {} | max buffer {} | max storage binding {} | \
             workgroup {} inv | subgroup {}..{} | features [{}]",
            if i.name.is_empty() {
                "(the adapter gives no name)"
            } else {
                &i.name
            },
            i.backend,
            driver.trim(),
            i.device_type,
            self.device_memory()
                .map_or("unknown".into(), crate::fmt_bytes),
            crate::fmt_bytes(l.max_buffer_size),
            crate::fmt_bytes(l.max_storage_buffer_binding_size),
            l.max_compute_invocations_per_workgroup,
            i.subgroup_min_size,
            i.subgroup_max_size,
            on.join(" ")
        )
    }

    /// Blocks until the submission `index` has finished.
    pub fn wait_for(&self, index: wgpu::SubmissionIndex) -> Result<()> {
        self.poll_wait(Some(index), "waiting for a submission")
    }

    fn poll_wait(&self, index: Option<wgpu::SubmissionIndex>, during: &str) -> Result<()> {
        would_block(
            during,
            "the _async variant (Gpu::wait_idle_async, Runtime::download_async, ...)",
        )?;
        self.check_alive()?;
        match self.poll_device(wgpu::PollType::Wait {
            submission_index: index,
            timeout: None,
        }) {
            Ok(_) => Ok(()),
            Err(lost::PollFailure::Lost) => Err(self.lost_error()),
            Err(lost::PollFailure::Wgpu(e)) => Err(self.explain(Error::Device {
                during: during.into(),
                message: e.to_string(),
            })),
        }
    }

    /// Maps `size` bytes of a `MAP_READ` buffer at `offset`, copies them out and unmaps.
    pub(crate) fn map_read(
        &self,
        buffer: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        let (tx, rx) = std::sync::mpsc::channel();
        let slice = buffer.slice(offset..offset + size);
        slice.map_async(wgpu::MapMode::Read, move |r| {
            // The receiver may be gone when this runs late on another thread: nothing to do.
            let _ = tx.send(r);
        });
        self.wait_idle()?;
        // Not `rx.recv()`: wgpu runs the callback on whichever thread's poll resolved the
        // mapping, and that thread may be inside another callback waiting for a lock this
        // one holds (a read inside a callback of `Gpu::submit` holds the queue lock). Once
        // the wait has returned the mapping is resolved, whoever polled, so the buffer is
        // read if it is mapped; the callback only explains a failure.
        let data = match slice.get_mapped_range() {
            Ok(view) => view.to_vec(),
            Err(e) => {
                let message = match rx.try_recv() {
                    Ok(Err(reason)) => reason.to_string(),
                    _ => e.to_string(),
                };
                return Err(Error::Device {
                    during: "mapping a buffer for reading".into(),
                    message,
                });
            }
        };
        buffer.unmap();
        Ok(data)
    }

    /// Processes finished work and map callbacks without blocking.
    pub fn poll(&self) {
        // A non-blocking poll only fails when the device is lost, which it records and the
        // next call reports with context; nothing to do with it here.
        let _ = self.poll_device(wgpu::PollType::Poll);
    }

    /// The compute pipeline for `entry` in `shader`, compiled once and cached.
    pub fn pipeline(&self, shader: &Shader, entry: &str) -> Result<Arc<wgpu::ComputePipeline>> {
        self.inner
            .pipelines
            .get(&self.inner.device, shader, entry, None)
    }

    /// Like [`pipeline`](Self::pipeline), with an explicit pipeline layout.
    pub fn pipeline_with_layout(
        &self,
        shader: &Shader,
        entry: &str,
        layout: crate::shaders::NamedLayout<'_>,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        self.inner
            .pipelines
            .get(&self.inner.device, shader, entry, Some(layout))
    }

    /// Records one dispatch of `pipeline` (automatic layout; bind group 0 takes
    /// `resources` as bindings 0, 1, ...) into its own command buffer and submits it, all
    /// inside an error scope. For the occasional one-off kernels (guard checks, upload
    /// edges); hot paths batch their dispatches instead.
    pub(crate) fn dispatch_once(
        &self,
        during: &str,
        pipeline: &wgpu::ComputePipeline,
        resources: &[wgpu::BindingResource<'_>],
        (x, y): (u32, u32),
    ) -> Result<wgpu::SubmissionIndex> {
        self.scoped(during, || {
            let entries: Vec<wgpu::BindGroupEntry<'_>> = resources
                .iter()
                .enumerate()
                .map(|(i, r)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource: r.clone(),
                })
                .collect();
            let bind = self.device().create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(during),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &entries,
            });
            let mut encoder = self.device().create_command_encoder(&Default::default());
            {
                let mut pass = encoder.begin_compute_pass(&Default::default());
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, &bind, &[]);
                pass.dispatch_workgroups(x, y, 1);
            }
            self.submit([encoder.finish()])
        })
    }

    /// Runs `f` inside a wgpu error scope and turns a captured error into [`Error::Wgpu`].
    /// Used wherever user input reaches wgpu, so bad input never becomes a panic in the
    /// uncaptured-error handler.
    /// A loss noticed meanwhile (by another thread's poll or wait) is an error too.
    /// It ends with the loss probe (`gpu/lost.rs`): wgpu drops work on a device it no
    /// longer treats as valid without an error, so without it work recorded after
    /// `Device::destroy` would come back `Ok`.
    pub fn scoped<T>(&self, during: &str, f: impl FnOnce() -> T) -> Result<T> {
        self.check_alive()?;
        let value =
            crate::gpu::scoped(&self.inner.device, during, f).map_err(|e| self.explain(e))?;
        self.confirm_alive()?;
        Ok(value)
    }
}

/// An instance on `backends`, with wgpu's own environment variables for the rest (its
/// flags, and backend options such as `WGPU_GLES_MINOR_VERSION`); `VRAMKIT_BACKEND` chose
/// the backends.
pub(crate) fn instance_descriptor(backends: wgpu::Backends) -> wgpu::InstanceDescriptor {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = backends;
    desc
}

/// What to say when an adapter refuses a device.
fn request_device_hint(info: &wgpu::AdapterInfo) -> String {
    if info.backend == wgpu::Backend::Gl {
        // Settled on an H200 (issue 62, docs/notes/gl-on-nvidia.md): wgpu-hal asks EGL for
        // desktop OpenGL 3.3, NVIDIA's driver gives exactly that (GLSL 3.30, no compute
        // shaders, although it offers GL_ARB_compute_shader), and wgpu's own
        // indirect-validation pipeline, a compute shader, cannot be built: the request
        // ends "Parent device is lost". WGPU_GLES_MINOR_VERSION does not apply to desktop
        // GL. Mesa answers the same request with its newest version, so llvmpipe works.
        let nvidia = info.vendor == 0x10de || info.name.contains("NVIDIA");
        return if nvidia {
            "wgpu-hal asks NVIDIA's EGL for desktop OpenGL 3.3 and gets exactly 3.3, whose \
             shading language has no compute shaders, which wgpu needs for every device: \
             OpenGL cannot run on this driver through wgpu 30; use Vulkan \
             (VRAMKIT_BACKEND=vulkan), which runs everything vramkit has"
                .into()
        } else {
            "on OpenGL, wgpu needs a context with compute shaders (desktop GL 4.3 or GLES \
             3.1); if wgpu logged 'The selected version doesn't support \
             Features(... COMPUTE_SHADER ...)', the driver gave it an older one: on GLES try \
             WGPU_GLES_MINOR_VERSION=2, or use Vulkan (VRAMKIT_BACKEND=vulkan), which runs \
             everything vramkit has"
                .into()
        };
    }
    "check the driver's installation and the device's health, and that lost devices are \
     not kept alive: each holds driver resources until its last handle goes (NVIDIA \
     refused a process's 124th)"
        .into()
}

/// The configuration `shaders/matmul/matmul_coop.wgsl` multiplies in: 16 x 16 x 16, f16 inputs,
/// f32 accumulators, on subgroups of exactly 32 (its four subgroups split a 128 x 128
/// tile), with f16 and subgroup operations.
fn runs_f16_matrix_units(adapter: &wgpu::Adapter) -> bool {
    use wgpu::CooperativeScalarType::{F16, F32};
    let info = adapter.get_info();
    adapter.features().contains(crate::shaders::MATRIX_UNITS)
        && info.subgroup_min_size == 32
        && info.subgroup_max_size == 32
        && adapter.cooperative_matrix_properties().iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (16, 16, 16) && p.ab_type == F16 && p.cr_type == F32
        })
}

/// The cooperative matmul's workgroups: 128 invocations and 22.5 KiB of workgroup memory
/// (`matmul_coop.wgsl`).
fn matrix_kernel_fits(limits: &wgpu::Limits) -> bool {
    use crate::shaders::{COOP_WORKGROUP_BYTES, COOP_WORKGROUP_SIZE};
    limits.max_compute_invocations_per_workgroup >= COOP_WORKGROUP_SIZE
        && limits.max_compute_workgroup_size_x >= COOP_WORKGROUP_SIZE
        && limits.max_compute_workgroup_storage_size >= COOP_WORKGROUP_BYTES
}

/// The largest device-local Vulkan heap, read through wgpu-hal; unknown without the
/// Vulkan backend (`build.rs`: Metal and WebGPU report no memory size).
#[cfg(not(vulkan_hal))]
fn device_local_memory(_device: &wgpu::Device) -> Option<u64> {
    None
}

/// The largest device-local Vulkan heap, read through wgpu-hal.
#[cfg(vulkan_hal)]
fn device_local_memory(device: &wgpu::Device) -> Option<u64> {
    // SAFETY: we only read physical-device properties; nothing is created or destroyed
    // through the raw handles, as `as_hal` requires.
    unsafe {
        let hal = device.as_hal::<wgpu::hal::api::Vulkan>()?;
        let instance = hal.shared_instance().raw_instance();
        let props = instance.get_physical_device_memory_properties(hal.raw_physical_device());
        const DEVICE_LOCAL_BIT: u32 = 0x1;
        props.memory_heaps[..props.memory_heap_count as usize]
            .iter()
            .filter(|h| h.flags.as_raw() & DEVICE_LOCAL_BIT != 0)
            .map(|h| h.size)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::grid_within;

    #[test]
    fn grids_cover_every_group_and_overshoot_by_less_than_a_row() {
        for max in [1u64, 7, 255, 65535] {
            for groups in (1..5000u64).chain([65535, 65536, 131_071, 1 << 24, max * max]) {
                let (x, y) = grid_within(groups, max);
                let (x, y) = (x as u64, y as u64);
                assert!(x <= max && y <= max, "{groups} in {max}: {x}x{y}");
                if groups <= max * max {
                    assert!(x * y >= groups, "{groups} in {max}: {x}x{y} misses some");
                    assert!(x * y < groups + y, "{groups} in {max}: {x}x{y} overshoots");
                }
            }
        }
    }
}
