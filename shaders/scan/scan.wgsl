// Inclusive or exclusive prefix sum of `T` (u32, wrapping; or f32) in one pass over memory:
// each workgroup scans a tile of TILE elements and finds the sum of everything before it by
// decoupled look-back (Merrill & Garland, "Single-pass Parallel Prefix Scan with
// Decoupled Look-back", 2016): it publishes its tile's aggregate, walks back over the
// predecessors' published values until one carries an inclusive prefix, then publishes its
// own inclusive prefix. Reading the input once and writing once is what brings a scan near
// copy bandwidth; a reduce-then-scan reads the input twice.
//
// No unbounded waiting (decoupled fallback, Smith, Levien & Owens, "Decoupled Fallback: A
// Portable Single-Pass GPU Scan", 2025): a workgroup reads a predecessor's state at most
// SPINS rounds; if it is still unpublished, the workgroup reduces that predecessor's input
// itself and steps on. So the scan needs no forward-progress guarantee between
// workgroups, and it survives drivers that bound loops (llvmpipe ends a shader's loops
// after 65535 iterations in total, which an unbounded spin on a busy machine exceeds).
// Tiles are numbered by an atomic counter when a workgroup takes them (at its start, and
// again for each further tile a piece scans in turn), so predecessors are normally running
// already and the fallback is rare. Because a fallback reads another tile's input, the
// output must not overlap the input.
//
// A published value is 32 bits with a 2-bit kind (1: aggregate, 2: inclusive prefix) and
// the call's epoch above it as its flag, `epoch << 2 | kind`, in two words
// `flag << 16 | half` (split_word.wgsl); a reader accepts a pair only when both halves
// carry the same flag, of this call's epoch. Within a call a value is published at most
// twice (aggregate, then prefix), so equal flags mean both halves are from the same
// publication.
//
// The state outlives the call, and nothing zeroes it between calls (a fill dispatch
// before each scan cost it 3-5 % on the H100): a slot written by an earlier call carries
// that call's epoch, so it reads as unpublished. Epochs run 1..=16383 (14 bits) and
// src/kernels/scan.rs zeroes the state before a call whenever they start over, so no
// earlier value in the state carries the current epoch. (Epochs are taken when a scan is
// recorded: a batch held unsubmitted while 16383 other scans run could meet its own epoch
// again. Nothing guards against that.) The claim counter `state[0]` and the done counter
// `state[1]` are reset by the last workgroup to count itself done.
//
// Variants: F32 (`T` is f32, else u32 with wrapping sums; `to_bits` and `from_bits` give
// the published bits); PER, the elements (rows, in the subgroup piece) per invocation; a
// piece brings `Ids` and `scan_tile(tile, ids)`: shared/scan_workgroup.wgsl (portable: one
// tile per workgroup, through workgroup memory) or, with SUBGROUP, shared/scan_subgroup.wgsl
// (subgroup operations, up to CLAIMS tiles per workgroup, each loaded before the look-back
// of the one before). An I/O piece moves a tile's rows: shared/scan_io.wgsl (one element
// per invocation and row) or, with VEC4, shared/scan_io_vec4.wgsl (four, in one 16-byte
// load or store; subgroup piece only). Bindings: x (input), y (output, not overlapping x),
// z (state: claim counter, done counter, then two words per tile; see above).
//
// src/kernels/scan.rs sets PER: 32, or 8 (COMPACT) where the device gives a workgroup less
// than the 37 892 bytes the portable piece needs at 32 (WebGPU's default 16 KiB, OpenGL's
// 32 KiB); 8 rows with the subgroup piece, 4 with VEC4. With CLAIMS (8) and the I/O
// piece's elements per row these make its TILE_* and CLAIMS_SUBGROUP constants.

#ifdef F32
alias T = f32;
fn to_bits(v: f32) -> u32 { return bitcast<u32>(v); }
fn from_bits(b: u32) -> f32 { return bitcast<f32>(b); }
#else
alias T = u32;
fn to_bits(v: u32) -> u32 { return v; }
fn from_bits(b: u32) -> u32 { return b; }
#endif

const PER: u32 = #{PER}u;
#ifdef SUBGROUP
const CLAIMS: u32 = 8u;
#import shared/scan_subgroup
#else
#import shared/scan_workgroup
#endif
#ifdef VEC4
#import shared/scan_io_vec4
#else
#import shared/scan_io
#endif
#import shared/split_word

struct Params {
    n: u32,
    tiles: u32,
    exclusive: u32,
    epoch: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
#ifdef VEC4
@group(0) @binding(1) var<storage, read_write> x: array<vec4<T>>;
@group(0) @binding(2) var<storage, read_write> y: array<vec4<T>>;
#else
@group(0) @binding(1) var<storage, read_write> x: array<T>;
@group(0) @binding(2) var<storage, read_write> y: array<T>;
#endif
@group(0) @binding(3) var<storage, read_write> state: array<atomic<u32>>;
// state[0] counts claimed tiles, state[1] finished workgroups; the slots follow.
const SPLIT_BASE: u32 = 2u;

// The piece sets WG (invocations) and PER (rows per invocation), the I/O piece LANE
// (elements per row and invocation); src/kernels/scan.rs knows each variant's tile.
const TILE: u32 = WG * PER * LANE;
const AGGREGATE: u32 = 1u;
const PREFIX: u32 = 2u;
// Look-back rounds without progress before a workgroup reduces the stalled tile itself.
const SPINS: u32 = 32u;

var<workgroup> tile_id: u32;

fn publish(tile: u32, v: T, kind: u32) {
    publish_split(tile, (params.epoch << 2u) | kind, to_bits(v));
}

// Tile `tile`'s published (kind, value) in this call; kind 0 while unpublished, caught
// between two publications, or left by an earlier call.
fn read_state(tile: u32) -> vec2<u32> {
    let v = split_value(split_words(tile));
    if (v.x >> 2u) != params.epoch {
        return vec2<u32>(0u, 0u);
    }
    return vec2<u32>(v.x & 3u, v.y);
}

// The state of tile j - k (the k-th tile back from j). Before tile 0 reads as unpublished,
// which a look-back never reaches: tile 0 only ever publishes a prefix.
fn read_back(j: u32, k: u32) -> vec2<u32> {
    if k > j {
        return vec2<u32>(0u, 0u);
    }
    return read_state(j - k);
}

// Publishes the tile's aggregate (tile 0's is its inclusive prefix: nothing precedes it).
fn publish_aggregate(tile: u32, aggregate: T) {
    publish(tile, aggregate, select(AGGREGATE, PREFIX, tile == 0u));
}

@compute @workgroup_size(WG)
fn scan(ids: Ids, @builtin(num_workgroups) groups: vec3<u32>) {
    if ids.local == 0u {
        tile_id = atomicAdd(&state[0], 1u);
    }
    let tile = workgroupUniformLoad(&tile_id);
    // Uniform: surplus workgroups of a rounded-up 2-D grid skip the barriers inside.
    if tile < params.tiles {
        scan_tile(tile, ids);
    }
    // Invocation 0 made every claim of this workgroup, so once it gets here the
    // workgroup claims no more. The last workgroup to count itself done leaves both
    // counters at zero for the next call.
    if ids.local == 0u {
        let done_before = atomicAdd(&state[1], 1u);
        if done_before + 1u == groups.x * groups.y * groups.z {
            atomicStore(&state[0], 0u);
            atomicStore(&state[1], 0u);
        }
    }
}
