// Row reductions: y[out_base + row] = op(x[base + row * cols + c] for c < cols, within n),
// one workgroup per row. A whole-array reduction larger than one workgroup's share is the
// `reduce_whole` entry point of shared/reduce_whole.wgsl, which the VEC4 variants import:
// the array's segments as rows, and the partials folded by the workgroup that finishes last.
//
// Variants: VEC4 (`Elem` is vec4<f32>: 16-byte loads; n, cols and base count vec4s) or f32
// elements, `Bits` the same shape in u32 and `widen(v, fill) -> vec4<f32>`; SUBGROUP (the
// workgroup combine by subgroup operations, where the adapter has them, else a tree in
// workgroup memory); READ_ONLY_X (`x` bound read-only, when it lies in another buffer than
// `y`).
//
// NaN propagates, as in PyTorch: max and min of anything with a NaN are NaN (WGSL's max
// and min may return either operand). The test is on the bits, which no compiler may
// fold away, and the identities are -inf and +inf, so max of -inf values is -inf.
//
// Each invocation walks its columns with a stride of 256 and keeps four independent
// accumulators, so four loads are in flight before the first is used (`fold`); the
// workgroup then combines its 256 values.
// Bindings follow the elementwise layout (params, x, y; storage read_write unless
// READ_ONLY_X, see elementwise.wgsl for why).

#ifdef VEC4
alias Elem = vec4<f32>;
alias Bits = vec4<u32>;
fn widen(v: vec4<f32>, fill: f32) -> vec4<f32> { return v; }
#else
alias Elem = f32;
alias Bits = u32;
fn widen(v: f32, fill: f32) -> vec4<f32> { return vec4<f32>(v, fill, fill, fill); }
#endif

// `combine1`, then the workgroup combine: `Ids` and `workgroup_combine(op, v, ids)`.
#import shared/combine1
#ifdef SUBGROUP
#import shared/reduce_subgroup
#else
#import shared/reduce_workgroup
#endif

struct Params {
    n: u32,        // valid elements of x after `base` (bounds the last, partial row)
    cols: u32,     // row length and stride
    rows: u32,
    op: u32,       // 0 sum, 1 max, 2 min
    scale: f32,    // result multiplier (1/n for a mean, else 1)
    base: u32,     // first element of row 0
    out_base: u32, // where row 0's result goes in y
    epoch: u32,    // the whole-array entry's epoch (shared/reduce_whole.wgsl); else 0
}

@group(0) @binding(0) var<uniform> params: Params;
#ifdef READ_ONLY_X
@group(0) @binding(1) var<storage, read> x: array<Elem>;
#else
@group(0) @binding(1) var<storage, read_write> x: array<Elem>;
#endif
@group(0) @binding(2) var<storage, read_write> y: array<f32>;
#ifdef VEC4
// The whole-array reduction's state (shared/reduce_whole.wgsl): the done counter, then two
// words per segment.
@group(0) @binding(3) var<storage, read_write> state: array<atomic<u32>>;
#endif

const WG: u32 = 256u;

fn identity(op: u32) -> f32 {
    switch op {
        case 1u: { return neg_inf(); } // -inf
        case 2u: { return pos_inf(); } // +inf
        default: { return 0.0; }
    }
}

// Per lane: a or b is a NaN (exponent all ones, mantissa not zero); a + b is then NaN.
// Only max and min pay for the test: the sum is the bandwidth-bound hot case.
fn max_nan(a: Elem, b: Elem) -> Elem {
    let nan = ((bitcast<Bits>(a) & Bits(0x7fffffffu)) > Bits(0x7f800000u))
        | ((bitcast<Bits>(b) & Bits(0x7fffffffu)) > Bits(0x7f800000u));
    return select(max(a, b), a + b, nan);
}

fn min_nan(a: Elem, b: Elem) -> Elem {
    let nan = ((bitcast<Bits>(a) & Bits(0x7fffffffu)) > Bits(0x7f800000u))
        | ((bitcast<Bits>(b) & Bits(0x7fffffffu)) > Bits(0x7f800000u));
    return select(min(a, b), a + b, nan);
}

fn combine(op: u32, a: Elem, b: Elem) -> Elem {
    switch op {
        case 1u: { return max_nan(a, b); }
        case 2u: { return min_nan(a, b); }
        default: { return a + b; }
    }
}


// op over x[i] for i = first, first + WG, ... below end: four independent accumulators
// over whole strides of 4 x WG with no bounds test per load, then the rest one stride at
// a time. Called with a literal `op` in each arm of a switch: once inlined, each copy
// combines with one operation, not a switch per element (the whole-array sum's first pass
// went from 2631-2655 to 2839-2904 GB/s on the H100 with the op known and the loads
// unguarded; PyTorch's `x.sum()` 2850).
fn fold(op: u32, first: u32, end: u32) -> Elem {
    var a0 = Elem(identity(op));
    var a1 = a0;
    var a2 = a0;
    var a3 = a0;
    var i = first;
    // `end - i`, not `i + 3 * WG`: no wrap however close `end` is to 2^32.
    while i < end && end - i > 3u * WG {
        a0 = combine(op, a0, x[i]);
        a1 = combine(op, a1, x[i + WG]);
        a2 = combine(op, a2, x[i + 2u * WG]);
        a3 = combine(op, a3, x[i + 3u * WG]);
        i += 4u * WG;
    }
    while i < end {
        a0 = combine(op, a0, x[i]);
        i += WG;
    }
    return combine(op, combine(op, a0, a1), combine(op, a2, a3));
}

// This invocation's share of x[first..end] (`fold`, with a literal op in each arm of the
// switch), its lanes combined into one f32.
fn fold_lanes(op: u32, first: u32, end: u32) -> f32 {
    var folded: Elem;
    switch op {
        case 1u: { folded = fold(1u, first, end); }
        case 2u: { folded = fold(2u, first, end); }
        default: { folded = fold(0u, first, end); }
    }
    let v = widen(folded, identity(op));
    return combine1(op, combine1(op, v.x, v.y), combine1(op, v.z, v.w));
}

@compute @workgroup_size(256)
fn reduce_rows(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) nwg: vec3<u32>,
    ids: Ids,
) {
    let local = ids.local;
    let row = wg.y * nwg.x + wg.x;
    // Uniform per workgroup, so the early return keeps barriers in uniform control flow.
    if row >= params.rows {
        return;
    }
    let op = params.op;
    let start = params.base + row * params.cols;
    let end = min(start + params.cols, params.base + params.n);
    let total = workgroup_combine(op, fold_lanes(op, start + local, end), ids);
    if local == 0u {
        y[params.out_base + row] = total * params.scale;
    }
}

// Infinities built at run time: WGSL forbids them in constant expressions, and Chromium's
// compiler (Tint) rejects `bitcast<f32>(0xff800000u)` where naga folds it.
fn neg_inf() -> f32 {
    let bits = 0xff800000u;
    return bitcast<f32>(bits);
}
fn pos_inf() -> f32 {
    let bits = 0x7f800000u;
    return bitcast<f32>(bits);
}

#ifdef VEC4
#import shared/reduce_whole
#endif
