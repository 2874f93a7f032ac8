// Verifies the guard words around arena allocations (debug option).
// One workgroup per guard region; each region is (first word, word count, region id).
// A word that differs from the pattern adds to the region's counter.

const GUARD_PATTERN: u32 = 0xA5C35A3Cu;

@group(0) @binding(0) var<storage, read> block: array<u32>;
@group(0) @binding(1) var<storage, read> regions: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> bad_words: array<atomic<u32>>;

@compute @workgroup_size(64)
fn check(@builtin(workgroup_id) wg: vec3<u32>,
         @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) local: u32) {
    let r = wg.y * nwg.x + wg.x;
    if r >= arrayLength(&regions) {
        return;
    }
    let region = regions[r];
    var bad = 0u;
    for (var w = local; w < region.y; w += 64u) {
        if block[region.x + w] != GUARD_PATTERN {
            bad += 1u;
        }
    }
    if bad > 0u {
        atomicAdd(&bad_words[r], bad);
    }
}
