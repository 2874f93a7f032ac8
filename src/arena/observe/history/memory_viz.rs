//! The arena as a PyTorch memory snapshot: the pickle that `torch.cuda.memory._snapshot()`
//! returns and that PyTorch's memory_viz page (pytorch.org/memory_viz) and
//! `python -m torch.cuda._memory_viz` open.
//!
//! # The mapping
//! - Each block of the arena's pools is a **segment** of device 0 (`segment_type` "large"
//!   for dedicated blocks and blocks of 1 MiB or more), its ranges in order as the
//!   segment's **blocks**: live allocations `active_allocated`, freed ranges the GPU may
//!   still use `active_pending_free`, the rest `inactive`. Blocks tile their segment, as
//!   memory_viz requires.
//! - The memory history, when recording ([`Arena::record_history`]), is the device's
//!   **trace**: `alloc` for each allocation (cached or not), `free_requested` and
//!   `free_completed` for each free (memory_viz shows the pair as one `free`),
//!   `segment_alloc` and `segment_free` for blocks, `oom` for a refused request, with
//!   `time_us` since recording started.
//! - **Addresses** are made up (the GPU has none to give): block `b` of pool `p` starts at
//!   `2^32 + (p * blocks + b) * stride`, the stride a power of two above the largest block,
//!   so that every range has one address for the whole snapshot; all below 2^53, exact in
//!   the page's JavaScript numbers.
//! - **Frames**: one frame per allocation, its label as the function name and the arena
//!   and pool as the file, in place of PyTorch's stack (memory_viz shows it on hover).

use super::pickle::{to_pickle, Value};
use super::EventKind;
use crate::arena::observe::report::device_blocks;
use crate::arena::Arena;

/// The lowest address handed out.
const BASE: u64 = 1 << 32;

impl Arena {
    /// The arena as a PyTorch memory snapshot (see the module docs of
    /// `arena::history::memory_viz`): its blocks and ranges now and, while recording, the
    /// history's events, taken under one acquisition of the arena's lock so the two agree.
    ///
    /// ```no_run
    /// use vramkit::arena::HistoryConfig;
    /// let gpu = vramkit::Gpu::headless()?;
    /// let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// arena.record_history(Some(HistoryConfig::default()));
    /// let a = arena.alloc(1 << 20, "activations")?;
    /// std::fs::write("snapshot.pickle", arena.memory_viz_snapshot())?; // pytorch.org/memory_viz
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn memory_viz_snapshot(&self) -> Vec<u8> {
        let shared = self.shared();
        let arena = shared.config.name.clone();
        let st = shared.state.lock();
        let blocks = device_blocks(&st);
        let pools: Vec<String> = st.pools.iter().map(|p| p.name.clone()).collect();
        let labels: Vec<String> = st.label_stats.iter().map(|(l, _)| l.to_string()).collect();
        let events = st
            .history
            .as_ref()
            .map(|h| h.events().collect::<Vec<_>>())
            .unwrap_or_default();
        let budget = st.budget;
        let reserved = st.reserved();
        drop(st);

        // Addresses: one slot per (pool, block) seen now or in the trace.
        let pool_index = |name: &str| pools.iter().position(|p| p == name).unwrap_or(0) as u64;
        let mut largest = 1u64 << 21;
        let mut most_blocks = 1u64;
        for (_, block, size, _, _) in &blocks {
            largest = largest.max(*size);
            most_blocks = most_blocks.max(u64::from(*block) + 1);
        }
        for e in &events {
            if matches!(e.kind, EventKind::BlockCreate | EventKind::BlockRelease) {
                largest = largest.max(e.size);
            }
            most_blocks = most_blocks.max(u64::from(e.block) + 1);
        }
        let stride = largest.next_power_of_two();
        let address =
            |pool: u64, block: u32| BASE + (pool * most_blocks + u64::from(block)) * stride;
        let frames = |label: &str, pool: &str, id: Option<u64>| {
            Value::List(vec![Value::Dict(vec![
                (
                    "filename",
                    Value::Str(format!("vramkit arena '{arena}' pool '{pool}'")),
                ),
                ("line", int(id.unwrap_or(0))),
                ("name", Value::Str(label.to_string())),
            ])])
        };

        let mut segments = Vec::new();
        for (pool, block, size, dedicated, ranges) in &blocks {
            let base = address(pool_index(pool), *block);
            let mut allocated = 0;
            let mut active = 0;
            let mut seg_blocks = Vec::new();
            for r in ranges {
                let state = match r.kind {
                    "live" => {
                        allocated += r.size;
                        active += r.size;
                        "active_allocated"
                    }
                    "pending" => {
                        active += r.size;
                        "active_pending_free"
                    }
                    _ => "inactive",
                };
                let block_frames = if r.kind == "free" {
                    Value::List(Vec::new())
                } else {
                    frames(&r.label, pool, r.id)
                };
                seg_blocks.push(Value::Dict(vec![
                    ("address", int(base + r.offset)),
                    ("size", int(r.size)),
                    ("requested_size", int(r.size)),
                    ("state", Value::Str(state.into())),
                    ("frames", block_frames),
                ]));
            }
            let large = *dedicated || *size >= 1 << 20;
            segments.push(Value::Dict(vec![
                ("device", int(0)),
                ("address", int(base)),
                ("total_size", int(*size)),
                ("allocated_size", int(allocated)),
                ("active_size", int(active)),
                ("requested_size", int(allocated)),
                ("stream", int(0)),
                (
                    "segment_type",
                    Value::Str(if large { "large" } else { "small" }.into()),
                ),
                ("segment_pool_id", Value::Tuple(vec![int(0), int(0)])),
                ("is_expandable", Value::Bool(false)),
                ("frames", Value::List(Vec::new())),
                ("blocks", Value::List(seg_blocks)),
            ]));
        }

        let mut trace = Vec::with_capacity(events.len() * 2);
        for e in &events {
            let pool = pools.get(e.pool as usize).map_or("", String::as_str);
            let label = labels.get(e.label as usize).map_or("", String::as_str);
            let base = address(u64::from(e.pool), e.block);
            let event = |action: &str, addr: u64, extra: Vec<(&'static str, Value)>| {
                let mut fields = vec![
                    ("action", Value::Str(action.into())),
                    ("addr", int(addr)),
                    ("size", int(e.size)),
                    ("stream", int(0)),
                    ("time_us", int(e.t_ns / 1000)),
                ];
                fields.extend(extra);
                Value::Dict(fields)
            };
            let with_frames = || vec![("frames", frames(label, pool, Some(e.id)))];
            match e.kind {
                EventKind::Alloc | EventKind::Reuse => {
                    trace.push(event("alloc", base + e.offset, with_frames()))
                }
                EventKind::Free => {
                    trace.push(event("free_requested", base + e.offset, with_frames()));
                    trace.push(event("free_completed", base + e.offset, with_frames()));
                }
                EventKind::BlockCreate => trace.push(event("segment_alloc", base, Vec::new())),
                EventKind::BlockRelease => trace.push(event("segment_free", base, Vec::new())),
                EventKind::Failed => {
                    let free = budget.map_or(0, |b| b.saturating_sub(reserved));
                    trace.push(event("oom", 0, vec![("device_free", int(free))]));
                }
                EventKind::Evict | EventKind::Restore | EventKind::Move => {}
            }
        }

        to_pickle(&Value::Dict(vec![
            ("segments", Value::List(segments)),
            ("device_traces", Value::List(vec![Value::List(trace)])),
        ]))
    }

    /// Writes [`memory_viz_snapshot`](Self::memory_viz_snapshot) to `path`.
    pub fn write_memory_viz_snapshot(
        &self,
        path: impl AsRef<std::path::Path>,
    ) -> crate::Result<()> {
        let path = path.as_ref();
        std::fs::write(path, self.memory_viz_snapshot()).map_err(|e| crate::Error::Io {
            during: format!("writing the memory_viz snapshot to {}", path.display()),
            source: e,
        })
    }
}

fn int(v: u64) -> Value {
    Value::Int(i64::try_from(v).unwrap_or(i64::MAX))
}
