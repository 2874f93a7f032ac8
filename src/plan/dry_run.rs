//! What a dry run reports ([`DryRun`]), and the bisection behind `Runtime::max_batch`
//! ([`MaxBatch`]). See the module docs of [`crate::plan`].

use crate::arena::{MemoryHistory, PoolStats};
use crate::{fmt_bytes, Arena, Error, Result};

/// One label's peak in a dry run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelPeak {
    /// The label given at allocation.
    pub label: String,
    /// The most bytes live under it at once.
    pub peak_bytes: u64,
}

/// What a dry run of your code needs: see [`crate::Runtime::dry_run`].
///
/// ```no_run
/// # fn main() -> vramkit::Result<()> {
/// let rt = vramkit::Runtime::headless()?;
/// let run = rt.dry_run(|rt| {
///     let x = rt.alloc::<f32>(1 << 28, "x")?; // 1 GiB: no memory is taken
///     let y = rt.alloc::<f32>(1 << 28, "y")?;
///     let mut batch = rt.batch();
///     batch.axpy(2.0, &x, &y)?; // checked, not recorded
///     batch.submit()?;
///     Ok(())
/// })?;
/// assert!(run.peak_allocated >= 2 << 30);
/// println!("{run}");
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct DryRun<R> {
    /// What your closure returned.
    pub value: R,
    /// The most bytes in live allocations at once (exactly a real run's).
    pub peak_allocated: u64,
    /// The most bytes held in blocks at once (see the module docs for how it compares to
    /// a real run's).
    pub peak_reserved: u64,
    /// Allocations made.
    pub allocations: u64,
    /// Per label, largest peak first.
    pub per_label: Vec<LabelPeak>,
    /// Per pool (the kernels' parameter pool among them).
    pub per_pool: Vec<PoolStats>,
    /// Every allocation, free and block of the run (the newest
    /// [`HistoryConfig::default`](crate::arena::HistoryConfig) capacity of them).
    pub history: MemoryHistory,
}

impl<R> DryRun<R> {
    /// Reads the report off a dry run's arena after the closure returned `value`.
    pub(crate) fn collect(arena: &Arena, value: R) -> Result<DryRun<R>> {
        let stats = arena.stats();
        let mut per_label: Vec<LabelPeak> = stats
            .per_label
            .iter()
            .map(|(label, l)| LabelPeak {
                label: label.clone(),
                peak_bytes: l.peak_bytes,
            })
            .collect();
        per_label.sort_by(|a, b| b.peak_bytes.cmp(&a.peak_bytes).then(a.label.cmp(&b.label)));
        let history = arena.history().ok_or_else(|| {
            Error::invalid(
                "the dry run's memory history was turned off while it ran",
                "do not call Arena::record_history(None) inside a dry run",
            )
        })?;
        Ok(DryRun {
            value,
            peak_allocated: stats.peak_allocated,
            peak_reserved: stats.peak_reserved,
            allocations: stats.allocations,
            per_label,
            per_pool: arena.pool_stats(),
            history,
        })
    }
}

impl<R> std::fmt::Display for DryRun<R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "dry run: {} allocations, peak allocated {}, peak reserved {}",
            self.allocations,
            fmt_bytes(self.peak_allocated),
            fmt_bytes(self.peak_reserved)
        )?;
        // A pool's ranges hold live bytes and freed ranges not yet reused (the GPU may
        // still read them), so their peak can pass the peak allocated: say so.
        for p in &self.per_pool {
            writeln!(
                f,
                "  pool {:<16} peak reserved {:>12}  peak held (live + freed, not yet reused) {:>12}",
                p.pool,
                fmt_bytes(p.peak_reserved),
                fmt_bytes(p.peak_in_ranges)
            )?;
        }
        for l in &self.per_label {
            writeln!(
                f,
                "  label {:<24} peak {:>12}",
                l.label,
                fmt_bytes(l.peak_bytes)
            )?;
        }
        Ok(())
    }
}

/// The answer of [`crate::Runtime::max_batch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaxBatch {
    /// The largest batch whose dry run fits: peak reserved + `margin` <= `budget`.
    pub batch: usize,
    /// Its dry run's peak reserved bytes.
    pub peak_reserved: u64,
    /// Its dry run's peak allocated bytes.
    pub peak_allocated: u64,
    /// The budget asked for.
    pub budget: u64,
    /// The safety margin kept free under the budget.
    pub margin: u64,
    /// Every probe as (batch, peak reserved; `None` when the dry run ran out of memory),
    /// in the order tried.
    pub probes: Vec<(usize, Option<u64>)>,
}

impl std::fmt::Display for MaxBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max batch {}: peak reserved {} + margin {} within a budget of {} ({} dry runs)",
            self.batch,
            fmt_bytes(self.peak_reserved),
            fmt_bytes(self.margin),
            fmt_bytes(self.budget),
            self.probes.len()
        )
    }
}

/// Bisects `lo..=hi` for the largest batch whose `probe` (peak reserved, peak allocated;
/// `None`: out of memory) fits `budget - margin`, assuming the peak does not fall as the
/// batch grows: the smallest batch first (if it does not fit, nothing does), then the
/// largest (often all fit), then halves.
pub(crate) fn search_max_batch(
    lo: usize,
    hi: usize,
    budget: u64,
    margin: u64,
    mut probe: impl FnMut(usize) -> Result<Option<(u64, u64)>>,
) -> Result<MaxBatch> {
    if lo == 0 || lo > hi {
        return Err(Error::invalid(
            format!("a batch range of {lo}..={hi}"),
            "pass a non-empty range of batch sizes starting at 1 or more, e.g. 1..=4096",
        ));
    }
    if margin >= budget {
        return Err(Error::invalid(
            format!(
                "a safety margin of {} under a budget of {}",
                fmt_bytes(margin),
                fmt_bytes(budget)
            ),
            "keep the margin a small part of the budget (Runtime::max_batch uses 1/32)",
        ));
    }
    let limit = budget - margin;
    let mut probes = Vec::new();
    let mut fits = |batch: usize, probes: &mut Vec<(usize, Option<u64>)>| -> Result<_> {
        let peaks = probe(batch)?;
        probes.push((batch, peaks.map(|p| p.0)));
        Ok(peaks.filter(|p| p.0 <= limit))
    };
    let Some(mut best) = fits(lo, &mut probes)? else {
        let need = probes[0].1;
        return Err(Error::invalid(
            format!(
                "even a batch of {lo} does not fit: it reserves {} where the budget of {} \
                 less a margin of {} leaves {}",
                need.map_or_else(|| "more than the device allows".to_string(), fmt_bytes),
                fmt_bytes(budget),
                fmt_bytes(margin),
                fmt_bytes(limit)
            ),
            "raise the budget, lower the smallest batch, or cut the memory one sample needs",
        ));
    };
    let mut best_batch = lo;
    let (mut ok, mut bad) = (lo, hi + 1);
    if hi > lo {
        match fits(hi, &mut probes)? {
            Some(p) => {
                best = p;
                best_batch = hi;
                ok = hi;
            }
            None => bad = hi,
        }
    }
    // Invariant: `ok` fits, `bad` does not (or lies past the range).
    while bad - ok > 1 {
        let mid = ok + (bad - ok) / 2;
        match fits(mid, &mut probes)? {
            Some(p) => {
                best = p;
                best_batch = mid;
                ok = mid;
            }
            None => bad = mid,
        }
    }
    Ok(MaxBatch {
        batch: best_batch,
        peak_reserved: best.0,
        peak_allocated: best.1,
        budget,
        margin,
        probes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A peak that is a known function of the batch: the search lands on the largest
    /// batch under the limit, in O(log n) probes, for every budget.
    #[test]
    fn bisection_finds_the_largest_fitting_batch() {
        let need = |b: usize| 1000 + 37 * b as u64 + (b as u64 % 3);
        for budget in [1_100u64, 5_000, 40_000, 1 << 20] {
            let margin = budget / 32;
            let r = search_max_batch(1, 1000, budget, margin, |b| Ok(Some((need(b), need(b)))));
            let limit = budget - margin;
            match r {
                Ok(m) => {
                    assert!(need(m.batch) <= limit);
                    assert!(m.batch == 1000 || need(m.batch + 1) > limit, "{m:?}");
                    assert!(m.probes.len() <= 2 + 10, "{} probes", m.probes.len());
                }
                Err(_) => assert!(need(1) > limit),
            }
        }
    }

    #[test]
    fn out_of_memory_probes_do_not_fit_and_bad_ranges_are_errors() {
        let m = search_max_batch(
            1,
            64,
            1 << 30,
            0,
            |b| Ok((b <= 20).then_some((b as u64, 1))),
        )
        .unwrap();
        assert_eq!(m.batch, 20);
        assert!(search_max_batch(0, 4, 100, 1, |_| Ok(Some((1, 1)))).is_err());
        assert!(search_max_batch(5, 4, 100, 1, |_| Ok(Some((1, 1)))).is_err());
        assert!(search_max_batch(1, 4, 100, 100, |_| Ok(Some((1, 1)))).is_err());
    }
}
