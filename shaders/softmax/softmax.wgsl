// Row-wise softmax: y[r, c] = exp(x[r, c] - max_r) / sum_c exp(x[r, c] - max_r), one
// workgroup per row of `cols` f32. The first sweep keeps a running (max, sum) per
// invocation (the "online" softmax of Milakov & Gimelshein, 2018), so x is read twice and y
// written once instead of three reads.
// WG, the invocations per row: 256, or 1024 (WIDE) for rows longer than softmax_cached.wgsl
// holds (on the H100, rows of 50257 read 1037-1044 GB/s with 256).

const WG: u32 = #{WG}u;
#import shared/softmax_params

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

// The running maximum starts at the lowest finite f32, not -inf: exp(LOWEST - LOWEST) is 1
// where -inf - -inf would be NaN, so empty partials (sum 0) combine without special cases.
const LOWEST: f32 = -0x1.fffffep+127f; // f32::MIN, exactly: Tint rejects a decimal that rounds to it
var<workgroup> maxes: array<f32, WG>;
var<workgroup> sums: array<f32, WG>;

fn scaled(a: f32, b: f32) -> f32 {
    return exp(a - b);
}

@compute @workgroup_size(WG)
fn softmax(@builtin(workgroup_id) wg: vec3<u32>,
           @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) t: u32) {
    let row = wg.y * nwg.x + wg.x;
    if row >= params.rows {
        return; // uniform per workgroup
    }
    let cols = params.cols;
    let base = row * cols;
    var m = LOWEST;
    var s = 0.0;
    for (var c = t; c < cols; c += WG) {
        let v = x[base + c];
        if v > m {
            s = s * scaled(m, v) + 1.0;
            m = v;
        } else {
            s = s + exp(v - m);
        }
    }
    maxes[t] = m;
    sums[t] = s;
    workgroupBarrier();
    for (var k = WG / 2u; k > 0u; k = k / 2u) {
        if t < k {
            let m1 = maxes[t];
            let m2 = maxes[t + k];
            let mm = max(m1, m2);
            sums[t] = sums[t] * scaled(m1, mm) + sums[t + k] * scaled(m2, mm);
            maxes[t] = mm;
        }
        workgroupBarrier();
    }
    let row_max = maxes[0];
    let inv = 1.0 / sums[0];
    for (var c = t; c < cols; c += WG) {
        y[base + c] = exp(x[base + c] - row_max) * inv;
    }
}
