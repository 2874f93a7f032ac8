//! Shrinks: a texture giving back its top levels becomes a new texture with fewer levels,
//! filled by GPU copies of the levels it keeps. The shrinks a cut budget needs cannot
//! wait for a later frame as a growth does: `update` must give the memory back in the
//! frame the plan asks. So the frame's thread makes those (and a few more a frame: the
//! loaders prepare the rest, `mod.rs`) and records their copies, all of a frame's into
//! one command buffer ([`record`]).
//!
//! Not on several threads: making textures serialises in the driver (and in wgpu-hal's
//! memory allocator), so on an H200's host a budget cut's 85 shrinks took 7.0-7.3 ms
//! recorded in batches by the loader threads beside the frame's, against 3.4-3.9 ms on
//! the frame's thread alone (same call, three processes each).

use super::{copy_held_levels, TextureSpec};
use crate::{Error, Gpu, Result};

/// One texture to shrink: slot `slot`'s texture `held` (holding the chain's levels
/// `[held_from, spec.levels)`) replaced by one holding `[target, spec.levels)`.
pub(crate) struct Shrink {
    pub slot: usize,
    pub target: u32,
    pub spec: TextureSpec,
    pub held: wgpu::Texture,
    pub held_from: u32,
}

/// What [`record`] made for a frame's shrinks.
pub(crate) struct Recorded {
    /// Each shrink's new texture, in order; `None` where the device refused
    /// it (out of memory): that slot keeps its texture.
    pub textures: Vec<Option<wgpu::Texture>>,
    /// The copies into the new textures, finished; `None` when there are none.
    pub copies: Option<wgpu::CommandBuffer>,
    /// How many copies `copies` holds.
    pub copy_count: usize,
}

/// Makes the new textures of `shrinks` and records the copies of the levels they keep
/// into one command buffer. Runs on any thread.
pub(crate) fn record(gpu: &Gpu, shrinks: &[Shrink]) -> Result<Recorded> {
    let mut encoder = gpu
        .device()
        .create_command_encoder(&wgpu::CommandEncoderDescriptor {
            label: Some("vramkit mip shrinks"),
        });
    let mut textures = Vec::with_capacity(shrinks.len());
    let mut copy_count = 0;
    for s in shrinks {
        match s.spec.create(gpu, s.target) {
            Ok(texture) => {
                copy_count += copy_held_levels(
                    &mut encoder,
                    (&s.held, s.held_from),
                    (&texture, s.target),
                    s.target.max(s.held_from)..s.spec.levels,
                    s.spec.format,
                    s.spec.size,
                );
                textures.push(Some(texture));
            }
            Err(Error::OutOfMemory(_)) => textures.push(None),
            Err(e) => return Err(e),
        }
    }
    let copies = if copy_count > 0 {
        Some(gpu.scoped("recording mip shrinks' copies", || encoder.finish())?)
    } else {
        None
    };
    Ok(Recorded {
        textures,
        copies,
        copy_count,
    })
}
