// Pairs of f16, `H2`: packed in a `u32` word by pack2x16float (portable), or with
// NATIVE_F16 a `vec2<f16>` (the SHADER_F16 feature; the including shader starts with
// `enable f16;`). The memory layout is the same either way: that of `array<f16>`.
// `h2_to_f32` and `f32_to_h2` convert a pair; the packed words also give their bits
// (`h2_bits`, `bits_h2`), which naga cannot bitcast out of `vec2<f16>`.

#ifdef NATIVE_F16
alias H2 = vec2<f16>;
fn h2_to_f32(h: vec2<f16>) -> vec2<f32> { return vec2<f32>(h); }
fn f32_to_h2(v: vec2<f32>) -> vec2<f16> { return vec2<f16>(v); }
#else
alias H2 = u32;
fn h2_to_f32(h: u32) -> vec2<f32> { return unpack2x16float(h); }
fn f32_to_h2(v: vec2<f32>) -> u32 { return pack2x16float(v); }
fn h2_bits(h: u32) -> u32 { return h; }
fn bits_h2(b: u32) -> u32 { return b; }
#endif
