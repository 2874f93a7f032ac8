//! Facts of the matrix-unit kernel that the device context needs before any kernel runs:
//! its workgroup (which the device's limits must admit, `Gpu`'s matrix units) and the
//! features it uses. They live with the shaders, below `gpu/`, so that the context never
//! imports the kernels.

/// Workgroup memory of `matmul/matmul_coop.wgsl`: 128 x 40 and 32 x 136 f16 slices, and
/// 4 x 16 x 16 f32 on the way out (a test of `kernels::matmul` reads it from the shader).
pub(crate) const COOP_WORKGROUP_BYTES: u32 = (128 * 40 + 32 * 136) * 2 + 4 * 16 * 16 * 4;
/// The most workgroup memory a matmul workgroup may take and still share a core with a
/// second one on NVIDIA's Vulkan driver. Both matmul kernels rely on two workgroups per
/// core (their registers allow two, and one waiting at a barrier leaves the core to the
/// other); the driver gives a core's workgroups 48-56 KiB in all, not the 228 KiB the
/// hardware can. On an H200 (driver 580) the matrix-unit kernel, padded with workgroup
/// memory it never uses, ran at full speed up to 24 576 bytes (285.4 against 286.4
/// TFLOP/s at 4096^3) and at 0.56x from 28 672 bytes on (161.8), the same at 32, 34 and
/// 40 KiB: one workgroup per core (BENCHMARKS.md, Matrix products).
#[cfg(test)]
pub(crate) const TWO_PER_CORE_WORKGROUP_BYTES: u32 = 24 * 1024;
#[cfg(test)]
const _: () = assert!(COOP_WORKGROUP_BYTES <= TWO_PER_CORE_WORKGROUP_BYTES);
/// Invocations in one workgroup of `matmul/matmul_coop.wgsl`: four subgroups of 32.
pub(crate) const COOP_WORKGROUP_SIZE: u32 = 128;
/// What `matmul/matmul_coop.wgsl` needs of the device (the host also checks the
/// cooperative matrix configuration and subgroup size: `Gpu::has_matrix_units`).
pub(crate) const MATRIX_UNITS: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP);
