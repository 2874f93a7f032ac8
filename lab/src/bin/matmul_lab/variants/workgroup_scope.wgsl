// lab: kind=coop tile_m=128 tile_n=128 in=half spirv coop2=128x32x128 tensor
// One 128 x 128 tile of c per workgroup as a single workgroup-scope cooperative matrix
// (`coop2=`: VK_NV_cooperative_matrix2; `tensor`: a and b through tensor loads), so the
// driver stages the operands through workgroup memory itself. The fastest of 15 such
// layouts on an H200 (2026-11-29): 70.5 TFLOP/s at 4096^3 against 287 for the shipped
// kernel; plain loads read the same (BENCHMARKS.md, Matrix products).
alias FragA = coop_mat16x16<f16, A>;
alias FragB = coop_mat16x16<f16, B>;
alias Acc = coop_mat16x16<f32, C>;
const STEP_K: u32 = 32u;
@compute @workgroup_size(128)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>) {
    let row0 = wg.y * TILE_M;
    let col0 = wg.x * TILE_N;
    let z = wg.z;
    let lda = params.lda;
    let ldb = params.n;
    let ldc = params.n;
    let base_a = z * params.stride_a * 8u + row0 * lda;
    let base_b = z * params.stride_b * 8u + col0;
    var acc = Acc();
    for (var kk = 0u; kk < params.k; kk += 1 * STEP_K) {
        let pa0 = base_a + kk + 0u;
        let pb0 = base_b + (kk + 0u) * ldb;
        let fa0 = coopLoadT<FragA>(&a[pa0], lda);
        let fb0 = coopLoadT<FragB>(&b[pb0], ldb);
        acc = coopMultiplyAdd(fa0, fb0, acc);
    }
    let pc = z * params.stride_c + row0 * ldc + col0;
    coopStoreT(acc, &c[pc], ldc);
}
