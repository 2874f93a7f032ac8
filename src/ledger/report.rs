//! The ledger's report: its lines, wgpu's allocator, the driver's reading, and what none
//! of them explains.

use std::fmt::Write;

use rustc_hash::FxHashMap;

use super::growth::{self, Growth};
use crate::gpu::accounts::{MemoryKind, Part};
use crate::{fmt_bytes, DriverMemory, Gpu};

/// One line of the report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerLine {
    /// The app's or vramkit's.
    pub part: Part,
    /// Device or host memory.
    pub kind: MemoryKind,
    /// The owner (app) or component (vramkit: `arena 'default'`, `upload staging`, ...).
    pub name: String,
    /// Bytes held.
    pub bytes: u64,
    /// Resources held, where the line counts them (app owners, staging buffers).
    pub resources: Option<u64>,
    /// What the bytes are, largest first (an arena's labels and its free space).
    pub detail: Vec<(String, u64)>,
}

/// Resources of one label in wgpu's allocator report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedBytes {
    /// The resource's label (`Unlabeled texture` / `Unlabeled buffer` without one).
    pub name: String,
    /// Bytes wgpu's allocator gave them, alignment included.
    pub bytes: u64,
    /// How many.
    pub count: u64,
}

/// wgpu's own allocator, where the backend reports it (`Device::generate_allocator_report`:
/// Vulkan and DX12).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WgpuMemory {
    /// Bytes of its memory blocks.
    pub reserved: u64,
    /// Bytes of the resources in them.
    pub allocated: u64,
    /// Bytes of resources wgpu made for itself (labels `(wgpu internal) ...`).
    pub internal: u64,
    /// Bytes of resources vramkit made (its labels), alignment included.
    pub vramkit: u64,
    /// Every other resource by label, largest first: the app's, registered or not.
    pub others: Vec<NamedBytes>,
}

impl WgpuMemory {
    /// Bytes wgpu holds for itself: free space in its blocks plus its own resources.
    pub fn internal_bytes(&self) -> u64 {
        self.reserved.saturating_sub(self.allocated) + self.internal
    }

    /// Bytes of [`others`](Self::others).
    pub fn others_bytes(&self) -> u64 {
        self.others.iter().map(|o| o.bytes).sum()
    }
}

/// The ledger now ([`Ledger::report`](super::Ledger::report)); `Display` prints the
/// summary.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LedgerReport {
    /// The adapter and backend.
    pub device: String,
    /// The app's owners, then vramkit's parts; each sorted by name.
    pub lines: Vec<LedgerLine>,
    /// wgpu's allocator, where the backend reports it.
    pub wgpu: Option<WgpuMemory>,
    /// The driver's reading, where there is one.
    pub driver: Option<DriverMemory>,
    /// Owners the growth watch named at the last `end_frame`.
    pub growing: Vec<Growth>,
}

impl LedgerReport {
    /// Bytes of `part`'s lines in `kind` memory.
    pub fn bytes(&self, part: Part, kind: MemoryKind) -> u64 {
        self.lines
            .iter()
            .filter(|l| l.part == part && l.kind == kind)
            .map(|l| l.bytes)
            .sum()
    }

    /// The line of `part` named `name`.
    pub fn line(&self, part: Part, name: &str) -> Option<&LedgerLine> {
        self.lines.iter().find(|l| l.part == part && l.name == name)
    }

    /// Bytes wgpu holds for itself ([`WgpuMemory::internal_bytes`]), where known.
    pub fn wgpu_internal(&self) -> Option<u64> {
        self.wgpu.as_ref().map(WgpuMemory::internal_bytes)
    }

    /// Device memory the driver counts that no line explains: its usage minus the app's
    /// and vramkit's device lines and wgpu's own. `None` without a driver reading. Holds
    /// resources nobody registered, the alignment of those registered, and the driver's
    /// own allocations (command buffers, descriptor pools, pipeline caches).
    pub fn untracked(&self) -> Option<u64> {
        let driver = self.driver?;
        let known = self.bytes(Part::App, MemoryKind::Device)
            + self.bytes(Part::Vramkit, MemoryKind::Device)
            + self.wgpu_internal().unwrap_or(0);
        Some(driver.usage.saturating_sub(known))
    }

    /// Of wgpu's allocations, the bytes no app line explains: resources made through wgpu
    /// that nobody registered (plus the alignment of those registered). `None` where wgpu
    /// gives no allocator report.
    pub fn untracked_in_wgpu(&self) -> Option<u64> {
        let w = self.wgpu.as_ref()?;
        Some(
            w.others_bytes()
                .saturating_sub(self.bytes(Part::App, MemoryKind::Device)),
        )
    }
}

/// Builds the report of `gpu` (see the module docs of `ledger`).
pub(super) fn build(gpu: &Gpu) -> LedgerReport {
    let accounts = gpu.accounts();
    let mut lines: Vec<LedgerLine> = accounts
        .readings()
        .into_iter()
        .map(|r| LedgerLine {
            part: r.part,
            kind: r.kind,
            name: r.name,
            bytes: r.bytes,
            resources: Some(r.held),
            detail: Vec::new(),
        })
        .collect();
    let sources = accounts.source_lines();
    let mut prefixes: Vec<String> = vec!["vramkit".into()];
    for s in sources {
        prefixes.extend(s.label_prefix);
        lines.push(LedgerLine {
            part: Part::Vramkit,
            kind: s.kind,
            name: s.name,
            bytes: s.bytes,
            resources: None,
            detail: s.detail,
        });
    }
    lines.sort_by(|a, b| (a.part, &a.name).cmp(&(b.part, &b.name)));
    let wgpu = gpu
        .device()
        .generate_allocator_report()
        .map(|r| wgpu_memory(&r, &prefixes));
    LedgerReport {
        device: format!("{} ({:?})", gpu.info().name, gpu.info().backend),
        lines,
        wgpu,
        driver: gpu.driver_memory(),
        growing: growth::named(gpu),
    }
}

/// Sorts wgpu's allocations into its own, vramkit's (by label prefix) and the others.
fn wgpu_memory(report: &wgpu::AllocatorReport, vramkit_prefixes: &[String]) -> WgpuMemory {
    let mut internal = 0;
    let mut vramkit = 0;
    let mut others: FxHashMap<&str, (u64, u64)> = FxHashMap::default();
    for a in &report.allocations {
        if a.name.starts_with("(wgpu internal)") {
            internal += a.size;
        } else if vramkit_prefixes
            .iter()
            .any(|p| a.name.starts_with(p.as_str()))
        {
            vramkit += a.size;
        } else {
            let e = others.entry(a.name.as_str()).or_default();
            e.0 += a.size;
            e.1 += 1;
        }
    }
    let mut others: Vec<NamedBytes> = others
        .into_iter()
        .map(|(name, (bytes, count))| NamedBytes {
            name: name.to_string(),
            bytes,
            count,
        })
        .collect();
    others.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
    WgpuMemory {
        reserved: report.total_reserved_bytes,
        allocated: report.total_allocated_bytes,
        internal,
        vramkit,
        others,
    }
}

impl std::fmt::Display for LedgerReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = String::new();
        let _ = writeln!(out, "device memory ledger: {}", self.device);
        let row = |out: &mut String, what: &str, bytes: u64, note: &str| {
            let _ = writeln!(out, "  {what:<34} {:>12}  {note}", fmt_bytes(bytes));
        };
        for (part, title) in [(Part::App, "app"), (Part::Vramkit, "vramkit")] {
            let device = self.bytes(part, MemoryKind::Device);
            let host = self.bytes(part, MemoryKind::Host);
            row(
                &mut out,
                title,
                device,
                &format!("(+ {} host memory)", fmt_bytes(host)),
            );
            for l in self.lines.iter().filter(|l| l.part == part) {
                let mut notes: Vec<String> = Vec::new();
                if l.kind == MemoryKind::Host {
                    notes.push("host memory".into());
                }
                if let Some(n) = l.resources {
                    notes.push(format!("{n} resource{}", if n == 1 { "" } else { "s" }));
                }
                let mut shown: Vec<String> = l
                    .detail
                    .iter()
                    .take(4)
                    .map(|(k, b)| format!("'{k}' {}", fmt_bytes(*b)))
                    .collect();
                if l.detail.len() > 4 {
                    shown.push(format!("{} more", l.detail.len() - 4));
                }
                if !shown.is_empty() {
                    notes.push(shown.join(", "));
                }
                let note = notes.join("; ");
                row(&mut out, &format!("  {}", l.name), l.bytes, &note);
            }
        }
        match &self.wgpu {
            Some(w) => {
                row(
                    &mut out,
                    "wgpu internal",
                    w.internal_bytes(),
                    &format!(
                        "{} free in its blocks, {} its own resources",
                        fmt_bytes(w.reserved.saturating_sub(w.allocated)),
                        fmt_bytes(w.internal)
                    ),
                );
                let top: Vec<String> = w
                    .others
                    .iter()
                    .take(4)
                    .map(|o| format!("'{}' {} x{}", o.name, fmt_bytes(o.bytes), o.count))
                    .collect();
                row(
                    &mut out,
                    "  app's resources in wgpu",
                    w.others_bytes(),
                    &top.join(", "),
                );
            }
            None => {
                let _ = writeln!(out, "  wgpu internal: no allocator report on this backend");
            }
        }
        match (self.driver, self.untracked()) {
            (Some(d), Some(u)) => {
                row(
                    &mut out,
                    &format!("driver ({})", d.source),
                    d.usage,
                    &format!("budget {}", fmt_bytes(d.budget)),
                );
                row(&mut out, "untracked", u, "driver usage no line explains");
            }
            _ => {
                let _ = writeln!(out, "  driver: no reading on this device");
            }
        }
        if let Some(u) = self.untracked_in_wgpu() {
            row(
                &mut out,
                "unregistered in wgpu",
                u,
                "wgpu resources beyond the app's lines",
            );
        }
        for g in &self.growing {
            let _ = writeln!(out, "  growing: {g}");
        }
        f.write_str(&out)
    }
}

#[cfg(feature = "metrics")]
impl LedgerReport {
    /// Publishes the report through the `metrics` facade (feature `metrics`), one series
    /// per line: `vramkit_ledger_bytes{part, name, memory}` (`part` "app" or "vramkit",
    /// `memory` "device" or "host"), and, where known, `vramkit_ledger_wgpu_internal_bytes`,
    /// `vramkit_ledger_driver_usage_bytes`, `vramkit_ledger_driver_budget_bytes`,
    /// `vramkit_ledger_untracked_bytes` and `vramkit_ledger_growing_owners`; each with the
    /// label `device`.
    ///
    /// ```no_run
    /// let gpu = vramkit::Gpu::headless()?;
    /// // metrics_exporter_prometheus::PrometheusBuilder::new().install()?; (your choice)
    /// gpu.ledger().report().publish_metrics();
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn publish_metrics(&self) {
        use metrics::gauge;
        let device = self.device.clone();
        for l in &self.lines {
            let part = match l.part {
                Part::App => "app",
                Part::Vramkit => "vramkit",
            };
            let memory = match l.kind {
                MemoryKind::Device => "device",
                MemoryKind::Host => "host",
            };
            gauge!(
                "vramkit_ledger_bytes",
                "device" => device.clone(),
                "part" => part,
                "name" => l.name.clone(),
                "memory" => memory
            )
            .set(l.bytes as f64);
        }
        let set = |name: &'static str, value: Option<u64>| {
            if let Some(v) = value {
                gauge!(name, "device" => device.clone()).set(v as f64);
            }
        };
        set("vramkit_ledger_wgpu_internal_bytes", self.wgpu_internal());
        set(
            "vramkit_ledger_driver_usage_bytes",
            self.driver.map(|d| d.usage),
        );
        set(
            "vramkit_ledger_driver_budget_bytes",
            self.driver.map(|d| d.budget),
        );
        set("vramkit_ledger_untracked_bytes", self.untracked());
        set(
            "vramkit_ledger_growing_owners",
            Some(self.growing.len() as u64),
        );
    }
}
