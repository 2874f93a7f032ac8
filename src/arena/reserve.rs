//! Placing a request in the blocks: a range in an existing block, else a new block within
//! the budget, the pool's quota and the device's limits ([`Shared::try_place`],
//! [`Shared::reserve_block`]), and the out-of-memory error that names the limit crossed,
//! what was asked and what was free ([`Shared::oom`]). The state machine around these
//! (when to poll, wait, ask the tiers for room) is `acquire.rs`.

use super::acquire::{Request, Reserve};
use super::block::BlockBuffer;
use super::history::EventKind;
use super::state::{Placed, State};
use super::Shared;
use crate::alloc::BlockId;
use crate::error::{Limit, OutOfMemory};
use crate::{fmt_bytes, Error, Result};

/// What takes a new block's spanning range under the lock that reserved it
/// ([`Shared::reserve_block`]).
pub(super) type Install<'a> = &'a mut dyn FnMut(&mut State, BlockId, Placed);

impl Shared {
    /// One placement attempt; creates a block buffer if `req.allow_new` and limits allow.
    pub(super) fn try_place(&self, st: &mut State, req: &Request<'_>) -> Result<Placed, Reserve> {
        let reserved_total = st.reserved();
        let p = &mut st.pools[req.pool];
        let pool_reserved = p.set.stats().reserved;
        let quota = p.config.quota;
        // What the budget and the quota leave: new blocks are sized to fit it, and the
        // tighter of the two is the one a refusal names.
        let budget = st.budget;
        let budget_room = budget.map_or(u64::MAX, |b| b.saturating_sub(reserved_total));
        let quota_room = quota.map_or(u64::MAX, |q| q.saturating_sub(pool_reserved));
        let usage = p.config.usage;
        let max_buffer = self.gpu.limits().max_buffer_size;
        let mut created: Option<BlockBuffer> = None;
        let mut released = Vec::new();
        let name = &self.config.name;
        // Borrowed, not cloned: this runs on every allocation.
        let pool_name: &str = &p.name;
        let allow_new = req.allow_new;
        let label = req.label;
        let own = req.mode.own;
        let result = p.set.allocate_placed(
            req.total,
            req.align,
            budget_room.min(quota_room).min(max_buffer),
            own,
            |id, block_size| {
                if !allow_new {
                    return Err(Reserve::NeedBlock);
                }
                if block_size > max_buffer {
                    return Err(Reserve::Over(
                        Limit::MaxBufferSize,
                        Some(max_buffer),
                        block_size,
                    ));
                }
                let over_quota = block_size > quota_room;
                let over_budget = block_size > budget_room;
                if over_quota && (quota_room <= budget_room || !over_budget) {
                    return Err(Reserve::Over(
                        Limit::PoolQuota(pool_name.to_string()),
                        quota,
                        block_size,
                    ));
                }
                if over_budget {
                    return Err(Reserve::Over(Limit::Budget, budget, block_size));
                }
                let buffer = BlockBuffer::create(
                    &self.gpu,
                    block_size,
                    usage,
                    self.host_visible_blocks,
                    self.config.dry_run,
                    &block_label(name, pool_name, id.0, own, label),
                )
                .map_err(|e| match e {
                    Error::DeviceLost { .. } => Reserve::Failed(e),
                    e => Reserve::Device(e.to_string()),
                })?;
                if let Some(old) = created.replace(buffer) {
                    // The BlockSet asked again with a larger size. Nobody else has seen
                    // this buffer, so no callback of anyone's can be pending on it.
                    old.destroy();
                }
                Ok(())
            },
            |id| released.push(id),
        );
        let gave_back = !released.is_empty();
        for id in released {
            st.retire_block(req.pool, id);
        }
        let placed = match result {
            Ok(placed) => placed,
            Err(e) => {
                if let Some(b) = created {
                    b.destroy();
                }
                // The room passed to the block set predates the blocks it just gave back
                // (`release_empty_before_grow`): a limit it reported may no longer hold.
                if gave_back && matches!(e, Reserve::Over(..)) {
                    return Err(Reserve::Released);
                }
                return Err(e);
            }
        };
        if let Some(buffer) = created {
            st.install_block(req.pool, placed.block, buffer);
        }
        Ok(placed)
    }

    /// Reserves an empty block of exactly `bytes` in `pool` within the budget and quota
    /// (see [`crate::alloc::BlockSet::reserve_block`]).
    /// With `hold`, the block is also filled with one range spanning it, under the same
    /// lock: a block left empty between two locks could take another thread's allocation.
    /// When the budget, quota or buffer size leaves no room, the refusal is
    /// [`Error::OutOfMemory`], counted and recorded; with `quiet` (a defragmentation
    /// asking whether a fresh block fits, not a request refused) it is `Ok(None)`, and
    /// nothing is counted or recorded.
    pub(super) fn reserve_block(
        &self,
        pool: usize,
        bytes: u64,
        label: &str,
        hold: Option<Install<'_>>,
        quiet: bool,
    ) -> Result<Option<BlockId>> {
        self.gpu.check_alive()?;
        let mut st = self.state.lock();
        let reserved_total = st.reserved();
        let budget = st.budget;
        let Some(p) = st.pools.get_mut(pool) else {
            return Err(Error::misuse(
                crate::Misuse::Foreign,
                format!("pool {pool} does not exist"),
                "use a PoolId from this arena",
            ));
        };
        let bytes = bytes.next_multiple_of(p.alignment.max(wgpu::COPY_BUFFER_ALIGNMENT));
        let over_budget = budget.is_some_and(|b| reserved_total + bytes > b);
        let over_quota = p
            .config
            .quota
            .is_some_and(|q| p.set.stats().reserved + bytes > q);
        if over_budget || over_quota || bytes > self.gpu.limits().max_buffer_size {
            if quiet {
                self.unlock(st);
                return Ok(None);
            }
            st.counters.ooms += 1;
            let limit = if over_budget {
                Limit::Budget
            } else if over_quota {
                Limit::PoolQuota(st.pools[pool].name.clone())
            } else {
                Limit::MaxBufferSize
            };
            let e = self.oom(&mut st, pool, bytes, label, limit, budget, 0);
            self.unlock(st);
            return Err(e);
        }
        let usage = p.config.usage;
        let name = format!("{}/{}/block ({label})", self.config.name, p.name);
        let mut created = None;
        let id = p.set.reserve_block(bytes, |_, size| {
            created = Some(BlockBuffer::create(
                &self.gpu,
                size,
                usage,
                self.host_visible_blocks,
                self.config.dry_run,
                &name,
            )?);
            Ok::<(), Error>(())
        });
        let id = match (id, created) {
            (Ok(id), Some(buffer)) => {
                st.install_block(pool, id, buffer);
                Ok(id)
            }
            (Err(e), _) => Err(e),
            (Ok(_), None) => Err(Error::Device {
                during: "reserving a block".into(),
                message: "no buffer was created".into(),
            }),
        };
        let result = match id {
            Ok(id) if hold.is_some() => {
                let p = &mut st.pools[pool];
                let size = p.set.block(id).map_or(0, |a| a.capacity());
                let align = p.alignment;
                match p.set.allocate_in(id, size, align) {
                    Some(span) => {
                        // Handed over under the same lock: a spanning range nobody holds
                        // would break the state's invariant 6 for the next lock holder.
                        if let Some(install) = hold {
                            install(&mut st, id, span);
                        }
                        Ok(id)
                    }
                    None => {
                        // Unreachable: a new block's whole capacity is free.
                        if p.set.release_block(id).is_some() {
                            st.retire_block(pool, id);
                        }
                        Err(Error::Device {
                            during: "reserving a block".into(),
                            message: "a new block could not be held by one range".into(),
                        })
                    }
                }
            }
            Ok(id) => Ok(id),
            Err(e) => Err(e),
        };
        self.unlock(st);
        result.map(Some)
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn oom(
        &self,
        st: &mut State,
        pool: usize,
        size: u64,
        label: &str,
        limit: Limit,
        budget: Option<u64>,
        retries: u32,
    ) -> Error {
        let hint = match &limit {
            Limit::Budget => {
                "drop allocations you no longer need, call Arena::trim, or raise the budget"
            }
            Limit::PoolQuota(_) => "free allocations in this pool or raise its quota",
            Limit::Device => "the device is full: lower the budget or free memory elsewhere",
            Limit::MaxBufferSize => {
                "split the data into several allocations no larger than the max buffer size"
            }
            Limit::HostTier => "drop movable allocations or raise the host tier's budget",
        };
        // The refusal goes on the memory history, where the timeline shows it.
        if st.history.is_some() {
            let label_index = st.intern(label);
            if let Some(h) = st.history.as_mut() {
                h.push(EventKind::Failed, 0, size, label_index, pool, u32::MAX, 0);
            }
        }
        let p = &st.pools[pool];
        let largest_free = p.largest_free();
        let policy = p.set.policy();
        // A free range as large as the request that did not serve it: say why.
        let free_range_unusable = (largest_free >= size).then(|| {
            if policy.is_dedicated(size, st.reserved()) {
                format!(
                    "requests of {} or more, or of 1/{} of the reserved bytes, get a block of \
                     their own, so free ranges in shared blocks do not serve them",
                    fmt_bytes(policy.dedicated_threshold),
                    policy.dedicated_share
                )
            } else {
                format!(
                    "no free range holds {} at the pool's alignment of {} bytes",
                    fmt_bytes(size),
                    p.alignment
                )
            }
        });
        Error::OutOfMemory(Box::new(OutOfMemory {
            requested: size,
            label: label.to_string(),
            pool: p.name.clone(),
            limit,
            allocated: st.counters.allocated,
            reserved: st.reserved(),
            limit_bytes: budget,
            largest_free,
            free_range_unusable,
            new_block: None,
            retries,
            top_labels: top_labels(st, 5),
            hint: hint.to_string(),
        }))
    }
}

/// The `n` labels holding the most live bytes, largest first.
fn top_labels(st: &State, n: usize) -> Vec<(String, u64)> {
    let mut labels: Vec<(String, u64)> = st
        .label_stats
        .iter()
        .filter(|(_, l)| l.bytes > 0)
        .map(|(name, l)| (name.to_string(), l.bytes))
        .collect();
    labels.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    labels.truncate(n);
    labels
}

/// The wgpu label of a new block: the arena, the pool, the block, and whose it is. wgpu
/// names the buffer in its errors, so a shared block says it is shared (the allocation
/// named is only the first placed in it, not necessarily the one a message is about).
fn block_label(arena: &str, pool: &str, block: u32, own: bool, label: &str) -> String {
    if own {
        format!("{arena}/{pool}/block{block}: the own buffer of '{label}'")
    } else {
        format!("{arena}/{pool}/block{block}: shared by many allocations (first: '{label}')")
    }
}
