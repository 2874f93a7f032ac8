// Elementwise f32 kernels, vec4: four elements (one 16-byte load or store) per invocation,
// for vec4 indices [params.start, params.end). Bound to the same ranges as the scalar file;
// the scalar kernels finish the 1..3 elements past the last whole vec4.
//
// The grid is 2D so counts beyond 65535 workgroups work:
// index = (wg.y * num_workgroups.x + wg.x) * 256 + local.
// Buffers are bound at the allocation's offset and size, so index 0 is the allocation start.
// Inputs are declared read_write too: arena ranges share buffers, and WebGPU forbids binding
// one buffer both read-only and read-write in a dispatch (see gfx-rs/wgpu#8470).

struct Params {
    end: u32,
    start: u32,
    alpha: f32,
    beta: f32,
    value: f32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

fn element(wg: vec3<u32>, nwg: vec3<u32>, local: u32) -> u32 {
    return params.start + (wg.y * nwg.x + wg.x) * 256u + local;
}

// y = alpha * x + y
@compute @workgroup_size(256)
fn axpy(@builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) local: u32) {
    let i = element(wg, nwg, local);
    if i < params.end {
        y[i] = params.alpha * x[i] + y[i];
    }
}

// y = alpha * x + beta * y
@compute @workgroup_size(256)
fn axpby(@builtin(workgroup_id) wg: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) local: u32) {
    let i = element(wg, nwg, local);
    if i < params.end {
        y[i] = params.alpha * x[i] + params.beta * y[i];
    }
}

// y = x (works inside one buffer, where copy_buffer_to_buffer is not allowed)
@compute @workgroup_size(256)
fn copy(@builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) local: u32) {
    let i = element(wg, nwg, local);
    if i < params.end {
        y[i] = x[i];
    }
}

// y = value
@compute @workgroup_size(256)
fn fill(@builtin(workgroup_id) wg: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) local: u32) {
    let i = element(wg, nwg, local);
    if i < params.end {
        y[i] = vec4<f32>(params.value);
    }
}
