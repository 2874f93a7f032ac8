// Row-wise softmax for short rows, one row per subgroup: each lane holds up to PER elements
// of the row in registers (`lane + k * width`, so every load and store is coalesced), and
// the row maximum and sum are subgroup operations: no workgroup memory, no barrier. This
// is what PyTorch's softmax does with a warp per row; softmax_short.wgsl and
// softmax_short_scalar.wgsl, the portable kernels for the same rows, combine through
// workgroup memory with a barrier per tree level.
//
// Variants: PER, and VEC4 for `Elem` vec4<f32> (rows whose length is a multiple of 4) or
// f32 (`ELEM` its f32 count, `hmax` and `hsum` the maximum and sum of one Elem's
// components); READ_ONLY_X binds `x` read-only (when x and y lie in different buffers). The host picks PER so
// that PER * (the smallest subgroup size) elements cover a row, and dispatches enough
// workgroups for 256 / (the largest subgroup size) rows each; rows then go round in a loop
// over the grid, so any subgroup size the device picks covers every row.
//
// `row` depends only on the subgroup and the workgroup, so the loop, and every subgroup
// operation in it, runs in uniform control flow within the subgroup.
// NaN and infinities as in softmax_cached.wgsl: a NaN anywhere in the row reaches the sum
// through exp, whichever maximum subgroupMax returns, so the whole row comes out NaN.
// x may be y: each element is read and written by the same lane.

const PER: u32 = #{PER}u;
#ifdef VEC4
alias Elem = vec4<f32>;
const ELEM: u32 = 4u;
fn hmax(v: vec4<f32>) -> f32 { return max(max(v.x, v.y), max(v.z, v.w)); }
fn hsum(v: vec4<f32>) -> f32 { return dot(v, vec4<f32>(1.0)); }
#else
alias Elem = f32;
const ELEM: u32 = 1u;
fn hmax(v: f32) -> f32 { return v; }
fn hsum(v: f32) -> f32 { return v; }
#endif
#import shared/softmax_params

@group(0) @binding(0) var<uniform> params: Params;
#ifdef READ_ONLY_X
@group(0) @binding(1) var<storage, read> x: array<Elem>;
#else
@group(0) @binding(1) var<storage, read_write> x: array<Elem>;
#endif
@group(0) @binding(2) var<storage, read_write> y: array<Elem>;

@compute @workgroup_size(256)
fn softmax_subgroup_rows(@builtin(workgroup_id) wg: vec3<u32>,
                         @builtin(num_workgroups) nwg: vec3<u32>,
                         @builtin(subgroup_invocation_id) lane: u32,
                         @builtin(subgroup_size) width: u32,
                         @builtin(subgroup_id) subgroup: u32,
                         @builtin(num_subgroups) subgroups: u32) {
    let n = params.cols / ELEM;
    let stride = nwg.x * nwg.y * subgroups;
    for (var row = (wg.y * nwg.x + wg.x) * subgroups + subgroup; row < params.rows;
         row += stride) {
        let base = row * n;
        var v: array<Elem, PER>;
        var m = neg_inf(); // -inf: no part in the maximum
        for (var k = 0u; k < PER; k++) {
            let c = lane + k * width;
            if c < n {
                v[k] = x[base + c];
                m = max(m, hmax(v[k]));
            }
        }
        let row_max = subgroupMax(m);
        var s = 0.0;
        for (var k = 0u; k < PER; k++) {
            if lane + k * width < n {
                v[k] = exp(v[k] - row_max);
                s += hsum(v[k]);
            }
        }
        let inv = 1.0 / subgroupAdd(s);
        for (var k = 0u; k < PER; k++) {
            let c = lane + k * width;
            if c < n {
                y[base + c] = v[k] * inv;
            }
        }
    }
}

// Infinities built at run time: WGSL forbids them in constant expressions, and Chromium's
// compiler (Tint) rejects `bitcast<f32>(0xff800000u)` where naga folds it.
fn neg_inf() -> f32 {
    let bits = 0xff800000u;
    return bitcast<f32>(bits);
}
