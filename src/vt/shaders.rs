//! The virtual textures' shaders (`shaders/vt/`) and the WGSL library the host's own
//! shaders include (`shaders/shared/vt_*.wgsl`, through [`super::VirtualTexture::wgsl`]).

use crate::shaders::{shader, Shader};

/// Virtual-texture feedback compaction: de-duplicates requested tile keys into a list.
pub(crate) const VT_COMPACT: Shader = shader!("vt_compact.wgsl", "vt/vt_compact.wgsl");
/// Virtual-texture sampling from a compute shader at given points (the library with its
/// bindings in group 0).
pub(crate) const VT_PROBE: Shader = shader!("vt_probe.wgsl", "vt/vt_probe.wgsl");
/// Every shader, for the catalogue ([`crate::SHADERS`]).
pub(crate) const ALL: [Shader; 2] = [VT_COMPACT, VT_PROBE];

/// The virtual-texture bindings, in group 0 (the host moves them to its own group).
pub(super) const VT_BINDINGS: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/shaders/shared/vt_bindings.wgsl"
));
/// `vt_hash`, which the library and the compaction share with the CPU's page table.
pub(super) const VT_HASH: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/shaders/shared/vt_hash.wgsl"
));
/// The library: `vt_sample`, `vt_sample_level`, `vt_feedback` (needs the two above).
pub(super) const VT_LIBRARY: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/shaders/shared/vt_library.wgsl"
));
