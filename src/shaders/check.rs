//! Proving WGSL portable: parse, validate and translate for every wgpu backend.
//!
//! A shader that validates for Vulkan can still be impossible on Metal (no `f64`) or DX12
//! (no subgroup barriers). Running each backend's own translator with that backend's own
//! capability set catches this on Linux, in a unit test, before a Mac or Windows user does.

use naga::back::{glsl, hlsl, msl, spv};
use naga::valid::{
    Capabilities, ModuleInfo, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator,
};

use crate::{Error, Result};

/// A translation target, named after the wgpu backend that consumes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// SPIR-V 1.3 for Vulkan.
    SpirV,
    /// MSL 2.4 for Metal.
    Msl,
    /// HLSL shader model 6.0 (6.2 for f16) for DX12.
    Hlsl,
    /// GLSL ES 3.10 for wgpu's GL backend.
    Glsl,
}

impl Target {
    /// Every target.
    pub const ALL: [Target; 4] = [Target::SpirV, Target::Msl, Target::Hlsl, Target::Glsl];

    /// What the backend can express: naga's own list for that writer, narrowed for GL to
    /// what wgpu's GLES backend ever offers (neither f16 nor subgroups).
    pub fn capabilities(self) -> Capabilities {
        match self {
            Target::SpirV => spv::supported_capabilities(),
            Target::Msl => msl::supported_capabilities(),
            Target::Hlsl => hlsl::supported_capabilities(),
            Target::Glsl => {
                glsl::supported_capabilities()
                    - Capabilities::SHADER_FLOAT16
                    - Capabilities::SUBGROUP
                    - Capabilities::SUBGROUP_BARRIER
            }
        }
    }
}

/// naga capabilities a shader needs, from the wgpu features it is declared to require.
pub fn capabilities_for(features: wgpu::Features) -> Capabilities {
    let mut caps = Capabilities::empty();
    for (f, c) in [
        (wgpu::Features::SHADER_F16, Capabilities::SHADER_FLOAT16),
        (wgpu::Features::SUBGROUP, Capabilities::SUBGROUP),
        (
            wgpu::Features::SUBGROUP_BARRIER,
            Capabilities::SUBGROUP_BARRIER,
        ),
        (wgpu::Features::SHADER_F64, Capabilities::FLOAT64),
        (wgpu::Features::IMMEDIATES, Capabilities::IMMEDIATES),
        (wgpu::Features::SHADER_INT64, Capabilities::SHADER_INT64),
        (
            wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
            Capabilities::COOPERATIVE_MATRIX,
        ),
    ] {
        if features.contains(f) {
            caps |= c;
        }
    }
    caps
}

/// What the check found for one target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Validated and translated.
    Translated,
    /// The shader declares a feature this backend never offers; runtime code must choose a
    /// fallback variant there, so it is not an error.
    NotApplicable(String),
}

fn err(shader: &str, target: Option<Target>, message: impl std::fmt::Display) -> Error {
    let prefix = match target {
        Some(t) => format!("{t:?}: "),
        None => String::new(),
    };
    Error::Shader {
        shader: shader.to_string(),
        message: format!("{prefix}{message}"),
    }
}

/// Parses `source`, then validates and translates it for every target. `requires` lists
/// the wgpu features the shader is only ever used with.
///
/// Returns, per target, whether it translated or was not applicable; any failure is an
/// [`Error::Shader`] naming the target and naga's diagnostic.
pub fn check(name: &str, source: &str, requires: wgpu::Features) -> Result<Vec<(Target, Outcome)>> {
    let module = naga::front::wgsl::parse_str(source)
        .map_err(|e| err(name, None, e.emit_to_string(source)))?;
    let needed = capabilities_for(requires);
    let mut outcomes = Vec::new();
    for target in Target::ALL {
        let caps = target.capabilities();
        if !caps.contains(needed) {
            outcomes.push((
                target,
                Outcome::NotApplicable(format!("backend lacks {:?}", needed - caps)),
            ));
            continue;
        }
        let info = Validator::new(ValidationFlags::all(), caps)
            .subgroup_stages(ShaderStages::all())
            .subgroup_operations(SubgroupOperationSet::all())
            .validate(&module)
            .map_err(|e| err(name, Some(target), e.emit_to_string(source)))?;
        translate(&module, &info, target, requires).map_err(|m| err(name, Some(target), m))?;
        outcomes.push((target, Outcome::Translated));
    }
    Ok(outcomes)
}

/// Workgroup memory `module` declares, in bytes, as naga lays out its types (no rounding
/// per variable: Tint's rounding to 16 bytes is the browser's own). `name` is the
/// shader's, for the error.
///
/// ```
/// let module = naga::front::wgsl::parse_str(
///     "var<workgroup> t: array<vec4<f32>, 64>;\n\
///      @compute @workgroup_size(64) fn main(@builtin(local_invocation_index) i: u32) { t[i] = vec4<f32>(0.0); }",
/// ).unwrap();
/// assert_eq!(vramkit::shaders::check::workgroup_bytes("tile", &module).unwrap(), 1024);
/// ```
pub fn workgroup_bytes(name: &str, module: &naga::Module) -> Result<u32> {
    let mut layouter = naga::proc::Layouter::default();
    layouter
        .update(module.to_ctx())
        .map_err(|e| err(name, None, e))?;
    Ok(module
        .global_variables
        .iter()
        .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
        .map(|(_, v)| layouter[v.ty].size)
        .sum())
}

fn translate(
    module: &naga::Module,
    info: &ModuleInfo,
    target: Target,
    requires: wgpu::Features,
) -> std::result::Result<(), String> {
    match target {
        Target::SpirV => {
            let options = spv::Options {
                lang_version: (1, 3),
                ..Default::default()
            };
            spv::write_vec(module, info, &options, None).map_err(|e| e.to_string())?;
        }
        Target::Msl => {
            let options = msl::Options {
                lang_version: (2, 4),
                ..Default::default()
            };
            msl::write_string(module, info, &options, &msl::PipelineOptions::default())
                .map_err(|e| e.to_string())?;
        }
        Target::Hlsl => {
            let shader_model = if requires.contains(wgpu::Features::SHADER_F16) {
                hlsl::ShaderModel::V6_2
            } else {
                hlsl::ShaderModel::V6_0
            };
            let options = hlsl::Options {
                shader_model,
                ..Default::default()
            };
            let mut out = String::new();
            hlsl::Writer::new(&mut out, &options, &hlsl::PipelineOptions::default())
                .write(module, info, None)
                .map_err(|e| e.to_string())?;
        }
        Target::Glsl => {
            for ep in &module.entry_points {
                let options = glsl::Options {
                    version: glsl::Version::new_gles(310),
                    ..Default::default()
                };
                let pipeline = glsl::PipelineOptions {
                    shader_stage: ep.stage,
                    entry_point: ep.name.clone(),
                    multiview: None,
                };
                let mut out = String::new();
                glsl::Writer::new(
                    &mut out,
                    module,
                    info,
                    &options,
                    &pipeline,
                    naga::proc::BoundsCheckPolicies::default(),
                )
                .and_then(|mut w| w.write())
                .map_err(|e| format!("entry point '{}': {e}", ep.name))?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PORTABLE: &str = "
        @group(0) @binding(0) var<storage, read_write> data: array<f32>;
        @compute @workgroup_size(64)
        fn main(@builtin(global_invocation_id) id: vec3<u32>) {
            if id.x < arrayLength(&data) { data[id.x] = data[id.x] * 2.0; }
        }";

    // Valid WGSL that Vulkan, DX12 and GL can run but Metal cannot: MSL has no doubles.
    const USES_F64: &str = "
        @group(0) @binding(0) var<storage, read_write> data: array<f32>;
        @compute @workgroup_size(64)
        fn main(@builtin(global_invocation_id) id: vec3<u32>) {
            if id.x < arrayLength(&data) {
                let wide = f64(data[id.x]) * 2.0lf;
                data[id.x] = f32(wide);
            }
        }";

    #[test]
    fn portable_shader_translates_everywhere() {
        let out = check("portable", PORTABLE, wgpu::Features::empty()).unwrap();
        assert_eq!(out.len(), 4);
        assert!(
            out.iter().all(|(_, o)| *o == Outcome::Translated),
            "{out:?}"
        );
    }

    #[test]
    fn rejects_a_shader_metal_cannot_express() {
        let e = check("uses_f64", USES_F64, wgpu::Features::empty())
            .unwrap_err()
            .to_string();
        assert!(e.contains("uses_f64") && e.contains("Msl"), "{e}");
    }

    #[test]
    fn declared_f64_makes_metal_not_applicable_instead() {
        let out = check("uses_f64", USES_F64, wgpu::Features::SHADER_F64).unwrap();
        let msl = out.iter().find(|(t, _)| *t == Target::Msl).unwrap();
        assert!(matches!(msl.1, Outcome::NotApplicable(_)), "{out:?}");
        let spv = out.iter().find(|(t, _)| *t == Target::SpirV).unwrap();
        assert_eq!(spv.1, Outcome::Translated);
    }

    #[test]
    fn reports_parse_errors_with_the_shader_name() {
        let e = check("broken", "fn main( {", wgpu::Features::empty())
            .unwrap_err()
            .to_string();
        assert!(e.contains("broken"), "{e}");
    }
}
