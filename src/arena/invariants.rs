//! The arena's invariants, and their checker ([`State::check_invariants`]), as VMA
//! validates each of its structures: what the state promises between any two operations,
//! checked after every operation by the property tests and, with the `heavy-checks`
//! feature, on every acquisition of the arena's lock ([`StateLock`]).
//!
//! # Invariants
//! 1. Each pool's block set keeps its own invariants (`alloc/block_set.rs`).
//! 2. Every record holding a range lies in a live block of its pool, and holds that
//!    block's buffer.
//! 3. The counters are what the records say: `allocated` is the bytes of the live
//!    records, `pending` of those freed and waiting for the GPU, `cached` of those in the
//!    ready cache; `allocations - frees` is the number of live records.
//! 4. Every pending record is in exactly one batch (open, or sealed), and every slot in a
//!    batch names a pending record; sealed epochs never go down from one batch to the
//!    next, and `sealed_bytes` is at most `pending`.
//! 5. Every slot in the ready cache names a ready record of the list's pool and request
//!    size, once; every ready record is in the cache.
//! 6. Each block's live ranges are the records holding a range in it plus the planned
//!    loop's spanning range, if it is a loop block.
//! 7. The labels' totals add up to the live records' (count and bytes).
//! 8. Peaks are at least the current values.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::allocation::Held;
use super::state::{Phase, State};
use crate::sync::biased::MutexGuard;

/// The arena's lock around its state. With the `heavy-checks` feature every acquisition
/// first checks the state's invariants (module docs), so each change is checked by the
/// next thread to take the lock, as VMA validates after every change under its
/// heavy-assert switch; a broken invariant panics naming it.
pub(crate) struct StateLock(crate::sync::biased::Mutex<State>);

impl StateLock {
    pub fn new(state: State) -> StateLock {
        StateLock(crate::sync::biased::Mutex::new(state))
    }

    #[inline(always)]
    pub fn lock(&self) -> MutexGuard<'_, State> {
        let st = self.0.lock();
        #[cfg(feature = "heavy-checks")]
        heavy_check(&st);
        st
    }

    #[inline(always)]
    pub fn try_lock(&self) -> Option<MutexGuard<'_, State>> {
        let st = self.0.try_lock()?;
        #[cfg(feature = "heavy-checks")]
        heavy_check(&st);
        Some(st)
    }

    /// The raw lock (for its counters).
    ///
    /// # Safety
    /// As `lock_api::Mutex::raw`: the caller must not unlock it.
    pub unsafe fn raw(&self) -> &crate::sync::biased::Raw {
        // SAFETY: forwarded to the caller.
        unsafe { self.0.raw() }
    }
}

#[cfg(feature = "heavy-checks")]
#[cold]
fn heavy_check(st: &State) {
    if let Err(broken) = st.check_invariants() {
        panic!("arena invariant {broken} (heavy-checks)");
    }
}

impl State {
    /// Checks every invariant in the module docs; returns a description of the first one
    /// broken. Linear in the records and blocks: for tests and the `heavy-checks` feature.
    pub fn check_invariants(&self) -> Result<(), String> {
        for (i, p) in self.pools.iter().enumerate() {
            p.set
                .check_invariants()
                .map_err(|e| format!("1: pool {i} ('{}'): {e}", p.name))?;
        }
        let mut n = [0u64; 3];
        let mut bytes = [0u64; 3];
        let mut ranges_in: HashMap<(usize, u32), usize> = HashMap::new();
        let mut label_totals: HashMap<u32, (u64, u64)> = HashMap::new();
        for (slot, r) in self.live.records() {
            let phase = match r.phase {
                Phase::Live => 0,
                Phase::Pending => 1,
                Phase::Ready => 2,
            };
            n[phase] += 1;
            bytes[phase] += r.placed_size();
            if r.phase == Phase::Live {
                let t = label_totals.entry(r.label).or_default();
                t.0 += 1;
                t.1 += r.placed_size();
            }
            if let Held::Range(placed) = &r.held {
                let pool = self.pools.get(r.pool).ok_or_else(|| {
                    format!(
                        "2: slot {slot} names pool {} of {}",
                        r.pool,
                        self.pools.len()
                    )
                })?;
                match pool.buffer(placed.block) {
                    Some(b) if Arc::ptr_eq(b, &r.buffer) => {}
                    Some(_) => {
                        return Err(format!(
                            "2: slot {slot} holds another buffer than its block {}'s",
                            placed.block.0
                        ))
                    }
                    None => {
                        return Err(format!(
                            "2: slot {slot} lies in block {} of pool {}, not live",
                            placed.block.0, r.pool
                        ))
                    }
                }
                *ranges_in.entry((r.pool, placed.block.0)).or_default() += 1;
            }
        }
        let c = &self.counters;
        if c.allocated != bytes[0] || c.pending != bytes[1] || c.cached != bytes[2] {
            return Err(format!(
                "3: counters say {} allocated, {} pending, {} cached; the records {}, {}, {}",
                c.allocated, c.pending, c.cached, bytes[0], bytes[1], bytes[2]
            ));
        }
        if self.live_allocations() as u64 != n[0] {
            return Err(format!(
                "3: {} allocations less {} frees, but {} live records",
                c.allocations, c.frees, n[0]
            ));
        }
        let mut batched = HashSet::new();
        let batches = std::iter::once(&self.open).chain(self.sealed.iter().map(|(_, s)| s));
        for slot in batches.flatten() {
            match self.live.get(*slot) {
                Some(r) if r.phase == Phase::Pending => {}
                _ => return Err(format!("4: slot {slot} in a batch holds no pending record")),
            }
            if !batched.insert(*slot) {
                return Err(format!("4: slot {slot} in two batches"));
            }
        }
        if batched.len() as u64 != n[1] {
            return Err(format!(
                "4: {} pending records, {} in batches",
                n[1],
                batched.len()
            ));
        }
        if self
            .sealed
            .iter()
            .zip(self.sealed.iter().skip(1))
            .any(|(a, b)| a.0 > b.0)
        {
            return Err("4: sealed epochs go down".into());
        }
        if self.sealed_bytes > c.pending {
            return Err(format!(
                "4: {} sealed bytes of {} pending",
                self.sealed_bytes, c.pending
            ));
        }
        let mut cached = HashSet::new();
        for list in self.ready.lists() {
            for slot in &list.slots {
                match self.live.get(*slot) {
                    Some(r)
                        if r.phase == Phase::Ready
                            && r.pool == list.key.0
                            && r.class == Some(list.key.1) => {}
                    _ => {
                        return Err(format!(
                            "5: slot {slot} in ready list {:?} holds no ready record of it",
                            list.key
                        ))
                    }
                }
                if !cached.insert(*slot) {
                    return Err(format!("5: slot {slot} cached twice"));
                }
            }
        }
        if cached.len() as u64 != n[2] {
            return Err(format!(
                "5: {} ready records, {} cached",
                n[2],
                cached.len()
            ));
        }
        for lb in &self.loop_blocks {
            *ranges_in.entry((lb.pool, lb.block.0)).or_default() += 1;
        }
        for (i, p) in self.pools.iter().enumerate() {
            for (id, _, _, live) in p.set.blocks() {
                let held = ranges_in.remove(&(i, id.0)).unwrap_or(0);
                if held != live {
                    return Err(format!(
                        "6: block {} of pool {i} holds {live} ranges, records and loops name {held}",
                        id.0
                    ));
                }
            }
        }
        for (i, (name, l)) in self.label_stats.iter().enumerate() {
            let (count, b) = label_totals.remove(&(i as u32)).unwrap_or((0, 0));
            if l.count != count || l.bytes != b {
                return Err(format!(
                    "7: label '{name}' counts {} allocations of {} bytes; the records {count}, {b}",
                    l.count, l.bytes
                ));
            }
        }
        if let Some((label, _)) = label_totals.into_iter().next() {
            return Err(format!(
                "7: live records name label {label}, which has no totals"
            ));
        }
        if c.peak_allocated < c.allocated || c.peak_active < c.allocated + c.pending {
            return Err(format!(
                "8: peaks {} / {} below {} allocated, {} pending",
                c.peak_allocated, c.peak_active, c.allocated, c.pending
            ));
        }
        Ok(())
    }
}
