//! The row softmax's shaders, one entry file of `shaders/softmax/` per way of holding a
//! row: `softmax.wgsl` (any length, 256 or 1024 invocations per row), `softmax_sweep.wgsl`
//! (long rows of vec4s), `softmax_cached.wgsl` (the row in registers), `softmax_short.wgsl`
//! and `softmax_short_scalar.wgsl` (several short rows per workgroup) and
//! `softmax_subgroup_rows.wgsl` (one row per subgroup).

use crate::shaders::{shader, Shader};

const SUBGROUP: wgpu::Features = wgpu::Features::SUBGROUP;

/// Trusted (compiled without injected checks, [`Shader::unchecked`]): every load and
/// store is at `row * cols + c` behind `row < rows` and `c < cols` (vec4: `c < cols /
/// 4`), and the host checks that `rows x cols` elements fit both allocations; the
/// register array is indexed by `k < PER`, its length; workgroup arrays by local ids
/// and subgroup ids below the workgroup size, the sweep's tree by `t + k` with `t < k
/// <= 512`, and the short rows' segment trees by `local + s` and `local - lane` inside
/// the invocation's own segment of `T` (`lane < s <= T / 2`); the scalar short rows'
/// register vec4 by `k < 4`. Loops count up to `cols` by 256, to `PER`, or halve to 0.
///
/// Row-wise softmax for any row length (online max and sum, then one write), 256
/// invocations per row.
pub(crate) const SOFTMAX: Shader = shader!("softmax.wgsl", "softmax/softmax.wgsl")
    .with(&[("WG", "256")])
    .trusted();
/// [`SOFTMAX`] with 1024 invocations per row, for long rows.
///
/// Trusted: as [`SOFTMAX`].
pub(crate) const SOFTMAX_WIDE: Shader = shader!("softmax.wgsl (1024)", "softmax/softmax.wgsl")
    .with(&[("WG", "1024")])
    .trusted();
/// Row-wise softmax for long rows of vec4s, 1024 invocations per row.
///
/// Trusted: as [`SOFTMAX`].
pub(crate) const SOFTMAX_SWEEP: Shader =
    shader!("softmax_sweep.wgsl", "softmax/softmax_sweep.wgsl").trusted();

/// Row softmax for short rows, several rows per workgroup: 32, 64 and 128 invocations per
/// row (rows of up to 128, 256 and 512 f32); one vec4 each (`softmax_short.wgsl`, rows
/// whose length is a multiple of 4), then up to four scalars each
/// (`softmax_short_scalar.wgsl`, any length).
///
/// Trusted: as [`SOFTMAX`].
pub(crate) const SOFTMAX_SHORT: [[Shader; 3]; 2] = {
    let vec4 = shader!("", "softmax/softmax_short.wgsl").trusted();
    let scalar = shader!("", "softmax/softmax_short_scalar.wgsl").trusted();
    [
        [
            vec4.named("softmax_short.wgsl (32)").with(&[("T", "32")]),
            vec4.named("softmax_short.wgsl (64)").with(&[("T", "64")]),
            vec4.named("softmax_short.wgsl (128)").with(&[("T", "128")]),
        ],
        [
            scalar
                .named("softmax_short_scalar.wgsl (32)")
                .with(&[("T", "32")]),
            scalar
                .named("softmax_short_scalar.wgsl (64)")
                .with(&[("T", "64")]),
            scalar
                .named("softmax_short_scalar.wgsl (128)")
                .with(&[("T", "128")]),
        ],
    ]
};

/// Row softmax for short rows, one row per subgroup (`softmax_subgroup_rows.wgsl`), by
/// elements per lane (1, 2, 4, 8 and 16): f32 elements, then vec4 (rows whose length is a
/// multiple of 4).
///
/// Trusted: as [`SOFTMAX`].
pub(crate) const SOFTMAX_SUBGROUP_ROWS: [[Shader; 5]; 2] = {
    let rows = shader!("", "softmax/softmax_subgroup_rows.wgsl")
        .needs(SUBGROUP)
        .trusted();
    [
        [
            rows.named("softmax_subgroup_rows.wgsl (f32, 1)")
                .with(&[("PER", "1")]),
            rows.named("softmax_subgroup_rows.wgsl (f32, 2)")
                .with(&[("PER", "2")]),
            rows.named("softmax_subgroup_rows.wgsl (f32, 4)")
                .with(&[("PER", "4")]),
            rows.named("softmax_subgroup_rows.wgsl (f32, 8)")
                .with(&[("PER", "8")]),
            rows.named("softmax_subgroup_rows.wgsl (f32, 16)")
                .with(&[("PER", "16")]),
        ],
        [
            rows.named("softmax_subgroup_rows.wgsl (vec4, 1)")
                .with(&[("VEC4", ""), ("PER", "1")]),
            rows.named("softmax_subgroup_rows.wgsl (vec4, 2)")
                .with(&[("VEC4", ""), ("PER", "2")]),
            rows.named("softmax_subgroup_rows.wgsl (vec4, 4)")
                .with(&[("VEC4", ""), ("PER", "4")]),
            rows.named("softmax_subgroup_rows.wgsl (vec4, 8)")
                .with(&[("VEC4", ""), ("PER", "8")]),
            rows.named("softmax_subgroup_rows.wgsl (vec4, 16)")
                .with(&[("VEC4", ""), ("PER", "16")]),
        ],
    ]
};
/// [`SOFTMAX_SUBGROUP_ROWS`] with `x` bound read-only (when it lies in another buffer than
/// `y`).
///
/// Trusted: as [`SOFTMAX`].
pub(crate) const SOFTMAX_SUBGROUP_ROWS_RO: [[Shader; 5]; 2] = {
    let rows = shader!("", "softmax/softmax_subgroup_rows.wgsl")
        .needs(SUBGROUP)
        .trusted();
    const RO: (&str, &str) = ("READ_ONLY_X", "");
    [
        [
            rows.named("softmax_subgroup_rows.wgsl (f32, 1, read-only x)")
                .with(&[("PER", "1"), RO]),
            rows.named("softmax_subgroup_rows.wgsl (f32, 2, read-only x)")
                .with(&[("PER", "2"), RO]),
            rows.named("softmax_subgroup_rows.wgsl (f32, 4, read-only x)")
                .with(&[("PER", "4"), RO]),
            rows.named("softmax_subgroup_rows.wgsl (f32, 8, read-only x)")
                .with(&[("PER", "8"), RO]),
            rows.named("softmax_subgroup_rows.wgsl (f32, 16, read-only x)")
                .with(&[("PER", "16"), RO]),
        ],
        [
            rows.named("softmax_subgroup_rows.wgsl (vec4, 1, read-only x)")
                .with(&[("VEC4", ""), ("PER", "1"), RO]),
            rows.named("softmax_subgroup_rows.wgsl (vec4, 2, read-only x)")
                .with(&[("VEC4", ""), ("PER", "2"), RO]),
            rows.named("softmax_subgroup_rows.wgsl (vec4, 4, read-only x)")
                .with(&[("VEC4", ""), ("PER", "4"), RO]),
            rows.named("softmax_subgroup_rows.wgsl (vec4, 8, read-only x)")
                .with(&[("VEC4", ""), ("PER", "8"), RO]),
            rows.named("softmax_subgroup_rows.wgsl (vec4, 16, read-only x)")
                .with(&[("VEC4", ""), ("PER", "16"), RO]),
        ],
    ]
};

/// Row softmax with the row held in registers (`softmax_cached.wgsl`), by vec4 per
/// invocation: 1, 2, 4, 8 and 16 (rows of up to 1024 ... 16384 f32); the portable combine,
/// then subgroups.
///
/// Trusted: as [`SOFTMAX`].
pub(crate) const SOFTMAX_CACHED: [[Shader; 5]; 2] = {
    let cached = shader!("", "softmax/softmax_cached.wgsl").trusted();
    let sub = cached.needs(SUBGROUP);
    const SG: (&str, &str) = ("SUBGROUP", "");
    [
        [
            cached
                .named("softmax_cached.wgsl (1)")
                .with(&[("PER", "1")]),
            cached
                .named("softmax_cached.wgsl (2)")
                .with(&[("PER", "2")]),
            cached
                .named("softmax_cached.wgsl (4)")
                .with(&[("PER", "4")]),
            cached
                .named("softmax_cached.wgsl (8)")
                .with(&[("PER", "8")]),
            cached
                .named("softmax_cached.wgsl (16)")
                .with(&[("PER", "16")]),
        ],
        [
            sub.named("softmax_cached.wgsl (1, subgroup)")
                .with(&[("PER", "1"), SG]),
            sub.named("softmax_cached.wgsl (2, subgroup)")
                .with(&[("PER", "2"), SG]),
            sub.named("softmax_cached.wgsl (4, subgroup)")
                .with(&[("PER", "4"), SG]),
            sub.named("softmax_cached.wgsl (8, subgroup)")
                .with(&[("PER", "8"), SG]),
            sub.named("softmax_cached.wgsl (16, subgroup)")
                .with(&[("PER", "16"), SG]),
        ],
    ]
};

/// Every variant, for the catalogue ([`crate::SHADERS`]).
pub(crate) const ALL: &[&[Shader]] = &[
    &[SOFTMAX, SOFTMAX_WIDE, SOFTMAX_SWEEP],
    SOFTMAX_SHORT.as_flattened(),
    SOFTMAX_SUBGROUP_ROWS.as_flattened(),
    SOFTMAX_SUBGROUP_ROWS_RO.as_flattened(),
    SOFTMAX_CACHED.as_flattened(),
];
