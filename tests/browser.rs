//! The browser suite: what a page needs, through the calls that never block, checked
//! against CPU references on random inputs.
//!
//! In the browser (wasm32 + WebGPU) `.ci/run` runs it in headless Chromium:
//! `cargo test --target wasm32-unknown-unknown --test browser`, with
//! `wasm-bindgen-test-runner` as the target's runner and Chromium started with
//! `--enable-unsafe-webgpu` (`webdriver.json`). Every shader vramkit ships is compiled
//! there by Chromium's own WGSL compiler (Tint), so WGSL that naga accepts and Tint
//! rejects fails the run. Natively the same tests run under `cargo test`, each future
//! driven by `pollster` (the native async path, with its polling thread).
//!
//! No adapter is a failure with the way to get one, never a skip.

#[cfg(target_arch = "wasm32")]
wasm_bindgen_test::wasm_bindgen_test_configure!(run_in_browser);

#[path = "support/reference.rs"]
#[allow(dead_code)] // the browser suite checks a subset of the kernels
mod reference;
#[path = "../examples/support/vt_demo.rs"]
mod vt_demo;

use reference::{cpu_binary, cpu_scan_u32, cpu_softmax, cpu_unary};

use std::sync::Arc;

use vramkit::kernels::{Binary, MatmulShape, Reduce, ScanKind, Unary};
use vramkit::vt::{ProceduralSource, VirtualTexture, VtConfig};
use vramkit::{Arena, Runtime};

/// An async test: in the browser through wasm-bindgen-test, natively driven by pollster.
macro_rules! browser_test {
    ($(#[$doc:meta])* async fn $name:ident() $body:block) => {
        $(#[$doc])*
        #[cfg(target_arch = "wasm32")]
        #[wasm_bindgen_test::wasm_bindgen_test]
        async fn $name() {
            let run = async { let r: vramkit::Result<()> = async $body.await; r };
            if let Err(e) = run.await {
                panic!("{e}");
            }
        }

        $(#[$doc])*
        #[cfg(not(target_arch = "wasm32"))]
        #[test]
        fn $name() {
            let run = async { let r: vramkit::Result<()> = async $body.await; r };
            if let Err(e) = pollster::block_on(run) {
                panic!("{e}");
            }
        }
    };
}

/// The page's adapter, or a failure that says how to get one.
async fn runtime() -> Runtime {
    match Runtime::headless_async().await {
        Ok(rt) => rt,
        Err(e) => panic!(
            "no GPU adapter: {e}. In Chromium WebGPU needs --enable-unsafe-webgpu where it is \
             not on by default (webdriver.json passes it; see .ci/run); natively install a \
             Vulkan driver (apt-get install mesa-vulkan-drivers)"
        ),
    }
}

/// xorshift64*: the same random inputs in the page and natively, without an OS source.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in [-1, 1).
    fn f32(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
    fn f32s(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.f32()).collect()
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let scale = w.abs().max(1.0);
        assert!(
            (g - w).abs() <= tol * scale,
            "{what}: element {i} is {g}, the CPU says {w}"
        );
    }
}

browser_test! {
    /// A free with GPU work in flight is not reused until that work is done; once it is,
    /// its range is, and the kernel that read it saw its data.
    async fn allocation_reuse_waits_for_gpu_work_in_flight() {
        let rt = runtime().await;
        let mut rng = Rng::new(1);
        let n = 1 << 16;
        let xs = rng.f32s(n);
        let x = rt.alloc_from(&xs, "x")?;
        let y = rt.alloc::<f32>(n, "y")?;
        let mut batch = rt.batch();
        batch.fill(1.0, &y)?.axpy(2.0, &x, &y)?;
        batch.submit()?;
        let before = rt.arena().stats();
        drop(x); // the axpy may still be reading it
        let z = rt.alloc::<f32>(n, "z")?;
        let mut batch = rt.batch();
        batch.fill(-7.0, &z)?;
        batch.submit()?;
        rt.synchronize_async().await?;
        let after = rt.arena().stats();
        assert_eq!(after.pending_frees, 0, "every free collected after the wait");
        // The freed range is back: a same-size request takes no new memory.
        let w = rt.alloc::<f32>(n, "w")?;
        assert_eq!(rt.arena().stats().reserved, after.reserved, "reused, not grown");
        assert!(after.reserved >= before.reserved);
        let want: Vec<f32> = xs.iter().map(|v| 2.0 * v + 1.0).collect();
        assert_close(&rt.download_async(&y).await?, &want, 0.0, "axpy");
        assert_eq!(rt.download_async(&z).await?, vec![-7.0; n]);
        drop(w);

        // Budgets: bytes work everywhere; a fraction needs the device's memory size, which
        // WebGPU does not give, and says so.
        use vramkit::arena::{ArenaConfig, Budget};
        let small = Arena::new(
            rt.gpu(),
            ArenaConfig { budget: Budget::Bytes(1 << 20), ..Default::default() },
        )?;
        let fits = small.alloc(512 << 10, "fits")?;
        match small.alloc(768 << 10, "too much") {
            Err(vramkit::Error::OutOfMemory(_)) => {}
            other => panic!("an allocation over the budget gave {other:?}"),
        }
        drop(fits);
        let fraction = ArenaConfig { budget: Budget::FractionOfDevice(0.5), ..Default::default() };
        match (rt.gpu().device_memory(), Arena::new(rt.gpu(), fraction)) {
            (Some(_), Ok(_)) => {}
            (None, Err(vramkit::Error::InvalidArgument { .. })) => {}
            (memory, other) => panic!("memory {memory:?}: a fractional budget gave {other:?}"),
        }
        rt.gpu().errors_async().await
    }
}

browser_test! {
    /// Every kernel family against the CPU: elementwise maps and binaries, reductions
    /// (whole and per row), scans, softmax, transpose, matmul and the f16 casts.
    async fn every_kernel_family_matches_the_cpu() {
        let rt = runtime().await;
        let mut rng = Rng::new(2);
        let (rows, cols) = (37usize, 300usize);
        let n = rows * cols;
        let xs: Vec<f32> = rng.f32s(n).iter().map(|v| 4.0 * v).collect();
        let positive: Vec<f32> = xs.iter().map(|v| v.abs() + 1e-3).collect();
        let ys: Vec<f32> = rng.f32s(n).iter().map(|v| v + 2.0f32.copysign(*v)).collect();
        let x = rt.alloc_from(&xs, "x")?;
        let p = rt.alloc_from(&positive, "positive")?;
        let y = rt.alloc_from(&ys, "y")?;
        let mut batch = rt.batch();
        let unary: Vec<_> = Unary::ALL
            .iter()
            .map(|_| rt.alloc::<f32>(n, "unary"))
            .collect::<vramkit::Result<_>>()?;
        for (f, out) in Unary::ALL.iter().zip(&unary) {
            let input = if matches!(f, Unary::Log | Unary::Sqrt) { &p } else { &x };
            batch.map(*f, input, out)?;
        }
        let binary: Vec<_> = Binary::ALL
            .iter()
            .map(|_| rt.alloc::<f32>(n, "binary"))
            .collect::<vramkit::Result<_>>()?;
        for (op, out) in Binary::ALL.iter().zip(&binary) {
            batch.binary(*op, &x, &y, out)?;
        }
        let scaled = rt.alloc::<f32>(n, "scaled")?;
        batch.scale(-2.5, 0.75, &x, &scaled)?;
        let reduced: Vec<_> = [Reduce::Sum, Reduce::Max, Reduce::Min, Reduce::Mean]
            .iter()
            .map(|_| rt.alloc::<f32>(1, "reduced"))
            .collect::<vramkit::Result<_>>()?;
        for (op, out) in [Reduce::Sum, Reduce::Max, Reduce::Min, Reduce::Mean].iter().zip(&reduced) {
            batch.reduce(*op, &x, out)?;
        }
        let row_sums = rt.alloc::<f32>(rows, "row sums")?;
        batch.reduce_rows(Reduce::Sum, &x, &row_sums)?;
        let soft = rt.alloc::<f32>(n, "softmax")?;
        batch.softmax_rows(rows as u64, &x, &soft)?;
        let tr = rt.alloc::<f32>(n, "transpose")?;
        batch.transpose(rows as u64, &x, &tr)?;
        // (rows x cols) times (cols x rows).
        let prod = rt.alloc::<f32>(rows * rows, "matmul")?;
        let shape = MatmulShape { m: rows as u64, k: cols as u64, n: rows as u64 };
        batch.matmul::<f32>(shape, &x, &tr, &prod)?;
        let halves = rt.alloc::<half::f16>(n, "f16")?;
        let back = rt.alloc::<f32>(n, "f32 again")?;
        batch.to_f16(&x, &halves)?.to_f32(&halves, &back)?;
        batch.submit()?;
        rt.gpu().errors_async().await?;

        for (f, out) in Unary::ALL.iter().zip(&unary) {
            let input = if matches!(f, Unary::Log | Unary::Sqrt) { &positive } else { &xs };
            let want: Vec<f32> = input.iter().map(|&v| cpu_unary(*f, v)).collect();
            assert_close(&rt.download_async(out).await?, &want, 1e-5, &format!("{f:?}"));
        }
        for (op, out) in Binary::ALL.iter().zip(&binary) {
            let want: Vec<f32> = xs.iter().zip(&ys).map(|(&a, &b)| cpu_binary(*op, a, b)).collect();
            assert_close(&rt.download_async(out).await?, &want, 1e-6, &format!("{op:?}"));
        }
        let want: Vec<f32> = xs.iter().map(|v| -2.5 * v + 0.75).collect();
        assert_close(&rt.download_async(&scaled).await?, &want, 1e-6, "scale");
        let sum: f64 = xs.iter().map(|&v| f64::from(v)).sum();
        let max = xs.iter().copied().fold(f32::MIN, f32::max);
        let min = xs.iter().copied().fold(f32::MAX, f32::min);
        for (want, out, tol) in [
            (sum as f32, &reduced[0], 1e-3),
            (max, &reduced[1], 0.0),
            (min, &reduced[2], 0.0),
            ((sum / n as f64) as f32, &reduced[3], 1e-5),
        ] {
            assert_close(&rt.download_async(out).await?, &[want], tol, "reduce");
        }
        let want: Vec<f32> = xs.chunks(cols).map(|r| r.iter().sum()).collect();
        assert_close(&rt.download_async(&row_sums).await?, &want, 1e-4, "reduce_rows");
        let want = cpu_softmax(&xs, cols);
        assert_close(&rt.download_async(&soft).await?, &want, 1e-5, "softmax_rows");
        let mut want = vec![0.0; n];
        for r in 0..rows {
            for c in 0..cols {
                want[c * rows + r] = xs[r * cols + c];
            }
        }
        assert_close(&rt.download_async(&tr).await?, &want, 0.0, "transpose");
        let mut want = vec![0.0; rows * rows];
        for i in 0..rows {
            for j in 0..rows {
                let dot: f64 = (0..cols)
                    .map(|k| f64::from(xs[i * cols + k]) * f64::from(xs[j * cols + k]))
                    .sum();
                want[i * rows + j] = dot as f32;
            }
        }
        assert_close(&rt.download_async(&prod).await?, &want, 1e-4, "matmul");
        let want: Vec<f32> = xs.iter().map(|&v| half::f16::from_f32(v).to_f32()).collect();
        assert_close(&rt.download_async(&back).await?, &want, 0.0, "f16 round trip");

        // Scans of u32 across tile borders, inclusive and exclusive.
        for len in [1usize, 2049, 70_001] {
            let us: Vec<u32> = (0..len).map(|_| rng.below(1000) as u32).collect();
            let a = rt.alloc_from(&us, "scan in")?;
            let b = rt.alloc::<u32>(len, "scan out")?;
            for kind in [ScanKind::Inclusive, ScanKind::Exclusive] {
                let mut batch = rt.batch();
                batch.scan::<u32>(kind, &a, &b)?;
                batch.submit()?;
                let want = cpu_scan_u32(&us, kind);
                assert_eq!(rt.download_async(&b).await?, want, "{kind:?} scan of {len}");
            }
        }
        rt.gpu().errors_async().await
    }
}

browser_test! {
    /// Uploads and downloads of odd sizes at odd offsets come back byte for byte, and the
    /// bytes around them stay as they were.
    async fn transfers_of_odd_sizes_and_offsets_round_trip() {
        let rt = runtime().await;
        let mut rng = Rng::new(3);
        let size = 1u64 << 20;
        let dst = rt.arena().alloc(size, "dst")?;
        let base: Vec<u8> = (0..size).map(|_| rng.next() as u8).collect();
        rt.uploader().upload(&dst, 0, &base)?;
        let mut model = base.clone();
        for _ in 0..12 {
            let offset = rng.below(size - 1);
            let len = 1 + rng.below((size - offset).min(300_000));
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            rt.uploader().upload(&dst, offset, &bytes)?;
            model[offset as usize..(offset + len) as usize].copy_from_slice(&bytes);
            let (o, l) = (rng.below(size - 1), 0);
            let l = l + 1 + rng.below(size - o);
            let view = rt.downloader().download_async(&dst, o, l)?.await?;
            assert!(
                view[..] == model[o as usize..(o + l) as usize],
                "download of {l} bytes at {o} after an upload of {len} at {offset}"
            );
        }
        let all = rt.downloader().download_async(&dst, 0, size)?.await?;
        assert!(all[..] == model[..], "the whole allocation");
        rt.gpu().errors_async().await
    }
}

browser_test! {
    /// A dry run of a step reports the peaks the real run then reaches.
    async fn a_dry_runs_peaks_equal_the_real_runs() {
        let rt = runtime().await;
        let step = |rt: &Runtime| -> vramkit::Result<()> {
            let a = rt.alloc::<f32>(1 << 18, "activations")?;
            let b = rt.alloc::<f32>(3 << 16, "gradients")?;
            let mut batch = rt.batch();
            batch.fill(1.0, &a)?.fill(2.0, &b)?;
            batch.submit()?;
            drop(a);
            let c = rt.alloc::<f32>(5 << 15, "scratch")?;
            let mut batch = rt.batch();
            batch.fill(3.0, &c)?;
            batch.submit()?;
            Ok(())
        };
        let plan = rt.dry_run(step)?;
        rt.synchronize_async().await?;
        rt.arena().reset_peak();
        let base = rt.arena().stats().allocated;
        step(&rt)?;
        let stats = rt.arena().stats();
        assert_eq!(stats.peak_allocated - base, plan.peak_allocated, "{plan}");
        assert!(plan.peak_allocated >= (4 << 18) + (12 << 16));
        rt.gpu().errors_async().await
    }
}

browser_test! {
    /// Every shader vramkit ships becomes a pipeline here: in the browser Chromium's
    /// WGSL compiler takes each one, and a rejection is reported.
    async fn every_shipped_shader_compiles_here() {
        let rt = runtime().await;
        let gpu = rt.gpu();
        let (mut compiled, mut skipped) = (0, 0);
        for shader in vramkit::SHADERS {
            if !gpu.has(shader.requires) {
                continue;
            }
            let source = shader.source()?;
            let module = naga::front::wgsl::parse_str(&source)
                .map_err(|e| vramkit::Error::Shader { shader: shader.name.into(), message: e.to_string() })?;
            // A variant larger than the device's workgroup memory is not used here (the
            // kernels pick a compact one, checked in the kernel test); Tint rounds each
            // variable to 16 bytes.
            let workgroup_bytes: u32 = module
                .global_variables
                .iter()
                .filter(|(_, v)| v.space == naga::AddressSpace::WorkGroup)
                .map(|(_, v)| module.types[v.ty].inner.size(module.to_ctx()).next_multiple_of(16))
                .sum();
            let l = gpu.limits();
            let too_wide = module.entry_points.iter().any(|ep| {
                let [x, y, z] = ep.workgroup_size;
                x > l.max_compute_workgroup_size_x
                    || x * y * z > l.max_compute_invocations_per_workgroup
            });
            if workgroup_bytes > l.max_compute_workgroup_storage_size || too_wide {
                skipped += 1;
                continue;
            }
            for ep in &module.entry_points {
                gpu.pipeline(shader, &ep.name)?;
                compiled += 1;
            }
        }
        assert!(compiled > 20 && skipped <= 4, "{compiled} pipelines, {skipped} too large");
        gpu.errors_async().await
    }
}

browser_test! {
    /// A virtual texture sampled in the page's own render pass settles on the exact image.
    async fn a_virtual_texture_settles_on_the_exact_image() {
        let rt = runtime().await;
        let gpu = rt.gpu();
        let arena = Arena::new(gpu, Default::default())?;
        let source = Arc::new(ProceduralSource::new(1 << 18, 1 << 18)?);
        let size = (256, 128);
        let config = VtConfig {
            cache_slots: 128,
            render_size: size,
            feedback_factor: 8,
            loader_threads: 0,
            ..Default::default()
        };
        let mut vt = VirtualTexture::new(gpu, &arena, source.clone(), config)?;
        let demo = vt_demo::Demo::new(gpu, &arena, &vt, size)?;
        let scale = 1.5 / (1u32 << 18) as f32;
        let origin = [0.37, 0.61];
        for _ in 0..12 {
            demo.frame(gpu, &mut vt, origin, scale)?;
            gpu.wait_idle_async().await?;
            vt.settle_async(4).await?;
        }
        demo.frame(gpu, &mut vt, origin, scale)?;
        let pixels = demo.read_async(gpu, rt.downloader()).await?;
        let exact = vt_demo::exact_pixels(&pixels, size, origin, scale, &source, 3.0 / 255.0);
        let total = (size.0 * size.1) as usize;
        assert!(exact * 100 >= total * 99, "{exact} of {total} pixels exact; {}", vt.stats());
        gpu.errors_async().await
    }
}

/// Prints a figure: to the console in the browser, to stdout natively.
macro_rules! report {
    ($($t:tt)*) => {{
        #[cfg(target_arch = "wasm32")]
        wasm_bindgen_test::console_log!($($t)*);
        #[cfg(not(target_arch = "wasm32"))]
        println!($($t)*);
    }};
}

browser_test! {
    /// What the path without blocking costs on the CPU, for BENCHMARKS.md: a one-kernel
    /// batch recorded and submitted, and a virtual-texture frame (vramkit's part: begin
    /// and end, waits excluded), each the mean of many after a warm-up. Run with
    /// `--release ... -- --nocapture cpu_cost` here and in the browser; the results are
    /// checked, so a fast wrong answer fails.
    async fn cpu_cost_per_dispatch_and_per_frame() {
        let rt = runtime().await;
        let mut rng = Rng::new(4);
        let n = 4096;
        // Multiples of 1/64: every partial sum below is exact in f32.
        let xs: Vec<f32> = (0..n).map(|_| (rng.below(512) as f32 - 256.0) / 64.0).collect();
        let x = rt.alloc_from(&xs, "x")?;
        let y = rt.alloc::<f32>(n, "y")?;
        let mut batch = rt.batch();
        batch.fill(0.0, &y)?;
        batch.submit()?;
        let dispatches = 400;
        let mut per_dispatch = f64::MAX;
        for round in 0..3 {
            let start = web_time::Instant::now();
            for _ in 0..dispatches {
                let mut batch = rt.batch();
                batch.axpy(1.0, &x, &y)?;
                batch.submit()?;
            }
            let us = start.elapsed().as_secs_f64() * 1e6 / dispatches as f64;
            rt.synchronize_async().await?;
            if round > 0 {
                per_dispatch = per_dispatch.min(us);
            }
        }
        let want: Vec<f32> = xs.iter().map(|v| v * (3 * dispatches) as f32).collect();
        assert_close(&rt.download_async(&y).await?, &want, 0.0, "repeated axpy");

        let gpu = rt.gpu();
        let source = Arc::new(ProceduralSource::new(1 << 16, 1 << 16)?);
        let size = (256, 256);
        let config = VtConfig { render_size: size, loader_threads: 0, ..Default::default() };
        let mut vt = VirtualTexture::new(gpu, rt.arena(), source, config)?;
        let demo = vt_demo::Demo::new(gpu, rt.arena(), &vt, size)?;
        let scale = 2.0 / (1u32 << 16) as f32;
        for _ in 0..8 {
            demo.frame(gpu, &mut vt, [0.4, 0.4], scale)?;
            gpu.wait_idle_async().await?;
            vt.settle_async(8).await?;
        }
        let frames = 120;
        let mut cpu_ms = 0.0;
        for _ in 0..frames {
            demo.frame(gpu, &mut vt, [0.4, 0.4], scale)?;
            cpu_ms += vt.stats().cpu_ms_last;
            gpu.wait_idle_async().await?;
        }
        report!(
            "cpu cost on {}: {per_dispatch:.1} us per one-kernel batch, {:.3} ms per \
             virtual-texture frame ({} resident tiles)",
            gpu.info().backend,
            cpu_ms / frames as f64,
            vt.stats().resident_tiles
        );
        gpu.errors_async().await
    }
}

browser_test! {
    /// Tiered memory without blocking: a movable written on the GPU, evicted to host
    /// memory once its work is done, restored by `make_resident`, read back intact.
    async fn tiered_memory_evicts_and_restores() {
        use vramkit::tier::{TierConfig, Tiers};
        let rt = runtime().await;
        let tiers = Tiers::new(rt.arena(), TierConfig::default())?;
        let mut rng = Rng::new(5);
        let n = 1 << 14;
        let xs = rng.f32s(n);
        let x = rt.alloc_from(&xs, "x")?;
        let w = tiers.alloc(4 * n as u64, "weights")?;
        {
            let r = tiers.make_resident(&[&w])?;
            let mut batch = rt.batch();
            batch.fill(1.0, r.elements::<f32>(&w)?)?.axpy(3.0, &x, r.elements::<f32>(&w)?)?;
            batch.submit()?;
        }
        rt.synchronize_async().await?;
        tiers.evict(&[&w])?;
        assert_eq!(w.tier(), vramkit::tier::Tier::Host, "evicted");
        let r = tiers.make_resident(&[&w])?;
        let got = rt.download_async(r.elements::<f32>(&w)?).await?;
        let want: Vec<f32> = xs.iter().map(|v| 3.0 * v + 1.0).collect();
        // 1e-6: the GPU may fuse 3x + 1 into one rounding (the H100 does), the CPU does not.
        assert_close(&got, &want, 1e-6, "after a round trip through host memory");
        drop(r);
        tiers.check_invariants().map_err(|e| vramkit::Error::Device { during: "checking the tiers".into(), message: e })?;
        rt.gpu().errors_async().await
    }
}

browser_test! {
    /// Mip streaming in the page: 40 textures whose chains are 3x the budget, a camera
    /// moving over them and the budget halved midway: every update within the budget and
    /// the cap, no out-of-memory; settled, the levels of width 64 or more read back exactly
    /// as their sources (the narrower ones would need padded rows).
    async fn mip_streaming_holds_its_budget_and_its_levels_are_exact() {
        use vramkit::mips::{wanted_level, MemoryMips, MipConfig, MipSource, MipStreamer};
        let rt = runtime().await;
        let gpu = rt.gpu();
        let mut rng = Rng::new(11);
        let side = 256u32;
        let levels = 9;
        let mut sources = Vec::new();
        for _ in 0..40 {
            let data = (0..levels)
                .map(|l| (0..((side >> l) * (side >> l) * 4)).map(|_| rng.next() as u8).collect())
                .collect();
            let m = MemoryMips::new(wgpu::TextureFormat::Rgba8Unorm, (side, side), data)?;
            sources.push(Arc::new(m));
        }
        let full: u64 = 40 * (0..levels).map(|l| u64::from((side >> l) * (side >> l) * 4)).sum::<u64>();
        let budget = full / 3;
        let mut streamer = MipStreamer::new(
            gpu,
            MipConfig { budget, upload_cap: u64::from(side * side * 4), ..Default::default() },
        )?;
        let mut ids = Vec::new();
        for (i, s) in sources.iter().enumerate() {
            ids.push(streamer.add(s.clone(), &format!("t{i}"))?);
        }
        let view = |streamer: &mut MipStreamer, cam: f32| -> vramkit::Result<()> {
            for (i, id) in ids.iter().enumerate() {
                let d = (i as f32 - cam).abs();
                let pixels = 300.0 / (1.0 + d);
                streamer.set_wanted(*id, wanted_level((side, side), pixels), pixels * pixels)?;
            }
            Ok(())
        };
        for f in 0..30 {
            if f == 15 {
                streamer.set_budget(budget / 2)?;
            }
            view(&mut streamer, f as f32 * 40.0 / 30.0)?;
            let uploaded = streamer.update()?;
            let limit = if f >= 15 { budget / 2 } else { budget };
            assert!(streamer.stats().resident_bytes <= limit, "frame {f}");
            assert!(uploaded <= u64::from(side * side * 4), "frame {f}");
            gpu.wait_idle_async().await?;
        }
        streamer.set_budget(budget)?;
        view(&mut streamer, 20.0)?;
        let mut frames = 0;
        while !streamer.settled() {
            streamer.update()?;
            gpu.wait_idle_async().await?;
            frames += 1;
            assert!(frames < 100, "not settled");
        }
        assert_eq!(streamer.stats().ooms, 0);
        let arena = Arena::new(gpu, Default::default())?;
        for (i, id) in ids.iter().enumerate().filter(|(i, _)| i % 4 == 0) {
            let shown = streamer.texture(*id)?;
            for l in 0..shown.texture.mip_level_count() {
                let w = side >> (shown.resident + l);
                if w < 64 {
                    break;
                }
                let bytes = u64::from(w * w * 4);
                let out = arena.alloc(bytes, "mip readback")?;
                let mut e = gpu.device().create_command_encoder(&Default::default());
                e.copy_texture_to_buffer(
                    wgpu::TexelCopyTextureInfo {
                        texture: &shown.texture,
                        mip_level: l,
                        origin: wgpu::Origin3d::ZERO,
                        aspect: wgpu::TextureAspect::All,
                    },
                    wgpu::TexelCopyBufferInfo {
                        buffer: out.buffer(),
                        layout: wgpu::TexelCopyBufferLayout {
                            offset: out.offset(),
                            bytes_per_row: Some(w * 4),
                            rows_per_image: Some(w),
                        },
                    },
                    wgpu::Extent3d { width: w, height: w, depth_or_array_layers: 1 },
                );
                gpu.submit([e.finish()]);
                let got = rt.downloader().download_async(&out, 0, bytes)?.await?.to_vec();
                assert!(got == sources[i].read_level(shown.resident + l)?, "t{i} level {}", shown.resident + l);
            }
        }
        gpu.errors_async().await
    }
}
