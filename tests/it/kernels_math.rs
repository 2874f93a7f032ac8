//! The math kernels (unary and binary maps, scans, transpose, softmax, matmul, f16 casts),
//! each against a CPU reference on fresh random inputs at awkward sizes, outputs poisoned
//! with NaN first so that an element the kernel never writes fails.

use crate::common;

use common::reference::{
    cpu_binary, cpu_from_f16_bits, cpu_matmul_element, cpu_scan_f32, cpu_scan_u32, cpu_softmax,
    cpu_to_f16_bits, cpu_transpose, cpu_unary,
};
use common::{assert_close, gpu, random_f32, rng};
use rand::Rng;
use vramkit::kernels::{Binary, KernelOptions, Kernels, MatmulInput, ScanKind, Unary};
use vramkit::kernels::{MatmulBatch, MatmulShape};
use vramkit::{readback, Arena};

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

fn upload<T: bytemuck::Pod>(arena: &Arena, data: &[T], label: &str) -> vramkit::arena::Allocation {
    let bytes: &[u8] = bytemuck::cast_slice(data);
    let a = arena.alloc(bytes.len().max(4) as u64, label).unwrap();
    let mut padded = bytes.to_vec();
    padded.resize(a.size() as usize, 0);
    arena
        .gpu()
        .queue()
        .write_buffer(a.buffer(), a.offset(), &padded);
    a
}

fn poisoned(arena: &Arena, n: usize, label: &str) -> vramkit::arena::Allocation {
    upload(arena, &vec![f32::NAN; n], label)
}

fn read<T: bytemuck::Pod>(a: &vramkit::arena::Allocation, n: usize) -> Vec<T> {
    readback::read_as::<T>(gpu(), a.buffer(), a.offset(), n).unwrap()
}

/// The kernels with every optional feature the adapter has, then the portable ones.
fn variants(arena: &Arena) -> [Kernels; 2] {
    [
        Kernels::new(arena).unwrap(),
        Kernels::with_options(arena, KernelOptions::portable()).unwrap(),
    ]
}

#[test]
fn unary_maps_and_scale_match_the_cpu() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    for n in [1usize, 255, 256, 257, 7919] {
        // Inputs in [-4, 4); log and sqrt get |x| so their results are numbers.
        let x: Vec<f32> = random_f32(&mut r, n).iter().map(|v| v * 4.0).collect();
        let positive: Vec<f32> = x.iter().map(|v| v.abs() + 1e-3).collect();
        let xa = upload(&arena, &x, "x");
        let pa = upload(&arena, &positive, "positive");
        let outs: Vec<_> = Unary::ALL
            .iter()
            .map(|_| poisoned(&arena, n, "y"))
            .collect();
        let scaled = poisoned(&arena, n, "scaled");
        let mut batch = kernels.batch();
        for (f, out) in Unary::ALL.iter().zip(&outs) {
            let input = if matches!(f, Unary::Log | Unary::Sqrt) {
                &pa
            } else {
                &xa
            };
            batch.map(*f, (input, n as u64), (out, n as u64)).unwrap();
        }
        batch
            .scale(-2.5, 0.75, (&xa, n as u64), (&scaled, n as u64))
            .unwrap();
        batch.submit().unwrap();
        for (f, out) in Unary::ALL.iter().zip(&outs) {
            let input = if matches!(f, Unary::Log | Unary::Sqrt) {
                &positive
            } else {
                &x
            };
            let want: Vec<f32> = input.iter().map(|&v| cpu_unary(*f, v)).collect();
            assert_close(&read::<f32>(out, n), &want, 2e-6, &format!("{f:?} n={n}"));
        }
        let want: Vec<f32> = x.iter().map(|v| -2.5 * v + 0.75).collect();
        assert_close(
            &read::<f32>(&scaled, n),
            &want,
            1e-6,
            &format!("scale n={n}"),
        );
    }
}

#[test]
fn binary_ops_match_the_cpu_in_and_out_of_place() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    for n in [1usize, 257, 65535 * 256 + 5] {
        let x = random_f32(&mut r, n);
        // Divisors away from zero.
        let y: Vec<f32> = random_f32(&mut r, n)
            .iter()
            .map(|v| v + 2.0f32.copysign(*v))
            .collect();
        let (xa, ya) = (upload(&arena, &x, "x"), upload(&arena, &y, "y"));
        for op in Binary::ALL {
            let z = poisoned(&arena, n, "z");
            let in_place = upload(&arena, &x, "x copy");
            let mut batch = kernels.batch();
            batch
                .binary(op, (&xa, n as u64), (&ya, n as u64), (&z, n as u64))
                .unwrap();
            batch
                .binary(
                    op,
                    (&in_place, n as u64),
                    (&ya, n as u64),
                    (&in_place, n as u64),
                )
                .unwrap();
            batch.submit().unwrap();
            let want: Vec<f32> = x
                .iter()
                .zip(&y)
                .map(|(a, b)| cpu_binary(op, *a, *b))
                .collect();
            assert_close(&read::<f32>(&z, n), &want, 1e-6, &format!("{op:?} n={n}"));
            assert_close(
                &read::<f32>(&in_place, n),
                &want,
                1e-6,
                &format!("{op:?} in place n={n}"),
            );
        }
    }
}

#[test]
fn scans_match_the_cpu_at_awkward_sizes() {
    common::say("kernels_math: scans at awkward sizes against the CPU");
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    // Tiles are 8192 elements (portable) or 4096, taken 8 per workgroup, in 16-byte
    // words (subgroup): 4097 and 32769 end one element into a tile and into a workgroup's
    // ninth, 4094 two short of a whole tile; 2^21 + 3 is 257 or 513 tiles, more than one
    // look-back window; all but 256 and 8192 end inside a word. (The subgroup variant of
    // one element per row, for buffers that end inside a word, is tested in
    // src/kernels/scan.rs.)
    for (kernels, n) in variants(&arena).iter().flat_map(|k| {
        [
            1usize,
            255,
            256,
            257,
            2049,
            4094,
            4097,
            8191,
            8192,
            8193,
            7919,
            16385,
            32769,
            (1 << 21) + 3,
        ]
        .map(move |n| (k, n))
    }) {
        // u32 values over the whole range, so sums wrap.
        let xu: Vec<u32> = (0..n).map(|_| r.gen()).collect();
        // f32 in [0, 1): the f64 reference then bounds the error by the prefix itself.
        let xf: Vec<f32> = (0..n).map(|_| r.gen_range(0.0f32..1.0)).collect();
        for kind in [ScanKind::Inclusive, ScanKind::Exclusive] {
            let (ua, fa) = (upload(&arena, &xu, "xu"), upload(&arena, &xf, "xf"));
            let (uo, fo) = (
                poisoned(&arena, n, "scan u32"),
                poisoned(&arena, n, "scan f32"),
            );
            let mut batch = kernels.batch();
            batch
                .scan::<u32>(kind, (&ua, n as u64), (&uo, n as u64))
                .unwrap();
            batch
                .scan::<f32>(kind, (&fa, n as u64), (&fo, n as u64))
                .unwrap();
            assert!(
                batch
                    .scan::<u32>(kind, (&ua, n as u64), (&ua, n as u64))
                    .is_err(),
                "an in-place scan is refused"
            );
            batch.submit().unwrap();
            let want = cpu_scan_u32(&xu, kind);
            let subgroups = kernels.options().subgroups;
            assert_eq!(
                read::<u32>(&uo, n),
                want,
                "u32 {kind:?} n={n} subgroups={subgroups}"
            );
            let got = read::<f32>(&fo, n);
            for (i, (&g, &w)) in got.iter().zip(&cpu_scan_f32(&xf, kind)).enumerate() {
                let err = (g as f64 - w).abs() / w.max(1.0);
                assert!(
                    err < 1e-4,
                    "f32 {kind:?} n={n} subgroups={subgroups}: element {i} is {g}, want {w}"
                );
            }
        }
    }
}

/// The scans keep their state between calls (counters reset by the last workgroup, values
/// told apart by a 14-bit epoch, the whole state zeroed when the epochs start over): more
/// calls than there are epochs, small ones between multi-tile ones of several sizes, in
/// one batch and across batches, each multi-tile result checked. With the epoch test
/// or the counter reset taken out of the shader, this fails. The zeroing when the epochs
/// start over runs here, but what it guards against (a value left 16383 calls earlier
/// that the calls between never overwrote) is not arranged.
#[test]
fn scans_keep_no_state_from_call_to_call_across_every_epoch() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    for kernels in variants(&arena) {
        let small: Vec<u32> = (0..5).map(|_| r.gen()).collect();
        let small_in = upload(&arena, &small, "small");
        let small_out = poisoned(&arena, small.len(), "small out");
        // 16383 epochs; 17 rounds of 1000 calls wrap them once.
        for round in 0..17 {
            // 1 to 1025 tiles (of 2048 or 8192), alternating up and down in size; two
            // inputs in a row, so the second call finds the first one's values in every
            // slot it uses (many workgroups in flight at once, so look-backs reach slots
            // not yet published in this call).
            let n = [20_000usize, 7_000, (1 << 21) + 3, 4_100][round % 4];
            let checks: Vec<_> = (0..2)
                .map(|_| {
                    let x: Vec<u32> = (0..n).map(|_| r.gen()).collect();
                    let (xa, ya) = (upload(&arena, &x, "x"), poisoned(&arena, n, "y"));
                    (x, xa, ya)
                })
                .collect();
            let mut batch = kernels.batch();
            for _ in 0..999 {
                batch
                    .scan::<u32>(ScanKind::Inclusive, (&small_in, 5), (&small_out, 5))
                    .unwrap();
            }
            for (_, xa, ya) in &checks {
                batch
                    .scan::<u32>(ScanKind::Exclusive, (xa, n as u64), (ya, n as u64))
                    .unwrap();
            }
            batch.submit().unwrap();
            let subgroups = kernels.options().subgroups;
            for (x, _, ya) in &checks {
                assert_eq!(
                    read::<u32>(ya, n),
                    cpu_scan_u32(x, ScanKind::Exclusive),
                    "round {round}, n={n}, subgroups={subgroups}"
                );
            }
        }
        assert_eq!(
            read::<u32>(&small_out, small.len()),
            cpu_scan_u32(&small, ScanKind::Inclusive)
        );
    }
}

#[test]
fn transpose_matches_the_cpu_on_odd_shapes() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    // (2, 65535 * 32 + 33) has more than 65535 tiles.
    for (rows, cols) in [
        (1usize, 1usize),
        (1, 257),
        (257, 1),
        (33, 65),
        (255, 257),
        (1000, 3),
        (2, 65535 * 32 + 33),
    ] {
        let x = random_f32(&mut r, rows * cols);
        let xa = upload(&arena, &x, "x");
        let ya = poisoned(&arena, rows * cols, "y");
        let mut batch = kernels.batch();
        batch
            .transpose(
                rows as u64,
                (&xa, rows as u64 * cols as u64),
                (&ya, rows as u64 * cols as u64),
            )
            .unwrap();
        batch.submit().unwrap();
        let got = read::<f32>(&ya, rows * cols);
        let want = cpu_transpose(&x, rows, cols);
        if let Some(i) = (0..got.len()).find(|&i| got[i] != want[i]) {
            panic!(
                "{rows}x{cols}: y[{i}] (row {}, column {} of y) is {}, want {}",
                i / rows,
                i % rows,
                got[i],
                want[i]
            );
        }
    }
    let mut batch = kernels.batch();
    let xa = upload(&arena, &[0f32; 4], "x");
    assert!(
        batch.transpose(2, (&xa, 2 * 2), (&xa, 2 * 2)).is_err(),
        "in place is refused"
    );
    assert!(batch
        .transpose(3, (&xa, 3 * 2), (&upload(&arena, &[0f32; 6], "y"), 3 * 2))
        .is_err());
}

/// Every path: rows held in registers (cols a multiple of 4, 1 to 16 vec4 per invocation,
/// rows that fill their last vec4 group and rows that do not), and the two-sweep kernel
/// (other lengths, and rows too long to hold); subgroup and portable combines.
#[test]
fn softmax_rows_match_the_cpu() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    let shapes = [
        (1usize, 1usize),
        (3, 257),
        (100, 1000),
        (70_000, 3),
        (5, 4),
        // Short rows, several per workgroup (32, 64 and 128 invocations per row), with
        // row counts that leave the last workgroup part empty.
        (9, 64),
        (1001, 128),
        (13, 132),
        (7, 256),
        (3, 260),
        (11, 512),
        // Short rows of other lengths (scalar, four elements per invocation).
        (17, 3),
        (9, 77),
        (1001, 197),
        (5, 509),
        (33, 1024),
        (7, 1028),
        (4, 2048),
        (9, 3000),
        (3, 4096),
        (2, 8192),
        (2, 12_300),
        (2, 16_384),
        (2, 16_388),
        (1, 40_000),
        // Vocabulary-sized rows: a multiple of 4 (the long-row sweep) and odd (scalar).
        (3, 32_000),
        (2, 50_257),
    ];
    // Every other shape writes into another arena: x and y in different buffers, where x
    // is bound read-only.
    let other = Arena::new(gpu(), Default::default()).unwrap();
    for kernels in variants(&arena) {
        for (i, (rows, cols)) in shapes.into_iter().enumerate() {
            // Large logits: without the max subtracted, exp would overflow.
            let x: Vec<f32> = random_f32(&mut r, rows * cols)
                .iter()
                .map(|v| v * 100.0)
                .collect();
            let xa = upload(&arena, &x, "x");
            let out = if i % 2 == 0 { &arena } else { &other };
            let ya = poisoned(out, rows * cols, "y");
            let mut batch = kernels.batch();
            batch
                .softmax_rows(
                    rows as u64,
                    (&xa, rows as u64 * cols as u64),
                    (&ya, rows as u64 * cols as u64),
                )
                .unwrap();
            batch.submit().unwrap();
            let got = read::<f32>(&ya, rows * cols);
            let what = format!("softmax {rows}x{cols} ({kernels:?})");
            assert_close(&got, &cpu_softmax(&x, cols), 1e-5, &what);
        }
    }
}

/// A NaN anywhere in a row makes the whole row NaN, as in PyTorch; -inf entries get 0;
/// other rows are untouched by their neighbours' NaN.
#[test]
fn softmax_rows_propagate_nan_per_row() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    for kernels in variants(&arena) {
        for cols in [6usize, 64, 197, 400, 4096, 20_000, 20_001] {
            let mut r = rng();
            let mut x = random_f32(&mut r, 3 * cols);
            x[cols + cols / 2] = f32::NAN;
            x[2 * cols + 1] = f32::NEG_INFINITY;
            let xa = upload(&arena, &x, "x");
            let ya = poisoned(&arena, 3 * cols, "y");
            let mut batch = kernels.batch();
            batch
                .softmax_rows(3, (&xa, 3 * cols as u64), (&ya, 3 * cols as u64))
                .unwrap();
            batch.submit().unwrap();
            let got = read::<f32>(&ya, 3 * cols);
            let what = format!("softmax 3x{cols} ({kernels:?})");
            let mut want = cpu_softmax(&x[..cols], cols);
            want.extend(std::iter::repeat_n(f32::NAN, cols));
            let mut third = x[2 * cols..].to_vec();
            third[1] = -1e30; // exp underflows to 0 as exp(-inf) does
            want.extend(cpu_softmax(&third, cols));
            assert_eq!(got[2 * cols + 1], 0.0, "{what}: exp(-inf) is 0");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                if w.is_nan() {
                    assert!(g.is_nan(), "{what}: [{i}] = {g}, want NaN");
                } else {
                    assert!((g - w).abs() <= 1e-5, "{what}: [{i}] = {g}, want {w}");
                }
            }
        }
    }
}

/// Checks `c` against an f64 product of the (already rounded) inputs, relative to
/// sum_k |a||b| per element: the error bound of an f32 dot product.
fn check_matmul(got: &[f32], a: &[f32], b: &[f32], (m, n, k): (usize, usize, usize), what: &str) {
    for i in 0..m {
        for j in 0..n {
            let (want, mag) = cpu_matmul_element(a, b, (n, k), (i, j));
            let g = got[i * n + j] as f64;
            let err = (g - want).abs() / mag.max(1e-30);
            assert!(
                err < 1e-5,
                "{what}: c[{i}][{j}] is {g}, want {want} (error {err:e})"
            );
        }
    }
}

#[test]
fn matmul_matches_the_cpu_on_odd_shapes_f32_and_f16() {
    common::say("kernels_math: products of odd shapes in f32 and f16, each checked against the CPU; a minute on lavapipe");
    // Guards around every allocation catch a store past the end of `c`.
    let config = vramkit::ArenaConfig {
        guard_bytes: 256,
        ..Default::default()
    };
    let arena = Arena::new(gpu(), config.clone()).unwrap();
    // Outputs in the inputs' buffers (inputs bound writable), then in another arena's
    // (inputs bound read-only).
    let other = Arena::new(gpu(), config).unwrap();
    let mut r = rng();
    let matrix_units = variants(&arena)[0].options().matrix_units;
    assert_eq!(matrix_units, gpu().has_matrix_units());
    eprintln!("f16 matmul on matrix units: {matrix_units}");
    for (kernels, out) in variants(&arena)
        .into_iter()
        .flat_map(|k| [(k.clone(), &arena), (k, &other)])
    {
        for (m, n, k) in [
            (1usize, 1usize, 1usize),
            (1, 257, 3),
            (129, 127, 255),
            (256, 256, 64),
            (131, 67, 1000),
            // k and n multiples of 4 (matmul_vec4.wgsl): edges in m, n and k (steps of
            // 16 along k), one row, one column group.
            (1, 4, 4),
            (130, 132, 20),
            (200, 388, 44),
            (3, 200, 8),
            (4, 8, 1028),
            // Tall and skinny, short and wide, and k = 1: on the portable kernel (n = 1,
            // k = 9; k = 1), then on the four-element one.
            (1000, 1, 9),
            (520, 3, 1),
            (96, 1024, 1),
            (1024, 4, 4),
            (2, 1500, 8),
            // m and n multiples of 16, k of 8: f16 runs on the matrix units where the
            // device has them (matmul_coop.wgsl, 128 x 128 tiles, steps of 32 along k):
            // one fragment, edges in all three, two exact tiles, two tiles each way
            // with a tail of 8 along k.
            (16, 16, 8),
            (48, 272, 40),
            (128, 256, 64),
            (144, 528, 1032),
            // Whole tiles (the unguarded variant): two by four, three steps along k; one.
            (256, 512, 96),
            (256, 128, 96),
            // Edges in all three, in a narrow output.
            (272, 112, 40),
            // Tall and skinny on the matrix units, and short and wide.
            (2048, 16, 64),
            (16, 2048, 64),
            // The tiles' order (`tile_at`): 3 x 5 tiles with edges, and 9 x 2 tiles (groups
            // of 8 tile rows, then a group of 1). A workgroup walks several tiles only past
            // the grid's limit (65 535 tiles); the lab checks that walk on the H200
            // (`LAB_TILES_PER_GROUP=2`).
            (272, 528, 40),
            (1152, 256, 64),
        ] {
            let a = random_f32(&mut r, m * k);
            let b = random_f32(&mut r, k * n);
            let (aa, ba) = (upload(&arena, &a, "a"), upload(&arena, &b, "b"));
            let (ah, bh) = (cpu_to_f16_bits(&a), cpu_to_f16_bits(&b));
            let (aha, bha) = (upload(&arena, &ah, "a f16"), upload(&arena, &bh, "b f16"));
            let (c32, c16) = (
                poisoned(out, m * n, "c"),
                poisoned(out, m * n, "c from f16"),
            );
            let mut batch = kernels.batch();
            batch
                .matmul::<f32>(
                    MatmulShape {
                        m: m as u64,
                        k: k as u64,
                        n: n as u64,
                    },
                    &aa,
                    &ba,
                    &c32,
                )
                .unwrap();
            batch
                .matmul::<half::f16>(
                    MatmulShape {
                        m: m as u64,
                        k: k as u64,
                        n: n as u64,
                    },
                    &aha,
                    &bha,
                    &c16,
                )
                .unwrap();
            batch.submit().unwrap();
            let own = if std::ptr::eq(out, &arena) {
                "same arena"
            } else {
                "other arena"
            };
            let what = format!("{m}x{n}x{k} {:?}, c in the {own}", kernels.options());
            check_matmul(
                &read::<f32>(&c32, m * n),
                &a,
                &b,
                (m, n, k),
                &format!("f32 {what}"),
            );
            // The f16 product is exact in f32 terms of the rounded inputs.
            check_matmul(
                &read::<f32>(&c16, m * n),
                &cpu_from_f16_bits(&ah),
                &cpu_from_f16_bits(&bh),
                (m, n, k),
                &format!("f16 {what}"),
            );
        }
    }
    for a in [&arena, &other] {
        let violations = a.check_guards().unwrap();
        assert!(
            violations.is_empty(),
            "stores past an allocation: {violations:?}"
        );
    }
}

#[test]
fn split_products_match_the_cpu_and_the_unsplit_product() {
    common::say("kernels_math: products split along k against the CPU and the unsplit product");
    // Few tiles and a long k run split along k, f32 on the four-element kernel and f16 on
    // the matrix units where the device has them (else on the four-element kernel too):
    // 8, 3 and 2 parts of 512 (whole tiles; one narrow tile; two tiles with edges in m and
    // n). Both against the CPU, and against the same kernels with split-k off.
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let split = Kernels::new(&arena).unwrap();
    let unsplit = Kernels::with_options(
        &arena,
        KernelOptions {
            split_k: false,
            ..Default::default()
        },
    )
    .unwrap();
    assert!(split.options().split_k && !unsplit.options().split_k);
    let mut r = rng();
    for (m, n, k) in [
        (128usize, 128usize, 4096usize),
        (128, 16, 1536),
        (144, 48, 1024),
    ] {
        let a = random_f32(&mut r, m * k);
        let b = random_f32(&mut r, k * n);
        let (ah, bh) = (cpu_to_f16_bits(&a), cpu_to_f16_bits(&b));
        let shape = MatmulShape {
            m: m as u64,
            k: k as u64,
            n: n as u64,
        };
        let inputs = [
            (
                MatmulInput::F32,
                upload(&arena, &a, "a"),
                upload(&arena, &b, "b"),
                a.clone(),
                b.clone(),
            ),
            (
                MatmulInput::F16,
                upload(&arena, &ah, "a f16"),
                upload(&arena, &bh, "b f16"),
                cpu_from_f16_bits(&ah),
                cpu_from_f16_bits(&bh),
            ),
        ];
        for (input, ga, gb, wa, wb) in &inputs {
            let before = arena.stats().allocated;
            let outputs = [&split, &unsplit].map(|kernels| {
                let c = poisoned(&arena, m * n, "c");
                let mut batch = kernels.batch();
                bmm_as(
                    &mut batch,
                    *input,
                    shape,
                    MatmulBatch::packed(1, shape),
                    ga,
                    gb,
                    &c,
                )
                .unwrap();
                batch.submit().unwrap();
                read::<f32>(&c, m * n)
            });
            let what = format!("{input:?} {m}x{n}x{k}");
            check_matmul(&outputs[0], wa, wb, (m, n, k), &format!("split {what}"));
            check_matmul(&outputs[1], wa, wb, (m, n, k), &format!("unsplit {what}"));
            // The parts' sums in another order: equal within f32 summation's bound.
            for (i, (x, y)) in outputs[0].iter().zip(&outputs[1]).enumerate() {
                let (_, mag) = cpu_matmul_element(wa, wb, (n, k), (i / n, i % n));
                assert!(
                    ((x - y).abs() as f64) <= 2e-5 * mag,
                    "{what}: c[{i}] split {x}, unsplit {y}"
                );
            }
            // The first split product took the partial sums' 16 MiB from the arena.
            if before < 16 << 20 {
                assert!(
                    arena.stats().allocated >= before + (16 << 20),
                    "{what}: no partial sums in the arena: was it split?"
                );
            }
        }
    }
}

#[test]
fn bmm_matches_the_cpu_per_product_with_packed_shared_and_padded_strides() {
    common::say(
        "kernels_math: batched products with packed, shared and padded strides against the CPU",
    );
    let config = vramkit::ArenaConfig {
        guard_bytes: 256,
        ..Default::default()
    };
    let arena = Arena::new(gpu(), config).unwrap();
    let mut r = rng();
    for kernels in variants(&arena) {
        // (count, m, n, k, pad between products, b shared by every product)
        for (count, m, n, k, pad, shared_b) in [
            (1usize, 5usize, 7usize, 3usize, 0usize, false),
            (3, 1, 9, 1, 0, false),
            (3, 9, 1, 5, 0, true),
            // Attention-like: heads side by side, each (m x k) by (k x n).
            (4, 64, 64, 16, 0, false),
            (4, 32, 48, 16, 8, false),
            // Multiples of 16 and 8 with strides the matrix units take (pad of 16), and
            // a pad of 3 that sends the batch to the portable kernel.
            (3, 48, 32, 24, 16, false),
            (2, 48, 32, 24, 3, false),
            (5, 20, 24, 12, 0, true),
            // Attention's narrow products (n = 128: one column of the matrix units' tiles).
            (2, 256, 128, 32, 16, false),
            // 15 tiles per product, 45 in all: the matrix units' workgroups walk on from
            // one product into the next.
            (3, 272, 528, 40, 16, false),
        ] {
            let shape = MatmulShape {
                m: m as u64,
                k: k as u64,
                n: n as u64,
            };
            let (sa, sb, sc) = (
                m * k + pad,
                if shared_b { 0 } else { k * n + pad },
                m * n + pad,
            );
            let batch = vramkit::kernels::MatmulBatch {
                count: count as u64,
                stride_a: sa as u64,
                stride_b: sb as u64,
                stride_c: sc as u64,
            };
            let (la, lb, lc) = (
                (count - 1) * sa + m * k,
                (count - 1) * sb + k * n,
                (count - 1) * sc + m * n,
            );
            let a = random_f32(&mut r, la);
            let b = random_f32(&mut r, lb);
            let (ah, bh) = (cpu_to_f16_bits(&a), cpu_to_f16_bits(&b));
            let (aa, ba) = (upload(&arena, &a, "a"), upload(&arena, &b, "b"));
            let (aha, bha) = (upload(&arena, &ah, "a f16"), upload(&arena, &bh, "b f16"));
            let (c32, c16) = (
                poisoned(&arena, lc, "c"),
                poisoned(&arena, lc, "c from f16"),
            );
            let mut recorded = kernels.batch();
            recorded.bmm::<f32>(shape, batch, &aa, &ba, &c32).unwrap();
            recorded
                .bmm::<half::f16>(shape, batch, &aha, &bha, &c16)
                .unwrap();
            recorded.submit().unwrap();
            let (a16, b16) = (cpu_from_f16_bits(&ah), cpu_from_f16_bits(&bh));
            let (g32, g16) = (read::<f32>(&c32, lc), read::<f32>(&c16, lc));
            let what = format!(
                "{count} x {m}x{n}x{k} pad {pad} shared b {shared_b} {:?}",
                kernels.options()
            );
            for z in 0..count {
                let (oa, ob, oc) = (z * sa, z * sb, z * sc);
                check_matmul(
                    &g32[oc..oc + m * n],
                    &a[oa..oa + m * k],
                    &b[ob..ob + k * n],
                    (m, n, k),
                    &format!("f32 [{z}] {what}"),
                );
                check_matmul(
                    &g16[oc..oc + m * n],
                    &a16[oa..oa + m * k],
                    &b16[ob..ob + k * n],
                    (m, n, k),
                    &format!("f16 [{z}] {what}"),
                );
                // The padding between outputs is never written.
                if z + 1 < count {
                    assert!(
                        g32[oc + m * n..oc + sc].iter().all(|v| v.is_nan()),
                        "{what}: padding written"
                    );
                }
            }
        }
    }
    // Bad batches: outputs that overlap, an operand too short for the last product, none.
    let shape = MatmulShape { m: 4, k: 4, n: 4 };
    let (a, b, c) = (
        upload(&arena, &[0.0f32; 64], "a"),
        upload(&arena, &[0.0f32; 64], "b"),
        poisoned(&arena, 64, "c"),
    );
    let kernels = &variants(&arena)[0];
    let mut recorded = kernels.batch();
    let overlapping = vramkit::kernels::MatmulBatch {
        stride_c: 8,
        ..vramkit::kernels::MatmulBatch::packed(4, shape)
    };
    assert!(recorded.bmm::<f32>(shape, overlapping, &a, &b, &c).is_err());
    let too_many = vramkit::kernels::MatmulBatch::packed(5, shape);
    assert!(recorded.bmm::<f32>(shape, too_many, &a, &b, &c).is_err());
    let none = vramkit::kernels::MatmulBatch::packed(0, shape);
    assert!(recorded.bmm::<f32>(shape, none, &a, &b, &c).is_err());
    assert!(arena.check_guards().unwrap().is_empty());
}

#[test]
fn f16_output_products_round_the_f32_sum_once_and_leave_the_gaps_between_products() {
    common::say("kernels_math: f16-output products against the CPU, gaps kept");
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    for kernels in variants(&arena) {
        // (count, m, n, k, pad between outputs): the matrix units' whole tiles, guarded
        // tiles, a padded batch, a long k (split where f32 output is), and shapes only
        // the portable kernels take (the f32-scratch path).
        for (count, m, n, k, pad) in [
            (1usize, 128usize, 128usize, 64usize, 0usize),
            (1, 48, 80, 40, 0),
            (3, 32, 48, 24, 16),
            (1, 128, 128, 2048, 0),
            (2, 7, 9, 5, 3),
            (1, 33, 17, 11, 0),
        ] {
            let shape = MatmulShape::new(m, k, n);
            let layout = MatmulBatch {
                stride_c: (m * n + pad) as u64,
                ..MatmulBatch::packed(count as u64, shape)
            };
            let a16 = cpu_to_f16_bits(&random_f32(&mut r, count * m * k));
            let b16 = cpu_to_f16_bits(&random_f32(&mut r, count * k * n));
            let (a32, b32) = (cpu_from_f16_bits(&a16), cpu_from_f16_bits(&b16));
            let reach = (count - 1) * (m * n + pad) + m * n;
            // c starts as random halves: the gaps must come back bit for bit (no NaNs).
            let before: Vec<u16> = (0..reach)
                .map(|_| half::f16::from_f32(r.gen_range(-4.0..4.0)).to_bits())
                .collect();
            let (a, b) = (upload(&arena, &a16, "a"), upload(&arena, &b16, "b"));
            let c = upload(&arena, &before, "c");
            let mut batch = kernels.batch();
            batch
                .bmm_f16_out(
                    shape,
                    layout,
                    (&a, (count * m * k) as u64),
                    (&b, (count * k * n) as u64),
                    (&c, reach as u64),
                )
                .unwrap();
            batch.submit().unwrap();
            // Whole words: the readback moves 4-byte aligned ranges.
            let got = read::<u16>(&c, reach.next_multiple_of(2));
            let what = format!("{count} x {m}x{n}x{k} pad {pad}");
            for z in 0..count {
                let (az, bz) = (&a32[z * m * k..][..m * k], &b32[z * k * n..][..k * n]);
                for i in 0..m {
                    for j in 0..n {
                        let at = z * (m * n + pad) + i * n + j;
                        let (exact, scale) = cpu_matmul_element(az, bz, (n, k), (i, j));
                        let v = half::f16::from_bits(got[at]).to_f64();
                        // One rounding to f16 (half an ulp: 2^-11 of the value, or of the
                        // smallest normal) on top of f32 accumulation.
                        let bound = exact.abs().max(6.1e-5) * 2f64.powi(-11) + 1e-5 * scale;
                        assert!(
                            (v - exact).abs() <= bound,
                            "{what}: c[{z}][{i}][{j}] = {v}, exact {exact}"
                        );
                    }
                }
                if z + 1 < count {
                    for g in 0..pad {
                        let at = z * (m * n + pad) + m * n + g;
                        assert_eq!(
                            got[at], before[at],
                            "{what}: gap element {g} after product {z}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn matmul_rejects_bad_shapes_and_overlap() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let a = arena.alloc(4 * 6, "a").unwrap();
    let b = arena.alloc(4 * 6, "b").unwrap();
    let c = arena.alloc(4 * 4, "c").unwrap();
    let mut batch = kernels.batch();
    let err = batch
        .matmul::<f32>(MatmulShape { m: 2, k: 4, n: 2 }, &a, &b, &c)
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("'a'"), "{err}");
    assert!(batch
        .matmul::<f32>(MatmulShape { m: 0, k: 3, n: 2 }, &a, &b, &c,)
        .is_err());
    assert!(
        batch
            .matmul::<f32>(MatmulShape { m: 2, k: 3, n: 2 }, &a, &b, &a,)
            .is_err(),
        "c overlaps a"
    );
    assert!(batch.is_empty());
    batch
        .matmul::<f32>(MatmulShape { m: 2, k: 3, n: 2 }, &a, &b, &c)
        .unwrap();
}

#[test]
fn f16_casts_round_trip_and_match_the_half_crate() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    for kernels in variants(&arena) {
        // Below, at and past multiples of eight (the bulk runs eight per invocation), and
        // past 65535 workgroups of them.
        for n in [
            1usize,
            2,
            3,
            8,
            9,
            15,
            16,
            255,
            257,
            4096,
            7919,
            65536 * 8 * 4 + 5,
        ] {
            let x: Vec<f32> = random_f32(&mut r, n).iter().map(|v| v * 1000.0).collect();
            let xa = upload(&arena, &x, "x");
            // Poison the f16 side with a pattern: an odd n must keep the last word's
            // upper half as it was.
            let sentinel = 0x7e00u16; // an f16 NaN
            let h = upload(&arena, &vec![sentinel; n.next_multiple_of(2)], "h");
            let back = poisoned(&arena, n, "back");
            let mut batch = kernels.batch();
            batch
                .to_f16((&xa, n as u64), (&h, n as u64))
                .unwrap()
                .to_f32((&h, n as u64), (&back, n as u64))
                .unwrap();
            batch.submit().unwrap();
            let got = read::<u16>(&h, n.next_multiple_of(2));
            let want = cpu_to_f16_bits(&x);
            for i in 0..n {
                // Round to nearest: allow the neighbour when the value sits on a tie.
                let diff = (got[i] as i32 - want[i] as i32).abs();
                assert!(
                    diff <= 1,
                    "{:?} n={n}: f16 of {} is {:#06x}, want {:#06x}",
                    kernels.options(),
                    x[i],
                    got[i],
                    want[i]
                );
            }
            if n % 2 == 1 {
                assert_eq!(got[n], sentinel, "the unused half of the last word is kept");
            }
            let widened: Vec<f32> = got[..n]
                .iter()
                .map(|&v| half::f16::from_bits(v).to_f32())
                .collect();
            assert_eq!(read::<f32>(&back, n), widened, "to_f32 is exact");
        }
    }
}

/// The f16-input product against an f64 product of the f32 values before rounding, at
/// each k: within the bound `matmul.rs` states, `(2^-10 + 2^-21) + k 2^-24 / (1 - k 2^-24)`
/// times `sum_k |a| |b|` (rounding both inputs to f16, then f32 accumulation in any order;
/// the products of two f16 values are exact in f32). Prints the largest error seen.
#[test]
fn the_f16_product_stays_within_its_stated_error_bound_at_each_k() {
    common::say("kernels_math: the f16 product's error bound at each k");
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    let (m, n) = (32usize, 32usize);
    for k in [8usize, 64, 512, 4096] {
        let a = random_f32(&mut r, m * k);
        let b = random_f32(&mut r, k * n);
        let (aa, ba) = (
            upload(&arena, &cpu_to_f16_bits(&a), "a"),
            upload(&arena, &cpu_to_f16_bits(&b), "b"),
        );
        let c = poisoned(&arena, m * n, "c");
        let mut batch = kernels.batch();
        let shape = MatmulShape {
            m: m as u64,
            k: k as u64,
            n: n as u64,
        };
        batch.matmul::<half::f16>(shape, &aa, &ba, &c).unwrap();
        batch.submit().unwrap();
        let got = read::<f32>(&c, m * n);
        let u32_ = 2f64.powi(-24);
        let gamma = k as f64 * u32_ / (1.0 - k as f64 * u32_);
        let bound = 2f64.powi(-10) + 2f64.powi(-21) + gamma * (1.0 + 2f64.powi(-10));
        let mut worst = 0f64;
        for i in 0..m {
            for j in 0..n {
                let (want, mag) = cpu_matmul_element(&a, &b, (n, k), (i, j));
                let err = (got[i * n + j] as f64 - want).abs() / mag;
                worst = worst.max(err);
            }
        }
        eprintln!(
            "f16 product, k = {k}: largest error {worst:.2e} of sum|a||b| (bound {bound:.2e}, matrix units: {})",
            gpu().has_matrix_units()
        );
        assert!(
            worst <= bound,
            "k = {k}: error {worst:e} over the bound {bound:e}"
        );
    }
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
    /// Any shape and batch layout (odd sizes, one row or column, k = 1, tall and skinny,
    /// padded or shared operands): every product matches the CPU, f32 and f16, on the
    /// fastest kernels the device has (they fall back where a shape or stride needs it).
    #[test]
    fn any_shape_and_batch_layout_matches_the_cpu(
        m in 1usize..=140,
        n in 1usize..=140,
        k in 1usize..=70,
        count in 1usize..=3,
        pad in proptest::sample::select(vec![0usize, 1, 4, 8, 16]),
        shared_b: bool,
        seed: u64,
    ) {
        use rand::SeedableRng;
        let arena = Arena::new(gpu(), Default::default()).unwrap();
        let kernels = Kernels::new(&arena).unwrap();
        let mut r = rand::rngs::SmallRng::seed_from_u64(seed);
        let (sa, sb, sc) = (m * k + pad, if shared_b { 0 } else { k * n + pad }, m * n + pad);
        let (la, lb, lc) = ((count - 1) * sa + m * k, (count - 1) * sb + k * n, (count - 1) * sc + m * n);
        let a: Vec<f32> = (0..la).map(|_| r.gen_range(-1.0..1.0)).collect();
        let b: Vec<f32> = (0..lb).map(|_| r.gen_range(-1.0..1.0)).collect();
        let shape = MatmulShape { m: m as u64, k: k as u64, n: n as u64 };
        let layout = vramkit::kernels::MatmulBatch {
            count: count as u64,
            stride_a: sa as u64,
            stride_b: sb as u64,
            stride_c: sc as u64,
        };
        let (ah, bh) = (cpu_to_f16_bits(&a), cpu_to_f16_bits(&b));
        let (aa, ba, aha, bha) = (upload(&arena, &a, "a"), upload(&arena, &b, "b"), upload(&arena, &ah, "a16"), upload(&arena, &bh, "b16"));
        let (c32, c16) = (poisoned(&arena, lc, "c"), poisoned(&arena, lc, "c16"));
        let mut batch = kernels.batch();
        batch.bmm::<f32>(shape, layout, &aa, &ba, &c32).unwrap();
        batch.bmm::<half::f16>(shape, layout, &aha, &bha, &c16).unwrap();
        batch.submit().unwrap();
        let (a16, b16) = (cpu_from_f16_bits(&ah), cpu_from_f16_bits(&bh));
        let (g32, g16) = (read::<f32>(&c32, lc), read::<f32>(&c16, lc));
        for z in 0..count {
            let (oa, ob, oc) = (z * sa, z * sb, z * sc);
            let what = format!("[{z}] {count} x {m}x{n}x{k}, pad {pad}, shared b {shared_b}");
            check_matmul(&g32[oc..oc + m * n], &a[oa..oa + m * k], &b[ob..ob + k * n], (m, n, k), &format!("f32 {what}"));
            check_matmul(&g16[oc..oc + m * n], &a16[oa..oa + m * k], &b16[ob..ob + k * n], (m, n, k), &format!("f16 {what}"));
        }
    }
}
