//! Every shader vramkit ships, gathered from the modules that dispatch them. The top floor:
//! it imports from every floor below, and nothing imports it but the crate root.

use crate::shaders::Shader;
use crate::{arena, kernels, stream, tier, vt};

/// The catalogue by family.
const FAMILIES: &[&[Shader]] = &[
    &kernels::elementwise::SHADERS,
    &[kernels::transpose::TRANSPOSE],
    &[kernels::cast::CAST_F16_PACKED, kernels::cast::CAST_F16_X8],
    &[arena::guard::GUARD_CHECK],
    &[stream::uploader::PATCH_WORDS],
    &[tier::copy::COPY_RANGES, tier::copy::COPY_RANGES_VEC4],
    &vt::shaders::ALL,
    #[cfg(native)]
    &[
        crate::devices::ALL_REDUCE_STEP,
        crate::devices::ALL_REDUCE_STEP_VEC4,
    ],
];
/// The families whose variants come in several tables.
const TABLES: &[&[&[Shader]]] = &[
    kernels::reduce::shaders::ALL,
    kernels::scan::shaders::ALL,
    kernels::softmax::shaders::ALL,
    kernels::matmul::shaders::ALL,
];

const fn count() -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < FAMILIES.len() {
        n += FAMILIES[i].len();
        i += 1;
    }
    let mut t = 0;
    while t < TABLES.len() {
        let mut i = 0;
        while i < TABLES[t].len() {
            n += TABLES[t][i].len();
            i += 1;
        }
        t += 1;
    }
    n
}

const fn flatten<const N: usize>() -> [Shader; N] {
    let mut out = [FAMILIES[0][0]; N];
    let mut k = 0;
    let mut i = 0;
    while i < FAMILIES.len() {
        let mut j = 0;
        while j < FAMILIES[i].len() {
            out[k] = FAMILIES[i][j];
            k += 1;
            j += 1;
        }
        i += 1;
    }
    let mut t = 0;
    while t < TABLES.len() {
        let mut i = 0;
        while i < TABLES[t].len() {
            let mut j = 0;
            while j < TABLES[t][i].len() {
                out[k] = TABLES[t][i][j];
                k += 1;
                j += 1;
            }
            i += 1;
        }
        t += 1;
    }
    out
}

/// Every WGSL shader vramkit ships, each variant once: to check them on a backend or
/// device before use ([`crate::shaders::check`]), or to compile them all ahead of time.
///
/// ```
/// let names: std::collections::HashSet<_> = vramkit::SHADERS.iter().map(|s| s.name).collect();
/// assert_eq!(names.len(), vramkit::SHADERS.len(), "names are the pipeline cache's keys");
/// ```
pub const SHADERS: &[Shader] = &flatten::<{ count() }>();
