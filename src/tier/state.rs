//! The tiers' state: one entry per movable allocation (where its bytes are, its pins, its
//! in-flight mark, its generation), the host tier, and the counters.
//!
//! Everything here runs under the tiers' lock (`lock_rank::TIER`); moves copy with the
//! lock released and mark their entries [`Place::Moving`] meanwhile (`mod.rs`).
//!
//! # Invariants (checked by [`TierState::check_invariants`])
//! 1. The host tier's block set keeps its own invariants (`alloc/block_set.rs`).
//! 2. `free_slots` names exactly the empty entry slots, each once.
//! 3. Generations are unique among entries and no greater than `next_generation`.
//! 4. A pinned entry is on the device or being moved (a restore pins before it copies);
//!    a dropped handle's entry is being moved (its mover frees it).
//! 5. An entry on the host holds a range of exactly its size in a live host block; the
//!    host ranges of entries in a block are at most the block's live ranges, and exactly
//!    them while no entry is being moved (a move holds its range outside any entry).
//! 6. An entry on the device holds an allocation of at least its size.
//! 7. No entry was used later than the current tick.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::arena::{Allocation, PoolId};

use crate::sync::rank::{Mutex, MutexGuard};

use super::host::{HostRange, HostTier};

/// Where a movable's bytes are.
pub(crate) enum Place {
    Device(Arc<Allocation>),
    Host(HostRange),
    /// Being copied by a thread that holds no lock meanwhile; wait on `moved`.
    Moving,
    /// Its bytes were on a device that was lost and did not come back (`recover.rs`).
    Lost,
}

pub(crate) struct Entry {
    pub size: u64,
    pub label: Arc<str>,
    pub pool: PoolId,
    pub priority: u8,
    pub place: Place,
    /// Live [`Resident`] guards holding it.
    pub pins: u32,
    /// In flight until `done` reaches this epoch.
    pub busy_until: u64,
    /// `TierState::tick` when last made resident or created.
    pub last_use: u64,
    /// The handle was dropped while a move was under way; the mover frees it.
    pub dropped: bool,
    /// The movable's identity for users ([`super::MovableId`]): fixed for its life, never
    /// reused, unlike its slot and generation.
    pub id: super::MovableId,
    /// What brings its bytes back after a device loss, if it is not in the host tier
    /// then ([`super::Movable::set_restore`]).
    pub restore: Option<super::recover::RestoreFn>,
    /// Identity of this entry *and* its place: new whenever a slot gets a new entry or an
    /// entry a new place. Whoever decides on a snapshot (a defragmentation's plan) and
    /// acts after a wait checks it is unchanged first: a slot is reused by the next
    /// movable, and a movable evicted and restored meanwhile is somewhere else.
    pub generation: u64,
}

#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Counters {
    pub evictions: u64,
    pub restores: u64,
    pub bytes_evicted: u64,
    pub bytes_restored: u64,
    pub defrag_moves: u64,
    pub bytes_defrag_moved: u64,
    pub stall: Duration,
    pub host_full: u64,
    /// Evictions asked for by the arena's allocation path (the rest: by hand).
    pub pressure_evictions: u64,
}

pub(crate) struct TierState {
    pub entries: Vec<Option<Entry>>,
    pub(super) free_slots: Vec<u32>,
    /// The next [`Entry::generation`].
    pub(super) next_generation: u64,
    pub host: HostTier,
    pub tick: u64,
    pub counters: Counters,
}

impl Entry {
    /// On the device, unpinned, its handle alive and no GPU work in flight on it once the
    /// GPU has completed epoch `done`: the tiers may move it now.
    pub(crate) fn movable_now(&self, done: u64) -> bool {
        matches!(self.place, Place::Device(_))
            && self.pins == 0
            && !self.dropped
            && self.busy_until <= done
    }
}

impl TierState {
    /// A generation no entry had before.
    pub(super) fn new_generation(&mut self) -> u64 {
        self.next_generation += 1;
        self.next_generation
    }

    pub(super) fn insert(&mut self, mut entry: Entry) -> u32 {
        entry.generation = self.new_generation();
        match self.free_slots.pop() {
            Some(i) => {
                self.entries[i as usize] = Some(entry);
                i
            }
            None => {
                self.entries.push(Some(entry));
                (self.entries.len() - 1) as u32
            }
        }
    }

    /// Takes the entry out of `slot`. Moves `next_generation` on, as every new entry and
    /// new place does: a defragmentation that sees it unchanged knows no entry came, went
    /// or moved since it last looked.
    pub(super) fn remove(&mut self, slot: u32) -> Option<Entry> {
        let e = self.entries.get_mut(slot as usize)?.take()?;
        self.free_slots.push(slot);
        self.next_generation += 1;
        Some(e)
    }

    pub(crate) fn entry(&mut self, slot: u32) -> Option<&mut Entry> {
        self.entries.get_mut(slot as usize)?.as_mut()
    }

    pub(crate) fn get(&self, slot: u32) -> Option<&Entry> {
        self.entries.get(slot as usize)?.as_ref()
    }
}

impl TierState {
    /// Checks every invariant in the module docs; returns a description of the first one
    /// broken. Linear in the entries and host blocks: for tests and `heavy-checks`.
    pub(crate) fn check_invariants(&self) -> Result<(), String> {
        self.host
            .check_invariants()
            .map_err(|e| format!("1: host tier: {e}"))?;
        let empty: Vec<u32> = (0..self.entries.len() as u32)
            .filter(|&i| self.entries[i as usize].is_none())
            .collect();
        let mut listed = self.free_slots.clone();
        listed.sort_unstable();
        if listed != empty {
            return Err(format!("2: free slots {listed:?}, empty slots {empty:?}"));
        }
        let mut generations = std::collections::HashSet::new();
        let mut host_in: HashMap<u32, usize> = HashMap::new();
        let mut moving = false;
        for (slot, e) in self.entries.iter().enumerate() {
            let Some(e) = e else { continue };
            if e.generation > self.next_generation || !generations.insert(e.generation) {
                return Err(format!(
                    "3: slot {slot}'s generation {} repeats or is ahead",
                    e.generation
                ));
            }
            match &e.place {
                Place::Moving => moving = true,
                Place::Lost => {}
                Place::Host(range) => {
                    if e.pins > 0 || e.dropped {
                        return Err(format!("4: slot {slot} on the host is pinned or dropped"));
                    }
                    if range.placed.size != e.size || !self.host.holds(range) {
                        return Err(format!(
                            "5: slot {slot}'s host range of {} bytes (entry {}) is not in a live host block",
                            range.placed.size, e.size
                        ));
                    }
                    *host_in.entry(range.placed.block.0).or_default() += 1;
                }
                Place::Device(a) => {
                    if e.dropped {
                        return Err(format!("4: slot {slot} on the device is dropped"));
                    }
                    if a.size() < e.size {
                        return Err(format!(
                            "6: slot {slot} holds {} bytes on the device for {}",
                            a.size(),
                            e.size
                        ));
                    }
                }
            }
            if e.last_use > self.tick {
                return Err(format!(
                    "7: slot {slot} used at {} after tick {}",
                    e.last_use, self.tick
                ));
            }
        }
        for (block, live) in self.host.live_ranges() {
            let held = host_in.remove(&block).unwrap_or(0);
            if held > live || (!moving && held != live) {
                return Err(format!(
                    "5: host block {block} holds {live} ranges, entries {held} (moves under way: {moving})"
                ));
            }
        }
        if let Some((block, _)) = host_in.into_iter().next() {
            return Err(format!(
                "5: entries hold ranges in host block {block}, which is not live"
            ));
        }
        Ok(())
    }
}

/// The tiers' lock around their state. With the `heavy-checks` feature every acquisition
/// first checks the invariants (module docs); a broken one panics naming it.
pub(crate) struct TierLock(Mutex<TierState>);

impl TierLock {
    pub fn new(state: TierState) -> TierLock {
        TierLock(Mutex::new(crate::sync::rank::TIER, state))
    }

    #[inline]
    pub fn lock(&self) -> MutexGuard<'_, TierState> {
        let st = self.0.lock();
        #[cfg(feature = "heavy-checks")]
        if let Err(broken) = st.check_invariants() {
            panic!("tier invariant {broken} (heavy-checks)");
        }
        st
    }
}

#[cfg(test)]
mod tests {
    use crate::tier::{TierConfig, Tiers};
    use crate::{Arena, Gpu};

    /// The tiers' state broken on purpose fails their checker under its numbers.
    #[test]
    fn a_broken_entry_fails_the_tier_check() {
        let gpu = Gpu::headless().unwrap_or_else(|e| panic!("{e}"));
        let arena = Arena::new(&gpu, Default::default()).unwrap_or_else(|e| panic!("{e}"));
        let tiers = Tiers::new(&arena, TierConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        let a = tiers.alloc(1 << 20, "a").unwrap_or_else(|e| panic!("{e}"));
        let b = tiers.alloc(1 << 20, "b").unwrap_or_else(|e| panic!("{e}"));
        tiers.evict(&[&a]).unwrap_or_else(|e| panic!("{e}"));
        drop(tiers.alloc(4096, "freed"));
        assert_eq!(tiers.check_invariants(), Ok(()));
        type Edit = fn(&mut super::TierState);
        let breaks: [(&str, Edit, Edit); 3] = [
            (
                "2:",
                |s| s.free_slots.push(0),
                |s| {
                    s.free_slots.pop();
                },
            ),
            ("7:", |s| use_at(s, s.tick + 1), |s| use_at(s, s.tick)),
            ("4:", |s| pin_host(s, 1), |s| pin_host(s, 0)),
        ];
        // Marks every entry last used at `tick`.
        fn use_at(s: &mut super::TierState, tick: u64) {
            for e in s.entries.iter_mut().flatten() {
                e.last_use = tick;
            }
        }
        // Makes each entry on the host pinned `pins` times.
        fn pin_host(s: &mut super::TierState, pins: u32) {
            for e in s.entries.iter_mut().flatten() {
                if matches!(e.place, super::Place::Host(_)) {
                    e.pins = pins;
                }
            }
        }
        for (number, break_it, mend) in breaks {
            let mut st = tiers.shared.state.lock();
            break_it(&mut st);
            let broken = st.check_invariants().expect_err("a broken state passed");
            mend(&mut st);
            drop(st);
            assert!(
                broken.starts_with(number),
                "{number} expected, got {broken}"
            );
        }
        assert_eq!(tiers.check_invariants(), Ok(()));
        drop((a, b));
    }
}
