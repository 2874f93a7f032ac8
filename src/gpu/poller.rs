//! A background thread that polls the device while asynchronous work is pending, so its
//! futures resolve without the caller (or any other thread) driving wgpu.
//!
//! In the browser there is no thread and no need for one: WebGPU settles map and
//! work-done callbacks on the page's event loop by itself, so the poller there is a
//! counter with nothing behind it.
//!
//! # Loss and teardown
//! - Once the device's loss is recorded the thread stops polling (wgpu would run no more
//!   callbacks, and on a real loss a poll panics inside wgpu: `lost.rs`) and sleeps until
//!   it is stopped; the loss itself resolves the futures it was driving. A poll that finds
//!   the device lost records the loss.
//! - The last handle of the device may drop inside a callback this thread runs (a
//!   work-done callback owning the last allocation of an arena): the poller is then
//!   dropped on its own thread, which it detaches instead of joining (a thread cannot join
//!   itself); the thread sees the stop flag once the poll returns and ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use parking_lot::Condvar;

use crate::sync::rank::{self as lock_rank, Mutex};

#[cfg(native)]
use super::lost::LostState;
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
            pending: Mutex::new(lock_rank::POLLER_PENDING, 0),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        #[cfg(web)]
        let thread = {
            let _ = gpu;
            None
        };
        #[cfg(native)]
        let thread = {
            // A loss wakes the thread, which then sleeps until it is stopped.
            let woken = shared.clone();
            gpu.on_lost(move || {
                let _p = woken.pending.lock();
                woken.wake.notify_all();
            });
            Self::spawn(gpu.device().clone(), gpu.inner.lost.clone(), shared.clone())
        };
        Poller { shared, thread }
    }

    #[cfg(native)]
    fn spawn(
        device: wgpu::Device,
        lost: Arc<LostState>,
        thread_shared: Arc<Shared>,
    ) -> Option<JoinHandle<()>> {
        std::thread::Builder::new()
            .name("vramkit-poll".into())
            .spawn(move || loop {
                {
                    let mut p = thread_shared.pending.lock();
                    while (*p == 0 || lost.is_lost()) && !thread_shared.stop.load(Ordering::Acquire)
                    {
                        thread_shared.wake.wait(&mut p.guard);
                    }
                }
                if thread_shared.stop.load(Ordering::Acquire) {
                    return;
                }
                // Blocks until the work submitted so far is done; map callbacks run inside.
                // A poll that finds the device lost records the loss, and the loop sleeps.
                let _ = lost.poll(&device, wgpu::PollType::wait_indefinitely());
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
        cfg!(web) || self.thread.is_some()
    }
}

impl Drop for Poller {
    fn drop(&mut self) {
        {
            // Under the lock the thread sleeps under: it sees the flag or is asleep.
            let _p = self.shared.pending.lock();
            self.shared.stop.store(true, Ordering::Release);
        }
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            // Dropped inside a callback this very thread runs (module docs): detached,
            // it ends once the poll returns.
            if t.thread().id() != std::thread::current().id() {
                let _ = t.join();
            }
        }
    }
}

/// A [`Poller`] started on first use and restarted if its thread could not be spawned:
/// one per device (`Gpu::poller`), for every asynchronous call on it.
pub(crate) struct LazyPoller(Mutex<Option<Arc<Poller>>>);

impl Default for LazyPoller {
    fn default() -> Self {
        LazyPoller(Mutex::new(lock_rank::LAZY_POLLER, None))
    }
}

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
