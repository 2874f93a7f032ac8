// The additions of an all-reduce through host memory every device imports
// (`src/devices/host_reduce.rs`): for one segment of one piece, the sum over the devices
// in device order, where device `own`'s values are in its replica (device memory) and
// every other device's are its row of the slot (host memory, read across the bus inside
// this kernel). The sum goes into the replica and into the slot's result row, which the
// other devices copy it out of: every device ends with the same bits. The slot is one
// binding (rows `0..devices`, then the result row): one buffer may not be bound both
// read-only and read-write in a dispatch.

struct Params {
    start: u32,   // first element of the segment, within the piece
    len: u32,     // elements in the segment
    devices: u32, // rows of the slot before its result row
    own: u32,     // this device's row (its values are in `replica`)
    stride: u32,  // elements per row
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> p: Params;
@group(0) @binding(1) var<storage, read_write> slot: array<f32>;
@group(0) @binding(2) var<storage, read_write> replica: array<f32>;

// Device `d`'s value of element `at` of the piece.
fn value(d: u32, at: u32) -> f32 {
    if d == p.own {
        return replica[at];
    }
    return slot[d * p.stride + at];
}

@compute @workgroup_size(256)
fn sum_rows(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let i = (wg.x + wg.y * groups.x) * 256u + lid;
    if i >= p.len {
        return;
    }
    let at = p.start + i;
    var sum = value(0u, at);
    for (var d = 1u; d < p.devices; d++) {
        sum += value(d, at);
    }
    replica[at] = sum;
    slot[p.devices * p.stride + at] = sum;
}
