//! The label table: each distinct label an allocation was given, interned once, with its
//! live count, live bytes and peak, for statistics, summaries, dumps and out-of-memory
//! reports.
//!
//! # How it works
//! A label is interned under the arena's lock into an index of `State::label_stats`; the
//! hot path compares with the label interned last and hashes only a different one, and
//! counts by index, so a free never hashes.
//!
//! A server that labels each request differently would grow the table by one entry per
//! allocation forever. So once the table reaches [`LABELS_KEPT`] entries with no index
//! free, the next new label *sweeps* it: every label with nothing live is folded away
//! (its text and index go; its peak joins [`Folded`]), except the [`PEAKS_KEPT`] with
//! the largest peaks, which the summary still lists. Folded indices serve the next new
//! labels. The next sweep comes when the table is twice the size of what the last one
//! kept (at least [`LABELS_KEPT`]), so sweeping costs O(1) per new label amortised.
//!
//! # What it promises
//! - **Bounded**: with nothing live, at most `2 * LABELS_KEPT` labels are held, and the
//!   summary prints at most a screenful of them; more labels than that are held only while
//!   that many distinct labels are live at once.
//! - **A live label stays**: a label with a live allocation is never folded, so
//!   [`Allocation::label`](super::Allocation::label) can lend its text for as long as
//!   the handle lives.
//! - **Nothing folds while a memory history records**: its events refer to labels by
//!   index ([`super::Arena::record_history`]), and folding would rename them.
//! - A label folded away and used again starts afresh (count, bytes and peak).

use std::ptr::NonNull;
use std::sync::Arc;

use super::state::{LabelStats, State};

/// How many labels the table holds before it folds those with nothing live.
pub const LABELS_KEPT: usize = 1024;

/// How many labels with nothing live, the largest peaks, a sweep keeps.
pub const PEAKS_KEPT: usize = 32;

/// Labels folded away because nothing was live under them (see the module docs of the
/// label table).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Folded {
    /// How many were folded.
    pub labels: u64,
    /// The largest peak of live bytes among them.
    pub peak_bytes: u64,
}

/// `a == b`, compared eight bytes at a time in line: labels are short, and the library's
/// `memcmp` call cost more than the comparison on every allocation.
#[inline]
fn same_text(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    for (p, q) in x.by_ref().zip(y.by_ref()) {
        if p != q {
            return false;
        }
    }
    x.remainder().iter().zip(y.remainder()).all(|(p, q)| p == q)
}

impl State {
    /// The index of `label` in `label_stats`.
    #[inline]
    pub fn intern(&mut self, label: &str) -> u32 {
        if let Some((l, _)) = self.label_stats.get(self.last_label as usize) {
            if same_text(l, label) {
                return self.last_label;
            }
        }
        self.intern_other(label)
    }

    /// [`intern`](Self::intern) for a label other than the last one.
    #[inline(never)]
    fn intern_other(&mut self, label: &str) -> u32 {
        let i = match self.labels.get(label) {
            Some(&i) => i,
            None => {
                if self.free_labels.is_empty()
                    && self.label_stats.len() >= self.label_sweep_at
                    && self.history.is_none()
                {
                    self.fold_labels();
                }
                let k: Arc<str> = Arc::from(label);
                let i = match self.free_labels.pop() {
                    Some(i) => {
                        self.label_stats[i as usize] = (k.clone(), LabelStats::default());
                        i
                    }
                    None => {
                        self.label_stats.push((k.clone(), LabelStats::default()));
                        (self.label_stats.len() - 1) as u32
                    }
                };
                self.labels.insert(k, i);
                i
            }
        };
        self.last_label = i;
        i
    }

    /// Folds every label with nothing live but the [`PEAKS_KEPT`] largest peaks (see the
    /// module docs). Runs only with no index free, so no folded entry is folded twice.
    #[cold]
    fn fold_labels(&mut self) {
        let mut dead: Vec<(u64, u32)> = self
            .label_stats
            .iter()
            .enumerate()
            .filter(|(_, (_, l))| l.count == 0)
            .map(|(i, (_, l))| (l.peak_bytes, i as u32))
            .collect();
        dead.sort_unstable_by(|a, b| b.cmp(a));
        let empty: Arc<str> = Arc::from("");
        for &(peak, i) in dead.iter().skip(PEAKS_KEPT) {
            let (text, _) = std::mem::replace(
                &mut self.label_stats[i as usize],
                (empty.clone(), LabelStats::default()),
            );
            self.labels.remove(&text);
            self.folded_labels.labels += 1;
            self.folded_labels.peak_bytes = self.folded_labels.peak_bytes.max(peak);
            self.free_labels.push(i);
            if i == self.last_label {
                self.last_label = u32::MAX;
            }
        }
        let kept = self.label_stats.len() - self.free_labels.len();
        self.label_sweep_at = (2 * kept).max(LABELS_KEPT);
    }

    /// The text of label `index`. A label with a live allocation is never folded (module
    /// docs), and each text is an `Arc<str>` of its own: the text stays where it is while
    /// an allocation under it lives. Empty for an unknown index.
    pub fn label_text(&self, index: u32) -> NonNull<str> {
        NonNull::from(
            self.label_stats
                .get(index as usize)
                .map_or("", |(l, _)| &**l),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::same_text;

    #[test]
    fn same_text_agrees_with_equality() {
        let words = [
            "",
            "a",
            "ab",
            "abcdefg",
            "abcdefgh",
            "abcdefghi",
            "abcdefgH",
            "request 12345678",
        ];
        for a in words {
            for b in words {
                assert_eq!(same_text(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }
}
