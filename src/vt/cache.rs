//! The physical cache's slots on the CPU: which tile each slot holds, when it was last
//! sampled, and least-recently-used eviction. Pure bookkeeping; the texture lives in
//! [`super::VirtualTexture`].

use rustc_hash::FxHashMap as HashMap;

use super::layout::TileId;

/// One slot of the cache texture.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    tile: Option<TileId>,
    last_used: u64,
    pinned: bool,
}

/// Slots, the tiles in them, and the LRU order for eviction.
#[derive(Debug)]
pub(crate) struct Slots {
    slots: Vec<Slot>,
    free: Vec<u32>,
    resident: HashMap<TileId, u32>,
    /// Eviction candidates of the current frame, oldest last (popped first).
    candidates: Vec<u32>,
    candidates_frame: Option<u64>,
}

impl Slots {
    pub fn new(count: u32) -> Slots {
        Slots {
            slots: vec![Slot::default(); count as usize],
            free: (0..count).rev().collect(),
            resident: HashMap::default(),
            candidates: Vec::new(),
            candidates_frame: None,
        }
    }

    pub fn resident(&self) -> &HashMap<TileId, u32> {
        &self.resident
    }

    pub fn slot_of(&self, tile: TileId) -> Option<u32> {
        self.resident.get(&tile).copied()
    }

    /// Marks `slot` as sampled in `frame`.
    pub fn touch(&mut self, slot: u32, frame: u64) {
        if let Some(s) = self.slots.get_mut(slot as usize) {
            s.last_used = s.last_used.max(frame);
        }
    }

    /// A slot for `tile`: a free one, else the least recently used unpinned slot not
    /// sampled in the last `keep` frames (its tile is evicted and returned). `None` when
    /// every slot is pinned or recently used: the caller degrades instead of thrashing.
    pub fn place(
        &mut self,
        tile: TileId,
        frame: u64,
        keep: u64,
        pinned: bool,
    ) -> Option<(u32, Option<TileId>)> {
        if let Some(&slot) = self.resident.get(&tile) {
            self.touch(slot, frame);
            return Some((slot, None));
        }
        let (slot, evicted) = match self.free.pop() {
            Some(slot) => (slot, None),
            None => {
                let slot = self.next_victim(frame, keep)?;
                let old = self.slots[slot as usize].tile.take();
                if let Some(old) = old {
                    self.resident.remove(&old);
                }
                (slot, old)
            }
        };
        self.slots[slot as usize] = Slot {
            tile: Some(tile),
            last_used: frame,
            pinned,
        };
        self.resident.insert(tile, slot);
        Some((slot, evicted))
    }

    /// The oldest evictable slot. Candidates are sorted once per frame (touches of the
    /// frame come before its placements), so `place` costs O(1) amortised.
    fn next_victim(&mut self, frame: u64, keep: u64) -> Option<u32> {
        if self.candidates_frame != Some(frame) {
            let mut c: Vec<(u64, u32)> = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.tile.is_some() && !s.pinned)
                .map(|(i, s)| (s.last_used, i as u32))
                .collect();
            // Oldest last, so `pop` takes it.
            c.sort_unstable_by(|a, b| b.cmp(a));
            self.candidates = c.into_iter().map(|(_, i)| i).collect();
            self.candidates_frame = Some(frame);
        }
        while let Some(slot) = self.candidates.pop() {
            let s = self.slots[slot as usize];
            if s.tile.is_none() || s.pinned {
                continue;
            }
            if s.last_used + keep >= frame {
                // Sorted: every later candidate is at least as recent.
                self.candidates.push(slot);
                return None;
            }
            return Some(slot);
        }
        None
    }

    /// Gives `tile`'s slot back (an upload that failed after placement).
    pub fn remove(&mut self, tile: TileId) {
        if let Some(slot) = self.resident.remove(&tile) {
            self.slots[slot as usize] = Slot::default();
            self.free.push(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eviction_takes_the_least_recently_used_unpinned_slot() {
        let t = |x| TileId::new(0, x, 0);
        let mut s = Slots::new(3);
        assert_eq!(s.place(TileId::new(2, 0, 0), 1, 1, true), Some((0, None)));
        assert_eq!(s.place(t(1), 2, 1, false).map(|p| p.1), Some(None));
        assert_eq!(s.place(t(2), 3, 1, false).map(|p| p.1), Some(None));
        // Frame 6: t(1) sampled again; t(2) is now the oldest unpinned.
        let s1 = s.slot_of(t(1)).unwrap();
        s.touch(s1, 6);
        assert_eq!(s.place(t(3), 6, 1, false).map(|p| p.1), Some(Some(t(2))));
        // Everything left was used within `keep` frames: no victim.
        assert_eq!(s.place(t(4), 7, 1, false), None);
        assert!(
            s.slot_of(TileId::new(2, 0, 0)).is_some(),
            "pinned tiles stay"
        );
    }
}
