// c = a * b for f16 inputs (pairs packed in words, `Batch::to_f16`'s layout) on the
// device's matrix units (tensor cores), accumulated in f32 and written in f32, or with
// F16_OUT rounded to f16 (pairs packed in words, as the inputs) as the accumulators leave.
//
// A workgroup of four subgroups of 32 computes tiles of c of 128 x 128; subgroup s owns
// the 64 x 64 block at row (s / 2) * 64, column (s % 2) * 64, as 4 x 4 fragments of
// 16 x 16. Each step along k stages a 128 x 32 slice of a and a 32 x 128 slice of b in
// workgroup memory (as pairs of halves; rows padded by 8 halves, so the fragments' rows
// start in different banks), while the next step's slices are already loading into
// registers. A tile's accumulators leave through workgroup memory too (`store`). The
// kernel's time goes to moving the slices, not to the matrix units: with 15 of every 16
// multiply-adds removed it took as long on an H200 (BENCHMARKS.md, Matrix products).
//
// Workgroups of 128 invocations on 128 x 128 tiles replaced workgroups of 256 on 128 x 256
// (and 256 x 128 for narrow outputs): the driver gives this kernel 227 registers per
// invocation, so two of its workgroups share a core where one of the larger fitted, and a
// workgroup waiting at a barrier leaves the matrix units to the other. On an H200 that
// read 1.6-1.7x on mid-sized products (2048^3: 195.8 against 120.3 TFLOP/s; 1024 x 1024 x
// 4096: 53.9 against 31.4, where the smaller tiles also fill more cores), 3 % more on
// attention's products, and within 2 % of the larger tiles on 4096^3 and 8192^3
// (BENCHMARKS.md, Matrix products).
//
// Two workgroups share a core only while each takes at most 24 KiB of workgroup memory
// (`TWO_PER_CORE_WORKGROUP_BYTES` in `kernels/matmul.rs`, checked by a test): NVIDIA's
// Vulkan driver gives a core's workgroups 48-56 KiB in all. This kernel takes 22.5 KiB;
// padded to 28 KiB it ran at 0.56x on an H200. That is why two stages of 32-deep slices
// (41 KiB: 198 against 291 TFLOP/s at 4096^3) and staging four fragments per round (34.5
// KiB: 160 against 286) read slower: each ran one workgroup per core (BENCHMARKS.md,
// Matrix products).
//
// Each workgroup walks tiles in a loop (`tile_at` orders them): after a tile's last step
// the pieces loading are the next tile's first, so they are in flight while this tile's
// accumulators are stored. The host dispatches one workgroup per tile, and several tiles
// to a workgroup only where the grid would pass its limit: two workgroups share a core,
// and with one per two tiles half of those places stayed empty on mid-sized products
// (2048^3 on an H200: 211-213 TFLOP/s against 286 with one per tile). The loop, with a
// tile's accumulators declared and stored inside it, read 17-20 % faster on an H200 than
// the earlier one tile per workgroup on a 2-D grid (on the 128 x 256 tiles of that time);
// a flat loop (stores behind an `if` after each tile's last step) was slower.
//
// The host picks this kernel only where the device runs 16 x 16 x 16 f16 -> f32
// cooperative matrices on subgroups of exactly 32, and for shapes with m and n multiples
// of 16 and k a multiple of 8: slices are loaded eight halves at a time, zero past m, n
// and k, and a fragment past m or n is not stored. Fragments are loaded, multiplied and
// stored in workgroup-uniform control flow (every branch below tests values the whole
// workgroup shares), as cooperative operations and barriers require.
//
// `GUARDED` tests every load against the bounds. Shapes of whole tiles (m and n multiples
// of 128, k of 32) take the variant without it (WHOLE_TILES): every load is inside then.
// The test cost a quarter of the speed on the H100 (4096^3: 168-170 TFLOP/s with it,
// 220-222 without, on the earlier 128 x 256 tiles).
//
// The 16 accumulators are named one by one: naga 30 cannot index an array of
// cooperative matrices with a loop variable. Every operand of a cooperative load or store
// is a named value: naga 30 does not emit expressions written inline there.

enable f16;
enable wgpu_cooperative_matrix;

#ifdef WHOLE_TILES
const GUARDED: bool = false;
#else
const GUARDED: bool = true;
#endif

// `params` and `za`, `zb`, `zc` (shared/matmul_params.wgsl); `a` and `b`, eight halves per
// element, read-only (READ_ONLY) where neither shares a buffer with `c`; `c`, four f32 per
// element (F16_OUT: four halves, two words).
#import shared/matmul_params
@group(0) @binding(0) var<uniform> params: Params;
#ifdef READ_ONLY
@group(0) @binding(1) var<storage, read> a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> b: array<vec4<u32>>;
#else
@group(0) @binding(1) var<storage, read_write> a: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> b: array<vec4<u32>>;
#endif
#ifdef F16_OUT
@group(0) @binding(3) var<storage, read_write> c: array<vec2<u32>>;
#else
@group(0) @binding(3) var<storage, read_write> c: array<vec4<f32>>;
#endif

/// Four accumulated values as `c` holds them.
#ifdef F16_OUT
fn out4(v: vec4<f32>) -> vec2<u32> {
    return vec2<u32>(pack2x16float(v.xy), pack2x16float(v.zw));
}
#else
fn out4(v: vec4<f32>) -> vec4<f32> {
    return v;
}
#endif

alias FragA = coop_mat16x16<f16, A>;
alias FragB = coop_mat16x16<f16, B>;
alias Acc = coop_mat16x16<f32, C>;

const TILE: u32 = 128u;
const STEP_K: u32 = 32u;
const THREADS: u32 = 128u;
// The slices hold pairs of halves (see `slices`); strides and offsets below count pairs.
const A_STRIDE: u32 = 20u;              // (STEP_K + 8) / 2
const B_STRIDE: u32 = (TILE + 8u) / 2u;
// A step's slices move as eight rounds of THREADS pieces of eight halves: four of a's
// slice (4 pieces per row: A_ROUND_ROWS rows per round), then four of b's (TILE / 8
// pieces per row: B_ROUND_ROWS rows per round).
const A_ROUND_ROWS: u32 = THREADS / 4u;             // 32
const B_ROW_PIECES: u32 = TILE / 8u;
const B_ROUND_ROWS: u32 = THREADS / B_ROW_PIECES;   // 8

// The staged slices: a's (TILE x A_STRIDE pairs) from 0, then b's (STEP_K x B_STRIDE).
// Pairs, not single halves: a piece goes in with four stores instead of eight, and the
// cooperative loads read pairs as well as halves (their stride counts pairs). On an H200
// that read 10.6 % faster at 4096^3 (279.7 against 253.0 TFLOP/s) and 1.5-3.7 % on
// 2048^3 and attention's products; the driver compiles pairs and quads (`vec4<f16>`) to
// the same code. Pieces of eight halves cannot go in as one store: naga types
// `bitcast<vec2<f16>>(u32)` as f32, so the words pass through `unpack2x16float`.
const B_AT: u32 = TILE * A_STRIDE;
const SLICES: u32 = B_AT + STEP_K * B_STRIDE;
var<workgroup> slices: array<vec2<f16>, SLICES>;

/// Eight halves of a at (row, col), zero outside m x k; rows are `lda` apart (k, or the
/// whole product's k in a part of a split product).
fn load_a(row: u32, col: u32) -> vec4<u32> {
    if !GUARDED {
        return a[za + (row * params.lda + col) / 8u];
    }
    let ok = row < params.m && col < params.k;
    let i = select(0u, za + (row * params.lda + col) / 8u, ok);
    return select(vec4<u32>(0u), a[i], ok);
}

/// Eight halves of b at (row, col), zero outside k x n.
fn load_b(row: u32, col: u32) -> vec4<u32> {
    if !GUARDED {
        return b[zb + (row * params.n + col) / 8u];
    }
    let ok = row < params.k && col < params.n;
    let i = select(0u, zb + (row * params.n + col) / 8u, ok);
    return select(vec4<u32>(0u), b[i], ok);
}

/// Eight halves into the staged slices at pair `at`.
fn put(at: u32, v: vec4<u32>) {
    slices[at] = vec2<f16>(unpack2x16float(v.x));
    slices[at + 1u] = vec2<f16>(unpack2x16float(v.y));
    slices[at + 2u] = vec2<f16>(unpack2x16float(v.z));
    slices[at + 3u] = vec2<f16>(unpack2x16float(v.w));
}

// Each subgroup's 16 x 16 f32 staging area for its accumulators on their way to c, in
// fours (64 per subgroup).
var<workgroup> cstage: array<vec4<f32>, 256>;

/// Stores one accumulator at (row, col) of the product whose c starts at float `base`,
/// unless it lies past m or n (both multiples of 16, so a fragment is wholly inside or
/// outside). The fragment goes through this subgroup's staging area and leaves in fours
/// (`c` is bound as `vec4<f32>`: n, col and base are multiples of 16), each invocation
/// moving two of them, rows r and r + 8: on an H200, staging read 1.7x the speed of
/// storing fragments straight into c (`coopStoreT` to the buffer) where stores weigh most
/// (attention's k = 128: 118.7 against 70.5 TFLOP/s), and fours instead of single floats
/// 1.3-1.9 % more on 2048^3 and attention's products (the same at 4096^3), in half the code.
/// The barriers keep a fragment's staging from overwriting the previous one before every
/// invocation has read it. They are the workgroup's: naga's `subgroupBarrier` orders no
/// workgroup memory (its SPIR-V semantics name subgroup memory only), although on an H200
/// it read 0.4-4 % faster and gave the right products.
fn store(acc: Acc, base: u32, row: u32, col: u32, sg: u32, lane: u32) {
    let at = sg * 64u;
    workgroupBarrier();
    coopStoreT(acc, &cstage[at], 4u);
    workgroupBarrier();
    let n = params.n;
    if row < params.m && col < n {
        let n4 = n / 4u;
        let first = (base + row * n + col) / 4u;
        let r = lane / 4u;
        let q = lane % 4u;
        c[first + r * n4 + q] = out4(cstage[at + lane]);
        c[first + (r + 8u) * n4 + q] = out4(cstage[at + 32u + lane]);
    }
}

/// Where tile `tile` lies: (first row, first column, product). Tiles go through each
/// product in groups of 8 tile rows, column by column within a group, so that the
/// workgroups running together share rows of a and columns of b in the cache.
fn tile_at(tile: u32, gx: u32, gy: u32) -> vec3<u32> {
    let per_product = gx * gy;
    let z = tile / per_product;
    let id = tile % per_product;
    let per_group = 8u * gx;
    let first = (id / per_group) * 8u;
    let rows_here = min(gy - first, 8u);
    let r = first + (id % per_group) % rows_here;
    let q = (id % per_group) / rows_here;
    return vec3<u32>(r * TILE, q * TILE, z);
}

/// Points za, zb and zc at product z.
fn enter_product(z: u32) {
    za = z * params.stride_a;
    zb = z * params.stride_b;
    zc = z * params.stride_c;
}

@compute @workgroup_size(128)
fn matmul(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(local_invocation_index) li: u32,
    @builtin(subgroup_invocation_id) lane: u32,
) {
    let gx = (params.n + TILE - 1u) / TILE;
    let gy = (params.m + TILE - 1u) / TILE;
    let tiles = gx * gy * params.batch;
    var tile = wg.x;
    var at = tile_at(tile, gx, gy);
    enter_product(at.z);
    // This subgroup's 64 x 64 block within a tile.
    let br = (sg / 2u) * 64u;
    let bc = (sg % 2u) * 64u;
    // This invocation's pieces: a's rows a_row + A_ROUND_ROWS r, column a_col, and b's
    // rows b_row + B_ROUND_ROWS r, column b_col, for rounds r < 4.
    // Eight invocations (a quarter of a subgroup, which stores 128 bytes at once) take
    // rows r and r + 4 of a's slice: 80 words apart, so their 16-byte stores fall in all
    // 32 banks (rows next to each other, 20 words apart, share four). On an H200 this
    // read 2.9 % faster at 4096^3 (289.8 against 281.7 TFLOP/s), 3.2 % at 2048^3. b's
    // eight take 32 words of one row already.
    let a_row = (li / 32u) * 8u + ((li % 8u) / 4u) * 4u + (li / 8u) % 4u;
    let a_col = (li % 4u) * 8u;
    let b_row = li / B_ROW_PIECES;
    let b_col = (li % B_ROW_PIECES) * 8u;
    let a_put = a_row * A_STRIDE + a_col / 2u;
    let b_put = B_AT + b_row * B_STRIDE + b_col / 2u;

    // The first step's pieces; after that, each step loads the next one's.
    var g0 = load_a(at.x + a_row, a_col);
    var g1 = load_a(at.x + a_row + A_ROUND_ROWS, a_col);
    var g2 = load_a(at.x + a_row + 2u * A_ROUND_ROWS, a_col);
    var g3 = load_a(at.x + a_row + 3u * A_ROUND_ROWS, a_col);
    var g4 = load_b(b_row, at.y + b_col);
    var g5 = load_b(b_row + B_ROUND_ROWS, at.y + b_col);
    var g6 = load_b(b_row + 2u * B_ROUND_ROWS, at.y + b_col);
    var g7 = load_b(b_row + 3u * B_ROUND_ROWS, at.y + b_col);

    loop {
        if tile >= tiles {
            break;
        }
        let here = at;
        let here_c = zc;
        var c00 = Acc(); var c01 = Acc(); var c02 = Acc(); var c03 = Acc();
        var c10 = Acc(); var c11 = Acc(); var c12 = Acc(); var c13 = Acc();
        var c20 = Acc(); var c21 = Acc(); var c22 = Acc(); var c23 = Acc();
        var c30 = Acc(); var c31 = Acc(); var c32 = Acc(); var c33 = Acc();

        for (var kk = 0u; kk < params.k; kk += STEP_K) {
            workgroupBarrier();
            put(a_put, g0);
            put(a_put + A_ROUND_ROWS * A_STRIDE, g1);
            put(a_put + 2u * A_ROUND_ROWS * A_STRIDE, g2);
            put(a_put + 3u * A_ROUND_ROWS * A_STRIDE, g3);
            put(b_put, g4);
            put(b_put + B_ROUND_ROWS * B_STRIDE, g5);
            put(b_put + 2u * B_ROUND_ROWS * B_STRIDE, g6);
            put(b_put + 3u * B_ROUND_ROWS * B_STRIDE, g7);
            workgroupBarrier();
            // The next step's pieces load while this one is multiplied: this tile's, or
            // after its last step the next tile's first.
            var next = kk + STEP_K;
            var more = true;
            if next >= params.k {
                next = 0u;
                tile += groups.x;
                more = tile < tiles;
                if more {
                    at = tile_at(tile, gx, gy);
                    enter_product(at.z);
                }
            }
            if more {
                g0 = load_a(at.x + a_row, next + a_col);
                g1 = load_a(at.x + a_row + A_ROUND_ROWS, next + a_col);
                g2 = load_a(at.x + a_row + 2u * A_ROUND_ROWS, next + a_col);
                g3 = load_a(at.x + a_row + 3u * A_ROUND_ROWS, next + a_col);
                g4 = load_b(next + b_row, at.y + b_col);
                g5 = load_b(next + b_row + B_ROUND_ROWS, at.y + b_col);
                g6 = load_b(next + b_row + 2u * B_ROUND_ROWS, at.y + b_col);
                g7 = load_b(next + b_row + 3u * B_ROUND_ROWS, at.y + b_col);
            }

            for (var ks = 0u; ks < STEP_K; ks += 16u) {
                let ia0 = br * A_STRIDE + ks / 2u;
                let ia1 = ia0 + 16u * A_STRIDE;
                let ia2 = ia0 + 32u * A_STRIDE;
                let ia3 = ia0 + 48u * A_STRIDE;
                let a0 = coopLoadT<FragA>(&slices[ia0], A_STRIDE);
                let a1 = coopLoadT<FragA>(&slices[ia1], A_STRIDE);
                let a2 = coopLoadT<FragA>(&slices[ia2], A_STRIDE);
                let a3 = coopLoadT<FragA>(&slices[ia3], A_STRIDE);
                let ib0 = B_AT + ks * B_STRIDE + bc / 2u;
                let ib1 = ib0 + 8u;
                let ib2 = ib0 + 16u;
                let ib3 = ib0 + 24u;
                let b0 = coopLoadT<FragB>(&slices[ib0], B_STRIDE);
                let b1 = coopLoadT<FragB>(&slices[ib1], B_STRIDE);
                let b2 = coopLoadT<FragB>(&slices[ib2], B_STRIDE);
                let b3 = coopLoadT<FragB>(&slices[ib3], B_STRIDE);
                c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
                c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
                c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
                c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
                c20 = coopMultiplyAdd(a2, b0, c20); c21 = coopMultiplyAdd(a2, b1, c21);
                c22 = coopMultiplyAdd(a2, b2, c22); c23 = coopMultiplyAdd(a2, b3, c23);
                c30 = coopMultiplyAdd(a3, b0, c30); c31 = coopMultiplyAdd(a3, b1, c31);
                c32 = coopMultiplyAdd(a3, b2, c32); c33 = coopMultiplyAdd(a3, b3, c33);
            }
        }

        let r = here.x + br;
        let q = here.y + bc;
        store(c00, here_c, r, q, sg, lane); store(c01, here_c, r, q + 16u, sg, lane);
        store(c02, here_c, r, q + 32u, sg, lane); store(c03, here_c, r, q + 48u, sg, lane);
        store(c10, here_c, r + 16u, q, sg, lane); store(c11, here_c, r + 16u, q + 16u, sg, lane);
        store(c12, here_c, r + 16u, q + 32u, sg, lane); store(c13, here_c, r + 16u, q + 48u, sg, lane);
        store(c20, here_c, r + 32u, q, sg, lane); store(c21, here_c, r + 32u, q + 16u, sg, lane);
        store(c22, here_c, r + 32u, q + 32u, sg, lane); store(c23, here_c, r + 32u, q + 48u, sg, lane);
        store(c30, here_c, r + 48u, q, sg, lane); store(c31, here_c, r + 48u, q + 16u, sg, lane);
        store(c32, here_c, r + 48u, q + 32u, sg, lane); store(c33, here_c, r + 48u, q + 48u, sg, lane);
    }
}
