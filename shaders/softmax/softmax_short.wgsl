// Row-wise softmax for short rows (`cols` a multiple of 4, at most 4 * T): several rows
// per workgroup of 256, T invocations (32, 64 or 128: the variant) per row, one vec4
// each. softmax_cached.wgsl gives every row a whole workgroup, which at rows of 128 floats
// leaves seven of eight invocations idle; attention scores are rows this short.
// Rows combine with `segment_combine` (shared/softmax_segment.wgsl): trees over segments
// of T in workgroup memory, every invocation taking part (rows past the end included), so
// every barrier is in uniform control flow. softmax_short_scalar.wgsl is the same for rows of any length.
// NaN and infinities as in softmax_cached.wgsl. x may be y: each invocation reads its vec4
// before the first combine and writes it after the second.

const T: u32 = #{T}u;
#import shared/softmax_params
#import shared/combine1
#import shared/softmax_segment

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

@compute @workgroup_size(256)
fn softmax_short(@builtin(workgroup_id) wg: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) local: u32) {
    let row = (wg.y * nwg.x + wg.x) * ROWS_PER_GROUP + local / T;
    let lane = local % T;
    let n4 = params.cols / 4u;
    let valid = row < params.rows && lane < n4;
    var v = vec4<f32>(neg_inf()); // -inf: no part in the maximum
    if valid {
        v = x[row * n4 + lane];
    }
    let row_max = segment_combine(1u, max(max(v.x, v.y), max(v.z, v.w)), local);
    var e = vec4<f32>(0.0);
    if valid {
        e = exp(v - row_max);
    }
    let inv = 1.0 / segment_combine(0u, dot(e, vec4<f32>(1.0)), local);
    if valid {
        y[row * n4 + lane] = e * inv;
    }
}

// Infinities built at run time: WGSL forbids them in constant expressions, and Chromium's
// compiler (Tint) rejects `bitcast<f32>(0xff800000u)` where naga folds it.
fn neg_inf() -> f32 {
    let bits = 0xff800000u;
    return bitcast<f32>(bits);
}
