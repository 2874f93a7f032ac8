//! One lock for the process around the creation and the last release of devices.
//!
//! NVIDIA's Vulkan driver is not safe against instances and devices being created and
//! destroyed on several threads at once: parallel tests that each opened a second device
//! hung in the driver (3 of 8 runs of `tests/it/misuse.rs` with four test threads on an H100,
//! every hung thread parked in a priority-inheritance mutex, which neither Rust's nor
//! parking_lot's locks use), and other projects saw crashes (kvark/blade#336) and
//! teardown deadlocks (gfx-rs/wgpu#8365) on the same driver. vramkit therefore opens
//! devices ([`crate::Gpu::headless`]) and drops the last handle of a [`crate::Gpu`] under
//! [`LifecycleGuard`]; code that creates wgpu devices itself next to vramkit can take the
//! same lock with [`crate::Gpu::lifecycle_lock`].
//!
//! It is a mitigation, not a proof: wgpu destroys a device when its last resource goes
//! (a buffer dropped after the `Gpu`), which can still happen outside the lock.
//!
//! # The reaper
//! The last handle may drop anywhere, inside a wgpu callback too. Where this thread holds
//! a queue lock (a callback running inside a submit or a queued write), taking the
//! lifecycle lock would break the lock order (`src/sync/rank.rs`: it ranks below
//! everything), and tearing the device down there would join its polling thread, which
//! may be waiting for that very queue lock. Such a last handle goes to the *reaper*
//! instead ([`reap`]): one thread for the process, started on first use, that drops what
//! it is sent under the lifecycle lock. In the browser (one thread, no locks to order)
//! it drops at once.

use crate::sync::rank::{Mutex, MutexGuard, LIFECYCLE as RANK};

static LIFECYCLE: Mutex<()> = Mutex::new(RANK, ());

/// Held while a device is created or its last `Gpu` handle is dropped; see the module
/// docs of `gpu::lifecycle`. Released on drop.
#[must_use = "the lock is released when the guard drops"]
pub struct LifecycleGuard(#[allow(dead_code)] MutexGuard<'static, ()>);

impl std::fmt::Debug for LifecycleGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LifecycleGuard")
    }
}

/// Takes the process-wide device lifecycle lock.
pub(crate) fn lock() -> LifecycleGuard {
    LifecycleGuard(LIFECYCLE.lock())
}

/// Drops `doomed` under the lifecycle lock on the reaper thread (module docs), or here,
/// under the lock, where no thread can be started or in the browser.
pub(crate) fn reap(doomed: Box<dyn Send>) {
    #[cfg(native)]
    {
        use std::sync::mpsc::{channel, Sender};
        static REAPER: Mutex<Option<Sender<Box<dyn Send>>>> =
            Mutex::new(crate::sync::rank::REAPER, None);
        let mut reaper = REAPER.lock();
        if reaper.is_none() {
            let (tx, rx) = channel::<Box<dyn Send>>();
            let started = std::thread::Builder::new()
                .name("vramkit-reaper".into())
                .spawn(move || {
                    for doomed in rx {
                        let _guard = lock();
                        drop(doomed);
                    }
                });
            if started.is_ok() {
                *reaper = Some(tx);
            }
        }
        let doomed = match reaper.as_ref() {
            Some(tx) => match tx.send(doomed) {
                Ok(()) => return,
                Err(unsent) => unsent.0,
            },
            None => doomed,
        };
        drop(reaper);
        log::warn!("no reaper thread: the last handle of a device drops where it was let go");
        drop(doomed);
    }
    #[cfg(web)]
    drop(doomed);
}
