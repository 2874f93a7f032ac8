//! The page table: virtual page -> cache slot, as an open-addressing hash table in one
//! storage buffer, rebuilt from the resident set whenever it changes.
//!
//! # Why a hash table
//! A dense table per level is what hardware virtual texturing uses, but at 2^20 texels and
//! 120-texel pages level 0 alone has 8739^2 = 76 M pages (305 MB of entries) for a cache of
//! a few thousand slots. The table here holds only resident tiles: `2^k >= 2 x slots`
//! entries of `(key, slot)` (64 KiB for 4096 slots), linear probing, at most
//! [`PageTable::max_probe`] probes for any key (the shader's loop bound). A page that is
//! not resident is simply absent: the shader walks to its parent, then the parent's parent,
//! and stops at the first resident one. The coarsest levels are pinned in the cache, so
//! the walk always ends on a tile: that is "every page points at its nearest resident
//! ancestor", computed at sample time instead of stored.

use rustc_hash::FxHashMap as HashMap;

use super::layout::TileId;

/// The hash the shaders use too (`vt_hash` in `shaders/shared/vt_hash.wgsl`): a 32-bit mix
/// (lowbias32), then masked to the table's size.
pub fn hash(key: u32) -> u32 {
    let mut h = key;
    h ^= h >> 16;
    h = h.wrapping_mul(0x7feb_352d);
    h ^= h >> 15;
    h = h.wrapping_mul(0x846c_a68b);
    h ^= h >> 16;
    h
}

/// The table's entries as the GPU reads them: `[key, slot]` pairs, key 0 empty.
#[derive(Debug)]
pub(crate) struct PageTable {
    pub entries: Vec<[u32; 2]>,
    pub max_probe: u32,
}

impl PageTable {
    /// Entries for a cache of `slots` slots: the next power of two of twice that.
    pub fn capacity(slots: u32) -> u32 {
        (2 * slots.max(1)).next_power_of_two()
    }

    /// Builds the table of `resident` in `capacity` entries (a power of two larger than
    /// the resident count).
    pub fn build(resident: &HashMap<TileId, u32>, capacity: u32) -> PageTable {
        let mask = capacity - 1;
        let mut entries = vec![[0u32; 2]; capacity as usize];
        let mut max_probe = 0;
        for (tile, &slot) in resident {
            let key = tile.key();
            let mut h = hash(key) & mask;
            let mut probe = 0;
            while entries[h as usize][0] != 0 {
                h = (h + 1) & mask;
                probe += 1;
            }
            entries[h as usize] = [key, slot];
            max_probe = max_probe.max(probe);
        }
        PageTable { entries, max_probe }
    }

    /// The slot of `key`, as the shader finds it.
    #[cfg(test)]
    pub fn lookup(&self, key: u32) -> Option<u32> {
        let mask = self.entries.len() as u32 - 1;
        let mut h = hash(key) & mask;
        for _ in 0..=self.max_probe {
            let [k, slot] = self.entries[h as usize];
            if k == key {
                return Some(slot);
            }
            if k == 0 {
                return None;
            }
            h = (h + 1) & mask;
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_resident_tile_is_found_and_others_are_not() {
        let mut resident = HashMap::default();
        for i in 0..3000u32 {
            resident.insert(TileId::new(i % 5, i * 7 % 1000, i / 3), i);
        }
        let t = PageTable::build(&resident, PageTable::capacity(3000));
        for (tile, &slot) in &resident {
            assert_eq!(t.lookup(tile.key()), Some(slot));
        }
        assert_eq!(t.lookup(TileId::new(9, 1, 1).key()), None);
        assert!(t.max_probe < 64, "probe chains stay short: {}", t.max_probe);
    }
}
