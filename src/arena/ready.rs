//! The ready cache: slots of freed records whose ranges the GPU has finished with, kept
//! by pool and request size for the next allocation of that size.
//!
//! # How it works
//! Lists live in one vector, found through a hash map from `(pool, request size)` to
//! their place in it, and the list taken from last is remembered: a loop asks for one
//! size again and again, so its allocations compare one key instead of hashing it (the
//! hash lookup was a tenth of a 256-byte alloc+free pair's bookkeeping).
//!
//! # What it promises
//! - Every key has at most one list, and `index` maps each list's key to its place.
//! - `last` is a place in `lists` or `u32::MAX`; a stale `last` is never followed
//!   without checking the key of the list it names.
//! - Slots come out of a list last in, first out (the range freed last is the likeliest
//!   to be in the CPU's caches when its record is touched).
//!
//! The cache keeps slots only; their records, their counting and where their ranges go
//! back are the state's (`state.rs`).

use rustc_hash::FxHashMap;

/// A list's key: the pool and the request size (guards excluded) its ranges serve.
pub(crate) type ReadyKey = (usize, u64);

/// The ready slots of one pool and request size.
pub(crate) struct ReadyList {
    pub key: ReadyKey,
    pub slots: Vec<u32>,
    /// `State::harvests` when the list was made or a range last taken from it; lists
    /// idle for two harvests go back to their blocks.
    pub used_at: u64,
}

/// Ready lists by key (see the module docs).
pub(crate) struct ReadyCache {
    lists: Vec<ReadyList>,
    index: FxHashMap<ReadyKey, u32>,
    /// The place of the list last found.
    last: u32,
}

impl Default for ReadyCache {
    fn default() -> Self {
        ReadyCache {
            lists: Vec::new(),
            index: FxHashMap::default(),
            last: u32::MAX,
        }
    }
}

impl ReadyCache {
    /// The place of `key`'s list, if it has one.
    #[inline(always)]
    fn find(&mut self, key: ReadyKey) -> Option<usize> {
        if let Some(list) = self.lists.get(self.last as usize) {
            if list.key == key {
                return Some(self.last as usize);
            }
        }
        let at = *self.index.get(&key)?;
        self.last = at;
        Some(at as usize)
    }

    /// Every list (for the state's invariant checker).
    pub fn lists(&self) -> &[ReadyList] {
        &self.lists
    }

    /// Takes the slot freed last from `key`'s list, marking the list used at `now`.
    #[inline(always)]
    pub fn take(&mut self, key: ReadyKey, now: u64) -> Option<u32> {
        let at = self.find(key)?;
        let list = &mut self.lists[at];
        let slot = list.slots.pop()?;
        // Written only when it changes: a store the next lock operation would wait for.
        if list.used_at != now {
            list.used_at = now;
        }
        Some(slot)
    }

    /// The place of `key`'s list, made empty (used at `now`) if it had none; for
    /// [`push`](Self::push).
    pub fn list_for(&mut self, key: ReadyKey, now: u64) -> usize {
        if let Some(at) = self.find(key) {
            return at;
        }
        let at = self.lists.len();
        self.lists.push(ReadyList {
            key,
            slots: Vec::new(),
            used_at: now,
        });
        self.index.insert(key, at as u32);
        self.last = at as u32;
        at
    }

    /// Adds `slot` to the list at `at` (from [`list_for`](Self::list_for), with no
    /// [`retain`](Self::retain) since).
    pub fn push(&mut self, at: usize, slot: u32) {
        if let Some(list) = self.lists.get_mut(at) {
            list.slots.push(slot);
        }
    }

    /// Keeps the lists `keep` accepts; the others are handed to `keep` to empty (their
    /// slots must go back to their blocks there) and are dropped.
    pub fn retain(&mut self, mut keep: impl FnMut(&mut ReadyList) -> bool) {
        let before = self.lists.len();
        self.lists.retain_mut(|list| keep(list));
        if self.lists.len() != before {
            self.index.clear();
            for (at, list) in self.lists.iter().enumerate() {
                self.index.insert(list.key, at as u32);
            }
            self.last = u32::MAX;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::{Rng, SeedableRng};

    /// A reference model: a hash map of vectors.
    type Model = std::collections::HashMap<ReadyKey, Vec<u32>>;

    #[test]
    fn matches_a_map_of_lists_under_random_operations() {
        // Seeded: random keys over few pools and sizes, so lists are hit repeatedly,
        // dropped and made again.
        let mut rng = SmallRng::seed_from_u64(0x9e37_79b9_7f4a_7c15);
        let mut next = move || rng.gen::<u64>();
        let mut cache = ReadyCache::default();
        let mut model = Model::new();
        let mut slot = 0u32;
        for step in 0..20_000u64 {
            let key = ((next() % 3) as usize, 4 * (next() % 5));
            match next() % 8 {
                0..=3 => {
                    let at = cache.list_for(key, step);
                    cache.push(at, slot);
                    model.entry(key).or_default().push(slot);
                    slot += 1;
                }
                4..=6 => {
                    let want = model.get_mut(&key).and_then(|l| l.pop());
                    assert_eq!(cache.take(key, step), want, "take {key:?} at step {step}");
                }
                _ => {
                    // Drop the lists of one pool, as aging does with idle ones.
                    let pool = (next() % 3) as usize;
                    cache.retain(|list| {
                        if list.key.0 != pool {
                            return true;
                        }
                        list.slots.clear();
                        false
                    });
                    model.retain(|k, _| k.0 != pool);
                }
            }
        }
        for (key, mut slots) in model {
            while let Some(want) = slots.pop() {
                assert_eq!(cache.take(key, 0), Some(want));
            }
            assert_eq!(cache.take(key, 0), None);
        }
    }

    #[test]
    fn a_dropped_list_is_not_found_through_the_remembered_place() {
        let mut cache = ReadyCache::default();
        let a = cache.list_for((0, 256), 0);
        cache.push(a, 7);
        let b = cache.list_for((0, 512), 0);
        cache.push(b, 8);
        assert_eq!(cache.take((0, 512), 1), Some(8));
        // Drop 256's list: 512's moves to place 0, where `last` may point.
        cache.retain(|list| list.key != (0, 256));
        assert_eq!(cache.take((0, 256), 2), None);
        let c = cache.list_for((0, 256), 3);
        cache.push(c, 9);
        assert_eq!(cache.take((0, 512), 4), None);
        assert_eq!(cache.take((0, 256), 4), Some(9));
    }
}
