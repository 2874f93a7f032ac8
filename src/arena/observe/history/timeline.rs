//! The history as a timeline picture (SVG, drawn with `plotters`): live bytes over time
//! stacked by label, the largest labels each in their colour and the rest as "other",
//! with the reserved bytes as a line above them, like PyTorch's memory viz.

use plotters::prelude::*;

use super::{EventKind, MemoryHistory, State};
use crate::{Error, Result};

/// Labels drawn in their own colour; the rest are summed as "other".
const TOP_LABELS: usize = 8;
/// Points per series at most: longer histories are sampled (the extremes of each bucket
/// kept), so the file stays small.
const MAX_POINTS: usize = 2000;

impl MemoryHistory {
    /// The timeline as an SVG document of `width` x `height` pixels (see the module docs
    /// of `arena::history`).
    pub fn to_timeline_svg(&self, width: u32, height: u32) -> Result<String> {
        // The labels that held the most at their peak, largest first.
        let n_labels = self.labels.len().max(self.base_label_bytes.len());
        let mut peak = vec![0u64; n_labels];
        let mut states = 0usize;
        // Refused requests: when, what was live then, what they asked for.
        let mut failed: Vec<(u64, u64, u64)> = Vec::new();
        self.replay(|state| {
            states += 1;
            if let Some(e) = state.event.filter(|e| e.kind == EventKind::Failed) {
                failed.push((e.t_ns, state.allocated, e.size));
            }
            match state.event {
                // Only the event's label changed.
                Some(e) => {
                    let i = e.label as usize;
                    if let (Some(p), Some(&b)) = (peak.get_mut(i), state.labels.get(i)) {
                        *p = (*p).max(b);
                    }
                }
                None => {
                    for (p, &b) in peak.iter_mut().zip(state.labels) {
                        *p = (*p).max(b);
                    }
                }
            }
        });
        let mut order: Vec<usize> = (0..n_labels).filter(|&i| peak[i] > 0).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(peak[i]));
        let top: Vec<usize> = order.iter().copied().take(TOP_LABELS).collect();
        let has_other = order.len() > top.len();
        // Series rows: the top labels, then "other"; cumulative from the bottom.
        let row = |state: &State<'_>| -> Row {
            let mut acc = 0u64;
            let mut cum = Vec::with_capacity(top.len() + 1);
            for &i in &top {
                acc += state.labels.get(i).copied().unwrap_or(0);
                cum.push(acc);
            }
            if has_other {
                cum.push(state.allocated);
            }
            (state.t_ns, cum, state.reserved)
        };
        let rows = sample(self, states, MAX_POINTS, row);
        let t0 = rows.first().map_or(0, |r| r.0);
        let secs = |t: u64| (t.saturating_sub(t0)) as f64 / 1e9;
        let stacks: Vec<(f64, Vec<u64>, u64)> = rows
            .into_iter()
            .map(|(t, cum, reserved)| (secs(t), cum, reserved))
            .collect();
        // The refused requests stand on what was live when they came, as tall as what they
        // asked for: the range includes their tops, so a request that could not fit shows
        // at its size, not as a line.
        let y_max = stacks
            .iter()
            .map(|(_, c, r)| c.last().copied().unwrap_or(0).max(*r))
            .chain(failed.iter().map(|&(_, live, size)| live + size))
            .max()
            .unwrap_or(0)
            .max(1);
        let (unit, scale) = unit_for(y_max);
        let x_max = stacks
            .last()
            .map_or(0.0, |s| s.0)
            .max(failed.iter().map(|&(t, ..)| secs(t)).fold(0.0, f64::max))
            .max(1e-6);
        let mut names: Vec<String> = top
            .iter()
            .map(|&i| self.labels.get(i).cloned().unwrap_or_default())
            .collect();
        if has_other {
            names.push(format!("other ({} labels)", order.len() - top.len()));
        }
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (width, height)).into_drawing_area();
            let e = |e: &dyn std::fmt::Display| {
                Error::invalid(format!("drawing the memory timeline: {e}"), "report this")
            };
            root.fill(&WHITE).map_err(|x| e(&x))?;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!(
                        "vramkit arena '{}': live bytes by label, reserved above{}",
                        self.arena,
                        if self.dropped > 0 {
                            format!(" ({} older events folded)", self.dropped)
                        } else {
                            String::new()
                        }
                    ),
                    ("sans-serif", 18),
                )
                .margin(12)
                .x_label_area_size(40)
                .y_label_area_size(70)
                .build_cartesian_2d(0.0..x_max, 0.0..(y_max as f64 / scale) * 1.05)
                .map_err(|x| e(&x))?;
            chart
                .configure_mesh()
                .x_desc("seconds")
                .y_desc(unit)
                .draw()
                .map_err(|x| e(&x))?;
            // Top of the stack first, so each lower band paints over the one above it.
            for k in (0..names.len()).rev() {
                let colour = Palette99::pick(k).mix(0.85);
                let points = steps(&stacks, |(_, cum, _)| {
                    cum.get(k).copied().unwrap_or(0) as f64 / scale
                });
                chart
                    .draw_series(AreaSeries::new(points, 0.0, colour.filled()))
                    .map_err(|x| e(&x))?
                    .label(names[k].clone())
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled())
                    });
            }
            if !failed.is_empty() {
                // At least 1/150 of the plot wide, so a single refusal is seen.
                let w = x_max / 150.0;
                // Pure red with a black outline: apart from every label's colour.
                let red = RGBColor(255, 0, 0);
                let bar = |t: u64, live: u64, size: u64| {
                    let x = secs(t);
                    [
                        (x, live as f64 / scale),
                        (x + w, (live + size) as f64 / scale),
                    ]
                };
                chart
                    .draw_series(
                        failed.iter().map(|&(t, live, size)| {
                            Rectangle::new(bar(t, live, size), red.filled())
                        }),
                    )
                    .map_err(|x| e(&x))?;
                chart
                    .draw_series(failed.iter().map(|&(t, live, size)| {
                        Rectangle::new(bar(t, live, size), BLACK.stroke_width(2))
                    }))
                    .map_err(|x| e(&x))?
                    .label(format!(
                        "refused request{} (height: bytes asked)",
                        if failed.len() == 1 { "" } else { "s" }
                    ))
                    .legend(move |(x, y)| {
                        Rectangle::new([(x, y - 5), (x + 12, y + 5)], red.filled())
                    });
            }
            let reserved = steps(&stacks, |(_, _, r)| *r as f64 / scale);
            chart
                .draw_series(LineSeries::new(reserved, BLACK.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label("reserved")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK.stroke_width(2)));
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|x| e(&x))?;
            root.present().map_err(|x| e(&x))?;
        }
        Ok(svg)
    }
}

/// A step line through `rows`: each value holds until the next row's time, so a burst
/// of events shows at its height however short it was.
fn steps(
    rows: &[(f64, Vec<u64>, u64)],
    value: impl Fn(&(f64, Vec<u64>, u64)) -> f64,
) -> Vec<(f64, f64)> {
    let mut out = Vec::with_capacity(2 * rows.len());
    for (i, row) in rows.iter().enumerate() {
        let v = value(row);
        out.push((row.0, v));
        if let Some(next) = rows.get(i + 1) {
            out.push((next.0, v));
        }
    }
    out
}

/// The unit for bytes up to `max`: its name and bytes per unit.
fn unit_for(max: u64) -> (&'static str, f64) {
    match max {
        m if m >= 1 << 30 => ("GiB", (1u64 << 30) as f64),
        m if m >= 1 << 20 => ("MiB", (1u64 << 20) as f64),
        m if m >= 1 << 10 => ("KiB", 1024.0),
        _ => ("bytes", 1.0),
    }
}

/// A row of the series: time, cumulative bytes of the stacked labels, reserved bytes.
type Row = (u64, Vec<u64>, u64);

/// The rows of at most about `max` of the history's `states` replayed states: every
/// state when few, else per bucket the state of highest total (the last of equals) and
/// the last one (peaks stay visible), in time order.
fn sample(
    history: &MemoryHistory,
    states: usize,
    max: usize,
    row: impl Fn(&State<'_>) -> Row,
) -> Vec<Row> {
    let mut out = Vec::with_capacity(states.min(max + 2));
    if states <= max {
        history.replay(|state| out.push(row(state)));
        return out;
    }
    let bucket = states.div_ceil(max / 2);
    // The best state of the current bucket so far, with its score.
    let mut best: Option<(u64, Row)> = None;
    let (mut k, mut in_bucket) = (0usize, 0usize);
    history.replay(|state| {
        let score = state.allocated.max(state.reserved);
        let is_best = best.as_ref().is_none_or(|b| score >= b.0);
        if is_best {
            best = Some((score, row(state)));
        }
        in_bucket += 1;
        k += 1;
        if in_bucket == bucket || k == states {
            if let Some((_, b)) = best.take() {
                out.push(b);
            }
            if !is_best {
                out.push(row(state));
            }
            in_bucket = 0;
        }
    });
    out
}
