// The parameters of every row softmax kernel (bound at 0 by each): x and y are row-major
// `rows x cols` f32 matrices. The padding fills the kernels' 32-byte uniform slot
// (`SoftmaxParams` in src/kernels/softmax.rs mirrors it).

struct Params {
    rows: u32,
    cols: u32,
    _pad0: u32,
    _pad1: u32,
    _pad2: u32,
    _pad3: u32,
    _pad4: u32,
    _pad5: u32,
}
