// Row-wise softmax for rows too long to hold in registers (softmax_cached.wgsl), `cols` a
// multiple of 4: one workgroup of 1024 invocations per row, vec4 loads. The first sweep
// keeps a running (max, sum) per invocation, one update per vec4 (the online softmax of
// Milakov & Gimelshein, 2018); the workgroup combines the pairs in a tree; the second
// sweep reads x again and writes y. In a scratch program on the H100, rows of 16384 read
// 2292-2331 GB/s this way, 1735 with 256 invocations, and 1537 through the scalar
// softmax.wgsl; long rows (language-model vocabularies of 32 000 to 128 000) are what it
// is for. The host uses it only where the device allows 1024 invocations per workgroup.
//
// NaN and infinities as in softmax_cached.wgsl: a NaN reaches the sum through exp, so its
// row comes out NaN; a row of -inf, or one holding +inf, gives NaN; -inf entries give 0.
// x may be y: each invocation's second-sweep reads are of the vec4s it then writes, and
// every first-sweep read happens before the combine's first barrier.

#import shared/softmax_params

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<f32>>;

const WG: u32 = 1024u;
// The running maximum starts at the lowest finite f32, not -inf: exp(LOWEST - LOWEST) is 1
// where -inf - -inf would be NaN, so empty partials (sum 0) combine without special cases.
const LOWEST: f32 = -0x1.fffffep+127f; // f32::MIN, exactly: Tint rejects a decimal that rounds to it
var<workgroup> maxes: array<f32, 1024>;
var<workgroup> sums: array<f32, 1024>;

@compute @workgroup_size(1024)
fn softmax_sweep(@builtin(workgroup_id) wg: vec3<u32>,
                 @builtin(num_workgroups) nwg: vec3<u32>,
                 @builtin(local_invocation_index) t: u32) {
    let row = wg.y * nwg.x + wg.x;
    if row >= params.rows {
        return; // uniform per workgroup
    }
    let n4 = params.cols / 4u;
    let base = row * n4;
    var m = LOWEST;
    var s = 0.0;
    for (var c = t; c < n4; c += WG) {
        let v = x[base + c];
        let nm = max(m, max(max(v.x, v.y), max(v.z, v.w)));
        s = s * exp(m - nm) + dot(exp(v - nm), vec4<f32>(1.0));
        m = nm;
    }
    maxes[t] = m;
    sums[t] = s;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k = k / 2u) {
        if t < k {
            let m1 = maxes[t];
            let m2 = maxes[t + k];
            let mm = max(m1, m2);
            sums[t] = sums[t] * exp(m1 - mm) + sums[t + k] * exp(m2 - mm);
            maxes[t] = mm;
        }
        workgroupBarrier();
    }
    let row_max = maxes[0];
    let inv = 1.0 / sums[0];
    for (var c = t; c < n4; c += WG) {
        y[base + c] = exp(x[base + c] - row_max) * inv;
    }
}
