// y (cols x rows) = transpose of x (rows x cols), both row-major f32. Each workgroup moves
// one 32x32 tile through workgroup memory so that both the reads of x and the writes of y
// are coalesced; the tile has 33 columns so that reading a column hits 32 different banks.
// Tiles are numbered linearly over a 2-D grid (more than 65535 tiles work).

struct Params {
    rows: u32,
    cols: u32,
    tiles_x: u32,
    tiles: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
}

@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read_write> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

var<workgroup> tile: array<f32, 1056>;

@compute @workgroup_size(32, 8)
fn transpose(@builtin(workgroup_id) wg: vec3<u32>,
             @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_id) lid: vec3<u32>) {
    let t = wg.y * nwg.x + wg.x;
    if t >= params.tiles {
        return; // uniform per workgroup
    }
    let rows = params.rows;
    let cols = params.cols;
    let c0 = (t % params.tiles_x) * 32u;
    let r0 = (t / params.tiles_x) * 32u;
    for (var j = 0u; j < 32u; j += 8u) {
        let r = r0 + lid.y + j;
        let c = c0 + lid.x;
        if r < rows && c < cols {
            tile[(lid.y + j) * 33u + lid.x] = x[r * cols + c];
        }
    }
    workgroupBarrier();
    for (var j = 0u; j < 32u; j += 8u) {
        let oc = c0 + lid.y + j; // row of y
        let orow = r0 + lid.x;   // column of y
        if oc < cols && orow < rows {
            y[oc * rows + orow] = tile[lid.x * 33u + lid.y + j];
        }
    }
}
