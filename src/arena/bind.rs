//! Bind groups of arena allocations for a host app's own pipelines.
//!
//! An arena's allocations are ranges of shared `wgpu::Buffer`s. A wgpu program written the
//! usual way binds each of its buffers whole and never meets two rules that ranges of one
//! buffer run into:
//! - **One buffer, one kind of use per pass.** wgpu refuses a usage scope (a dispatch, or
//!   a draw) that binds one buffer `read_write` beside any other binding of it (`read`,
//!   `uniform`): a compute pass reading particles from one allocation and writing them to
//!   another fails in `CommandEncoder::finish` when both lie in one block. Two
//!   `read_write` bindings of one buffer are allowed where their ranges do not overlap.
//! - **A bind group must not outlive what it binds.** wgpu keeps the *buffer* alive while
//!   a bind group uses it, not the range: an allocation dropped while a bind group still
//!   names it goes back to the arena, and the next allocation placed there aliases it
//!   without an error.
//!
//! [`BindGroup`] checks the first before wgpu sees the entries (a typed error naming both
//! allocations, and how to part them: [`Arena::alloc_own_buffer_in`](super::Arena::alloc_own_buffer_in)
//! or another pool) and holds every allocation it binds for as long as it lives.
//! [`BindGroup::check_pass`] checks the bind groups one pass uses together.

use std::sync::Arc;

use super::{Allocation, Typed};
use crate::{Error, Gpu, Result};

/// How a binding uses its buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// `var<uniform>`.
    Uniform,
    /// `var<storage, read>`.
    Read,
    /// `var<storage, read_write>`.
    ReadWrite,
}

/// Something that is, or holds, one arena allocation: [`Allocation`] or [`Typed`].
pub trait Bindable: Send + Sync + 'static {
    /// The allocation.
    fn allocation(&self) -> &Allocation;
}

impl Bindable for Allocation {
    fn allocation(&self) -> &Allocation {
        self
    }
}

impl<T: bytemuck::Pod + Send + Sync> Bindable for Typed<T> {
    fn allocation(&self) -> &Allocation {
        Typed::allocation(self)
    }
}

/// One entry of a [`BindGroup`]: a binding number, the allocation (shared, so that the
/// bind group can hold it) and how the shader uses it.
#[derive(Clone)]
pub struct BindEntry {
    binding: u32,
    held: Arc<dyn Bindable>,
    access: Access,
}

impl BindEntry {
    /// `binding` as `var<uniform>`.
    pub fn uniform<A: Bindable>(binding: u32, allocation: &Arc<A>) -> BindEntry {
        Self::new(binding, allocation, Access::Uniform)
    }

    /// `binding` as `var<storage, read>`.
    pub fn read<A: Bindable>(binding: u32, allocation: &Arc<A>) -> BindEntry {
        Self::new(binding, allocation, Access::Read)
    }

    /// `binding` as `var<storage, read_write>`.
    pub fn read_write<A: Bindable>(binding: u32, allocation: &Arc<A>) -> BindEntry {
        Self::new(binding, allocation, Access::ReadWrite)
    }

    /// `binding` used as `access` says.
    pub fn new<A: Bindable>(binding: u32, allocation: &Arc<A>, access: Access) -> BindEntry {
        BindEntry {
            binding,
            held: allocation.clone(),
            access,
        }
    }

    fn allocation(&self) -> &Allocation {
        self.held.allocation()
    }
}

/// A `wgpu::BindGroup` of arena allocations, checked and holding them alive (module docs
/// of `arena::bind`). Set it with `pass.set_bind_group(i, bind_group.group(), &[])`.
///
/// ```no_run
/// # let gpu = vramkit::Gpu::headless()?;
/// # let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// # let layout: wgpu::BindGroupLayout = unimplemented!();
/// use std::sync::Arc;
/// use vramkit::arena::{BindEntry, BindGroup};
/// let src = Arc::new(arena.alloc(64 << 10, "particles a")?);
/// // Written in the same pass as `src` is read: a buffer of its own.
/// let dst = Arc::new(arena.alloc_own_buffer_in(arena.default_pool(), 64 << 10, "particles b")?);
/// let group = BindGroup::new(
///     &gpu,
///     "compute",
///     &layout,
///     &[BindEntry::read(1, &src), BindEntry::read_write(2, &dst)],
/// )?;
/// drop((src, dst)); // the bind group holds both until it drops
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct BindGroup {
    group: wgpu::BindGroup,
    entries: Vec<BindEntry>,
}

impl std::fmt::Debug for BindGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let entries: Vec<(u32, String, Access)> = self
            .entries
            .iter()
            .map(|e| (e.binding, e.allocation().label().to_string(), e.access))
            .collect();
        f.debug_struct("BindGroup")
            .field("entries", &entries)
            .finish()
    }
}

impl BindGroup {
    /// Checks `entries` (every allocation on `gpu`'s device; no buffer bound `read_write`
    /// beside another use of it, or twice over overlapping ranges) and creates the bind
    /// group inside an error scope, `label` naming it in wgpu's messages. The allocations
    /// stay alive as long as the bind group.
    pub fn new(
        gpu: &Gpu,
        label: &str,
        layout: &wgpu::BindGroupLayout,
        entries: &[BindEntry],
    ) -> Result<BindGroup> {
        for e in entries {
            e.allocation().check_device(gpu, "a bind group")?;
        }
        check_entries(entries.iter())?;
        let group = gpu.scoped(&format!("creating bind group '{label}'"), || {
            let wgpu_entries: Vec<wgpu::BindGroupEntry<'_>> = entries
                .iter()
                .map(|e| wgpu::BindGroupEntry {
                    binding: e.binding,
                    resource: e.allocation().binding_resource(),
                })
                .collect();
            gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some(label),
                layout,
                entries: &wgpu_entries,
            })
        })?;
        Ok(BindGroup {
            group,
            entries: entries.to_vec(),
        })
    }

    /// The wgpu bind group.
    pub fn group(&self) -> &wgpu::BindGroup {
        &self.group
    }

    /// Checks bind groups that one pass uses together (a dispatch or a draw sees them
    /// all): the rule of [`new`](Self::new) across them.
    pub fn check_pass(groups: &[&BindGroup]) -> Result<()> {
        check_entries(groups.iter().flat_map(|g| g.entries.iter()))
    }
}

/// The pair of `entries` that one usage scope may not hold, as a typed error.
fn check_entries<'a>(entries: impl Iterator<Item = &'a BindEntry> + Clone) -> Result<()> {
    let all: Vec<&BindEntry> = entries.collect();
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            let (x, y) = (a.allocation(), b.allocation());
            if x.buffer() != y.buffer() {
                continue;
            }
            let overlap = x.offset() < y.offset() + y.size() && y.offset() < x.offset() + x.size();
            let conflict = match (a.access, b.access) {
                (Access::ReadWrite, Access::ReadWrite) => overlap,
                (Access::ReadWrite, _) | (_, Access::ReadWrite) => true,
                _ => false,
            };
            if conflict {
                let (w, other) = if a.access == Access::ReadWrite {
                    (a, b)
                } else {
                    (b, a)
                };
                return Err(Error::misuse(
                    crate::Misuse::Overlap,
                    format!(
                        "binding {} ('{}', read_write) and binding {} ('{}', {:?}) lie in one \
                         wgpu buffer ('{}'), and wgpu refuses a buffer bound read_write beside \
                         another use of it{} in one pass",
                        w.binding,
                        w.allocation().label(),
                        other.binding,
                        other.allocation().label(),
                        other.access,
                        w.allocation().buffer_name(),
                        if overlap {
                            " (here over overlapping ranges)"
                        } else {
                            ""
                        },
                    ),
                    format!(
                        "allocate '{}' with Arena::alloc_own_buffer_in (a buffer of its own), \
                         or the two in different pools",
                        w.allocation().label()
                    ),
                ));
            }
        }
    }
    Ok(())
}
