//! `LAB_LIBRARY=1`: times f16 and f32 products through the library's own call
//! (`Batch::matmul`, so every pass it takes), with split-k on and off, at `LAB_SHAPES`
//! (single products; the batch count is ignored). Each figure is the median of five
//! batches of products, GPU time from the batch's timestamps, after a warm-up batch, and
//! each output is first checked at 64 elements against an f64 product of the halves.

use vramkit::kernels::{KernelOptions, Kernels, MatmulInput, MatmulShape};

/// The product with inputs of the element type `input` names, chosen at run time.
fn bmm_as<'a, 'b>(
    batch: &'b mut vramkit::kernels::Batch<'a>,
    input: vramkit::kernels::MatmulInput,
    shape: vramkit::kernels::MatmulShape,
    layout: vramkit::kernels::MatmulBatch,
    a: &'a vramkit::Allocation,
    b: &'a vramkit::Allocation,
    c: &'a vramkit::Allocation,
) -> vramkit::Result<&'b mut vramkit::kernels::Batch<'a>> {
    match input {
        vramkit::kernels::MatmulInput::F32 => batch.bmm::<f32>(shape, layout, a, b, c),
        vramkit::kernels::MatmulInput::F16 => batch.bmm::<half::f16>(shape, layout, a, b, c),
    }
}

/// Runs the comparison; panics on a wrong product.
pub fn run(gpu: &vramkit::Gpu, shapes: &[[u32; 4]]) {
    let arena = vramkit::Arena::new(gpu, Default::default()).unwrap_or_else(|e| panic!("{e}"));
    let variants = [true, false].map(|split_k| {
        let options = KernelOptions {
            split_k,
            ..Default::default()
        };
        let kernels = Kernels::with_options(&arena, options).unwrap_or_else(|e| panic!("{e}"));
        (if split_k { "split" } else { "unsplit" }, kernels)
    });
    for &[m, n, k, _] in shapes {
        let (m, n, k) = (m as usize, n as usize, k as usize);
        let mut rng = super::Rng(0x9e37_79b9_7f4a_7c15 ^ (m * 31 + n * 7 + k) as u64);
        let a: Vec<f32> = (0..m * k).map(|_| rng.value()).collect();
        let b: Vec<f32> = (0..k * n).map(|_| rng.value()).collect();
        let half = |v: &[f32]| -> Vec<u16> {
            v.iter()
                .map(|&x| half::f16::from_f32(x).to_bits())
                .collect()
        };
        let upload = |bytes: &[u8], label: &str| {
            let alloc = arena
                .alloc(bytes.len().next_multiple_of(4) as u64, label)
                .unwrap_or_else(|e| panic!("{e}"));
            let mut bytes = bytes.to_vec();
            bytes.resize(alloc.size() as usize, 0);
            gpu.queue()
                .write_buffer(alloc.buffer(), alloc.offset(), &bytes);
            alloc
        };
        let (ha, hb) = (half(&a), half(&b));
        let inputs = [
            (
                MatmulInput::F16,
                upload(bytemuck::cast_slice(&ha), "a f16"),
                upload(bytemuck::cast_slice(&hb), "b f16"),
            ),
            (
                MatmulInput::F32,
                upload(bytemuck::cast_slice(&a), "a"),
                upload(bytemuck::cast_slice(&b), "b"),
            ),
        ];
        let c = arena
            .alloc(4 * (m * n) as u64, "c")
            .unwrap_or_else(|e| panic!("{e}"));
        let shape = MatmulShape {
            m: m as u64,
            k: k as u64,
            n: n as u64,
        };
        // About 20 ms of work per batch at 300 TFLOP/s, at most 400 products.
        let reps = (6e12 / (2.0 * (m * n * k) as f64)).clamp(1.0, 400.0) as usize;
        for ((name, kernels), (input, ga, gb)) in variants
            .iter()
            .flat_map(|v| inputs.iter().map(move |i| (v, i)))
        {
            let input = *input;
            // The f32 kernel runs at about an eighth of the f16 one's rate.
            let reps = if input == MatmulInput::F32 {
                (reps / 8).max(1)
            } else {
                reps
            };
            let kind = if input == MatmulInput::F32 {
                "f32"
            } else {
                "f16"
            };
            let name = format!("{name}_{kind}");
            let time = |reps: usize| -> f64 {
                let mut batch = kernels.batch();
                for _ in 0..reps {
                    bmm_as(
                        &mut batch,
                        input,
                        shape,
                        vramkit::kernels::MatmulBatch::packed(1, shape),
                        ga,
                        gb,
                        &c,
                    )
                    .unwrap_or_else(|e| panic!("{e}"));
                }
                batch
                    .submit_timed()
                    .unwrap_or_else(|e| panic!("{e}"))
                    .seconds
            };
            time(1);
            let got: Vec<f32> =
                vramkit::readback::read_as::<f32>(gpu, c.buffer(), c.offset(), m * n)
                    .unwrap_or_else(|e| panic!("{e}"));
            for s in 0..64 {
                let (i, j) = ((s * 131) % m, (s * 977) % n);
                let want: f64 = (0..k)
                    .map(|p| a[i * k + p] as f64 * b[p * n + j] as f64)
                    .sum();
                assert_eq!(
                    got[i * n + j] as f64,
                    want,
                    "{name} {m}x{n}x{k}: c[{i}][{j}]"
                );
            }
            time(reps);
            let mut runs: Vec<f64> = (0..5).map(|_| time(reps)).collect();
            runs.sort_by(f64::total_cmp);
            let tflops = 2.0 * (m * n * k * reps) as f64 / runs[2] / 1e12;
            println!("# library {name} {m}x{n}x{k}: {tflops:.1} TFLOP/s");
            println!("lab_library_{name}_{m}x{n}x{k}_tflops: {tflops:.1}");
        }
    }
}
