//! The out-of-memory report.

use crate::fmt_bytes;

/// Which limit a request ran into.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Limit {
    /// The arena's budget.
    Budget,
    /// The pool's quota.
    PoolQuota(String),
    /// The device refused to create a buffer (wgpu out-of-memory).
    Device,
    /// Larger than the largest buffer the device can create.
    MaxBufferSize,
    /// The host tier's budget ([`crate::tier::TierConfig::host_budget`]): evicting to host
    /// memory would cross it while the device budget is full too.
    HostTier,
}

/// A request that did not fit. The arena is unchanged and still usable.
#[derive(Clone, Debug)]
pub struct OutOfMemory {
    /// Bytes requested.
    pub requested: u64,
    /// The allocation's label.
    pub label: String,
    /// The pool it was for.
    pub pool: String,
    /// What stopped it.
    pub limit: Limit,
    /// Live bytes in the arena.
    pub allocated: u64,
    /// Bytes held in blocks.
    pub reserved: u64,
    /// The limit in bytes, when there is one: the budget, the pool's quota or the
    /// device's largest buffer, as [`limit`](Self::limit) says.
    pub limit_bytes: Option<u64>,
    /// Largest free range in any block of the pool.
    pub largest_free: u64,
    /// Why that range could not serve the request, when it was large enough (the request
    /// gets a block of its own, say): so the message never reads as a contradiction.
    pub free_range_unusable: Option<String>,
    /// The new block the request needed, when one would have crossed the limit.
    pub new_block: Option<u64>,
    /// Empty-block releases tried before giving up.
    pub retries: u32,
    /// The labels that held the most live bytes at that moment, largest first (at most
    /// five): who to ask for memory back. The arena's memory history
    /// ([`Arena::record_history`](crate::Arena::record_history)) shows how they got there.
    pub top_labels: Vec<(String, u64)>,
    /// What to do about it.
    pub hint: String,
}

impl std::fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let limit = match &self.limit {
            Limit::Budget => "the arena budget".to_string(),
            Limit::PoolQuota(p) => format!("the quota of pool '{p}'"),
            Limit::Device => "device memory (wgpu reported out-of-memory)".to_string(),
            Limit::MaxBufferSize => "the device's max buffer size".to_string(),
            Limit::HostTier => "the host tier's budget".to_string(),
        };
        write!(
            f,
            "out of GPU memory: '{}' asked for {} in pool '{}'{}, which would exceed {}{}; \
             allocated {}, reserved {}, largest free range {}{}, after {} retries{}. {}",
            self.label,
            fmt_bytes(self.requested),
            self.pool,
            self.new_block.map_or(String::new(), |b| format!(
                " (a new block of {})",
                fmt_bytes(b)
            )),
            limit,
            self.limit_bytes
                .map_or(String::new(), |b| format!(" ({})", fmt_bytes(b))),
            fmt_bytes(self.allocated),
            fmt_bytes(self.reserved),
            fmt_bytes(self.largest_free),
            self.free_range_unusable
                .as_ref()
                .map_or(String::new(), |why| format!(" (unusable here: {why})")),
            self.retries,
            if self.top_labels.is_empty() {
                String::new()
            } else {
                let holders: Vec<String> = self
                    .top_labels
                    .iter()
                    .map(|(l, b)| format!("'{l}' {}", fmt_bytes(*b)))
                    .collect();
                format!("; largest holders: {}", holders.join(", "))
            },
            self.hint
        )
    }
}

impl std::error::Error for OutOfMemory {}
