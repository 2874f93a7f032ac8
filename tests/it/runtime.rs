//! The one entry point and its typed API on a real adapter: typed allocations, typed
//! transfers and typed kernels, every result read back and compared with a CPU reference
//! on random inputs; element counts come from the allocations, and mismatched lengths
//! are typed errors.

use crate::common;

use common::{assert_close, random_f32, rng};
use half::f16;
use rand::Rng;
use vramkit::kernels::MatmulShape;
use vramkit::kernels::{Binary, Reduce, ScanKind, Unary};
use vramkit::{Error, Runtime, RuntimeConfig};

fn runtime() -> Runtime {
    Runtime::new(common::gpu(), RuntimeConfig::default()).unwrap()
}

#[test]
fn typed_kernels_and_transfers_match_the_cpu() {
    let rt = runtime();
    let mut r = rng();
    for n in [1usize, 3, 1000, 65_537] {
        let (x, y) = (random_f32(&mut r, n), random_f32(&mut r, n));
        let xa = rt.alloc_from(&x, "x").unwrap();
        let ya = rt.alloc_from(&y, "y").unwrap();
        let za = rt.alloc::<f32>(n, "z").unwrap();
        let total = rt.alloc::<f32>(1, "total").unwrap();
        assert_eq!((xa.len(), za.len(), total.len()), (n, n, 1));
        let mut batch = rt.batch();
        batch
            .axpy(0.5, &xa, &ya)
            .unwrap()
            .binary(Binary::Mul, &xa, &ya, &za)
            .unwrap()
            .map(Unary::Relu, &za, &za)
            .unwrap()
            .reduce(Reduce::Sum, &za, &total)
            .unwrap();
        batch.submit().unwrap();
        let want_y: Vec<f32> = x.iter().zip(&y).map(|(a, b)| b + 0.5 * a).collect();
        let want_z: Vec<f32> = x
            .iter()
            .zip(&want_y)
            .map(|(a, b)| (a * b).max(0.0))
            .collect();
        assert_close(&rt.download(&ya).unwrap(), &want_y, 1e-6, "axpy");
        assert_close(&rt.download(&za).unwrap(), &want_z, 1e-6, "mul, relu");
        let sum: f64 = want_z.iter().map(|&v| v as f64).sum();
        let got = rt.download(&total).unwrap()[0] as f64;
        assert!(
            (got - sum).abs() <= 1e-5 * sum.max(1.0),
            "sum {got} vs {sum}"
        );
    }
}

#[test]
fn scans_casts_and_matmul_take_their_element_types() {
    let rt = runtime();
    let mut r = rng();
    // u32 scan (wrapping) and f32 scan.
    let n = 10_007;
    let counts: Vec<u32> = (0..n).map(|_| r.gen()).collect();
    let ca = rt.alloc_from(&counts, "counts").unwrap();
    let sa = rt.alloc::<u32>(n, "prefix").unwrap();
    // f16 of an odd length: 2 * 7 bytes, rounded up by the arena, 7 elements all the same.
    let halves: Vec<f32> = random_f32(&mut r, 7);
    let ha = rt.alloc_from(&halves, "f32 in").unwrap();
    let h16 = rt.alloc::<f16>(7, "f16").unwrap();
    let back = rt.alloc::<f32>(7, "f32 back").unwrap();
    assert_eq!(h16.len(), 7);
    // f16 matmul: a (m x k), b (k x n) uploaded as half::f16.
    let (m, k, nn) = (33usize, 17usize, 65usize);
    let a: Vec<f16> = (0..m * k)
        .map(|_| f16::from_f32(r.gen_range(-1.0..1.0)))
        .collect();
    let b: Vec<f16> = (0..k * nn)
        .map(|_| f16::from_f32(r.gen_range(-1.0..1.0)))
        .collect();
    let aa = rt.alloc_from(&a, "a").unwrap();
    let ba = rt.alloc_from(&b, "b").unwrap();
    let c = rt.alloc::<f32>(m * nn, "c").unwrap();
    let mut batch = rt.batch();
    batch
        .scan(ScanKind::Inclusive, &ca, &sa)
        .unwrap()
        .to_f16(&ha, &h16)
        .unwrap()
        .to_f32(&h16, &back)
        .unwrap()
        .matmul(
            MatmulShape {
                m: m as u64,
                k: k as u64,
                n: nn as u64,
            },
            &aa,
            &ba,
            &c,
        )
        .unwrap();
    batch.submit().unwrap();
    let mut acc = 0u32;
    let want: Vec<u32> = counts
        .iter()
        .map(|&v| {
            acc = acc.wrapping_add(v);
            acc
        })
        .collect();
    assert_eq!(rt.download(&sa).unwrap(), want);
    let got16 = rt.download(&h16).unwrap();
    let want16: Vec<f16> = halves.iter().map(|&v| f16::from_f32(v)).collect();
    assert_eq!(got16, want16, "to_f16 rounds to nearest");
    let want_back: Vec<f32> = want16.iter().map(|v| v.to_f32()).collect();
    assert_eq!(rt.download(&back).unwrap(), want_back, "to_f32 is exact");
    let mut want_c = vec![0f32; m * nn];
    for i in 0..m {
        for j in 0..nn {
            want_c[i * nn + j] = (0..k)
                .map(|p| a[i * k + p].to_f32() * b[p * nn + j].to_f32())
                .sum();
        }
    }
    assert_close(&rt.download(&c).unwrap(), &want_c, 1e-4, "f16 matmul");
}

#[test]
fn lengths_come_from_the_allocations_and_mismatches_are_errors() {
    let rt = runtime();
    let x = rt.alloc_from(&[1.0f32; 100], "x").unwrap();
    let y = rt.alloc_from(&[2.0f32; 60], "y").unwrap();
    let mut batch = rt.batch();
    let e = batch.axpy(1.0, &x, &y).map(|_| ()).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    assert!(e.to_string().contains("100 elements"), "{e}");
    // The first 60 elements of x: a sub-range.
    batch.axpy(1.0, x.first(60).unwrap(), &y).unwrap();
    assert!(x.first(0).is_none() && x.first(101).is_none());
    // A product's operands must hold its shapes (more is allowed: the shape is explicit).
    let e = batch
        .matmul::<f32>(
            MatmulShape {
                m: 11,
                k: 11,
                n: 11,
            },
            &x,
            &x,
            &y,
        )
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("holds 100 elements"), "{e}");
    batch.submit().unwrap();
    assert_eq!(rt.download(&y).unwrap(), vec![3.0; 60]);
    let e = rt.upload(&y, &[0.0f32; 61]).unwrap_err();
    assert!(e.to_string().contains("61 elements"), "{e}");
    assert_eq!(
        rt.download(&y).unwrap(),
        vec![3.0; 60],
        "nothing was written"
    );
    assert_eq!(rt.download(x.first(2).unwrap()).unwrap(), vec![1.0; 2]);
}
