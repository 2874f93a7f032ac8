//! The GPU resources of a virtual texture: the cache texture, the page table, feedback
//! and compaction buffers in the arena's `vt-*` pools, the bind groups, and the pinned
//! coarsest levels loaded before the first frame ([`VirtualTexture::new`]).
//!
//! Everything a frame later writes is created here, inside error scopes, so a device that
//! cannot hold the configuration fails construction with a typed error, never a frame.

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use super::*;
use crate::gpu::accounts::{MemoryKind, Part};

/// The uniform block `VtParams` of `shaders/shared/vt_library.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub(super) struct GpuParams {
    pub(super) size: [u32; 2],
    pub(super) levels: u32,
    pub(super) table_mask: u32,
    pub(super) slots_x: u32,
    pub(super) max_probe: u32,
    pub(super) bias: u32,
    pub(super) frame: u32,
    pub(super) feedback_size: [u32; 2],
    pub(super) feedback_factor: u32,
    pub(super) pad0: u32,
    pub(super) cache_texels: [f32; 2],
    pub(super) pad1: [f32; 2],
}

/// GPU buffers of one virtual texture, in the arena's `vt-*` pools.
pub(super) struct Buffers {
    pub(super) params: Allocation,
    pub(super) table: Allocation,
    pub(super) feedback: Allocation,
    pub(super) set: Allocation,
    pub(super) list: Allocation,
    pub(super) counters: Allocation,
    pub(super) compact_params: Allocation,
}

impl Buffers {
    /// Bytes of every buffer, as the arena holds them.
    pub(super) fn bytes(&self) -> u64 {
        [
            &self.params,
            &self.table,
            &self.feedback,
            &self.set,
            &self.list,
            &self.counters,
            &self.compact_params,
        ]
        .iter()
        .map(|a| a.size())
        .sum()
    }
}

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
            return Err(Error::misuse(
                crate::Misuse::Foreign,
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
                        ..Default::default()
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
        let pipeline = gpu.pipeline(&shaders::VT_COMPACT, "compact")?;
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
        // Tiles read on the frame's thread go through ordinary memory (`loader.rs`).
        let threads = if cfg!(web) { 0 } else { config.loader_threads };
        let staging = match threads {
            0 => None,
            _ => TileStaging::new(gpu, config.staged_tiles, tile_bytes, row_bytes),
        };
        let loader = Loader::new(source.clone(), threads, tile_bytes, staging.clone())?;
        let cache_charge = gpu
            .accounts()
            .account(Part::Vramkit, MemoryKind::Device, "virtual-texture caches")
            .charge(u64::from(slots_x) * u64::from(slots_y) * tile_bytes as u64);
        let mut vt = VirtualTexture {
            gpu: gpu.clone(),
            layout,
            slots_x,
            tile_bytes,
            cache,
            _cache_charge: cache_charge,
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
    pub(super) fn load_pinned(&mut self) -> Result<()> {
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

    pub(super) fn slot_origin(&self, slot: u32) -> wgpu::Origin3d {
        wgpu::Origin3d {
            x: (slot % self.slots_x) * TILE,
            y: (slot / self.slots_x) * TILE,
            z: 0,
        }
    }
}

/// Feedback cells per side: the render size over the feedback factor, rounded up.
pub(super) fn feedback_size(config: &VtConfig) -> [u32; 2] {
    [
        config.render_size.0.div_ceil(config.feedback_factor),
        config.render_size.1.div_ceil(config.feedback_factor),
    ]
}

pub(super) const TILE_EXTENT: wgpu::Extent3d = wgpu::Extent3d {
    width: TILE,
    height: TILE,
    depth_or_array_layers: 1,
};

pub(super) fn storage_entry(
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

/// The bind group layout of `shaders/shared/vt_bindings.wgsl`.
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
