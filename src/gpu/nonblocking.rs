//! The calls for places where nothing may block: the browser's page (wasm32 + WebGPU),
//! or an async task natively.
//!
//! How it works: a wait is a future on the device's tracker of work done
//! (`work_done.rs`): an epoch filed with `on_submitted_work_done`, resolved by its
//! callback. In the browser WebGPU runs that callback on the page's event loop once the
//! page yields, so awaiting is all it takes; natively the device's poller thread
//! (`poller.rs`) drives wgpu while such a future is pending, so the future resolves on any
//! executor.
//!
//! Promises:
//! - every blocking call has an `_async` twin that resolves to the same result (opening a
//!   device, waiting for the GPU, downloads, and above this module the runtime's and the
//!   virtual textures' waits);
//! - in the browser a blocking call that would wait for the GPU returns
//!   [`Error::WouldBlock`] naming its twin, having changed nothing, instead of hanging or
//!   trapping the page;
//! - WebGPU reports validation and out-of-memory errors late, after the page yields
//!   (`gpu/deferred.rs`): a call returns the report of an earlier call, and
//!   [`Gpu::errors_async`] waits for all of them.

use std::future::Future;
use std::sync::Arc;

use super::poller::Poller;
use super::{Gpu, GpuOptions};
use crate::{Error, Result};

/// [`Error::WouldBlock`] in the browser, where `call` would wait for the GPU; nothing
/// natively.
#[inline]
pub(crate) fn would_block(call: &str, instead: &str) -> Result<()> {
    if cfg!(web) {
        return Err(Error::WouldBlock {
            call: call.into(),
            instead: instead.into(),
        });
    }
    Ok(())
}

impl Gpu {
    /// [`Gpu::headless`] without blocking: what a browser page calls (there it opens the
    /// page's WebGPU adapter; `VRAMKIT_BACKEND` and `VRAMKIT_ADAPTER` apply natively).
    ///
    /// ```no_run
    /// # async fn page() -> vramkit::Result<()> {
    /// let gpu = vramkit::Gpu::headless_async().await?;
    /// println!("{}", gpu.describe());
    /// # Ok(()) }
    /// ```
    pub async fn headless_async() -> Result<Gpu> {
        Self::open_async(&GpuOptions::from_env()?).await
    }

    /// [`Gpu::headless_with`] without blocking.
    pub async fn open_async(options: &GpuOptions) -> Result<Gpu> {
        Self::open(options).await
    }

    /// [`Gpu::wait_idle`] without blocking: resolves once all work submitted before the
    /// call is done, or with an error once the device is lost.
    ///
    /// ```no_run
    /// # async fn page(gpu: &vramkit::Gpu) -> vramkit::Result<()> {
    /// gpu.wait_idle_async().await?; // every epoch filed before is done
    /// # Ok(()) }
    /// ```
    pub async fn wait_idle_async(&self) -> Result<()> {
        self.check_alive()?;
        let done = self.driven_work_done(self.poller()?);
        // A callback filed while nothing is in flight waits for the next submission
        // (`work_done.rs`): give it one.
        self.submit([]);
        done.await
    }

    /// The device's polling thread, started on first use (`poller.rs`): one per device,
    /// for these futures and the transfers' asynchronous calls alike. Taken before the
    /// work it will drive, so that a thread that cannot start fails the call first.
    pub(crate) fn poller(&self) -> Result<Arc<Poller>> {
        self.inner.poller.get(self)
    }

    /// A future that resolves once the work submitted so far is done (an epoch of
    /// `work_done.rs`), with `poller` driving the device until then.
    pub(crate) fn driven_work_done(
        &self,
        poller: Arc<Poller>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let pending = poller.begin();
        let epoch = self.work_epoch_then(move || pending.done());
        let done = self.epoch_done(epoch);
        self.or_lost(async move {
            // Keeps the polling thread alive until the epoch is done.
            let _poller = poller;
            done.await
        })
    }

    /// Waits until wgpu has answered every error scope opened so far and returns the
    /// oldest error it reported that no call has returned yet. In the browser WebGPU
    /// answers after the page yields, so a bad call's error comes back from a later call
    /// or from this one (`gpu/deferred.rs`); natively every call returns its own error
    /// and this only checks that the device is alive.
    ///
    /// ```no_run
    /// # async fn page(rt: &vramkit::Runtime) -> vramkit::Result<()> {
    /// rt.gpu().errors_async().await?; // all earlier calls were valid
    /// # Ok(()) }
    /// ```
    pub async fn errors_async(&self) -> Result<()> {
        #[cfg(web)]
        if let Some(e) = crate::gpu::scope::deferred::settled(&self.inner.device).await {
            return Err(e);
        }
        self.check_alive()
    }
}
