// Virtual texture sampling and feedback (vramkit::vt), for the host's own fragment and
// compute shaders. Needs the bindings of vt_bindings.wgsl and vt_hash of vt_hash.wgsl
// (VirtualTexture::wgsl gives all three).
//
// vt_sample(uv, ddx, ddy)   filtered colour at uv (0..1), mip level from the derivatives
// vt_sample_level(uv, l)    the same at mip level l
// vt_feedback(px, uv, ddx, ddy)  records which tile this pixel wanted (1 pixel per
//                           feedback cell per frame, jittered), for the residency manager

struct VtParams {
    size: vec2<u32>,          // level-0 texels
    levels: u32,
    table_mask: u32,          // page-table entries - 1 (a power of two)
    slots_x: u32,             // cache slots per row
    max_probe: u32,           // longest probe chain in the page table
    bias: u32,                // residency mip bias (levels added to feedback requests)
    frame: u32,
    feedback_size: vec2<u32>, // feedback cells
    feedback_factor: u32,     // screen pixels per feedback cell side
    pad0: u32,
    cache_texels: vec2<f32>,  // cache texture size
    pad1: vec2<f32>,
}

const VT_TILE: u32 = 128u;
const VT_BORDER: u32 = 4u;
const VT_INNER: u32 = 120u;
const VT_NONE: u32 = 0xffffffffu;

fn vt_level_size(level: u32) -> vec2<u32> {
    return max(vt_params.size >> vec2<u32>(level), vec2<u32>(1u));
}

fn vt_pages(level: u32) -> vec2<u32> {
    return (vt_level_size(level) + vec2<u32>(VT_INNER - 1u)) / VT_INNER;
}

fn vt_key(level: u32, page: vec2<u32>) -> u32 {
    return ((level + 1u) << 28u) | (page.y << 14u) | page.x;
}

// The page of `level` holding `uv` and uv's texel position at that level.
fn vt_page(level: u32, uv: vec2<f32>, t: ptr<function, vec2<f32>>) -> vec2<u32> {
    *t = clamp(uv, vec2<f32>(0.0), vec2<f32>(1.0)) * vec2<f32>(vt_level_size(level));
    return min(vec2<u32>(*t / f32(VT_INNER)), vt_pages(level) - vec2<u32>(1u));
}

// The slot holding `key`, or VT_NONE.
fn vt_lookup(key: u32) -> u32 {
    let mask = vt_params.table_mask;
    var h = vt_hash(key) & mask;
    for (var i = 0u; i <= vt_params.max_probe; i++) {
        let e = vt_table[h];
        if e.x == key {
            return e.y;
        }
        if e.x == 0u {
            return VT_NONE;
        }
        h = (h + 1u) & mask;
    }
    return VT_NONE;
}

// The mip level the screen-space derivatives of uv ask for (nearest finer level).
fn vt_level_for(ddx: vec2<f32>, ddy: vec2<f32>) -> u32 {
    let s = vec2<f32>(vt_params.size);
    let d = max(length(ddx * s), length(ddy * s));
    let lod = floor(log2(max(d, 1e-12)));
    return u32(clamp(lod, 0.0, f32(vt_params.levels - 1u)));
}

// Bilinear sample at `level`, or at the nearest resident ancestor of its page.
fn vt_sample_level(uv: vec2<f32>, level: u32) -> vec4<f32> {
    for (var l = min(level, vt_params.levels - 1u); l < vt_params.levels; l++) {
        var t: vec2<f32>;
        let page = vt_page(l, uv, &t);
        let slot = vt_lookup(vt_key(l, page));
        if slot != VT_NONE {
            let origin = vec2<f32>(vec2<u32>(slot % vt_params.slots_x, slot / vt_params.slots_x) * VT_TILE);
            let p = origin + t - vec2<f32>(page * VT_INNER) + vec2<f32>(f32(VT_BORDER));
            return textureSampleLevel(vt_cache, vt_sampler, p / vt_params.cache_texels, 0.0);
        }
    }
    // Unreachable while the coarsest level is pinned; counted, never hidden.
    atomicAdd(&vt_counters[0], 1u);
    return vec4<f32>(1.0, 0.0, 1.0, 1.0);
}

fn vt_sample(uv: vec2<f32>, ddx: vec2<f32>, ddy: vec2<f32>) -> vec4<f32> {
    return vt_sample_level(uv, vt_level_for(ddx, ddy));
}

// Records the tile pixel `px` wants, if `px` is this frame's pick of its feedback cell.
fn vt_feedback(px: vec2<u32>, uv: vec2<f32>, ddx: vec2<f32>, ddy: vec2<f32>) {
    let f = vt_params.feedback_factor;
    let cell = px / f;
    if any(cell >= vt_params.feedback_size) {
        return;
    }
    let r = vt_hash(cell.x * 7919u + cell.y * 104729u + vt_params.frame * 0x9E3779B9u);
    if any(px % f != vec2<u32>(r % f, (r / f) % f)) {
        return;
    }
    let level = min(vt_level_for(ddx, ddy) + vt_params.bias, vt_params.levels - 1u);
    var t: vec2<f32>;
    let page = vt_page(level, uv, &t);
    vt_feedback_buf[cell.y * vt_params.feedback_size.x + cell.x] = vt_key(level, page);
}
