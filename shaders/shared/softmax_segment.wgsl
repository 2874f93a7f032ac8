// Segment combines for the short-row softmax kernels (softmax_short.wgsl,
// softmax_short_scalar.wgsl): a workgroup of 256 holds 256 / T rows, T invocations each.
// Every invocation of the workgroup must call it, in uniform control flow.

const ROWS_PER_GROUP: u32 = 256u / T;
var<workgroup> red: array<f32, 256>;

// op (0 sum, 1 max) over this invocation's segment of T, returned to each of them.
fn segment_combine(op: u32, v: f32, local: u32) -> f32 {
    let lane = local % T;
    red[local] = v;
    workgroupBarrier();
    for (var s = T / 2u; s > 0u; s = s / 2u) {
        if lane < s {
            red[local] = combine1(op, red[local], red[local + s]);
        }
        workgroupBarrier();
    }
    let r = red[local - lane];
    workgroupBarrier();
    return r;
}

