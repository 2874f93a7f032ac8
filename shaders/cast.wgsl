// f32 <-> f16 casts. The prefix defines `H2` (a pair of f16 in 4 bytes: `vec2<f16>` with
// SHADER_F16, else a `u32` packed by pack2x16float) and its conversions; the memory layout
// is the same, so either variant reads what the other wrote. One invocation per pair.
// f16 arrays of odd length end in a half-used word: to_f16 keeps its upper half.
// Values beyond the f16 range (+-65504) convert to implementation-defined values.
// Bindings: f (the f32 array) and h (the f16 pairs), for both directions.

struct Params {
    n: u32,      // elements
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
    _pad5: u32,
    _pad6: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> f: array<f32>;
@group(0) @binding(2) var<storage, read_write> h: array<H2>;

fn pair(wg: vec3<u32>, nwg: vec3<u32>, local: u32) -> u32 {
    return (wg.y * nwg.x + wg.x) * 256u + local;
}

@compute @workgroup_size(256)
fn to_f16(@builtin(workgroup_id) wg: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) local: u32) {
    let w = pair(wg, nwg, local);
    let i = 2u * w;
    if i >= params.n {
        return;
    }
    var hi: f32;
    if i + 1u < params.n {
        hi = f[i + 1u];
    } else {
        hi = h2_to_f32(h[w]).y;
    }
    h[w] = f32_to_h2(vec2<f32>(f[i], hi));
}

@compute @workgroup_size(256)
fn to_f32(@builtin(workgroup_id) wg: vec3<u32>,
          @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) local: u32) {
    let w = pair(wg, nwg, local);
    let i = 2u * w;
    if i >= params.n {
        return;
    }
    let v = h2_to_f32(h[w]);
    f[i] = v.x;
    if i + 1u < params.n {
        f[i + 1u] = v.y;
    }
}
