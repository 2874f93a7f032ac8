// Tile scan and look-back for scan.wgsl with subgroup operations (the SUBGROUP feature;
// naga 30 takes the builtins without `enable subgroups;`).
//
// No tile in workgroup memory and three workgroup barriers per tile (the local scan's, the
// next claim's and the look-back result's): each subgroup owns a contiguous run of the
// tile and scans it PER rows at a time, a row being LANE consecutive elements per lane (one,
// or four in one 16-byte word: the I/O piece; so every load and store stays coalesced):
// each lane scans its own elements, then subgroupInclusiveAdd scans the lanes' sums, and a
// running carry adds the rows before. Four per lane issue a quarter of the loads, stores
// and subgroup scans: 0.86-0.88x copy on the H100 against 0.63-0.64x with one. Subgroup
// totals meet in workgroup memory once. Lanes are ranked among the active invocations and
// each subgroup takes its run from a workgroup counter, so subgroups of any size, full or
// not, cover the tile without gaps or overlap.
//
// A workgroup scans up to CLAIMS tiles in turn, one ahead: it loads the next tile, scans it
// and publishes its aggregate *before* the look-back of the current one. The time the next
// tile's loads take is time the current tile's predecessors have to publish, so the
// look-back rarely waits; and no aggregate waits on a look-back, so waits do not chain.
// (Counted on the H100 with one tile per workgroup, most look-backs took 3 to 10 rounds,
// nearly all waiting for a predecessor's aggregate, which held the scan at 0.56-0.62x
// copy; one tile ahead it runs at 0.71-0.76x. Loading the next tile but publishing its
// aggregate after the current look-back chains every aggregate to a look-back: 0.12-0.38x.)
//
// The look-back runs in subgroup 0 alone: a subgroup-width window per round folded by
// subgroup min and add, with no workgroup barrier inside the loop, so a round costs about
// one memory latency; the rest of the workgroup waits at one barrier. (Wider windows,
// 2 to 8 predecessors per lane, measured no better.)

// scan.wgsl sets PER (rows per invocation) and CLAIMS, the tiles one workgroup
// scans at most (src/kernels/scan.rs dispatches tiles / CLAIMS workgroups; claims are
// dynamic, so every tile is taken whatever the workgroups' order); the I/O piece sets what
// a row is (LANE elements per invocation, `E`).
const WG: u32 = 256u;

struct Ids {
    @builtin(local_invocation_index) local: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_id) subgroup: u32,
    @builtin(num_subgroups) subgroups: u32,
}

// Per subgroup (at most WG of them): the first rank of its run, and its total.
var<workgroup> run_start: array<u32, WG>;
var<workgroup> run_total: array<T, WG>;
var<workgroup> ranks_taken: atomic<u32>;
var<workgroup> look_prefix: T;

fn scan_tile(first_tile: u32, ids: Ids) {
    // `ranks_taken` starts at zero (WGSL zero-initialises workgroup memory) and is taken
    // from once: a subgroup keeps its run for every tile the workgroup scans.
    let width = subgroupAdd(1u);
    let rank = subgroupExclusiveAdd(1u);
    let last = subgroupMax(ids.lane);
    var first_rank = 0u;
    if rank == 0u {
        first_rank = atomicAdd(&ranks_taken, width);
    }
    let start = subgroupBroadcastFirst(first_rank);
    // The subgroup's run: rows of elements start * PER .. (start + width) * PER of each
    // tile, in units of `E`.
    let run = start * PER;
    if rank == 0u {
        run_start[ids.subgroup] = start;
    }
    var tile = first_tile;
    var v = load_rows(tile, run + rank, width);
    var sums = local_scan(&v, ids, start, last, rank);
    if ids.local == 0u {
        publish_aggregate(tile, sums.y);
    }
    for (var claim = 1u; ; claim++) {
        // Barriers since the last read of `tile_id` (local_scan's, look_prefix's) make
        // this write safe.
        if ids.local == 0u {
            var claimed = params.tiles;
            if claim < CLAIMS {
                claimed = atomicAdd(&state[0], 1u);
            }
            tile_id = claimed;
        }
        let next = workgroupUniformLoad(&tile_id);
        var w: array<E, PER>;
        var next_sums = vec2<T>(T(0), T(0));
        if next < params.tiles {
            w = load_rows(next, run + rank, width);
            next_sums = local_scan(&w, ids, start, last, rank);
            if ids.local == 0u {
                publish_aggregate(next, next_sums.y);
            }
        }
        if tile == 0u {
            look_prefix = T(0);
        } else if ids.subgroup == 0u {
            look_back(tile, sums.y, width, rank);
        }
        let before = sums.x + workgroupUniformLoad(&look_prefix);
        for (var j = 0u; j < PER; j++) {
            v[j] = before + v[j];
        }
        store_rows(tile, run + rank, width, v);
        if next >= params.tiles {
            break;
        }
        tile = next;
        v = w;
        sums = next_sums;
    }
}

// Scans each subgroup's run of the tile in `v` in place. Returns (the sum of the runs
// before this subgroup's, the tile's aggregate). Its barrier also orders this tile's use
// of `run_total` after the previous tile's reads (a uniform load stands between them).
fn local_scan(v: ptr<function, array<E, PER>>, ids: Ids, start: u32, last: u32,
              rank: u32) -> vec2<T> {
    var carry = T(0);
    for (var j = 0u; j < PER; j++) {
        let e = (*v)[j];
        let p = lane_prefix(e);
        let inclusive = subgroupInclusiveAdd(lane_sum(p));
        let row = subgroupShuffle(inclusive, last);
        (*v)[j] = lane_out(e, p, inclusive, carry);
        carry = carry + row;
    }
    if rank == 0u {
        run_total[ids.subgroup] = carry;
    }
    workgroupBarrier();
    var before = T(0);
    var aggregate = T(0);
    for (var i = 0u; i < ids.subgroups; i++) {
        let total = run_total[i];
        aggregate = aggregate + total;
        before = before + select(T(0), total, run_start[i] < start);
    }
    return vec2<T>(before, aggregate);
}

// Run by subgroup 0 of a tile after 0 once the tile's aggregate is published: publishes
// the tile's inclusive prefix and leaves its exclusive prefix in `look_prefix`.
fn look_back(tile: u32, aggregate: T, width: u32, rank: u32) {
    var prefix = T(0);
    var j = tile - 1u;
    var stalls = 0u;
    loop {
        let s = read_back(j, rank);
        let flag = s.x;
        // The nearest predecessor that is not a plain aggregate, and the nearest prefix.
        let first = subgroupMin(select(width, rank, flag != AGGREGATE));
        let first_prefix = subgroupMin(select(width, rank, flag == PREFIX));
        let done = first < width && first_prefix == first;
        let take = rank < first || (done && rank == first);
        prefix = subgroupAdd(select(T(0), from_bits(s.y), take)) + prefix;
        if done {
            break;
        }
        j = j - first;
        stalls = select(stalls + 1u, 0u, first > 0u);
        if first < width && stalls >= SPINS {
            // Fallback: tile j (a full tile: only the last can be partial) reduced here.
            prefix = subgroupAdd(tile_part(j, rank, width)) + prefix;
            if j == 0u {
                break;
            }
            j = j - 1u;
            stalls = 0u;
        }
    }
    if rank == 0u {
        publish(tile, prefix + aggregate, PREFIX);
        look_prefix = prefix;
    }
}
