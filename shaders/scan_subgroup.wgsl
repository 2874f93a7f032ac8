// Tile scan and look-back for scan.wgsl with subgroup operations (the SUBGROUP feature;
// naga 30 takes the builtins without `enable subgroups;`).
//
// No tile in workgroup memory and two workgroup barriers per tile: each subgroup owns a
// contiguous run of the tile and scans it PER rows at a time, a row being one element per
// lane (so every load and store stays coalesced), with subgroupInclusiveAdd and a running
// carry. Subgroup totals meet in workgroup memory once. Lanes are ranked among the active
// invocations and each subgroup takes its run from a workgroup counter, so subgroups of
// any size, full or not, cover the tile without gaps or overlap.
//
// The look-back runs in subgroup 0 alone: a subgroup-width window per round folded by
// subgroup min and add, with no workgroup barrier inside the loop, so a round costs about
// one memory latency; the rest of the workgroup waits at one barrier. (Publishing the
// aggregate from plain sums and scanning rows during the look-back measured slower on the
// H100: 1065 against 1454 GB/s.) Counted on the H100 at 64 Mi elements, most look-backs
// take 3 to 10 rounds, nearly all waiting for a predecessor's aggregate: tiles finish
// loading out of start order, and that wait is what keeps the scan at about 0.6x copy.

const WG: u32 = 256u;
const PER: u32 = 16u;

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

fn scan_tile(tile: u32, ids: Ids) {
    // `ranks_taken` starts at zero (WGSL zero-initialises workgroup memory) and a
    // workgroup scans one tile, so it is taken from once.
    let width = subgroupAdd(1u);
    let rank = subgroupExclusiveAdd(1u);
    let last = subgroupMax(ids.lane);
    var first_rank = 0u;
    if rank == 0u {
        first_rank = atomicAdd(&ranks_taken, width);
    }
    let start = subgroupBroadcastFirst(first_rank);
    // The subgroup's run: elements start * PER .. (start + width) * PER of the tile.
    let base = tile * TILE;
    let run = start * PER;
    var v = load_tile(base, run + rank, width);
    var carry = T(0);
    for (var j = 0u; j < PER; j++) {
        let inclusive = subgroupInclusiveAdd(v[j]);
        let row = subgroupShuffle(inclusive, last);
        v[j] = select(inclusive, inclusive - v[j], params.exclusive != 0u) + carry;
        carry = carry + row;
    }
    if rank == 0u {
        run_start[ids.subgroup] = start;
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
    if ids.local == 0u {
        publish_aggregate(tile, aggregate);
    }
    if tile == 0u {
        look_prefix = T(0);
    } else if ids.subgroup == 0u {
        look_back(tile, aggregate, width, rank);
    }
    before = before + workgroupUniformLoad(&look_prefix);
    for (var j = 0u; j < PER; j++) {
        v[j] = before + v[j];
    }
    store_tile(base, run + rank, width, v);
}

var<workgroup> look_prefix: T;

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
