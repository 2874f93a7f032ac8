//! The arena as a line of the device ledger (`crate::ledger`): its reserved bytes, what
//! its labels hold of them, and the prefix its blocks carry in wgpu's allocator report.

use std::sync::Arc;

use crate::arena::{Arena, Shared};
use crate::gpu::accounts::{MemoryKind, MemorySource, SourceLine};

impl MemorySource for Shared {
    fn lines(&self) -> Vec<SourceLine> {
        // A dry run's blocks are virtual: it holds nothing of the device.
        if self.config.dry_run {
            return Vec::new();
        }
        let st = self.state.lock();
        let reserved = st.reserved();
        let mut detail: Vec<(String, u64)> = st
            .label_stats
            .iter()
            .filter(|(_, l)| l.bytes > 0)
            .map(|(k, l)| (k.to_string(), l.bytes))
            .collect();
        let allocated = st.counters.allocated;
        drop(st);
        detail.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        let free = reserved.saturating_sub(allocated);
        if free > 0 {
            detail.push(("(free in its blocks)".into(), free));
        }
        vec![SourceLine {
            name: format!("arena '{}'", self.config.name),
            kind: MemoryKind::Device,
            bytes: reserved,
            detail,
            label_prefix: Some(format!("{}/", self.config.name)),
        }]
    }
}

impl Arena {
    /// Files this arena with its device's ledger (once, when it is made).
    pub(crate) fn join_ledger(&self) {
        let source: Arc<dyn MemorySource> = self.front.shared.clone();
        self.gpu().accounts().register(Arc::downgrade(&source));
    }
}
