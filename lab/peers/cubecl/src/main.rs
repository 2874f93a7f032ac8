//! CubeCL's matrix products (its wgpu runtime, kernels compiled to SPIR-V with cooperative
//! matrices where the device has them) on vramkit's benchmark shapes, so that
//! BENCHMARKS.md can put a SPIR-V compiler's figures beside WGSL through naga on the same
//! driver. Prints one `name: value` line per figure, as `bench` does.
//!
//! Each product is first checked against an f64 CPU reference on sampled outputs of
//! random inputs; a product that fails the check prints `wrong` instead of its speed.
//! Timed over whole-second windows after a warm-up; the median of five.
//!
//! Built without its default `spirv` feature, CubeCL emits WGSL for naga instead: the same
//! kernels through vramkit's compiler path, as a control (names say `wgsl`).
//!
//! Note the output types: CubeCL's f16 product (`MatmulPrecision for f16`) accumulates in
//! f32 and writes f16, as PyTorch's does; vramkit's writes f32.

use cubecl::matmul::components::MatmulPrecision;
use cubecl::matmul::{self, MatmulInputHandle, Strategy};
use cubecl::prelude::*;
use cubecl::std::tensor::TensorHandle;
use cubecl::wgpu::{WgpuDevice, WgpuRuntime};
use half::f16;
use std::time::Instant;

type R = WgpuRuntime;

/// A small deterministic generator (the inputs need no quality, only variety).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

/// The element types the peer runs. CubeCL's products of these write their own type
/// (`AccG` of f16 is f16, of f32 is f32), so the output reads back as `Self` too.
trait Elem: MatmulPrecision + Numeric + bytemuck::Pod {
    const NAME: &'static str;
    fn from_f32(v: f32) -> Self;
    fn to_f64(self) -> f64;
}

impl Elem for f32 {
    const NAME: &'static str = "f32";
    fn from_f32(v: f32) -> Self {
        v
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Elem for f16 {
    const NAME: &'static str = "f16";
    fn from_f32(v: f32) -> Self {
        f16::from_f32(v)
    }
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
}

struct Product {
    batch: usize,
    m: usize,
    k: usize,
    n: usize,
    name: &'static str,
}

fn upload<E: Elem>(
    client: &ComputeClient<<R as Runtime>::Server>,
    v: &[E],
    shape: Vec<usize>,
) -> TensorHandle<R, E> {
    let handle = client.create(bytemuck::cast_slice(v));
    TensorHandle::new_contiguous(shape, handle)
}

/// Runs one product with `strategy`: checks it, then times it. `None`: the strategy
/// refused the shape or precision.
fn measure<E: Elem>(
    client: &ComputeClient<<R as Runtime>::Server>,
    p: &Product,
    strategy: &Strategy,
) -> Option<Result<f64, String>> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (p.m * 31 + p.n * 7 + p.k) as u64);
    let a: Vec<E> = (0..p.batch * p.m * p.k)
        .map(|_| E::from_f32(rng.next()))
        .collect();
    let b: Vec<E> = (0..p.batch * p.k * p.n)
        .map(|_| E::from_f32(rng.next()))
        .collect();
    let lhs = upload(client, &a, vec![p.batch, p.m, p.k]);
    let rhs = upload(client, &b, vec![p.batch, p.k, p.n]);
    let out = TensorHandle::<R, AccG<E>>::empty(client, vec![p.batch, p.m, p.n]);
    let run = |out: &TensorHandle<R, AccG<E>>| {
        matmul::launch_ref::<R, E>(
            strategy,
            client,
            &MatmulInputHandle::Normal(lhs.clone()).as_ref(),
            &MatmulInputHandle::Normal(rhs.clone()).as_ref(),
            &out.as_ref(),
        )
    };
    if let Err(e) = run(&out) {
        eprintln!("{} {} {:?}: {e:?}", p.name, E::NAME, strategy);
        return None;
    }
    // Collected, not cast: the bytes read back need not be aligned for `E`.
    let got: Vec<f64> = bytemuck::pod_collect_to_vec::<u8, E>(&client.read_one(out.handle.clone()))
        .into_iter()
        .map(<E as Elem>::to_f64)
        .collect();
    // Sampled outputs against an f64 reference, relative to sum |a| |b| (the scale of
    // rounding in any summation order); f16 outputs carry 2^-11 of their own.
    let mut worst = 0.0f64;
    for s in 0..256usize {
        let (z, i, j) = ((s * 7) % p.batch, (s * 131) % p.m, (s * 977) % p.n);
        let (mut exact, mut mag) = (0.0f64, 0.0f64);
        for l in 0..p.k {
            let x =
                a[z * p.m * p.k + i * p.k + l].to_f64() * b[z * p.k * p.n + l * p.n + j].to_f64();
            exact += x;
            mag += x.abs();
        }
        worst = worst.max((got[z * p.m * p.n + i * p.n + j] - exact).abs() / mag.max(1e-30));
    }
    if worst > 2e-3 {
        return Some(Err(format!("wrong (relative error {worst:.1e})")));
    }
    let flops = 2.0 * (p.batch * p.m * p.k * p.n) as f64;
    let sync = || cubecl::future::block_on(client.sync());
    // Warm-up: a second of work, so the clock has ramped up.
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 1.0 {
        let _ = run(&out);
        sync();
    }
    let mut rates = Vec::new();
    for _ in 0..5 {
        let start = Instant::now();
        let mut runs = 0;
        while start.elapsed().as_secs_f64() < 0.5 {
            for _ in 0..4 {
                let _ = run(&out);
            }
            sync();
            runs += 4;
        }
        rates.push(flops * runs as f64 / start.elapsed().as_secs_f64() / 1e12);
    }
    rates.sort_by(|x, y| x.total_cmp(y));
    Some(Ok(rates[2]))
}

type AccG<E> = cubecl::matmul::components::AccG<E>;

fn main() {
    let device = WgpuDevice::default();
    let client = R::client(&device);
    let compiler = if cfg!(feature = "spirv") {
        "spirv"
    } else {
        "wgsl"
    };
    println!("cubecl_runtime: {} ({compiler})", R::name(&client));
    let products = [
        // Small and uneven: a quick check that runs anywhere (lavapipe included).
        Product {
            batch: 2,
            m: 96,
            k: 72,
            n: 40,
            name: "check",
        },
        Product {
            batch: 1,
            m: 4096,
            k: 4096,
            n: 4096,
            name: "4096",
        },
        Product {
            batch: 1,
            m: 8192,
            k: 8192,
            n: 8192,
            name: "8192",
        },
        Product {
            batch: 32,
            m: 2048,
            k: 128,
            n: 2048,
            name: "bmm_scores",
        },
        Product {
            batch: 32,
            m: 2048,
            k: 2048,
            n: 128,
            name: "bmm_values",
        },
    ];
    let only = std::env::var("CUBECL_PEER_SIZES").unwrap_or_default();
    let strategies = [("auto", Strategy::Auto)];
    for p in &products {
        if !only.is_empty() && !only.split(',').any(|s| s == p.name) {
            continue;
        }
        for (sname, strategy) in &strategies {
            let elems = std::env::var("CUBECL_PEER_ELEMS").unwrap_or("f16,f32".into());
            // CubeCL's `Auto` panics where the device lacks a type: report it and go on.
            let guarded = |f: &dyn Fn() -> Option<Result<f64, String>>| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
                    .unwrap_or_else(|_| Some(Err("unsupported here (CubeCL panicked)".into())))
            };
            let mut results = Vec::new();
            if elems.contains("f16") {
                results.push(("f16", guarded(&|| measure::<f16>(&client, p, strategy))));
            }
            if elems.contains("f32") {
                results.push(("f32", guarded(&|| measure::<f32>(&client, p, strategy))));
            }
            for (elem, result) in results {
                match result {
                    Some(Ok(tflops)) => println!(
                        "cubecl_{compiler}_matmul_{elem}_{}_{sname}_tflops: {tflops:.1}",
                        p.name
                    ),
                    Some(Err(e)) => {
                        println!("cubecl_{compiler}_matmul_{elem}_{}_{sname}: {e}", p.name)
                    }
                    None => println!(
                        "cubecl_{compiler}_matmul_{elem}_{}_{sname}: refused",
                        p.name
                    ),
                }
            }
        }
    }
}
