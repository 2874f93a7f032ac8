//! Device loss as an event: once the device is gone, every vramkit call says so with
//! [`Error::DeviceLost`], at once, and everything that was waiting on the device is woken
//! with it, instead of wgpu's validation messages about submission indices, a silent
//! `Ok`, or a wait that never ends.
//!
//! # How it is noticed
//! - On a headless context vramkit owns the device and installs wgpu's device-lost
//!   callback, which records the reason. wgpu runs it inside a poll once the queue has
//!   drained (after `Device::destroy`, a driver reset, ...).
//! - On a device a host app owns ([`Gpu::from_wgpu`]) the callback is the host's (wgpu
//!   keeps one): the host forwards the loss with [`Gpu::mark_lost`].
//! - A failed poll (vramkit's polling thread, a blocking wait) records the loss: wgpu fails
//!   a poll only when the driver reports the device lost.
//! - After `Device::destroy` with work in flight, wgpu refuses new work silently (its
//!   errors for an invalid device reach no error scope) and runs the lost callback only
//!   once that work has drained. Every vramkit call that records or allocates GPU work
//!   ([`Gpu::scoped`]) therefore ends with a *probe* ([`Gpu::confirm_alive`]): a mapping
//!   request, inside an error scope, on a 4-byte buffer of its own that was destroyed at
//!   creation. wgpu-core checks the device before the buffer: on a valid device the
//!   request fails as a validation error (a destroyed buffer), which the scope catches;
//!   on an invalid one it fails as a lost device, which wgpu reports to no scope. A probe
//!   whose scope comes back empty records the loss, so the call that was refused returns
//!   `DeviceLost` instead of `Ok` for work that was dropped. The buffer never changes
//!   state, so polls on other threads cannot disturb a probe; probes take turns only
//!   because wgpu's client-side record of a mapping is the buffer's, not the thread's.
//!
//! # Polling a lost device
//! wgpu 30 panics inside `Device::poll` when the driver reports the device lost
//! (`handle_error_fatal`: only timeouts and wrong submission indices come back as
//! errors). Every poll of vramkit's therefore goes through [`LostState::poll`]: none at
//! all once the loss is recorded, and a poll that panics inside wgpu (after wgpu-core has
//! released its locks and run the callbacks it collected) is caught and recorded as the
//! loss. An application built with `panic = "abort"` cannot catch it: there the first poll
//! after a real loss ends the process, as it does in any wgpu 30 program.
//!
//! # What a loss wakes
//! [`LostState::record`] sets the flag, then, outside its lock, runs the hooks registered
//! with [`LostState::on_lost`] (the work-done tracker wakes every future waiting for an
//! epoch; the polling thread stops polling) and wakes every future wrapped by
//! [`Gpu::or_lost`] (downloads, uploads, maps and settles resolve with `DeviceLost`).
//! Hooks and wakers only set flags and notify: a loss may be recorded inside any wgpu
//! callback, on any thread.
//!
//! # What it promises
//! - Entry points check the recorded state (one atomic load) before they touch the device.
//! - A future wrapped by [`Gpu::or_lost`] that is pending when the loss is recorded
//!   resolves with `DeviceLost`, whether or not wgpu ever runs or drops its callbacks.
//! - Dropping allocations, arenas and views after a loss does no device work that can
//!   fail, and statistics, summaries and leak reports keep working.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use crate::sync::rank::{self as lock_rank, Mutex};

use super::Gpu;
use crate::{Error, Result};

/// Something to run once when the loss is recorded (wake, notify; never block).
type Hook = Box<dyn FnOnce() + Send>;

/// Whether and why the device was lost; shared with the device-lost callback.
pub(super) struct LostState {
    lost: AtomicBool,
    reason: Mutex<Reason>,
    /// wgpu errors that reached the uncaptured-error handler (see `install`).
    uncaptured: AtomicU64,
    /// Run once, when the loss is recorded.
    hooks: Mutex<Vec<Hook>>,
    /// Futures of [`Gpu::or_lost`] waiting, by key: woken when the loss is recorded.
    wakers: Mutex<rustc_hash::FxHashMap<u64, Waker>>,
    next_key: AtomicU64,
}

#[derive(Default)]
struct Reason {
    text: String,
    /// Recorded by vramkit's probe, not by wgpu: wgpu's own reason replaces it when its
    /// callback runs later.
    provisional: bool,
}

impl Default for LostState {
    fn default() -> Self {
        LostState {
            lost: AtomicBool::new(false),
            reason: Mutex::new(lock_rank::LOST_REASON, Reason::default()),
            uncaptured: AtomicU64::new(0),
            hooks: Mutex::new(lock_rank::LOST_HOOKS, Vec::new()),
            wakers: Mutex::new(lock_rank::LOST_WAKERS, Default::default()),
            next_key: AtomicU64::new(0),
        }
    }
}

impl LostState {
    /// Records the loss (the first reason stays, unless it was provisional and this one is
    /// not) and, the first time, wakes everything waiting (module docs).
    pub(super) fn record(&self, reason: String) {
        self.record_as(reason, false);
    }

    fn record_as(&self, text: String, provisional: bool) {
        let first = {
            let mut r = self.reason.lock();
            let first = !self.lost.load(Ordering::Acquire);
            if first || (r.provisional && !provisional) {
                *r = Reason { text, provisional };
            }
            self.lost.store(true, Ordering::Release);
            first
        };
        if first {
            self.wake_everything();
        }
    }

    /// `device.poll(poll_type)` as the module docs say ("Polling a lost device").
    pub(super) fn poll(
        &self,
        device: &wgpu::Device,
        poll_type: wgpu::PollType,
    ) -> std::result::Result<wgpu::PollStatus, PollFailure> {
        if self.is_lost() {
            return Err(PollFailure::Lost);
        }
        let polled =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| device.poll(poll_type)));
        match polled {
            Ok(Ok(status)) => Ok(status),
            Ok(Err(e)) => Err(PollFailure::Wgpu(e)),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("wgpu panicked");
                self.record(format!("polling the device failed: {message}"));
                Err(PollFailure::Lost)
            }
        }
    }

    pub(super) fn is_lost(&self) -> bool {
        self.lost.load(Ordering::Acquire)
    }

    /// Runs `hook` once the loss is recorded (at once if it already is). Hooks run on
    /// whichever thread records the loss, possibly inside a wgpu callback: they must not
    /// block or take a lock below [`lock_rank::LOST_HOOKS`].
    pub(super) fn on_lost(&self, hook: impl FnOnce() + Send + 'static) {
        {
            let mut hooks = self.hooks.lock();
            if !self.is_lost() {
                hooks.push(Box::new(hook));
                return;
            }
        }
        hook();
    }

    /// Drops the hooks without running them: the last `Gpu` handle is going. Needed for
    /// the device to go at all: wgpu keeps its device-lost callback (which holds this
    /// state) inside the device, and a hook holds the work-done tracker, which holds the
    /// queue, which holds the device: a cycle that kept every dropped device, its driver
    /// threads and memory alive (NVIDIA refused the 64th `Runtime::headless` in one process,
    /// lavapipe kept six threads per device; `lab` `device_churn gpu`).
    pub(super) fn clear_hooks(&self) {
        let hooks = std::mem::take(&mut *self.hooks.lock());
        drop(hooks);
    }

    #[cold]
    fn wake_everything(&self) {
        let hooks = std::mem::take(&mut *self.hooks.lock());
        for hook in hooks {
            hook();
        }
        let wakers: Vec<Waker> = self.wakers.lock().drain().map(|(_, w)| w).collect();
        for waker in wakers {
            waker.wake();
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

/// Why a poll did not return a status.
#[derive(Debug)]
pub(crate) enum PollFailure {
    /// The device is lost (recorded before the poll, or by it).
    Lost,
    /// A wait timed out or named a submission that never succeeded.
    Wgpu(wgpu::PollError),
}

/// The probe's destroyed buffer (module docs), one probe at a time.
pub(super) struct Probe {
    buffer: wgpu::Buffer,
    busy: Mutex<()>,
}

impl Probe {
    /// The probe's buffer on `device`; `None` in the browser, where a mapping is never
    /// refused synchronously (WebGPU reports a loss through `device.lost`).
    pub(super) fn new(device: &wgpu::Device) -> Option<Probe> {
        if cfg!(web) {
            return None;
        }
        let buffer = crate::gpu::scoped(device, "creating the device-loss probe", || {
            let buffer = device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("vramkit loss probe (destroyed)"),
                size: 4,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            buffer.destroy();
            buffer
        })
        .ok()?;
        Some(Probe {
            buffer,
            busy: Mutex::new(lock_rank::LOST_PROBE, ()),
        })
    }

    /// True when wgpu refuses a mapping of the probe for a lost device rather than for its
    /// destroyed buffer: the device is invalid.
    fn refused(&self, device: &wgpu::Device) -> bool {
        let _one_at_a_time = self.busy.lock();
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.buffer.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        let lost = pollster::block_on(scope.pop()).is_none();
        // Clears wgpu's client-side record of the request; the unmap of a destroyed buffer
        // is itself a validation error, expected and dropped.
        let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
        self.buffer.unmap();
        drop(pollster::block_on(scope.pop()));
        lost
    }
}

impl Gpu {
    /// Why the device was lost, once it has been (see the module docs for when vramkit
    /// notices).
    pub fn lost(&self) -> Option<String> {
        let state = &self.inner.lost;
        state.is_lost().then(|| state.reason.lock().text.clone())
    }

    /// How many wgpu errors reached the uncaptured-error handler vramkit installs on the
    /// devices it opens (each is logged); 0 on a device a host app shares, whose handler
    /// is the host's. vramkit's own calls run in error scopes, so a count above 0 means
    /// work recorded outside vramkit failed, or resources were used after a loss.
    pub fn uncaptured_errors(&self) -> u64 {
        self.inner.lost.uncaptured.load(Ordering::Relaxed)
    }

    /// Records that the device is lost, for a host app that owns the device-lost callback
    /// of a device it shares ([`Gpu::from_wgpu`]): every vramkit call fails fast after it,
    /// and every future or wait pending on the device resolves with
    /// [`Error::DeviceLost`].
    ///
    /// ```no_run
    /// # fn host() -> (wgpu::Device, wgpu::Queue) { unimplemented!() }
    /// let (device, queue) = host();
    /// let gpu = vramkit::Gpu::from_wgpu(device.clone(), queue);
    /// // Weak: the device keeps this callback, and a `Gpu` in it would keep the device.
    /// let forward = gpu.downgrade();
    /// device.set_device_lost_callback(move |reason, message| {
    ///     if let Some(gpu) = forward.upgrade() {
    ///         gpu.mark_lost(format!("{reason:?}: {message}"));
    ///     }
    /// });
    /// ```
    pub fn mark_lost(&self, reason: impl Into<String>) {
        self.inner.lost.record(reason.into());
    }

    /// Asks wgpu whether the device is still there (a non-blocking poll: wgpu runs the
    /// device-lost callback inside one, once a destroyed device's queue has drained), and
    /// says so.
    pub(crate) fn notice_loss(&self) -> Result<()> {
        self.check_alive()?;
        let _ = self.poll_device(wgpu::PollType::Poll);
        self.confirm_alive()
    }

    /// Polls the device unless its loss is recorded; a poll that finds it lost records it
    /// (module docs, "Polling a lost device").
    pub(crate) fn poll_device(
        &self,
        poll_type: wgpu::PollType,
    ) -> std::result::Result<wgpu::PollStatus, PollFailure> {
        self.inner.lost.poll(&self.inner.device, poll_type)
    }

    /// `Err(DeviceLost)` once the device is lost; a single atomic load otherwise.
    pub(crate) fn check_alive(&self) -> Result<()> {
        if self.inner.lost.is_lost() {
            return Err(self.lost_error());
        }
        Ok(())
    }

    /// [`check_alive`](Self::check_alive), then the probe of the module docs: a device
    /// that wgpu already treats as invalid (destroyed, or lost with work still draining)
    /// is recorded lost now. Call after recording or allocating GPU work, so that work
    /// wgpu dropped is never reported `Ok`.
    pub(crate) fn confirm_alive(&self) -> Result<()> {
        self.check_alive()?;
        let device = &self.inner.device;
        if self.inner.probe.as_ref().is_some_and(|p| p.refused(device)) {
            self.inner.lost.record_as(
                "the device is no longer valid (Device::destroy, or a loss whose work is \
                 still draining): wgpu refuses new work on it"
                    .into(),
                true,
            );
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
        let _ = self.poll_device(wgpu::PollType::Poll);
        match self.confirm_alive() {
            Err(lost) => lost,
            Ok(()) => error,
        }
    }

    /// Runs `hook` once the loss is recorded (at once if it is); see
    /// [`LostState::on_lost`]. (The browser has no polling thread to stop.)
    #[cfg(native)]
    pub(crate) fn on_lost(&self, hook: impl FnOnce() + Send + 'static) {
        self.inner.lost.on_lost(hook);
    }

    /// `future`, resolving with [`Error::DeviceLost`] instead if the loss is recorded
    /// first: how every asynchronous call of vramkit's hears of a loss whose callbacks
    /// wgpu never runs (module docs).
    pub(crate) fn or_lost<F, T>(&self, future: F) -> OrLost<F>
    where
        F: Future<Output = Result<T>>,
    {
        OrLost {
            gpu: self.clone(),
            future: Box::pin(future),
            key: None,
        }
    }

    pub(super) fn lost_error(&self) -> Error {
        Error::DeviceLost {
            adapter: self.inner.info.name.clone(),
            reason: self.inner.lost.reason.lock().text.clone(),
        }
    }
}

/// The future of [`Gpu::or_lost`].
pub(crate) struct OrLost<F> {
    gpu: Gpu,
    future: Pin<Box<F>>,
    /// Where its waker is filed with the lost state, while it is.
    key: Option<u64>,
}

impl<F> Drop for OrLost<F> {
    fn drop(&mut self) {
        if let Some(key) = self.key.take() {
            self.gpu.inner.lost.wakers.lock().remove(&key);
        }
    }
}

impl<F, T> Future for OrLost<F>
where
    F: Future<Output = Result<T>>,
{
    type Output = Result<T>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = &mut *self;
        let state = &this.gpu.inner.lost;
        if state.is_lost() {
            return Poll::Ready(Err(this.gpu.lost_error()));
        }
        if let Poll::Ready(out) = this.future.as_mut().poll(cx) {
            if let Some(key) = this.key.take() {
                state.wakers.lock().remove(&key);
            }
            return Poll::Ready(out);
        }
        {
            let mut wakers = state.wakers.lock();
            let key = *this
                .key
                .get_or_insert_with(|| state.next_key.fetch_add(1, Ordering::Relaxed));
            match wakers.get(&key) {
                Some(w) if w.will_wake(cx.waker()) => {}
                _ => {
                    wakers.insert(key, cx.waker().clone());
                }
            }
        }
        // The loss may have been recorded (and the wakers drained) before the waker was
        // filed.
        if state.is_lost() {
            return Poll::Ready(Err(this.gpu.lost_error()));
        }
        Poll::Pending
    }
}
