// The second pass of a product split along k (`Batch::matmul`, on the matrix units or the
// four-element kernel): c is the sum of the parts' partial products, which the first pass
// left one after the other in the kernels' scratch allocation, `plane` fours apart. Each
// invocation sums one four of c over the parts in order (part 0 first), so a split
// product's result depends only on its shape, never on timing. Four floats at a time:
// m x n is a multiple of 4 wherever the host splits (n is a multiple of 4 on both kernels).
// Bindings: partials (the scratch) and c, both as fours of f32.

struct Params {
    fours: u32, // fours of c: m * n / 4
    parts: u32, // parts the product was split into along k
    plane: u32, // fours from one part's partial product to the next's
    _pad3: u32,
    _pad4: u32,
    _pad5: u32,
    _pad6: u32,
    _pad7: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> partials: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read_write> c: array<vec4<f32>>;

@compute @workgroup_size(256)
fn split_sum(@builtin(workgroup_id) wg: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) local: u32) {
    let i = (wg.y * nwg.x + wg.x) * 256u + local;
    if i < params.fours {
        var sum = partials[i];
        for (var part = 1u; part < params.parts; part++) {
            sum += partials[part * params.plane + i];
        }
        c[i] = sum;
    }
}
