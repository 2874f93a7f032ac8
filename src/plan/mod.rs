//! Memory planning at run time: how much a piece of code will need (a dry run), the
//! largest batch that fits a budget, and loops that replay their allocations from a
//! planned offset table (the offline planner itself is [`crate::alloc::plan`], pure CPU).
//!
//! # Dry runs
//! [`Runtime::dry_run`](crate::Runtime::dry_run) runs *your* code against a copy of the
//! runtime whose arena is dry ([`ArenaConfig::dry_run`](crate::ArenaConfig::dry_run)):
//! - **Allocations are real offsets, not memory.** The same allocator core, block policy,
//!   by-size cache, pools, quotas and budget decide every offset and every block; a block
//!   is a 256-byte placeholder buffer, so a dry run of 60 GiB costs kilobytes.
//! - **Kernels and transfers are checked, not recorded.** vramkit's kernels
//!   ([`kernels::Batch`](crate::kernels::Batch))
//!   check every argument and take their parameter memory from the arena as in a real
//!   run, then record nothing (their own state, the reductions' and scans', lives outside
//!   the arena). Uploads check their range and move no byte;
//!   `download`, `download_into` and `download_typed` return zeros; `download_view` and
//!   `download_async` fail (there is nothing to map). Code that branches on downloaded
//!   values sees zeros. Commands you record yourself on
//!   [`Allocation::buffer`](crate::Allocation::buffer) would address a placeholder:
//!   skip them when [`Allocation::is_virtual`](crate::Allocation::is_virtual) is true.
//!   Tiered memory and virtual textures do not run dry.
//! - **Frees come back at once**, as if the GPU finished every submission immediately.
//!   The peak allocated bytes are exactly those of a real run of the same code (live bytes
//!   do not depend on timing). The peak *reserved* bytes equal a real run's when that run
//!   synchronizes where the dry run's frees would have come back (tests check both); a
//!   real run with GPU work in flight may reserve more while frees wait for the GPU,
//!   which is what [`max_batch`](crate::Runtime::max_batch)'s margin is for.
//!
//! The report ([`DryRun`]) gives the peaks overall, per label and per pool, and the
//! arena's memory history of the run ([`MemoryHistory`](crate::arena::MemoryHistory): every allocation, free and
//! block, exportable as a Perfetto trace or a timeline picture).
//!
//! # The largest batch that fits
//! [`Runtime::max_batch`](crate::Runtime::max_batch) bisects a range of batch sizes with
//! one dry run per probe (O(log n) dry runs), assuming memory does not shrink as the batch
//! grows. A batch fits when its dry run's peak reserved bytes plus a safety margin stay
//! within the budget; the margin is a parameter and part of the answer ([`MaxBatch`]),
//! never hidden. A dry run that fails with out-of-memory (a single allocation above the
//! device's largest buffer) does not fit; any other error is returned.
//!
//! # Planned loops
//! A [`PlannedLoop`] records one iteration of a loop whose allocations repeat, plans
//! offsets for them inside one block ([`crate::alloc::plan::plan`]), and serves later
//! iterations from that table; see its documentation for what it promises and how
//! iterations are fenced.

mod dry_run;
mod planned_loop;

pub use dry_run::{DryRun, LabelPeak, MaxBatch};
pub use planned_loop::{Iteration, LoopConfig, LoopStats, PlannedLoop};

pub(crate) use dry_run::search_max_batch;
