// Row-wise softmax for short rows of any length (at most 4 * T f32): several rows per
// workgroup of 256, T invocations (32, 64 or 128: the variant) per row, each holding up
// to four elements, `lane + k * T` for k < 4, so every load and store of a row is
// coalesced. softmax_short.wgsl does the same with one vec4 per invocation for rows whose
// length is a multiple of 4; this one serves the others (197 tokens of a ViT, say).
// Rows combine as in softmax_short.wgsl.
// NaN and infinities as in softmax_cached.wgsl. x may be y: each invocation reads its
// elements before the first combine and writes them after the second.

const T: u32 = #{T}u;
#import shared/softmax_params
#import shared/combine1
#import shared/softmax_segment

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn softmax_short_scalar(@builtin(workgroup_id) wg: vec3<u32>,
                        @builtin(num_workgroups) nwg: vec3<u32>,
                        @builtin(local_invocation_index) local: u32) {
    let row = (wg.y * nwg.x + wg.x) * ROWS_PER_GROUP + local / T;
    let lane = local % T;
    let cols = params.cols;
    let base = row * cols;
    let live = row < params.rows;
    // Element lane + k * T, or -inf (no part in the maximum) past the row.
    var v = vec4<f32>(neg_inf());
    for (var k = 0u; k < 4u; k++) {
        let c = lane + k * T;
        if live && c < cols {
            v[k] = x[base + c];
        }
    }
    let row_max = segment_combine(1u, max(max(v.x, v.y), max(v.z, v.w)), local);
    var e = vec4<f32>(0.0);
    for (var k = 0u; k < 4u; k++) {
        if live && lane + k * T < cols {
            e[k] = exp(v[k] - row_max);
        }
    }
    let inv = 1.0 / segment_combine(0u, dot(e, vec4<f32>(1.0)), local);
    for (var k = 0u; k < 4u; k++) {
        let c = lane + k * T;
        if live && c < cols {
            y[base + c] = e[k] * inv;
        }
    }
}

// Infinities built at run time: WGSL forbids them in constant expressions, and Chromium's
// compiler (Tint) rejects `bitcast<f32>(0xff800000u)` where naga folds it.
fn neg_inf() -> f32 {
    let bits = 0xff800000u;
    return bitcast<f32>(bits);
}
