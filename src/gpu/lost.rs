//! Device loss: once the device is gone, every vramkit call says so with
//! [`Error::DeviceLost`], at once, instead of wgpu's validation messages about submission
//! indices or a silent `Ok`.
//!
//! # How it is noticed
//! - On a headless context vramkit owns the device and installs wgpu's device-lost
//!   callback, which records the reason. wgpu runs it inside a poll once the queue has
//!   drained (after `Device::destroy`, a driver reset, ...).
//! - On a device a host app owns ([`Gpu::from_wgpu`]) the callback is the host's (wgpu
//!   keeps one): the host forwards the loss with [`Gpu::mark_lost`].
//! - Whenever a vramkit call into wgpu fails (an error scope caught something, a wait
//!   failed), vramkit polls once, so a pending loss is recorded, and reports the loss
//!   rather than the symptom.
//!
//! Entry points check the recorded state (one atomic load) before they touch the device.
//! Dropping allocations, arenas and views after a loss does no device work that can fail,
//! and statistics, summaries and leak reports keep working.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::Gpu;
use crate::{Error, Result};

/// Whether and why the device was lost; shared with the device-lost callback.
#[derive(Default)]
pub(super) struct LostState {
    lost: AtomicBool,
    reason: Mutex<String>,
}

impl LostState {
    pub(super) fn record(&self, reason: String) {
        let mut r = self.reason.lock();
        if !self.lost.load(Ordering::Acquire) {
            *r = reason;
            self.lost.store(true, Ordering::Release);
        }
    }

    /// A device-lost callback for `device` that records into `state`.
    pub(super) fn install(state: &Arc<LostState>, device: &wgpu::Device) {
        let state = state.clone();
        device.set_device_lost_callback(move |reason, message| {
            state.record(format!("{reason:?}: {message}"));
        });
    }
}

impl Gpu {
    /// Why the device was lost, once it has been (see the module docs for when vramkit
    /// notices).
    pub fn lost(&self) -> Option<String> {
        let state = &self.inner.lost;
        state
            .lost
            .load(Ordering::Acquire)
            .then(|| state.reason.lock().clone())
    }

    /// Records that the device is lost, for a host app that owns the device-lost callback
    /// of a device it shares ([`Gpu::from_wgpu`]): every vramkit call fails fast after it.
    pub fn mark_lost(&self, reason: impl Into<String>) {
        self.inner.lost.record(reason.into());
    }

    /// `Err(DeviceLost)` once the device is lost; a single atomic load otherwise.
    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.inner.lost.lost.load(Ordering::Acquire) {
            return Err(self.lost_error());
        }
        Ok(())
    }

    /// Turns a failure of a call into wgpu into [`Error::DeviceLost`] when the device is
    /// gone: polls once (wgpu records a pending loss inside a poll), then checks.
    pub(crate) fn explain(&self, error: Error) -> Error {
        if matches!(error, Error::DeviceLost { .. }) {
            return error;
        }
        let _ = self.inner.device.poll(wgpu::PollType::Poll);
        if self.inner.lost.lost.load(Ordering::Acquire) {
            return self.lost_error();
        }
        error
    }

    fn lost_error(&self) -> Error {
        Error::DeviceLost {
            adapter: self.inner.info.name.clone(),
            reason: self.inner.lost.reason.lock().clone(),
        }
    }
}
