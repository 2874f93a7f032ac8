// Writes the bytes of an upload that do not fill whole 4-byte words: for each of up to two
// words, y[word] = (y[word] & ~mask) | (value & mask). Copies between buffers move whole
// words only; this keeps the neighbouring bytes of the edge words intact.

struct Patch {
    // x: word index, y: value, z: byte mask, w: unused
    words: array<vec4<u32>, 2>,
    count: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
}

@group(0) @binding(0) var<uniform> edits: Patch;
@group(0) @binding(1) var<storage, read_write> y: array<u32>;

@compute @workgroup_size(2)
fn patch_words(@builtin(local_invocation_index) i: u32) {
    if i < edits.count {
        let w = edits.words[i];
        y[w.x] = (y[w.x] & ~w.z) | (w.y & w.z);
    }
}
