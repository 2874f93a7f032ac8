// Inclusive or exclusive prefix sum of `T` (u32, wrapping; or f32) in one pass over memory:
// each workgroup scans a tile of 4096 elements and finds the sum of everything before it
// by decoupled look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan with
// Decoupled Look-back", 2016): it publishes its tile's aggregate, walks back over the
// predecessors' published values until one carries an inclusive prefix, then publishes its
// own inclusive prefix. Reading the input once and writing once is what brings a scan near
// copy bandwidth; a reduce-then-scan reads the input twice.
//
// No unbounded waiting (decoupled fallback, Smith, Levien & Owens, "Decoupled Fallback: A
// Portable Single-Pass GPU Scan", 2025): a workgroup reads a predecessor's state at most
// SPINS rounds; if it is still unpublished, the whole workgroup reduces that predecessor's
// input itself and steps on. So the scan needs no forward-progress guarantee between
// workgroups, and it survives drivers that bound loops (llvmpipe ends a shader's loops
// after 65535 iterations in total, which an unbounded spin on a busy machine exceeds).
// Tiles are numbered by an atomic counter when a workgroup starts, so predecessors are
// normally running already and the fallback is rare. Because a fallback reads another
// tile's input, the output must not overlap the input.
//
// A published value is 32 bits with a 2-bit flag (1: aggregate, 2: inclusive prefix); WGSL
// has no 64-bit atomics, so it goes out as two words `flag << 16 | half`, and a reader
// accepts a pair only when both halves carry the same non-zero flag. A value is published
// at most twice (aggregate, then prefix), so equal flags mean both halves are from the same
// publication.
//
// The prefix (`T`, `to_bits`, `from_bits`) picks the element type. Bindings: x (input),
// y (output, not overlapping x), z (state: tile counter then two words per tile, zeroed
// before).

struct Params {
    n: u32,
    tiles: u32,
    exclusive: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;
@group(0) @binding(3) var<storage, read_write> state: array<atomic<u32>>;

const WG: u32 = 256u;
const PER: u32 = 16u;
const TILE: u32 = 4096u;
const AGGREGATE: u32 = 1u;
const PREFIX: u32 = 2u;
// Look-back rounds without progress before a workgroup reduces the stalled tile itself.
const SPINS: u32 = 32u;

// The tile in workgroup memory, one padding slot per 16 elements: invocation t reads
// elements 16t..16t+15, and without padding 32 invocations would hit 2 memory banks.
var<workgroup> buf: array<T, 4352>;
var<workgroup> sums: array<T, 256>;
var<workgroup> tile_id: u32;
const LOOK: u32 = 32u;
var<workgroup> look_flags: array<u32, 32>;
var<workgroup> look_values: array<T, 32>;
var<workgroup> look_status: u32;
var<workgroup> look_count: u32;
var<workgroup> look_sum: T;
var<workgroup> fallback: array<T, 256>;

fn slot(i: u32) -> u32 {
    return i + i / 16u;
}

fn publish(tile: u32, v: T, flag: u32) {
    let bits = to_bits(v);
    atomicStore(&state[1u + 2u * tile], (flag << 16u) | (bits & 0xffffu));
    atomicStore(&state[2u + 2u * tile], (flag << 16u) | (bits >> 16u));
}

@compute @workgroup_size(256)
fn scan(@builtin(local_invocation_index) t: u32) {
    if t == 0u {
        tile_id = atomicAdd(&state[0], 1u);
    }
    let tile = workgroupUniformLoad(&tile_id);
    // Uniform: surplus workgroups of a rounded-up 2-D grid leave before any barrier.
    if tile >= params.tiles {
        return;
    }
    let n = params.n;
    let base = tile * TILE;

    // Coalesced loads into the tile; past the end counts as 0.
    for (var j = 0u; j < PER; j++) {
        let i = j * WG + t;
        var v = T(0);
        if base + i < n {
            v = x[base + i];
        }
        buf[slot(i)] = v;
    }
    workgroupBarrier();

    // Each invocation scans its 16 consecutive elements in place.
    var acc = T(0);
    for (var j = 0u; j < PER; j++) {
        let p = slot(t * PER + j);
        acc = acc + buf[p];
        buf[p] = acc;
    }
    sums[t] = acc;
    workgroupBarrier();

    // Inclusive scan of the 256 invocation totals (Hillis-Steele, 8 steps).
    for (var s = 1u; s < WG; s = s << 1u) {
        var v = sums[t];
        if t >= s {
            v = sums[t - s] + v;
        }
        workgroupBarrier();
        sums[t] = v;
        workgroupBarrier();
    }

    // Look-back, in uniform control flow (the fallback needs the whole workgroup). Each
    // round reads the states of the 32 tiles before `j` at once (one memory latency for
    // 32 tiles instead of one per tile), then invocation 0 sums them from the nearest back
    // to the first inclusive prefix, or up to the first tile that has published nothing.
    let aggregate = sums[WG - 1u];
    var prefix = T(0);
    if tile == 0u {
        if t == 0u {
            publish(0u, aggregate, PREFIX);
        }
    } else {
        if t == 0u {
            publish(tile, aggregate, AGGREGATE);
        }
        var j = tile - 1u;
        var stalls = 0u;
        loop {
            if t < LOOK {
                var flag = 0u;
                if t <= j {
                    let w0 = atomicLoad(&state[1u + 2u * (j - t)]);
                    let w1 = atomicLoad(&state[2u + 2u * (j - t)]);
                    // Unpublished, or caught between two publications: not ready.
                    if (w0 >> 16u) == (w1 >> 16u) {
                        flag = w0 >> 16u;
                        look_values[t] = from_bits((w1 << 16u) | (w0 & 0xffffu));
                    }
                }
                look_flags[t] = flag;
            }
            workgroupBarrier();
            if t == 0u {
                var sum = T(0);
                var k = 0u;
                var status = 0u; // 0: all 32 were aggregates, 1: reached a prefix, 2: stalled
                loop {
                    if k >= LOOK || k > j {
                        break;
                    }
                    let f = look_flags[k];
                    if f == 0u {
                        status = 2u;
                        break;
                    }
                    sum = look_values[k] + sum;
                    k = k + 1u;
                    if f == PREFIX {
                        status = 1u;
                        break;
                    }
                }
                look_status = status;
                look_count = k;
                look_sum = sum;
            }
            let status = workgroupUniformLoad(&look_status);
            prefix = look_sum + prefix;
            if status == 1u {
                break;
            }
            j = j - look_count;
            if status == 2u {
                stalls = stalls + select(1u, 0u, look_count > 0u);
                if stalls >= SPINS {
                    // Fallback: tile j (a full tile: only the last can be partial) reduced
                    // here from its input.
                    let jbase = j * TILE;
                    var part = T(0);
                    for (var k = 0u; k < PER; k++) {
                        part = part + x[jbase + k * WG + t];
                    }
                    fallback[t] = part;
                    workgroupBarrier();
                    for (var s = WG / 2u; s > 0u; s = s / 2u) {
                        if t < s {
                            fallback[t] = fallback[t] + fallback[t + s];
                        }
                        workgroupBarrier();
                    }
                    prefix = fallback[0] + prefix;
                    if j == 0u {
                        break;
                    }
                    j = j - 1u;
                    stalls = 0u;
                }
            }
            workgroupBarrier(); // everyone has read look_sum before invocation 0 rewrites it
        }
        if t == 0u {
            publish(tile, prefix + aggregate, PREFIX);
        }
    }

    var before = prefix;
    if t > 0u {
        before = before + sums[t - 1u];
    }
    let exclusive = params.exclusive != 0u;
    var prev = before;
    for (var j = 0u; j < PER; j++) {
        let p = slot(t * PER + j);
        let inclusive = before + buf[p];
        if exclusive {
            buf[p] = prev;
        } else {
            buf[p] = inclusive;
        }
        prev = inclusive;
    }
    workgroupBarrier();

    for (var j = 0u; j < PER; j++) {
        let i = j * WG + t;
        if base + i < n {
            y[base + i] = buf[slot(i)];
        }
    }
}
