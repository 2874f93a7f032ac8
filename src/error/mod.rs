//! The crate's typed error.
//!
//! Every fallible public function returns [`Result<T>`](Result). Each variant says what
//! was asked, what was available and what to do about it, so a user can act on the message
//! without reading the source.

mod misuse;
mod oom;

pub use misuse::Misuse;
pub use oom::{Limit, OutOfMemory};

use crate::alloc::AllocError;

/// Errors returned by vramkit. Print them with `Display` (`{e}`): each says what was
/// asked, what was available and what to do. New variants may come in minor releases.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An error on one device of a `DeviceSet` (`vramkit::devices`, native only): which one,
    /// and what happened there (`source`: out of memory under that device's budget, a
    /// lost device, ...).
    #[error("device {device} ('{adapter}'): {source}")]
    OnDevice {
        /// The device's index in the set.
        device: usize,
        /// Its adapter's name.
        adapter: String,
        /// What failed there.
        source: Box<Error>,
    },

    /// No adapter matched the selection (or none exists at all).
    #[error("no GPU adapter found ({selection}); adapters seen: [{seen}]. {hint}")]
    NoAdapter {
        /// The selection that was applied (backend and name filters).
        selection: String,
        /// Every adapter that was enumerated, matched or not.
        seen: String,
        /// What to install or change.
        hint: String,
    },

    /// The adapter refused to create a device.
    #[error("requesting a device from adapter '{adapter}' failed: {source}. {hint}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// wgpu's error.
        source: wgpu::RequestDeviceError,
        /// What may be behind it, and what to try.
        hint: String,
    },

    /// An argument was out of its valid range; nothing was changed.
    #[error("invalid argument: {what}. {hint}")]
    InvalidArgument {
        /// Which kind of misuse, to match on.
        kind: Misuse,
        /// What was wrong.
        what: String,
        /// How to fix it.
        hint: String,
    },

    /// The allocator core rejected a request (bad size or alignment).
    #[error(transparent)]
    Alloc(#[from] AllocError),

    /// A request did not fit under the budget, the pool quota, or the device's memory.
    #[error(transparent)]
    OutOfMemory(#[from] Box<OutOfMemory>),

    /// wgpu reported an error inside an error scope (validation, out of memory, internal).
    #[error("wgpu reported an error during {during}: {message}")]
    Wgpu {
        /// The operation that was running.
        during: String,
        /// wgpu's message.
        message: String,
    },

    /// The device is gone (destroyed, driver reset, unplugged): nothing more can run on it.
    /// Open a new `Gpu` (and arena) to go on; statistics and leak reports of the old arena
    /// still work.
    #[error("the GPU device '{adapter}' was lost ({reason}); open a new Gpu to continue")]
    DeviceLost {
        /// The adapter's name.
        adapter: String,
        /// wgpu's reason and message.
        reason: String,
    },

    /// Waiting on or mapping GPU work failed (device lost, timeout).
    #[error("GPU work failed during {during}: {message}")]
    Device {
        /// The operation that was running.
        during: String,
        /// What the backend said.
        message: String,
    },

    #[error("reading the source failed during {during}: {source}")]
    /// Reading a streaming source (a file, any `Read`) failed; nothing after the failing
    /// chunk was submitted.
    Io {
        /// What was being read.
        during: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },

    /// A virtual-texture tile source gave no usable tile (an I/O error, bytes of the wrong
    /// size, a corrupt or truncated pack file); nothing was uploaded for it.
    #[error("virtual texture {place}: {what}. {hint}")]
    Tile {
        /// Where: a tile `(level, x, y)` of a source, or a part of a pack file.
        place: String,
        /// What was wrong.
        what: String,
        /// What to do.
        hint: String,
    },

    /// A shader failed to parse, validate or translate.
    #[error("shader '{shader}' is not portable: {message}")]
    Shader {
        /// Shader file name.
        shader: String,
        /// The diagnostic.
        message: String,
    },

    /// A call that waits for the GPU, made where nothing may block: on the browser's page
    /// (wasm32), where the GPU's answers arrive only after the page yields to its event
    /// loop. Nothing was changed; call the `_async` variant named and `.await` it.
    #[error("{call} waits for the GPU, which the browser does not allow (its answers come only after the page yields); use {instead}")]
    WouldBlock {
        /// The blocking call.
        call: String,
        /// The call to await instead.
        instead: String,
    },

    /// An error of the program's own code that runs inside vramkit (a restore function, a
    /// tile source, a fill callback), or that a program returns as a vramkit error: what
    /// it was doing, and the error itself.
    #[error("{during}: {source}")]
    External {
        /// What was being done.
        during: String,
        /// The error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// The device lacks a feature this operation needs.
    #[error("this operation needs the wgpu feature {feature}, which adapter '{adapter}' does not offer. {hint}")]
    MissingFeature {
        /// The missing feature.
        feature: String,
        /// The adapter's name.
        adapter: String,
        /// What to do instead.
        hint: String,
    },
}

/// `Result` with vramkit's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::InvalidArgument`] of kind [`Misuse::Other`]: what was wrong, and how to
    /// fix it.
    ///
    /// ```
    /// let e = vramkit::Error::invalid("a batch of 0 frames", "ask for 1 or more");
    /// assert_eq!(e.to_string(), "invalid argument: a batch of 0 frames. ask for 1 or more");
    /// ```
    pub fn invalid(what: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::misuse(Misuse::Other, what, hint)
    }

    /// An [`Error::InvalidArgument`] of the given kind: what was wrong, and how to fix it.
    pub fn misuse(kind: Misuse, what: impl Into<String>, hint: impl Into<String>) -> Self {
        Error::InvalidArgument {
            kind,
            what: what.into(),
            hint: hint.into(),
        }
    }

    /// The kind of misuse this error reports, if it is one: an
    /// [`InvalidArgument`](Error::InvalidArgument)'s kind, the allocator core's bad
    /// alignment or size, or the same of a device of a set ([`Error::OnDevice`]).
    pub fn misuse_kind(&self) -> Option<Misuse> {
        match self {
            Error::InvalidArgument { kind, .. } => Some(*kind),
            Error::Alloc(AllocError::BadAlignment { .. }) => Some(Misuse::Alignment),
            Error::Alloc(AllocError::ZeroSize) => Some(Misuse::Shape),
            Error::OnDevice { source, .. } => source.misuse_kind(),
            _ => None,
        }
    }

    /// An [`Error::External`]: an error of the program's own, as a vramkit error (a
    /// restore function's file read that failed, say).
    ///
    /// ```
    /// let io = std::io::Error::new(std::io::ErrorKind::NotFound, "weights.bin");
    /// let e = vramkit::Error::external("reloading the weights", io);
    /// assert_eq!(e.to_string(), "reloading the weights: weights.bin");
    /// ```
    pub fn external(
        during: impl Into<String>,
        error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
    ) -> Self {
        Error::External {
            during: during.into(),
            source: error.into(),
        }
    }
}
