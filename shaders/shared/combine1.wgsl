// One f32 combine step shared by the workgroup combines (reduce_workgroup.wgsl,
// reduce_subgroup.wgsl) and the shaders built on them (reduce.wgsl, softmax_cached.wgsl).
// op: 0 sum, 1 max, 2 min. NaN propagates, as in PyTorch: WGSL's max and min may return
// either operand, so a NaN is tested on its bits (exponent all ones, mantissa not zero),
// which no compiler may fold away, and passed on as a + b.

fn is_nan1(v: f32) -> bool {
    return (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u;
}

fn combine1(op: u32, a: f32, b: f32) -> f32 {
    switch op {
        case 1u: { return select(max(a, b), a + b, is_nan1(a) || is_nan1(b)); }
        case 2u: { return select(min(a, b), a + b, is_nan1(a) || is_nan1(b)); }
        default: { return a + b; }
    }
}
