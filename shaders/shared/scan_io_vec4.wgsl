// Scan I/O, four consecutive elements per invocation and row (scan.wgsl, with
// scan_subgroup.wgsl): x and y bound (by scan.wgsl) as arrays of `vec4<T>`, so a row is one 16-byte load
// or store per invocation and the subgroup scans a quarter as many lane sums. The arrays
// are bound up to the next 16 bytes past the scan's last element (src/kernels/scan.rs
// binds them so only where the buffer holds those bytes); the elements past `n` are never
// read or written: the last tile moves its words one element at a time.

// What one invocation holds of a row, and how many elements that is.
alias E = vec4<T>;
const LANE: u32 = 4u;

// Sum of the full tile `j`'s input, in invocation `i` of `count` (a fallback's share):
// two words in flight at a time, as a fallback is already late.
fn tile_part(j: u32, i: u32, count: u32) -> T {
    let words = TILE / 4u;
    let base = j * words;
    var part = vec4<T>(T(0));
    var k = i;
    for (; k + count < words; k += 2u * count) {
        part += x[base + k] + x[base + k + count];
    }
    if k < words {
        part += x[base + k];
    }
    return part.x + part.y + part.z + part.w;
}

// Element `i` of x, 0 at or past `n`.
fn element_or_zero(i: u32, n: u32) -> T {
    let c = min(i, n - 1u);
    return select(T(0), x[c / 4u][c % 4u], i < n);
}

// Row j (< PER) of tile `tile`: word `first + j * stride` of the tile, 0 past the end.
// All PER loads go out before the first is used: a scan does so little per element that
// its speed is the number of loads in flight.
fn load_rows(tile: u32, first: u32, stride: u32) -> array<E, PER> {
    let n = params.n;
    let base = tile * (TILE / 4u);
    var v: array<E, PER>;
    if tile * TILE + TILE <= n {
        for (var j = 0u; j < PER; j++) {
            v[j] = x[base + first + j * stride];
        }
    } else {
        for (var j = 0u; j < PER; j++) {
            let i = (base + first + j * stride) * 4u;
            v[j] = vec4<T>(element_or_zero(i, n), element_or_zero(i + 1u, n),
                           element_or_zero(i + 2u, n), element_or_zero(i + 3u, n));
        }
    }
    return v;
}

// Stores row j (< PER) of tile `tile` at word `first + j * stride`, up to element `n`.
fn store_rows(tile: u32, first: u32, stride: u32, v: array<E, PER>) {
    let n = params.n;
    let base = tile * (TILE / 4u);
    if tile * TILE + TILE <= n {
        for (var j = 0u; j < PER; j++) {
            y[base + first + j * stride] = v[j];
        }
    } else {
        for (var j = 0u; j < PER; j++) {
            let w = base + first + j * stride;
            for (var c = 0u; c < 4u; c++) {
                if w * 4u + c < n {
                    y[w][c] = v[j][c];
                }
            }
        }
    }
}

// The inclusive scan of one invocation's four elements of a row, and their sum.
fn lane_prefix(e: E) -> E {
    let two = e.x + e.y;
    let three = two + e.z;
    return vec4<T>(e.x, two, three, three + e.w);
}

fn lane_sum(p: E) -> T {
    return p.w;
}

// The invocation's outputs: `p` its lane prefix of `e`, `inclusive` the row's inclusive
// scan of lane sums up to this invocation, `carry` the rows before.
fn lane_out(e: E, p: E, inclusive: T, carry: T) -> E {
    let before = inclusive - p.w + carry;
    let own = select(p, vec4<T>(T(0), p.x, p.y, p.z), params.exclusive != 0u);
    return own + before;
}
