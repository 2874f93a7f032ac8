//! What the driver made of each kernel (`LAB_STATS=1`, Vulkan only): the statistics of
//! `VK_KHR_pipeline_executable_properties` (on NVIDIA: registers per invocation, code size)
//! and, where the driver gives any, its internal representations, written as text files to
//! `LAB_STATS_DIR` (default `lab_stats/`).
//!
//! wgpu neither enables the extension nor asks for statistics, so this opens a device of
//! its own through wgpu-hal (as `src/gpu/host_import.rs` does, with the extension and its
//! feature added) and compiles each kernel's SPIR-V through `ash` with the capture flags.
//! The SPIR-V is naga's, with the options wgpu uses for the library's trusted shaders
//! (no bounds checks or loop bounding, native zero-initialised workgroup memory, SPIR-V
//! 1.6 on Vulkan 1.3), so the driver sees what it sees when the kernel is timed.

use ash::vk;

/// Prints `name: statistic = value` lines for each (name, WGSL source), or one line saying
/// why there are none.
pub fn print(kernels: &[(String, String)]) {
    if let Err(why) = try_print(kernels) {
        println!("# driver statistics: {why}");
    }
}

fn try_print(kernels: &[(String, String)]) -> Result<(), String> {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = wgpu::Backends::VULKAN;
    let instance = wgpu::Instance::new(desc);
    let adapter = pollster::block_on(instance.request_adapter(&wgpu::RequestAdapterOptions {
        power_preference: wgpu::PowerPreference::HighPerformance,
        ..Default::default()
    }))
    .map_err(|e| format!("no Vulkan adapter ({e})"))?;
    const EXTENSION: &std::ffi::CStr = ash::khr::pipeline_executable_properties::NAME;
    let mut wanted = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default()
        .pipeline_executable_info(true);
    // SAFETY: the hal device is opened from this adapter's own hal object with the
    // adapter's features and limits; the callback adds one extension the adapter reports
    // and its feature, as wgpu-hal's `CreateDeviceCallback` allows. Every object made
    // through the raw handles below is destroyed before the device is dropped.
    unsafe {
        let hal_adapter = adapter
            .as_hal::<wgpu::hal::api::Vulkan>()
            .ok_or("the adapter is not Vulkan")?;
        if !hal_adapter
            .physical_device_capabilities()
            .supports_extension(EXTENSION)
        {
            return Err(format!("{EXTENSION:?} is not offered"));
        }
        let wanted = &mut wanted;
        let add: Box<wgpu::hal::vulkan::CreateDeviceCallback<'_>> = Box::new(move |args| {
            args.extensions.push(EXTENSION);
            let info = std::mem::take(args.create_info);
            *args.create_info = info.push_next(wanted);
        });
        let open = hal_adapter
            .open_with_callback(
                adapter.features(),
                &adapter.limits(),
                &wgpu::MemoryHints::Performance,
                Some(add),
            )
            .map_err(|e| format!("opening the device: {e}"))?;
        let device = open.device.raw_device();
        let exe = ash::khr::pipeline_executable_properties::Device::new(
            open.device.shared_instance().raw_instance(),
            device,
        );
        let bindings = [0, 1, 2, 3].map(|i| {
            vk::DescriptorSetLayoutBinding::default()
                .binding(i)
                .descriptor_type(if i == 0 {
                    vk::DescriptorType::UNIFORM_BUFFER
                } else {
                    vk::DescriptorType::STORAGE_BUFFER
                })
                .descriptor_count(1)
                .stage_flags(vk::ShaderStageFlags::COMPUTE)
        });
        let set = device
            .create_descriptor_set_layout(
                &vk::DescriptorSetLayoutCreateInfo::default().bindings(&bindings),
                None,
            )
            .map_err(|e| e.to_string())?;
        let sets = [set];
        let layout = device
            .create_pipeline_layout(
                &vk::PipelineLayoutCreateInfo::default().set_layouts(&sets),
                None,
            )
            .map_err(|e| e.to_string())?;
        let dir = std::env::var("LAB_STATS_DIR").unwrap_or_else(|_| "lab_stats".into());
        for (name, source) in kernels {
            match one(device, &exe, layout, source) {
                Ok((stats, texts)) => {
                    println!("# {name}: {}", stats.join(", "));
                    for (i, (what, text)) in texts.iter().enumerate() {
                        let _ = std::fs::create_dir_all(&dir);
                        let path = format!("{dir}/{name}.{i}.{what}.txt");
                        match std::fs::write(&path, text) {
                            Ok(()) => println!("# {name}: {what} ({} bytes) in {path}", text.len()),
                            Err(e) => println!("# {name}: {path}: {e}"),
                        }
                    }
                }
                Err(e) => println!("# {name}: no statistics ({e})"),
            }
        }
        device.destroy_pipeline_layout(layout, None);
        device.destroy_descriptor_set_layout(set, None);
    }
    Ok(())
}

/// What the driver reports of one pipeline: its statistics (`name = value`) and internal
/// representations (name, text).
type Report = (Vec<String>, Vec<(String, String)>);

/// The [`Report`] of the compute pipeline the driver builds from `source`.
///
/// # Safety
/// `device` and `exe` belong to one live device with the extension's feature enabled, and
/// `layout` (one set: a uniform buffer, then three storage buffers) to that device.
unsafe fn one(
    device: &ash::Device,
    exe: &ash::khr::pipeline_executable_properties::Device,
    layout: vk::PipelineLayout,
    source: &str,
) -> Result<Report, String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.to_string())?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| e.to_string())?;
    let options = naga::back::spv::Options {
        lang_version: (1, 6),
        flags: naga::back::spv::WriterFlags::empty(),
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Unchecked,
            buffer: naga::proc::BoundsCheckPolicy::Unchecked,
            image_load: naga::proc::BoundsCheckPolicy::Unchecked,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory:
            naga::back::spv::ZeroInitializeWorkgroupMemoryMode::Native,
        force_loop_bounding: false,
        ..Default::default()
    };
    let pipeline_options = naga::back::spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "matmul".into(),
    };
    let words = naga::back::spv::write_vec(&module, &info, &options, Some(&pipeline_options))
        .map_err(|e| e.to_string())?;
    // SAFETY: as the function's; every object made here is destroyed before returning.
    unsafe {
        let shader = device
            .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(&words), None)
            .map_err(|e| e.to_string())?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(shader)
            .name(c"matmul");
        let create = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(layout)
            .flags(
                vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
                    | vk::PipelineCreateFlags::CAPTURE_INTERNAL_REPRESENTATIONS_KHR,
            );
        let made = device.create_compute_pipelines(vk::PipelineCache::null(), &[create], None);
        device.destroy_shader_module(shader, None);
        let pipeline = made.map_err(|(_, e)| e.to_string())?[0];
        let result = describe(exe, pipeline);
        device.destroy_pipeline(pipeline, None);
        result
    }
}

/// # Safety
/// `pipeline` was made with the capture flags on `exe`'s device.
unsafe fn describe(
    exe: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
) -> Result<Report, String> {
    let text = |chars: &[std::ffi::c_char]| -> String {
        let bytes: Vec<u8> = chars
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    let mut stats = Vec::new();
    let mut texts = Vec::new();
    // SAFETY: as the function's; the second representation call gets buffers of the
    // sizes the first reported.
    unsafe {
        let executables = exe
            .get_pipeline_executable_properties(&vk::PipelineInfoKHR::default().pipeline(pipeline))
            .map_err(|e| e.to_string())?;
        for index in 0..executables.len() as u32 {
            let which = vk::PipelineExecutableInfoKHR::default()
                .pipeline(pipeline)
                .executable_index(index);
            for s in exe
                .get_pipeline_executable_statistics(&which)
                .map_err(|e| e.to_string())?
            {
                let value = match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => s.value.b32.to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => s.value.i64.to_string(),
                    vk::PipelineExecutableStatisticFormatKHR::UINT64 => s.value.u64.to_string(),
                    _ => s.value.f64.to_string(),
                };
                stats.push(format!("{} = {value}", text(&s.name)));
            }
            let mut reps = exe
                .get_pipeline_executable_internal_representations(&which)
                .unwrap_or_default();
            let mut buffers: Vec<Vec<u8>> = reps.iter().map(|r| vec![0u8; r.data_size]).collect();
            for (r, b) in reps.iter_mut().zip(&mut buffers) {
                r.p_data = b.as_mut_ptr().cast();
            }
            let mut count = reps.len() as u32;
            if count > 0 {
                let _ = (exe
                    .fp()
                    .get_pipeline_executable_internal_representations_khr)(
                    exe.device(),
                    &which,
                    &mut count,
                    reps.as_mut_ptr(),
                );
            }
            for (r, b) in reps.iter().zip(buffers) {
                let body = if r.is_text == vk::TRUE {
                    String::from_utf8_lossy(&b)
                        .trim_end_matches('\0')
                        .to_string()
                } else {
                    format!("({} bytes of binary)", b.len())
                };
                texts.push((text(&r.name).replace(' ', "_"), body));
            }
        }
    }
    Ok((stats, texts))
}
