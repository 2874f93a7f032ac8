//! Who gets to be sharp: the streamer's plan for one frame, pure CPU (no wgpu).
//!
//! Each texture holds the levels `[resident, levels)`: `resident` is its finest level
//! (0: full resolution). The plan:
//! 1. **Targets under the budget, by benefit per byte**: every texture starts at its
//!    coarsest allowed level. Each step one level finer toward what the texture wants is
//!    worth `importance x 2^(levels still above the wanted one) / the level's bytes`: a
//!    coarse level of anything is worth more than the top level of one large texture, and
//!    between equal textures the more important goes first. Steps are taken best first
//!    while the total fits the budget; a texture whose next step does not fit takes no
//!    more (its later steps cost more). So one large texture cannot starve the rest, and
//!    what the budget cuts is the least visible textures' top levels.
//! 2. **Shrinks now**: a texture whose target is coarser than what it holds drops levels
//!    this frame (no upload, memory back at once).
//! 3. **Growths under the upload cap**: textures that want finer levels grow in order of
//!    importance, each as far toward its target as the bytes left under this frame's cap
//!    allow (whole levels; the cap is checked against the largest level at registration,
//!    so every level fits a frame of its own).
//!
//! 4. **Shrinks only as far as the budget needs**: a texture the targets would shrink keeps
//!    as many of its levels as the budget has room for, most important first.
//!    Replacing a texture to give back memory nobody asked for costs a copy and the frame
//!    thread's time (a camera that turns away would shrink dozens at once), and the levels
//!    are there if the view comes back.
//!
//! What the plan promises: the total at the frame's end is within the budget (shrinks
//! come first, growths never go past the targets, and a shrink is skipped only within the
//! budget), and the bytes uploaded are within the cap.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// One texture as the plan sees it.
#[derive(Clone, Debug)]
pub(crate) struct Entry<'a> {
    /// Bytes of each level of the full chain, finest first.
    pub level_bytes: &'a [u64],
    /// The finest level held now.
    pub resident: u32,
    /// The finest level the view wants.
    pub wanted: u32,
    /// The coarsest level it may hold (the chain's last, or the last block-aligned one).
    pub coarsest: u32,
    /// Larger goes first.
    pub importance: f32,
}

impl Entry<'_> {
    /// Bytes of the levels `[from, levels)`.
    pub fn bytes_from(&self, from: u32) -> u64 {
        self.level_bytes[from as usize..].iter().sum()
    }
}

/// The plan's answer: for each entry, the finest level to hold after this frame.
pub(crate) fn plan(entries: &[Entry], budget: u64, upload_cap: u64) -> Vec<u32> {
    let n = entries.len();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        entries[b]
            .importance
            .total_cmp(&entries[a].importance)
            .then(a.cmp(&b))
    });
    // 1. Targets: coarsest for all, then the best step per byte while it fits.
    let mut target: Vec<u32> = entries.iter().map(|e| e.coarsest).collect();
    let mut total: u64 = entries
        .iter()
        .zip(&target)
        .map(|(e, &t)| e.bytes_from(t))
        .sum();
    let mut steps: BinaryHeap<Step> = (0..n).filter_map(|i| step(entries, i, target[i])).collect();
    while let Some(s) = steps.pop() {
        let e = &entries[s.entry];
        let bytes = e.level_bytes[(target[s.entry] - 1) as usize];
        if total + bytes > budget {
            continue;
        }
        total += bytes;
        target[s.entry] -= 1;
        steps.extend(step(entries, s.entry, target[s.entry]));
    }
    // 2 and 3. Shrinks at once; growths as far as the cap allows, by importance.
    let mut out: Vec<u32> = entries.iter().map(|e| e.resident).collect();
    for i in 0..n {
        if target[i] > entries[i].resident {
            out[i] = target[i];
        }
    }
    let mut cap_left = upload_cap;
    for &i in &order {
        let e = &entries[i];
        let mut r = e.resident;
        while r > target[i] {
            let next = e.level_bytes[(r - 1) as usize];
            if next > cap_left {
                break;
            }
            cap_left -= next;
            r -= 1;
        }
        if r < e.resident {
            out[i] = r;
        }
    }
    // 4. Shrinks the budget does not need are skipped, most important first.
    let mut total: u64 = entries
        .iter()
        .zip(&out)
        .map(|(e, &l)| e.bytes_from(l))
        .sum();
    for &i in &order {
        let e = &entries[i];
        while out[i] > e.resident && total + e.level_bytes[(out[i] - 1) as usize] <= budget {
            total += e.level_bytes[(out[i] - 1) as usize];
            out[i] -= 1;
        }
    }
    out
}

/// A step one level finer for entry `entry`, and what it is worth.
struct Step {
    worth: f64,
    entry: usize,
}

impl PartialEq for Step {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Step {}
impl PartialOrd for Step {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Step {
    fn cmp(&self, other: &Self) -> Ordering {
        // Best first; ties to the lower index, so a plan is the same every frame.
        self.worth
            .total_cmp(&other.worth)
            .then(other.entry.cmp(&self.entry))
    }
}

/// Entry `i`'s next step from level `t`, if it wants one.
fn step(entries: &[Entry], i: usize, t: u32) -> Option<Step> {
    let e = &entries[i];
    if t == 0 || t <= e.wanted {
        return None;
    }
    let above = (t - 1 - e.wanted).min(60);
    let bytes = e.level_bytes[(t - 1) as usize].max(1) as f64;
    Some(Step {
        worth: f64::from(e.importance.max(f32::MIN_POSITIVE)) * (1u64 << above) as f64 / bytes,
        entry: i,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(side: u32, resident: u32, wanted: u32, importance: f32) -> Entry<'static> {
        let levels = 32 - side.leading_zeros();
        let level_bytes: Vec<u64> = (0..levels)
            .map(|l| u64::from((side >> l).max(1)).pow(2) * 4)
            .collect();
        // Leaked: a test's few entries live as long as it does.
        let level_bytes = Box::leak(level_bytes.into_boxed_slice());
        Entry {
            level_bytes,
            resident,
            wanted,
            coarsest: levels - 1,
            importance,
        }
    }

    fn total(entries: &[Entry], levels: &[u32]) -> u64 {
        entries
            .iter()
            .zip(levels)
            .map(|(e, &l)| e.bytes_from(l))
            .sum()
    }

    #[test]
    fn one_large_texture_cannot_starve_the_rest_and_the_budget_holds() {
        // One huge texture and nine small ones, all wanting full resolution, the huge one
        // ten times as important.
        let mut entries = vec![entry(4096, 12, 0, 10.0)];
        entries.extend((0..9).map(|_| entry(256, 8, 0, 1.0)));
        let small_full = entries[1].bytes_from(0);
        let budget = 9 * small_full + entries[0].bytes_from(2);
        let mut levels = plan(&entries, budget, u64::MAX);
        assert!(total(&entries, &levels) <= budget);
        // The small ones are sharp; the huge one got most of what was left, not its top.
        assert!(levels[1..].iter().all(|&l| l == 0), "{levels:?}");
        assert!(levels[0] >= 2 && levels[0] <= 4, "{levels:?}");
        // Halving the budget shrinks, never grows, and fits.
        for (e, l) in entries.iter_mut().zip(&levels) {
            e.resident = *l;
        }
        let before = levels.clone();
        levels = plan(&entries, budget / 2, u64::MAX);
        assert!(total(&entries, &levels) <= budget / 2);
        assert!(levels.iter().zip(&before).all(|(a, b)| a >= b));
    }

    #[test]
    fn between_equal_textures_the_more_important_is_at_least_as_sharp() {
        let entries: Vec<Entry> = (0..8).map(|i| entry(512, 9, 0, 1.0 + i as f32)).collect();
        let budget = entries[0].bytes_from(0) * 3;
        let levels = plan(&entries, budget, u64::MAX);
        assert!(total(&entries, &levels) <= budget);
        assert!(levels.windows(2).all(|w| w[1] <= w[0]), "{levels:?}");
    }

    #[test]
    fn a_texture_the_view_left_keeps_its_levels_until_the_budget_needs_them() {
        // Two textures held sharp; the view leaves the first (it wants its coarsest now).
        let mut entries: Vec<Entry> = (0..2).map(|_| entry(512, 0, 0, 1.0)).collect();
        entries[0].wanted = 9;
        entries[0].importance = 0.0;
        let room = 2 * entries[0].bytes_from(0);
        assert_eq!(plan(&entries, room, u64::MAX), vec![0, 0], "room for both");
        // Less room: the first gives back what the second needs, no more.
        let tight = entries[0].bytes_from(0) + entries[0].bytes_from(1);
        let levels = plan(&entries, tight, u64::MAX);
        assert!(total(&entries, &levels) <= tight);
        assert_eq!(levels, vec![1, 0]);
    }

    #[test]
    fn growth_stays_under_the_upload_cap_and_goes_by_importance() {
        let entries: Vec<Entry> = (0..4).map(|i| entry(512, 9, 0, i as f32)).collect();
        let cap = entries[0].level_bytes[2] + entries[0].level_bytes[1];
        let levels = plan(&entries, u64::MAX, cap);
        let uploaded: u64 = entries
            .iter()
            .zip(&levels)
            .map(|(e, &l)| e.bytes_from(l) - e.bytes_from(e.resident))
            .sum();
        assert!(uploaded <= cap, "{uploaded} > {cap}");
        // The most important texture (the last) went first and furthest.
        assert!(levels[3] <= levels[0], "{levels:?}");
        assert!(levels[3] < 9);
    }
}
