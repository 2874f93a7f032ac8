//! The pipeline cache: compute pipelines by (shader, entry point, layout), compiled once
//! per device inside an error scope, trusted shaders without the checks their entries
//! justify unless `VRAMKIT_SHADER_CHECKS` turns them back on.

use std::collections::HashMap;
use std::sync::Arc;

use super::Shader;
use crate::gpu::scoped;
use crate::sync::rank::Mutex;
use crate::{Error, Result};

/// Compute pipelines by (shader, entry point), created on first use.
pub(crate) struct PipelineCache {
    modules: Mutex<HashMap<&'static str, wgpu::ShaderModule>>,
    pipelines: Mutex<HashMap<PipelineKey, Arc<wgpu::ComputePipeline>>>,
}

impl Default for PipelineCache {
    fn default() -> Self {
        PipelineCache {
            modules: Mutex::new(crate::sync::rank::SHADER_MODULES, HashMap::new()),
            pipelines: Mutex::new(crate::sync::rank::PIPELINES, HashMap::new()),
        }
    }
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
        device: &wgpu::Device,
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
        if !device.features().contains(shader.requires) {
            return Err(Error::MissingFeature {
                feature: format!("{:?}", shader.requires - device.features()),
                adapter: device.adapter_info().name,
                hint: format!("use a variant of '{}' that does not need it", shader.name),
            });
        }
        let module = {
            let mut modules = self.modules.lock();
            match modules.get(shader.name) {
                Some(m) => m.clone(),
                None => {
                    let source = shader.source()?;
                    let during = format!("compiling shader '{}'", shader.name);
                    let m = scoped(device, &during, || {
                        let desc = wgpu::ShaderModuleDescriptor {
                            label: Some(shader.name),
                            source: wgpu::ShaderSource::Wgsl(source.into()),
                        };
                        if shader.unchecked {
                            // SAFETY: integer-division checks stay on; these shaders index
                            // every array within its size by construction or behind
                            // host-validated sizes, and every loop is finite by
                            // construction (module docs, per shader); their tests run on
                            // random shapes.
                            let (bounds_checks, force_loop_bounding) = forced_checks();
                            let checks = wgpu::ShaderRuntimeChecks {
                                bounds_checks,
                                force_loop_bounding,
                                ..wgpu::ShaderRuntimeChecks::checked()
                            };
                            unsafe { device.create_shader_module_trusted(desc, checks) }
                        } else {
                            device.create_shader_module(desc)
                        }
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
        let pipeline = scoped(
            device,
            &format!("creating pipeline {}::{entry}", shader.name),
            || {
                device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
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

/// (bounds checks, loop bounding) that `VRAMKIT_SHADER_CHECKS` turns back on for trusted
/// shaders: `all`, `bounds` or `loops`; neither when unset.
fn forced_checks() -> (bool, bool) {
    static FORCED: std::sync::OnceLock<(bool, bool)> = std::sync::OnceLock::new();
    *FORCED.get_or_init(|| match crate::knobs::Knob::ShaderChecks.get().as_deref() {
        Some("all") => (true, true),
        Some("bounds") => (true, false),
        Some("loops") => (false, true),
        _ => (false, false),
    })
}
