// Whole-array reduction in one dispatch (the vec4 variants of reduce.wgsl add this entry
// point): each workgroup folds its segment of `x` as `reduce_rows` does, publishes the
// partial, and counts itself done on an atomic counter; the workgroup that counts last
// folds every partial into y[0]. A second dispatch over the partials (and the barrier
// before it, which waits for the slowest workgroup) is what this saves: a 64 Mi-float sum
// on the H100 read 2572-2646 GB/s in two dispatches and 2637-2789 in one, in the same
// processes (PyTorch's `x.sum()` 2795-2854).
//
// Params, as reduce_rows reads them: n (vec4s), cols (vec4s per segment), rows
// (segments, at most the state's slots), op, scale; then `out_base` is 1 when y[0]
// already holds the reduction of the trailing floats (written by a pass before this one)
// to fold in, and `epoch` is this call's epoch, 1..=65535.
//
// The state (binding 3, `z`) is the done counter, then two words per segment. A partial
// is published with the call's epoch as its flag (split_word.wgsl), as the scan
// publishes its tiles. The state outlives the call: the last workgroup
// resets the counter, and clears each slot after reading it. The epoch keeps a value
// left from an earlier call from being taken for this call's: a slot matches only if it
// was written by this call, or 65535 * k calls ago and never read since.
//
// No waiting on other workgroups' progress: the last workgroup only starts once every
// other one has counted itself done, after publishing, so it waits for their stores to
// become visible (relaxed atomics may be seen out of order), not for them to run. Even
// so, a slot still unpublished after SPINS reads is folded from `x` again by the whole
// workgroup, as the scan's decoupled fallback does: the wait is bounded (llvmpipe ends a
// shader's loops after 65535 iterations in total).

// `state` (binding 3) is declared by reduce.wgsl: state[0] is the done counter; the slots
// follow (split_word.wgsl).
const SPLIT_BASE: u32 = 1u;
#import shared/split_word

// Reads of one unpublished slot before its segment is folded again.
const SPINS: u32 = 256u;
// The most segments a call may have (the state's slots; src/kernels/reduce.rs).
const MAX_SLOTS: u32 = 512u;
// Slots each invocation of the last workgroup reads.
const SLOTS_PER_LANE: u32 = MAX_SLOTS / WG;

var<workgroup> is_last: u32;
var<workgroup> missing_count: atomic<u32>;
var<workgroup> missing_total: u32;
var<workgroup> missing: array<u32, MAX_SLOTS>;

// This invocation's share of segment `row` (`fold_lanes`).
fn fold_segment(op: u32, row: u32, local: u32) -> f32 {
    let start = row * params.cols;
    return fold_lanes(op, start + local, min(start + params.cols, params.n));
}

@compute @workgroup_size(256)
fn reduce_whole(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    ids: Ids,
) {
    let local = ids.local;
    let row = wg.y * nwg.x + wg.x;
    let rows = params.rows;
    // Uniform per workgroup, so the early return keeps barriers in uniform control flow.
    if row >= rows {
        return;
    }
    let op = params.op;
    let epoch = params.epoch;
    let partial_value = workgroup_combine(op, fold_segment(op, row, local), ids);
    if local == 0u {
        publish_split(row, epoch, bitcast<u32>(partial_value));
        let done_before = atomicAdd(&state[0], 1u);
        is_last = u32(done_before + 1u == rows);
        atomicStore(&missing_count, 0u);
    }
    if workgroupUniformLoad(&is_last) == 0u {
        return;
    }

    // The last workgroup: every invocation takes slots local + k * WG. All of its slots
    // are read before any is tested, so their latencies overlap; only a slot not yet
    // published is read again.
    var acc = identity(op);
    var words: array<vec2<u32>, SLOTS_PER_LANE>;
    for (var k = 0u; k < SLOTS_PER_LANE; k++) {
        let s = local + k * WG;
        if s < rows {
            words[k] = split_words(s);
        }
    }
    for (var k = 0u; k < SLOTS_PER_LANE; k++) {
        let s = local + k * WG;
        if s >= rows {
            break;
        }
        var w = words[k];
        var spins = 0u;
        loop {
            let published = split_value(w);
            if published.x == epoch {
                acc = combine1(op, acc, bitcast<f32>(published.y));
                break;
            }
            spins += 1u;
            if spins == SPINS {
                missing[atomicAdd(&missing_count, 1u)] = s;
                break;
            }
            w = split_words(s);
        }
        publish_split(s, 0u, 0u);
    }
    workgroupBarrier();
    if local == 0u {
        missing_total = atomicLoad(&missing_count);
    }
    // Segments still unpublished are folded again here, by the whole workgroup.
    let refold = workgroupUniformLoad(&missing_total);
    for (var k = 0u; k < refold; k++) {
        acc = combine1(op, acc, fold_segment(op, missing[k], local));
    }
    if local == 0u && params.out_base == 1u {
        acc = combine1(op, acc, y[0]);
    }
    let total = workgroup_combine(op, acc, ids);
    if local == 0u {
        y[0] = total * params.scale;
        atomicStore(&state[0], 0u);
    }
}
