// Samples a virtual texture at given points from a compute shader (vramkit::vt tests and
// VirtualTexture::sample_points). Group 0 is the virtual texture, group 1 the points.

#import shared/vt_bindings
#import shared/vt_hash
#import shared/vt_library

struct VtProbe {
    uv: vec2<f32>,
    level: u32,
    pad: u32,
}

@group(1) @binding(0) var<storage, read> probes: array<VtProbe>;
@group(1) @binding(1) var<storage, read_write> probe_out: array<vec4<f32>>;

@compute @workgroup_size(64)
fn probe(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let i = gid.x + gid.y * groups.x * 64u;
    if i < arrayLength(&probes) {
        probe_out[i] = vt_sample_level(probes[i].uv, probes[i].level);
    }
}
