// C (m x n, f32) = A (m x k) * B (k x n), all row-major. The input element type `In` and
// `load_a(i)` / `load_b(i)`, returning element i as f32: f32 storage, or with F16 pairs of
// f16 (packed in words, or with NATIVE_F16 as `vec2<f16>`) with f32 accumulation.
//
// Register blocking: a workgroup of 256 invocations computes a 128 x 128 tile of C; each
// invocation owns 8 rows x 8 columns of it (rows 4*tr..4*tr+3 and 64+4*tr.., columns
// 4*tc.. and 64+4*tc.., split in halves so that the vec4 reads of workgroup memory by
// neighbouring invocations are consecutive). Per step of 8 along k the workgroup stages an
// A tile (transposed, so a column of A is a run of vec4s) and a B tile in workgroup memory,
// then each invocation does 8 x 64 fused multiply-adds from 32 vec4 reads.
// The 16 accumulators are named variables, not an array, so they stay in registers.
// Edges: loads past m, n or k read 0 and stores past m or n are skipped; only the staging
// and the final stores test bounds, the inner loop does not.

#ifdef NATIVE_F16
enable f16;
#endif
#ifdef F16
#import shared/f16_pairs
alias In = H2;
fn load_a(i: u32) -> f32 { return h2_to_f32(a[i >> 1u])[i & 1u]; }
fn load_b(i: u32) -> f32 { return h2_to_f32(b[i >> 1u])[i & 1u]; }
#else
alias In = f32;
fn load_a(i: u32) -> f32 { return a[i]; }
fn load_b(i: u32) -> f32 { return b[i]; }
#endif

// `params` (the shape and batch strides) and `za`, `zb`, `zc`, where this workgroup's
// product starts (shared/matmul_params.wgsl).
#import shared/matmul_params
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> a: array<In>;
@group(0) @binding(2) var<storage, read_write> b: array<In>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

const BK: u32 = 8u;
// [BK][128 / 4]: As[kk * 32 + r / 4][r % 4] = A[row0 + r, k0 + kk]
var<workgroup> As: array<vec4<f32>, 256>;
// [BK][128 / 4]: Bs[kk * 32 + j / 4][j % 4] = B[k0 + kk, col0 + j]
var<workgroup> Bs: array<vec4<f32>, 256>;

fn store_row(r: u32, col: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if r >= params.m {
        return;
    }
    let n = params.n;
    let base = zc + r * n;
    for (var j = 0u; j < 4u; j++) {
        if col + j < n {
            c[base + col + j] = lo[j];
        }
        if col + 64u + j < n {
            c[base + col + 64u + j] = hi[j];
        }
    }
}

@compute @workgroup_size(256)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>,
          @builtin(local_invocation_index) t: u32) {
    let m = params.m;
    let n = params.n;
    let k = params.k;
    za = wg.z * params.stride_a;
    zb = wg.z * params.stride_b;
    zc = wg.z * params.stride_c;
    let row0 = wg.y * 128u;
    let col0 = wg.x * 128u;
    let tr = t / 16u;
    let tc = t % 16u;
    // Staging roles: A row t/2, k offsets (t%2)*4..+3; B row t/32, columns (t%32)*4..+3.
    let a_row = t / 2u;
    let a_k = (t % 2u) * 4u;
    let b_k = t / 32u;
    let b_col = (t % 32u) * 4u;
    var c00 = vec4<f32>(0.0);
    var c01 = vec4<f32>(0.0);
    var c10 = vec4<f32>(0.0);
    var c11 = vec4<f32>(0.0);
    var c20 = vec4<f32>(0.0);
    var c21 = vec4<f32>(0.0);
    var c30 = vec4<f32>(0.0);
    var c31 = vec4<f32>(0.0);
    var c40 = vec4<f32>(0.0);
    var c41 = vec4<f32>(0.0);
    var c50 = vec4<f32>(0.0);
    var c51 = vec4<f32>(0.0);
    var c60 = vec4<f32>(0.0);
    var c61 = vec4<f32>(0.0);
    var c70 = vec4<f32>(0.0);
    var c71 = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k; k0 += BK) {
        var av = vec4<f32>(0.0);
        let ar = row0 + a_row;
        if ar < m {
            let ak = k0 + a_k;
            let base = za + ar * k + ak;
            if ak + 3u < k {
                av = vec4<f32>(load_a(base), load_a(base + 1u), load_a(base + 2u), load_a(base + 3u));
            } else {
                for (var i = 0u; i < 4u; i++) {
                    if ak + i < k {
                        av[i] = load_a(base + i);
                    }
                }
            }
        }
        let slot = a_row / 4u;
        let lane = a_row % 4u;
        As[(a_k + 0u) * 32u + slot][lane] = av.x;
        As[(a_k + 1u) * 32u + slot][lane] = av.y;
        As[(a_k + 2u) * 32u + slot][lane] = av.z;
        As[(a_k + 3u) * 32u + slot][lane] = av.w;

        var bv = vec4<f32>(0.0);
        let bk = k0 + b_k;
        if bk < k {
            let bc = col0 + b_col;
            let base = zb + bk * n + bc;
            if bc + 3u < n {
                bv = vec4<f32>(load_b(base), load_b(base + 1u), load_b(base + 2u), load_b(base + 3u));
            } else {
                for (var i = 0u; i < 4u; i++) {
                    if bc + i < n {
                        bv[i] = load_b(base + i);
                    }
                }
            }
        }
        Bs[b_k * 32u + t % 32u] = bv;
        workgroupBarrier();

        for (var kk = 0u; kk < BK; kk++) {
            let a0 = As[kk * 32u + tr];
            let a1 = As[kk * 32u + 16u + tr];
            let b0 = Bs[kk * 32u + tc];
            let b1 = Bs[kk * 32u + 16u + tc];
            c00 = fma(vec4<f32>(a0.x), b0, c00);
            c01 = fma(vec4<f32>(a0.x), b1, c01);
            c10 = fma(vec4<f32>(a0.y), b0, c10);
            c11 = fma(vec4<f32>(a0.y), b1, c11);
            c20 = fma(vec4<f32>(a0.z), b0, c20);
            c21 = fma(vec4<f32>(a0.z), b1, c21);
            c30 = fma(vec4<f32>(a0.w), b0, c30);
            c31 = fma(vec4<f32>(a0.w), b1, c31);
            c40 = fma(vec4<f32>(a1.x), b0, c40);
            c41 = fma(vec4<f32>(a1.x), b1, c41);
            c50 = fma(vec4<f32>(a1.y), b0, c50);
            c51 = fma(vec4<f32>(a1.y), b1, c51);
            c60 = fma(vec4<f32>(a1.z), b0, c60);
            c61 = fma(vec4<f32>(a1.z), b1, c61);
            c70 = fma(vec4<f32>(a1.w), b0, c70);
            c71 = fma(vec4<f32>(a1.w), b1, c71);
        }
        workgroupBarrier();
    }
    store_row(row0 + tr * 4u + 0u, col0 + tc * 4u, c00, c01);
    store_row(row0 + tr * 4u + 1u, col0 + tc * 4u, c10, c11);
    store_row(row0 + tr * 4u + 2u, col0 + tc * 4u, c20, c21);
    store_row(row0 + tr * 4u + 3u, col0 + tc * 4u, c30, c31);
    store_row(row0 + 64u + tr * 4u + 0u, col0 + tc * 4u, c40, c41);
    store_row(row0 + 64u + tr * 4u + 1u, col0 + tc * 4u, c50, c51);
    store_row(row0 + 64u + tr * 4u + 2u, col0 + tc * 4u, c60, c61);
    store_row(row0 + 64u + tr * 4u + 3u, col0 + tc * 4u, c70, c71);
}
