//! Every WGSL shader vramkit ships, embedded in the binary, and the pipeline cache.
//!
//! The sources live in the crate's `shaders/` folder. [`ALL`] lists them so one test can
//! prove each portable to every backend ([`check`]).

pub mod check;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;

use crate::{Error, Gpu, Result};

/// A WGSL source file from `shaders/` and the wgpu features it needs.
#[derive(Clone, Copy, Debug)]
pub struct Shader {
    /// File name inside `shaders/`, also the cache key.
    pub name: &'static str,
    /// The WGSL text.
    pub source: &'static str,
    /// Features the device must have to use it.
    pub requires: wgpu::Features,
}

macro_rules! shader {
    ($ident:ident, $file:literal, $requires:expr, $doc:literal) => {
        #[doc = $doc]
        pub const $ident: Shader = Shader {
            name: $file,
            source: include_str!(concat!("../../shaders/", $file)),
            requires: $requires,
        };
    };
}

/// f32 elementwise kernels, one element per invocation (tails and short arrays).
pub const ELEMENTWISE: Shader = Shader {
    name: "elementwise.wgsl (f32)",
    source: concat!(
        "alias Elem = f32;\n",
        include_str!("../../shaders/elementwise.wgsl")
    ),
    requires: wgpu::Features::empty(),
};
/// f32 elementwise kernels, one vec4 per invocation (the aligned body of each array).
pub const ELEMENTWISE_VEC4: Shader = Shader {
    name: "elementwise.wgsl (vec4)",
    source: concat!(
        "alias Elem = vec4<f32>;\n",
        include_str!("../../shaders/elementwise.wgsl")
    ),
    requires: wgpu::Features::empty(),
};
/// Sum, max and min over rows of a 2-D view (and, in passes, over whole arrays), f32 loads.
pub const REDUCE: Shader = Shader {
    name: "reduce.wgsl (f32)",
    source: concat!(
        "alias Elem = f32;\nfn widen(v: f32, fill: f32) -> vec4<f32> { return vec4<f32>(v, fill, fill, fill); }\n",
        include_str!("../../shaders/reduce.wgsl")
    ),
    requires: wgpu::Features::empty(),
};
/// The same reductions with vec4 loads, for the bulk of whole-array reductions.
pub const REDUCE_VEC4: Shader = Shader {
    name: "reduce.wgsl (vec4)",
    source: concat!(
        "alias Elem = vec4<f32>;\nfn widen(v: vec4<f32>, fill: f32) -> vec4<f32> { return v; }\n",
        include_str!("../../shaders/reduce.wgsl")
    ),
    requires: wgpu::Features::empty(),
};
shader!(
    PATCH_WORDS,
    "patch_words.wgsl",
    wgpu::Features::empty(),
    "Writes the partial words at the unaligned edges of an upload."
);
shader!(
    GUARD_CHECK,
    "guard_check.wgsl",
    wgpu::Features::empty(),
    "Checks guard bytes around arena allocations."
);

/// Every shader shipped with the crate.
pub const ALL: &[Shader] = &[
    ELEMENTWISE,
    ELEMENTWISE_VEC4,
    REDUCE,
    PATCH_WORDS,
    GUARD_CHECK,
];

/// Compute pipelines by (shader, entry point), created on first use.
#[derive(Default)]
pub(crate) struct PipelineCache {
    modules: Mutex<HashMap<&'static str, wgpu::ShaderModule>>,
    pipelines: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
}

/// Shader file, entry point, and the name of the explicit layout (`""` for automatic).
type PipelineKey = (&'static str, String, &'static str);

/// An explicit pipeline layout, named for the cache. Kernels that need dynamic offsets or
/// bind groups shared between entry points use one; the automatic layout can do neither.
#[derive(Clone, Copy)]
pub struct NamedLayout<'a> {
    /// Cache key: one name per distinct layout.
    pub name: &'static str,
    /// The layout.
    pub layout: &'a wgpu::PipelineLayout,
}

impl PipelineCache {
    pub(crate) fn get(
        &self,
        gpu: &Gpu,
        shader: &Shader,
        entry: &str,
        layout: Option<NamedLayout<'_>>,
    ) -> Result<Arc<wgpu::ComputePipeline>> {
        let key = (
            shader.name,
            entry.to_string(),
            layout.map_or("", |l| l.name),
        );
        if let Some(p) = self.pipelines.lock().get(&key) {
            return Ok(p.clone());
        }
        if !gpu.has(shader.requires) {
            return Err(Error::MissingFeature {
                feature: format!("{:?}", shader.requires - gpu.features()),
                adapter: gpu.info().name.clone(),
                hint: format!("use a variant of '{}' that does not need it", shader.name),
            });
        }
        let module = {
            let mut modules = self.modules.lock();
            match modules.get(shader.name) {
                Some(m) => m.clone(),
                None => {
                    let m = gpu
                        .scoped(&format!("compiling shader '{}'", shader.name), || {
                            gpu.device()
                                .create_shader_module(wgpu::ShaderModuleDescriptor {
                                    label: Some(shader.name),
                                    source: wgpu::ShaderSource::Wgsl(shader.source.into()),
                                })
                        })
                        .map_err(|e| Error::Shader {
                            shader: shader.name.into(),
                            message: e.to_string(),
                        })?;
                    modules.insert(shader.name, m.clone());
                    m
                }
            }
        };
        let pipeline = gpu
            .scoped(
                &format!("creating pipeline {}::{entry}", shader.name),
                || {
                    gpu.device()
                        .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                            label: Some(entry),
                            layout: layout.map(|l| l.layout),
                            module: &module,
                            entry_point: Some(entry),
                            compilation_options: Default::default(),
                            cache: None,
                        })
                },
            )
            .map_err(|e| Error::Shader {
                shader: format!("{}::{entry}", shader.name),
                message: e.to_string(),
            })?;
        let pipeline = Arc::new(pipeline);
        self.pipelines.lock().insert(key, pipeline.clone());
        Ok(pipeline)
    }
}
