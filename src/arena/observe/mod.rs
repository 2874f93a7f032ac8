//! What observers read of the arena, beside the allocator rather than inside it: the
//! statistics and the summary ([`stats`]), the leak report and the block dumps
//! ([`report`]), the memory history with its trace and timeline ([`history`]), and the
//! `metrics` facade's gauges and counters ([`metrics`], feature `metrics`). They read the
//! arena's records under its lock and draw or export outside it; nothing in the
//! allocator depends on them.

pub mod history;
mod ledger;
#[cfg(feature = "metrics")]
pub mod metrics;
pub(crate) mod report;
pub(crate) mod stats;
