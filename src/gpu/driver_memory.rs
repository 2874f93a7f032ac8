//! What the driver says about device memory right now: how much this process may use
//! (its *budget*, which shrinks when other processes take memory on the same GPU) and how
//! much it uses.
//!
//! # Where the numbers come from
//! - **Vulkan with `VK_EXT_memory_budget`** (NVIDIA, AMD, Intel, recent Mesa GPU drivers;
//!   wgpu-hal enables the extension wherever it is offered): `heapBudget` and
//!   `heapUsage` of the device-local heaps, summed, read with
//!   `vkGetPhysicalDeviceMemoryProperties2`. The spec defines the budget as what the
//!   process can use before allocations may fail or slow down, *including* what it
//!   already holds; other processes' allocations lower it.
//! - **DX12**: DXGI's `QueryVideoMemoryInfo` for the local segment group of the device's
//!   adapter (found by its LUID): `Budget` and `CurrentUsage` are the process's, with
//!   the same meaning as Vulkan's; `total` is the adapter's dedicated video memory.
//! - **Metal**: `recommendedMaxWorkingSetSize` as the budget (what Apple says the device
//!   can hold before performance suffers; also `total`) and `currentAllocatedSize` as the
//!   usage (every resource of this `MTLDevice`).
//! - **A reader the application installs** ([`Gpu::set_driver_memory_reader`]): NVML, a
//!   platform query vramkit does not know, or a test's simulated neighbour. It replaces
//!   the built-in reading.
//! - Elsewhere: [`Gpu::driver_memory`] is `None`, and a live budget
//!   ([`Budget::FractionOfAvailable`](crate::arena::Budget::FractionOfAvailable)) falls
//!   back to a fraction of the device's size. That is the case on lavapipe (no
//!   `VK_EXT_memory_budget`), on GL, and in the browser, where WebGPU gives a page no
//!   reading of memory at all (gpuweb/gpuweb#5505): there the fraction is of the adapter's
//!   largest buffer, not of what the GPU has free.
//!
//! # Cost
//! One Vulkan query (a few microseconds; no allocation, no lock of vramkit held): callers
//! rate-limit it (the arena reads at most once per `ArenaConfig::budget_refresh`).

use std::sync::Arc;

use crate::Gpu;

/// Device memory as the driver reports it now; see the module docs.
///
/// ```no_run
/// let gpu = vramkit::Gpu::headless()?;
/// if let Some(m) = gpu.driver_memory() {
///     println!("may use {} of which {} in use ({})", m.budget, m.usage, m.source);
/// }
/// # Ok::<(), vramkit::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DriverMemory {
    /// Bytes this process may use in all, what it holds included.
    pub budget: u64,
    /// Bytes this process holds (vramkit's arenas, its staging and everything else the
    /// process allocated on the device).
    pub usage: u64,
    /// Size of the device-local heaps.
    pub total: u64,
    /// Who reported it: `"VK_EXT_memory_budget"` or the name an installed reader gave.
    pub source: &'static str,
}

impl DriverMemory {
    /// Bytes the process could still take: `budget - usage`.
    pub fn available(&self) -> u64 {
        self.budget.saturating_sub(self.usage)
    }
}

/// A reader installed with [`Gpu::set_driver_memory_reader`].
pub type DriverMemoryReader = Arc<dyn Fn() -> Option<DriverMemory> + Send + Sync>;

impl Gpu {
    /// The driver's current budget and usage of device memory, or `None` where nothing
    /// reports them (see the module docs of `gpu::driver_memory`). Called with no lock of
    /// vramkit held.
    pub fn driver_memory(&self) -> Option<DriverMemory> {
        let reader = self.inner.driver_memory_reader.lock().clone();
        match reader {
            Some(read) => read(),
            None => read_vulkan_budget(self.device())
                .or_else(|| read_dxgi_budget(self.device()))
                .or_else(|| read_metal_budget(self.device())),
        }
    }

    /// Replaces where [`driver_memory`](Self::driver_memory) reads from: a backend's own
    /// query (DXGI, Metal, NVML), or in tests a simulated neighbour process. `None` goes
    /// back to the Vulkan reading. The reader runs on whichever thread asks, with no lock
    /// of vramkit held; it must not call back into this `Gpu`'s arenas.
    ///
    /// ```no_run
    /// use std::sync::Arc;
    /// use vramkit::DriverMemory;
    /// let gpu = vramkit::Gpu::headless()?;
    /// gpu.set_driver_memory_reader(Some(Arc::new(|| {
    ///     Some(DriverMemory { budget: 8 << 30, usage: 1 << 30, total: 16 << 30, source: "mine" })
    /// })));
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn set_driver_memory_reader(&self, reader: Option<DriverMemoryReader>) {
        *self.inner.driver_memory_reader.lock() = reader;
    }
}

/// `VK_EXT_memory_budget`'s reading of the device-local heaps, where wgpu-hal enabled it.
#[cfg(vulkan_hal)]
fn read_vulkan_budget(device: &wgpu::Device) -> Option<DriverMemory> {
    use ash::vk;
    // SAFETY: a read of physical-device properties through the raw handles; nothing is
    // created or destroyed, as `as_hal` requires. The budget structure is chained only
    // where the device enabled the extension, as Vulkan requires.
    unsafe {
        let hal = device.as_hal::<wgpu::hal::api::Vulkan>()?;
        if !hal
            .enabled_device_extensions()
            .contains(&ash::ext::memory_budget::NAME)
        {
            return None;
        }
        let instance = hal.shared_instance().raw_instance();
        let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
        instance.get_physical_device_memory_properties2(hal.raw_physical_device(), &mut props);
        let heaps = props.memory_properties.memory_heaps;
        let count = (props.memory_properties.memory_heap_count as usize).min(heaps.len());
        let mut out = DriverMemory {
            budget: 0,
            usage: 0,
            total: 0,
            source: "VK_EXT_memory_budget",
        };
        for (i, heap) in heaps[..count].iter().enumerate() {
            if heap.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL) {
                out.budget += budget.heap_budget[i];
                out.usage += budget.heap_usage[i];
                out.total += heap.size;
            }
        }
        (out.total > 0).then_some(out)
    }
}

/// No Vulkan backend in this build: nothing to read.
#[cfg(not(vulkan_hal))]
fn read_vulkan_budget(_device: &wgpu::Device) -> Option<DriverMemory> {
    None
}

/// DXGI's reading of the local (dedicated) memory of the device's adapter.
#[cfg(dx12_hal)]
fn read_dxgi_budget(device: &wgpu::Device) -> Option<DriverMemory> {
    use windows::Win32::Graphics::Dxgi::{
        CreateDXGIFactory1, IDXGIAdapter3, IDXGIFactory4, DXGI_MEMORY_SEGMENT_GROUP_LOCAL,
        DXGI_QUERY_VIDEO_MEMORY_INFO,
    };
    // SAFETY: reads through the raw device (its adapter's LUID) and a new DXGI factory;
    // nothing of wgpu's is created or destroyed, as `as_hal` requires. The out-parameter
    // is a live local.
    unsafe {
        let hal = device.as_hal::<wgpu::hal::api::Dx12>()?;
        let luid = hal.raw_device().GetAdapterLuid();
        let factory: IDXGIFactory4 = CreateDXGIFactory1().ok()?;
        let adapter: IDXGIAdapter3 = factory.EnumAdapterByLuid(luid).ok()?;
        let mut info = DXGI_QUERY_VIDEO_MEMORY_INFO::default();
        adapter
            .QueryVideoMemoryInfo(0, DXGI_MEMORY_SEGMENT_GROUP_LOCAL, &mut info)
            .ok()?;
        let total = adapter
            .GetDesc2()
            .map_or(info.Budget, |d| d.DedicatedVideoMemory as u64);
        Some(DriverMemory {
            budget: info.Budget,
            usage: info.CurrentUsage,
            total,
            source: "DXGI QueryVideoMemoryInfo",
        })
    }
}

/// No DX12 backend in this build.
#[cfg(not(dx12_hal))]
fn read_dxgi_budget(_device: &wgpu::Device) -> Option<DriverMemory> {
    None
}

/// Metal's working-set recommendation and the device's allocated size.
#[cfg(metal_hal)]
fn read_metal_budget(device: &wgpu::Device) -> Option<DriverMemory> {
    use objc2_metal::MTLDevice;
    // SAFETY: two property reads of the raw `MTLDevice`; nothing is created or destroyed,
    // as `as_hal` requires.
    unsafe {
        let hal = device.as_hal::<wgpu::hal::api::Metal>()?;
        let raw = hal.raw_device();
        let budget = raw.recommendedMaxWorkingSetSize();
        Some(DriverMemory {
            budget,
            usage: raw.currentAllocatedSize() as u64,
            total: budget,
            source: "Metal recommendedMaxWorkingSetSize",
        })
    }
}

/// No Metal backend in this build.
#[cfg(not(metal_hal))]
fn read_metal_budget(_device: &wgpu::Device) -> Option<DriverMemory> {
    None
}
