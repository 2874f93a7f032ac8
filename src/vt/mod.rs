//! Tiled virtual textures: images far larger than GPU memory, sampled from the host's own
//! render or compute shaders while only the tiles the view needs live on the GPU.
//!
//! wgpu has no sparse or tiled resources, so this is done in software, as id Tech 5,
//! Unreal's streaming virtual textures and Barrett's SVT do it.
//!
//! # How it works
//! - A [`TileSource`] gives tiles of [`TILE`] x [`TILE`] texels (RGBA8 unless it says
//!   otherwise: R8, RG8, RGBA8 sRGB and 16-bit float formats too, [`texel_bytes`]):
//!   [`INNER`] texels of the page and a [`BORDER`] of 4 copied from the neighbours, so
//!   bilinear filtering is seamless across pages. Sources: [`PackFile`] (a memory-mapped file of LZ4 tiles,
//!   built by [`write_pack`]), [`ProceduralSource`], [`Mandelbrot`], [`ImageSource`], and [`FnSource`]
//!   around a closure of yours.
//! - The **physical cache** is one texture of `cache_slots` tile slots, in the source's
//!   format.
//! - The **page table** maps resident tiles to slots: a hash table in a storage buffer
//!   (why, in `page_table.rs`: a dense level-0 table of a 2^20 texture would be 305 MB).
//!   `vt_sample` walks from the wanted page to its parent until it finds a resident one,
//!   and the coarsest levels (up to `pinned_tiles` tiles) are pinned, so **a sample is
//!   never unmapped**: it is blurrier until the tile arrives, never garbage. The shader
//!   counts any sample that still found nothing ([`VirtualTexture::unmapped_samples`]).
//! - **Feedback**: the host's shader calls `vt_feedback(pixel, uv, ddx, ddy)`; one pixel
//!   per `feedback_factor`² block (jittered each frame) writes the key of the tile it
//!   wanted. [`VirtualTexture::end_frame`] de-duplicates and compacts those keys on the
//!   GPU (`shaders/vt/vt_compact.wgsl`) into a list of at most 64 KiB, which comes back
//!   through the [`Downloader`] without blocking.
//! - **Residency** ([`VirtualTexture::begin_frame`]): requested tiles that are resident
//!   are marked used; the others, with their missing ancestors, are queued for the worker
//!   threads coarse level first. The workers decode each tile straight into a slot of
//!   host-memory **tile staging** (`staging.rs`, [`VtConfig::staged_tiles`]) that the GPU
//!   copies from, so the frame thread moves no tile bytes. Ready tiles are uploaded, at
//!   most `max_uploads_per_frame` a frame, into free slots or slots not sampled for
//!   `keep_frames` frames (least recently used first): one copy command per staged tile
//!   and one submit; tiles that could not be staged (no free slot, not Vulkan) go through
//!   [`Uploader::upload_texture_tiles`](crate::stream::Uploader::upload_texture_tiles),
//!   whose tiles in neighbouring slots share a copy. The page table is rewritten once.
//!   When the view wants more tiles than the cache holds, requests move to coarser levels
//!   (a residency mip bias fed to `vt_feedback`) instead of evicting tiles still on
//!   screen: it degrades, it does not thrash.
//!
//! # Frame order
//! `begin_frame()` (feedback in, tiles and page table out), then the host records and
//! submits the work that samples ([`VirtualTexture::bind_group`] at the group it chose
//! in [`VirtualTexture::wgsl`]), then `end_frame()`. A request made in frame `n` is
//! read back by `begin_frame` of frame `n + 1` or `n + 2`, and a tile whose bytes are
//! ready is sampled from the next frame on.
//!
//! # Promises
//! Every sample hits a resident tile of the wanted level or an ancestor. A tile source
//! that fails, or returns bytes of the wrong size, costs a logged and counted miss
//! ([`VtStats::load_errors`]), never a broken page table. Page-table updates land after
//! the uploads they point at (queue order).

mod cache;
mod config;
mod diagnostics;
mod frame;
mod layout;
mod loader;
mod mandelbrot;
mod pack;
mod page_table;
mod reference;
mod resources;
pub(crate) mod shaders;
mod source;
mod staging;

pub use config::{VtConfig, VtStats};
pub use layout::{
    texel_bytes, tile_bytes, TileId, VtLayout, BORDER, INNER, MAX_LEVELS, MAX_PAGES, TILE,
    TILE_BYTES,
};
pub use mandelbrot::Mandelbrot;
pub use pack::{write_pack, Compression, ImageSource, PackFile};
pub use reference::ReferenceSampler;
pub use source::{tile_from_texels, FnSource, ProceduralSource, TileSource};

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::arena::{Allocation, PoolConfig};
use crate::stream::{DownloadView, Downloader, Uploader};
use crate::{Arena, Error, Gpu, Result};
use cache::Slots;
use loader::{Loader, TileBytes};
use page_table::PageTable;
use resources::{feedback_size, storage_entry, Buffers, GpuParams, TILE_EXTENT};
use shaders::{VT_BINDINGS, VT_HASH, VT_LIBRARY};
use staging::TileStaging;

type FeedbackFuture = Pin<Box<dyn Future<Output = Result<DownloadView>> + Send>>;

/// A virtual texture: tile source, physical cache, page table, feedback and residency.
/// See the module docs for how the pieces fit and the frame order.
///
/// ```no_run
/// use std::sync::Arc;
/// use vramkit::vt::{ProceduralSource, VirtualTexture, VtConfig};
/// let gpu = vramkit::Gpu::headless()?;
/// let arena = vramkit::Arena::new(&gpu, Default::default())?;
/// let source = Arc::new(ProceduralSource::new(1 << 20, 1 << 20)?);
/// let mut vt = VirtualTexture::new(&gpu, &arena, source, VtConfig::default())?;
/// let wgsl = vt.wgsl(1); // paste into your shader; bind vt.bind_group() at group 1
/// for _frame in 0..3 {
///     vt.begin_frame()?;
///     // ... record and submit a pass whose shader calls vt_sample and vt_feedback ...
///     vt.end_frame()?;
/// }
/// println!("{}", vt.stats());
/// # Ok::<(), vramkit::Error>(())
/// ```
pub struct VirtualTexture {
    gpu: Gpu,
    source: Arc<dyn TileSource>,
    layout: VtLayout,
    config: VtConfig,
    slots_x: u32,
    /// Bytes of one tile of the source's format.
    tile_bytes: usize,
    cache: wgpu::Texture,
    /// The cache texture's line in the device ledger (its buffers are the arena's).
    _cache_charge: crate::gpu::accounts::Charge,
    bind_layout: wgpu::BindGroupLayout,
    bind_group: wgpu::BindGroup,
    compact: (Arc<wgpu::ComputePipeline>, wgpu::BindGroup),
    buffers: Buffers,
    feedback_cells: u32,
    max_list: u32,
    table_capacity: u32,
    uploader: Uploader,
    downloader: Downloader,
    loader: Loader,
    /// Where the loaders decode tiles for the GPU to copy (`None`: through the uploader).
    staging: Option<Arc<TileStaging>>,
    slots: Slots,
    /// Feedback lists on their way back, with the frame that wrote them.
    pending_feedback: VecDeque<(u64, FeedbackFuture)>,
    /// Tiles wanted and not resident, most wanted first (rebuilt from each feedback list).
    wanted: Vec<TileId>,
    /// The newest feedback list: the tiles on screen.
    in_use: Vec<TileId>,
    /// Tiles asked for by `prefetch` and not resident yet, coarse first.
    prefetched: Vec<TileId>,
    /// Tiles a worker is reading.
    loading: HashSet<TileId>,
    /// Tiles read and waiting for a slot, with the frame their bytes arrived.
    ready: HashMap<TileId, (u64, TileBytes)>,
    /// Tiles the source failed to give (not asked for again).
    failed: HashSet<TileId>,
    table_dirty: bool,
    max_probe: u32,
    frame: u64,
    bias_changed_at: u64,
    /// CPU time of the current frame's `begin_frame`.
    begin_cpu: std::time::Duration,
    stats: VtStats,
}

/// The arena pools of virtual textures: read-only inputs, buffers the host's shaders
/// write (feedback, counters), buffers the compaction writes.
const POOLS: [&str; 3] = ["vt-read", "vt-written", "vt-compact"];

impl VirtualTexture {
    /// Rebuilds this virtual texture on `gpu` and `arena` after its device was lost (a
    /// runtime's, after [`Runtime::recover`](crate::Runtime::recover)): a new cache
    /// texture, page table and feedback buffers, the loader restarted on the same tile
    /// source, the pinned coarsest levels loaded again, and every tile that was resident
    /// before the loss asked for again (coarse first, as [`prefetch`](Self::prefetch)
    /// does), so the next frames read them back from the source. Its statistics carry
    /// over. The bind group is new: rebuild whatever the host's pass bound from
    /// [`bind_group`](Self::bind_group) (the host rebuilds its pipelines on the new device
    /// anyway).
    ///
    /// ```no_run
    /// # fn main() -> vramkit::Result<()> {
    /// # let mut rt = vramkit::Runtime::headless()?;
    /// # let source = std::sync::Arc::new(vramkit::vt::ProceduralSource::new(1 << 16, 1 << 16)?);
    /// # let mut vt = vramkit::vt::VirtualTexture::new(rt.gpu(), rt.arena(), source, Default::default())?;
    /// // ... a frame returned Error::DeviceLost ...
    /// rt.recover()?;
    /// vt.recover(rt.gpu(), rt.arena())?;
    /// # Ok(()) }
    /// ```
    pub fn recover(&mut self, gpu: &Gpu, arena: &Arena) -> Result<()> {
        let mut resident: Vec<TileId> = self.slots.resident().keys().copied().collect();
        resident.extend(self.prefetched.iter().copied());
        let mut next = VirtualTexture::new(gpu, arena, self.source.clone(), self.config.clone())?;
        next.stats = self.stats.clone();
        next.prefetch(&resident);
        *self = next;
        Ok(())
    }

    /// The WGSL to put in the host's shader: the bindings at `@group(group)` and the
    /// functions `vt_sample(uv, ddx, ddy)`, `vt_sample_level(uv, level)` and
    /// `vt_feedback(pixel, uv, ddx, ddy)` (documented in `shaders/shared/vt_library.wgsl`).
    pub fn wgsl(&self, group: u32) -> String {
        format!(
            "{}\n{}{}",
            VT_BINDINGS.replace("@group(0)", &format!("@group({group})")),
            VT_HASH,
            VT_LIBRARY
        )
    }

    /// The layout of [`bind_group`](Self::bind_group), for the host's pipeline layout.
    pub fn bind_group_layout(&self) -> &wgpu::BindGroupLayout {
        &self.bind_layout
    }

    /// The bind group the WGSL of [`wgsl`](Self::wgsl) expects.
    pub fn bind_group(&self) -> &wgpu::BindGroup {
        &self.bind_group
    }

    /// The texture's layout.
    pub fn layout(&self) -> VtLayout {
        self.layout
    }

    /// Statistics so far.
    pub fn stats(&self) -> VtStats {
        let mut s = self.stats.clone();
        s.resident_tiles = self.slots.resident().len() as u32;
        s.pending_tiles = self.pending_tiles() as u32;
        s.feedback_in_flight = self.pending_feedback.len() as u32;
        let size = self.cache.size();
        s.cache_bytes =
            u64::from(size.width / TILE) * u64::from(size.height / TILE) * self.tile_bytes as u64;
        s.buffer_bytes = self.buffers.bytes();
        if let Some(staging) = &self.staging {
            s.staging_slots = self.config.staged_tiles;
            s.staging_slots_free = staging.free_slots() as u32;
        }
        s
    }

    /// Tiles wanted (by the newest feedback or a prefetch) and not resident yet, failed
    /// ones left out.
    fn pending_tiles(&self) -> usize {
        let missing = |t: &&TileId| !self.is_resident(**t) && !self.failed.contains(*t);
        let queued = self
            .wanted
            .iter()
            .chain(&self.prefetched)
            .filter(missing)
            .count();
        queued.max(self.loading.len() + self.ready.len())
    }

    /// Whether `tile` is in the cache.
    pub fn is_resident(&self, tile: TileId) -> bool {
        self.slots.slot_of(tile).is_some()
    }
}
