// c = a * b for f16 inputs (pairs packed in words, `Batch::to_f16`'s layout) on the
// device's matrix units (tensor cores), accumulated and written in f32.
//
// A workgroup of eight subgroups of 32 computes a 128 x 256 tile of c; subgroup s owns
// the 64 x 64 block at row (s / 4) * 64, column (s % 4) * 64, as 4 x 4 fragments of
// 16 x 16. Each step along k stages a 128 x 32 slice of a and a 32 x 256 slice of b in
// workgroup memory (rows padded by 8 halves, so the fragments' rows start in different
// banks), while the next step's slices are already loading into registers.
//
// The host picks this kernel only where the device runs 16 x 16 x 16 f16 -> f32
// cooperative matrices on subgroups of exactly 32, and for shapes with m and n multiples
// of 16 and k a multiple of 8: slices are loaded eight halves at a time, zero past m, n
// and k, and a fragment past m or n is not stored. Fragments are loaded and multiplied
// in subgroup-uniform control flow, as cooperative operations require.
//
// `matmul_coop_tall.wgsl` is the same kernel on 256 x 128 tiles, for narrow outputs.
// `matmul_coop_common.wgsl` (before this file) holds the parameters, loads, staging and
// store both share.
//
// The prefix sets `GUARDED`. Shapes of whole tiles (m a multiple of 128, n of 256, k of
// 32) take the variant without the per-load bounds test: every load is inside then, and
// the next slice is loaded only while one remains. The test cost a quarter of the speed
// on the H100 (4096^3: 168-170 TFLOP/s with it, 220-222 without; 8192^3: 187 and 256).
//
// The 16 accumulators are named one by one: naga 30 cannot index an array of
// cooperative matrices with a loop variable.

const TILE_M: u32 = 128u;
const TILE_N: u32 = 256u;
const STEP_K: u32 = 32u;
const A_STRIDE: u32 = 40u;   // STEP_K + 8
const B_STRIDE: u32 = 264u;  // TILE_N + 8
const THREADS: u32 = 256u;

// The staged slices: a's (TILE_M x A_STRIDE) from 0, then b's (STEP_K x B_STRIDE).
const B_AT: u32 = 5120u;     // TILE_M * A_STRIDE
var<workgroup> slices: array<f16, 13568>;   // B_AT + STEP_K * B_STRIDE

@compute @workgroup_size(256)
fn matmul(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(subgroup_id) sg: u32,
    @builtin(local_invocation_index) li: u32,
) {
    za = wg.z * params.stride_a;
    zb = wg.z * params.stride_b;
    zc = wg.z * params.stride_c;
    let row0 = wg.y * TILE_M;
    let col0 = wg.x * TILE_N;
    // This subgroup's 64 x 64 block within the tile.
    let br = (sg / 4u) * 64u;
    let bc = (sg % 4u) * 64u;

    // Each invocation moves two eight-half pieces of each slice: a's slice is 128 rows of
    // 4 pieces, b's is 32 rows of 32 pieces.
    let a_row0 = li / 4u;
    let a_row1 = a_row0 + 64u;
    let a_col = (li % 4u) * 8u;
    let b_row0 = li / 32u;
    let b_row1 = b_row0 + 8u;
    let b_row2 = b_row0 + 16u;
    let b_row3 = b_row0 + 24u;
    let b_col = (li % 32u) * 8u;

    var c00 = Acc(); var c01 = Acc(); var c02 = Acc(); var c03 = Acc();
    var c10 = Acc(); var c11 = Acc(); var c12 = Acc(); var c13 = Acc();
    var c20 = Acc(); var c21 = Acc(); var c22 = Acc(); var c23 = Acc();
    var c30 = Acc(); var c31 = Acc(); var c32 = Acc(); var c33 = Acc();

    var ga0 = load_a(row0 + a_row0, a_col);
    var ga1 = load_a(row0 + a_row1, a_col);
    var gb0 = load_b(b_row0, col0 + b_col);
    var gb1 = load_b(b_row1, col0 + b_col);
    var gb2 = load_b(b_row2, col0 + b_col);
    var gb3 = load_b(b_row3, col0 + b_col);

    for (var kk = 0u; kk < params.k; kk += STEP_K) {
        workgroupBarrier();
        put(a_row0 * A_STRIDE + a_col, ga0);
        put(a_row1 * A_STRIDE + a_col, ga1);
        put(B_AT + b_row0 * B_STRIDE + b_col, gb0);
        put(B_AT + b_row1 * B_STRIDE + b_col, gb1);
        put(B_AT + b_row2 * B_STRIDE + b_col, gb2);
        put(B_AT + b_row3 * B_STRIDE + b_col, gb3);
        workgroupBarrier();
        // The next slices load while this one is multiplied.
        let next = kk + STEP_K;
        if next < params.k {
            ga0 = load_a(row0 + a_row0, next + a_col);
            ga1 = load_a(row0 + a_row1, next + a_col);
            gb0 = load_b(next + b_row0, col0 + b_col);
            gb1 = load_b(next + b_row1, col0 + b_col);
            gb2 = load_b(next + b_row2, col0 + b_col);
            gb3 = load_b(next + b_row3, col0 + b_col);
        }

        for (var ks = 0u; ks < STEP_K; ks += 16u) {
            let ia0 = br * A_STRIDE + ks;
            let ia1 = ia0 + 16u * A_STRIDE;
            let ia2 = ia0 + 32u * A_STRIDE;
            let ia3 = ia0 + 48u * A_STRIDE;
            let a0 = coopLoadT<FragA>(&slices[ia0], A_STRIDE);
            let a1 = coopLoadT<FragA>(&slices[ia1], A_STRIDE);
            let a2 = coopLoadT<FragA>(&slices[ia2], A_STRIDE);
            let a3 = coopLoadT<FragA>(&slices[ia3], A_STRIDE);
            let ib0 = B_AT + ks * B_STRIDE + bc;
            let ib1 = ib0 + 16u;
            let ib2 = ib0 + 32u;
            let ib3 = ib0 + 48u;
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

    let r = row0 + br;
    let q = col0 + bc;
    store(c00, r, q); store(c01, r, q + 16u); store(c02, r, q + 32u); store(c03, r, q + 48u);
    store(c10, r + 16u, q); store(c11, r + 16u, q + 16u);
    store(c12, r + 16u, q + 32u); store(c13, r + 16u, q + 48u);
    store(c20, r + 32u, q); store(c21, r + 32u, q + 16u);
    store(c22, r + 32u, q + 32u); store(c23, r + 32u, q + 48u);
    store(c30, r + 48u, q); store(c31, r + 48u, q + 16u);
    store(c32, r + 48u, q + 32u); store(c33, r + 48u, q + 48u);
}
