// A 32-bit value published to other workgroups through `state` (an
// `array<atomic<u32>>` the including shader declares, with `SPLIT_BASE`: the words before
// the slots, which are the includer's own counters). WGSL has no 64-bit atomics, so slot
// `s` goes out as two words `flag << 16 | half` in `state[SPLIT_BASE + 2s]` and
// `state[SPLIT_BASE + 2s + 1]`, and a reader takes a pair only when both halves carry the
// same flag: both are then from one publication, as long as each publication to a slot
// carries a flag the slot has not just held. scan.wgsl publishes tile aggregates and
// prefixes this way, reduce_whole.wgsl its partials.

fn publish_split(slot: u32, flag: u32, bits: u32) {
    atomicStore(&state[SPLIT_BASE + 2u * slot], (flag << 16u) | (bits & 0xffffu));
    atomicStore(&state[SPLIT_BASE + 1u + 2u * slot], (flag << 16u) | (bits >> 16u));
}

// The two words of `slot`, as loaded (decode them with `split_value`): loading first lets a
// reader have several slots' loads in flight before it tests any.
fn split_words(slot: u32) -> vec2<u32> {
    return vec2<u32>(atomicLoad(&state[SPLIT_BASE + 2u * slot]),
                     atomicLoad(&state[SPLIT_BASE + 1u + 2u * slot]));
}

// (flag, bits) of two loaded words; flag 0 while unpublished or caught between two
// publications (the halves' flags differ).
fn split_value(w: vec2<u32>) -> vec2<u32> {
    if (w.x >> 16u) != (w.y >> 16u) {
        return vec2<u32>(0u, 0u);
    }
    return vec2<u32>(w.x >> 16u, (w.y << 16u) | (w.x & 0xffffu));
}
