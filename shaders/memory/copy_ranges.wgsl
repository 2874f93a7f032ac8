// Copies many ranges from one buffer into another in one dispatch. Defragmentation moves
// thousands of small allocations between blocks; one copy command each, every one behind
// its own barrier, ran at a few percent of the device's copy bandwidth. Offsets and
// lengths are in `Word`s (u32, or vec4<u32> when every range is 16-byte aligned and a
// multiple of 16 bytes long: VEC4). Each workgroup copies one chunk of at most
// a few thousand words of one range; the host splits ranges into chunks and checks that
// every chunk lies inside both bound buffers.

#ifdef VEC4
alias Word = vec4<u32>;
#else
alias Word = u32;
#endif

struct Chunk {
    src: u32,   // first word in `src`
    dst: u32,   // first word in `dst`
    len: u32,   // words
    _pad: u32,
}

@group(0) @binding(0) var<storage, read> chunks: array<Chunk>;
@group(0) @binding(1) var<storage, read> src: array<Word>;
@group(0) @binding(2) var<storage, read_write> dst: array<Word>;

@compute @workgroup_size(256)
fn copy_ranges(
    @builtin(workgroup_id) wg: vec3<u32>,
    @builtin(num_workgroups) groups: vec3<u32>,
    @builtin(local_invocation_index) lid: u32,
) {
    let c = wg.x + wg.y * groups.x;
    if c >= arrayLength(&chunks) {
        return;
    }
    let chunk = chunks[c];
    for (var i = lid; i < chunk.len; i += 256u) {
        dst[chunk.dst + i] = src[chunk.src + i];
    }
}
