// lab: kind=f32 tile_m=128 tile_n=128 nocheck
// The f32 units' ceiling through wgpu and naga: `matmul_vec4.wgsl`'s work per invocation
// (8 x 8 outputs as 16 vec4 accumulators, 64 multiply-adds per step, k steps) on operands
// held in registers, so no load or barrier inside the loop. It performs the product's
// 2mnk operations and stores sums of its accumulators, but not the product (no check).
@group(0) @binding(3) var<storage, read_write> c: array<vec4<f32>>;

@compute @workgroup_size(256)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>,
          @builtin(local_invocation_index) t: u32) {
    let k = params.k;
    zc = wg.z * params.stride_c;
    let row0 = wg.y * 128u;
    let col0 = wg.x * 128u;
    let tr = t / 16u;
    let tc = t % 16u;
    // a and b are read once, so the bindings stay in the pipeline's layout.
    var a0 = vec4<f32>(f32(t) * 1e-3, 0.5, 0.25, 0.125) + a[min(t, arrayLength(&a) - 1u)] * 1e-9;
    var a1 = a0 * 0.5;
    var b0 = vec4<f32>(1.0, 0.5, f32(tc) * 1e-3, 0.25) + b[min(t, arrayLength(&b) - 1u)] * 1e-9;
    var b1 = b0 * 0.25;
    var c00 = vec4<f32>(0.0); var c01 = vec4<f32>(0.0); var c10 = vec4<f32>(0.0); var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0); var c21 = vec4<f32>(0.0); var c30 = vec4<f32>(0.0); var c31 = vec4<f32>(0.0);
    var c40 = vec4<f32>(0.0); var c41 = vec4<f32>(0.0); var c50 = vec4<f32>(0.0); var c51 = vec4<f32>(0.0);
    var c60 = vec4<f32>(0.0); var c61 = vec4<f32>(0.0); var c70 = vec4<f32>(0.0); var c71 = vec4<f32>(0.0);
    for (var kk = 0u; kk < k; kk++) {
        c00 = fma(vec4<f32>(a0.x), b0, c00);
        c01 = fma(vec4<f32>(a0.x), b1, c01);
        c10 = fma(vec4<f32>(a0.y), b0, c10);
        c11 = fma(vec4<f32>(a0.y), b1, c11);
        c20 = fma(vec4<f32>(a0.z), b0, c20);
        c21 = fma(vec4<f32>(a0.z), b1, c21);
        c30 = fma(vec4<f32>(a0.w), b0, c30);
        c31 = fma(vec4<f32>(a0.w), b1, c31);
        c40 = fma(vec4<f32>(a1.x), b0, c40);
        c41 = fma(vec4<f32>(a1.x), b1, c41);
        c50 = fma(vec4<f32>(a1.y), b0, c50);
        c51 = fma(vec4<f32>(a1.y), b1, c51);
        c60 = fma(vec4<f32>(a1.z), b0, c60);
        c61 = fma(vec4<f32>(a1.z), b1, c61);
        c70 = fma(vec4<f32>(a1.w), b0, c70);
        c71 = fma(vec4<f32>(a1.w), b1, c71);
    }
    let n4 = params.n / 4u;
    let q = col0 / 4u + tc;
    let r = row0 + tr * 4u;
    // Inside c only: the lab compiles without bounds checks.
    if r + 3u < params.m && q < n4 {
        c[zc + (r + 0u) * n4 + q] = c00 + c01 + c10 + c11;
        c[zc + (r + 1u) * n4 + q] = c20 + c21 + c30 + c31;
        c[zc + (r + 2u) * n4 + q] = c40 + c41 + c50 + c51;
        c[zc + (r + 3u) * n4 + q] = c60 + c61 + c70 + c71;
    }
}
