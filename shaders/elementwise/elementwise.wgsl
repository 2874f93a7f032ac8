// Elementwise f32 kernels over elements of type `Elem`, for indices [params.start, params.end).
// Two variants: VEC4 (`Elem` is vec4<f32>, one 16-byte load or store per invocation, the
// aligned body of an array) and without it (`Elem` is f32, the 1..3 elements of the tail).
// Both bind the same ranges, so one bind group serves both dispatches.
//
// The grid is 2D so counts beyond 65535 workgroups work:
// index = (wg.y * num_workgroups.x + wg.x) * 256 + local.
// Buffers are bound at the allocation's offset and size, so index 0 is the allocation start.
// Inputs are declared read_write too: arena ranges share buffers, and WebGPU forbids binding
// one buffer both read-only and read-write in a dispatch (see gfx-rs/wgpu#8470).

#ifdef VEC4
alias Elem = vec4<f32>;
#else
alias Elem = f32;
#endif

struct Params {
    end: u32,
    start: u32,
    alpha: f32,
    beta: f32,
    value: f32,
    op: u32,
    _pad0: u32,
    _pad1: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<Elem>;
@group(0) @binding(2) var<storage, read_write> y: array<Elem>;
@group(0) @binding(3) var<storage, read_write> z: array<Elem>;

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

// erf by Abramowitz & Stegun 7.1.26 (absolute error under 1.5e-7): WGSL has no erf, and the
// exact GELU (PyTorch's default) needs it.
fn erf_approx(v: Elem) -> Elem {
    let a = abs(v);
    let t = 1.0 / (1.0 + 0.3275911 * a);
    let poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
        + t * (-1.453152027 + t * 1.061405429))));
    return sign(v) * (1.0 - poly * exp(-a * a));
}

// y = f(x); `op` as in `Unary::code` (kernels/elementwise.rs). The switch is uniform, so it
// costs a branch per invocation, not divergence.
@compute @workgroup_size(256)
fn unary(@builtin(workgroup_id) wg: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) local: u32) {
    let i = element(wg, nwg, local);
    if i >= params.end {
        return;
    }
    let v = x[i];
    var r: Elem;
    switch params.op {
        case 0u: { r = -v; }
        case 1u: { r = abs(v); }
        case 2u: { r = max(v, Elem(0.0)); }
        case 3u: { r = 0.5 * v * (1.0 + erf_approx(v * 0.70710678118654752)); }
        case 4u: { r = exp(v); }
        case 5u: { r = log(v); }
        case 6u: { r = sqrt(v); }
        // tanh(v) for |v| > 15 is +-1 in f32; clamping keeps drivers that compute tanh
        // from exponentials away from inf / inf.
        case 7u: { r = tanh(clamp(v, Elem(-15.0), Elem(15.0))); }
        case 8u: { r = 1.0 / (1.0 + exp(-v)); }
        default: { r = params.alpha * v + params.beta; }
    }
    y[i] = r;
}

// z = x op y; `op` as in `Binary::code`.
@compute @workgroup_size(256)
fn binary(@builtin(workgroup_id) wg: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) local: u32) {
    let i = element(wg, nwg, local);
    if i >= params.end {
        return;
    }
    let a = x[i];
    let b = y[i];
    var r: Elem;
    switch params.op {
        case 0u: { r = a + b; }
        case 1u: { r = a - b; }
        case 2u: { r = a * b; }
        case 3u: { r = a / b; }
        case 4u: { r = max(a, b); }
        default: { r = min(a, b); }
    }
    z[i] = r;
}
