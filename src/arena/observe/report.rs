//! Leak reports and dumps (JSON and an SVG picture of every block, after VMA's
//! GpuMemDumpVis).

use std::collections::HashMap;
use std::fmt::Write;

use crate::arena::state::{LiveRecord, State};
use crate::arena::Arena;
use crate::fmt_bytes;

/// The leak report for the live allocations in `st`, or `None` when there are none.
pub(super) fn leak_report(st: &State, arena: &str) -> Option<String> {
    if st.live_allocations() == 0 {
        return None;
    }
    let mut records: Vec<(&u64, &LiveRecord)> = st.live.iter().collect();
    records.sort_by_key(|(id, _)| **id);
    let total: u64 = records.iter().map(|(_, r)| r.size).sum();
    let mut out = format!(
        "arena '{arena}': {} allocation(s) still live ({}):\n",
        records.len(),
        fmt_bytes(total)
    );
    for (id, r) in records {
        let _ = writeln!(
            out,
            "  #{id} '{}' {} in pool '{}' block {} at offset {}, age {:.3} s",
            st.label_stats[r.label as usize].0,
            fmt_bytes(r.size),
            st.pools[r.pool].name,
            r.block().0,
            r.offset,
            r.created.elapsed().as_secs_f64()
        );
        if let Some(bt) = &r.backtrace {
            let _ = writeln!(out, "    allocated at:\n{bt}");
        }
    }
    Some(out)
}

/// One range of a block as the dumps see it.
pub(super) struct DumpRange {
    pub offset: u64,
    pub size: u64,
    pub kind: &'static str,
    pub label: String,
    pub id: Option<u64>,
}

pub(super) fn json_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

pub(super) fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A stable colour per label.
fn colour(label: &str) -> String {
    let mut h: u32 = 2166136261;
    for b in label.bytes() {
        h = (h ^ b as u32).wrapping_mul(16777619);
    }
    format!("hsl({}, 65%, 55%)", h % 360)
}

impl Arena {
    /// The leak report for allocations live now (label, size, age, backtrace when
    /// enabled), or `None`: call it where everything should have been freed (before
    /// shutdown, after a step). Dropping the last `Arena` handle reports nothing: live
    /// allocations keep working and return their memory when they drop.
    pub fn leak_report(&self) -> Option<String> {
        let shared = self.shared();
        let st = shared.state.lock();
        leak_report(&st, &shared.config.name)
    }

    fn dump_blocks(&self) -> Vec<(String, u32, u64, bool, Vec<DumpRange>)> {
        // Asked before our lock is taken: the tier takes its own lock, and holds it while
        // it calls into the arena.
        let host = self
            .tier_hook()
            .map(|t| t.host_blocks())
            .unwrap_or_default();
        let st = self.shared().state.lock();
        let mut blocks = device_blocks(&st);
        drop(st);
        // The host tier as one more pool: evicted allocations live, the rest free.
        for b in host {
            let mut ranges = Vec::new();
            let mut at = 0;
            let mut evicted = b.ranges;
            evicted.sort_unstable_by_key(|r| r.0);
            for (offset, size, label) in evicted {
                if offset > at {
                    ranges.push(DumpRange {
                        offset: at,
                        size: offset - at,
                        kind: "free",
                        label: String::new(),
                        id: None,
                    });
                }
                ranges.push(DumpRange {
                    offset,
                    size,
                    kind: "live",
                    label,
                    id: None,
                });
                at = offset + size;
            }
            if b.size > at {
                ranges.push(DumpRange {
                    offset: at,
                    size: b.size - at,
                    kind: "free",
                    label: String::new(),
                    id: None,
                });
            }
            blocks.push(("host tier".to_string(), b.block, b.size, false, ranges));
        }
        blocks
    }

    /// Every block and range as JSON: `{"arena", "stats": {...}, "blocks": [{"pool",
    /// "block", "size", "dedicated", "ranges": [{"offset", "size", "kind", "label", "id"}]}]}`.
    pub fn to_json(&self) -> String {
        let s = self.stats();
        let mut out = String::new();
        let _ = write!(
            out,
            "{{\"arena\":\"{}\",\"device\":\"{}\",\"stats\":{{\"allocated\":{},\"active\":{},\"reserved\":{},\"peak_allocated\":{},\"peak_reserved\":{},\"allocations\":{},\"frees\":{},\"retries\":{},\"ooms\":{},\"blocks_created\":{},\"fragmentation\":{:.6}}},\"blocks\":[",
            json_escape(&self.shared().config.name),
            json_escape(&self.gpu().info().name),
            s.allocated,
            s.active,
            s.reserved,
            s.peak_allocated,
            s.peak_reserved,
            s.allocations,
            s.frees,
            s.retries,
            s.ooms,
            s.blocks_created,
            s.fragmentation
        );
        for (bi, (pool, block, size, dedicated, ranges)) in self.dump_blocks().iter().enumerate() {
            if bi > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "{{\"pool\":\"{}\",\"block\":{block},\"size\":{size},\"dedicated\":{dedicated},\"ranges\":[",
                json_escape(pool)
            );
            for (ri, r) in ranges.iter().enumerate() {
                if ri > 0 {
                    out.push(',');
                }
                let id = r.id.map_or("null".to_string(), |i| i.to_string());
                let _ = write!(
                    out,
                    "{{\"offset\":{},\"size\":{},\"kind\":\"{}\",\"label\":\"{}\",\"id\":{id}}}",
                    r.offset,
                    r.size,
                    r.kind,
                    json_escape(&r.label)
                );
            }
            out.push_str("]}");
        }
        out.push_str("]}");
        out
    }

    /// An SVG picture of every block: one bar per block, used ranges coloured by label,
    /// free ranges grey, ranges waiting for the GPU hatched orange; hover shows details.
    pub fn to_svg(&self) -> String {
        let blocks = self.dump_blocks();
        let (width, bar, gap, left) = (1000.0f64, 22.0f64, 14.0f64, 230.0f64);
        let mut labels: Vec<&str> = blocks
            .iter()
            .flat_map(|b| b.4.iter())
            .filter(|r| r.kind == "live")
            .map(|r| r.label.as_str())
            .collect();
        labels.sort_unstable();
        labels.dedup();
        let legend_rows = labels.len().div_ceil(4) as f64;
        let height = 40.0 + blocks.len() as f64 * (bar + gap) + 20.0 + legend_rows * 18.0 + 10.0;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{height}\" font-family=\"monospace\" font-size=\"12\">",
            width + left + 20.0
        );
        let _ = writeln!(out, "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>");
        let _ = writeln!(
            out,
            "<text x=\"10\" y=\"20\" font-size=\"14\">vramkit arena '{}' on {}: grey = free, orange = freed but in use by the GPU</text>",
            xml_escape(&self.shared().config.name),
            xml_escape(&self.gpu().info().name)
        );
        for (i, (pool, block, size, dedicated, ranges)) in blocks.iter().enumerate() {
            let y = 40.0 + i as f64 * (bar + gap);
            let _ = writeln!(
                out,
                "<text x=\"10\" y=\"{}\">{} #{block} {}{}</text>",
                y + 15.0,
                xml_escape(pool),
                fmt_bytes(*size),
                if *dedicated { " (dedicated)" } else { "" }
            );
            for r in ranges {
                let x = left + r.offset as f64 / *size as f64 * width;
                let w = (r.size as f64 / *size as f64 * width).max(0.5);
                let fill = match r.kind {
                    "free" => "#dddddd".to_string(),
                    "pending" => "#f0a030".to_string(),
                    _ => colour(&r.label),
                };
                let _ = writeln!(
                    out,
                    "<rect x=\"{x:.2}\" y=\"{y}\" width=\"{w:.2}\" height=\"{bar}\" fill=\"{fill}\" stroke=\"white\" stroke-width=\"0.3\"><title>{} {} at {} ({})</title></rect>",
                    r.kind,
                    xml_escape(&r.label),
                    r.offset,
                    fmt_bytes(r.size)
                );
            }
        }
        // Legend: one swatch per label, four to a row.
        let top = 40.0 + blocks.len() as f64 * (bar + gap) + 10.0;
        for (i, label) in labels.iter().enumerate() {
            let x = 10.0 + (i % 4) as f64 * 300.0;
            let y = top + (i / 4) as f64 * 18.0;
            let _ = writeln!(
                out,
                "<rect x=\"{x}\" y=\"{y}\" width=\"12\" height=\"12\" fill=\"{}\"/><text x=\"{}\" y=\"{}\">{}</text>",
                colour(label),
                x + 18.0,
                y + 11.0,
                xml_escape(label)
            );
        }
        out.push_str("</svg>\n");
        out
    }
}

/// Every block of `st`'s pools with its ranges in order: live (label and id), pending
/// (freed, the GPU may still use it) or free.
pub(super) fn device_blocks(st: &State) -> Vec<(String, u32, u64, bool, Vec<DumpRange>)> {
    let mut by_range: HashMap<(usize, u32, u64), (u64, &LiveRecord)> = HashMap::new();
    for (id, r) in st.live.iter() {
        by_range.insert((r.pool, r.block().0, r.range_offset), (*id, r));
    }
    let mut blocks = Vec::new();
    for (pi, pool) in st.pools.iter().enumerate() {
        for (id, size, dedicated, _) in pool.set.blocks() {
            let Some(a) = pool.set.block(id) else {
                continue;
            };
            let mut ranges = Vec::new();
            a.for_each_range(|offset, len, used| {
                let (kind, label, rid) = match (used, by_range.get(&(pi, id.0, offset))) {
                    (false, _) => ("free", String::new(), None),
                    (true, Some((rid, r))) => (
                        "live",
                        st.label_stats[r.label as usize].0.to_string(),
                        Some(*rid),
                    ),
                    (true, None) => ("pending", "(freed, GPU may still use)".to_string(), None),
                };
                ranges.push(DumpRange {
                    offset,
                    size: len,
                    kind,
                    label,
                    id: rid,
                });
            });
            blocks.push((pool.name.clone(), id.0, size, dedicated, ranges));
        }
    }
    blocks
}
