//! The reduction's shaders: `shaders/reduce/reduce.wgsl` by element width (VEC4 or f32),
//! workgroup combine (SUBGROUP or a tree in workgroup memory) and access to `x`
//! (READ_ONLY_X where it lies in another buffer than `y`).

use crate::shaders::{shader, Shader};

const SUBGROUP: wgpu::Features = wgpu::Features::SUBGROUP;

/// Trusted (compiled without injected checks, [`Shader::unchecked`]): `x` is read at `i
/// < end = min(start + cols, base + n)`, and the host checks that `base + n` elements
/// fit `x`; `y` is written at `out_base + row` behind `row < rows`, with `out_base +
/// rows` within `y`; workgroup arrays are indexed by the local id (below 256, the
/// tree's `local + s` with `local < s`) and subgroup ids. The fold's loops advance `i`
/// by 1024 or 256 while `end - i` exceeds 768 or `i < end`; the tree halves `s` to 0.
/// The one-dispatch whole-array entry (`shared/reduce_whole.wgsl`) reads `x` the same way
/// per segment (`row * cols + ...` below `min(start + cols, n)`), and the state at `1 + 2
/// * s` and `2 + 2 * s` for segments `s < rows`, where the host sets at most 512 rows and
/// binds 1025 words; `missing` is indexed by a count of those segments (below `rows`);
/// the last workgroup's `words` by `k < SLOTS_PER_LANE`, its length. Its spin reads a
/// slot at most `SPINS` times, the slot loops run twice, and the refold loop runs at
/// most `rows` times.
///
/// Sum, max and min over rows of a 2-D view (and, in passes, over whole arrays), f32
/// loads, combined in workgroup memory.
pub(crate) const REDUCE: Shader = shader!("reduce.wgsl (f32)", "reduce/reduce.wgsl").trusted();
/// The same reductions with vec4 loads, for the bulk of whole-array reductions.
///
/// Trusted: as [`REDUCE`].
pub(crate) const REDUCE_VEC4: Shader = shader!("reduce.wgsl (vec4)", "reduce/reduce.wgsl")
    .with(&[("VEC4", "")])
    .trusted();
/// [`REDUCE`] combining each workgroup with subgroup operations.
///
/// Trusted: as [`REDUCE`].
pub(crate) const REDUCE_SUBGROUP: Shader =
    shader!("reduce.wgsl (f32, subgroup)", "reduce/reduce.wgsl")
        .with(&[("SUBGROUP", "")])
        .needs(SUBGROUP)
        .trusted();
/// [`REDUCE_VEC4`] combining each workgroup with subgroup operations.
///
/// Trusted: as [`REDUCE`].
pub(crate) const REDUCE_VEC4_SUBGROUP: Shader =
    shader!("reduce.wgsl (vec4, subgroup)", "reduce/reduce.wgsl")
        .with(&[("VEC4", ""), ("SUBGROUP", "")])
        .needs(SUBGROUP)
        .trusted();
/// [`REDUCE_VEC4`] reading `x` through a read-only binding (when it lies in another
/// buffer than the output).
///
/// Trusted: as [`REDUCE`].
pub(crate) const REDUCE_VEC4_READ_ONLY: Shader =
    shader!("reduce.wgsl (vec4, read-only x)", "reduce/reduce.wgsl")
        .with(&[("VEC4", ""), ("READ_ONLY_X", "")])
        .trusted();
/// [`REDUCE_VEC4_SUBGROUP`] reading `x` through a read-only binding.
///
/// Trusted: as [`REDUCE`].
pub(crate) const REDUCE_VEC4_SUBGROUP_READ_ONLY: Shader = shader!(
    "reduce.wgsl (vec4, subgroup, read-only x)",
    "reduce/reduce.wgsl"
)
.with(&[("VEC4", ""), ("SUBGROUP", ""), ("READ_ONLY_X", "")])
.needs(SUBGROUP)
.trusted();

/// Every variant, for the catalogue ([`crate::SHADERS`]).
pub(crate) const ALL: &[&[Shader]] = &[&[
    REDUCE,
    REDUCE_VEC4,
    REDUCE_SUBGROUP,
    REDUCE_VEC4_SUBGROUP,
    REDUCE_VEC4_READ_ONLY,
    REDUCE_VEC4_SUBGROUP_READ_ONLY,
]];
