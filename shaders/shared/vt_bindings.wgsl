// Virtual texture bindings (vramkit::vt). VirtualTexture::wgsl(group) moves them to the
// bind group the host shader chooses; the layout is VirtualTexture::bind_group_layout().
@group(0) @binding(0) var<uniform> vt_params: VtParams;
@group(0) @binding(1) var<storage, read> vt_table: array<vec2<u32>>;
@group(0) @binding(2) var vt_cache: texture_2d<f32>;
@group(0) @binding(3) var vt_sampler: sampler;
@group(0) @binding(4) var<storage, read_write> vt_feedback_buf: array<u32>;
@group(0) @binding(5) var<storage, read_write> vt_counters: array<atomic<u32>, 4>;
