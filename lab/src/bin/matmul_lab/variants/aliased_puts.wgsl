// lab: kind=coop tile_m=128 tile_n=128 walk out=vec4 spirv
// The shipped f16 kernel (matmul_coop.wgsl) with its workgroup variables in one block
// (`spirv`: VK_KHR_workgroup_memory_explicit_layout), so that each piece of eight halves
// goes into the slices as one 16-byte store through a `vec4<u32>` view (`slices_w`)
// instead of four `vec2<f16>` stores through `unpack2x16float`, and the accumulators'
// staging (`cstage`) shares the slices' memory (18 944 bytes in all, against 23 040).
// H200, 2026-11-29: 253.5 TFLOP/s at 4096^3 against 287.4 shipped, slower at every shape
// (BENCHMARKS.md, Matrix products).
alias FragA = coop_mat16x16<f16, A>;
alias FragB = coop_mat16x16<f16, B>;
alias Acc = coop_mat16x16<f32, C>;
const STEP_K: u32 = 32u;
const A_STRIDE: u32 = 20u;
const B_STRIDE: u32 = (TILE_N + 8u) / 2u;
const A_ROUND_ROWS: u32 = 32u;
const B_ROW_PIECES: u32 = 16u;
const B_ROUND_ROWS: u32 = 8u;
const B_AT: u32 = TILE_M * A_STRIDE;
const SLICES: u32 = B_AT + STEP_K * B_STRIDE;
var<workgroup> slices: array<vec2<f16>, SLICES>;
fn load_a(row: u32, col: u32) -> vec4<u32> {
    if !GUARDED { return a[za + (row * params.lda + col) / 8u]; }
    let ok = row < params.m && col < params.k;
    let i = select(0u, za + (row * params.lda + col) / 8u, ok);
    return select(vec4<u32>(0u), a[i], ok);
}
fn load_b(row: u32, col: u32) -> vec4<u32> {
    if !GUARDED { return b[zb + (row * params.n + col) / 8u]; }
    let ok = row < params.k && col < params.n;
    let i = select(0u, zb + (row * params.n + col) / 8u, ok);
    return select(vec4<u32>(0u), b[i], ok);
}
var<workgroup> slices_w: array<vec4<u32>, SLICES / 4u>;
fn put(at: u32, v: vec4<u32>) {
    slices_w[at / 4u] = v;
}
var<workgroup> cstage: array<vec4<f32>, 256>;
fn out(base: u32, row: u32, col: u32, at: u32, lane: u32) {
    let n = params.n;
    if row < params.m && col < n {
        let n4 = n / 4u;
        let first = (base + row * n + col) / 4u;
        let r = lane / 4u;
        let q = lane % 4u;
        c[first + r * n4 + q] = cstage[at + lane];
        c[first + (r + 8u) * n4 + q] = cstage[at + 32u + lane];
    }
}
fn tile_at(tile: u32, gx: u32, gy: u32) -> vec3<u32> {
    let per_product = gx * gy;
    let z = tile / per_product;
    let id = tile % per_product;
    let per_group = 8u * gx;
    let first = (id / per_group) * 8u;
    let rows_here = min(gy - first, 8u);
    let r = first + (id % per_group) % rows_here;
    let q = (id % per_group) / rows_here;
    return vec3<u32>(r * TILE_M, q * TILE_N, z);
}
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
    let gx = (params.n + TILE_N - 1u) / TILE_N;
    let gy = (params.m + TILE_M - 1u) / TILE_M;
    let tiles = gx * gy * params.batch;
    var tile = wg.x;
    var at = tile_at(tile, gx, gy);
    enter_product(at.z);
    let br = (sg / 2u) * 64u;
    let bc = (sg % 2u) * 64u;
    let a_row = (li / 32u) * 8u + ((li % 8u) / 4u) * 4u + (li / 8u) % 4u;
    let a_col = (li % 4u) * 8u;
    let b_row = li / B_ROW_PIECES;
    let b_col = (li % B_ROW_PIECES) * 8u;
    let a_put = a_row * A_STRIDE + a_col / 2u;
    let b_put = B_AT + b_row * B_STRIDE + b_col / 2u;
    let st = sg * 64u;
    var g0 = load_a(at.x + a_row + 0u * A_ROUND_ROWS, a_col);
    var g1 = load_a(at.x + a_row + 1u * A_ROUND_ROWS, a_col);
    var g2 = load_a(at.x + a_row + 2u * A_ROUND_ROWS, a_col);
    var g3 = load_a(at.x + a_row + 3u * A_ROUND_ROWS, a_col);
    var g4 = load_b(b_row + 0u * B_ROUND_ROWS, at.y + b_col);
    var g5 = load_b(b_row + 1u * B_ROUND_ROWS, at.y + b_col);
    var g6 = load_b(b_row + 2u * B_ROUND_ROWS, at.y + b_col);
    var g7 = load_b(b_row + 3u * B_ROUND_ROWS, at.y + b_col);
    loop {
        if tile >= tiles { break; }
        let here = at;
        let here_c = zc;
        var c00 = Acc(); var c01 = Acc(); var c02 = Acc(); var c03 = Acc();
        var c10 = Acc(); var c11 = Acc(); var c12 = Acc(); var c13 = Acc();
        var c20 = Acc(); var c21 = Acc(); var c22 = Acc(); var c23 = Acc();
        var c30 = Acc(); var c31 = Acc(); var c32 = Acc(); var c33 = Acc();
        for (var kk = 0u; kk < params.k; kk += STEP_K) {
            workgroupBarrier();
            put(a_put + 0u * A_ROUND_ROWS * A_STRIDE, g0);
            put(a_put + 1u * A_ROUND_ROWS * A_STRIDE, g1);
            put(a_put + 2u * A_ROUND_ROWS * A_STRIDE, g2);
            put(a_put + 3u * A_ROUND_ROWS * A_STRIDE, g3);
            put(b_put + 0u * B_ROUND_ROWS * B_STRIDE, g4);
            put(b_put + 1u * B_ROUND_ROWS * B_STRIDE, g5);
            put(b_put + 2u * B_ROUND_ROWS * B_STRIDE, g6);
            put(b_put + 3u * B_ROUND_ROWS * B_STRIDE, g7);
            workgroupBarrier();
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
                g0 = load_a(at.x + a_row + 0u * A_ROUND_ROWS, next + a_col);
                g1 = load_a(at.x + a_row + 1u * A_ROUND_ROWS, next + a_col);
                g2 = load_a(at.x + a_row + 2u * A_ROUND_ROWS, next + a_col);
                g3 = load_a(at.x + a_row + 3u * A_ROUND_ROWS, next + a_col);
                g4 = load_b(next + b_row + 0u * B_ROUND_ROWS, at.y + b_col);
                g5 = load_b(next + b_row + 1u * B_ROUND_ROWS, at.y + b_col);
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
                c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01); c02 = coopMultiplyAdd(a0, b2, c02); c03 = coopMultiplyAdd(a0, b3, c03);
                c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11); c12 = coopMultiplyAdd(a1, b2, c12); c13 = coopMultiplyAdd(a1, b3, c13);
                c20 = coopMultiplyAdd(a2, b0, c20); c21 = coopMultiplyAdd(a2, b1, c21); c22 = coopMultiplyAdd(a2, b2, c22); c23 = coopMultiplyAdd(a2, b3, c23);
                c30 = coopMultiplyAdd(a3, b0, c30); c31 = coopMultiplyAdd(a3, b1, c31); c32 = coopMultiplyAdd(a3, b2, c32); c33 = coopMultiplyAdd(a3, b3, c33);
            }
        }
        let r = here.x + br;
        let q = here.y + bc;
        workgroupBarrier();
        let s00 = st + 0u;
        coopStoreT(c00, &cstage[s00], 4u);
        workgroupBarrier();
        out(here_c, r + 0u, q + 0u, s00, lane);
        workgroupBarrier();
        let s01 = st + 0u;
        coopStoreT(c01, &cstage[s01], 4u);
        workgroupBarrier();
        out(here_c, r + 0u, q + 16u, s01, lane);
        workgroupBarrier();
        let s02 = st + 0u;
        coopStoreT(c02, &cstage[s02], 4u);
        workgroupBarrier();
        out(here_c, r + 0u, q + 32u, s02, lane);
        workgroupBarrier();
        let s03 = st + 0u;
        coopStoreT(c03, &cstage[s03], 4u);
        workgroupBarrier();
        out(here_c, r + 0u, q + 48u, s03, lane);
        workgroupBarrier();
        let s10 = st + 0u;
        coopStoreT(c10, &cstage[s10], 4u);
        workgroupBarrier();
        out(here_c, r + 16u, q + 0u, s10, lane);
        workgroupBarrier();
        let s11 = st + 0u;
        coopStoreT(c11, &cstage[s11], 4u);
        workgroupBarrier();
        out(here_c, r + 16u, q + 16u, s11, lane);
        workgroupBarrier();
        let s12 = st + 0u;
        coopStoreT(c12, &cstage[s12], 4u);
        workgroupBarrier();
        out(here_c, r + 16u, q + 32u, s12, lane);
        workgroupBarrier();
        let s13 = st + 0u;
        coopStoreT(c13, &cstage[s13], 4u);
        workgroupBarrier();
        out(here_c, r + 16u, q + 48u, s13, lane);
        workgroupBarrier();
        let s20 = st + 0u;
        coopStoreT(c20, &cstage[s20], 4u);
        workgroupBarrier();
        out(here_c, r + 32u, q + 0u, s20, lane);
        workgroupBarrier();
        let s21 = st + 0u;
        coopStoreT(c21, &cstage[s21], 4u);
        workgroupBarrier();
        out(here_c, r + 32u, q + 16u, s21, lane);
        workgroupBarrier();
        let s22 = st + 0u;
        coopStoreT(c22, &cstage[s22], 4u);
        workgroupBarrier();
        out(here_c, r + 32u, q + 32u, s22, lane);
        workgroupBarrier();
        let s23 = st + 0u;
        coopStoreT(c23, &cstage[s23], 4u);
        workgroupBarrier();
        out(here_c, r + 32u, q + 48u, s23, lane);
        workgroupBarrier();
        let s30 = st + 0u;
        coopStoreT(c30, &cstage[s30], 4u);
        workgroupBarrier();
        out(here_c, r + 48u, q + 0u, s30, lane);
        workgroupBarrier();
        let s31 = st + 0u;
        coopStoreT(c31, &cstage[s31], 4u);
        workgroupBarrier();
        out(here_c, r + 48u, q + 16u, s31, lane);
        workgroupBarrier();
        let s32 = st + 0u;
        coopStoreT(c32, &cstage[s32], 4u);
        workgroupBarrier();
        out(here_c, r + 48u, q + 32u, s32, lane);
        workgroupBarrier();
        let s33 = st + 0u;
        coopStoreT(c33, &cstage[s33], 4u);
        workgroupBarrier();
        out(here_c, r + 48u, q + 48u, s33, lane);
    }
}
