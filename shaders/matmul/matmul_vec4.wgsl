// C (m x n, f32) = A (m x k) * B (k x n), all row-major, for k and n multiples of 4: every
// row of A, B and C then starts on a 4-element boundary, so tiles load and C stores four
// elements at a time. `In4` holds four input elements: vec4<f32>, with F16 a pair of words
// of packed f16 pairs, with NATIVE_F16 vec4<f16>; `widen4(v: In4) -> vec4<f32>`.
// matmul.wgsl serves every other shape.
//
// The blocking is matmul.wgsl's (a workgroup of 256 computes a 128 x 128 tile of C, each
// invocation 8 x 8 of it, 16 named vec4 accumulators), with three changes measured on the
// H100 at 4096^3 (f32): four-element global loads (25.1 -> 31.4 TFLOP/s), steps of 16
// along k instead of 8, half the barriers per multiply-add (-> 34.4), and the next step's
// loads issued into registers before the current step's multiply-adds, so their latency
// hides behind them (-> 36.7). The two tiles take 16 KiB of workgroup memory, WebGPU's
// default limit.
// Edges: loads past m, n or k read 0 (k and n are multiples of 4, so a four-element load is
// wholly inside or outside) and stores past m or n are skipped.

#ifdef NATIVE_F16
enable f16;
alias In4 = vec4<f16>;
fn widen4(v: vec4<f16>) -> vec4<f32> { return vec4<f32>(v); }
#else
#ifdef F16
alias In4 = vec2<u32>;
fn widen4(v: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)); }
#else
alias In4 = vec4<f32>;
fn widen4(v: vec4<f32>) -> vec4<f32> { return v; }
#endif
#endif

// `params` (the shape and batch strides) and `za`, `zb`, `zc`, where this workgroup's
// product starts (shared/matmul_params.wgsl).
#import shared/matmul_params
@group(0) @binding(0) var<uniform> params: Params;
// `a` and `b` are read-only (READ_ONLY) where neither shares a buffer with `c` (the loads
// may then be cached and reordered: 10 % faster for f32, 17 % for f16 on the H100), else
// read_write.
#ifdef READ_ONLY
@group(0) @binding(1) var<storage, read> a: array<In4>;
@group(0) @binding(2) var<storage, read> b: array<In4>;
#else
@group(0) @binding(1) var<storage, read_write> a: array<In4>;
@group(0) @binding(2) var<storage, read_write> b: array<In4>;
#endif
@group(0) @binding(3) var<storage, read_write> c: array<vec4<f32>>;

const BK: u32 = 16u;
// [BK][128 / 4]: As[kk * 32 + r / 4][r % 4] = A[row0 + r, k0 + kk]
var<workgroup> As: array<vec4<f32>, 512>;
// [BK][128 / 4]: Bs[kk * 32 + j / 4][j % 4] = B[k0 + kk, col0 + j]
var<workgroup> Bs: array<vec4<f32>, 512>;

// A[row, 4q .. 4q + 3], or 0 past the matrix. Rows are `lda` apart: k, or the whole
// product's k in a part of a product split along k.
fn load_a4(row: u32, q: u32) -> vec4<f32> {
    if row < params.m && q < params.k / 4u {
        return widen4(a[za + row * (params.lda / 4u) + q]);
    }
    return vec4<f32>(0.0);
}

// B[row, 4q .. 4q + 3], or 0 past the matrix.
fn load_b4(row: u32, q: u32) -> vec4<f32> {
    let n4 = params.n / 4u;
    if row < params.k && q < n4 {
        return widen4(b[zb + row * n4 + q]);
    }
    return vec4<f32>(0.0);
}

// C[r, 4q .. 4q + 3] = lo and C[r, 4q + 64 .. 4q + 67] = hi, where inside C.
fn store_row(r: u32, q: u32, lo: vec4<f32>, hi: vec4<f32>) {
    let n4 = params.n / 4u;
    if r >= params.m {
        return;
    }
    if q < n4 {
        c[zc + r * n4 + q] = lo;
    }
    if q + 16u < n4 {
        c[zc + r * n4 + q + 16u] = hi;
    }
}

@compute @workgroup_size(256)
fn matmul(@builtin(workgroup_id) wg: vec3<u32>,
          @builtin(local_invocation_index) t: u32) {
    let k = params.k;
    za = wg.z * params.stride_a;
    zb = wg.z * params.stride_b;
    zc = wg.z * params.stride_c;
    let row0 = wg.y * 128u;
    let col0 = wg.x * 128u;
    let tr = t / 16u;
    let tc = t % 16u;
    // Staging roles: A row t/2, k offsets (t%2)*8 .. +7 (two loads); B rows t/32 and
    // t/32 + 8, columns (t%32)*4 .. +3.
    let a_row = row0 + t / 2u;
    let a_k = (t % 2u) * 8u;
    let b_k = t / 32u;
    let b_q = col0 / 4u + t % 32u;
    let slot = (t / 2u) / 4u;
    let lane = (t / 2u) % 4u;
    var pa0 = load_a4(a_row, a_k / 4u);
    var pa1 = load_a4(a_row, a_k / 4u + 1u);
    var pb0 = load_b4(b_k, b_q);
    var pb1 = load_b4(b_k + 8u, b_q);
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
        As[(a_k + 0u) * 32u + slot][lane] = pa0.x;
        As[(a_k + 1u) * 32u + slot][lane] = pa0.y;
        As[(a_k + 2u) * 32u + slot][lane] = pa0.z;
        As[(a_k + 3u) * 32u + slot][lane] = pa0.w;
        As[(a_k + 4u) * 32u + slot][lane] = pa1.x;
        As[(a_k + 5u) * 32u + slot][lane] = pa1.y;
        As[(a_k + 6u) * 32u + slot][lane] = pa1.z;
        As[(a_k + 7u) * 32u + slot][lane] = pa1.w;
        Bs[b_k * 32u + t % 32u] = pb0;
        Bs[(b_k + 8u) * 32u + t % 32u] = pb1;
        workgroupBarrier();
        // The next step's loads, in flight during this step's multiply-adds (past k they
        // read 0 and are never stored).
        let next = k0 + BK;
        pa0 = load_a4(a_row, (next + a_k) / 4u);
        pa1 = load_a4(a_row, (next + a_k) / 4u + 1u);
        pb0 = load_b4(next + b_k, b_q);
        pb1 = load_b4(next + b_k + 8u, b_q);
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
    let q = col0 / 4u + tc;
    store_row(row0 + tr * 4u + 0u, q, c00, c01);
    store_row(row0 + tr * 4u + 1u, q, c10, c11);
    store_row(row0 + tr * 4u + 2u, q, c20, c21);
    store_row(row0 + tr * 4u + 3u, q, c30, c31);
    store_row(row0 + 64u + tr * 4u + 0u, q, c40, c41);
    store_row(row0 + 64u + tr * 4u + 1u, q, c50, c51);
    store_row(row0 + 64u + tr * 4u + 2u, q, c60, c61);
    store_row(row0 + 64u + tr * 4u + 3u, q, c70, c71);
}
