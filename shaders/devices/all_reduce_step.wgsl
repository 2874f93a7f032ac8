// One step of an all-reduce through host memory every device imports
// (`src/devices/host_rows.rs`), on device `own`, as one dispatch of three jobs that touch
// disjoint memory, so that the link carries bytes both ways at once:
// - publish: this device's values of piece s, all but its own segment, into its row of
//   the piece's slot (device to host);
// - sum: its own segment of piece s - 1, over the devices in device order, its values
//   from its replica and the others' from their rows (host to device); the sum into the
//   replica and into the slot's result row (device to host);
// - gather: the others' sums of piece s - 2, out of that slot's result row into the
//   replica (host to device).
// Every device copies the one sum made on the segment's device: all hold the same bits.
// Indices are in `Elem`s (f32, or vec4<f32> with VEC4: 16-byte loads and stores across
// the bus, for arrays whose length is a multiple of 4); `host` is the whole host
// allocation (one binding: a buffer may not be bound both read-only and read-write in
// one dispatch), `replica` a window of the device's array holding pieces s - 2 to s.

#ifdef VEC4
alias Elem = vec4<f32>;
#else
alias Elem = f32;
#endif

struct Params {
    devices: u32,
    own: u32,
    stride: u32,        // elements per host row
    publish_count: u32, // invocations of each job, in this order
    sum_count: u32,
    gather_count: u32,
    // publish: piece s at `publish_at` in `replica`, own segment [publish_skip, + own len)
    publish_at: u32,
    publish_skip: u32,
    publish_skip_len: u32,
    publish_row: u32,   // this device's row of piece s's slot, in `host`
    // sum: piece s - 1 at `sum_at` in `replica`, own segment at `sum_start`
    sum_at: u32,
    sum_start: u32,
    sum_rows: u32,      // row 0 of piece s - 1's slot, in `host` (its result row follows the devices')
    // gather: piece s - 2 at `gather_at` in `replica`, own segment skipped
    gather_at: u32,
    gather_skip: u32,
    gather_skip_len: u32,
    gather_result: u32, // the result row of piece s - 2's slot, in `host`
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> host: array<Elem>;
@group(0) @binding(2) var<storage, read_write> replica: array<Elem>;

// Element `i` of a piece with the own segment [skip, skip + len) passed over.
fn skipping(i: u32, skip: u32, len: u32) -> u32 {
    return select(i, i + len, i >= skip);
}

// Device `d`'s value of element `e` of piece s - 1.
fn value(d: u32, e: u32) -> Elem {
    if d == p.own {
        return replica[p.sum_at + e];
    }
    return host[p.sum_rows + d * p.stride + e];
}

@compute @workgroup_size(256)
fn all_reduce_step(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    var i = (wg.x + wg.y * groups.x) * 256u + lid;
    if i < p.publish_count {
        let e = skipping(i, p.publish_skip, p.publish_skip_len);
        host[p.publish_row + e] = replica[p.publish_at + e];
        return;
    }
    i -= p.publish_count;
    if i < p.sum_count {
        let e = p.sum_start + i;
        var sum = value(0u, e);
        for (var d = 1u; d < p.devices; d++) {
            sum += value(d, e);
        }
        replica[p.sum_at + e] = sum;
        host[p.sum_rows + p.devices * p.stride + e] = sum;
        return;
    }
    i -= p.sum_count;
    if i < p.gather_count {
        let e = skipping(i, p.gather_skip, p.gather_skip_len);
        replica[p.gather_at + e] = host[p.gather_result + e];
    }
}
