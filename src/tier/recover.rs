//! Recovery: the tiers move onto the arena of a runtime that recovered from a lost device
//! ([`crate::Runtime::recover`]).
//!
//! # What comes back
//! Every movable keeps its handle, its label, its priority and its [`MovableId`]. Its bytes
//! come back from, in this order:
//! 1. **its host copy**: a movable evicted to the host tier before the loss. On Vulkan the
//!    host tier is host memory vramkit maps itself, which a lost device does not take
//!    away; the bytes are copied into the new device's host tier. (Elsewhere the host tier
//!    is wgpu buffers of the lost device, whose bytes cannot be read any more.)
//! 2. **its restore function** ([`Movable::set_restore`]), called with a buffer of the
//!    movable's size to fill: what a program that can recompute or reload its data
//!    registers (weights from a file, a texture from its source).
//!
//! A movable that was on the device with no restore function is *lost*: its next
//! [`Tiers::make_resident`](super::Tiers::make_resident) fails with
//! [`Error::DeviceLost`], never with wrong bytes; dropping it is fine. The movables that
//! came back are in the new host tier, and those that were on the device go back to it
//! ([`Tiers::prefetch`](super::Tiers::prefetch) order), as far as the budget allows.
//!
//! # How
//! Three steps, so that no user code runs under the tiers' lock: under the lock every
//! entry is marked moving and every movable with a way back gets a range of the new host
//! tier; without it, in parallel, the bytes of the lost device's host tier are copied
//! into those ranges and the restore functions write straight into them (where the host
//! tier is wgpu buffers, into a buffer that is queued as a write); under the lock again
//! the entries point at them. Threads that touch a movable meanwhile wait, as they do for
//! an eviction. The lost device's host tier is dropped after the copies.

use std::sync::Arc;

use super::host::HostTier;
use super::{Entry, MovableId, Place, TierShared};
use crate::{Arena, Error, Result};

/// What a restore function does: fill the buffer (the movable's size) with its bytes.
pub(crate) type RestoreFn = Arc<dyn Fn(&mut [u8]) -> Result<()> + Send + Sync>;

/// What the tiers' recovery did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MovablesRecovered {
    /// Movables whose bytes came back (from the host tier or a restore function).
    pub restored: Vec<MovableId>,
    /// Their bytes.
    pub bytes_restored: u64,
    /// Movables whose bytes were on the lost device, with no way back: their next use
    /// fails with [`Error::DeviceLost`].
    pub lost: Vec<MovableId>,
    /// Their bytes.
    pub bytes_lost: u64,
    /// Movables whose restore function failed (also in `lost`), with its error.
    pub failed: Vec<(MovableId, String)>,
}

/// Where one movable's bytes come back from.
enum Source {
    /// Its range of the lost device's host tier.
    OldHost(super::HostRange),
    Restore(RestoreFn),
    Nothing,
}

struct Pending {
    slot: u32,
    id: MovableId,
    size: u64,
    was_on_device: bool,
    source: Source,
    /// Its range of the new host tier, once it has one.
    to: Option<super::HostRange>,
    /// Why its restore function failed.
    failed: Option<String>,
}

impl TierShared {
    /// Moves the tiers onto `arena` (a new device's), bringing back what can come back
    /// (module docs). The arena's pressure hook is this `TierShared` from then on.
    pub(crate) fn recover_onto(self: &Arc<Self>, arena: &Arena) -> Result<MovablesRecovered> {
        let gpu = arena.gpu().clone();
        let weak: std::sync::Weak<TierShared> = Arc::downgrade(self);
        arena.set_relief(weak)?;
        // 1. Under the lock: every entry moving, the device and the host tier swapped,
        //    and a range of the new host tier for every movable that has a way back.
        let (mut pending, old_host, old_device) = {
            let mut st = self.state.lock();
            let budget = st.host.budget();
            let old_host = std::mem::replace(&mut st.host, HostTier::new(&gpu, budget));
            let old_device = {
                let _rank = crate::sync::rank::Held::take(crate::sync::rank::TIER_DEVICE);
                std::mem::replace(&mut *self.on.write(), (arena.clone(), gpu.clone()))
            };
            let mut pending = Vec::new();
            for slot in 0..st.entries.len() as u32 {
                let Some(e) = st.entry(slot) else { continue };
                let was_on_device = matches!(e.place, Place::Device(_));
                let place = std::mem::replace(&mut e.place, Place::Moving);
                // Epochs of the lost device's tracker mean nothing to the new one.
                e.busy_until = 0;
                let restore = || e.restore.clone().map_or(Source::Nothing, Source::Restore);
                let source = match place {
                    Place::Host(range) if old_host.readable(&range) => Source::OldHost(range),
                    _ => restore(),
                };
                let (size, label, id) = (e.size, e.label.clone(), e.id);
                let to = match source {
                    Source::Nothing => None,
                    _ => st.host.alloc(size, &label).ok(),
                };
                pending.push(Pending {
                    slot,
                    id,
                    size,
                    was_on_device,
                    source,
                    to,
                    failed: None,
                });
            }
            (pending, old_host, old_device)
        };
        // 2. Without it, in parallel: host copies out of the lost device's host tier, and
        //    the restore functions, straight into the new ranges where they are mapped.
        {
            use rayon::prelude::*;
            let old = &old_host;
            pending.par_iter_mut().for_each(|p| {
                let Some(to) = &p.to else { return };
                let filled = match &p.source {
                    Source::OldHost(from) => {
                        old.copy_into(from, &gpu, to);
                        Ok(())
                    }
                    Source::Restore(restore) => super::host::fill_with(&gpu, to, |b| restore(b)),
                    Source::Nothing => Ok(()),
                };
                if let Err(e) = filled {
                    p.failed = Some(e.to_string());
                }
            });
        }
        // The lost device's host tier and handles go without a lock held.
        drop((old_host, old_device));
        // 3. Under the lock again: the entries point at what came back.
        let mut report = MovablesRecovered::default();
        let mut back_on_device = Vec::new();
        {
            let mut st = self.state.lock();
            for p in pending {
                let generation = st.new_generation();
                let to = match (p.to, p.failed) {
                    (Some(to), None) => Some(to),
                    (to, failed) => {
                        if let Some(to) = to {
                            st.host.free(to);
                        }
                        if let Some(why) = failed {
                            report.failed.push((p.id, why));
                        }
                        None
                    }
                };
                let Some(e) = st.entry(p.slot) else { continue };
                e.generation = generation;
                match to {
                    Some(range) => {
                        e.place = Place::Host(range);
                        report.restored.push(p.id);
                        report.bytes_restored += p.size;
                        if p.was_on_device {
                            back_on_device.push(p.slot);
                        }
                    }
                    None => {
                        e.place = Place::Lost;
                        report.lost.push(p.id);
                        report.bytes_lost += p.size;
                    }
                }
            }
            // Handles dropped while their entries were moving are freed now.
            let dropped: Vec<u32> = (0..st.entries.len() as u32)
                .filter(|&s| st.get(s).is_some_and(|e: &Entry| e.dropped))
                .collect();
            for slot in dropped {
                if let Some(Place::Host(range)) = st.remove(slot).map(|e| e.place) {
                    st.host.free(range);
                }
            }
            self.moved.notify_all();
            self.unlock(st);
        }
        // What was on the device goes back to it, as far as the budget allows.
        if !back_on_device.is_empty() {
            if let Err(e) = self.restore_slots(&back_on_device) {
                log::warn!("recovery: movables stay in host memory until used: {e}");
            }
        }
        Ok(report)
    }
}

/// The error of a movable whose bytes were lost with a device.
pub(crate) fn lost_movable(label: &str, adapter: &str) -> Error {
    Error::DeviceLost {
        adapter: adapter.to_string(),
        reason: format!(
            "movable '{label}' was on a device that was lost, with no host copy and no \
             restore function (Movable::set_restore), so its bytes did not come back; drop \
             it and make it again"
        ),
    }
}
