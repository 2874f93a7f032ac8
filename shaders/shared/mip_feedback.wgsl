// Mip-streaming feedback (vramkit::mips::MipFeedback). MipFeedback::wgsl(group) moves the
// binding to the host's group; the layout is MipFeedback::bind_group_layout().
// Per texture id, two words: the finest full-chain level any fragment sampled (atomicMin,
// cleared to 0xffffffff each frame) and the fragments that sampled it (its screen area).
@group(0) @binding(0) var<storage, read_write> mip_feedback: array<atomic<u32>>;

// Records that this fragment samples texture `id` (its index from MipId::index) at `uv`,
// the full chain's level 0 being `texels` across. Call it where the host samples the
// texture, in uniform control flow (it takes derivatives).
fn mip_feedback_write(id: u32, uv: vec2<f32>, texels: vec2<f32>) {
    let t = uv * texels;
    let rho = max(length(dpdx(t)), length(dpdy(t)));
    let level = u32(max(floor(log2(max(rho, 1e-8))), 0.0));
    if (2u * id + 1u < arrayLength(&mip_feedback)) {
        atomicMin(&mip_feedback[2u * id], level);
        atomicAdd(&mip_feedback[2u * id + 1u], 1u);
    }
}
