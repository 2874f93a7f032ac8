//! Memory history: an opt-in ring of the arena's last events, to look at *when* memory
//! was taken and by whom (the dumps of `report.rs` show *where* it sits).
//!
//! # How it works
//! [`Arena::record_history`] starts a ring of at most `capacity` [`MemoryEvent`]s:
//! allocations (and whether a cached range served them), frees, and blocks created and
//! released, each with its time, size, label, pool, block and offset, and optionally a
//! backtrace. GPU work joins it on its own track as [`GpuSpan`]s measured with timestamp
//! queries while [`Gpu::set_profiling`](crate::Gpu::set_profiling) is on (kernels,
//! uploads, downloads; `gpu/profile.rs`).
//! [`Arena::history`] copies the ring out as a [`MemoryHistory`], which exports a Chrome
//! trace / Perfetto JSON ([`MemoryHistory::to_chrome_trace`]) and a timeline picture
//! (`MemoryHistory::to_timeline_svg`, feature `timeline`, on by default): bytes over time
//! stacked by label under the reserved line, like PyTorch's memory viz.
//!
//! # Promises
//! - **Bounded.** The ring holds at most `capacity` events (GPU spans live in the GPU's
//!   own ring of at most 100 000). When full, the oldest event is folded into a baseline
//!   (live bytes per label, reserved bytes per pool at the ring's first event), so the
//!   timeline stays exact from its first event on, and [`MemoryHistory::dropped`] counts
//!   what fell out.
//! - **Balanced.** Every allocation in a snapshot either has its free in the ring or is
//!   listed in [`MemoryHistory::live`]; a free whose allocation fell out of the ring is
//!   marked as such in the trace.
//! - **Off costs a branch.** Recording runs under the arena's lock where the counters are
//!   kept already; with no history, each event site tests one `Option`. Tiers
//!   (eviction and restore events) do not exist yet.

mod chrome;
mod memory_viz;
mod pickle;
#[cfg(feature = "timeline")]
mod timeline;

use std::sync::Arc;
use web_time::Instant;

use crate::gpu::clock;

use crate::arena::Arena;

/// Settings of [`Arena::record_history`].
#[derive(Clone, Copy, Debug)]
pub struct HistoryConfig {
    /// Most events kept (and most GPU spans); older ones fold into the baseline.
    pub capacity: usize,
    /// Capture a backtrace with every allocation (slow: for finding who allocates).
    pub backtraces: bool,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            capacity: 100_000,
            backtraces: false,
        }
    }
}

/// What a [`MemoryEvent`] records.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// An allocation carved from a block.
    Alloc,
    /// An allocation served by a freed range of the same size (no allocator work).
    Reuse,
    /// An allocation dropped (its range waits for the GPU, then returns).
    Free,
    /// A block (one wgpu buffer) created.
    BlockCreate,
    /// A block given back.
    BlockRelease,
    /// A movable allocation copied to host memory ([`crate::tier`]); the device range's
    /// own `Free` follows. A marker: it changes no tally.
    Evict,
    /// A movable allocation copied back from host memory into the allocation this event
    /// names (whose `Alloc` came just before). A marker.
    Restore,
    /// A movable allocation moved by defragmentation into the allocation this event
    /// names. A marker.
    Move,
    /// A request refused with out-of-memory: `size` is what it asked for, `label` its
    /// label. A marker; the timeline draws it as a red bar that tall.
    Failed,
}

/// One event of the history.
#[derive(Clone, Debug)]
pub struct MemoryEvent {
    /// Nanoseconds since recording started.
    pub t_ns: u64,
    /// What happened.
    pub kind: EventKind,
    /// The allocation's id (0 for block events).
    pub id: u64,
    /// Bytes the event adds or removes: the allocation's range (guards and alignment
    /// included, as [`ArenaStats::allocated`](crate::arena::ArenaStats::allocated) counts it) or
    /// the block's size.
    pub size: u64,
    /// Index into [`MemoryHistory::labels`] (`u32::MAX` for block events).
    pub label: u32,
    /// Index into [`MemoryHistory::pools`].
    pub pool: u32,
    /// The block (its index in the pool).
    pub block: u32,
    /// Where the allocation's range starts in its block (0 for block events).
    pub offset: u64,
    /// Where the allocation was made, when [`HistoryConfig::backtraces`] is on.
    pub backtrace: Option<Arc<std::backtrace::Backtrace>>,
}

/// A stretch of GPU work measured with timestamp queries.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSpan {
    /// What ran: a kernel ("axpy", "matmul", ...), "upload" or "download".
    pub name: String,
    /// Start, in nanoseconds since recording started. GPU clocks are not the host's: a
    /// submission's first span is placed at the host time it was submitted and the rest
    /// keep their GPU offsets from it.
    pub start_ns: u64,
    /// Duration measured on the GPU.
    pub dur_ns: u64,
}

/// One event as the ring keeps it: a [`MemoryEvent`] without its backtrace (kept beside
/// the ring), so that writing one never reads or drops what its slot held.
#[derive(Clone, Copy)]
struct Record {
    t_ns: u64,
    kind: EventKind,
    id: u64,
    size: u64,
    label: u32,
    pool: u32,
    block: u32,
    offset: u64,
}

/// The ring inside the arena's state.
pub(crate) struct HistoryRing {
    /// Keeps vramkit's clock ticking finely while this history records (`gpu/clock.rs`).
    _fine: clock::Fine,
    /// When recording started, on that clock: events carry nanoseconds since.
    started: clock::Stamp,
    /// The same instant, to place GPU spans.
    started_at: Instant,
    config: HistoryConfig,
    /// A ring of `capacity` slots, allocated and written once when recording starts: a
    /// growing queue paid its reallocations and first-touch page faults on the hot path.
    /// The events are `len` slots from `head`, oldest first. Plain `Copy` records, so an
    /// event is a store: a slot holding something to drop (a backtrace's `Arc`) made
    /// every event read its slot first, a cache miss on a ring larger than the caches.
    slots: Vec<Record>,
    /// The backtraces of the events in `slots`, slot for slot, when
    /// [`HistoryConfig::backtraces`] is on (empty otherwise).
    backtraces: Vec<Option<Arc<std::backtrace::Backtrace>>>,
    head: usize,
    len: usize,
    dropped: u64,
    /// Live bytes per label index and reserved bytes per pool at the first event kept.
    base_label_bytes: Vec<u64>,
    base_reserved: Vec<u64>,
}

impl HistoryRing {
    pub fn new(config: HistoryConfig, label_bytes: Vec<u64>, pool_reserved: Vec<u64>) -> Self {
        let capacity = config.capacity.max(1);
        let blank = Record {
            t_ns: 0,
            kind: EventKind::Free,
            id: 0,
            size: 0,
            label: 0,
            pool: 0,
            block: 0,
            offset: 0,
        };
        let fine = clock::Fine::new();
        HistoryRing {
            _fine: fine,
            started: clock::fine_now(),
            started_at: Instant::now(),
            config: HistoryConfig { capacity, ..config },
            slots: vec![blank; capacity],
            backtraces: if config.backtraces {
                vec![None; capacity]
            } else {
                Vec::new()
            },
            head: 0,
            len: 0,
            dropped: 0,
            base_label_bytes: label_bytes,
            base_reserved: pool_reserved,
        }
    }

    /// The instant recording started (GPU spans are placed relative to it).
    pub fn start(&self) -> Instant {
        self.started_at
    }

    /// Appends an event stamped now, folding the oldest into the baseline when full.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn push(
        &mut self,
        kind: EventKind,
        id: u64,
        size: u64,
        label: u32,
        pool: usize,
        block: u32,
        offset: u64,
    ) {
        let t_ns = clock::fine_now()
            .nanos()
            .saturating_sub(self.started.nanos());
        let capacity = self.slots.len();
        let at = if self.len < capacity {
            // A subtraction rather than `%`, a 64-bit division, on every event.
            let mut at = self.head + self.len;
            if at >= capacity {
                at -= capacity;
            }
            self.len += 1;
            at
        } else {
            self.fold_oldest()
        };
        // Field by field into the slot: a record built on the stack and copied in was
        // stored in 8-, 4- and 1-byte pieces and read back in 16-byte ones, which the
        // CPU cannot forward (a stall of about 10 cycles an event; measured by `bench
        // arena`, `arena_history_cost_ratio`).
        if let Some(slot) = self.slots.get_mut(at) {
            slot.t_ns = t_ns;
            slot.kind = kind;
            slot.id = id;
            slot.size = size;
            slot.label = label;
            slot.pool = pool as u32;
            slot.block = block;
            slot.offset = offset;
        }
        if self.config.backtraces {
            self.capture_backtrace(at, kind);
        }
    }

    /// Stores a backtrace for the event in slot `at` (allocations only; out of line: only
    /// a history that asked for backtraces does this).
    #[cold]
    fn capture_backtrace(&mut self, at: usize, kind: EventKind) {
        if let Some(slot) = self.backtraces.get_mut(at) {
            *slot = matches!(kind, EventKind::Alloc | EventKind::Reuse)
                .then(|| Arc::new(std::backtrace::Backtrace::force_capture()));
        }
    }

    /// A block of `size` bytes created or released in `pool`.
    pub fn push_block(&mut self, kind: EventKind, size: u64, pool: usize, block: u32) {
        self.push(kind, 0, size, u32::MAX, pool, block, 0);
    }

    /// Folds the oldest event into the baseline and returns its slot, which the caller
    /// overwrites (out of line: only a full ring does this).
    #[cold]
    fn fold_oldest(&mut self) -> usize {
        let at = self.head;
        let old = self.slots[at];
        self.head += 1;
        if self.head == self.slots.len() {
            self.head = 0;
        }
        self.fold(&old);
        at
    }

    /// The events kept, oldest first.
    fn events(&self) -> impl Iterator<Item = MemoryEvent> + '_ {
        (0..self.len).map(|k| {
            let at = (self.head + k) % self.slots.len();
            let r = self.slots[at];
            MemoryEvent {
                t_ns: r.t_ns,
                kind: r.kind,
                id: r.id,
                size: r.size,
                label: r.label,
                pool: r.pool,
                block: r.block,
                offset: r.offset,
                backtrace: self.backtraces.get(at).cloned().flatten(),
            }
        })
    }

    fn fold(&mut self, e: &Record) {
        self.dropped += 1;
        let grow = |v: &mut Vec<u64>, i: usize| {
            if v.len() <= i {
                v.resize(i + 1, 0);
            }
        };
        match e.kind {
            EventKind::Alloc | EventKind::Reuse | EventKind::Free => {
                let i = e.label as usize;
                grow(&mut self.base_label_bytes, i);
                let b = &mut self.base_label_bytes[i];
                *b = if e.kind == EventKind::Free {
                    b.saturating_sub(e.size)
                } else {
                    *b + e.size
                };
            }
            EventKind::Evict | EventKind::Restore | EventKind::Move | EventKind::Failed => {}
            EventKind::BlockCreate | EventKind::BlockRelease => {
                let i = e.pool as usize;
                grow(&mut self.base_reserved, i);
                let b = &mut self.base_reserved[i];
                *b = if e.kind == EventKind::BlockRelease {
                    b.saturating_sub(e.size)
                } else {
                    *b + e.size
                };
            }
        }
    }
}

/// A copy of the history ([`Arena::history`]).
#[derive(Clone, Debug)]
pub struct MemoryHistory {
    /// The arena's name.
    pub arena: String,
    /// Events, oldest first.
    pub events: Vec<MemoryEvent>,
    /// GPU work, oldest first.
    pub gpu_spans: Vec<GpuSpan>,
    /// Label names by index.
    pub labels: Vec<String>,
    /// Pool names by index.
    pub pools: Vec<String>,
    /// Events that fell out of the ring.
    pub dropped: u64,
    /// Live bytes per label index when the first event kept happened.
    pub base_label_bytes: Vec<u64>,
    /// Reserved bytes per pool index when the first event kept happened.
    pub base_reserved: Vec<u64>,
    /// Ids of the allocations live when the copy was taken.
    pub live: Vec<u64>,
    /// Nanoseconds since recording started when the copy was taken.
    pub end_ns: u64,
}

impl MemoryHistory {
    /// Writes [`to_chrome_trace`](Self::to_chrome_trace) to `path`.
    pub fn write_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> crate::Result<()> {
        write(path.as_ref(), self.to_chrome_trace(), "the memory trace")
    }

    /// Writes [`to_timeline_svg`](Self::to_timeline_svg) to `path` (feature `timeline`,
    /// on by default).
    #[cfg(feature = "timeline")]
    pub fn write_timeline_svg(&self, path: impl AsRef<std::path::Path>) -> crate::Result<()> {
        let svg = self.to_timeline_svg(1200, 600)?;
        write(path.as_ref(), svg, "the memory timeline")
    }

    /// Live bytes per label (labels with none left out) and reserved bytes after the last
    /// event: what the timeline ends at, and what [`Arena::stats`] says when nothing
    /// happened since.
    pub fn bytes_at_end(&self) -> (Vec<(String, u64)>, u64) {
        let (labels, reserved) = self.replay(|_| {});
        let by_label = labels
            .iter()
            .enumerate()
            .filter(|(_, &b)| b > 0)
            .map(|(i, &b)| (self.labels.get(i).cloned().unwrap_or_default(), b))
            .collect();
        (by_label, reserved)
    }

    /// Replays the events from the baseline, calling `visit` with the state before the
    /// first event and after each one; returns the final live bytes per label and
    /// reserved bytes. The timeline's and the trace's counters. One state at a time: a
    /// copy of every state would take events x labels words.
    pub(crate) fn replay(&self, mut visit: impl FnMut(&State<'_>)) -> (Vec<u64>, u64) {
        let mut labels = self.base_label_bytes.clone();
        labels.resize(self.labels.len().max(labels.len()), 0);
        let mut allocated: u64 = labels.iter().sum();
        let mut reserved: u64 = self.base_reserved.iter().sum();
        visit(&State {
            event: None,
            t_ns: self.events.first().map_or(0, |e| e.t_ns),
            labels: &labels,
            allocated,
            reserved,
        });
        for e in &self.events {
            match e.kind {
                EventKind::Alloc | EventKind::Reuse => {
                    if let Some(b) = labels.get_mut(e.label as usize) {
                        *b += e.size;
                        allocated += e.size;
                    }
                }
                EventKind::Free => {
                    if let Some(b) = labels.get_mut(e.label as usize) {
                        let freed = e.size.min(*b);
                        *b -= freed;
                        allocated -= freed;
                    }
                }
                EventKind::BlockCreate => reserved += e.size,
                EventKind::BlockRelease => reserved = reserved.saturating_sub(e.size),
                EventKind::Evict | EventKind::Restore | EventKind::Move | EventKind::Failed => {}
            }
            visit(&State {
                event: Some(e),
                t_ns: e.t_ns,
                labels: &labels,
                allocated,
                reserved,
            });
        }
        (labels, reserved)
    }
}

/// One state of [`MemoryHistory::replay`].
pub(crate) struct State<'a> {
    /// The event that led to it (`None`: the baseline).
    pub event: Option<&'a MemoryEvent>,
    /// (Read by the timeline only.)
    #[cfg_attr(not(feature = "timeline"), allow(dead_code))]
    pub t_ns: u64,
    /// Live bytes per label index (read by the timeline only).
    #[cfg_attr(not(feature = "timeline"), allow(dead_code))]
    pub labels: &'a [u64],
    /// Their sum.
    pub allocated: u64,
    pub reserved: u64,
}

fn write(path: &std::path::Path, text: String, what: &str) -> crate::Result<()> {
    std::fs::write(path, text).map_err(|e| crate::Error::Io {
        during: format!("writing {what} to {}", path.display()),
        source: e,
    })
}

impl Arena {
    /// Starts recording the memory history (or restarts it, empty), or stops it with
    /// `None`. See the module docs of `arena::history`.
    ///
    /// ```no_run
    /// use vramkit::arena::HistoryConfig;
    /// let gpu = vramkit::Gpu::headless()?;
    /// let arena = vramkit::Arena::new(&gpu, Default::default())?;
    /// arena.record_history(Some(HistoryConfig::default()));
    /// let a = arena.alloc(1 << 20, "activations")?;
    /// drop(a);
    /// let history = arena.history().expect("recording");
    /// history.write_chrome_trace("memory_trace.json")?; // open in ui.perfetto.dev
    /// history.write_timeline_svg("memory_timeline.svg")?;
    /// # Ok::<(), vramkit::Error>(())
    /// ```
    pub fn record_history(&self, config: Option<HistoryConfig>) {
        let mut st = self.shared().state.lock();
        let ring = config.map(|c| {
            let labels = st.label_stats.iter().map(|(_, l)| l.bytes).collect();
            let reserved = st.pools.iter().map(|p| p.set.stats().reserved).collect();
            Box::new(HistoryRing::new(c, labels, reserved))
        });
        st.history = ring;
    }

    /// A copy of the history recorded so far, or `None` when not recording.
    pub fn history(&self) -> Option<MemoryHistory> {
        let st = self.shared().state.lock();
        let h = st.history.as_ref()?;
        let mut live: Vec<u64> = st.live.iter().map(|(id, _)| *id).collect();
        live.sort_unstable();
        Some(MemoryHistory {
            arena: self.shared().config.name.clone(),
            events: h.events().collect(),
            gpu_spans: self
                .gpu()
                .profile_spans(h.start())
                .into_iter()
                .map(|s| GpuSpan {
                    name: s.name.to_string(),
                    start_ns: s.start.duration_since(h.start()).as_nanos() as u64,
                    dur_ns: s.dur_ns,
                })
                .collect(),
            labels: st.label_stats.iter().map(|(l, _)| l.to_string()).collect(),
            pools: st.pools.iter().map(|p| p.name.clone()).collect(),
            dropped: h.dropped,
            base_label_bytes: h.base_label_bytes.clone(),
            base_reserved: h.base_reserved.clone(),
            live,
            end_ns: h.start().elapsed().as_nanos() as u64,
        })
    }
}
