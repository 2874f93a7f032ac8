//! What the driver made of each kernel (`LAB_STATS=1`, Vulkan only): the statistics of
//! `VK_KHR_pipeline_executable_properties` (on NVIDIA: registers per invocation, code size)
//! and, where the driver gives any, its internal representations, written as text files to
//! `LAB_STATS_DIR` (default `lab_stats/`).
//!
//! wgpu neither enables the extension nor asks for statistics, so this uses the device the
//! lab opens itself through wgpu-hal (`spirv::open`, with the extension and its feature
//! added) and compiles each kernel's SPIR-V through `ash` with the capture flags. The
//! SPIR-V is what the lab times (`spirv::compile`): for most kernels naga's, with the
//! options wgpu uses for the library's trusted shaders, so the driver sees what it sees
//! when the kernel is timed.

use ash::vk;

/// Prints `name: statistic = value` lines for each (name, WGSL source), or one line saying
/// why there are none.
pub fn print(kernels: &[(String, Vec<u32>)]) {
    if let Err(why) = try_print(kernels) {
        println!("# driver statistics: {why}");
    }
}

fn try_print(kernels: &[(String, Vec<u32>)]) -> Result<(), String> {
    use crate::spirv::{enabled, open, EXECUTABLE_PROPERTIES};
    let (_adapter, wgpu_device, _queue) = open()?;
    if !enabled(&wgpu_device, EXECUTABLE_PROPERTIES) {
        return Err(format!("{EXECUTABLE_PROPERTIES:?} is not offered"));
    }
    // SAFETY: the device was opened with the extension and its feature (`spirv::open`);
    // every object made through the raw handles below is destroyed before it is dropped.
    unsafe {
        let hal = wgpu_device
            .as_hal::<wgpu::hal::api::Vulkan>()
            .ok_or("the device is not Vulkan")?;
        let device = hal.raw_device();
        let exe = ash::khr::pipeline_executable_properties::Device::new(
            hal.shared_instance().raw_instance(),
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
        for (name, words) in kernels {
            match one(device, &exe, layout, words) {
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
    words: &[u32],
) -> Result<Report, String> {
    // SAFETY: as the function's; every object made here is destroyed before returning.
    unsafe {
        let shader = device
            .create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None)
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
