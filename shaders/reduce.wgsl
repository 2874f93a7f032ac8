// Row reductions: y[row] = op(x[row * cols + c] for c < cols, index < n), one workgroup per
// row. A whole-array reduction is two such passes: segments of the array as rows into
// partials, then the partials as one row.
//
// Each invocation walks its columns with a stride of 256 and keeps four independent
// accumulators, so four loads are in flight before the first is used; the workgroup then
// combines its 256 values in a tree in workgroup memory.
// Bindings follow the elementwise layout (params, x, y; storage read_write, see
// elementwise.wgsl for why).

struct Params {
    n: u32,        // valid elements of x (bounds the last, partial row)
    cols: u32,     // row length and stride
    rows: u32,
    op: u32,       // 0 sum, 1 max, 2 min
    scale: f32,    // result multiplier (1/n for a mean, else 1)
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

const WG: u32 = 256u;
var<workgroup> partial: array<f32, 256>;

fn identity(op: u32) -> f32 {
    switch op {
        case 1u: { return -3.40282347e+38; }
        case 2u: { return 3.40282347e+38; }
        default: { return 0.0; }
    }
}

fn combine(op: u32, a: f32, b: f32) -> f32 {
    switch op {
        case 1u: { return max(a, b); }
        case 2u: { return min(a, b); }
        default: { return a + b; }
    }
}

fn load(op: u32, i: u32, end: u32) -> f32 {
    if i < end {
        return x[i];
    }
    return identity(op);
}

@compute @workgroup_size(256)
fn reduce_rows(@builtin(workgroup_id) wg: vec3<u32>,
               @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) local: u32) {
    let row = wg.y * nwg.x + wg.x;
    // Uniform per workgroup, so the early return keeps barriers in uniform control flow.
    if row >= params.rows {
        return;
    }
    let op = params.op;
    let start = row * params.cols;
    let end = min(start + params.cols, params.n);
    var a0 = identity(op);
    var a1 = identity(op);
    var a2 = identity(op);
    var a3 = identity(op);
    var i = start + local;
    loop {
        if i >= end {
            break;
        }
        a0 = combine(op, a0, x[i]);
        a1 = combine(op, a1, load(op, i + WG, end));
        a2 = combine(op, a2, load(op, i + 2u * WG, end));
        a3 = combine(op, a3, load(op, i + 3u * WG, end));
        i += 4u * WG;
    }
    partial[local] = combine(op, combine(op, a0, a1), combine(op, a2, a3));
    workgroupBarrier();
    for (var s = WG / 2u; s > 0u; s = s / 2u) {
        if local < s {
            partial[local] = combine(op, partial[local], partial[local + s]);
        }
        workgroupBarrier();
    }
    if local == 0u {
        y[row] = partial[0] * params.scale;
    }
}
