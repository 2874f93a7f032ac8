//! Statistics in the spirit of `torch.cuda.memory_stats()` and a printable summary.

use crate::arena::state::LabelStats;
use crate::arena::Arena;
use crate::fmt_bytes;

/// One block's occupancy.
#[derive(Clone, Debug)]
pub struct BlockStats {
    /// Pool name.
    pub pool: String,
    /// Block id inside the pool.
    pub block: u32,
    /// Bytes.
    pub size: u64,
    /// Bytes in live, pending or cached ranges (see [`ArenaStats::cached`]).
    pub used: u64,
    /// Largest free range.
    pub largest_free: u64,
    /// Free ranges.
    pub free_ranges: usize,
    /// `1 - largest free / free`.
    pub fragmentation: f64,
    /// A block made for one large request.
    pub dedicated: bool,
}

/// A snapshot of the arena's counters. Byte counts include guard bytes when guards are on.
#[derive(Clone, Debug, Default)]
pub struct ArenaStats {
    /// Bytes in live allocations.
    pub allocated: u64,
    /// Live bytes plus bytes dropped but still possibly in use by the GPU.
    pub active: u64,
    /// Bytes held in blocks.
    pub reserved: u64,
    /// Reserved bytes not in live allocations, `reserved - allocated`: what PyTorch users
    /// read as cached memory (free ranges, frees waiting for the GPU, the by-size cache),
    /// held for reuse and given back by [`Arena::trim`] where whole blocks are free.
    pub cached: u64,
    /// The part of [`cached`](Self::cached) in the by-size cache: freed ranges the GPU is
    /// done with, kept by request size so that the next allocation of that size takes one
    /// without the range allocator (PyTorch's cached blocks). They go back to their
    /// blocks before the arena grows, trims, waits for the GPU or reports out-of-memory,
    /// and after two device polls in which nobody asked for their size.
    pub size_cache: u64,
    /// Peak of `allocated` since creation or [`Arena::reset_peak`].
    pub peak_allocated: u64,
    /// Peak of `active`.
    pub peak_active: u64,
    /// Peak of `reserved`.
    pub peak_reserved: u64,
    /// The budget, if any.
    pub budget: Option<u64>,
    /// Allocations made.
    pub allocations: u64,
    /// Allocations dropped.
    pub frees: u64,
    /// Times a request had to release empty blocks or wait for the GPU before it fit.
    pub retries: u64,
    /// Requests refused with out-of-memory.
    pub ooms: u64,
    /// Times the arena blocked on the GPU to collect frees.
    pub waits: u64,
    /// Blocks held.
    pub blocks: usize,
    /// wgpu buffers created for blocks.
    pub blocks_created: u64,
    /// Blocks given back.
    pub blocks_released: u64,
    /// Live allocations.
    pub live_allocations: usize,
    /// Dropped ranges waiting for the GPU.
    pub pending_frees: usize,
    /// Times the arena's lock was biased to a thread: after 64 acquisitions in a row it
    /// is taken and released with plain loads and stores by that thread (Linux; see
    /// `VRAMKIT_LOCK_BIAS` in the README).
    pub lock_biases: u64,
    /// Times another thread took the lock from the thread it was biased to. Each costs
    /// that thread a process-wide barrier (`membarrier`, about a microsecond), and each
    /// doubles the acquisitions needed before the next bias, so threads that share an
    /// arena soon stop paying it.
    pub lock_revocations: u64,
    /// Fragmentation: the share of free bytes outside their block's largest free range,
    /// over the blocks that hold live data (a wholly free block is not fragmented); 0 when
    /// all are empty. The blocks' own figures weighted by their free bytes, so blocks
    /// that each show 0 % add up to 0 % ([`PoolStats::fragmentation`] per pool).
    pub fragmentation: f64,
    /// Per block.
    pub per_block: Vec<BlockStats>,
    /// Per label, sorted by live bytes (largest first). Labels with nothing live are
    /// folded away once the table is full (`LABELS_KEPT`); see `folded_labels`.
    pub per_label: Vec<(String, LabelStats)>,
    /// Labels folded away with nothing live under them, and their largest peak.
    pub folded_labels: crate::arena::Folded,
}

/// The summary lists this many labels at most (the most live bytes first, then the
/// largest peaks), and counts the rest in one row.
const SUMMARY_LABELS: usize = 48;

/// Pools with more blocks than this get one summary row of totals.
const SUMMARY_BLOCKS_PER_POOL: usize = 8;

/// One pool's totals: what [`Arena::pool_stats`] returns.
#[derive(Clone, Debug)]
pub struct PoolStats {
    /// The pool's name.
    pub pool: String,
    /// Bytes held in its blocks.
    pub reserved: u64,
    /// Peak of `reserved` since creation or [`Arena::reset_peak`].
    pub peak_reserved: u64,
    /// Bytes in ranges of its blocks: live allocations, and freed ranges waiting for the
    /// GPU or cached for reuse.
    pub in_ranges: u64,
    /// Peak of `in_ranges`.
    pub peak_in_ranges: u64,
    /// [`ArenaStats::fragmentation`] over this pool's blocks.
    pub fragmentation: f64,
}

/// The share of free bytes outside their block's largest free range, over blocks given
/// as `(used, free, largest free)`; blocks with nothing used are left out.
fn fragmentation(blocks: impl Iterator<Item = (u64, u64, u64)>) -> f64 {
    let (outside, free) = blocks
        .filter(|&(used, ..)| used > 0)
        .fold((0u64, 0u64), |(o, f), (_, free, largest)| {
            (o + free.saturating_sub(largest), f + free)
        });
    if free == 0 {
        0.0
    } else {
        outside as f64 / free as f64
    }
}

impl Arena {
    /// Per pool: reserved bytes and bytes in ranges, with their peaks.
    pub fn pool_stats(&self) -> Vec<PoolStats> {
        let st = self.shared().state.lock();
        st.pools
            .iter()
            .map(|p| {
                let s = p.set.stats();
                PoolStats {
                    pool: p.name.clone(),
                    reserved: s.reserved,
                    peak_reserved: s.peak_reserved,
                    in_ranges: s.allocated,
                    peak_in_ranges: s.peak_allocated,
                    fragmentation: fragmentation(p.set.blocks().filter_map(|(id, ..)| {
                        let a = p.set.block(id)?;
                        Some((a.used_bytes(), a.free_bytes(), a.largest_free()))
                    })),
                }
            })
            .collect()
    }

    /// Checks the arena's invariants, as VMA's `Validate()` does: the counters against
    /// the allocation records, the records against the blocks and the ready cache, each
    /// block's range allocator against its own (numbered in `src/arena/state.rs`,
    /// `src/alloc/block_set.rs` and `src/alloc/tlsf.rs`). Returns the first one broken,
    /// by number. Linear in the records and blocks: for tests and debugging (the
    /// `heavy-checks` feature runs it on every acquisition of the arena's lock).
    ///
    /// ```no_run
    /// # let gpu = vramkit::Gpu::headless()?;
    /// let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// let a = arena.alloc(1 << 20, "a")?;
    /// drop(a);
    /// assert_eq!(arena.check_invariants(), Ok(()));
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn check_invariants(&self) -> std::result::Result<(), String> {
        self.shared().state.lock().check_invariants()
    }

    /// A snapshot of all statistics.
    pub fn stats(&self) -> ArenaStats {
        let shared = self.shared();
        let st = shared.state.lock();
        // SAFETY: `raw` only gives access to the lock; its counters are atomics we read.
        let (lock_biases, lock_revocations) = unsafe { shared.state.raw() }.bias_counts();
        let c = st.counters;
        let mut per_block = Vec::new();
        let mut frees = Vec::new();
        for pool in &st.pools {
            for (id, size, dedicated, _) in pool.set.blocks() {
                let Some(a) = pool.set.block(id) else {
                    continue;
                };
                frees.push((a.used_bytes(), a.free_bytes(), a.largest_free()));
                per_block.push(BlockStats {
                    pool: pool.name.clone(),
                    block: id.0,
                    size,
                    used: a.used_bytes(),
                    largest_free: a.largest_free(),
                    free_ranges: a.free_range_count(),
                    fragmentation: a.fragmentation(),
                    dedicated,
                });
            }
        }
        let mut per_label: Vec<(String, LabelStats)> = st
            .label_stats
            .iter()
            .filter(|(_, l)| l.count > 0 || l.peak_bytes > 0)
            .map(|(k, v)| (k.to_string(), *v))
            .collect();
        per_label.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then(natural_order(&a.0, &b.0)));
        ArenaStats {
            allocated: c.allocated,
            active: c.allocated + c.pending,
            reserved: st.reserved(),
            cached: st.reserved().saturating_sub(c.allocated),
            size_cache: c.cached,
            peak_allocated: c.peak_allocated,
            peak_active: c.peak_active,
            peak_reserved: c.peak_reserved,
            budget: st.budget,
            allocations: c.allocations,
            frees: c.frees,
            retries: c.retries,
            ooms: c.ooms,
            waits: c.waits,
            blocks: per_block.len(),
            blocks_created: c.blocks_created,
            blocks_released: c.blocks_released,
            live_allocations: st.live_allocations(),
            pending_frees: st.open.len() + st.sealed.iter().map(|(_, v)| v.len()).sum::<usize>(),
            lock_biases,
            lock_revocations,
            fragmentation: fragmentation(frees.into_iter()),
            per_block,
            per_label,
            folded_labels: st.folded_labels,
        }
    }

    /// A readable table of the statistics, like `torch.cuda.memory_summary()`.
    pub fn summary(&self) -> String {
        use std::fmt::Write;
        let s = self.stats();
        let mut out = String::new();
        let line = "=".repeat(76);
        let _ = writeln!(out, "{line}");
        let adapter = &self.gpu().info().name;
        let on = match self.shared().config.device_index {
            Some(i) => format!("device {i} ({adapter})"),
            None => adapter.clone(),
        };
        let _ = writeln!(
            out,
            " vramkit arena '{}' on {on}",
            self.shared().config.name
        );
        let _ = writeln!(out, "{line}");
        let _ = writeln!(out, " {:<28} {:>14} {:>14}", "metric", "current", "peak");
        for (name, cur, peak) in [
            ("allocated", s.allocated, s.peak_allocated),
            ("active (incl. pending frees)", s.active, s.peak_active),
            ("reserved", s.reserved, s.peak_reserved),
        ] {
            let _ = writeln!(
                out,
                " {:<28} {:>14} {:>14}",
                name,
                fmt_bytes(cur),
                fmt_bytes(peak)
            );
        }
        let _ = writeln!(
            out,
            " {:<28} {:>14}",
            "cached (reserved-allocated)",
            fmt_bytes(s.cached)
        );
        let _ = writeln!(
            out,
            " {:<28} {:>14}",
            "  of which by-size cache",
            fmt_bytes(s.size_cache)
        );
        let budget = s.budget.map_or("none".to_string(), fmt_bytes);
        let _ = writeln!(out, " {:<28} {:>14}", "budget", budget);
        if let Some(m) = self.driver_reading() {
            let _ = writeln!(
                out,
                " {:<28} {:>14}  (process uses {}, {})",
                "  live: driver allows",
                fmt_bytes(m.budget),
                fmt_bytes(m.usage),
                m.source
            );
        }
        let _ = writeln!(out, "{}", "-".repeat(76));
        let _ = writeln!(
            out,
            " allocations {}  frees {}  live {}  pending frees {}  retries {}  OOMs {}  GPU waits {}",
            s.allocations, s.frees, s.live_allocations, s.pending_frees, s.retries, s.ooms, s.waits
        );
        let _ = writeln!(
            out,
            " blocks {} (created {}, released {})  fragmentation {:.1} %",
            s.blocks,
            s.blocks_created,
            s.blocks_released,
            s.fragmentation * 100.0
        );
        if !s.per_block.is_empty() {
            let _ = writeln!(out, "{}", "-".repeat(76));
            let width = s
                .per_block
                .iter()
                .map(|b| b.pool.len())
                .max()
                .unwrap_or(4)
                .max(4);
            let _ = writeln!(
                out,
                " {:<width$} {:>6} {:>12} {:>12} {:>12} {:>6} {:>7}",
                "pool", "block", "size", "used", "largest free", "holes", "frag %"
            );
            // Pools of many blocks (a kernel parameter ring after a long batch, say) get one
            // row of totals instead of a row per block.
            let mut pools: Vec<&str> = s.per_block.iter().map(|b| b.pool.as_str()).collect();
            pools.dedup();
            for pool in pools {
                let blocks: Vec<&BlockStats> =
                    s.per_block.iter().filter(|b| b.pool == pool).collect();
                if blocks.len() > SUMMARY_BLOCKS_PER_POOL {
                    let (size, used) = blocks
                        .iter()
                        .fold((0, 0), |(s, u), b| (s + b.size, u + b.used));
                    let largest = blocks.iter().map(|b| b.largest_free).max().unwrap_or(0);
                    let holes: usize = blocks.iter().map(|b| b.free_ranges).sum();
                    let empty = blocks.iter().filter(|b| b.used == 0).count();
                    let _ = writeln!(
                        out,
                        " {:<width$} {:>6} {:>12} {:>12} {:>12} {:>6}   ({} blocks, {} empty)",
                        pool,
                        "all",
                        fmt_bytes(size),
                        fmt_bytes(used),
                        fmt_bytes(largest),
                        holes,
                        blocks.len(),
                        empty
                    );
                    continue;
                }
                for b in blocks {
                    let _ = writeln!(
                        out,
                        " {:<width$} {:>6} {:>12} {:>12} {:>12} {:>6} {:>7.1}{}",
                        b.pool,
                        b.block,
                        fmt_bytes(b.size),
                        fmt_bytes(b.used),
                        fmt_bytes(b.largest_free),
                        b.free_ranges,
                        b.fragmentation * 100.0,
                        if b.dedicated { "  dedicated" } else { "" }
                    );
                }
            }
        }
        if !s.per_label.is_empty() {
            let _ = writeln!(out, "{}", "-".repeat(76));
            let _ = writeln!(
                out,
                " {:<36} {:>8} {:>14} {:>14}",
                "label", "live", "bytes", "peak bytes"
            );
            let mut rows: Vec<&(String, LabelStats)> = s.per_label.iter().collect();
            rows.sort_by(|a, b| {
                (b.1.bytes, b.1.peak_bytes)
                    .cmp(&(a.1.bytes, a.1.peak_bytes))
                    .then(natural_order(&a.0, &b.0))
            });
            for (label, l) in rows.iter().take(SUMMARY_LABELS) {
                let _ = writeln!(
                    out,
                    " {:<36} {:>8} {:>14} {:>14}",
                    label,
                    l.count,
                    fmt_bytes(l.bytes),
                    fmt_bytes(l.peak_bytes)
                );
            }
            if let Some(rest) = rows.get(SUMMARY_LABELS..).filter(|r| !r.is_empty()) {
                let (count, bytes, peak) = rest.iter().fold((0, 0, 0), |(c, b, p), (_, l)| {
                    (c + l.count, b + l.bytes, p.max(l.peak_bytes))
                });
                let _ = writeln!(
                    out,
                    " {:<36} {:>8} {:>14} {:>14}",
                    format!("({} more labels)", rest.len()),
                    count,
                    fmt_bytes(bytes),
                    fmt_bytes(peak)
                );
            }
        }
        if s.folded_labels.labels > 0 {
            let _ = writeln!(
                out,
                " {:<36} {:>8} {:>14} {:>14}",
                format!("({} labels folded)", s.folded_labels.labels),
                0,
                fmt_bytes(0),
                fmt_bytes(s.folded_labels.peak_bytes)
            );
        }
        if let Some(tier) = self.tier_hook() {
            let _ = writeln!(out, "{}", "-".repeat(76));
            for l in tier.summary_lines() {
                let _ = writeln!(out, " {l}");
            }
        }
        let _ = writeln!(out, "{line}");
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::{Arena, Gpu};

    /// Counters broken on purpose fail the arena's checker under their numbers.
    #[test]
    fn a_broken_counter_fails_the_arena_check() {
        let gpu = Gpu::headless().unwrap_or_else(|e| panic!("{e}"));
        let arena = Arena::new(&gpu, Default::default()).unwrap_or_else(|e| panic!("{e}"));
        let _live: Vec<_> = (0..8)
            .map(|i| arena.alloc(1024 << i, "live"))
            .collect::<Result<_, _>>()
            .unwrap_or_else(|e| panic!("{e}"));
        drop(arena.alloc(4096, "freed"));
        assert_eq!(arena.check_invariants(), Ok(()));
        type Edit = fn(&mut crate::arena::state::State);
        let breaks: [(&str, Edit, Edit); 4] = [
            (
                "3:",
                |s| s.counters.allocated += 4,
                |s| s.counters.allocated -= 4,
            ),
            (
                "3:",
                |s| s.counters.pending += 4,
                |s| s.counters.pending -= 4,
            ),
            (
                "7:",
                |s| s.label_stats[0].1.count += 1,
                |s| s.label_stats[0].1.count -= 1,
            ),
            (
                "4:",
                |s| s.open.push(u32::MAX),
                |s| {
                    s.open.pop();
                },
            ),
        ];
        for (number, break_it, mend) in breaks {
            let mut st = arena.shared().state.lock();
            break_it(&mut st);
            let broken = st.check_invariants().expect_err("a broken counter passed");
            mend(&mut st);
            drop(st);
            assert!(
                broken.starts_with(number),
                "{number} expected, got {broken}"
            );
            assert_eq!(arena.check_invariants(), Ok(()));
        }
    }
}

/// Labels in the order a person reads them: runs of digits compare as numbers, so
/// "array 2" comes before "array 10" (the summary's ties are listed this way).
pub(crate) fn natural_order(a: &str, b: &str) -> std::cmp::Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.first(), b.first()) {
            (None, None) => return std::cmp::Ordering::Equal,
            (None, Some(_)) => return std::cmp::Ordering::Less,
            (Some(_), None) => return std::cmp::Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let digits = |s: &[u8]| s.iter().take_while(|c| c.is_ascii_digit()).count();
                let (na, nb) = (digits(a), digits(b));
                let trim = |s: &[u8]| -> usize { s.iter().take_while(|&&c| c == b'0').count() };
                let (da, db) = (
                    &a[trim(&a[..na]).min(na)..na],
                    &b[trim(&b[..nb]).min(nb)..nb],
                );
                let by_value = da.len().cmp(&db.len()).then(da.cmp(db)).then(na.cmp(&nb));
                if by_value != std::cmp::Ordering::Equal {
                    return by_value;
                }
                a = &a[na..];
                b = &b[nb..];
            }
            (Some(x), Some(y)) => {
                if x != y {
                    return x.cmp(y);
                }
                a = &a[1..];
                b = &b[1..];
            }
        }
    }
}

#[cfg(test)]
mod order_tests {
    use super::natural_order;

    #[test]
    fn labels_sort_as_a_person_reads_them() {
        let mut labels = vec![
            "array 10", "array 2", "array 1", "b", "array 02", "a10b", "a9b",
        ];
        labels.sort_by(|a, b| natural_order(a, b));
        assert_eq!(
            labels,
            vec!["a9b", "a10b", "array 1", "array 2", "array 02", "array 10", "b"]
        );
    }
}
