//! Eviction: which movables leave the device and how, and the pressure hook through
//! which the arena's allocation path asks for room.
//!
//! # How it works
//! An eviction is planned under the tiers' lock ([`TierShared::plan_evictions`]: each
//! entry's device allocation is taken out and the entry marked moving, with a host range
//! for its bytes) and run without it ([`TierShared::run_evictions`]: one submission of
//! copies, then each entry commits its host place). The policy picks unpinned entries
//! with no GPU work in flight, from other pools than the asking one last, then lower
//! priority, then least recently used ([`TierShared::candidates`]); for whole blocks it
//! empties the arena blocks whose movables free the most ([`TierShared::evict_blocks`]).
//!
//! Under pressure the arena asks through [`Relief`]: at least a thirty-second of the
//! budget (at most 64 MiB beyond the request) is evicted at once, so a loop over small
//! movables does not pay a wait for the GPU on every request.
//!
//! # What it promises
//! - A pinned entry is never evicted; an entry with GPU work in flight only after that
//!   work is done.
//! - A failed eviction puts every entry back on the device; a full host tier is reported
//!   (the arena's out-of-memory error then names both tiers).

use std::cell::Cell;
use std::sync::Arc;

use crate::arena::{Allocation, EventKind, Relief};
use crate::Result;

use super::host::HostRange;
use super::state::{Place, TierState};
use super::TierShared;
use super::{copy, distinct_pools};

/// Under pressure, at least this fraction (1/N) of the budget is evicted at once...
const PRESSURE_BATCH_DIVISOR: u64 = 32;
/// ...but at most this many bytes beyond the request.
const PRESSURE_BATCH_MAX: u64 = 64 << 20;

thread_local! {
    /// Set when this thread's eviction found the host tier full, so the out-of-memory error
    /// the arena then returns can say both tiers are full.
    pub(super) static HOST_FULL: Cell<bool> = const { Cell::new(false) };
}

/// One planned eviction: the device allocation taken out of its entry, and its host range.
pub(super) struct Eviction {
    slot: u32,
    from: Arc<Allocation>,
    to: HostRange,
}

impl TierShared {
    /// Takes the device allocations of `slots` out of their entries (marking them moving)
    /// with a host range each. Entries not on the device are skipped. On a full host tier
    /// nothing is taken and the error says so.
    pub(super) fn plan_evictions(
        &self,
        st: &mut TierState,
        slots: &[u32],
    ) -> Result<Vec<Eviction>> {
        let mut planned: Vec<Eviction> = Vec::new();
        for &slot in slots {
            let Some(e) = st.get(slot) else {
                continue;
            };
            if !matches!(e.place, Place::Device(_)) {
                continue;
            }
            let (size, label) = (e.size, e.label.clone());
            match st.host.alloc(size, &label) {
                Ok(to) => {
                    let Some(e) = st.entry(slot) else { continue };
                    if let Place::Device(from) = std::mem::replace(&mut e.place, Place::Moving) {
                        planned.push(Eviction { slot, from, to });
                    }
                }
                Err(err) => {
                    st.counters.host_full += 1;
                    for p in planned {
                        st.host.free(p.to);
                        if let Some(e) = st.entry(p.slot) {
                            e.place = Place::Device(p.from);
                        }
                    }
                    return Err(err);
                }
            }
        }
        Ok(planned)
    }

    /// Records and submits the copies of `planned`, then commits: entries point at their
    /// host ranges and the device allocations drop (the arena reuses their ranges after
    /// the copies finish). Returns the bytes moved. When wgpu refuses the copies (a lost
    /// device), every entry goes back to its device allocation and nothing moved.
    pub(super) fn run_evictions(&self, planned: Vec<Eviction>) -> Result<u64> {
        if planned.is_empty() {
            return Ok(0);
        }
        let copies: Vec<copy::Copy<'_>> = planned
            .iter()
            .map(|p| copy::Copy {
                src: p.from.buffer(),
                src_offset: p.from.offset(),
                dst: p.to.block.buffer(),
                dst_offset: p.to.offset(),
                bytes: p.from.size(),
            })
            .collect();
        let copied = copy::submit_commands(
            &self.gpu(),
            "evicting movables to host memory",
            "evict",
            &copies,
        );
        drop(copies);
        let mut st = self.state.lock();
        if let Err(e) = copied {
            for p in planned {
                st.host.free(p.to);
                self.commit(&mut st, p.slot, Place::Device(p.from));
            }
            self.moved.notify_all();
            self.unlock(st);
            return Err(e);
        }
        let bytes: u64 = planned.iter().map(|p| p.from.size()).sum();
        st.counters.evictions += planned.len() as u64;
        st.counters.bytes_evicted += bytes;
        let mut olds = Vec::with_capacity(planned.len());
        for p in planned {
            p.from.note(EventKind::Evict);
            olds.push(p.from);
            self.commit(&mut st, p.slot, Place::Host(p.to));
        }
        self.moved.notify_all();
        self.unlock(st);
        drop(olds);
        // Their ranges come back when the copies finish, not when whatever is submitted
        // next does: the restore waiting for them must not wait for the caller's kernels.
        self.arena().seal_frees();
        Ok(bytes)
    }

    /// Unpinned, device-resident entries in eviction order (other pools than `prefer`
    /// last, then lower priority first, then least recently used first), each with
    /// whether GPU work submitted before its last use may still be running on it.
    pub(super) fn candidates(&self, st: &TierState, prefer: Option<usize>) -> Vec<(u32, bool)> {
        let done = self.gpu().work_done().done();
        let mut c: Vec<(bool, u8, u64, u32, bool)> = st
            .entries
            .iter()
            .enumerate()
            .filter_map(|(i, e)| {
                let e = e.as_ref()?;
                if !matches!(e.place, Place::Device(_)) || e.dropped || e.pins > 0 {
                    return None;
                }
                let other = prefer.is_some_and(|p| p != e.pool.index());
                // Settling the GPU would free a busy one; a pin it would not.
                let busy = e.busy_until > done;
                Some((other, e.priority, e.last_use, i as u32, busy))
            })
            .collect();
        c.sort_unstable();
        c.into_iter().map(|(.., i, busy)| (i, busy)).collect()
    }

    /// Evicts in [`candidates`](Self::candidates) order until `bytes` moved. An entry
    /// whose turn comes while GPU work may still use it makes the first attempt settle
    /// in-flight work and choose again, so the order holds (evicting the next idle entry
    /// instead once evicted a high-priority handle while the low-priority one it should
    /// have spared waited for its callback); after that, busy entries are passed over.
    pub(super) fn evict_lru(&self, bytes: u64, prefer: Option<usize>) -> u64 {
        let mut moved = 0;
        for attempt in 0..2 {
            let mut st = self.state.lock();
            let order = self.candidates(&st, prefer);
            // (Only the first attempt can settle; the second always ends the loop.)
            let mut chosen = Vec::new();
            let mut sum = moved;
            let mut waiting = false;
            for (slot, busy) in order {
                if sum >= bytes {
                    break;
                }
                if busy {
                    if attempt == 0 {
                        waiting = true;
                        break;
                    }
                    continue;
                }
                sum += st.get(slot).map_or(0, |e| e.size);
                chosen.push(slot);
            }
            if waiting {
                drop(st);
                if self.settle().is_err() {
                    break;
                }
                continue;
            }
            let planned = self.plan_evictions(&mut st, &chosen);
            drop(st);
            match planned {
                Ok(p) => moved += self.run_evictions(p).unwrap_or(0),
                Err(_) => HOST_FULL.with(|f| f.set(true)),
            }
            // Every entry in order was idle or passed over: settling cannot add any.
            break;
        }
        moved
    }

    /// Evicts every movable of whole blocks that hold nothing else, blocks whose members
    /// were used longest ago first (lower priority first), until the blocks add up to
    /// `bytes`: under a budget on reserved bytes, only an emptied block makes room for a
    /// new one. Returns the bytes moved.
    pub(super) fn evict_blocks(&self, bytes: u64) -> u64 {
        let pools = {
            let st = self.state.lock();
            distinct_pools(st.entries.iter().flatten().map(|e| e.pool))
        };
        // (pool, block) -> (block bytes, live ranges): read without our lock held.
        let mut blocks = std::collections::HashMap::new();
        for pool in pools {
            for b in self.arena().block_usage(pool) {
                blocks.insert((pool.index(), b.id), (b.size, b.live));
            }
        }
        let mut st = self.state.lock();
        let order = self.candidates(&st, None);
        // Per block: its movable members, their highest priority and latest use.
        let mut members: std::collections::HashMap<_, (Vec<u32>, u8, u64)> =
            std::collections::HashMap::new();
        for (slot, _) in order.into_iter().filter(|&(_, busy)| !busy) {
            let Some(e) = st.get(slot) else {
                continue;
            };
            let Place::Device(a) = &e.place else { continue };
            let (block, pool) = a.place();
            let m = members.entry((pool, block)).or_default();
            m.0.push(slot);
            m.1 = m.1.max(e.priority);
            m.2 = m.2.max(e.last_use);
        }
        let mut emptiable: Vec<(u8, u64, u64, Vec<u32>)> = members
            .into_iter()
            .filter_map(|(key, (slots, priority, last_use))| {
                let &(size, live) = blocks.get(&key)?;
                (slots.len() == live).then_some((priority, last_use, size, slots))
            })
            .collect();
        emptiable.sort_unstable_by_key(|e| (e.0, e.1));
        let mut chosen = Vec::new();
        let mut freed = 0;
        for (.., size, slots) in emptiable {
            if freed >= bytes {
                break;
            }
            freed += size;
            chosen.extend(slots);
        }
        let planned = self.plan_evictions(&mut st, &chosen);
        drop(st);
        match planned {
            Ok(p) => self.run_evictions(p).unwrap_or(0),
            Err(_) => {
                HOST_FULL.with(|f| f.set(true));
                0
            }
        }
    }
}

impl Relief for TierShared {
    fn as_any(self: Arc<Self>) -> Arc<dyn std::any::Any + Send + Sync> {
        self
    }

    fn relieve(&self, pool: usize, bytes: u64, whole_blocks: bool) -> u64 {
        let before = self.state.lock().counters.evictions;
        let moved = if whole_blocks {
            self.evict_blocks(bytes)
        } else {
            // A batch at a time: every eviction under pressure costs the request a wait
            // for the GPU, so a loop over small movables (1 MiB each) paid one round trip
            // per visit. Evicting the least recently used ahead lets the next requests
            // find room without waiting.
            let batch = self
                .arena()
                .budget()
                .map_or(0, |b| (b / PRESSURE_BATCH_DIVISOR).min(PRESSURE_BATCH_MAX));
            self.evict_lru(bytes.max(batch), Some(pool))
        };
        let mut st = self.state.lock();
        st.counters.pressure_evictions += st.counters.evictions - before;
        moved
    }

    fn host_blocks(&self) -> Vec<crate::arena::HostBlockDump> {
        TierShared::host_blocks(self)
    }

    fn summary_lines(&self) -> Vec<String> {
        TierShared::summary_lines(self)
    }
}
