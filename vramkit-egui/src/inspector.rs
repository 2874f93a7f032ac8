//! [`MemoryInspector`], a panel of where GPU memory goes, and [`InspectorState`], what it
//! keeps between frames.

use egui::{Color32, Response, RichText, Sense, Stroke, Ui, Widget};
use vramkit::arena::ArenaStats;
use vramkit::ledger::{LedgerReport, MemoryKind, Part};
use vramkit::mips::MipStats;
use vramkit::tier::TierStats;
use vramkit::vt::VtStats;
use vramkit::{fmt_bytes, Arena};
use web_time::Instant;

use crate::timeline::{Sample, Timeline};

/// Samples the timeline keeps: 600 (ten seconds at 60 frames a second, or a minute at
/// the default interval of 0.1 s).
const TIMELINE_SAMPLES: usize = 600;

/// Labels shown before the rest are summed into one line.
const LABEL_ROWS: usize = 40;

/// What a [`MemoryInspector`] keeps between frames: its timeline and the figures it
/// showed last. The app owns it.
#[derive(Debug)]
pub struct InspectorState {
    timeline: Timeline,
    started: Option<Instant>,
    last_sample: Option<Instant>,
    /// Seconds between timeline samples.
    pub sample_interval: f64,
    /// The driver's reading and the device ledger are taken at most this often (seconds):
    /// a Vulkan query and a walk over wgpu's allocations, cheap, but not free.
    pub driver_interval: f64,
    driver: Option<vramkit::DriverMemory>,
    /// The device ledger, read with the driver (it carries the driver's reading).
    ledger: Option<LedgerReport>,
    last_driver: Option<Instant>,
    shown: Vec<(&'static str, String)>,
}

impl Default for InspectorState {
    fn default() -> Self {
        InspectorState {
            timeline: Timeline::new(TIMELINE_SAMPLES),
            started: None,
            last_sample: None,
            sample_interval: 0.1,
            driver_interval: 0.5,
            driver: None,
            ledger: None,
            last_driver: None,
            shown: Vec::new(),
        }
    }
}

impl InspectorState {
    /// The figures the inspector showed in its last frame, as `(name, text)`: what a test
    /// compares with the arena's statistics.
    pub fn shown_figures(&self) -> &[(&'static str, String)] {
        &self.shown
    }

    /// Timeline samples taken so far (at most 600 are kept).
    pub fn samples(&self) -> usize {
        self.timeline.samples.len()
    }
}

/// A panel of the arena's memory: live figures (allocated, reserved, budget, the
/// driver's budget where known), a timeline, the labels by bytes, the blocks, all of the
/// device's memory by the ledger's lines (the app's owners, vramkit's parts, wgpu's own,
/// the driver's and what none explains; see [`vramkit::ledger`]), and the tiers and
/// virtual textures it is given. It reads the arena's statistics once per
/// frame it is shown, and nothing when it is not.
///
/// ```no_run
/// # fn ui(ui: &mut egui::Ui, state: &mut vramkit_egui::InspectorState, rt: &vramkit::Runtime) {
/// ui.add(vramkit_egui::MemoryInspector::new(state, rt.arena()));
/// # }
/// ```
pub struct MemoryInspector<'a> {
    state: &'a mut InspectorState,
    arena: &'a Arena,
    tiers: Option<TierStats>,
    textures: Vec<(String, VtStats)>,
    mips: Option<MipStats>,
}

impl<'a> MemoryInspector<'a> {
    /// The inspector of `arena`.
    pub fn new(state: &'a mut InspectorState, arena: &'a Arena) -> MemoryInspector<'a> {
        MemoryInspector {
            state,
            arena,
            tiers: None,
            textures: Vec::new(),
            mips: None,
        }
    }

    /// Shows a mip streamer's figures too ([`MipStreamer::stats`](vramkit::mips::MipStreamer::stats)).
    pub fn mip_streaming(mut self, stats: MipStats) -> Self {
        self.mips = Some(stats);
        self
    }

    /// Shows the tiers' figures too ([`Tiers::stats`](vramkit::tier::Tiers::stats)).
    pub fn tiers(mut self, stats: TierStats) -> Self {
        self.tiers = Some(stats);
        self
    }

    /// Shows a virtual texture's cache too, under `name`.
    pub fn virtual_texture(mut self, name: impl Into<String>, stats: VtStats) -> Self {
        self.textures.push((name.into(), stats));
        self
    }
}

impl Widget for MemoryInspector<'_> {
    fn ui(self, ui: &mut Ui) -> Response {
        let MemoryInspector {
            state,
            arena,
            tiers,
            textures,
            mips,
        } = self;
        let now = Instant::now();
        let stats = arena.stats();
        let started = *state.started.get_or_insert(now);
        if state
            .last_sample
            .is_none_or(|t| (now - t).as_secs_f64() >= state.sample_interval)
        {
            state.last_sample = Some(now);
            state.timeline.push(Sample {
                t: (now - started).as_secs_f64(),
                allocated: stats.allocated,
                reserved: stats.reserved,
                budget: stats.budget,
            });
        }
        if state
            .last_driver
            .is_none_or(|t| (now - t).as_secs_f64() >= state.driver_interval)
        {
            state.last_driver = Some(now);
            let report = arena.gpu().ledger().report();
            state.driver = report.driver;
            state.ledger = Some(report);
        }

        let inner = ui.vertical(|ui| {
            ui.label(RichText::new(format!("GPU memory: arena '{}'", arena.name())).strong());
            state.shown = figures(&stats, state.driver.as_ref());
            if let Some(report) = &state.ledger {
                state.shown.extend(ledger_figures(report));
            }
            egui::Grid::new("vramkit-figures")
                .num_columns(2)
                .striped(true)
                .show(ui, |ui| {
                    for (name, value) in &state.shown {
                        ui.label(*name);
                        ui.label(RichText::new(value).monospace());
                        ui.end_row();
                    }
                });
            ui.add_space(4.0);
            state.timeline.show(ui, 96.0);
            ui.add_space(4.0);
            labels(ui, &stats);
            blocks(ui, &stats);
            if let Some(report) = &state.ledger {
                ledger(ui, report);
            }
            if let Some(t) = &tiers {
                tier_figures(ui, t);
            }
            for (name, vt) in &textures {
                texture_figures(ui, name, vt);
            }
            if let Some(m) = &mips {
                mip_figures(ui, m);
            }
        });
        inner.response.interact(Sense::hover())
    }
}

/// The live figures, in the order shown.
fn figures(s: &ArenaStats, driver: Option<&vramkit::DriverMemory>) -> Vec<(&'static str, String)> {
    let mut f = vec![
        ("allocated", fmt_bytes(s.allocated)),
        ("active", fmt_bytes(s.active)),
        ("reserved", fmt_bytes(s.reserved)),
        ("cached", fmt_bytes(s.cached)),
        ("peak allocated", fmt_bytes(s.peak_allocated)),
        ("peak reserved", fmt_bytes(s.peak_reserved)),
        ("budget", s.budget.map_or_else(|| "none".into(), fmt_bytes)),
        ("live allocations", s.live_allocations.to_string()),
        ("blocks", s.blocks.to_string()),
        ("out of memory", s.ooms.to_string()),
        ("fragmentation", format!("{:.1} %", 100.0 * s.fragmentation)),
    ];
    match driver {
        Some(d) => {
            f.push(("driver budget", fmt_bytes(d.budget)));
            f.push(("driver usage", fmt_bytes(d.usage)));
        }
        None => f.push(("driver budget", "not reported".into())),
    }
    f
}

fn labels(ui: &mut Ui, s: &ArenaStats) {
    let mut rows: Vec<_> = s.per_label.iter().filter(|(_, l)| l.count > 0).collect();
    rows.sort_by(|a, b| b.1.bytes.cmp(&a.1.bytes).then_with(|| a.0.cmp(&b.0)));
    egui::CollapsingHeader::new(format!("labels ({})", rows.len()))
        .default_open(true)
        .show(ui, |ui| {
            egui::Grid::new("vramkit-labels")
                .num_columns(4)
                .striped(true)
                .show(ui, |ui| {
                    for h in ["label", "live", "bytes", "peak"] {
                        ui.label(RichText::new(h).underline());
                    }
                    ui.end_row();
                    for (name, l) in rows.iter().take(LABEL_ROWS) {
                        ui.label(name.as_str());
                        ui.label(l.count.to_string());
                        ui.label(RichText::new(fmt_bytes(l.bytes)).monospace());
                        ui.label(RichText::new(fmt_bytes(l.peak_bytes)).monospace());
                        ui.end_row();
                    }
                    if rows.len() > LABEL_ROWS {
                        let rest = &rows[LABEL_ROWS..];
                        ui.label(format!("{} more", rest.len()));
                        ui.label(rest.iter().map(|r| r.1.count).sum::<u64>().to_string());
                        ui.label(fmt_bytes(rest.iter().map(|r| r.1.bytes).sum()));
                        ui.end_row();
                    }
                });
        });
}

/// One bar per block: its length the block's share of the largest, filled as far as the
/// block is used; hover for the numbers.
fn blocks(ui: &mut Ui, s: &ArenaStats) {
    egui::CollapsingHeader::new(format!("blocks ({})", s.per_block.len()))
        .default_open(true)
        .show(ui, |ui| {
            let largest = s.per_block.iter().map(|b| b.size).max().unwrap_or(1).max(1);
            let width = ui.available_width().max(80.0);
            for b in &s.per_block {
                let (rect, response) =
                    ui.allocate_exact_size(egui::vec2(width, 10.0), Sense::hover());
                let full = rect.width() * (b.size as f32 / largest as f32).max(0.02);
                let outline = egui::Rect::from_min_size(rect.min, egui::vec2(full, rect.height()));
                let used = b.used as f32 / b.size.max(1) as f32;
                let filled =
                    egui::Rect::from_min_size(rect.min, egui::vec2(full * used, rect.height()));
                let p = ui.painter();
                p.rect_filled(filled, 1.0, Color32::from_rgb(70, 140, 210));
                p.rect_stroke(
                    outline,
                    1.0,
                    Stroke::new(1.0, Color32::GRAY),
                    egui::StrokeKind::Inside,
                );
                response.on_hover_text(format!(
                    "{} block {}{}: {} of {} used, largest free {}, {} free ranges",
                    b.pool,
                    b.block,
                    if b.dedicated { " (dedicated)" } else { "" },
                    fmt_bytes(b.used),
                    fmt_bytes(b.size),
                    fmt_bytes(b.largest_free),
                    b.free_ranges
                ));
            }
        });
}

fn tier_figures(ui: &mut Ui, t: &TierStats) {
    egui::CollapsingHeader::new("tiers")
        .default_open(true)
        .show(ui, |ui| {
            egui::Grid::new("vramkit-tiers")
                .num_columns(2)
                .show(ui, |ui| {
                    let rows = [
                        ("movables", t.movables.to_string()),
                        ("on the device", fmt_bytes(t.device_bytes)),
                        ("in host memory", fmt_bytes(t.host_bytes)),
                        ("evictions", t.evictions.to_string()),
                        ("restores", t.restores.to_string()),
                        ("defragmentation moves", t.defrag_moves.to_string()),
                    ];
                    for (name, value) in rows {
                        ui.label(name);
                        ui.label(RichText::new(value).monospace());
                        ui.end_row();
                    }
                });
        });
}

fn texture_figures(ui: &mut Ui, name: &str, v: &VtStats) {
    egui::CollapsingHeader::new(format!("virtual texture '{name}'"))
        .default_open(true)
        .show(ui, |ui| {
            let fill = v.resident_tiles as f32 / v.cache_slots.max(1) as f32;
            ui.add(egui::ProgressBar::new(fill).text(format!(
                "{}/{} slots resident, {} loading",
                v.resident_tiles, v.cache_slots, v.pending_tiles
            )));
            egui::Grid::new(("vramkit-texture", name))
                .num_columns(2)
                .show(ui, |ui| {
                    let rows = [
                        ("cache texture", fmt_bytes(v.cache_bytes)),
                        ("page table and feedback", fmt_bytes(v.buffer_bytes)),
                        ("hit rate", format!("{:.1} %", 100.0 * v.hit_rate())),
                        ("uploads", v.uploads.to_string()),
                        ("streamed", fmt_bytes(v.bytes_streamed)),
                        ("evictions", v.evictions.to_string()),
                    ];
                    for (name, value) in rows {
                        ui.label(name);
                        ui.label(RichText::new(value).monospace());
                        ui.end_row();
                    }
                });
        });
}

/// The ledger's totals among the live figures.
fn ledger_figures(r: &LedgerReport) -> Vec<(&'static str, String)> {
    let known = |v: Option<u64>| v.map_or_else(|| "not reported".into(), fmt_bytes);
    vec![
        (
            "device: app",
            fmt_bytes(r.bytes(Part::App, MemoryKind::Device)),
        ),
        (
            "device: vramkit",
            fmt_bytes(r.bytes(Part::Vramkit, MemoryKind::Device)),
        ),
        ("device: wgpu internal", known(r.wgpu_internal())),
        ("device: untracked", known(r.untracked())),
    ]
}

/// All of the device by the ledger's lines, and the owners the growth watch names.
fn ledger(ui: &mut Ui, r: &LedgerReport) {
    egui::CollapsingHeader::new(format!("device ({} lines)", r.lines.len()))
        .default_open(true)
        .show(ui, |ui| {
            for g in &r.growing {
                ui.colored_label(Color32::from_rgb(220, 90, 60), format!("growing: {g}"));
            }
            egui::Grid::new("vramkit-ledger")
                .num_columns(3)
                .striped(true)
                .show(ui, |ui| {
                    for h in ["line", "bytes", "what"] {
                        ui.label(RichText::new(h).underline());
                    }
                    ui.end_row();
                    for l in &r.lines {
                        let part = match l.part {
                            Part::App => "app",
                            Part::Vramkit => "vramkit",
                        };
                        let memory = match l.kind {
                            MemoryKind::Device => "",
                            MemoryKind::Host => " (host)",
                        };
                        ui.label(format!("{part}: {}{memory}", l.name));
                        ui.label(RichText::new(fmt_bytes(l.bytes)).monospace());
                        let what: Vec<String> = l
                            .detail
                            .iter()
                            .take(3)
                            .map(|(k, b)| format!("{k} {}", fmt_bytes(*b)))
                            .collect();
                        let what = match l.resources {
                            Some(n) if what.is_empty() => format!("{n} resources"),
                            _ => what.join(", "),
                        };
                        ui.label(what);
                        ui.end_row();
                    }
                    if let Some(w) = &r.wgpu {
                        ui.label("wgpu internal");
                        ui.label(RichText::new(fmt_bytes(w.internal_bytes())).monospace());
                        ui.label(format!(
                            "{} free in its blocks",
                            fmt_bytes(w.reserved.saturating_sub(w.allocated))
                        ));
                        ui.end_row();
                    }
                    if let (Some(d), Some(u)) = (r.driver, r.untracked()) {
                        ui.label(format!("driver ({})", d.source));
                        ui.label(RichText::new(fmt_bytes(d.usage)).monospace());
                        ui.label(format!("budget {}", fmt_bytes(d.budget)));
                        ui.end_row();
                        ui.label("untracked");
                        ui.label(RichText::new(fmt_bytes(u)).monospace());
                        ui.label("what the driver counts and no line explains");
                        ui.end_row();
                    }
                });
        });
}

fn mip_figures(ui: &mut Ui, m: &MipStats) {
    egui::CollapsingHeader::new(format!("mip streaming ({} textures)", m.textures))
        .default_open(true)
        .show(ui, |ui| {
            let fill = m.resident_bytes as f32 / m.budget.max(1) as f32;
            ui.add(egui::ProgressBar::new(fill.min(1.0)).text(format!(
                "{} of the budget {} resident",
                fmt_bytes(m.resident_bytes),
                fmt_bytes(m.budget)
            )));
            egui::Grid::new("vramkit-mips")
                .num_columns(2)
                .show(ui, |ui| {
                    let rows = [
                        ("every full chain", fmt_bytes(m.full_bytes)),
                        ("uploaded last frame", fmt_bytes(m.uploaded_last)),
                        ("textures short of their wanted level", m.short.to_string()),
                        ("swaps", m.swaps.to_string()),
                        ("out of memory", m.ooms.to_string()),
                    ];
                    for (name, value) in rows {
                        ui.label(name);
                        ui.label(RichText::new(value).monospace());
                        ui.end_row();
                    }
                });
        });
}
