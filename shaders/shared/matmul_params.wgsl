// The parameters of every matmul kernel (binding 0). Batches (`Batch::bmm`) of `batch`
// products: workgroup_id.z picks the product (the matrix-unit kernel counts its tiles
// through all of them instead); product z's a, b and c start stride_a * z, stride_b * z
// and stride_c * z units in, each in the units its kernel indexes that operand with
// (elements in `matmul.wgsl`, four elements in `matmul_vec4.wgsl`, eight halves for the
// matrix units' a and b), all 0 for one product. The host keeps batch strides multiples
// of those units. `lda` is the distance between a's rows in elements: k, except in a
// product split along k (split-k, `Batch::matmul`), which runs as a batch of products over
// k-ranges of one a and b: each part's rows of a are the whole k apart. The matrix-unit
// and four-element kernels read it; `matmul.wgsl` (never split) reads rows k apart.
struct Params {
    m: u32,
    n: u32,
    k: u32,
    stride_a: u32,
    stride_b: u32,
    stride_c: u32,
    batch: u32,
    lda: u32,
}

// Where the product a workgroup works on starts in a, b and c (set by `matmul`).
var<private> za: u32;
var<private> zb: u32;
var<private> zc: u32;
