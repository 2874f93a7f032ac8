//! The matrix products' shaders (`shaders/matmul/`): `matmul.wgsl` (any shape, f32 or F16
//! inputs), `matmul_vec4.wgsl` (k and n multiples of 4, four-element loads; READ_ONLY
//! inputs where they lie apart from `c`), `matmul_coop.wgsl` (f16 on the matrix units;
//! WHOLE_TILES drops the per-load bounds test) and `matmul_split_sum.wgsl` (the second
//! pass of a product split along k).

use crate::shaders::{shader, Shader, MATRIX_UNITS};

const F16: wgpu::Features = wgpu::Features::SHADER_F16;

/// Trusted (compiled without injected checks, [`Shader::unchecked`]): the tiles
/// `As`/`Bs` are indexed by `kk * 32 + slot` with `kk < BK` and `slot < 32` fixed by
/// the loop bounds and the workgroup size; every load of `a`/`b` is behind `ar < m`,
/// `ak + i < k`, `bk < k`, `bc + i < n`, every store of `c` behind `r < m`, `col + j <
/// n`, and the host checks that `m x k`, `k x n` and `m x n` elements fit the bound
/// allocations. Every loop counts up to a constant or to `k` by `BK`.
///
/// f32 matmul, 128x128 tiles, 8x8 outputs per invocation.
pub(crate) const MATMUL_F32: Shader = shader!("matmul.wgsl (f32)", "matmul/matmul.wgsl").trusted();
/// Matmul of f16 inputs (packed pairs) with f32 accumulation and output.
///
/// Trusted: as [`MATMUL_F32`].
pub(crate) const MATMUL_F16_PACKED: Shader =
    shader!("matmul.wgsl (f16 packed)", "matmul/matmul.wgsl")
        .with(&[("F16", "")])
        .trusted();
/// Matmul of native f16 inputs with f32 accumulation and output.
///
/// Trusted: as [`MATMUL_F32`].
pub(crate) const MATMUL_F16_NATIVE: Shader =
    shader!("matmul.wgsl (f16 native)", "matmul/matmul.wgsl")
        .with(&[("F16", ""), ("NATIVE_F16", "")])
        .needs(F16)
        .trusted();

/// Trusted (compiled without injected checks, [`Shader::unchecked`]): `As`/`Bs` are indexed
/// up to `(a_k + 7) * 32 + slot`, `(b_k + 8) * 32 + t % 32` and `kk * 32 + 16 + tr`, at
/// most 511 of 512 with `a_k <= 8`, `b_k < 8`, `slot, tr < 32` and `kk < 16`; every load of
/// `a`/`b` is behind `row < m && q < k / 4` or `row < k && q < n / 4` (a's rows `lda / 4`
/// fours apart: k / 4, or in a part of a split product the whole k / 4 with the part's
/// k-range inside it), every store of `c` behind `r < m && q < n / 4`, and the host runs
/// it only for k and n multiples of 4 after checking that `m x k`, `k x n` and `m x n`
/// elements fit. Loops count to `k` by 16 and to 16.
///
/// f32 matmul with four-element loads and stores, for k and n multiples of 4: inputs
/// writable (the shared layout), then read-only.
pub(crate) const MATMUL_VEC4_F32: [Shader; 2] = {
    let fours = shader!("", "matmul/matmul_vec4.wgsl").trusted();
    [
        fours.named("matmul_vec4.wgsl (f32)"),
        fours
            .named("matmul_vec4.wgsl (f32, read-only inputs)")
            .with(&[("READ_ONLY", "")]),
    ]
};
/// [`MATMUL_VEC4_F32`] for f16 inputs packed in words.
///
/// Trusted: as [`MATMUL_VEC4_F32`].
pub(crate) const MATMUL_VEC4_F16_PACKED: [Shader; 2] = {
    let fours = shader!("", "matmul/matmul_vec4.wgsl").trusted();
    [
        fours
            .named("matmul_vec4.wgsl (f16 packed)")
            .with(&[("F16", "")]),
        fours
            .named("matmul_vec4.wgsl (f16 packed, read-only inputs)")
            .with(&[("F16", ""), ("READ_ONLY", "")]),
    ]
};
/// [`MATMUL_VEC4_F32`] for native f16 inputs.
///
/// Trusted: as [`MATMUL_VEC4_F32`].
pub(crate) const MATMUL_VEC4_F16_NATIVE: [Shader; 2] = {
    let fours = shader!("", "matmul/matmul_vec4.wgsl").needs(F16).trusted();
    [
        fours
            .named("matmul_vec4.wgsl (f16 native)")
            .with(&[("F16", ""), ("NATIVE_F16", "")]),
        fours
            .named("matmul_vec4.wgsl (f16 native, read-only inputs)")
            .with(&[("F16", ""), ("NATIVE_F16", ""), ("READ_ONLY", "")]),
    ]
};

/// Trusted (compiled without injected checks, [`Shader::unchecked`]). `matmul_coop.wgsl`
/// on 128 x 128 tiles, its slices counted in pairs of halves: each invocation writes four
/// pairs at `row * 20 + col / 2` (`row < 128`, `col <= 24`: at most 2555, below b's slice
/// at `B_AT = 2560`) and `B_AT + row * 68 + col / 2` (`row < 32`, `col <= 120`: at most
/// 4731 of the array's `SLICES = 4736`); fragments read 16 x 8 pairs from offsets whose
/// last pair is at most 2555 (a's) and 4731 (b's). Subgroup `sg < 4` (128 invocations in
/// subgroups of exactly 32, which the host requires) stages a fragment at
/// `cstage[sg * 64 ..][..64]` of 256 fours and reads it back at `sg * 64 + lane` and
/// `sg * 64 + 32 + lane` (`lane < 32`). Every load of `a`/`b` is behind `row < m && col <
/// k` (`row < k && col < n`) and reads element 0 otherwise (a's rows are `lda` apart: k,
/// or in a split product the whole k, with the parts' `k` ranges inside it and the host
/// checking a's m x lda elements), every fragment's writes to `c`
/// (rows `row..row + 16`, columns `col..col + 16`, as fours from `(base + row * n + col) /
/// 4` with base, n and col multiples of 16) behind `row < m && col < n` with both
/// multiples of 16, and the host checks the three allocations' sizes. The whole-tiles
/// variants drop the load tests only where the host found m and n multiples of 128 and k
/// of 32: every tile's rows and columns then lie inside and slices start below `k` and end
/// at most at `k`. Tiles: the host dispatches at most as many workgroups as tiles and
/// keeps `tiles + workgroups` below 2^32; a workgroup starts at tile `workgroup_id.x <
/// tiles` and loads a tile only while `tile < tiles`. The loop ends: each pass moves k on
/// by 32 or, after a tile's last step, the tile on by the number of workgroups, and it
/// stops once the tile reaches `tiles`; the inner loop counts to 32 by 16.
///
/// Matmul of f16 inputs on the matrix units (cooperative matrices, f32 accumulators), by
/// `[whole tiles][read-only inputs]`: loads tested against the bounds, then not (m and n
/// multiples of 128, k of 32); inputs writable (the shared layout), then read-only.
pub(crate) const MATMUL_COOP_F16: [[Shader; 2]; 2] = {
    let coop = shader!("", "matmul/matmul_coop.wgsl")
        .needs(MATRIX_UNITS)
        .trusted();
    const WHOLE: (&str, &str) = ("WHOLE_TILES", "");
    const RO: (&str, &str) = ("READ_ONLY", "");
    [
        [
            coop.named("matmul_coop.wgsl"),
            coop.named("matmul_coop.wgsl (read-only inputs)")
                .with(&[RO]),
        ],
        [
            coop.named("matmul_coop.wgsl (whole tiles)").with(&[WHOLE]),
            coop.named("matmul_coop.wgsl (whole tiles, read-only inputs)")
                .with(&[WHOLE, RO]),
        ],
    ]
};
/// [`MATMUL_COOP_F16`] writing c in f16 (F16_OUT): the same tiles, the accumulators
/// rounded to f16 as they leave, four halves (two words) per element of `c`.
///
/// Trusted: as [`MATMUL_COOP_F16`]; `c` is indexed at the same positions, in fours of
/// halves instead of fours of floats, and the host checks its size in halves.
pub(crate) const MATMUL_COOP_F16_OUT: [[Shader; 2]; 2] = {
    let coop = shader!("", "matmul/matmul_coop.wgsl")
        .needs(MATRIX_UNITS)
        .trusted();
    const OUT: (&str, &str) = ("F16_OUT", "");
    const WHOLE: (&str, &str) = ("WHOLE_TILES", "");
    const RO: (&str, &str) = ("READ_ONLY", "");
    [
        [
            coop.named("matmul_coop.wgsl (f16 out)").with(&[OUT]),
            coop.named("matmul_coop.wgsl (f16 out, read-only inputs)")
                .with(&[OUT, RO]),
        ],
        [
            coop.named("matmul_coop.wgsl (f16 out, whole tiles)")
                .with(&[OUT, WHOLE]),
            coop.named("matmul_coop.wgsl (f16 out, whole tiles, read-only inputs)")
                .with(&[OUT, WHOLE, RO]),
        ],
    ]
};
/// The second pass of a product split along k: sums the parts' partial products into c,
/// part by part in order.
pub(crate) const MATMUL_SPLIT_SUM: Shader =
    shader!("matmul_split_sum.wgsl", "matmul/matmul_split_sum.wgsl");

/// Every variant, for the catalogue ([`crate::SHADERS`]).
pub(crate) const ALL: &[&[Shader]] = &[
    &[MATMUL_F32, MATMUL_F16_PACKED, MATMUL_F16_NATIVE],
    &MATMUL_VEC4_F32,
    &MATMUL_VEC4_F16_PACKED,
    &MATMUL_VEC4_F16_NATIVE,
    MATMUL_COOP_F16.as_flattened(),
    MATMUL_COOP_F16_OUT.as_flattened(),
    &[MATMUL_SPLIT_SUM],
];
