//! One lock for the process around the creation and the last release of devices.
//!
//! NVIDIA's Vulkan driver is not safe against instances and devices being created and
//! destroyed on several threads at once: parallel tests that each opened a second device
//! hung in the driver (3 of 8 runs of `tests/misuse.rs` with four test threads on an H100,
//! every hung thread parked in a priority-inheritance mutex, which neither Rust's nor
//! parking_lot's locks use), and other projects saw crashes (kvark/blade#336) and
//! teardown deadlocks (gfx-rs/wgpu#8365) on the same driver. vramkit therefore opens
//! devices ([`crate::Gpu::headless`]) and drops the last handle of a [`crate::Gpu`] under
//! [`LifecycleGuard`]; code that creates wgpu devices itself next to vramkit can take the
//! same lock with [`crate::Gpu::lifecycle_lock`].
//!
//! It is a mitigation, not a proof: wgpu destroys a device when its last resource goes
//! (a buffer dropped after the `Gpu`), which can still happen outside the lock.

use crate::lock_rank::{Mutex, MutexGuard, LIFECYCLE as RANK};

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
