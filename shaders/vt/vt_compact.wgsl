// Feedback compaction (vramkit::vt): every requested tile key once, in a short list.
// A hash set in `seen` (zeroed each frame) de-duplicates; the first invocation to insert a
// key appends it to `list` (list[0] counts, keys from list[1]; keys past `max_list` are
// counted but not stored).

#import shared/vt_hash

struct CompactParams {
    n: u32,          // feedback cells
    set_mask: u32,   // set entries - 1 (a power of two, at least 2n)
    max_list: u32,
    pad: u32,
}

@group(0) @binding(0) var<storage, read> cp: CompactParams;
@group(0) @binding(1) var<storage, read> feedback: array<u32>;
@group(0) @binding(2) var<storage, read_write> seen: array<atomic<u32>>;
@group(0) @binding(3) var<storage, read_write> list: array<atomic<u32>>;

@compute @workgroup_size(256)
fn compact(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 256u;
    if i >= cp.n {
        return;
    }
    let key = feedback[i];
    if key == 0u {
        return;
    }
    var h = vt_hash(key) & cp.set_mask;
    // At most every entry once (the set is at least twice the cells, so one is free).
    for (var probe = 0u; probe <= cp.set_mask; probe++) {
        let r = atomicCompareExchangeWeak(&seen[h], 0u, key);
        if r.exchanged {
            let at = atomicAdd(&list[0], 1u);
            if at < cp.max_list {
                atomicStore(&list[at + 1u], key);
            }
            return;
        }
        if r.old_value == key {
            return;
        }
        if r.old_value != 0u {
            h = (h + 1u) & cp.set_mask;
        }
        // else: a spurious failure of the weak exchange; try the same entry again.
    }
}
