//! What a virtual texture is configured with ([`VtConfig`]) and what it reports
//! ([`VtStats`]).

/// Settings of a [`VirtualTexture`](super::VirtualTexture).
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
    /// Worker threads reading tiles; 0 reads them on the frame's thread, in
    /// [`begin_frame`](super::VirtualTexture::begin_frame) (always so in the browser,
    /// where a page has one thread).
    pub loader_threads: usize,
    /// Tile-staging slots: host memory the loader threads decode tiles into and the GPU
    /// copies from, so the frame thread copies no tile bytes (Vulkan, tiles whose rows
    /// are a multiple of 256 bytes). When all are taken, or set to 0, tiles go through
    /// the [`Uploader`](crate::stream::Uploader) instead. The default, 512, is 32 MiB of RGBA8 tiles: room for
    /// eight frames of 64 uploads between decode and copy.
    pub staged_tiles: u32,
    /// Cache texture format: `None` takes the source's ([`TileSource::format`](super::TileSource::format));
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
    /// Tiles the newest feedback (or a prefetch) asked for that are not resident yet:
    /// queued, being read, or read and waiting for an upload. 0 with no feedback in
    /// flight means the view is exact ([`settle`](super::VirtualTexture::settle)'s test).
    pub pending_tiles: u32,
    /// Feedback lists submitted and not read back yet.
    pub feedback_in_flight: u32,
    /// The frame (its number in [`frames`](Self::frames)) whose feedback list was read
    /// back last: a view drawn from frame `n` on is fully requested once this is `n` or
    /// more, and exact once [`pending_tiles`](Self::pending_tiles) is 0 too.
    pub feedback_frame_last: u64,
    /// Bytes of the physical cache texture (every slot, resident or not).
    pub cache_bytes: u64,
    /// Bytes of the texture's buffers in the arena: page table, feedback, its compaction
    /// and parameters (their allocations' sizes).
    pub buffer_bytes: u64,
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
