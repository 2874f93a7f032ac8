//! Every environment variable vramkit reads, in one place (floor 1: it knows nothing
//! else). A setting that reads one does it through [`Knob`], never by spelling the name;
//! `CONTRIBUTING.md` lists them for people. What each variable does is said where its
//! setting is made; the table below is the index.
//!
//! | variable | what it does |
//! |---|---|
//! | `VRAMKIT_BACKEND` | backends to consider (`vulkan`, `metal`, `dx12`, `gl`, comma-separated) |
//! | `VRAMKIT_ADAPTER` | a substring the adapter's name must contain |
//! | `VRAMKIT_MATRIX_UNITS` | `0` keeps the GPU's matrix units off |
//! | `VRAMKIT_DEVICES` | how many devices a `DeviceSet` opens |
//! | `VRAMKIT_BACKTRACE` | `1` records a backtrace per allocation (leak reports) |
//! | `VRAMKIT_HOST_IMPORT` | `0` opens devices without `VK_EXT_external_memory_host` |
//! | `VRAMKIT_HOST_READ_BARRIER` | `0` leaves out the host-read barrier (to measure it) |
//! | `VRAMKIT_LOCK_BIAS` | `off` never biases the arena's lock to a thread |
//! | `VRAMKIT_QUEUE_LOCK` | `0` turns the queue lock off (reproduces the wgpu-core race) |
//! | `VRAMKIT_SEALING` | `chained` or `batched`: how arenas return frees, whatever the adapter |
//! | `VRAMKIT_SHADER_CHECKS` | `all`, `bounds` or `loops`: naga's checks on trusted shaders |
//!
//! Build-time: `VRAMKIT_VALIDATE_LOCKS=1` (`build.rs`) checks lock ranks in optimised
//! builds.

/// One of vramkit's environment variables (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Knob {
    Backend,
    Adapter,
    MatrixUnits,
    // Several devices and Vulkan host memory are native only.
    #[cfg_attr(web, allow(dead_code))]
    Devices,
    Backtrace,
    // Host memory import is Vulkan's (`gpu/host_import.rs`).
    #[cfg_attr(not(vulkan_hal), allow(dead_code))]
    HostImport,
    HostReadBarrier,
    #[cfg_attr(
        any(feature = "lock-parking-lot", feature = "lock-none"),
        allow(dead_code)
    )]
    LockBias,
    QueueLock,
    Sealing,
    ShaderChecks,
}

impl Knob {
    /// The variable's name.
    pub(crate) const fn name(self) -> &'static str {
        match self {
            Knob::Backend => "VRAMKIT_BACKEND",
            Knob::Adapter => "VRAMKIT_ADAPTER",
            Knob::MatrixUnits => "VRAMKIT_MATRIX_UNITS",
            Knob::Devices => "VRAMKIT_DEVICES",
            Knob::Backtrace => "VRAMKIT_BACKTRACE",
            Knob::HostImport => "VRAMKIT_HOST_IMPORT",
            Knob::HostReadBarrier => "VRAMKIT_HOST_READ_BARRIER",
            Knob::LockBias => "VRAMKIT_LOCK_BIAS",
            Knob::QueueLock => "VRAMKIT_QUEUE_LOCK",
            Knob::Sealing => "VRAMKIT_SEALING",
            Knob::ShaderChecks => "VRAMKIT_SHADER_CHECKS",
        }
    }

    /// Its value, where it is set (and valid Unicode).
    pub(crate) fn get(self) -> Option<String> {
        std::env::var(self.name()).ok()
    }

    /// Whether it is set to exactly `value`.
    pub(crate) fn is(self, value: &str) -> bool {
        self.get().is_some_and(|v| v == value)
    }
}
