// Portable tile scan and look-back for scan.wgsl, workgroup memory and barriers only.
//
// The tile goes through workgroup memory so that loads stay coalesced (invocation t loads
// elements j * WG + t) while each invocation scans PER consecutive elements; the WG
// invocation totals are scanned by Hillis-Steele. The look-back reads the states of the WG
// tiles before `j` at once, one per invocation, and folds them by a tree. The width
// matters: a tile publishes its prefix only when its look-back ends, so prefixes advance by
// at most one window per round.

const WG: u32 = 256u;
// PER (elements per invocation, so the tile of WG * PER) comes from scan.wgsl: 32, or 8
// where the device gives a workgroup less than the 37 892 bytes PER 32 needs (WebGPU's
// default limit is 16 KiB; OpenGL's 32 KiB).

struct Ids {
    @builtin(local_invocation_index) local: u32,
}

// The tile, one padding slot per 32 elements: invocation t reads elements PER * t ..
// PER * t + PER - 1, and without padding they would share memory banks.
var<workgroup> buf: array<T, TILE + TILE / 32u>;
var<workgroup> sums: array<T, WG>;

fn slot(i: u32) -> u32 {
    return i + i / 32u;
}

fn scan_tile(tile: u32, ids: Ids) {
    let t = ids.local;
    let base = tile * TILE;
    var v = load_tile(base, t, WG);
    for (var j = 0u; j < PER; j++) {
        buf[slot(j * WG + t)] = v[j];
    }
    workgroupBarrier();

    // Each invocation scans its PER consecutive elements, keeping them in registers.
    var acc = T(0);
    for (var j = 0u; j < PER; j++) {
        acc = acc + buf[slot(t * PER + j)];
        v[j] = acc;
    }
    sums[t] = acc;
    workgroupBarrier();

    // Inclusive scan of the WG invocation totals (Hillis-Steele).
    for (var s = 1u; s < WG; s = s << 1u) {
        var u = sums[t];
        if t >= s {
            u = sums[t - s] + u;
        }
        workgroupBarrier();
        sums[t] = u;
        workgroupBarrier();
    }

    let aggregate = sums[WG - 1u];
    if t == 0u {
        publish_aggregate(tile, aggregate);
    }
    var before = T(0);
    if tile > 0u {
        before = look_back(tile, aggregate, ids);
    }
    if t > 0u {
        before = before + sums[t - 1u];
    }
    // Each invocation writes back the slots it alone read: no barrier needed before.
    let exclusive = params.exclusive != 0u;
    var prev = before;
    for (var j = 0u; j < PER; j++) {
        let inclusive = before + v[j];
        buf[slot(t * PER + j)] = select(inclusive, prev, exclusive);
        prev = inclusive;
    }
    workgroupBarrier();

    for (var j = 0u; j < PER; j++) {
        v[j] = buf[slot(j * WG + t)];
    }
    store_tile(base, t, WG, v);
}

// One round, folded: the sum of the predecessors up to the first that is not a plain
// aggregate, how many those are, and how the run ended (0: all aggregates, 1: at an
// inclusive prefix, 2: at an unpublished tile).
var<workgroup> look_sum: array<T, WG>;
var<workgroup> look_count: array<u32, WG>;
var<workgroup> look_end: array<u32, WG>;

// Called in uniform control flow by a tile after 0 once its aggregate is published:
// publishes the tile's inclusive prefix and returns its exclusive prefix to every
// invocation.
fn look_back(tile: u32, aggregate: T, ids: Ids) -> T {
    let t = ids.local;
    var prefix = T(0);
    var j = tile - 1u;
    var stalls = 0u;
    loop {
        let s = read_back(j, t);
        let flag = s.x;
        look_sum[t] = select(T(0), from_bits(s.y), flag != 0u);
        look_count[t] = select(0u, 1u, flag != 0u);
        look_end[t] = select(select(2u, 1u, flag == PREFIX), 0u, flag == AGGREGATE);
        workgroupBarrier();
        // Fold neighbours in order (nearest first); a run that has ended stays as it is.
        for (var w = 1u; w < WG; w = w << 1u) {
            if (t & (2u * w - 1u)) == 0u && look_end[t] == 0u {
                look_sum[t] = look_sum[t] + look_sum[t + w];
                look_count[t] = look_count[t] + look_count[t + w];
                look_end[t] = look_end[t + w];
            }
            workgroupBarrier();
        }
        let end = workgroupUniformLoad(&look_end[0]);
        // Uniform loads: `j` and `stalls` steer the barriers below, and WGSL's uniformity
        // analysis (enforced by Chromium's Tint) takes a plain workgroup read as varying.
        let count = workgroupUniformLoad(&look_count[0]);
        prefix = look_sum[0] + prefix;
        if end == 1u {
            break;
        }
        j = j - count;
        stalls = select(stalls + 1u, 0u, count > 0u);
        workgroupBarrier(); // the round's results are read before the next round writes
        if end == 2u && stalls >= SPINS {
            // Fallback: tile j (a full tile: only the last can be partial) reduced here.
            look_sum[t] = tile_part(j, t, WG);
            workgroupBarrier();
            for (var w = WG / 2u; w > 0u; w = w / 2u) {
                if t < w {
                    look_sum[t] = look_sum[t] + look_sum[t + w];
                }
                workgroupBarrier();
            }
            prefix = look_sum[0] + prefix;
            workgroupBarrier();
            if j == 0u {
                break;
            }
            j = j - 1u;
            stalls = 0u;
        }
    }
    if t == 0u {
        publish(tile, prefix + aggregate, PREFIX);
    }
    return prefix;
}
