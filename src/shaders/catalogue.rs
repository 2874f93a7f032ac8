//! The catalogue: every shader vramkit ships, as [`Shader`] values built from the WGSL
//! files in `shaders/` and the prefixes that make their variants. A shader compiled
//! without wgpu's injected checks says why on its own entry ("Trusted: ..."). One concept
//! over 800 lines: the list of shaders, each with its prefixes and justification.

use super::Shader;

const NONE: wgpu::Features = wgpu::Features::empty();
const SUBGROUP: wgpu::Features = wgpu::Features::SUBGROUP;
/// Prefix for f16 pairs packed in `u32` words (portable).
macro_rules! h2_packed {
    () => {
        "alias H2 = u32;\n\
         fn h2_to_f32(h: u32) -> vec2<f32> { return unpack2x16float(h); }\n\
         fn f32_to_h2(v: vec2<f32>) -> u32 { return pack2x16float(v); }\n\
         fn h2_bits(h: u32) -> u32 { return h; }\n\
         fn bits_h2(b: u32) -> u32 { return b; }\n"
    };
}
/// Matmul input loads from f16 pairs (after an `h2_*` prefix).
macro_rules! f16_loads {
    () => {
        "alias In = H2;\n\
         fn load_a(i: u32) -> f32 { return h2_to_f32(a[i >> 1u])[i & 1u]; }\n\
         fn load_b(i: u32) -> f32 { return h2_to_f32(b[i >> 1u])[i & 1u]; }\n"
    };
}
/// Prefix for native f16 pairs (`SHADER_F16`); same memory layout as the packed words.
macro_rules! h2_native {
    () => {
        "enable f16;\n\
         alias H2 = vec2<f16>;\n\
         fn h2_to_f32(h: vec2<f16>) -> vec2<f32> { return vec2<f32>(h); }\n\
         fn f32_to_h2(v: vec2<f32>) -> vec2<f16> { return vec2<f16>(v); }\n"
    };
}

shader!(
    /// f32 elementwise kernels, one element per invocation (tails and short arrays).
    ELEMENTWISE = "elementwise.wgsl (f32)", ["alias Elem = f32;\n", file!("elementwise.wgsl")], NONE
);
shader!(
    /// f32 elementwise kernels, one vec4 per invocation (the aligned body of each array).
    ELEMENTWISE_VEC4 = "elementwise.wgsl (vec4)", ["alias Elem = vec4<f32>;\n", file!("elementwise.wgsl")], NONE
);
/// The reduction's `x` and `y`, both read_write (bindings 1 and 2).
macro_rules! REDUCE_IO_RW {
    () => {
        "@group(0) @binding(1) var<storage, read_write> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<f32>;\n"
    };
}
/// The reduction's `x` read-only (binding 1) and `y` writable (binding 2).
macro_rules! REDUCE_IO_RO {
    () => {
        "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<f32>;\n"
    };
}
shader!(
    /// Trusted (compiled without injected checks, [`Shader::unchecked`]): `x` is read at `i
    /// < end = min(start + cols, base + n)`, and the host checks that `base + n` elements
    /// fit `x`; `y` is written at `out_base + row` behind `row < rows`, with `out_base +
    /// rows` within `y`; workgroup arrays are indexed by the local id (below 256, the
    /// tree's `local + s` with `local < s`) and subgroup ids. The fold's loops advance `i`
    /// by 1024 or 256 while `end - i` exceeds 768 or `i < end`; the tree halves `s` to 0.
    /// The one-dispatch whole-array entry (`reduce_whole.wgsl`) reads `x` the same way per
    /// segment (`row * cols + ...` below `min(start + cols, n)`), and the state at `1 + 2 *
    /// s` and `2 + 2 * s` for segments `s < rows`, where the host sets at most 512 rows and
    /// binds 1025 words; `missing` is indexed by a count of those segments (below `rows`);
    /// the last workgroup's `words` by `k < SLOTS_PER_LANE`, its length. Its spin reads a
    /// slot at most `SPINS` times, the slot loops run twice, and the refold loop runs at
    /// most `rows` times.
    ///
    /// Sum, max and min over rows of a 2-D view (and, in passes, over whole arrays), f32
    /// loads, combined in workgroup memory.
    REDUCE = "reduce.wgsl (f32)",
    ["alias Elem = f32;\nalias Bits = u32;\n", "fn widen(v: f32, fill: f32) -> vec4<f32> { return vec4<f32>(v, fill, fill, fill); }\n",
     file!("combine1.wgsl"), file!("reduce_workgroup.wgsl"), REDUCE_IO_RW!(), file!("reduce.wgsl")],
    NONE, true
);
shader!(
    /// The same reductions with vec4 loads, for the bulk of whole-array reductions.
    ///
    /// Trusted: as [`REDUCE`].
    REDUCE_VEC4 = "reduce.wgsl (vec4)",
    ["alias Elem = vec4<f32>;\nalias Bits = vec4<u32>;\n", "fn widen(v: vec4<f32>, fill: f32) -> vec4<f32> { return v; }\n",
     file!("combine1.wgsl"), file!("reduce_workgroup.wgsl"), REDUCE_IO_RW!(), file!("reduce.wgsl"), file!("split_word.wgsl"), file!("reduce_whole.wgsl")],
    NONE, true
);
shader!(
    /// [`REDUCE`] combining each workgroup with subgroup operations.
    ///
    /// Trusted: as [`REDUCE`].
    REDUCE_SUBGROUP = "reduce.wgsl (f32, subgroup)",
    ["alias Elem = f32;\nalias Bits = u32;\n",
     "fn widen(v: f32, fill: f32) -> vec4<f32> { return vec4<f32>(v, fill, fill, fill); }\n",
     file!("combine1.wgsl"), file!("reduce_subgroup.wgsl"), REDUCE_IO_RW!(), file!("reduce.wgsl")],
    wgpu::Features::SUBGROUP, true
);
shader!(
    /// [`REDUCE_VEC4`] combining each workgroup with subgroup operations.
    ///
    /// Trusted: as [`REDUCE`].
    REDUCE_VEC4_SUBGROUP = "reduce.wgsl (vec4, subgroup)",
    ["alias Elem = vec4<f32>;\nalias Bits = vec4<u32>;\n",
     "fn widen(v: vec4<f32>, fill: f32) -> vec4<f32> { return v; }\n",
     file!("combine1.wgsl"), file!("reduce_subgroup.wgsl"), REDUCE_IO_RW!(), file!("reduce.wgsl"), file!("split_word.wgsl"), file!("reduce_whole.wgsl")],
    wgpu::Features::SUBGROUP, true
);
shader!(
    /// [`REDUCE_VEC4`] reading `x` through a read-only binding (when it lies in another
    /// buffer than the output).
    ///
    /// Trusted: as [`REDUCE`].
    REDUCE_VEC4_READ_ONLY = "reduce.wgsl (vec4, read-only x)",
    ["alias Elem = vec4<f32>;\nalias Bits = vec4<u32>;\n", "fn widen(v: vec4<f32>, fill: f32) -> vec4<f32> { return v; }\n",
     REDUCE_IO_RO!(), file!("combine1.wgsl"), file!("reduce_workgroup.wgsl"), file!("reduce.wgsl"), file!("split_word.wgsl"), file!("reduce_whole.wgsl")],
    NONE, true
);
shader!(
    /// [`REDUCE_VEC4_SUBGROUP`] reading `x` through a read-only binding.
    ///
    /// Trusted: as [`REDUCE`].
    REDUCE_VEC4_SUBGROUP_READ_ONLY = "reduce.wgsl (vec4, subgroup, read-only x)",
    ["alias Elem = vec4<f32>;\nalias Bits = vec4<u32>;\n",
     "fn widen(v: vec4<f32>, fill: f32) -> vec4<f32> { return v; }\n",
     REDUCE_IO_RO!(), file!("combine1.wgsl"), file!("reduce_subgroup.wgsl"), file!("reduce.wgsl"), file!("split_word.wgsl"), file!("reduce_whole.wgsl")],
    wgpu::Features::SUBGROUP, true
);
/// Prefix of the scans for `u32` elements (wrapping sums; published as their bits).
macro_rules! scan_u32 {
    () => {
        "alias T = u32;\nfn to_bits(v: u32) -> u32 { return v; }\nfn from_bits(b: u32) -> u32 { return b; }\n"
    };
}
/// Prefix of the scans for `f32` elements.
macro_rules! scan_f32 {
    () => {
        "alias T = f32;\nfn to_bits(v: f32) -> u32 { return bitcast<u32>(v); }\nfn from_bits(b: u32) -> f32 { return bitcast<f32>(b); }\n"
    };
}
/// Rows per invocation of a subgroup scan, and the tiles one workgroup takes (8): with the
/// I/O piece's elements per row these make `TILE_SUBGROUP`, `TILE_VEC4` and
/// `CLAIMS_SUBGROUP` in src/kernels/scan.rs.
macro_rules! scan_rows {
    ($per:literal) => {
        concat!("const PER: u32 = ", $per, "u;\nconst CLAIMS: u32 = 8u;\n")
    };
}
shader!(
    /// Trusted (compiled without injected checks, [`Shader::unchecked`]): tile elements are
    /// read and written behind `i < params.n`, which the host checks against both
    /// allocations; in the vec4 variant, whole words only in tiles that end at or before
    /// `params.n` (word `w` of such a tile holds elements below it), and the last tile's
    /// words element by element behind `4w + c < params.n`, with both arrays bound up to
    /// the 16 bytes past element `n - 1` (the host binds them so only where the buffer
    /// holds those bytes); the look-back state is indexed by its two counters and by tile
    /// numbers below the tile count the host sized it for (the kernels' own buffer, grown
    /// to fit every call); workgroup arrays are indexed by local ids and subgroup ranks
    /// below the workgroup size. The look-back loop is finite: each round moves `j` down by
    /// at least one tile or counts a stall, and after `SPINS` stalls the workgroup reduces
    /// tile `j` itself and moves down one, so it ends by tile 0 after at most `tile x
    /// (SPINS + 1)` rounds; the claim loop takes at most `CLAIMS` tiles.
    ///
    /// Single-pass inclusive/exclusive prefix sum of u32 (wrapping).
    SCAN_U32 = "scan.wgsl (u32)",
    [scan_u32!(), "const PER: u32 = 32u;\n",
     file!("scan_workgroup.wgsl"), file!("scan_io.wgsl"), file!("split_word.wgsl"), file!("scan.wgsl")],
    NONE, true
);
shader!(
    /// Single-pass inclusive/exclusive prefix sum of f32.
    ///
    /// Trusted: as [`SCAN_U32`].
    SCAN_F32 = "scan.wgsl (f32)",
    [scan_f32!(), "const PER: u32 = 32u;\n",
     file!("scan_workgroup.wgsl"), file!("scan_io.wgsl"), file!("split_word.wgsl"), file!("scan.wgsl")],
    NONE, true
);
shader!(
    /// [`SCAN_U32`] with tiles of 2048 (8 elements per invocation): 12 548 bytes of
    /// workgroup memory, for devices that give a workgroup less than the 37 892 bytes of
    /// tiles of 8192 (WebGPU's default 16 KiB, OpenGL's 32 KiB).
    ///
    /// Trusted: as [`SCAN_U32`].
    SCAN_U32_COMPACT = "scan.wgsl (u32, compact)",
    [scan_u32!(), "const PER: u32 = 8u;\n",
     file!("scan_workgroup.wgsl"), file!("scan_io.wgsl"), file!("split_word.wgsl"), file!("scan.wgsl")],
    NONE, true
);
shader!(
    /// [`SCAN_F32`] with tiles of 2048, as [`SCAN_U32_COMPACT`].
    ///
    /// Trusted: as [`SCAN_U32`].
    SCAN_F32_COMPACT = "scan.wgsl (f32, compact)",
    [scan_f32!(), "const PER: u32 = 8u;\n",
     file!("scan_workgroup.wgsl"), file!("scan_io.wgsl"), file!("split_word.wgsl"), file!("scan.wgsl")],
    NONE, true
);
shader!(
    /// [`SCAN_U32`] with subgroup operations (up to 8 tiles per workgroup, three
    /// barriers per tile).
    ///
    /// Trusted: as [`SCAN_U32`].
    SCAN_U32_SUBGROUP = "scan.wgsl (u32, subgroup)",
    [scan_u32!(),
     scan_rows!(8), file!("scan_subgroup.wgsl"), file!("scan_io.wgsl"), file!("split_word.wgsl"), file!("scan.wgsl")],
    wgpu::Features::SUBGROUP, true
);
shader!(
    /// [`SCAN_F32`] with subgroup operations (up to 8 tiles per workgroup, three
    /// barriers per tile).
    ///
    /// Trusted: as [`SCAN_U32`].
    SCAN_F32_SUBGROUP = "scan.wgsl (f32, subgroup)",
    [scan_f32!(),
     scan_rows!(8), file!("scan_subgroup.wgsl"), file!("scan_io.wgsl"), file!("split_word.wgsl"), file!("scan.wgsl")],
    wgpu::Features::SUBGROUP, true
);
shader!(
    /// [`SCAN_U32_SUBGROUP`] moving four elements per invocation and row in one 16-byte
    /// load or store (`scan_io_vec4.wgsl`): tiles of 4096, up to 8 per workgroup.
    ///
    /// Trusted: as [`SCAN_U32`].
    SCAN_U32_VEC4 = "scan.wgsl (u32, subgroup, vec4)",
    [scan_u32!(),
     scan_rows!(4), file!("scan_subgroup.wgsl"), file!("scan_io_vec4.wgsl"), file!("split_word.wgsl"), file!("scan.wgsl")],
    wgpu::Features::SUBGROUP, true
);
shader!(
    /// [`SCAN_F32_SUBGROUP`] moving four elements per invocation and row in one 16-byte
    /// load or store (`scan_io_vec4.wgsl`): tiles of 4096, up to 8 per workgroup.
    ///
    /// Trusted: as [`SCAN_U32`].
    SCAN_F32_VEC4 = "scan.wgsl (f32, subgroup, vec4)",
    [scan_f32!(),
     scan_rows!(4), file!("scan_subgroup.wgsl"), file!("scan_io_vec4.wgsl"), file!("split_word.wgsl"), file!("scan.wgsl")],
    wgpu::Features::SUBGROUP, true
);
shader!(
    /// Trusted (compiled without injected checks, [`Shader::unchecked`]): the 32 x 33 tile
    /// is indexed by `(lid.y + j) * 33 + lid.x` with `lid.x < 32`, `lid.y + j < 32` (at
    /// most 1054 of 1056); loads and stores are behind `r < rows && c < cols` and the host
    /// checks `rows x cols` elements fit. Its loops run four times.
    ///
    /// Tiled 2-D transpose of f32 through workgroup memory.
    TRANSPOSE = "transpose.wgsl", [file!("transpose.wgsl")], NONE, true
);
shader!(
    /// Trusted (compiled without injected checks, [`Shader::unchecked`]): every load and
    /// store is at `row * cols + c` behind `row < rows` and `c < cols` (vec4: `c < cols /
    /// 4`), and the host checks that `rows x cols` elements fit both allocations; the
    /// register array is indexed by `k < PER`, its length; workgroup arrays by local ids
    /// and subgroup ids below the workgroup size, the sweep's tree by `t + k` with `t < k
    /// <= 512`, and the short rows' segment trees by `local + s` and `local - lane` inside
    /// the invocation's own segment of `T` (`lane < s <= T / 2`); the scalar short rows'
    /// register vec4 by `k < 4`. Loops count up to `cols` by 256, to `PER`, or halve to 0.
    ///
    /// Row-wise softmax for any row length (online max and sum, then one write), 256
    /// invocations per row.
    SOFTMAX = "softmax.wgsl", ["const WG: u32 = 256u;\n", file!("softmax_params.wgsl"), file!("softmax.wgsl")], NONE, true
);
shader!(
    /// [`SOFTMAX`] with 1024 invocations per row, for long rows.
    ///
    /// Trusted: as [`SOFTMAX`].
    SOFTMAX_WIDE = "softmax.wgsl (1024)", ["const WG: u32 = 1024u;\n", file!("softmax_params.wgsl"), file!("softmax.wgsl")], NONE, true
);

/// A short-row softmax kernel (`$file`) for `T` invocations per row.
macro_rules! softmax_short {
    ($name:literal, $file:literal, $t:literal) => {
        shader_value!(
            $name,
            [
                "const T: u32 = ",
                $t,
                "u;\n",
                file!("softmax_params.wgsl"),
                file!("combine1.wgsl"),
                file!("softmax_segment.wgsl"),
                file!($file)
            ],
            NONE,
            true
        )
    };
}
/// Row softmax for short rows, several rows per workgroup: 32, 64 and 128 invocations per
/// row (rows of up to 128, 256 and 512 f32); one vec4 each (`softmax_short.wgsl`, rows
/// whose length is a multiple of 4), then up to four scalars each
/// (`softmax_short_scalar.wgsl`, any length).
///
/// Trusted: as [`SOFTMAX`].
pub const SOFTMAX_SHORT: [[Shader; 3]; 2] = [
    [
        softmax_short!("softmax_short.wgsl (32)", "softmax_short.wgsl", 32),
        softmax_short!("softmax_short.wgsl (64)", "softmax_short.wgsl", 64),
        softmax_short!("softmax_short.wgsl (128)", "softmax_short.wgsl", 128),
    ],
    [
        softmax_short!(
            "softmax_short_scalar.wgsl (32)",
            "softmax_short_scalar.wgsl",
            32
        ),
        softmax_short!(
            "softmax_short_scalar.wgsl (64)",
            "softmax_short_scalar.wgsl",
            64
        ),
        softmax_short!(
            "softmax_short_scalar.wgsl (128)",
            "softmax_short_scalar.wgsl",
            128
        ),
    ],
];

/// Element prefixes of the one-row-per-subgroup softmax (`softmax_subgroup_rows.wgsl`).
macro_rules! subgroup_rows_f32 {
    () => {
        "alias Elem = f32;\nconst ELEM: u32 = 1u;\n\
         fn hmax(v: f32) -> f32 { return v; }\n\
         fn hsum(v: f32) -> f32 { return v; }\n"
    };
}
macro_rules! subgroup_rows_vec4 {
    () => {
        "alias Elem = vec4<f32>;\nconst ELEM: u32 = 4u;\n\
         fn hmax(v: vec4<f32>) -> f32 { return max(max(v.x, v.y), max(v.z, v.w)); }\n\
         fn hsum(v: vec4<f32>) -> f32 { return dot(v, vec4<f32>(1.0)); }\n"
    };
}
/// The one-row-per-subgroup softmax for `PER` elements per lane.
macro_rules! softmax_subgroup_rows {
    ($name:literal, $elem:expr, $per:literal) => {
        softmax_subgroup_rows!($name, $elem, $per, "@group(0) @binding(1) var<storage, read_write> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n")
    };
    ($name:literal, $elem:expr, $per:literal, $io:expr) => {
        shader_value!(
            $name,
            [
                "const PER: u32 = ",
                $per,
                "u;\n",
                $elem,
                $io,
                file!("softmax_params.wgsl"),
                file!("softmax_subgroup_rows.wgsl")
            ],
            SUBGROUP,
            true
        )
    };
}
/// Row softmax for short rows, one row per subgroup (`softmax_subgroup_rows.wgsl`), by
/// elements per lane (1, 2, 4, 8 and 16): f32 elements, then vec4 (rows whose length is a
/// multiple of 4).
///
/// Trusted: as [`SOFTMAX`].
pub const SOFTMAX_SUBGROUP_ROWS: [[Shader; 5]; 2] = [
    [
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (f32, 1)",
            subgroup_rows_f32!(),
            1
        ),
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (f32, 2)",
            subgroup_rows_f32!(),
            2
        ),
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (f32, 4)",
            subgroup_rows_f32!(),
            4
        ),
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (f32, 8)",
            subgroup_rows_f32!(),
            8
        ),
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (f32, 16)",
            subgroup_rows_f32!(),
            16
        ),
    ],
    [
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (vec4, 1)",
            subgroup_rows_vec4!(),
            1
        ),
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (vec4, 2)",
            subgroup_rows_vec4!(),
            2
        ),
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (vec4, 4)",
            subgroup_rows_vec4!(),
            4
        ),
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (vec4, 8)",
            subgroup_rows_vec4!(),
            8
        ),
        softmax_subgroup_rows!(
            "softmax_subgroup_rows.wgsl (vec4, 16)",
            subgroup_rows_vec4!(),
            16
        ),
    ],
];
/// [`SOFTMAX_SUBGROUP_ROWS`] with `x` bound read-only (when it lies in another buffer than `y`).
///
/// Trusted: as [`SOFTMAX`].
pub const SOFTMAX_SUBGROUP_ROWS_RO: [[Shader; 5]; 2] = [
    [
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (f32, 1, read-only x)", subgroup_rows_f32!(), 1, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (f32, 2, read-only x)", subgroup_rows_f32!(), 2, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (f32, 4, read-only x)", subgroup_rows_f32!(), 4, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (f32, 8, read-only x)", subgroup_rows_f32!(), 8, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (f32, 16, read-only x)", subgroup_rows_f32!(), 16, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
    ],
    [
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (vec4, 1, read-only x)", subgroup_rows_vec4!(), 1, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (vec4, 2, read-only x)", subgroup_rows_vec4!(), 2, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (vec4, 4, read-only x)", subgroup_rows_vec4!(), 4, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (vec4, 8, read-only x)", subgroup_rows_vec4!(), 8, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
        softmax_subgroup_rows!("softmax_subgroup_rows.wgsl (vec4, 16, read-only x)", subgroup_rows_vec4!(), 16, "@group(0) @binding(1) var<storage, read> x: array<Elem>;\n@group(0) @binding(2) var<storage, read_write> y: array<Elem>;\n"),
    ],
];

shader!(
    /// Row-wise softmax for long rows of vec4s, 1024 invocations per row.
    ///
    /// Trusted: as [`SOFTMAX`].
    SOFTMAX_SWEEP = "softmax_sweep.wgsl", [file!("softmax_params.wgsl"), file!("softmax_sweep.wgsl")], NONE, true
);

// The matrix-unit kernel's workgroup, which the device's limits must admit (`Gpu`'s
// matrix units) and the kernel dispatches: facts of the shader, kept beside it.
/// Workgroup memory of `matmul_coop.wgsl`: 128 x 40 and 32 x 136 f16 slices, and
/// 4 x 16 x 16 f32 on the way out (a test of `kernels::matmul` reads it from the shader).
pub(crate) const COOP_WORKGROUP_BYTES: u32 = (128 * 40 + 32 * 136) * 2 + 4 * 16 * 16 * 4;
/// The most workgroup memory a matmul workgroup may take and still share a core with a
/// second one on NVIDIA's Vulkan driver. Both matmul kernels rely on two workgroups per
/// core (their registers allow two, and one waiting at a barrier leaves the core to the
/// other); the driver gives a core's workgroups 48-56 KiB in all, not the 228 KiB the
/// hardware can. On an H200 (driver 580) the matrix-unit kernel, padded with workgroup
/// memory it never uses, ran at full speed up to 24 576 bytes (285.4 against 286.4
/// TFLOP/s at 4096^3) and at 0.56x from 28 672 bytes on (161.8), the same at 32, 34 and
/// 40 KiB: one workgroup per core (BENCHMARKS.md, Matrix products).
pub(crate) const TWO_PER_CORE_WORKGROUP_BYTES: u32 = 24 * 1024;
const _: () = assert!(COOP_WORKGROUP_BYTES <= TWO_PER_CORE_WORKGROUP_BYTES);
/// Invocations in one workgroup of `matmul_coop.wgsl`: four subgroups of 32.
pub(crate) const COOP_WORKGROUP_SIZE: u32 = 128;

/// The row-in-registers softmax for `PER` vec4 per invocation, with the portable or the
/// subgroup workgroup combine.
macro_rules! softmax_cached {
    ($name:literal, $per:literal, $combine:literal, $requires:expr) => {
        shader_value!(
            $name,
            [
                "const PER: u32 = ",
                $per,
                "u;\n",
                file!("softmax_params.wgsl"),
                file!("combine1.wgsl"),
                file!($combine),
                file!("softmax_cached.wgsl")
            ],
            $requires,
            true
        )
    };
}
/// Row softmax with the row held in registers (`softmax_cached.wgsl`), by vec4 per
/// invocation: 1, 2, 4, 8 and 16 (rows of up to 1024 ... 16384 f32); the portable combine,
/// then subgroups.
///
/// Trusted: as [`SOFTMAX`].
pub const SOFTMAX_CACHED: [[Shader; 5]; 2] = [
    [
        softmax_cached!("softmax_cached.wgsl (1)", 1, "reduce_workgroup.wgsl", NONE),
        softmax_cached!("softmax_cached.wgsl (2)", 2, "reduce_workgroup.wgsl", NONE),
        softmax_cached!("softmax_cached.wgsl (4)", 4, "reduce_workgroup.wgsl", NONE),
        softmax_cached!("softmax_cached.wgsl (8)", 8, "reduce_workgroup.wgsl", NONE),
        softmax_cached!(
            "softmax_cached.wgsl (16)",
            16,
            "reduce_workgroup.wgsl",
            NONE
        ),
    ],
    [
        softmax_cached!(
            "softmax_cached.wgsl (1, subgroup)",
            1,
            "reduce_subgroup.wgsl",
            SUBGROUP
        ),
        softmax_cached!(
            "softmax_cached.wgsl (2, subgroup)",
            2,
            "reduce_subgroup.wgsl",
            SUBGROUP
        ),
        softmax_cached!(
            "softmax_cached.wgsl (4, subgroup)",
            4,
            "reduce_subgroup.wgsl",
            SUBGROUP
        ),
        softmax_cached!(
            "softmax_cached.wgsl (8, subgroup)",
            8,
            "reduce_subgroup.wgsl",
            SUBGROUP
        ),
        softmax_cached!(
            "softmax_cached.wgsl (16, subgroup)",
            16,
            "reduce_subgroup.wgsl",
            SUBGROUP
        ),
    ],
];
shader!(
    /// Trusted (compiled without injected checks, [`Shader::unchecked`]): the tiles
    /// `As`/`Bs` are indexed by `kk * 32 + slot` with `kk < BK` and `slot < 32` fixed by
    /// the loop bounds and the workgroup size; every load of `a`/`b` is behind `ar < m`,
    /// `ak + i < k`, `bk < k`, `bc + i < n`, every store of `c` behind `r < m`, `col + j <
    /// n`, and the host checks that `m x k`, `k x n` and `m x n` elements fit the bound
    /// allocations. Every loop counts up to a constant or to `k` by `BK`.
    ///
    /// f32 matmul, 128x128 tiles, 8x8 outputs per invocation.
    MATMUL_F32 = "matmul.wgsl (f32)",
    ["alias In = f32;\nfn load_a(i: u32) -> f32 { return a[i]; }\nfn load_b(i: u32) -> f32 { return b[i]; }\n",
     file!("matmul_params.wgsl"), file!("matmul.wgsl")],
    NONE, true
);
shader!(
    /// Matmul of f16 inputs (packed pairs) with f32 accumulation and output.
    ///
    /// Trusted: as [`MATMUL_F32`].
    MATMUL_F16_PACKED = "matmul.wgsl (f16 packed)",
    [h2_packed!(), f16_loads!(),
     file!("matmul_params.wgsl"), file!("matmul.wgsl")],
    NONE, true
);
shader!(
    /// Matmul of native f16 inputs with f32 accumulation and output.
    ///
    /// Trusted: as [`MATMUL_F32`].
    MATMUL_F16_NATIVE = "matmul.wgsl (f16 native)",
    [h2_native!(), f16_loads!(),
     file!("matmul_params.wgsl"), file!("matmul.wgsl")],
    wgpu::Features::SHADER_F16, true
);
/// Prefixes of matmul_vec4.wgsl: the four-element input type and its widening.
macro_rules! in4 {
    (f32) => {
        "alias In4 = vec4<f32>;\nfn widen4(v: vec4<f32>) -> vec4<f32> { return v; }\n"
    };
    (f16_packed) => {
        "alias In4 = vec2<u32>;\n\
         fn widen4(v: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(v.x), unpack2x16float(v.y)); }\n"
    };
    (f16_native) => {
        "enable f16;\nalias In4 = vec4<f16>;\nfn widen4(v: vec4<f16>) -> vec4<f32> { return vec4<f32>(v); }\n"
    };
}
/// The input bindings of matmul_vec4.wgsl: writable (the shared layout) or read-only.
macro_rules! in4_bindings {
    (read_write) => {
        "@group(0) @binding(1) var<storage, read_write> a: array<In4>;\n\
         @group(0) @binding(2) var<storage, read_write> b: array<In4>;\n"
    };
    (read) => {
        "@group(0) @binding(1) var<storage, read> a: array<In4>;\n\
         @group(0) @binding(2) var<storage, read> b: array<In4>;\n"
    };
}
/// One matmul_vec4.wgsl variant for an input type and input access.
macro_rules! matmul_vec4 {
    ($name:literal, $input:ident, $access:ident, $requires:expr) => {
        shader_value!(
            $name,
            [
                in4!($input),
                in4_bindings!($access),
                file!("matmul_params.wgsl"),
                file!("matmul_vec4.wgsl")
            ],
            $requires,
            true
        )
    };
}
/// Trusted (compiled without injected checks, [`Shader::unchecked`]): `As`/`Bs` are indexed
/// up to `(a_k + 7) * 32 + slot`, `(b_k + 8) * 32 + t % 32` and `kk * 32 + 16 + tr`, at
/// most 511 of 512 with `a_k <= 8`, `b_k < 8`, `slot, tr < 32` and `kk < 16`; every load of
/// `a`/`b` is behind `row < m && q < k / 4` or `row < k && q < n / 4` (a's rows `lda / 4`
/// fours apart: k / 4, or in a part of a split product the whole k / 4 with the part's
/// k-range inside it), every store of `c` behind `r < m && q < n / 4`, and the host runs
/// it only for k and n multiples of 4 after checking that `m x k`, `k x n` and `m x n`
/// elements fit. Loops count to `k` by 16 and to 16.
///
/// f32 matmul with four-element loads and stores, for k and n multiples of 4: inputs
/// writable (the shared layout), then read-only.
pub const MATMUL_VEC4_F32: [Shader; 2] = [
    matmul_vec4!("matmul_vec4.wgsl (f32)", f32, read_write, NONE),
    matmul_vec4!("matmul_vec4.wgsl (f32, read-only inputs)", f32, read, NONE),
];
/// [`MATMUL_VEC4_F32`] for f16 inputs packed in words.
///
/// Trusted: as [`MATMUL_VEC4_F32`].
pub const MATMUL_VEC4_F16_PACKED: [Shader; 2] = [
    matmul_vec4!(
        "matmul_vec4.wgsl (f16 packed)",
        f16_packed,
        read_write,
        NONE
    ),
    matmul_vec4!(
        "matmul_vec4.wgsl (f16 packed, read-only inputs)",
        f16_packed,
        read,
        NONE
    ),
];
/// [`MATMUL_VEC4_F32`] for native f16 inputs.
///
/// Trusted: as [`MATMUL_VEC4_F32`].
pub const MATMUL_VEC4_F16_NATIVE: [Shader; 2] = [
    matmul_vec4!(
        "matmul_vec4.wgsl (f16 native)",
        f16_native,
        read_write,
        wgpu::Features::SHADER_F16
    ),
    matmul_vec4!(
        "matmul_vec4.wgsl (f16 native, read-only inputs)",
        f16_native,
        read,
        wgpu::Features::SHADER_F16
    ),
];
/// The input bindings of matmul_coop.wgsl (eight f16 per element) and its output (four
/// f32 per element).
macro_rules! coop_bindings {
    ($access:literal) => {
        concat!(
            "enable f16;\nenable wgpu_cooperative_matrix;\n\
             @group(0) @binding(1) var<storage, ",
            $access,
            "> a: array<vec4<u32>>;\n\
             @group(0) @binding(2) var<storage, ",
            $access,
            "> b: array<vec4<u32>>;\n\
             @group(0) @binding(3) var<storage, read_write> c: array<vec4<f32>>;\n"
        )
    };
}
/// What matmul_coop.wgsl needs of the device (the host also checks the cooperative
/// matrix configuration and subgroup size: `Gpu::has_matrix_units`).
pub(crate) const MATRIX_UNITS: wgpu::Features = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
    .union(wgpu::Features::SHADER_F16)
    .union(wgpu::Features::SUBGROUP);
/// One matrix-unit matmul variant: its input access and whether loads test bounds.
macro_rules! matmul_coop {
    ($name:literal, $access:literal, $guarded:literal) => {
        shader_value!(
            $name,
            [
                coop_bindings!($access),
                "const GUARDED: bool = ",
                $guarded,
                ";\n",
                file!("matmul_params.wgsl"),
                file!("matmul_coop.wgsl")
            ],
            MATRIX_UNITS,
            true
        )
    };
}
/// Trusted (compiled without injected checks, [`Shader::unchecked`]). `matmul_coop.wgsl`
/// on 128 x 128 tiles, its slices counted in pairs of halves: each invocation writes four
/// pairs at `row * 20 + col / 2` (`row < 128`, `col <= 24`: at most 2555, below b's slice
/// at `B_AT = 2560`) and `B_AT + row * 68 + col / 2` (`row < 32`, `col <= 120`: at most
/// 4731 of the array's `SLICES = 4736`); fragments read 16 x 8 pairs from offsets whose
/// last pair is at most 2555 (a's) and 4731 (b's). Subgroup `sg < 4` (128 invocations in
/// subgroups of exactly 32, which the host requires) stages a fragment at
/// `cstage[sg * 64 ..][..64]` of 256 fours and reads it back at `sg * 64 + lane` and
/// `sg * 64 + 32 + lane` (`lane < 32`). Every load of `a`/`b` is behind `row < m && col <
/// k` (`row < k && col < n`) and reads element 0 otherwise (a's rows are `lda` apart: k,
/// or in a split product the whole k, with the parts' `k` ranges inside it and the host
/// checking a's m x lda elements), every fragment's writes to `c`
/// (rows `row..row + 16`, columns `col..col + 16`, as fours from `(base + row * n + col) /
/// 4` with base, n and col multiples of 16) behind `row < m && col < n` with both
/// multiples of 16, and the host checks the three allocations' sizes. The whole-tiles
/// variants drop the load tests only where the host found m and n multiples of 128 and k
/// of 32: every tile's rows and columns then lie inside and slices start below `k` and end
/// at most at `k`. Tiles: the host dispatches at most as many workgroups as tiles and
/// keeps `tiles + workgroups` below 2^32; a workgroup starts at tile `workgroup_id.x <
/// tiles` and loads a tile only while `tile < tiles`. The loop ends: each pass moves k on
/// by 32 or, after a tile's last step, the tile on by the number of workgroups, and it
/// stops once the tile reaches `tiles`; the inner loop counts to 32 by 16.
///
/// Matmul of f16 inputs on the matrix units (cooperative matrices, f32 accumulators), by
/// `[whole tiles][read-only inputs]`: loads tested against the bounds, then not (m and n
/// multiples of 128, k of 32); inputs writable (the shared layout), then read-only.
pub const MATMUL_COOP_F16: [[Shader; 2]; 2] = [
    [
        matmul_coop!("matmul_coop.wgsl", "read_write", "true"),
        matmul_coop!("matmul_coop.wgsl (read-only inputs)", "read", "true"),
    ],
    [
        matmul_coop!("matmul_coop.wgsl (whole tiles)", "read_write", "false"),
        matmul_coop!(
            "matmul_coop.wgsl (whole tiles, read-only inputs)",
            "read",
            "false"
        ),
    ],
];
shader!(
    /// The second pass of a product split along k: sums the parts' partial products into
    /// c, part by part in order.
    MATMUL_SPLIT_SUM = "matmul_split_sum.wgsl", [file!("matmul_split_sum.wgsl")], NONE
);
shader!(
    /// f32 <-> f16 casts, f16 pairs packed in u32 words on every adapter: the tail of an
    /// odd count needs the words' bits, which naga cannot bitcast out of `vec2<f16>`.
    CAST_F16_PACKED = "cast.wgsl (packed)", [h2_packed!(), file!("cast.wgsl")], NONE
);
shader!(
    /// Trusted (compiled without injected checks, [`Shader::unchecked`]): group `i` reads
    /// and writes `f[2i]`, `f[2i + 1]` and `h[i]` behind `i < groups`, and the host sets
    /// `groups = n / 8` after checking that `n` f32 and `n` f16 fit the bound allocations
    /// (`32 * groups <= 4n`, `16 * groups <= 2n`). It has no loop.
    ///
    /// f32 <-> f16 casts, eight elements per invocation (the bulk of each array).
    CAST_F16_X8 = "cast_x8.wgsl", [file!("cast_x8.wgsl")], NONE, true
);
shader!(
    /// Writes the partial words at the unaligned edges of an upload.
    PATCH_WORDS = "patch_words.wgsl", [file!("patch_words.wgsl")], NONE
);
shader!(
    /// Copies many ranges between two buffers in one dispatch, word by word (tiered
    /// memory's defragmentation).
    COPY_RANGES = "copy_ranges.wgsl (u32)", ["alias Word = u32;\n", file!("copy_ranges.wgsl")], NONE
);
shader!(
    /// [`COPY_RANGES`] by 16-byte words, for ranges that are all 16-byte aligned.
    COPY_RANGES_VEC4 = "copy_ranges.wgsl (vec4)", ["alias Word = vec4<u32>;\n", file!("copy_ranges.wgsl")], NONE
);
shader!(
    /// Checks guard bytes around arena allocations.
    GUARD_CHECK = "guard_check.wgsl", [file!("guard_check.wgsl")], NONE
);

shader!(
    /// Virtual-texture feedback compaction: de-duplicates requested tile keys into a list.
    VT_COMPACT = "vt_compact.wgsl", [file!("vt_hash.wgsl"), file!("vt_compact.wgsl")], NONE
);
shader!(
    /// Virtual-texture sampling from a compute shader at given points (the WGSL library
    /// of `vt.wgsl` with its bindings in group 0).
    VT_PROBE = "vt_probe.wgsl", [file!("vt_bindings.wgsl"), file!("vt_hash.wgsl"), file!("vt.wgsl"), file!("vt_probe.wgsl")], NONE
);

/// The virtual-texture WGSL library (`vt_sample`, `vt_feedback`, ...) without bindings;
/// [`crate::vt::VirtualTexture::wgsl`] gives it with its bindings in the host's group.
pub const VT_LIBRARY: &str = concat!(file!("vt_hash.wgsl"), file!("vt.wgsl"));
/// The virtual-texture bindings, in group 0.
pub const VT_BINDINGS: &str = file!("vt_bindings.wgsl");

/// Every shader shipped with the crate.
pub const ALL: &[Shader] = &[
    ELEMENTWISE,
    ELEMENTWISE_VEC4,
    REDUCE,
    REDUCE_VEC4,
    REDUCE_SUBGROUP,
    REDUCE_VEC4_SUBGROUP,
    REDUCE_VEC4_READ_ONLY,
    REDUCE_VEC4_SUBGROUP_READ_ONLY,
    SCAN_U32,
    SCAN_F32,
    SCAN_U32_COMPACT,
    SCAN_F32_COMPACT,
    SCAN_U32_SUBGROUP,
    SCAN_F32_SUBGROUP,
    SCAN_U32_VEC4,
    SCAN_F32_VEC4,
    TRANSPOSE,
    SOFTMAX,
    SOFTMAX_WIDE,
    SOFTMAX_SWEEP,
    SOFTMAX_SHORT[0][0],
    SOFTMAX_SHORT[0][1],
    SOFTMAX_SHORT[0][2],
    SOFTMAX_SHORT[1][0],
    SOFTMAX_SHORT[1][1],
    SOFTMAX_SHORT[1][2],
    SOFTMAX_SUBGROUP_ROWS[0][0],
    SOFTMAX_SUBGROUP_ROWS[0][1],
    SOFTMAX_SUBGROUP_ROWS[0][2],
    SOFTMAX_SUBGROUP_ROWS[0][3],
    SOFTMAX_SUBGROUP_ROWS[0][4],
    SOFTMAX_SUBGROUP_ROWS[1][0],
    SOFTMAX_SUBGROUP_ROWS[1][1],
    SOFTMAX_SUBGROUP_ROWS[1][2],
    SOFTMAX_SUBGROUP_ROWS[1][3],
    SOFTMAX_SUBGROUP_ROWS[1][4],
    SOFTMAX_SUBGROUP_ROWS_RO[0][0],
    SOFTMAX_SUBGROUP_ROWS_RO[0][1],
    SOFTMAX_SUBGROUP_ROWS_RO[0][2],
    SOFTMAX_SUBGROUP_ROWS_RO[0][3],
    SOFTMAX_SUBGROUP_ROWS_RO[0][4],
    SOFTMAX_SUBGROUP_ROWS_RO[1][0],
    SOFTMAX_SUBGROUP_ROWS_RO[1][1],
    SOFTMAX_SUBGROUP_ROWS_RO[1][2],
    SOFTMAX_SUBGROUP_ROWS_RO[1][3],
    SOFTMAX_SUBGROUP_ROWS_RO[1][4],
    SOFTMAX_CACHED[0][0],
    SOFTMAX_CACHED[0][1],
    SOFTMAX_CACHED[0][2],
    SOFTMAX_CACHED[0][3],
    SOFTMAX_CACHED[0][4],
    SOFTMAX_CACHED[1][0],
    SOFTMAX_CACHED[1][1],
    SOFTMAX_CACHED[1][2],
    SOFTMAX_CACHED[1][3],
    SOFTMAX_CACHED[1][4],
    MATMUL_F32,
    MATMUL_F16_PACKED,
    MATMUL_F16_NATIVE,
    MATMUL_VEC4_F32[0],
    MATMUL_VEC4_F32[1],
    MATMUL_VEC4_F16_PACKED[0],
    MATMUL_VEC4_F16_PACKED[1],
    MATMUL_VEC4_F16_NATIVE[0],
    MATMUL_VEC4_F16_NATIVE[1],
    MATMUL_COOP_F16[0][0],
    MATMUL_COOP_F16[0][1],
    MATMUL_COOP_F16[1][0],
    MATMUL_COOP_F16[1][1],
    MATMUL_SPLIT_SUM,
    CAST_F16_PACKED,
    CAST_F16_X8,
    PATCH_WORDS,
    COPY_RANGES,
    COPY_RANGES_VEC4,
    GUARD_CHECK,
    VT_COMPACT,
    VT_PROBE,
];
