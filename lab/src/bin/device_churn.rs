//! How many devices one process can make and let go of on this adapter: the question the
//! 10-minute soak with losses raised on NVIDIA, whose driver refused the 124th device
//! (issue 61). Each mode repeats one cycle until a device is refused or `N` cycles pass:
//!
//! ```text
//! cargo run --release -p vramkit-lab --bin device_churn -- <mode> [N]
//!   wgpu-drop      plain wgpu: request a device, drop it
//!   wgpu-destroy   plain wgpu: request a device, Device::destroy, drop it
//!   wgpu-instance  plain wgpu: a new instance, its adapter and a device each cycle
//!   gpu            Gpu::headless, drop it (no arena, no kernels)
//!   vramkit        Runtime::headless, drop it
//!   vramkit-lost   one Runtime: Device::destroy, Runtime::recover (a soak cycle)
//!   vramkit-marked one Runtime: Gpu::mark_lost, Runtime::recover (the soak's other cycle)
//!   vramkit-busy   as vramkit-lost, with 64 MiB allocated and kernels in flight at the loss
//! ```
//! Prints `cycles: n`, `refused_at: n` (0 if none) and the process's threads and open
//! files at the end, so that a leak of devices shows as a count; exits 1 when a device
//! was refused or the threads grew by more than two after the first cycle (a driver's
//! threads of devices that were never let go: lavapipe's too).

use std::time::Instant;

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "vramkit-lost".into());
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(300);
    let start = Instant::now();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapter = pollster::block_on(instance.request_adapter(&Default::default()));
    let mut refused_at = 0;
    let mut runtime = None;
    let mut cycles = 0;
    let count = |dir: &str| std::fs::read_dir(dir).map_or(0, |d| d.count());
    let mut threads_after_first = 0;
    for i in 1..=n {
        let result: Result<(), String> = match mode.as_str() {
            "wgpu-drop" | "wgpu-destroy" => {
                let adapter = adapter.as_ref().map_err(|e| e.to_string());
                adapter.and_then(|a| {
                    let (device, _queue) =
                        pollster::block_on(a.request_device(&Default::default()))
                            .map_err(|e| e.to_string())?;
                    if mode == "wgpu-destroy" {
                        device.destroy();
                    }
                    Ok(())
                })
            }
            "wgpu-instance" => {
                let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
                    backends: wgpu::Backends::VULKAN,
                    ..wgpu::InstanceDescriptor::new_without_display_handle()
                });
                pollster::block_on(instance.request_adapter(&Default::default()))
                    .map_err(|e| e.to_string())
                    .and_then(|a| {
                        pollster::block_on(a.request_device(&Default::default()))
                            .map(drop)
                            .map_err(|e| e.to_string())
                    })
            }
            "gpu" => vramkit::Gpu::headless()
                .map(drop)
                .map_err(|e| e.to_string()),
            "vramkit" => vramkit::Runtime::headless()
                .map(drop)
                .map_err(|e| e.to_string()),
            "vramkit-lost" | "vramkit-marked" | "vramkit-busy" => {
                let rt = match runtime.take() {
                    Some(rt) => Ok(rt),
                    None => vramkit::Runtime::headless(),
                };
                rt.and_then(|mut rt| {
                    let busy = if mode == "vramkit-busy" {
                        busy(&rt).map_err(|e| {
                            vramkit::Error::misuse(vramkit::Misuse::Other, e.to_string(), "")
                        })?
                    } else {
                        None
                    };
                    if mode != "vramkit-marked" {
                        rt.gpu().device().destroy();
                    }
                    drop(busy);
                    rt.gpu().mark_lost("device_churn");
                    let r = rt.recover().map(drop);
                    runtime = Some(rt);
                    r
                })
                .map_err(|e| e.to_string())
            }
            other => {
                eprintln!("unknown mode {other}");
                std::process::exit(2);
            }
        };
        if let Err(e) = result {
            eprintln!("cycle {i}: {e}");
            refused_at = i;
            break;
        }
        cycles = i;
        if i == 1 {
            threads_after_first = count("/proc/self/task");
        }
    }
    println!("mode: {mode}");
    println!("cycles: {cycles}");
    println!("refused_at: {refused_at}");
    println!("threads: {}", count("/proc/self/task"));
    println!("open_files: {}", count("/proc/self/fd"));
    println!("thread_names: {}", thread_names());
    println!("seconds: {:.1}", start.elapsed().as_secs_f64());
    let threads = count("/proc/self/task");
    if refused_at > 0 || threads > threads_after_first + 2 {
        eprintln!(
            "devices were not let go: {threads} threads after {cycles} cycles, \
             {threads_after_first} after the first"
        );
        std::process::exit(1);
    }
}

/// 64 MiB allocated and ten fills of it submitted, not waited for: work in flight at the
/// loss, as in the soak.
fn busy(rt: &vramkit::Runtime) -> vramkit::Result<Option<vramkit::Allocation>> {
    let y = rt.arena().alloc(64 << 20, "busy")?;
    let mut batch = rt.kernels().batch();
    for i in 0..10 {
        batch.fill(i as f32, (&y, 16 << 20))?;
    }
    batch.submit()?;
    Ok(Some(y))
}

/// The names of this process's threads, counted (`/proc/self/task/*/comm`).
fn thread_names() -> String {
    let mut names = std::collections::BTreeMap::<String, u32>::new();
    if let Ok(tasks) = std::fs::read_dir("/proc/self/task") {
        for t in tasks.flatten() {
            let name = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            *names.entry(name.trim().to_string()).or_default() += 1;
        }
    }
    names
        .iter()
        .map(|(n, c)| format!("{n} x{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}
