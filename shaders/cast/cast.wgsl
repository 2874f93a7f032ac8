// f32 <-> f16 casts, through `H2` (shared/f16_pairs.wgsl: a pair of f16 in a `u32` word,
// packed by pack2x16float), its conversions and its bits; the layout is that of `array<f16>`.
// One invocation per pair, from pair `first` on (cast_x8.wgsl does the bulk of large
// arrays, eight elements per invocation, and this file the rest). (naga cannot bitcast `vec2<f16>` to `u32`, which the odd tail
// needs, so this shader has no native-f16 variant.)
// f16 arrays of odd length end in a half-used word: to_f16 keeps its upper half's bits.
// Values beyond the f16 range (+-65504) convert to implementation-defined values.
// Bindings: f (the f32 array) and h (the f16 pairs), for both directions.

#import shared/f16_pairs

struct Params {
    n: u32,      // elements
    first: u32,  // first pair
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
    return params.first + (wg.y * nwg.x + wg.x) * 256u + local;
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
    if i + 1u < params.n {
        h[w] = f32_to_h2(vec2<f32>(f[i], f[i + 1u]));
    } else {
        // The last element of an odd count: keep the upper half's bits exactly (through
        // a float conversion a NaN there could change payload).
        let low = h2_bits(f32_to_h2(vec2<f32>(f[i], 0.0))) & 0xffffu;
        h[w] = bits_h2((h2_bits(h[w]) & 0xffff0000u) | low);
    }
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
