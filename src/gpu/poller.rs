//! A background thread that polls the device while asynchronous work is pending, so its
//! futures resolve without the caller (or any other thread) driving wgpu.
//!
//! In the browser there is no thread and no need for one: WebGPU settles map and
//! work-done callbacks on the page's event loop by itself, so the poller there is a
//! counter with nothing behind it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::{Condvar, Mutex};

use crate::{Error, Gpu, Result};

struct Shared {
    /// Transfers whose map callback has not run yet.
    pending: Mutex<usize>,
    wake: Condvar,
    stop: AtomicBool,
}

/// Owns the polling thread; dropping it stops the thread (after the poll in progress).
pub(crate) struct Poller {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// One pending transfer. [`Pending::done`] runs when its callback fires (from inside the
/// poll), or the handle drops with a callback wgpu dropped unrun (a lost device), so the
/// thread sleeps again once nothing is left.
pub(crate) struct Pending(Arc<Shared>);

impl Pending {
    pub(crate) fn done(self) {}
}

impl Drop for Pending {
    fn drop(&mut self) {
        let mut p = self.0.pending.lock();
        *p = p.saturating_sub(1);
    }
}

impl Poller {
    pub(crate) fn new(gpu: &Gpu) -> Poller {
        let shared = Arc::new(Shared {
            pending: Mutex::new(0),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        #[cfg(target_arch = "wasm32")]
        let thread = {
            let _ = gpu;
            None
        };
        #[cfg(not(target_arch = "wasm32"))]
        let thread = Self::spawn(gpu.device().clone(), shared.clone());
        Poller { shared, thread }
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn spawn(device: wgpu::Device, thread_shared: Arc<Shared>) -> Option<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("vramkit-poll".into())
            .spawn(move || loop {
                {
                    let mut p = thread_shared.pending.lock();
                    while *p == 0 && !thread_shared.stop.load(Ordering::Acquire) {
                        thread_shared.wake.wait(&mut p);
                    }
                }
                if thread_shared.stop.load(Ordering::Acquire) {
                    return;
                }
                // Blocks until the work submitted so far is done; map callbacks run inside.
                // A poll error means a lost device: the callbacks then report failure, and
                // the loop goes on until nothing is pending.
                if device.poll(wgpu::PollType::wait_indefinitely()).is_err() {
                    std::thread::yield_now();
                }
            })
            .ok()
    }

    /// Registers a transfer just submitted (its map callback registered) and wakes the
    /// thread.
    pub(crate) fn begin(&self) -> Pending {
        *self.shared.pending.lock() += 1;
        self.shared.wake.notify_one();
        Pending(self.shared.clone())
    }

    /// False when the thread could not be spawned; callers then poll themselves. Always
    /// true in the browser, whose event loop does the polling.
    pub(crate) fn running(&self) -> bool {
        cfg!(target_arch = "wasm32") || self.thread.is_some()
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A [`Poller`] started on first use and restarted if its thread could not be spawned:
/// one per device (`Gpu::poller`), for every asynchronous call on it.
#[derive(Default)]
pub(crate) struct LazyPoller(Mutex<Option<Arc<Poller>>>);

impl LazyPoller {
    /// The running poller, started now if needed; an error if no thread can be spawned.
    pub(crate) fn get(&self, gpu: &Gpu) -> Result<Arc<Poller>> {
        let mut p = self.0.lock();
        let poller = match p.as_ref() {
            Some(poller) if poller.running() => poller.clone(),
            _ => {
                let poller = Arc::new(Poller::new(gpu));
                *p = Some(poller.clone());
                poller
            }
        };
        if poller.running() {
            Ok(poller)
        } else {
            Err(Error::Device {
                during: "starting the polling thread for asynchronous transfers".into(),
                message: "the thread could not be spawned".into(),
            })
        }
    }
}
