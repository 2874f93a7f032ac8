//! The history as a Chrome trace / Perfetto JSON (the Trace Event Format): opens in
//! ui.perfetto.dev and `chrome://tracing`.
//!
//! Process 1 is the arena: one async slice per allocation (alloc to free, named by its
//! label, with size, pool, block and offset), a counter track of allocated and reserved
//! bytes, and instant events for blocks created and released. Process 2 is the GPU: one
//! slice per measured span. Timestamps are microseconds since recording started.

use std::fmt::Write;

use rustc_hash::FxHashMap;

use super::{EventKind, MemoryHistory};
use crate::arena::observe::report::json_escape;

impl MemoryHistory {
    /// The history as Trace Event Format JSON (see the module docs of `arena::history`).
    /// The top-level object also carries `"vramkit"`: the labels, the ids live at the
    /// copy and the number of events that fell out of the ring.
    pub fn to_chrome_trace(&self) -> String {
        let us = |ns: u64| ns as f64 / 1e3;
        let mut ev: Vec<String> = Vec::with_capacity(2 * self.events.len() + 8);
        let meta = |pid: u32, tid: Option<u32>, what: &str, name: &str| {
            let tid = tid.map_or(String::new(), |t| format!(",\"tid\":{t}"));
            format!(
                "{{\"ph\":\"M\",\"pid\":{pid}{tid},\"name\":\"{what}\",\"args\":{{\"name\":\"{}\"}}}}",
                json_escape(name)
            )
        };
        ev.push(meta(
            1,
            None,
            "process_name",
            &format!("vramkit arena '{}'", self.arena),
        ));
        ev.push(meta(1, Some(1), "thread_name", "allocations"));
        ev.push(meta(1, Some(2), "thread_name", "blocks"));
        ev.push(meta(2, None, "process_name", "GPU"));
        ev.push(meta(
            2,
            Some(1),
            "thread_name",
            "kernels, uploads, downloads",
        ));
        // The category of each allocation whose begin is in the ring, so its end matches.
        let begun: FxHashMap<u64, &str> = self
            .events
            .iter()
            .filter_map(|e| match e.kind {
                EventKind::Alloc => Some((e.id, "alloc")),
                EventKind::Reuse => Some((e.id, "reuse")),
                _ => None,
            })
            .collect();
        self.replay(|state| {
            let Some(e) = state.event else {
                return;
            };
            let label = self.labels.get(e.label as usize).map_or("", String::as_str);
            let pool = self.pools.get(e.pool as usize).map_or("", String::as_str);
            let args = format!(
                "\"args\":{{\"size\":{},\"pool\":\"{}\",\"block\":{},\"offset\":{},\"id\":{}}}",
                e.size,
                json_escape(pool),
                e.block,
                e.offset,
                e.id
            );
            let t = us(e.t_ns);
            match e.kind {
                EventKind::Alloc | EventKind::Reuse => ev.push(format!(
                    "{{\"ph\":\"b\",\"cat\":\"{}\",\"name\":\"{}\",\"id\":{},\"pid\":1,\"tid\":1,\"ts\":{t:.3},{args}}}",
                    if e.kind == EventKind::Reuse { "reuse" } else { "alloc" },
                    json_escape(label),
                    e.id
                )),
                EventKind::Free if begun.contains_key(&e.id) => ev.push(format!(
                    "{{\"ph\":\"e\",\"cat\":\"{}\",\"name\":\"{}\",\"id\":{},\"pid\":1,\"tid\":1,\"ts\":{t:.3},{args}}}",
                    begun[&e.id],
                    json_escape(label),
                    e.id
                )),
                EventKind::Free => ev.push(format!(
                    "{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"free\",\"name\":\"free of '{}' (allocated before the window)\",\"pid\":1,\"tid\":1,\"ts\":{t:.3},{args}}}",
                    json_escape(label)
                )),
                EventKind::Failed => ev.push(format!(
                    "{{\"ph\":\"i\",\"s\":\"g\",\"cat\":\"oom\",\"name\":\"out of memory: '{}' asked for {} bytes\",\"pid\":1,\"tid\":1,\"ts\":{t:.3},{args}}}",
                    json_escape(label),
                    e.size
                )),
                EventKind::Evict | EventKind::Restore | EventKind::Move => ev.push(format!(
                    "{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"tier\",\"name\":\"{} '{}'\",\"pid\":1,\"tid\":1,\"ts\":{t:.3},{args}}}",
                    match e.kind {
                        EventKind::Evict => "evicted to host",
                        EventKind::Restore => "restored from host",
                        _ => "moved by defragmentation",
                    },
                    json_escape(label)
                )),
                EventKind::BlockCreate | EventKind::BlockRelease => ev.push(format!(
                    "{{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"block\",\"name\":\"{} {}/{}\",\"pid\":1,\"tid\":2,\"ts\":{t:.3},{args}}}",
                    if e.kind == EventKind::BlockCreate { "block created" } else { "block released" },
                    json_escape(pool),
                    e.block
                )),
            }
            ev.push(format!(
                "{{\"ph\":\"C\",\"name\":\"memory\",\"pid\":1,\"ts\":{t:.3},\"args\":{{\"allocated\":{},\"reserved\":{}}}}}",
                state.allocated, state.reserved
            ));
        });
        for s in &self.gpu_spans {
            ev.push(format!(
                "{{\"ph\":\"X\",\"cat\":\"gpu\",\"name\":\"{}\",\"pid\":2,\"tid\":1,\"ts\":{:.3},\"dur\":{:.3}}}",
                json_escape(&s.name),
                us(s.start_ns),
                us(s.dur_ns)
            ));
        }
        let mut out = String::with_capacity(ev.iter().map(|e| e.len() + 2).sum::<usize>() + 256);
        out.push_str("{\"traceEvents\":[\n");
        out.push_str(&ev.join(",\n"));
        out.push_str("\n],\"displayTimeUnit\":\"ms\",\"vramkit\":{\"dropped\":");
        let _ = write!(out, "{}", self.dropped);
        out.push_str(",\"live\":[");
        let live: Vec<String> = self.live.iter().map(u64::to_string).collect();
        out.push_str(&live.join(","));
        out.push_str("],\"labels\":[");
        let labels: Vec<String> = self
            .labels
            .iter()
            .map(|l| format!("\"{}\"", json_escape(l)))
            .collect();
        out.push_str(&labels.join(","));
        out.push_str("]}}\n");
        out
    }
}
