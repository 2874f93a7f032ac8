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

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::lock_rank::Mutex;

use super::Gpu;
use crate::{Error, Result};

/// Whether and why the device was lost; shared with the device-lost callback.
#[derive(Default)]
pub(super) struct LostState {
    lost: AtomicBool,
    reason: Mutex<String>,
    /// wgpu errors that reached the uncaptured-error handler (see `install`).
    uncaptured: AtomicU64,
}

impl LostState {
    pub(super) fn record(&self, reason: String) {
        let mut r = self.reason.lock();
        if !self.lost.load(Ordering::Acquire) {
            *r = reason;
            self.lost.store(true, Ordering::Release);
        }
    }

    /// A device-lost callback for `device` that records into `state`, and an
    /// uncaptured-error handler in place of wgpu's default, which panics: every call of
    /// vramkit's that can fail runs in an error scope, so what reaches this handler is the
    /// host's own work on a device vramkit opened, or wgpu's report on resources made
    /// invalid by a loss. It is logged; a loss then shows at the next check.
    pub(super) fn install(state: &Arc<LostState>, device: &wgpu::Device) {
        let lost = state.clone();
        device.set_device_lost_callback(move |reason, message| {
            lost.record(format!("{reason:?}: {message}"));
        });
        let uncaptured = state.clone();
        device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| {
            uncaptured.uncaptured.fetch_add(1, Ordering::Relaxed);
            log::error!("wgpu error outside any vramkit error scope: {error}");
        }));
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

    /// How many wgpu errors reached the uncaptured-error handler vramkit installs on the
    /// devices it opens (each is logged); 0 on a device a host app shares, whose handler
    /// is the host's. vramkit's own calls run in error scopes, so a count above 0 means
    /// work recorded outside vramkit failed, or resources were used after a loss.
    pub fn uncaptured_errors(&self) -> u64 {
        self.inner.lost.uncaptured.load(Ordering::Relaxed)
    }

    /// Records that the device is lost, for a host app that owns the device-lost callback
    /// of a device it shares ([`Gpu::from_wgpu`]): every vramkit call fails fast after it.
    pub fn mark_lost(&self, reason: impl Into<String>) {
        self.inner.lost.record(reason.into());
    }

    /// Asks wgpu whether the device is still there (a non-blocking poll: wgpu runs the
    /// device-lost callback inside one, once a destroyed device's queue has drained), and
    /// says so. wgpu reports nothing else after `Device::destroy`: resources it creates
    /// then are silently invalid and submissions silently dropped.
    pub(crate) fn notice_loss(&self) -> Result<()> {
        self.check_alive()?;
        let _ = self.inner.device.poll(wgpu::PollType::Poll);
        self.check_alive()
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
