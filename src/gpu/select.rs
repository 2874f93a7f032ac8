//! Choosing an adapter without a window.
//!
//! The same binary must run on a laptop, a server GPU and a CPU-only CI box, so selection
//! ranks what is present instead of demanding one kind: discrete GPU first, then integrated,
//! virtual, and finally a CPU driver such as lavapipe. Two environment variables override it:
//!
//! | variable | meaning | example |
//! |---|---|---|
//! | `VRAMKIT_BACKEND` | only adapters of these backends (comma list) | `vulkan`, `metal`, `dx12`, `gl` |
//! | `VRAMKIT_ADAPTER` | only adapters whose name contains this (case-insensitive) | `h100`, `llvmpipe` |

use crate::knobs::Knob;
use crate::{Error, Result};

/// How [`Gpu::headless_with`](crate::Gpu::headless_with) picks and opens an adapter.
#[derive(Clone, Debug, Default)]
pub struct GpuOptions {
    /// Backends to consider; `None` means every backend compiled in.
    pub backends: Option<wgpu::Backends>,
    /// Case-insensitive substring the adapter name must contain.
    pub adapter_name: Option<String>,
    /// Features the caller needs on top of the ones vramkit turns on when present.
    /// Opening fails with [`Error::MissingFeature`] if the adapter lacks one.
    pub required_features: wgpu::Features,
    /// Leave the GPU's matrix units (tensor cores) off. By default vramkit turns on wgpu's
    /// `EXPERIMENTAL_COOPERATIVE_MATRIX` where the adapter runs 16 x 16 x 16 f16 -> f32
    /// cooperative matrices on subgroups of 32, for the f16 matmul
    /// ([`Gpu::has_matrix_units`](crate::Gpu::has_matrix_units)). `VRAMKIT_MATRIX_UNITS=0`
    /// sets this in [`from_env`](Self::from_env).
    pub disable_matrix_units: bool,
}

impl GpuOptions {
    /// Options read from `VRAMKIT_BACKEND`, `VRAMKIT_ADAPTER` and `VRAMKIT_MATRIX_UNITS`.
    ///
    /// An unknown backend name is an error rather than being ignored: a typo would otherwise
    /// silently pick a different GPU and make benchmark tables lie.
    pub fn from_env() -> Result<Self> {
        let mut options = GpuOptions::default();
        if let Some(list) = Knob::Backend.get() {
            options.backends = Some(parse_backends(&list)?);
        }
        if let Some(name) = Knob::Adapter.get() {
            if !name.trim().is_empty() {
                options.adapter_name = Some(name.trim().to_string());
            }
        }
        options.disable_matrix_units = Knob::MatrixUnits.is("0");
        Ok(options)
    }

    pub(crate) fn describe(&self) -> String {
        let backends = match self.backends {
            Some(b) => format!("backends {b:?}"),
            None => "any backend".to_string(),
        };
        match &self.adapter_name {
            Some(name) => format!("{backends}, name containing '{name}'"),
            None => backends,
        }
    }
}

/// Parses a comma-separated backend list such as `vulkan,gl`.
pub fn parse_backends(list: &str) -> Result<wgpu::Backends> {
    let mut backends = wgpu::Backends::empty();
    for word in list.split(',').map(|w| w.trim().to_ascii_lowercase()) {
        backends |= match word.as_str() {
            "" => continue,
            "vulkan" | "vk" => wgpu::Backends::VULKAN,
            "metal" | "mtl" => wgpu::Backends::METAL,
            "dx12" | "d3d12" => wgpu::Backends::DX12,
            "gl" | "gles" | "opengl" => wgpu::Backends::GL,
            "primary" => wgpu::Backends::PRIMARY,
            "all" => wgpu::Backends::all(),
            other => {
                return Err(Error::invalid(
                    format!("VRAMKIT_BACKEND names an unknown backend '{other}'"),
                    "use a comma list of vulkan, metal, dx12, gl, primary or all",
                ))
            }
        };
    }
    if backends.is_empty() {
        return Err(Error::invalid(
            "VRAMKIT_BACKEND is set but names no backend",
            "unset it, or name one of vulkan, metal, dx12, gl",
        ));
    }
    Ok(backends)
}

/// Rank of an adapter: lower is preferred. Device type dominates; among equals the native
/// APIs beat GL, whose compute support is the narrowest.
pub(crate) fn rank(info: &wgpu::AdapterInfo) -> (u8, u8) {
    let kind = match info.device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    let backend = match info.backend {
        wgpu::Backend::Vulkan | wgpu::Backend::Metal | wgpu::Backend::Dx12 => 0,
        wgpu::Backend::Gl => 1,
        _ => 2,
    };
    (kind, backend)
}

/// Picks the best adapter among `adapters` that passes the filters.
pub(crate) fn choose(adapters: Vec<wgpu::Adapter>, options: &GpuOptions) -> Result<wgpu::Adapter> {
    let seen = seen(&adapters);
    let wanted = options.adapter_name.as_ref().map(|n| n.to_lowercase());
    let best = adapters
        .into_iter()
        .filter(|a| match &wanted {
            Some(n) => a.get_info().name.to_lowercase().contains(n),
            None => true,
        })
        .min_by_key(|a| rank(&a.get_info()));
    // Name the real cause: a name filter that matched nothing, a backend filter that
    // left no adapter, or no adapter at all (then a driver is missing).
    let hint = match (&wanted, seen.is_empty(), options.backends) {
        (Some(n), false, _) => format!(
            "no adapter's name contains '{n}' (VRAMKIT_ADAPTER): pick one of the adapters \
             seen, or unset it"
        ),
        (_, true, Some(b)) if b != wgpu::Backends::all() => format!(
            "no adapter on the backends {b:?} (VRAMKIT_BACKEND): try another backend or \
             unset it. {}",
            crate::gpu::INSTALL_HINT
        ),
        _ => crate::gpu::INSTALL_HINT.to_string(),
    };
    best.ok_or_else(|| Error::NoAdapter {
        selection: options.describe(),
        seen,
        hint,
    })
}

/// Every adapter enumerated, for "no adapter" errors: name, backend and type of each.
pub(crate) fn seen(adapters: &[wgpu::Adapter]) -> String {
    adapters
        .iter()
        .map(|a| {
            let i = a.get_info();
            format!("{} ({:?}, {:?})", i.name, i.backend, i.device_type)
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_backend_lists() {
        assert_eq!(parse_backends("vulkan").unwrap(), wgpu::Backends::VULKAN);
        assert_eq!(
            parse_backends(" Vulkan , gl ").unwrap(),
            wgpu::Backends::VULKAN | wgpu::Backends::GL
        );
        let err = parse_backends("vulcan").unwrap_err().to_string();
        assert!(
            err.contains("vulcan") && err.contains("vulkan, metal"),
            "{err}"
        );
        assert!(parse_backends(",").is_err());
    }

    #[test]
    fn ranks_discrete_before_cpu_and_native_before_gl() {
        let mut info = wgpu::AdapterInfo::new(wgpu::DeviceType::Cpu, wgpu::Backend::Vulkan);
        let cpu_vk = rank(&info);
        info.backend = wgpu::Backend::Gl;
        let cpu_gl = rank(&info);
        info.device_type = wgpu::DeviceType::DiscreteGpu;
        let discrete_gl = rank(&info);
        assert!(discrete_gl < cpu_vk && cpu_vk < cpu_gl);
    }
}
