// Portable workgroup combine for reduce.wgsl: a tree over 256 values in workgroup memory
// (eight barrier steps). The result is valid in invocation 0.

// The workgroup's own ids are separate entry-point parameters, not members: WGSL's
// uniformity analysis (enforced by Chromium's Tint, not by naga) judges a struct as a
// whole, so a uniform row index read from this struct would make the barriers after an
// early return look non-uniform.
struct Ids {
    @builtin(local_invocation_index) local: u32,
}

var<workgroup> partial: array<f32, 256>;

fn workgroup_combine(op: u32, v: f32, ids: Ids) -> f32 {
    partial[ids.local] = v;
    workgroupBarrier();
    for (var s = 128u; s > 0u; s = s / 2u) {
        if ids.local < s {
            partial[ids.local] = combine1(op, partial[ids.local], partial[ids.local + s]);
        }
        workgroupBarrier();
    }
    return partial[0];
}
