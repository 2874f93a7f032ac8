//! The growth watch: an owner whose bytes grow frame after frame with nothing dropped.
//!
//! At each [`end_frame`](super::Ledger::end_frame) every app owner's counters are compared
//! with the frame before. A frame in which the owner made resources and grew, and dropped
//! none, extends its streak; a frame in which it dropped anything ends the streak; a frame
//! with no change leaves it, and [`QUIET_FRAMES`] of those in a row end it (a loader that
//! filled its cache and stopped). A streak of [`GROWTH_FRAMES`] names the owner.

use crate::gpu::accounts::{Part, Streak};
use crate::{fmt_bytes, Gpu};

/// Frames of growth with nothing dropped before an owner is named.
pub const GROWTH_FRAMES: u32 = 3;

/// Frames with no change that end a streak.
pub const QUIET_FRAMES: u32 = 60;

/// An owner the growth watch names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Growth {
    /// The owner.
    pub owner: String,
    /// Frames that grew with nothing dropped.
    pub frames: u32,
    /// Bytes those frames added.
    pub grown_bytes: u64,
    /// The owner's bytes now.
    pub bytes: u64,
    /// Resources the owner holds now.
    pub held: u64,
}

impl std::fmt::Display for Growth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "'{}' grew by {} in {} frames with nothing dropped ({} in {} resources now)",
            self.owner,
            fmt_bytes(self.grown_bytes),
            self.frames,
            fmt_bytes(self.bytes),
            self.held
        )
    }
}

/// One frame of the watch (see the module docs).
pub(super) fn end_frame(gpu: &Gpu) -> Vec<Growth> {
    let mut watch = gpu.accounts().growth.lock();
    let readings = gpu.accounts().readings();
    let mut growing = Vec::new();
    let mut seen = Vec::with_capacity(readings.len());
    for r in readings.iter().filter(|r| r.part == Part::App) {
        seen.push(r.name.as_str());
        let s = watch.entry(r.name.clone()).or_insert_with(|| Streak {
            // First seen this frame: what it holds now is this frame's growth.
            bytes: 0,
            created: r.created.saturating_sub(r.held),
            dropped: r.dropped,
            ..Streak::default()
        });
        let dropped = r.dropped > s.dropped;
        let grew = r.bytes > s.bytes && r.created > s.created;
        if dropped {
            s.frames = 0;
            s.grown = 0;
            s.quiet = 0;
            s.warned = false;
        } else if grew {
            s.frames += 1;
            s.grown += r.bytes - s.bytes;
            s.quiet = 0;
        } else if r.bytes == s.bytes {
            s.quiet += 1;
            if s.quiet >= QUIET_FRAMES {
                s.frames = 0;
                s.grown = 0;
                s.warned = false;
            }
        }
        s.bytes = r.bytes;
        s.created = r.created;
        s.dropped = r.dropped;
        if s.frames >= GROWTH_FRAMES {
            let g = Growth {
                owner: r.name.clone(),
                frames: s.frames,
                grown_bytes: s.grown,
                bytes: r.bytes,
                held: r.held,
            };
            if !s.warned {
                s.warned = true;
                log::warn!("vramkit ledger on {}: {g}", gpu.info().name);
            }
            growing.push(g);
        }
    }
    // Owners closed since (nothing holds them) leave the watch.
    watch.retain(|name, _| seen.contains(&name.as_str()));
    drop(watch);
    growing
}

/// The owners named at the last [`end_frame`], as they stood then.
pub(super) fn named(gpu: &Gpu) -> Vec<Growth> {
    let watch = gpu.accounts().growth.lock();
    let mut out: Vec<Growth> = watch
        .iter()
        .filter(|(_, s)| s.frames >= GROWTH_FRAMES)
        .map(|(name, s)| Growth {
            owner: name.clone(),
            frames: s.frames,
            grown_bytes: s.grown,
            bytes: s.bytes,
            held: s.created.saturating_sub(s.dropped),
        })
        .collect();
    out.sort_by_key(|g| std::cmp::Reverse(g.grown_bytes));
    out
}
