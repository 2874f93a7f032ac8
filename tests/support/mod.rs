//! Shared test harness: one GPU per test binary, or a failure that says how to get one.
#![allow(dead_code)]

pub mod reference;

#[cfg(target_os = "linux")]
pub mod hang;

/// Thread dumps read `/proc` and signal threads with `tgkill`: Linux only; elsewhere the
/// watchdog does nothing and a dump says why.
#[cfg(not(target_os = "linux"))]
pub mod hang {
    pub fn start_watchdog() {}
    pub fn dump_all_threads() -> String {
        "thread dumps need Linux (/proc and tgkill)".into()
    }
}

use std::sync::OnceLock;

use rand::{rngs::SmallRng, Rng, SeedableRng};
use vramkit::Gpu;

/// The test GPU. Fails the test (never skips it) when no adapter exists.
pub fn gpu() -> &'static Gpu {
    static GPU: OnceLock<Gpu> = OnceLock::new();
    hang::start_watchdog();
    GPU.get_or_init(|| match Gpu::headless() {
        Ok(gpu) => {
            eprintln!("test GPU: {}", gpu.describe());
            gpu
        }
        Err(e) => panic!(
            "these tests need a GPU adapter and found none: {e}\n{}",
            vramkit::INSTALL_HINT
        ),
    })
}

/// How `Gpu::time` and its kin measure on the test GPU: timestamps where the adapter has
/// them inside encoders, the host's wall clock elsewhere.
pub fn expected_timing_source() -> vramkit::TimingSource {
    if gpu().has(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS) {
        vramkit::TimingSource::GpuTimestamps
    } else {
        vramkit::TimingSource::WallClock
    }
}

/// A device a host app would create itself on the test GPU's adapter, with `limits`
/// and no optional feature (what `Gpu::from_wgpu` receives from a renderer).
pub fn host_device(limits: wgpu::Limits) -> (wgpu::Device, wgpu::Queue) {
    // The test GPU first: opening it takes the lock below, which is not re-entrant.
    let name = gpu().info().name.clone();
    // Devices are made one thread at a time, as vramkit makes its own (NVIDIA's driver
    // hung on parallel tests that each opened one).
    let _lock = Gpu::lifecycle_lock();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    let adapter = adapters
        .into_iter()
        .find(|a| a.get_info().name == name)
        .expect("the test GPU's adapter");
    pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: limits,
        ..Default::default()
    }))
    .expect("a device with these limits")
}

/// Says what a long test is doing, on the terminal even while the harness captures the
/// test's output (it captures `print!` and `eprint!`, not writes to the stderr handle):
/// a minute of silence reads as a hang.
pub fn say(what: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "      ({what})");
}

/// A fresh random generator; the seed is printed so a failure can be replayed with
/// VRAMKIT_TEST_SEED.
pub fn rng() -> SmallRng {
    let seed = std::env::var("VRAMKIT_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::thread_rng().gen());
    eprintln!("seed {seed}");
    SmallRng::seed_from_u64(seed)
}

/// Random f32 in [-1, 1).
pub fn random_f32(rng: &mut SmallRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(-1.0f32..1.0)).collect()
}

/// Asserts `got` matches `want` within a relative error of `tol` (NaN never passes).
pub fn assert_close(got: &[f32], want: &[f32], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let err = (g - w).abs() / w.abs().max(1.0);
        assert!(
            err <= tol,
            "{what}: element {i} is {g}, expected {w} (rel err {err})"
        );
    }
}

/// Frees come back through completion callbacks chained one after another on CPU adapters
/// and filed in batches on GPUs (`Shared::seal_lazily`): the two paths differ in when a
/// free comes back and when the allocation path polls. A suite runs under its adapter's
/// path; a test that calls this runs its module's tests again, in a child process,
/// under the other one (`VRAMKIT_SEALING`), so that CI on lavapipe also checks the path the
/// GPUs take: the tests of `module` (the caller's `module_path!()`). Does nothing in the
/// child, or where the run chose its path itself.
pub fn rerun_under_the_other_sealing_path(module: &str) {
    if std::env::var_os("VRAMKIT_SEALING").is_some() {
        return;
    }
    let other = if gpu().is_cpu() { "batched" } else { "chained" };
    let exe = std::env::current_exe().expect("the test binary's path");
    // `it::tier` -> the filter `tier::`, which names the module's tests.
    let filter = format!("{}::", module.split_once("::").map_or(module, |(_, m)| m));
    let out = std::process::Command::new(exe)
        .env("VRAMKIT_SEALING", other)
        .args(["--test-threads", "2", filter.as_str()])
        .output()
        .expect("the test binary runs again");
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "the suite failed with VRAMKIT_SEALING={other}:\n{text}"
    );
    assert!(
        text.contains("test result: ok"),
        "the child ran no tests:\n{text}"
    );
}
