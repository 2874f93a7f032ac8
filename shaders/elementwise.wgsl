// Elementwise f32 kernels over elements of type `Elem`, for indices [params.start, params.end).
// There is no `Elem` here on purpose: vramkit compiles this file twice, prefixed with
// `alias Elem = vec4<f32>;` (one 16-byte load or store per invocation, the aligned body of
// an array) and with `alias Elem = f32;` (the 1..3 elements of the tail). Both variants bind
// the same ranges, so one bind group serves both dispatches.
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
@group(0) @binding(1) var<storage, read_write> x: array<Elem>;
@group(0) @binding(2) var<storage, read_write> y: array<Elem>;

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
        y[i] = Elem(params.value);
    }
}
