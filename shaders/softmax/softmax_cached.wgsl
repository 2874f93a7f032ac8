// Row-wise softmax with the row held in registers: one workgroup of 256 invocations per row
// of `cols` f32, `cols` a multiple of 4 and at most 1024 * PER. Each invocation loads its
// PER vec4 of the row once, the workgroup combines the row maximum, then the sum of
// exp(x - max), and each invocation writes its vec4s scaled by 1 / sum. x is read once and
// y written once, the bytes a copy moves; softmax.wgsl (any `cols`) reads x twice.
//
// Variants: PER (1, 2, 4, 8 or 16 vec4 per invocation), and SUBGROUP for the workgroup
// combine (`Ids`, `workgroup_combine`) by subgroup operations (shared/reduce_subgroup.wgsl)
// instead of a tree in workgroup memory (shared/reduce_workgroup.wgsl). The early return is
// per workgroup, so every combine runs in uniform control flow.
//
// NaN and infinities: the per-invocation maximum uses WGSL's max, which may drop a NaN,
// but a NaN anywhere in the row still reaches the sum through exp, so the whole row comes
// out NaN, as in PyTorch. A row of -inf (or one holding +inf) gives exp(inf - inf): NaN,
// also as in PyTorch.
// x may be y (in place): every load of the row happens before the first combine's barrier
// and every store after the second. Bindings follow the elementwise layout (read_write,
// see elementwise.wgsl for why).

const PER: u32 = #{PER}u;
#import shared/softmax_params
#import shared/combine1
#ifdef SUBGROUP
#import shared/reduce_subgroup
#else
#import shared/reduce_workgroup
#endif

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

var<workgroup> row_stat: f32;

// op over the whole workgroup (0 sum, 1 max), returned to every invocation. The second
// barrier keeps the next combine from overwriting what a slower invocation still reads.
fn row_combine(op: u32, v: f32, ids: Ids) -> f32 {
    let r = workgroup_combine(op, v, ids);
    if ids.local == 0u {
        row_stat = r;
    }
    workgroupBarrier();
    let out = row_stat;
    workgroupBarrier();
    return out;
}

@compute @workgroup_size(256)
fn softmax_cached(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    ids: Ids,
) {
    let row = wg.y * nwg.x + wg.x;
    if row >= params.rows {
        return; // uniform per workgroup
    }
    let n4 = params.cols / 4u;
    let base = row * n4;
    var v: array<vec4<f32>, PER>;
    var m = neg_inf(); // -inf
    for (var k = 0u; k < PER; k++) {
        let c = ids.local + k * 256u;
        if c < n4 {
            v[k] = x[base + c];
            m = max(m, max(max(v[k].x, v[k].y), max(v[k].z, v[k].w)));
        }
    }
    let row_max = row_combine(1u, m, ids);
    var s = 0.0;
    for (var k = 0u; k < PER; k++) {
        if ids.local + k * 256u < n4 {
            v[k] = exp(v[k] - row_max);
            s += dot(v[k], vec4<f32>(1.0));
        }
    }
    let inv = 1.0 / row_combine(0u, s, ids);
    for (var k = 0u; k < PER; k++) {
        let c = ids.local + k * 256u;
        if c < n4 {
            y[base + c] = v[k] * inv;
        }
    }
}

// Infinities built at run time: WGSL forbids them in constant expressions, and Chromium's
// compiler (Tint) rejects `bitcast<f32>(0xff800000u)` where naga folds it.
fn neg_inf() -> f32 {
    let bits = 0xff800000u;
    return bitcast<f32>(bits);
}
