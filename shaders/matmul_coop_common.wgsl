// The parts of the matrix-unit products (`matmul_coop.wgsl`, 128 x 256 tiles, and
// `matmul_coop_tall.wgsl`, 256 x 128) that do not depend on the tile: the fragment types, the
// eight-half loads of a and b, staging into workgroup memory and the guarded store of one
// accumulator. The tile file declares `slices` (its staged slices, f16) and sets `za`, `zb`
// and `zc` first thing.

// The prefix enables `f16` and `wgpu_cooperative_matrix`, sets `GUARDED` and declares `a`
// and `b` (bindings 1 and 2: eight halves per element, read-only where neither shares a
// buffer with `c`) and `c` (binding 3, f32); `matmul_params.wgsl` (before this file)
// declares `params` and `za`, `zb`, `zc`.

alias FragA = coop_mat16x16<f16, A>;
alias FragB = coop_mat16x16<f16, B>;
alias Acc = coop_mat16x16<f32, C>;

/// Eight halves of a (row, col) of `a`, zero outside m x k.
fn load_a(row: u32, col: u32) -> vec4<u32> {
    if !GUARDED {
        return a[za + (row * params.k + col) / 8u];
    }
    let ok = row < params.m && col < params.k;
    let i = select(0u, za + (row * params.k + col) / 8u, ok);
    return select(vec4<u32>(0u), a[i], ok);
}

/// Eight halves of b at (row, col), zero outside k x n.
fn load_b(row: u32, col: u32) -> vec4<u32> {
    if !GUARDED {
        return b[zb + (row * params.n + col) / 8u];
    }
    let ok = row < params.k && col < params.n;
    let i = select(0u, zb + (row * params.n + col) / 8u, ok);
    return select(vec4<u32>(0u), b[i], ok);
}

/// Eight halves into the staged slices at `at`.
fn put(at: u32, v: vec4<u32>) {
    let h0 = vec2<f16>(unpack2x16float(v.x));
    let h1 = vec2<f16>(unpack2x16float(v.y));
    let h2 = vec2<f16>(unpack2x16float(v.z));
    let h3 = vec2<f16>(unpack2x16float(v.w));
    slices[at] = h0.x; slices[at + 1u] = h0.y; slices[at + 2u] = h1.x; slices[at + 3u] = h1.y;
    slices[at + 4u] = h2.x; slices[at + 5u] = h2.y; slices[at + 6u] = h3.x; slices[at + 7u] = h3.y;
}

/// Stores one accumulator at (row, col) of c unless it lies past m or n (both multiples
/// of 16, so a fragment is wholly inside or wholly outside).
fn store(acc: Acc, row: u32, col: u32) {
    // Every operand of a cooperative load or store is a named value: naga 30 does not
    // emit expressions written inline there.
    let n = params.n;
    if row < params.m && col < n {
        let at = zc + row * n + col;
        coopStoreT(acc, &c[at], n);
    }
}
