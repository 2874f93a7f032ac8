// Scan I/O, one element per invocation and row (scan.wgsl, which binds x and y as arrays
// of `T`). Used by the portable piece (scan_workgroup.wgsl) and by the subgroup piece
// where the arrays cannot be bound as whole 16-byte words (src/kernels/scan.rs).

// What one invocation holds of a row, and how many elements that is.
alias E = T;
const LANE: u32 = 1u;

// Sum of the full tile `j`'s input, in invocation `i` of `count` (a fallback's share):
// four loads in flight at a time, as a fallback is already late.
fn tile_part(j: u32, i: u32, count: u32) -> T {
    var part = vec4<T>(T(0));
    let base = j * TILE;
    var k = i;
    for (; k + 3u * count < TILE; k += 4u * count) {
        part += vec4<T>(x[base + k], x[base + k + count], x[base + k + 2u * count],
                        x[base + k + 3u * count]);
    }
    for (; k < TILE; k += count) {
        part.x += x[base + k];
    }
    return part.x + part.y + part.z + part.w;
}

// Elements first + j * stride (j < PER) of the tile starting at `base`, 0 past the end.
// All PER loads go out before the first is used (the bounds test is outside the loop): a
// scan does so little per element that its speed is the number of loads in flight.
fn load_tile(base: u32, first: u32, stride: u32) -> array<T, PER> {
    let n = params.n;
    var v: array<T, PER>;
    if base + TILE <= n {
        for (var j = 0u; j < PER; j++) {
            v[j] = x[base + first + j * stride];
        }
    } else {
        for (var j = 0u; j < PER; j++) {
            let i = base + first + j * stride;
            v[j] = select(T(0), x[min(i, n - 1u)], i < n);
        }
    }
    return v;
}

// Stores v[j] at first + j * stride of the tile starting at `base`, up to the end.
fn store_tile(base: u32, first: u32, stride: u32, v: array<T, PER>) {
    let n = params.n;
    if base + TILE <= n {
        for (var j = 0u; j < PER; j++) {
            y[base + first + j * stride] = v[j];
        }
    } else {
        for (var j = 0u; j < PER; j++) {
            let i = base + first + j * stride;
            if i < n {
                y[i] = v[j];
            }
        }
    }
}

// Row j (< PER) of tile `tile`: invocation element `first + j * stride` (scan_subgroup.wgsl).
fn load_rows(tile: u32, first: u32, stride: u32) -> array<E, PER> {
    return load_tile(tile * TILE, first, stride);
}

fn store_rows(tile: u32, first: u32, stride: u32, v: array<E, PER>) {
    store_tile(tile * TILE, first, stride, v);
}

// The inclusive scan of one invocation's elements of a row, and their sum.
fn lane_prefix(e: E) -> E {
    return e;
}

fn lane_sum(p: E) -> T {
    return p;
}

// The invocation's outputs: `p` its lane prefix of `e`, `inclusive` the row's inclusive
// scan of lane sums up to this invocation, `carry` the rows before.
fn lane_out(e: E, p: E, inclusive: T, carry: T) -> E {
    return select(inclusive, inclusive - e, params.exclusive != 0u) + carry;
}
