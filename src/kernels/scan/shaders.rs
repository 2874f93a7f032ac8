//! The scans' shaders: `shaders/scan/scan.wgsl` by element type (u32, or F32), piece
//! (portable, or SUBGROUP; VEC4 moves four elements per row) and PER, the elements or rows
//! per invocation that make the tiles of [`super::TILE`] and its siblings.

use crate::shaders::{shader, Shader};

const SUBGROUP: wgpu::Features = wgpu::Features::SUBGROUP;

/// Trusted (compiled without injected checks, [`Shader::unchecked`]): tile elements are
/// read and written behind `i < params.n`, which the host checks against both
/// allocations; in the vec4 variant, whole words only in tiles that end at or before
/// `params.n` (word `w` of such a tile holds elements below it), and the last tile's
/// words element by element behind `4w + c < params.n`, with both arrays bound up to
/// the 16 bytes past element `n - 1` (the host binds them so only where the buffer
/// holds those bytes); the look-back state is indexed by its two counters and by tile
/// numbers below the tile count the host sized it for (the kernels' own buffer, grown
/// to fit every call); workgroup arrays are indexed by local ids and subgroup ranks
/// below the workgroup size. The look-back loop is finite: each round moves `j` down by
/// at least one tile or counts a stall, and after `SPINS` stalls the workgroup reduces
/// tile `j` itself and moves down one, so it ends by tile 0 after at most `tile x
/// (SPINS + 1)` rounds; the claim loop takes at most `CLAIMS` tiles.
///
/// Single-pass inclusive/exclusive prefix sum of u32 (wrapping).
pub(crate) const SCAN_U32: Shader = shader!("scan.wgsl (u32)", "scan/scan.wgsl")
    .with(&[("PER", "32")])
    .trusted();
/// Single-pass inclusive/exclusive prefix sum of f32.
///
/// Trusted: as [`SCAN_U32`].
pub(crate) const SCAN_F32: Shader = shader!("scan.wgsl (f32)", "scan/scan.wgsl")
    .with(&[("F32", ""), ("PER", "32")])
    .trusted();
/// [`SCAN_U32`] with tiles of 2048 (8 elements per invocation): 12 548 bytes of
/// workgroup memory, for devices that give a workgroup less than the 37 892 bytes of
/// tiles of 8192 (WebGPU's default 16 KiB, OpenGL's 32 KiB).
///
/// Trusted: as [`SCAN_U32`].
pub(crate) const SCAN_U32_COMPACT: Shader = shader!("scan.wgsl (u32, compact)", "scan/scan.wgsl")
    .with(&[("PER", "8")])
    .trusted();
/// [`SCAN_F32`] with tiles of 2048, as [`SCAN_U32_COMPACT`].
///
/// Trusted: as [`SCAN_U32`].
pub(crate) const SCAN_F32_COMPACT: Shader = shader!("scan.wgsl (f32, compact)", "scan/scan.wgsl")
    .with(&[("F32", ""), ("PER", "8")])
    .trusted();
/// [`SCAN_U32`] with subgroup operations (up to 8 tiles per workgroup, three barriers per
/// tile).
///
/// Trusted: as [`SCAN_U32`].
pub(crate) const SCAN_U32_SUBGROUP: Shader = shader!("scan.wgsl (u32, subgroup)", "scan/scan.wgsl")
    .with(&[("SUBGROUP", ""), ("PER", "8")])
    .needs(SUBGROUP)
    .trusted();
/// [`SCAN_F32`] with subgroup operations (up to 8 tiles per workgroup, three barriers per
/// tile).
///
/// Trusted: as [`SCAN_U32`].
pub(crate) const SCAN_F32_SUBGROUP: Shader = shader!("scan.wgsl (f32, subgroup)", "scan/scan.wgsl")
    .with(&[("F32", ""), ("SUBGROUP", ""), ("PER", "8")])
    .needs(SUBGROUP)
    .trusted();
/// [`SCAN_U32_SUBGROUP`] moving four elements per invocation and row in one 16-byte load
/// or store (`shared/scan_io_vec4.wgsl`): tiles of 4096, up to 8 per workgroup.
///
/// Trusted: as [`SCAN_U32`].
pub(crate) const SCAN_U32_VEC4: Shader =
    shader!("scan.wgsl (u32, subgroup, vec4)", "scan/scan.wgsl")
        .with(&[("SUBGROUP", ""), ("VEC4", ""), ("PER", "4")])
        .needs(SUBGROUP)
        .trusted();
/// [`SCAN_F32_SUBGROUP`] moving four elements per invocation and row in one 16-byte load
/// or store (`shared/scan_io_vec4.wgsl`): tiles of 4096, up to 8 per workgroup.
///
/// Trusted: as [`SCAN_U32`].
pub(crate) const SCAN_F32_VEC4: Shader =
    shader!("scan.wgsl (f32, subgroup, vec4)", "scan/scan.wgsl")
        .with(&[("F32", ""), ("SUBGROUP", ""), ("VEC4", ""), ("PER", "4")])
        .needs(SUBGROUP)
        .trusted();

/// Every variant, for the catalogue ([`crate::SHADERS`]).
pub(crate) const ALL: &[&[Shader]] = &[&[
    SCAN_U32,
    SCAN_F32,
    SCAN_U32_COMPACT,
    SCAN_F32_COMPACT,
    SCAN_U32_SUBGROUP,
    SCAN_F32_SUBGROUP,
    SCAN_U32_VEC4,
    SCAN_F32_VEC4,
]];
