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
//!   built by [`write_pack`]), [`ProceduralSource`], [`ImageSource`], and [`FnSource`]
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
//!   GPU (`shaders/vt_compact.wgsl`) into a list of at most 64 KiB, which comes back
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
mod layout;
mod loader;
mod pack;
mod page_table;
mod reference;
mod source;
mod staging;

pub use layout::{
    texel_bytes, tile_bytes, TileId, VtLayout, BORDER, INNER, MAX_LEVELS, MAX_PAGES, TILE,
    TILE_BYTES,
};
pub use pack::{write_pack, Compression, ImageSource, PackFile};
pub use reference::ReferenceSampler;
pub use source::{tile_from_texels, FnSource, ProceduralSource, TileSource};

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::arena::{Allocation, PoolConfig};
use crate::stream::{DownloadView, Downloader, Uploader};
use crate::{Arena, Error, Gpu, Result};
use cache::Slots;
use loader::{Loader, TileBytes};
use page_table::PageTable;
use staging::TileStaging;

/// Settings of a [`VirtualTexture`].
#[derive(Clone, Debug)]
pub struct VtConfig {
    /// Tile slots in the physical cache (at most 64 x 64 = 4096 with the default 8192
    /// texture limit; 1024 slots are a 4096 x 4096 texture, 64 MiB).
    pub cache_slots: u32,
    /// Slots kept for the coarsest levels, which stay resident: whole levels from the
    /// coarsest down while they fit.
    pub pinned_tiles: u32,
    /// Most tiles uploaded per frame.
    pub max_uploads_per_frame: u32,
    /// Most tile bytes uploaded per frame (the default, 32 MiB, lets 64 tiles of any
    /// format through).
    pub max_upload_bytes_per_frame: u64,
    /// A slot sampled within this many frames is not evicted.
    pub keep_frames: u64,
    /// Screen pixels per feedback cell side (16: one request per 256 pixels a frame).
    pub feedback_factor: u32,
    /// Largest render target the feedback covers, in pixels.
    pub render_size: (u32, u32),
    /// Worker threads reading tiles.
    pub loader_threads: usize,
    /// Tile-staging slots: host memory the loader threads decode tiles into and the GPU
    /// copies from, so the frame thread copies no tile bytes (Vulkan, tiles whose rows
    /// are a multiple of 256 bytes). When all are taken, or set to 0, tiles go through
    /// the [`Uploader`] instead. The default, 512, is 32 MiB of RGBA8 tiles: room for
    /// eight frames of 64 uploads between decode and copy.
    pub staged_tiles: u32,
    /// Cache texture format: `None` takes the source's ([`TileSource::format`]);
    /// `Some(Rgba8UnormSrgb)` samples an `Rgba8Unorm` source as sRGB. Any other choice must
    /// equal the source's format.
    pub format: Option<wgpu::TextureFormat>,
}

impl Default for VtConfig {
    fn default() -> Self {
        VtConfig {
            cache_slots: 1024,
            pinned_tiles: 85,
            max_uploads_per_frame: 64,
            max_upload_bytes_per_frame: 32 << 20,
            keep_frames: 2,
            feedback_factor: 16,
            render_size: (1920, 1080),
            loader_threads: std::thread::available_parallelism().map_or(2, |n| n.get().clamp(1, 8)),
            staged_tiles: 512,
            format: None,
        }
    }
}

/// What a virtual texture has done (totals since creation unless named `_last`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VtStats {
    /// Frames begun.
    pub frames: u64,
    /// Cache slots.
    pub cache_slots: u32,
    /// Tiles in the cache, pinned ones included.
    pub resident_tiles: u32,
    /// Tiles of the coarsest levels, always resident.
    pub pinned_tiles: u32,
    /// Distinct tile requests read back from feedback.
    pub requests: u64,
    /// Distinct requests in the last feedback list.
    pub requests_last: u32,
    /// Requests whose tile was resident.
    pub hits: u64,
    /// Requests whose tile was not (sampled from an ancestor meanwhile).
    pub misses: u64,
    /// Tiles uploaded into the cache.
    pub uploads: u64,
    /// Tiles uploaded from tile staging ([`VtConfig::staged_tiles`]); the rest went
    /// through the uploader.
    pub uploads_staged: u64,
    /// Tile-staging slots ([`VtConfig::staged_tiles`]; 0 where tiles cannot be staged).
    pub staging_slots: u32,
    /// Tile-staging slots free now: the others hold decoded tiles waiting for a cache
    /// slot, or tiles the GPU is copying. All come back when the texture goes idle.
    pub staging_slots_free: u32,
    /// Tiles uploaded in the last frame.
    pub uploads_last: u32,
    /// Most tiles uploaded in one frame.
    pub uploads_max: u32,
    /// Tiles evicted to make room.
    pub evictions: u64,
    /// Tile bytes uploaded.
    pub bytes_streamed: u64,
    /// Tiles the source failed to give (or gave with the wrong size).
    pub load_errors: u64,
    /// Bytes of the last feedback list read back.
    pub feedback_bytes_last: u64,
    /// Requests dropped because a frame asked for more than the list holds.
    pub feedback_overflows: u64,
    /// Most frames between `end_frame` and the `begin_frame` that read its feedback.
    pub feedback_latency_frames_max: u64,
    /// Most frames a tile whose bytes were ready waited for its upload.
    pub upload_wait_frames_max: u64,
    /// Residency mip bias now in force (levels added to requests under pressure).
    pub bias: u32,
    /// CPU time of the last `begin_frame` + `end_frame`, in milliseconds (tile reads and
    /// decodes, on the loader threads, and `wait_ms_last` excluded).
    pub cpu_ms_last: f64,
    /// The last frame's CPU time by phase, in milliseconds: feedback and residency
    /// (`begin_frame` up to the uploads), tile uploads, page-table and parameter writes,
    /// and `end_frame` (compaction, read-back and clears submitted; waits excluded).
    pub cpu_ms_phases_last: [f64; 4],
    /// Time the last `end_frame` waited for the GPU to return an old feedback list (it
    /// waits when more than three frames of feedback are in flight), in milliseconds.
    pub wait_ms_last: f64,
}

impl VtStats {
    /// Fraction of requests that found their tile resident.
    pub fn hit_rate(&self) -> f64 {
        self.hits as f64 / (self.hits + self.misses).max(1) as f64
    }
}

impl std::fmt::Display for VtStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "virtual texture: {} frames, {}/{} slots resident ({} pinned), bias {}",
            self.frames, self.resident_tiles, self.cache_slots, self.pinned_tiles, self.bias
        )?;
        writeln!(
            f,
            " requests {} (hit rate {:.1} %), uploads {} ({} max/frame, {}), evictions {}, load errors {}",
            self.requests,
            100.0 * self.hit_rate(),
            self.uploads,
            self.uploads_max,
            crate::fmt_bytes(self.bytes_streamed),
            self.evictions,
            self.load_errors
        )?;
        write!(
            f,
            " feedback {} last frame, latency <= {} frames, CPU {:.3} ms last frame",
            crate::fmt_bytes(self.feedback_bytes_last),
            self.feedback_latency_frames_max,
            self.cpu_ms_last
        )
    }
}

/// The uniform block `VtParams` of `shaders/vt.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
struct GpuParams {
    size: [u32; 2],
    levels: u32,
    table_mask: u32,
    slots_x: u32,
    max_probe: u32,
    bias: u32,
    frame: u32,
    feedback_size: [u32; 2],
    feedback_factor: u32,
    pad0: u32,
    cache_texels: [f32; 2],
    pad1: [f32; 2],
}

/// GPU buffers of one virtual texture, in the arena's `vt-*` pools.
struct Buffers {
    params: Allocation,
    table: Allocation,
    feedback: Allocation,
    set: Allocation,
    list: Allocation,
    counters: Allocation,
    compact_params: Allocation,
}

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
    /// Creates the cache texture, page table and feedback buffers (in `arena`'s
    /// `vt-*` pools), starts the loader threads, and loads the pinned coarsest
    /// levels, so the first frame already samples something.
    ///
    /// Errors: a cache too small for the coarsest level plus 16 slots, or larger than the
    /// device's 2D texture limit allows; a device whose fragment shaders cannot write
    /// storage buffers (the feedback); a source failing on a pinned tile.
    pub fn new(
        gpu: &Gpu,
        arena: &Arena,
        source: Arc<dyn TileSource>,
        config: VtConfig,
    ) -> Result<VirtualTexture> {
        gpu.check_alive()?;
        if !arena.gpu().same_device(gpu) {
            return Err(Error::invalid(
                "an arena of another Gpu for a virtual texture",
                "create the arena on the same Gpu",
            ));
        }
        let layout = source.layout();
        let limit = gpu.limits().max_texture_dimension_2d / TILE;
        let slots_x = (config.cache_slots as f64).sqrt().ceil() as u32;
        let slots_y = config.cache_slots.div_ceil(slots_x.max(1));
        if config.cache_slots < 17 || slots_x > limit || slots_y > limit {
            return Err(Error::invalid(
                format!("a cache of {} slots", config.cache_slots),
                format!(
                    "use 17 to {} slots ({limit} x {limit} tiles of {TILE} texels fit the device's largest 2D texture)",
                    limit * limit
                ),
            ));
        }
        let source_format = source.format();
        let format = config.format.unwrap_or(source_format);
        let srgb_view = source_format == wgpu::TextureFormat::Rgba8Unorm
            && format == wgpu::TextureFormat::Rgba8UnormSrgb;
        let tile_bytes = match layout::tile_bytes(source_format) {
            Some(b) if format == source_format || srgb_view => b,
            _ => {
                return Err(Error::invalid(
                    format!("a cache texture of {format:?} for tiles of {source_format:?}"),
                    "tiles are R8Unorm, Rg8Unorm, Rgba8Unorm(Srgb), R16Float, Rg16Float or Rgba16Float, and the cache takes the source's format (or Rgba8UnormSrgb for Rgba8Unorm tiles)",
                ))
            }
        };
        if config.feedback_factor == 0 || config.render_size.0 == 0 || config.render_size.1 == 0 {
            return Err(Error::invalid(
                "a feedback factor or render size of 0",
                "use a factor of 1 or more (16 is typical) and the render target's size",
            ));
        }
        // wgpu tracks usage per buffer: what one dispatch or pass reads must not share a
        // buffer with what it writes. Three pools keep them in separate blocks: read-only
        // inputs, what the host's shaders write, what the compaction writes.
        let pool = |name: &str| -> Result<crate::arena::PoolId> {
            match arena.pool(name) {
                Some(p) => Ok(p),
                None => arena.add_pool(
                    name,
                    PoolConfig {
                        quota: None,
                        usage: wgpu::BufferUsages::STORAGE
                            | wgpu::BufferUsages::UNIFORM
                            | wgpu::BufferUsages::COPY_DST
                            | wgpu::BufferUsages::COPY_SRC,
                    },
                ),
            }
        };
        let (read_pool, written_pool, compact_pool) =
            (pool(POOLS[0])?, pool(POOLS[1])?, pool(POOLS[2])?);
        let [fw, fh] = feedback_size(&config);
        let feedback_cells = fw * fh;
        // 64 KiB: the count and 16383 keys.
        let max_list = feedback_cells.min(16383);
        let set_entries = (2 * feedback_cells).next_power_of_two();
        let table_capacity = PageTable::capacity(config.cache_slots);
        let alloc = |pool, bytes: u64, label: &str| arena.alloc_in(pool, bytes, label);
        let buffers = Buffers {
            params: alloc(
                read_pool,
                std::mem::size_of::<GpuParams>() as u64,
                "vt params",
            )?,
            table: alloc(read_pool, u64::from(table_capacity) * 8, "vt page table")?,
            compact_params: alloc(read_pool, 16, "vt compact params")?,
            feedback: alloc(written_pool, u64::from(feedback_cells) * 4, "vt feedback")?,
            counters: alloc(written_pool, 16, "vt counters")?,
            set: alloc(compact_pool, u64::from(set_entries) * 4, "vt feedback set")?,
            list: alloc(
                compact_pool,
                u64::from(max_list + 1) * 4,
                "vt feedback list",
            )?,
        };
        let cache = gpu.scoped("creating the virtual-texture cache", || {
            gpu.device().create_texture(&wgpu::TextureDescriptor {
                label: Some("vramkit vt cache"),
                size: wgpu::Extent3d {
                    width: slots_x * TILE,
                    height: slots_y * TILE,
                    depth_or_array_layers: 1,
                },
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format,
                usage: wgpu::TextureUsages::TEXTURE_BINDING | wgpu::TextureUsages::COPY_DST,
                view_formats: &[],
            })
        })?;
        let view = cache.create_view(&Default::default());
        let sampler = gpu.device().create_sampler(&wgpu::SamplerDescriptor {
            label: Some("vramkit vt bilinear"),
            mag_filter: wgpu::FilterMode::Linear,
            min_filter: wgpu::FilterMode::Linear,
            ..Default::default()
        });
        // A device whose fragment shaders cannot write storage (downlevel GL) refuses
        // this layout: a typed error, not a panic.
        let bind_layout = gpu.scoped(
            "creating the virtual-texture bind group layout (fragment shaders write the feedback)",
            || bind_group_layout(gpu.device()),
        )?;
        let buffer = Allocation::binding_resource;
        let b = &buffers;
        let bind_group = gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("vramkit vt"),
            layout: &bind_layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: buffer(&b.params),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: buffer(&b.table),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: wgpu::BindingResource::TextureView(&view),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: wgpu::BindingResource::Sampler(&sampler),
                },
                wgpu::BindGroupEntry {
                    binding: 4,
                    resource: buffer(&b.feedback),
                },
                wgpu::BindGroupEntry {
                    binding: 5,
                    resource: buffer(&b.counters),
                },
            ],
        });
        let pipeline = gpu.pipeline(&crate::shaders::VT_COMPACT, "compact")?;
        let compact_group = gpu.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("vramkit vt compact"),
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: buffer(&b.compact_params),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: buffer(&b.feedback),
                },
                wgpu::BindGroupEntry {
                    binding: 2,
                    resource: buffer(&b.set),
                },
                wgpu::BindGroupEntry {
                    binding: 3,
                    resource: buffer(&b.list),
                },
            ],
        });
        let zeros = |a: &Allocation| {
            gpu.write_buffer(a.buffer(), a.offset(), &vec![0u8; a.size() as usize])
        };
        for a in [&b.table, &b.feedback, &b.set, &b.list, &b.counters] {
            zeros(a);
        }
        gpu.write_buffer(
            b.compact_params.buffer(),
            b.compact_params.offset(),
            bytemuck::cast_slice(&[feedback_cells, set_entries - 1, max_list, 0]),
        );
        let row_bytes = (tile_bytes / TILE as usize) as u32;
        let staging = TileStaging::new(gpu, config.staged_tiles, tile_bytes, row_bytes);
        let loader = Loader::new(
            source.clone(),
            config.loader_threads,
            tile_bytes,
            staging.clone(),
        )?;
        let mut vt = VirtualTexture {
            gpu: gpu.clone(),
            layout,
            slots_x,
            tile_bytes,
            cache,
            bind_layout,
            bind_group,
            compact: (pipeline, compact_group),
            buffers,
            feedback_cells,
            max_list,
            table_capacity,
            uploader: Uploader::new(gpu, Default::default()),
            downloader: Downloader::new(gpu, Default::default()),
            loader,
            staging,
            slots: Slots::new(config.cache_slots),
            pending_feedback: VecDeque::new(),
            wanted: Vec::new(),
            in_use: Vec::new(),
            prefetched: Vec::new(),
            loading: HashSet::default(),
            ready: HashMap::default(),
            failed: HashSet::default(),
            table_dirty: true,
            max_probe: 0,
            frame: 0,
            bias_changed_at: 0,
            begin_cpu: std::time::Duration::ZERO,
            stats: VtStats {
                cache_slots: config.cache_slots,
                ..Default::default()
            },
            source,
            config,
        };
        vt.load_pinned()?;
        vt.write_table_and_params();
        Ok(vt)
    }

    /// Loads and uploads whole coarsest levels while they fit `pinned_tiles` (at least
    /// the coarsest, a single tile), pinned for good.
    fn load_pinned(&mut self) -> Result<()> {
        let mut tiles = Vec::new();
        let budget = u64::from(
            self.config
                .pinned_tiles
                .clamp(1, self.config.cache_slots - 16),
        );
        for level in (0..self.layout.levels).rev() {
            if self.layout.tiles_from(level) > budget && !tiles.is_empty() {
                break;
            }
            let (px, py) = self.layout.pages(level);
            tiles.extend((0..py).flat_map(|y| (0..px).map(move |x| TileId::new(level, x, y))));
        }
        use rayon::prelude::*;
        let source = &self.source;
        let tile_bytes = self.tile_bytes;
        let read: Vec<(TileId, Vec<u8>)> = tiles
            .par_iter()
            .map(|&t| Ok((t, source::read_checked(source.as_ref(), t, tile_bytes)?)))
            .collect::<Result<_>>()?;
        let mut regions = Vec::with_capacity(read.len());
        for (tile, _) in &read {
            let Some((slot, _)) = self.slots.place(*tile, 0, 0, true) else {
                return Err(Error::invalid(
                    "no slot for a pinned tile",
                    "use a larger cache",
                ));
            };
            regions.push(slot);
        }
        let list: Vec<_> = read
            .iter()
            .zip(&regions)
            .map(|((_, bytes), &slot)| (self.slot_origin(slot), &bytes[..]))
            .collect();
        self.uploader
            .upload_texture_tiles(&self.cache, TILE_EXTENT, &list)?;
        self.stats.pinned_tiles = read.len() as u32;
        self.stats.uploads += read.len() as u64;
        self.stats.bytes_streamed += (read.len() * self.tile_bytes) as u64;
        self.table_dirty = true;
        Ok(())
    }

    fn slot_origin(&self, slot: u32) -> wgpu::Origin3d {
        wgpu::Origin3d {
            x: (slot % self.slots_x) * TILE,
            y: (slot / self.slots_x) * TILE,
            z: 0,
        }
    }

    /// The WGSL to put in the host's shader: the bindings at `@group(group)` and the
    /// functions `vt_sample(uv, ddx, ddy)`, `vt_sample_level(uv, level)` and
    /// `vt_feedback(pixel, uv, ddx, ddy)` (documented in `shaders/vt.wgsl`).
    pub fn wgsl(&self, group: u32) -> String {
        format!(
            "{}\n{}",
            crate::shaders::VT_BINDINGS.replace("@group(0)", &format!("@group({group})")),
            crate::shaders::VT_LIBRARY
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
        if let Some(staging) = &self.staging {
            s.staging_slots = self.config.staged_tiles;
            s.staging_slots_free = staging.free_slots() as u32;
        }
        s
    }

    /// Whether `tile` is in the cache.
    pub fn is_resident(&self, tile: TileId) -> bool {
        self.slots.slot_of(tile).is_some()
    }

    /// Asks for `tiles` ahead of feedback (a camera cut, a known next view): they are
    /// loaded before tiles requested by feedback, coarse levels first, and stay asked for
    /// across feedback lists until they are resident (or their source failed).
    pub fn prefetch(&mut self, tiles: &[TileId]) {
        let known: HashSet<TileId> = self.prefetched.iter().copied().collect();
        let mut extra: Vec<TileId> = tiles
            .iter()
            .copied()
            .filter(|&t| self.layout.contains(t) && !self.is_resident(t) && !known.contains(&t))
            .collect();
        extra.sort_by_key(|t| std::cmp::Reverse(t.level));
        self.prefetched.extend(extra);
        self.prefetched.sort_by_key(|t| std::cmp::Reverse(t.level));
        let wanted = std::mem::take(&mut self.wanted);
        self.wanted = self.with_prefetched(wanted);
        self.dispatch_loads();
    }

    /// `wanted` behind the prefetched tiles still missing (which are dropped once resident
    /// or failed), without duplicates.
    fn with_prefetched(&mut self, wanted: Vec<TileId>) -> Vec<TileId> {
        let (slots, failed) = (&self.slots, &self.failed);
        self.prefetched
            .retain(|t| slots.slot_of(*t).is_none() && !failed.contains(t));
        let first: HashSet<TileId> = self.prefetched.iter().copied().collect();
        let mut out = self.prefetched.clone();
        out.extend(wanted.into_iter().filter(|t| !first.contains(t)));
        out
    }

    /// Starts a frame: reads the feedback lists that have come back, queues the missing
    /// tiles on the loader threads, uploads tiles that are ready (within the per-frame
    /// budget) and rewrites the page table. Record the work that samples after this.
    pub fn begin_frame(&mut self) -> Result<()> {
        self.gpu.check_alive()?;
        let start = Instant::now();
        self.frame += 1;
        self.stats.frames = self.frame;
        let mut requests: Option<Vec<TileId>> = None;
        while let Some((frame, fut)) = self.pending_feedback.front_mut() {
            let frame = *frame;
            let Some(result) = fut.as_mut().now_or_never() else {
                break;
            };
            self.pending_feedback.pop_front();
            let view = result?;
            let words: &[u32] = bytemuck::cast_slice(&view[..]);
            let count = words.first().copied().unwrap_or(0);
            let stored = count.min(self.max_list) as usize;
            self.stats.feedback_overflows += u64::from(count - stored as u32);
            self.stats.feedback_bytes_last = 4 * (1 + stored as u64);
            self.stats.feedback_latency_frames_max = self
                .stats
                .feedback_latency_frames_max
                .max(self.frame - frame);
            let tiles = words[1..1 + stored]
                .iter()
                .filter_map(|&k| TileId::from_key(k))
                .filter(|&t| self.layout.contains(t));
            // The newest list wins.
            requests = Some(tiles.collect::<Vec<TileId>>());
        }
        if let Some(list) = requests {
            self.take_requests(&list);
            self.in_use = list;
        }
        // What the newest list asked for stays in use until the next list arrives: frames
        // without new feedback (its latency, or `settle`) must not make the tiles on
        // screen look unused and evict them for their own replacements.
        for i in 0..self.in_use.len() {
            if let Some(slot) = self
                .resident_ancestor(self.in_use[i])
                .and_then(|a| self.slots.slot_of(a))
            {
                self.slots.touch(slot, self.frame);
            }
        }
        self.collect_loaded();
        let residency = start.elapsed();
        self.upload_ready()?;
        let uploaded = start.elapsed();
        if self.table_dirty {
            self.write_table_and_params();
        } else {
            self.write_params();
        }
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        self.stats.cpu_ms_phases_last = [
            ms(residency),
            ms(uploaded - residency),
            ms(start.elapsed() - uploaded),
            0.0,
        ];
        self.begin_cpu = start.elapsed();
        Ok(())
    }

    /// The nearest resident tile covering `tile` (itself included).
    fn resident_ancestor(&self, mut tile: TileId) -> Option<TileId> {
        loop {
            if self.slots.slot_of(tile).is_some() {
                return Some(tile);
            }
            if tile.level + 1 >= self.layout.levels {
                return None;
            }
            tile = tile.parent();
        }
    }

    /// Turns one feedback list into the wanted queue and the residency bias.
    fn take_requests(&mut self, list: &[TileId]) {
        self.stats.requests += list.len() as u64;
        self.stats.requests_last = list.len() as u32;
        let mut wanted = Vec::new();
        let mut seen = HashSet::default();
        for &t in list {
            if self.slots.slot_of(t).is_some() {
                self.stats.hits += 1;
                continue;
            }
            self.stats.misses += 1;
            // The tile and its missing ancestors, coarse first (sorted below).
            let mut a = t;
            loop {
                if self.slots.slot_of(a).is_some() {
                    break;
                }
                if !self.failed.contains(&a) && seen.insert(a) {
                    wanted.push(a);
                }
                if a.level + 1 >= self.layout.levels {
                    break;
                }
                a = a.parent();
            }
        }
        // Coarse before fine; within a level, in the order the feedback listed them;
        // prefetched tiles first.
        wanted.sort_by_key(|t| std::cmp::Reverse(t.level));
        self.wanted = self.with_prefetched(wanted);
        // Degrade instead of thrashing: when the view's tiles and their missing ancestors
        // (which stay in use as fallbacks until their children arrive) need more than the
        // unpinned slots, ask one level coarser. Relax when a level finer (about four
        // times the tiles) would fit with room to spare.
        let room = u64::from(self.config.cache_slots - self.stats.pinned_tiles);
        let hits = list
            .iter()
            .filter(|t| self.slots.slot_of(**t).is_some())
            .count();
        let n = (hits + self.wanted.len()) as u64;
        let settled = self.frame >= self.bias_changed_at + 4;
        if settled && 10 * n > 9 * room && self.stats.bias + 1 < self.layout.levels {
            self.stats.bias += 1;
            self.bias_changed_at = self.frame;
        } else if settled && self.stats.bias > 0 && 4 * n * 10 < 5 * room {
            self.stats.bias -= 1;
            self.bias_changed_at = self.frame;
        }
        self.dispatch_loads();
    }

    /// Queues the most wanted tiles that are neither loading, ready nor resident.
    fn dispatch_loads(&mut self) {
        let depth = 4 * self.config.max_uploads_per_frame as usize;
        // Jobs not yet taken are re-ordered: take them back first.
        for t in self.loader.take_queued() {
            self.loading.remove(&t);
        }
        let in_flight = self.loading.len();
        let mut jobs = Vec::new();
        for &t in &self.wanted {
            if in_flight + jobs.len() >= depth {
                break;
            }
            if self.loading.contains(&t)
                || self.ready.contains_key(&t)
                || self.failed.contains(&t)
                || self.slots.slot_of(t).is_some()
            {
                continue;
            }
            jobs.push(t);
        }
        self.loading.extend(jobs.iter().copied());
        self.loader.push(jobs);
    }

    /// Files one loader result: ready bytes (with the frame they arrived in) or a counted,
    /// logged failure that is not asked for again.
    fn take_loaded(&mut self, tile: TileId, result: Result<TileBytes>, frame: u64) {
        self.loading.remove(&tile);
        match result {
            Ok(bytes) => {
                self.ready.insert(tile, (frame, bytes));
            }
            Err(e) => {
                log::warn!("vramkit vt: {e}");
                self.stats.load_errors += 1;
                self.failed.insert(tile);
            }
        }
    }

    fn collect_loaded(&mut self) {
        let frame = self.frame;
        let results: Vec<_> = self.loader.finished().collect();
        for (tile, result) in results {
            self.take_loaded(tile, result, frame);
        }
        // Ready tiles nobody placed for long are dropped (the view moved on); bounded.
        let cap = 4 * self.config.max_uploads_per_frame as usize;
        if self.ready.len() > cap {
            let mut by_age: Vec<(u64, TileId)> =
                self.ready.iter().map(|(t, (f, _))| (*f, *t)).collect();
            by_age.sort_unstable();
            for (_, t) in by_age.into_iter().take(self.ready.len() - cap) {
                self.ready.remove(&t);
            }
        }
    }

    /// Uploads ready tiles, coarse first, into free or least recently used slots.
    fn upload_ready(&mut self) -> Result<()> {
        let mut order: Vec<TileId> = self.ready.keys().copied().collect();
        order.sort_by_key(|t| (std::cmp::Reverse(t.level), t.y, t.x));
        let mut placed = Vec::new();
        let mut bytes = 0u64;
        for tile in order {
            if placed.len() as u32 >= self.config.max_uploads_per_frame
                || bytes + self.tile_bytes as u64 > self.config.max_upload_bytes_per_frame
            {
                break;
            }
            let Some((slot, evicted)) =
                self.slots
                    .place(tile, self.frame, self.config.keep_frames, false)
            else {
                // Every slot is on screen: wait (the bias moves requests coarser).
                break;
            };
            if evicted.is_some() {
                self.stats.evictions += 1;
            }
            if let Some((since, data)) = self.ready.remove(&tile) {
                self.stats.upload_wait_frames_max =
                    self.stats.upload_wait_frames_max.max(self.frame - since);
                bytes += self.tile_bytes as u64;
                placed.push((tile, slot, data));
            }
        }
        if placed.is_empty() {
            self.stats.uploads_last = 0;
            return Ok(());
        }
        let (staged, heap): (Vec<_>, Vec<_>) = placed
            .into_iter()
            .partition(|p| matches!(p.2, TileBytes::Staged(_)));
        let n = self.upload_staged(staged)? + self.upload_heap(heap)?;
        self.stats.uploads += u64::from(n);
        self.stats.uploads_last = n;
        self.stats.uploads_max = self.stats.uploads_max.max(n);
        self.stats.bytes_streamed += bytes;
        self.table_dirty = true;
        Ok(())
    }

    /// Copies tiles the loaders decoded into tile staging: one copy command per tile, one
    /// submit; the slots go back once the GPU has copied them. Returns the tiles uploaded.
    fn upload_staged(&mut self, placed: Vec<(TileId, u32, TileBytes)>) -> Result<u32> {
        if placed.is_empty() {
            return Ok(0);
        }
        let mut encoder =
            self.gpu
                .device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit vt staged tiles"),
                });
        let row = (self.tile_bytes / TILE as usize) as u32;
        let mut held = Vec::with_capacity(placed.len());
        for (tile, slot, data) in placed {
            let TileBytes::Staged(staged) = data else {
                continue;
            };
            encoder.copy_buffer_to_texture(
                wgpu::TexelCopyBufferInfo {
                    buffer: staged.buffer(),
                    layout: wgpu::TexelCopyBufferLayout {
                        offset: staged.offset(),
                        bytes_per_row: Some(row),
                        rows_per_image: Some(TILE),
                    },
                },
                wgpu::TexelCopyTextureInfo {
                    texture: &self.cache,
                    mip_level: 0,
                    origin: self.slot_origin(slot),
                    aspect: wgpu::TextureAspect::All,
                },
                TILE_EXTENT,
            );
            held.push((tile, staged));
        }
        let submitted = self
            .gpu
            .scoped("submitting virtual-texture tile copies", || {
                self.gpu.submit([encoder.finish()])
            });
        if let Err(e) = submitted {
            // Nothing of a failed upload may be mapped; the slots are free again.
            for (tile, _) in &held {
                self.slots.remove(*tile);
            }
            self.table_dirty = true;
            return Err(e);
        }
        let n = held.len() as u32;
        self.stats.uploads_staged += u64::from(n);
        // The staging slots go back to the loaders once the GPU has copied them.
        self.gpu.work_epoch_then(move || drop(held));
        Ok(n)
    }

    /// Uploads tiles in ordinary memory through the uploader, tiles in neighbouring slots
    /// in one copy. Returns the tiles uploaded.
    fn upload_heap(&mut self, mut placed: Vec<(TileId, u32, TileBytes)>) -> Result<u32> {
        if placed.is_empty() {
            return Ok(0);
        }
        // In slot order, so tiles in neighbouring slots go up in one copy.
        placed.sort_unstable_by_key(|p| p.1);
        let tiles: Vec<_> = placed
            .iter()
            .filter_map(|(_, slot, data)| match data {
                TileBytes::Heap(bytes) => Some((self.slot_origin(*slot), &bytes[..])),
                TileBytes::Staged(_) => None,
            })
            .collect();
        if let Err(e) = self
            .uploader
            .upload_texture_tiles(&self.cache, TILE_EXTENT, &tiles)
        {
            // Nothing of a failed upload may be mapped.
            for (tile, _, _) in &placed {
                self.slots.remove(*tile);
            }
            self.table_dirty = true;
            return Err(e);
        }
        Ok(tiles.len() as u32)
    }

    fn write_table_and_params(&mut self) {
        let table = PageTable::build(self.slots.resident(), self.table_capacity);
        self.max_probe = table.max_probe;
        let b = &self.buffers.table;
        self.gpu
            .write_buffer(b.buffer(), b.offset(), bytemuck::cast_slice(&table.entries));
        self.table_dirty = false;
        self.write_params();
    }

    fn write_params(&self) {
        let size = self.cache.size();
        let p = GpuParams {
            size: [self.layout.width, self.layout.height],
            levels: self.layout.levels,
            table_mask: self.table_capacity - 1,
            slots_x: self.slots_x,
            max_probe: self.max_probe,
            bias: self.stats.bias,
            frame: self.frame as u32,
            feedback_size: feedback_size(&self.config),
            feedback_factor: self.config.feedback_factor,
            pad0: 0,
            cache_texels: [size.width as f32, size.height as f32],
            pad1: [0.0; 2],
        };
        let b = &self.buffers.params;
        self.gpu
            .write_buffer(b.buffer(), b.offset(), bytemuck::bytes_of(&p));
    }

    /// Ends a frame whose sampling work has been submitted: compacts its feedback on the
    /// GPU, starts reading the list back (picked up by a later `begin_frame`) and clears
    /// the feedback for the next frame.
    pub fn end_frame(&mut self) -> Result<()> {
        self.gpu.check_alive()?;
        let start = Instant::now();
        let list = &self.buffers.list;
        let mut encoder =
            self.gpu
                .device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("vramkit vt feedback"),
                });
        self.record_resolve(&mut encoder);
        self.gpu.submit([encoder.finish()]);
        let fut = self.downloader.download_async(list, 0, list.size())?;
        self.pending_feedback.push_back((self.frame, Box::pin(fut)));
        // Bounded: a GPU far behind makes the CPU wait for the oldest list (counted as
        // waiting, not as CPU work).
        let waiting = Instant::now();
        while self.pending_feedback.len() > 3 {
            if let Some((_, fut)) = self.pending_feedback.pop_front() {
                drop(pollster::block_on(fut)?);
            }
        }
        let waited = waiting.elapsed();
        let cpu = std::mem::take(&mut self.begin_cpu) + start.elapsed() - waited;
        self.stats.cpu_ms_last = cpu.as_secs_f64() * 1e3;
        self.stats.wait_ms_last = waited.as_secs_f64() * 1e3;
        self.stats.cpu_ms_phases_last[3] = (start.elapsed() - waited).as_secs_f64() * 1e3;
        Ok(())
    }

    /// GPU time of what [`end_frame`](Self::end_frame) records for the feedback
    /// (compaction and clears, not the read-back copy), for benchmarks: the feedback
    /// buffer is compacted as it stands.
    pub fn time_feedback_resolve(&self) -> Result<crate::Timing> {
        self.gpu.time(|encoder| self.record_resolve(encoder))
    }

    /// Clears the list's count (the previous frame's read-back of it was submitted
    /// before, so queue order keeps it), compacts the feedback into it, and clears the
    /// feedback and the set for the next frame: one submit, where there were two.
    fn record_resolve(&self, encoder: &mut wgpu::CommandEncoder) {
        let list = &self.buffers.list;
        encoder.clear_buffer(list.buffer(), list.offset(), Some(4));
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&self.compact.0);
            pass.set_bind_group(0, &self.compact.1, &[]);
            let (gx, gy) = crate::gpu::grid(u64::from(self.feedback_cells), 256, &self.gpu);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        for a in [&self.buffers.feedback, &self.buffers.set] {
            encoder.clear_buffer(a.buffer(), a.offset(), Some(a.size()));
        }
    }

    /// Samples the texture on the GPU at `points` (`(uv, level)`), as a compute shader
    /// calling `vt_sample_level` does: what tests and tools compare with
    /// [`ReferenceSampler`]. Blocks until the results are read back; RGBA in 0..1.
    ///
    /// The points go into the `vt-read` pool of `arena` and the results into its default
    /// pool (one dispatch may not read and write one buffer).
    pub fn sample_points(
        &self,
        arena: &Arena,
        points: &[([f32; 2], u32)],
    ) -> Result<Vec<[f32; 4]>> {
        if points.is_empty() {
            return Ok(Vec::new());
        }
        let device = self.gpu.device();
        let probe_layout = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("vramkit vt probe"),
            entries: &[
                storage_entry(0, true, wgpu::ShaderStages::COMPUTE),
                storage_entry(1, false, wgpu::ShaderStages::COMPUTE),
            ],
        });
        let pipeline_layout = device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
            label: Some("vramkit vt probe"),
            bind_group_layouts: &[Some(&self.bind_layout), Some(&probe_layout)],
            immediate_size: 0,
        });
        let pipeline = self.gpu.pipeline_with_layout(
            &crate::shaders::VT_PROBE,
            "probe",
            crate::shaders::NamedLayout {
                name: "vt-probe",
                layout: &pipeline_layout,
            },
        )?;
        let input: Vec<u32> = points
            .iter()
            .flat_map(|&(uv, level)| [uv[0].to_bits(), uv[1].to_bits(), level, 0])
            .collect();
        if !arena.gpu().same_device(&self.gpu) {
            return Err(Error::invalid(
                "sample_points with an arena of another Gpu",
                "pass the arena this virtual texture was created on",
            ));
        }
        let read_pool = arena.pool(POOLS[0]).ok_or_else(|| {
            Error::invalid(
                "sample_points with an arena this virtual texture was not created on",
                "pass the same arena",
            )
        })?;
        let src = arena.alloc_in(read_pool, input.len() as u64 * 4, "vt probe points")?;
        let dst = arena.alloc(points.len() as u64 * 16, "vt probe results")?;
        self.gpu
            .write_buffer(src.buffer(), src.offset(), bytemuck::cast_slice(&input));
        let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: Some("vramkit vt probe"),
            layout: &probe_layout,
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: src.binding_resource(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: dst.binding_resource(),
                },
            ],
        });
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &self.bind_group, &[]);
            pass.set_bind_group(1, &group, &[]);
            let (gx, gy) = crate::gpu::grid(points.len() as u64, 64, &self.gpu);
            pass.dispatch_workgroups(gx, gy, 1);
        }
        self.gpu.scoped("sampling a virtual texture", || {
            self.gpu.submit([encoder.finish()])
        })?;
        let bytes = self.downloader.download(&dst, 0, dst.size())?;
        let floats: &[f32] = bytemuck::cast_slice(&bytes);
        Ok(floats
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
            .collect())
    }

    /// Samples the shaders found with no resident tile (0 while the coarsest level is
    /// pinned); read back from the shaders' own counter, blocking.
    pub fn unmapped_samples(&self) -> Result<u64> {
        let c = &self.buffers.counters;
        let bytes = self.downloader.download(c, 0, 4)?;
        Ok(u64::from(u32::from_le_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3],
        ])))
    }

    /// Waits until every tile wanted so far is loaded and uploaded (or failed), running
    /// frames without new feedback: for tests and for a view that must be exact now.
    pub fn settle(&mut self, max_frames: u32) -> Result<u32> {
        for n in 0..max_frames {
            if self
                .wanted
                .iter()
                .all(|t| self.is_resident(*t) || self.failed.contains(t))
                && self.ready.is_empty()
                && self.loading.is_empty()
            {
                return Ok(n);
            }
            if !self.loading.is_empty() && self.ready.is_empty() {
                if let Some((tile, result)) = self.loader.next() {
                    self.take_loaded(tile, result, self.frame);
                }
            }
            self.begin_frame()?;
            self.dispatch_loads();
        }
        Ok(max_frames)
    }
}

/// Feedback cells per side: the render size over the feedback factor, rounded up.
fn feedback_size(config: &VtConfig) -> [u32; 2] {
    [
        config.render_size.0.div_ceil(config.feedback_factor),
        config.render_size.1.div_ceil(config.feedback_factor),
    ]
}

const TILE_EXTENT: wgpu::Extent3d = wgpu::Extent3d {
    width: TILE,
    height: TILE,
    depth_or_array_layers: 1,
};

fn storage_entry(
    binding: u32,
    read_only: bool,
    visibility: wgpu::ShaderStages,
) -> wgpu::BindGroupLayoutEntry {
    wgpu::BindGroupLayoutEntry {
        binding,
        visibility,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }
}

/// The bind group layout of `shaders/vt_bindings.wgsl`.
fn bind_group_layout(device: &wgpu::Device) -> wgpu::BindGroupLayout {
    let stages = wgpu::ShaderStages::FRAGMENT | wgpu::ShaderStages::COMPUTE;
    device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("vramkit vt"),
        entries: &[
            wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: stages,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Uniform,
                    has_dynamic_offset: false,
                    min_binding_size: std::num::NonZeroU64::new(
                        std::mem::size_of::<GpuParams>() as u64
                    ),
                },
                count: None,
            },
            storage_entry(1, true, stages),
            wgpu::BindGroupLayoutEntry {
                binding: 2,
                visibility: stages,
                ty: wgpu::BindingType::Texture {
                    sample_type: wgpu::TextureSampleType::Float { filterable: true },
                    view_dimension: wgpu::TextureViewDimension::D2,
                    multisampled: false,
                },
                count: None,
            },
            wgpu::BindGroupLayoutEntry {
                binding: 3,
                visibility: stages,
                ty: wgpu::BindingType::Sampler(wgpu::SamplerBindingType::Filtering),
                count: None,
            },
            storage_entry(4, false, stages),
            storage_entry(5, false, stages),
        ],
    })
}
