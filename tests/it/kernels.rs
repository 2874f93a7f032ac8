//! Kernels on arena allocations, checked against CPU references on random inputs at awkward
//! sizes, including more than 65535 workgroups.

use crate::common;

use common::{assert_close, gpu, random_f32, rng};
use vramkit::kernels::{KernelOptions, Kernels};
use vramkit::{readback, Arena};

fn upload(arena: &Arena, data: &[f32], label: &str) -> vramkit::arena::Typed<f32> {
    let a = arena.alloc_typed::<f32>(data.len(), label).unwrap();
    arena
        .gpu()
        .queue()
        .write_buffer(a.buffer(), a.offset(), bytemuck::cast_slice(data));
    a
}

#[test]
fn axpy_and_axpby_match_the_cpu_at_awkward_sizes() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    // 65535 * 256 + 257 elements needs a second grid row.
    for n in [1usize, 255, 256, 257, 7919, 65535 * 256 + 257] {
        let (x, y) = (random_f32(&mut r, n), random_f32(&mut r, n));
        let (alpha, beta) = (r_f32(&mut r), r_f32(&mut r));
        let (xa, ya, za) = (
            upload(&arena, &x, "x"),
            upload(&arena, &y, "y"),
            upload(&arena, &y, "z"),
        );
        let mut batch = kernels.batch();
        batch.axpy(alpha, (&xa, n as u64), (&ya, n as u64)).unwrap();
        batch
            .axpby(alpha, (&xa, n as u64), beta, (&za, n as u64))
            .unwrap();
        assert_eq!(batch.len(), 2);
        batch.submit().unwrap();
        let got_y = readback::read_as::<f32>(gpu(), ya.buffer(), ya.offset(), n).unwrap();
        let got_z = readback::read_as::<f32>(gpu(), za.buffer(), za.offset(), n).unwrap();
        let want_y: Vec<f32> = x.iter().zip(&y).map(|(a, b)| alpha * a + b).collect();
        let want_z: Vec<f32> = x
            .iter()
            .zip(&y)
            .map(|(a, b)| alpha * a + beta * b)
            .collect();
        assert_close(&got_y, &want_y, 1e-5, &format!("axpy n={n}"));
        assert_close(&got_z, &want_z, 1e-5, &format!("axpby n={n}"));
    }
}

/// A batch submitted with `submit_timed` runs as `submit` does (its results checked against
/// the CPU) and reports the GPU's time for it: from timestamps where the adapter has them
/// inside encoders, and no longer than the host waited for it.
#[test]
fn a_timed_batch_computes_and_reports_its_gpu_time() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    let n = 1 << 20;
    let (x, y) = (random_f32(&mut r, n), random_f32(&mut r, n));
    let alpha = r_f32(&mut r);
    let (xa, ya) = (upload(&arena, &x, "x"), upload(&arena, &y, "y"));
    let reps = 4;
    let mut batch = kernels.batch();
    for _ in 0..reps {
        batch.axpy(alpha, (&xa, n as u64), (&ya, n as u64)).unwrap();
    }
    let t = batch.submit_timed().unwrap();
    let got = readback::read_as::<f32>(gpu(), ya.buffer(), ya.offset(), n).unwrap();
    let want: Vec<f32> = x
        .iter()
        .zip(&y)
        .map(|(a, b)| (0..reps).fold(*b, |acc, _| alpha * a + acc))
        .collect();
    assert_close(&got, &want, 1e-4, "timed axpy");
    assert_eq!(t.source, common::expected_timing_source());
    assert!(t.seconds > 0.0 && t.seconds.is_finite(), "{t:?}");
    // The GPU ran the batch between the submit and the end of the wait (the margin is for
    // two clocks that tick apart).
    assert!(t.seconds <= t.wall_seconds * 1.05 + 1e-4, "{t:?}");
}

fn r_f32(r: &mut rand::rngs::SmallRng) -> f32 {
    random_f32(r, 1)[0] * 3.0
}

#[test]
fn a_kernel_touches_only_its_range() {
    // Three neighbours in one block: the kernel on the middle one must leave the others.
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    let n = 1000;
    let before = upload(&arena, &random_f32(&mut r, n), "before");
    let (x, y) = (random_f32(&mut r, n), random_f32(&mut r, n));
    let (xa, ya) = (upload(&arena, &x, "x"), upload(&arena, &y, "y"));
    let after_data = random_f32(&mut r, n);
    let after = upload(&arena, &after_data, "after");
    let mut batch = kernels.batch();
    batch
        .axpy(2.0, (&xa, n as u64 - 1), (&ya, n as u64 - 1))
        .unwrap();
    batch.submit().unwrap();
    let got = readback::read_as::<f32>(gpu(), ya.buffer(), ya.offset(), n).unwrap();
    let mut want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 2.0 * a + b).collect();
    want[n - 1] = y[n - 1]; // outside the n - 1 elements asked for
    assert_close(&got, &want, 1e-6, "axpy n-1");
    let got_after = readback::read_as::<f32>(gpu(), after.buffer(), after.offset(), n).unwrap();
    assert_eq!(got_after, after_data);
    drop(before);
}

#[test]
fn rejects_a_range_too_small_for_n() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let x = arena.alloc_typed::<f32>(10, "x").unwrap();
    let y = arena.alloc_typed::<f32>(5, "short y").unwrap();
    let mut batch = kernels.batch();
    let err = batch
        .axpy(1.0, (&x, 10), (&y, 10))
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("short y") && err.contains("10 whole"), "{err}");
}

#[test]
fn copy_and_fill_write_every_element_including_within_one_block() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    for n in [1usize, 257, 65535 * 256 + 3] {
        let x = random_f32(&mut r, n);
        let xa = upload(&arena, &x, "x");
        // Poison the outputs so an unwritten element fails.
        let copy = upload(&arena, &vec![f32::NAN; n], "copy");
        let filled = upload(&arena, &vec![f32::NAN; n], "filled");
        assert!(
            xa.buffer() == copy.buffer() || n > 1 << 20,
            "small ranges share a block"
        );
        let value = random_f32(&mut r, 1)[0];
        let mut batch = kernels.batch();
        batch
            .copy((&xa, n as u64), (&copy, n as u64))
            .unwrap()
            .fill(value, (&filled, n as u64))
            .unwrap();
        batch.submit().unwrap();
        assert_eq!(
            readback::read_as::<f32>(gpu(), copy.buffer(), copy.offset(), n).unwrap(),
            x,
            "copy n={n}"
        );
        let got = readback::read_as::<f32>(gpu(), filled.buffer(), filled.offset(), n).unwrap();
        assert!(got.iter().all(|&v| v == value), "fill n={n}");
    }
}

#[test]
fn dependent_kernels_in_one_batch_run_in_order() {
    // axpy writes y, then copy reads y: the second must see the first's result.
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    for n in [3usize, 1000, 4097] {
        let (x, y) = (random_f32(&mut r, n), random_f32(&mut r, n));
        let (xa, ya) = (upload(&arena, &x, "x"), upload(&arena, &y, "y"));
        let out = upload(&arena, &vec![f32::NAN; n], "out");
        let mut batch = kernels.batch();
        batch
            .axpy(3.0, (&xa, n as u64), (&ya, n as u64))
            .unwrap()
            .copy((&ya, n as u64), (&out, n as u64))
            .unwrap();
        batch.submit().unwrap();
        let got = readback::read_as::<f32>(gpu(), out.buffer(), out.offset(), n).unwrap();
        let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 3.0 * a + b).collect();
        assert_close(&got, &want, 1e-6, &format!("axpy then copy, n={n}"));
    }
}

#[test]
fn long_batches_span_several_parameter_chunks() {
    // 150 dependent axpy calls in one batch (each a vec4 body and a scalar tail, so two
    // parameter slots each): the result is y + 150 * x only if every call saw its own
    // parameters and ran in order.
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    let n = 1001;
    let (x, y) = (random_f32(&mut r, n), random_f32(&mut r, n));
    let (xa, ya) = (upload(&arena, &x, "x"), upload(&arena, &y, "y"));
    let mut batch = kernels.batch();
    for _ in 0..150 {
        batch.axpy(1.0, (&xa, n as u64), (&ya, n as u64)).unwrap();
    }
    batch.submit().unwrap();
    let got = readback::read_as::<f32>(gpu(), ya.buffer(), ya.offset(), n).unwrap();
    let want: Vec<f32> = x
        .iter()
        .zip(&y)
        .map(|(a, b)| (0..150).fold(*b, |acc, _| a + acc))
        .collect();
    assert_close(&got, &want, 1e-5, "150 chained axpy");
}

/// The kernels with every optional feature the adapter has, then the portable ones; the
/// first must really use subgroups where the adapter has them.
fn variants(arena: &Arena) -> [Kernels; 2] {
    let full = Kernels::new(arena).unwrap();
    assert_eq!(
        full.options().subgroups,
        gpu().has(wgpu::Features::SUBGROUP)
    );
    let portable = Kernels::with_options(arena, KernelOptions::portable()).unwrap();
    assert!(!portable.options().subgroups);
    [full, portable]
}

/// f32 sums are checked against an f64 reference relative to the sum of magnitudes (the
/// condition of the sum); max and min must be exact.
fn assert_reduced(op: vramkit::kernels::Reduce, got: f32, x: &[f32], what: &str) {
    use vramkit::kernels::Reduce;
    let want = common::reference::cpu_reduce(op, x);
    match op {
        Reduce::Max | Reduce::Min => assert_eq!(got as f64, want, "{what}"),
        Reduce::Sum | Reduce::Mean => {
            let mut scale: f64 = x.iter().map(|&v| (v as f64).abs()).sum();
            if op == Reduce::Mean {
                scale /= x.len() as f64;
            }
            let err = (got as f64 - want).abs() / scale.max(f64::MIN_POSITIVE);
            assert!(
                err < 1e-5,
                "{what}: got {got}, want {want} (error {err:e} of the magnitude sum)"
            );
        }
    }
}

#[test]
fn whole_array_reductions_match_the_cpu() {
    use vramkit::kernels::Reduce;
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    for kernels in variants(&arena) {
        for n in [
            1usize,
            255,
            256,
            257,
            8191,
            8192,
            8193,
            100_003,
            65535 * 256 + 257,
        ] {
            let x = random_f32(&mut r, n);
            let xa = upload(&arena, &x, "x");
            let outs: Vec<_> = (0..4).map(|_| upload(&arena, &[f32::NAN], "out")).collect();
            let ops = [Reduce::Sum, Reduce::Max, Reduce::Min, Reduce::Mean];
            let mut batch = kernels.batch();
            for (op, out) in ops.iter().zip(&outs) {
                batch.reduce(*op, (&xa, n as u64), (out, 1)).unwrap();
            }
            batch.submit().unwrap();
            for (op, out) in ops.iter().zip(&outs) {
                let got =
                    readback::read_as::<f32>(gpu(), out.buffer(), out.offset(), 1).unwrap()[0];
                assert_reduced(
                    *op,
                    got,
                    &x,
                    &format!("{op:?} n={n} {:?}", kernels.options()),
                );
            }
        }
    }
}

/// A whole-array reduction is one dispatch whose partials live in state the kernels keep
/// from call to call: calls with more segments, then fewer, then more again, in one batch,
/// in consecutive batches and in batches from two threads at once (with a clone of the
/// kernels, which shares the state), must each see only their own partials.
#[test]
fn whole_array_reductions_leave_no_state_for_the_next() {
    use vramkit::kernels::Reduce;
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    // 512 segments of 16384 floats, plus a tail.
    let x = random_f32(&mut r, 8192 * 1024 + 3);
    let xa = upload(&arena, &x, "x");
    // Segments: 512 (+ tail), 2 (+ tail), 467, one workgroup, 512, 5 (+ tail), 2 (+ tail),
    // one workgroup.
    let ns = [
        x.len(),
        16_385,
        8192 * 700,
        8193,
        8192 * 1024,
        40_003,
        16_387,
        8192,
    ];
    let ops = [Reduce::Sum, Reduce::Max, Reduce::Mean, Reduce::Min];
    let calls: Vec<(usize, Reduce)> = ns
        .iter()
        .enumerate()
        .map(|(i, &n)| (n, ops[i % ops.len()]))
        .collect();
    let check = |outs: &[vramkit::arena::Typed<f32>], how: &str, kernels: &Kernels| {
        for ((n, op), out) in calls.iter().zip(outs) {
            let got = readback::read_as::<f32>(gpu(), out.buffer(), out.offset(), 1).unwrap()[0];
            let what = format!("{op:?} of {n} ({how}, {:?})", kernels.options());
            assert_reduced(*op, got, &x[..*n], &what);
        }
    };
    let new_outs = || -> Vec<_> {
        calls
            .iter()
            .map(|_| upload(&arena, &[f32::NAN], "out"))
            .collect()
    };
    for kernels in variants(&arena) {
        for round in 0..2 {
            let outs = new_outs();
            let mut batch = kernels.batch();
            for ((n, op), out) in calls.iter().zip(&outs) {
                batch.reduce(*op, (&xa, *n as u64), (out, 1)).unwrap();
            }
            batch.submit().unwrap();
            check(&outs, &format!("one batch, round {round}"), &kernels);

            let outs = new_outs();
            for ((n, op), out) in calls.iter().zip(&outs) {
                let mut batch = kernels.batch();
                batch.reduce(*op, (&xa, *n as u64), (out, 1)).unwrap();
                batch.submit().unwrap();
            }
            check(&outs, &format!("a batch each, round {round}"), &kernels);
        }
        let (outs_a, outs_b) = (new_outs(), new_outs());
        let clone = kernels.clone();
        std::thread::scope(|s| {
            for (k, outs) in [(&kernels, &outs_a), (&clone, &outs_b)] {
                let (calls, xa) = (&calls, &xa);
                s.spawn(move || {
                    for _ in 0..3 {
                        for ((n, op), out) in calls.iter().zip(outs) {
                            let mut batch = k.batch();
                            batch.reduce(*op, (xa, *n as u64), (out, 1)).unwrap();
                            batch.submit().unwrap();
                        }
                    }
                });
            }
        });
        check(&outs_a, "two threads, first", &kernels);
        check(&outs_b, "two threads, second", &kernels);
    }
}

/// NaN propagates through max, min, sum and mean (as in PyTorch), wherever it sits: in a
/// vec4 body lane, the scalar tail, another workgroup's segment; and max of all -inf is
/// -inf (the identity is not -FLT_MAX).
#[test]
fn reductions_propagate_nan_and_keep_infinities() {
    use rand::Rng;
    use vramkit::kernels::Reduce;
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    let ops = [Reduce::Sum, Reduce::Max, Reduce::Min, Reduce::Mean];
    for kernels in variants(&arena) {
        for n in [1usize, 3, 7, 256, 1027, 100_003] {
            let mut x = random_f32(&mut r, n);
            let at = r.gen_range(0..n);
            x[at] = f32::NAN;
            let xa = upload(&arena, &x, "x");
            let outs: Vec<_> = (0..4).map(|_| upload(&arena, &[0.0], "out")).collect();
            let rows_out = upload(&arena, &[0.0], "row out");
            let mut batch = kernels.batch();
            for (op, out) in ops.iter().zip(&outs) {
                batch.reduce(*op, (&xa, n as u64), (out, 1)).unwrap();
            }
            batch
                .reduce_rows(Reduce::Max, (&xa, n as u64), (&rows_out, 1))
                .unwrap();
            batch.submit().unwrap();
            for (op, out) in ops.iter().zip(outs.iter().chain([&rows_out])) {
                let got =
                    readback::read_as::<f32>(gpu(), out.buffer(), out.offset(), 1).unwrap()[0];
                assert!(
                    got.is_nan(),
                    "{op:?} of {n} elements with a NaN at {at} gave {got} ({:?})",
                    kernels.options()
                );
            }
        }
        for (value, op, want) in [
            (f32::NEG_INFINITY, Reduce::Max, f32::NEG_INFINITY),
            (f32::INFINITY, Reduce::Min, f32::INFINITY),
        ] {
            let xa = upload(&arena, &[value; 1000], "infinities");
            let out = upload(&arena, &[0.0], "out");
            let mut batch = kernels.batch();
            batch.reduce(op, (&xa, 1000), (&out, 1)).unwrap();
            batch.submit().unwrap();
            let got = readback::read_as::<f32>(gpu(), out.buffer(), out.offset(), 1).unwrap()[0];
            assert_eq!(got, want, "{op:?} of {value}");
        }
    }
}

#[test]
fn row_reductions_match_the_cpu() {
    use vramkit::kernels::Reduce;
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let mut r = rng();
    for kernels in variants(&arena) {
        // 70000 rows need a second grid row of workgroups.
        for (rows, cols) in [(1usize, 1usize), (3, 257), (5, 10_007), (70_000, 3)] {
            let x = random_f32(&mut r, rows * cols);
            let xa = upload(&arena, &x, "x");
            for op in [Reduce::Sum, Reduce::Max, Reduce::Min, Reduce::Mean] {
                let y = upload(&arena, &vec![f32::NAN; rows], "y");
                let mut batch = kernels.batch();
                batch
                    .reduce_rows(op, (&xa, rows as u64 * cols as u64), (&y, rows as u64))
                    .unwrap();
                batch.submit().unwrap();
                let got = readback::read_as::<f32>(gpu(), y.buffer(), y.offset(), rows).unwrap();
                for (row, g) in got.iter().enumerate() {
                    assert_reduced(
                        op,
                        *g,
                        &x[row * cols..(row + 1) * cols],
                        &format!("{op:?} row {row} of {rows}x{cols} {:?}", kernels.options()),
                    );
                }
            }
        }
    }
}

#[test]
fn reductions_reject_empty_and_short_inputs() {
    use vramkit::kernels::Reduce;
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let x = arena.alloc_typed::<f32>(10, "x").unwrap();
    let y = arena.alloc_typed::<f32>(2, "y").unwrap();
    let mut batch = kernels.batch();
    assert!(batch.reduce(Reduce::Sum, (&x, 0), (&y, 1)).is_err());
    assert!(batch.reduce(Reduce::Sum, (&x, 11), (&y, 1)).is_err());
    assert!(
        batch
            .reduce_rows(Reduce::Max, (&x, 3 * 3), (&y, 3))
            .is_err(),
        "y holds 2 rows, not 3"
    );
    assert!(batch.reduce_rows(Reduce::Max, (&x, 0), (&y, 0)).is_err());
    assert!(batch.is_empty());
}
