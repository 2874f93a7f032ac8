//! Host memory that several devices copy from and into directly: opening Vulkan devices
//! with `VK_EXT_external_memory_host`, so that one host allocation can be imported into
//! each GPU of a host (`HostBuffer::import`) and a copy from one GPU to another needs no
//! copy on the host (`crate::devices`).
//!
//! wgpu does not enable the extension. Where the adapter offers it, vramkit opens the
//! device through wgpu-hal with the one extension added to what wgpu-hal asks for
//! (`open_with_callback`, which wgpu-hal documents for this) and hands the device to wgpu
//! (`create_device_from_hal`); everything else is as `Adapter::request_device` makes it.
//! Where that fails, or on other backends, the device is requested as usual and cannot
//! import host memory: transfers between devices then copy between two staging buffers
//! on the host.

use crate::gpu::Gpu;

/// Requests a device on `adapter` with `desc`, with `VK_EXT_external_memory_host` enabled
/// where the adapter is Vulkan and offers it (see the module docs).
pub(super) async fn request_device(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
) -> Result<(wgpu::Device, wgpu::Queue), wgpu::RequestDeviceError> {
    #[cfg(vulkan_hal)]
    if !crate::knobs::Knob::HostImport.is("0") {
        if let Some(opened) = open_with_host_import(adapter, desc) {
            return Ok(opened);
        }
    }
    adapter.request_device(desc).await
}

/// The device through wgpu-hal with the extension added, or `None` (not Vulkan, not
/// offered, or the hal open failed: then the ordinary request runs).
#[cfg(vulkan_hal)]
fn open_with_host_import(
    adapter: &wgpu::Adapter,
    desc: &wgpu::DeviceDescriptor<'_>,
) -> Option<(wgpu::Device, wgpu::Queue)> {
    const EXTENSION: &std::ffi::CStr = ash::ext::external_memory_host::NAME;
    // SAFETY: the hal device is opened from this adapter's own hal object with the
    // features and limits wgpu is then given (`create_device_from_hal` requires a subset
    // of what the hal device has: the same set); the callback only adds an extension the
    // adapter reports, as wgpu-hal's `CreateDeviceCallback` allows.
    unsafe {
        let hal_adapter = adapter.as_hal::<wgpu::hal::api::Vulkan>()?;
        if !hal_adapter
            .physical_device_capabilities()
            .supports_extension(EXTENSION)
        {
            return None;
        }
        let add = Box::new(|args: wgpu::hal::vulkan::CreateDeviceCallbackArgs| {
            if !args.extensions.contains(&EXTENSION) {
                args.extensions.push(EXTENSION);
            }
        });
        let open = hal_adapter
            .open_with_callback(
                desc.required_features,
                &desc.required_limits,
                &desc.memory_hints,
                Some(add),
            )
            .map_err(|e| log::debug!("opening with VK_EXT_external_memory_host failed: {e}"))
            .ok()?;
        drop(hal_adapter);
        adapter
            .create_device_from_hal::<wgpu::hal::api::Vulkan>(open, desc)
            .map_err(|e| log::debug!("wgpu refused the device with host import: {e}"))
            .ok()
    }
}

/// The alignment of host pointers and sizes `device` imports, where it has the extension
/// enabled.
#[cfg(vulkan_hal)]
pub(super) fn alignment(device: &wgpu::Device) -> Option<u64> {
    use ash::vk;
    // SAFETY: reads physical-device properties through the raw handles; creates nothing.
    unsafe {
        let hal = device.as_hal::<wgpu::hal::api::Vulkan>()?;
        if !hal
            .enabled_device_extensions()
            .contains(&ash::ext::external_memory_host::NAME)
        {
            return None;
        }
        let instance = hal.shared_instance().raw_instance();
        let mut host = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
        let mut props = vk::PhysicalDeviceProperties2::default().push_next(&mut host);
        instance.get_physical_device_properties2(hal.raw_physical_device(), &mut props);
        let align = host.min_imported_host_pointer_alignment;
        (align > 0 && align.is_power_of_two()).then_some(align)
    }
}

/// No Vulkan backend in this build: nothing imports host memory.
#[cfg(not(vulkan_hal))]
pub(super) fn alignment(_device: &wgpu::Device) -> Option<u64> {
    None
}

impl Gpu {
    /// The alignment of host memory this device imports, where vramkit opened it with
    /// `VK_EXT_external_memory_host`.
    #[cfg_attr(web, allow(dead_code))]
    pub(crate) fn host_import_alignment(&self) -> Option<u64> {
        self.inner.host_import_alignment
    }
}
