//! `Movable`, the handle of an allocation the tiers may move, and `Resident`, the guard
//! that pins a set of them on the device while GPU work is recorded on them.

use std::marker::PhantomData;
use std::sync::Arc;

use super::{Place, TierShared};
use crate::arena::{Allocation, Elements};
use crate::{Error, Result};

/// Which tier a movable allocation is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// In device memory, an arena allocation.
    Device,
    /// In host memory.
    Host,
    /// Being copied between tiers or blocks right now.
    Moving,
    /// Its bytes were on a device that was lost and did not come back
    /// ([`crate::Runtime::recover`]): its next use fails with
    /// [`Error::DeviceLost`](crate::Error::DeviceLost).
    Lost,
}

/// An allocation the [`Tiers`](super::Tiers) may move between uses: to host memory under
/// pressure, back on [`make_resident`](super::Tiers::make_resident), to another block when
/// defragmenting. Dropping it frees its bytes in whichever tier holds them.
pub struct Movable {
    pub(super) tiers: Arc<TierShared>,
    pub(super) slot: u32,
    pub(super) size: u64,
    pub(super) id: MovableId,
}

/// Names one [`Movable`] for its whole life (never reused), as reports list them
/// ([`PassReport::moved`](super::PassReport::moved)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MovableId(u64);

impl MovableId {
    pub(super) fn next() -> MovableId {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
        MovableId(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

impl Movable {
    /// Its identity, for matching it in reports ([`MovableId`]).
    pub fn id(&self) -> MovableId {
        self.id
    }

    /// Usable bytes (the request rounded up to 4).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Where its bytes are now (another thread may move them right after).
    pub fn tier(&self) -> Tier {
        let mut st = self.tiers.state.lock();
        match st.entry(self.slot).map(|e| &e.place) {
            Some(Place::Device(_)) => Tier::Device,
            Some(Place::Host(_)) => Tier::Host,
            Some(Place::Lost) => Tier::Lost,
            _ => Tier::Moving,
        }
    }

    /// The label given at allocation.
    pub fn label(&self) -> String {
        let mut st = self.tiers.state.lock();
        st.entry(self.slot)
            .map(|e| e.label.to_string())
            .unwrap_or_default()
    }

    /// Registers how its bytes come back after a device loss
    /// ([`crate::Runtime::recover`]) when they are not in the host tier then: `restore`
    /// gets a buffer of the movable's size to fill (reload weights from a file, recompute
    /// a table). Without one, a movable that was on the lost device is lost: its next use
    /// fails with [`Error::DeviceLost`](crate::Error::DeviceLost). Replaces an earlier
    /// one.
    ///
    /// ```no_run
    /// # let rt = vramkit::Runtime::headless()?;
    /// # let tiers = vramkit::tier::Tiers::new(rt.arena(), Default::default())?;
    /// let table: Vec<f32> = (0..1024).map(|i| (i as f32).sqrt()).collect();
    /// let m = tiers.alloc(4096, "sqrt table")?;
    /// // ... upload `table` into it ...
    /// m.set_restore(move |bytes: &mut [u8]| {
    ///     bytes.copy_from_slice(bytemuck::cast_slice(&table));
    ///     Ok(())
    /// });
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn set_restore(&self, restore: impl Fn(&mut [u8]) -> Result<()> + Send + Sync + 'static) {
        let mut st = self.tiers.state.lock();
        if let Some(e) = st.entry(self.slot) {
            e.restore = Some(Arc::new(restore));
        }
    }

    /// Sets the eviction priority: under pressure, lower priorities go to the host first
    /// (least recently used first within one priority). The default is 0.
    pub fn set_priority(&self, priority: u8) {
        let mut st = self.tiers.state.lock();
        if let Some(e) = st.entry(self.slot) {
            e.priority = priority;
        }
    }
}

impl std::fmt::Debug for Movable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Movable")
            .field("label", &self.label())
            .field("size", &self.size)
            .field("tier", &self.tier())
            .finish()
    }
}

impl Drop for Movable {
    fn drop(&mut self) {
        self.tiers.drop_entry(self.slot);
    }
}

/// A set of movable allocations pinned on the device, from
/// [`Tiers::make_resident`](super::Tiers::make_resident). [`get`](Self::get) and
/// [`elements`](Self::elements) give their current allocations for kernels, copies and
/// bind groups.
///
/// Drop it only after the work recorded on those allocations is **submitted** (vramkit's
/// batches borrow them until they submit, so an earlier drop does not compile). After the
/// drop the allocations stay in place until the GPU has finished that work.
pub struct Resident<'a> {
    tiers: Arc<TierShared>,
    held: Vec<(u32, Arc<Allocation>)>,
    _handles: PhantomData<&'a Movable>,
}

impl<'a> Resident<'a> {
    pub(super) fn new(tiers: Arc<TierShared>, held: Vec<(u32, Arc<Allocation>)>) -> Self {
        Resident {
            tiers,
            held,
            _handles: PhantomData,
        }
    }

    /// The device allocation of `m`, which must be one of the handles made resident.
    pub fn get(&self, m: &Movable) -> Result<&Allocation> {
        let found = Arc::ptr_eq(&m.tiers, &self.tiers)
            .then(|| self.held.iter().find(|(slot, _)| *slot == m.slot))
            .flatten();
        match found {
            Some((_, a)) => Ok(a),
            None => Err(Error::misuse(
                crate::Misuse::Foreign,
                format!(
                    "'{}' is not one of the allocations this guard made resident",
                    m.label()
                ),
                "pass it to the make_resident call whose guard you use",
            )),
        }
    }

    /// The allocation of `m` as whole elements of `T`, for the typed kernels and transfers
    /// (as many as its bytes hold).
    pub fn elements<T: bytemuck::Pod>(&self, m: &Movable) -> Result<Elements<'_, T>> {
        let a = self.get(m)?;
        let elem = std::mem::size_of::<T>() as u64;
        let len = a.size().checked_div(elem).unwrap_or(0);
        Elements::of(a, len)
    }

    /// How many distinct allocations it pins.
    pub fn len(&self) -> usize {
        self.held.len()
    }

    /// True when it pins nothing.
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }
}

impl Drop for Resident<'_> {
    fn drop(&mut self) {
        self.tiers.unpin(self.held.iter().map(|(slot, _)| *slot));
    }
}

impl std::fmt::Debug for Resident<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resident")
            .field("allocations", &self.held.len())
            .finish()
    }
}
