// Subgroup workgroup combine for reduce.wgsl (needs the SUBGROUP feature; naga 30 takes
// subgroup builtins without `enable subgroups;` and rejects that directive): each subgroup reduces in registers, one barrier, then invocation 0
// folds the per-subgroup values (8 of them with 32-wide subgroups). The result is valid in
// invocation 0. `op` is uniform, so each subgroup operation runs in uniform control flow.

// The workgroup's own ids are separate entry-point parameters, not members: WGSL's
// uniformity analysis (enforced by Chromium's Tint, not by naga) judges a struct as a
// whole, so a uniform row index read from this struct would make the barriers after an
// early return look non-uniform.
struct Ids {
    @builtin(local_invocation_index) local: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
}

var<workgroup> partial: array<f32, 256>;

fn workgroup_combine(op: u32, v: f32, ids: Ids) -> f32 {
    var s: f32;
    switch op {
        case 1u: { s = subgroupMax(v); }
        case 2u: { s = subgroupMin(v); }
        default: { s = subgroupAdd(v); }
    }
    // subgroupMax/Min may drop a NaN lane: NaN propagates as in combine1.
    if op != 0u && subgroupAny(is_nan1(v)) {
        s = bitcast<f32>(0x7fc00000u);
    }
    if ids.lane == 0u {
        partial[ids.subgroup] = s;
    }
    workgroupBarrier();
    var r = partial[0];
    if ids.local == 0u {
        for (var i = 1u; i < ids.subgroups; i++) {
            r = combine1(op, r, partial[i]);
        }
    }
    return r;
}
