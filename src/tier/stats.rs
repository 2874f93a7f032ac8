//! `TierStats`: what the tiers hold and what they have moved.

use std::time::Duration;

use super::{Place, TierShared, Tiers};
use crate::arena::HostBlockDump;
use crate::fmt_bytes;

/// A snapshot of the tiers ([`Tiers::stats`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct TierStats {
    /// Live movable allocations.
    pub movables: usize,
    /// Bytes of movables on the device (also counted by the arena, under their labels).
    pub device_bytes: u64,
    /// Bytes of movables in host memory.
    pub host_bytes: u64,
    /// Bytes of host memory held by the host tier (evicted bytes plus free room in its
    /// blocks).
    pub host_reserved: u64,
    /// The host tier's budget.
    pub host_budget: Option<u64>,
    /// Host blocks held.
    pub host_blocks: usize,
    /// Movables pinned by a live guard.
    pub pinned: usize,
    /// Evictions so far (device to host).
    pub evictions: u64,
    /// Of those, asked for by the arena's allocation path under pressure (the rest were
    /// asked for by hand).
    pub pressure_evictions: u64,
    /// Restores so far (host to device).
    pub restores: u64,
    /// Bytes moved device to host.
    pub bytes_evicted: u64,
    /// Bytes moved host to device.
    pub bytes_restored: u64,
    /// Moves made by defragmentation.
    pub defrag_moves: u64,
    /// Bytes moved by defragmentation (device to device).
    pub bytes_defrag_moved: u64,
    /// Time `make_resident` calls spent bringing allocations back (allocating room,
    /// evicting others, queuing copies, waiting for another thread's move).
    pub restore_stall: Duration,
    /// Evictions refused because the host budget was full.
    pub host_full: u64,
    /// Host blocks are ordinary wgpu buffers (not Vulkan: no host memory the GPU copies
    /// directly).
    pub plain_host_blocks: bool,
}

impl TierStats {
    /// The lines of [`Display`](std::fmt::Display) and of the arena's summary.
    fn lines(&self) -> Vec<String> {
        let s = self;
        let budget = s
            .host_budget
            .map_or_else(|| "unlimited".to_string(), fmt_bytes);
        let mut lines = vec![
            format!(
                "tiers: {} movables ({} pinned), on the device {}, on the host {}",
                s.movables,
                s.pinned,
                fmt_bytes(s.device_bytes),
                fmt_bytes(s.host_bytes)
            ),
            format!(
                "host tier: reserved {} in {} blocks, budget {}{}",
                fmt_bytes(s.host_reserved),
                s.host_blocks,
                budget,
                if s.plain_host_blocks {
                    " (plain wgpu buffers on this backend)"
                } else {
                    ""
                }
            ),
            format!(
                "evictions {} ({}; {} under pressure)  restores {} ({})  defrag moves {} ({})",
                s.evictions,
                fmt_bytes(s.bytes_evicted),
                s.pressure_evictions,
                s.restores,
                fmt_bytes(s.bytes_restored),
                s.defrag_moves,
                fmt_bytes(s.bytes_defrag_moved)
            ),
        ];
        if s.host_full > 0 || !s.restore_stall.is_zero() {
            lines.push(format!(
                "restore stall {:.3} s  evictions refused by the host budget {}",
                s.restore_stall.as_secs_f64(),
                s.host_full
            ));
        }
        lines
    }
}

/// Three or four lines: the movables and where they are, the host tier, the moves so
/// far, and stalls or refusals when there were any (the tiers' part of the arena's
/// summary).
///
/// ```no_run
/// # let rt = vramkit::Runtime::headless()?;
/// # let tiers = vramkit::tier::Tiers::new(rt.arena(), Default::default())?;
/// println!("{}", tiers.stats());
/// # Ok::<(), vramkit::Error>(())
/// ```
impl std::fmt::Display for TierStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.lines().join("\n"))
    }
}

impl TierShared {
    pub(super) fn stats(&self) -> TierStats {
        let st = self.state.lock();
        let mut s = TierStats {
            host_bytes: st.host.allocated(),
            host_reserved: st.host.reserved(),
            host_budget: st.host.budget(),
            host_blocks: st.host.blocks(),
            plain_host_blocks: st.host.plain_blocks,
            evictions: st.counters.evictions,
            pressure_evictions: st.counters.pressure_evictions,
            restores: st.counters.restores,
            bytes_evicted: st.counters.bytes_evicted,
            bytes_restored: st.counters.bytes_restored,
            defrag_moves: st.counters.defrag_moves,
            bytes_defrag_moved: st.counters.bytes_defrag_moved,
            restore_stall: st.counters.stall,
            host_full: st.counters.host_full,
            ..Default::default()
        };
        for e in st.entries.iter().flatten().filter(|e| !e.dropped) {
            s.movables += 1;
            if matches!(e.place, Place::Device(_)) {
                s.device_bytes += e.size;
            }
            if e.pins > 0 {
                s.pinned += 1;
            }
        }
        s
    }
}

impl TierShared {
    /// The tier section of the arena's summary.
    pub(super) fn summary_lines(&self) -> Vec<String> {
        self.stats().lines()
    }

    /// The host blocks with their evicted ranges, for the arena's dumps.
    pub(super) fn host_blocks(&self) -> Vec<HostBlockDump> {
        let st = self.state.lock();
        let mut blocks: Vec<HostBlockDump> = st
            .host
            .block_sizes()
            .map(|(block, size)| HostBlockDump {
                block,
                size,
                ranges: Vec::new(),
            })
            .collect();
        for e in st.entries.iter().flatten() {
            if let Place::Host(r) = &e.place {
                if let Some(b) = blocks.iter_mut().find(|b| b.block == r.placed.block.0) {
                    b.ranges.push((r.offset(), e.size, e.label.to_string()));
                }
            }
        }
        blocks
    }
}

impl Tiers {
    /// The tiers' own lines (movables, the host tier, evictions, restores, moves): the
    /// section [`Arena::summary`](crate::Arena::summary) prints about them, without the
    /// arena's tables.
    pub fn summary(&self) -> String {
        self.stats().to_string()
    }
}
