//! The WGSL vramkit ships, how a shader is put together, and the pipeline cache.
//!
//! # The files
//! `shaders/<family>/` holds the entries, each a complete WGSL file that declares its own
//! bindings (`elementwise/`, `reduce/`, `scan/`, `transpose/`, `softmax/`, `matmul/`,
//! `cast/`, `memory/`, `vt/`); `shaders/shared/` holds the fragments they `#import`. A
//! [`Shader`] is one entry file and a variant's defines; the preprocessor (`src/shaders/preprocess.rs`) expands it
//! when a device first compiles it (it is cached by name from then on). The catalogue of
//! variants lives beside the Rust that dispatches them (`kernels/<family>` and the arena's,
//! tiers', streaming's and virtual textures' own files), and [`crate::SHADERS`] lists them
//! all so that one test can prove each portable to every backend ([`check`]).
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
mod facts;
mod pipelines;
pub(crate) mod preprocess;

#[cfg(test)]
pub(crate) use facts::TWO_PER_CORE_WORKGROUP_BYTES;
pub(crate) use facts::{COOP_WORKGROUP_BYTES, COOP_WORKGROUP_SIZE, MATRIX_UNITS};
pub use pipelines::NamedLayout;
pub(crate) use pipelines::PipelineCache;
pub(crate) use preprocess::Define;

use crate::{Error, Result};

/// One shader vramkit ships: an entry file of `shaders/`, the defines of one variant of it,
/// and the wgpu features it needs.
///
/// ```
/// for shader in vramkit::SHADERS {
///     let wgsl = shader.source().unwrap();
///     assert!(wgsl.contains("@compute"), "{}", shader.name);
/// }
/// ```
#[derive(Clone, Copy, Debug)]
pub struct Shader {
    /// The entry file's name and the variant (`reduce.wgsl (vec4, subgroup)`), also the
    /// cache key and the label of its module.
    pub name: &'static str,
    /// The entry file inside `shaders/` (`reduce/reduce.wgsl`).
    pub path: &'static str,
    /// The entry file's text, before preprocessing.
    text: &'static str,
    /// The variant: the names `#ifdef` tests and the values `#{NAME}` takes.
    defines: &'static [Define],
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

impl Shader {
    /// The shader of entry file `path` (with its `text`) and no defines; [`shader!`] fills
    /// both from the path.
    pub(crate) const fn new(name: &'static str, path: &'static str, text: &'static str) -> Self {
        Shader {
            name,
            path,
            text,
            defines: &[],
            requires: wgpu::Features::empty(),
            unchecked: false,
        }
    }

    /// This shader under another name (one entry's variants share a base).
    pub(crate) const fn named(self, name: &'static str) -> Self {
        Shader { name, ..self }
    }

    /// This shader for the variant `defines`.
    pub(crate) const fn with(self, defines: &'static [Define]) -> Self {
        Shader { defines, ..self }
    }

    /// This shader, usable only on devices with `features`.
    pub(crate) const fn needs(self, features: wgpu::Features) -> Self {
        Shader {
            requires: features,
            ..self
        }
    }

    /// This shader compiled without injected checks; its documentation says why that is
    /// sound ([`Shader::unchecked`]).
    pub(crate) const fn trusted(self) -> Self {
        Shader {
            unchecked: true,
            ..self
        }
    }

    /// The WGSL module: the entry file expanded for this variant (`#import`s, `#ifdef`s,
    /// `#{NAME}` values; the crate's `src/shaders/preprocess.rs`).
    ///
    /// # Errors
    /// [`Error::Shader`] if the file does not expand, which the crate's tests rule out for
    /// every shader it ships.
    pub fn source(&self) -> Result<String> {
        preprocess::expand(self.path, self.text, self.defines, &fragment).map_err(|e| {
            Error::Shader {
                shader: self.name.into(),
                message: e.to_string(),
            }
        })
    }

    /// The variant's defines: `(name, value)`, the value `""` for a plain flag.
    pub fn defines(&self) -> &'static [(&'static str, &'static str)] {
        self.defines
    }
}

/// The [`Shader`] of an entry file of `shaders/`, named `$name`: `shader!("reduce.wgsl
/// (vec4)", "reduce/reduce.wgsl")`, then `.with(&[("VEC4", "")])`, `.needs(...)`,
/// `.trusted()`.
macro_rules! shader {
    ($name:literal, $path:literal) => {
        $crate::shaders::Shader::new(
            $name,
            $path,
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $path)),
        )
    };
}
pub(crate) use shader;

/// The fragments of `shaders/shared/`, by the name `#import` gives them.
macro_rules! fragments {
    ($($name:literal),* $(,)?) => {
        &[$(($name, include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/", $name, ".wgsl")))),*]
    };
}
const FRAGMENTS: &[(&str, &str)] = fragments![
    "shared/combine1",
    "shared/f16_pairs",
    "shared/matmul_params",
    "shared/mip_feedback",
    "shared/reduce_subgroup",
    "shared/reduce_whole",
    "shared/reduce_workgroup",
    "shared/scan_io",
    "shared/scan_io_vec4",
    "shared/scan_subgroup",
    "shared/scan_workgroup",
    "shared/softmax_params",
    "shared/softmax_segment",
    "shared/split_word",
    "shared/vt_bindings",
    "shared/vt_hash",
    "shared/vt_library",
];

/// The text of the fragment `#import name` names.
fn fragment(name: &str) -> Option<&'static str> {
    FRAGMENTS.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_of_shaders_shared_is_a_fragment_and_every_fragment_a_file() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/shared");
        let mut files: Vec<String> = std::fs::read_dir(dir)
            .expect("shaders/shared exists")
            .map(|e| {
                e.expect("readable")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .map(|f| format!("shared/{}", f.trim_end_matches(".wgsl")))
            .collect();
        files.sort();
        let listed: Vec<String> = FRAGMENTS.iter().map(|(n, _)| n.to_string()).collect();
        assert_eq!(
            files, listed,
            "src/shaders/mod.rs FRAGMENTS against shaders/shared/"
        );
    }

    #[test]
    fn every_shipped_shader_expands_and_every_entry_file_is_shipped() {
        let mut paths = std::collections::BTreeSet::new();
        for shader in crate::SHADERS {
            let wgsl = shader.source().unwrap_or_else(|e| panic!("{e}"));
            let directive = |l: &str| l.trim_start().starts_with('#') || l.contains("#{");
            assert!(
                !wgsl.lines().any(directive),
                "{}: a directive survived",
                shader.name
            );
            paths.insert(shader.path);
        }
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/shaders");
        for family in std::fs::read_dir(root).expect("shaders/ exists") {
            let family = family.expect("readable").path();
            let name = family.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.as_deref() == Some("shared") || !family.is_dir() {
                continue;
            }
            for file in std::fs::read_dir(&family).expect("readable") {
                let file = file.expect("readable").path();
                let relative = file.strip_prefix(root).expect("under shaders/");
                let relative = relative.to_string_lossy().replace('\\', "/");
                assert!(
                    paths.contains(relative.as_str()),
                    "shaders/{relative} is in no shipped shader (entries live in a family \
                     folder, fragments in shaders/shared/)"
                );
            }
        }
    }
}
