//! Every WGSL shader vramkit ships, embedded in the binary, and the pipeline cache.
//!
//! The sources live in the crate's `shaders/` folder. [`ALL`] lists them so one test can
//! prove each portable to every backend ([`check`]).
//!
//! # Runtime checks
//! wgpu injects a bounds check into every array access and a counter into every loop (so
//! that a loop the compiler cannot prove finite cannot become undefined behaviour) unless
//! a shader module is created "trusted". The hot kernels are compiled with bounds checks
//! and loop bounding off ([`Shader::unchecked`]); the integer-division guards stay on
//! everywhere. Each trusted entry states why on its own documentation ("Trusted: ..."):
//! every array index in range by construction or behind a guard against sizes the host
//! validated, and every loop finite by construction. Variants of one family point to the
//! first.
//!
//! `VRAMKIT_SHADER_CHECKS=all` (or `bounds`, `loops`) turns those checks back on for every
//! shader, to measure what they cost; BENCHMARKS.md has the figures.

pub mod check;

/// A WGSL source file from `shaders/` and the wgpu features it needs.
#[derive(Clone, Copy, Debug)]
pub struct Shader {
    /// File name inside `shaders/` (with the variant), also the cache key.
    pub name: &'static str,
    /// The WGSL text.
    pub source: &'static str,
    /// Features the device must have to use it.
    pub requires: wgpu::Features,
    /// Compiled without wgpu's injected bounds checks and loop bounding (integer-division
    /// checks stay on). Only for shaders whose every array index is in range by
    /// construction or guarded against sizes the host validated, and whose every loop is
    /// finite by construction; storage buffers stay protected by the backend's robust
    /// buffer access where it has one. Which shaders and why: "Runtime checks" in the
    /// module docs.
    pub unchecked: bool,
}

/// A shader made of WGSL text pieces (prefixes first) under one name.
macro_rules! shader {
    ($(#[$doc:meta])* $ident:ident = $name:literal, [$($piece:expr),+ $(,)?], $requires:expr) => {
        shader!($(#[$doc])* $ident = $name, [$($piece),+], $requires, false);
    };
    ($(#[$doc:meta])* $ident:ident = $name:literal, [$($piece:expr),+ $(,)?], $requires:expr, $unchecked:expr) => {
        $(#[$doc])*
        pub const $ident: Shader = shader_value!($name, [$($piece),+], $requires, $unchecked);
    };
}

/// The [`Shader`] value of WGSL text pieces, for tables of variants.
macro_rules! shader_value {
    ($name:literal, [$($piece:expr),+ $(,)?], $requires:expr, $unchecked:expr) => {
        Shader {
            name: $name,
            source: concat!($($piece),+),
            requires: $requires,
            unchecked: $unchecked,
        }
    };
}

macro_rules! file {
    ($file:literal) => {
        include_str!(concat!("../../shaders/", $file))
    };
}

mod catalogue;
mod pipelines;

#[cfg(test)]
pub(crate) use catalogue::TWO_PER_CORE_WORKGROUP_BYTES;
pub use catalogue::*;
pub(crate) use catalogue::{COOP_WORKGROUP_BYTES, COOP_WORKGROUP_SIZE, MATRIX_UNITS};
pub use pipelines::NamedLayout;
pub(crate) use pipelines::PipelineCache;
