//! Two processes on one GPU: this one keeps a large cache under a live budget
//! (`Budget::FractionOfAvailable(0.9)`) and keeps working, while a second process (this
//! program again, `--neighbour`) takes half of the GPU a gigabyte at a time and later
//! lets it go. The first gives its cache back as the driver's budget shrinks and never
//! runs out of memory; its results are checked every iteration.
//!
//! ```text
//! cargo run --release --example live_budget
//! ```
//!
//! `--retrying-neighbour` starts a neighbour that does not look at the driver's free
//! memory first: it asks for each gigabyte and retries when refused, printing each
//! refusal with the driver's reading and whether its device is still alive. The
//! neighbour alone (`--neighbour BYTES HOLD_S --retry`) takes `--probe` (after its 500th
//! refusal: other sizes, the driver's own allocation, a new device) and `--arena` (its
//! memory through a vramkit arena).
//!
//! Needs a driver that reports its budget (`VK_EXT_memory_budget`: NVIDIA, AMD, Intel);
//! elsewhere (lavapipe) it says so and runs the working loop alone. Prints `name: value`
//! lines, among them `oom_errors` (the first process's), `wrong_results`,
//! `budget_before_gib`, `budget_min_gib`, `neighbour_gib` and `cache_given_back_gib`.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use vramkit::arena::Budget;
use vramkit::kernels::Reduce;
use vramkit::{Error, Gpu, Result, Runtime, RuntimeConfig};

const GIB: u64 = 1 << 30;

fn gib(b: u64) -> f64 {
    b as f64 / GIB as f64
}

/// The second process: takes `bytes` in 1 GiB buffers (retrying while the GPU is full),
/// holds them for `hold` seconds, then exits. A `polite` one asks only for what the
/// driver says is free; the other asks and retries when refused. With `probe`, the 500th
/// refusal is followed by two questions: does the same device give a quarter of the size,
/// and does a new device on the same adapter give the whole size?
fn neighbour(bytes: u64, hold: f64, polite: bool, probe: bool) -> Result<()> {
    let gpu = Gpu::headless()?;
    let step = GIB.min(gpu.limits().max_buffer_size);
    let mut held = Vec::new();
    let (mut taken, mut refusals) = (0, 0u64);
    let start = Instant::now();
    while taken < bytes && start.elapsed() < Duration::from_secs(120) {
        let size = step.min(bytes - taken);
        // A polite neighbour: it takes only what the driver says is free, with 1 GiB to
        // spare. One that retries refused allocations gets stuck on NVIDIA's driver: once
        // refused, the process's allocations of that size stay refused with the memory
        // free (BENCHMARKS.md, Several GPUs in one host).
        let free = gpu.driver_memory().map_or(u64::MAX, |m| m.available());
        if polite && free < size + GIB {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        }
        match try_buffer(&gpu, size, "the neighbour's allocation") {
            Ok(buffer) => {
                // Touch it, so the memory is really taken (queued; not waited for: the
                // first process keeps its GPU busy, and each wait would queue behind it).
                let mut encoder = gpu.device().create_command_encoder(&Default::default());
                encoder.clear_buffer(&buffer, 0, None);
                gpu.submit([encoder.finish()]);
                held.push(buffer);
                taken += size;
                println!(
                    "neighbour: holding {taken} after {:.2} s",
                    start.elapsed().as_secs_f64()
                );
            }
            Err(e) => {
                refusals += 1;
                // The first refusals in full, then every hundredth.
                if refusals <= 3 || refusals % 100 == 0 {
                    let m = gpu.driver_memory();
                    println!(
                        "neighbour: allocation {refusals} refused at {taken} after {:.2} s \
                         (driver: usage {}, budget {}; device {}): {e}",
                        start.elapsed().as_secs_f64(),
                        m.map_or("-".into(), |m| format!("{:.2} GiB", gib(m.usage))),
                        m.map_or("-".into(), |m| format!("{:.2} GiB", gib(m.budget))),
                        gpu.lost()
                            .map_or("alive".into(), |why| format!("lost: {why}")),
                    );
                }
                if probe && refusals == 500 {
                    probe_after_refusals(&gpu, size);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    gpu.wait_idle()?;
    println!(
        "neighbour: done {taken} after {:.2} s, {refusals} refusals",
        start.elapsed().as_secs_f64()
    );
    std::thread::sleep(Duration::from_secs_f64(hold));
    drop(held);
    Ok(())
}

/// A neighbour that takes `bytes` through a vramkit arena of its own (no budget), 64 MiB
/// an allocation, retrying when refused, holds them for `hold` seconds and exits: whether
/// a vramkit process that was refused once gets stuck as a plain wgpu one does (on the
/// H200 it did: BENCHMARKS.md, Several GPUs in one host).
fn arena_neighbour(bytes: u64, hold: f64) -> Result<()> {
    let gpu = Gpu::headless()?;
    let mut config = RuntimeConfig::default();
    config.arena.budget = Budget::Unlimited;
    let rt = Runtime::new(&gpu, config)?;
    let piece = 64u64 << 20;
    let (mut held, mut taken, mut refusals) = (Vec::new(), 0, 0u64);
    let start = Instant::now();
    while taken < bytes && start.elapsed() < Duration::from_secs(20) {
        match rt.arena().alloc(piece, "neighbour") {
            Ok(a) => {
                held.push(a);
                taken += piece;
                if taken.is_multiple_of(8 * GIB) {
                    println!(
                        "neighbour: holding {taken} after {:.2} s",
                        start.elapsed().as_secs_f64()
                    );
                }
            }
            Err(e) => {
                refusals += 1;
                if refusals <= 2 || refusals % 100 == 0 {
                    println!(
                        "neighbour: allocation {refusals} refused at {taken} after {:.2} s: {e}",
                        start.elapsed().as_secs_f64()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let s = rt.arena().stats();
    println!(
        "neighbour: done {taken} after {:.2} s, {refusals} refusals, {} blocks",
        start.elapsed().as_secs_f64(),
        s.blocks
    );
    std::thread::sleep(Duration::from_secs_f64(hold));
    Ok(())
}

/// A neighbour's buffer of `size` on `gpu`, or why not (a refusal names `during`).
fn try_buffer(gpu: &Gpu, size: u64, during: &str) -> std::result::Result<wgpu::Buffer, Error> {
    gpu.scoped(during, || {
        gpu.device().create_buffer(&wgpu::BufferDescriptor {
            label: Some("neighbour"),
            size,
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        })
    })
}

/// Asks the Vulkan driver itself (beneath wgpu and its allocator) for `size` bytes of
/// device-local memory on `gpu`'s device, and gives them back at once.
#[cfg(vulkan_hal)]
fn raw_allocation(gpu: &Gpu, size: u64) -> String {
    use ash::vk;
    // SAFETY: one allocation on the raw device, freed before returning; nothing of
    // wgpu's is created or destroyed, as `as_hal` requires.
    unsafe {
        let Some(hal) = gpu.device().as_hal::<wgpu::hal::api::Vulkan>() else {
            return "not a Vulkan device".into();
        };
        let instance = hal.shared_instance().raw_instance();
        let props = instance.get_physical_device_memory_properties(hal.raw_physical_device());
        let local = (0..props.memory_type_count).find(|&i| {
            props.memory_types[i as usize]
                .property_flags
                .contains(vk::MemoryPropertyFlags::DEVICE_LOCAL)
        });
        let Some(index) = local else {
            return "no device-local memory type".into();
        };
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(index);
        match hal.raw_device().allocate_memory(&info, None) {
            Ok(memory) => {
                hal.raw_device().free_memory(memory, None);
                "given".into()
            }
            Err(e) => format!("refused ({e:?})"),
        }
    }
}

/// No Vulkan backend in this build: nothing to ask.
#[cfg(not(vulkan_hal))]
fn raw_allocation(_gpu: &Gpu, _size: u64) -> String {
    "not built with Vulkan".into()
}

/// Which layer keeps refusing: the same device for a smaller buffer, or a new device.
fn probe_after_refusals(gpu: &Gpu, size: u64) {
    let verdict = |r: &std::result::Result<wgpu::Buffer, Error>| match r {
        Ok(_) => "given".to_string(),
        Err(e) => format!("refused ({e})"),
    };
    let smaller = try_buffer(gpu, size / 4, "a probe");
    println!(
        "neighbour: probe: same device, {} bytes: {}",
        size / 4,
        verdict(&smaller)
    );
    let again = try_buffer(gpu, size, "a probe");
    println!(
        "neighbour: probe: same device, {size} bytes again: {}",
        verdict(&again)
    );
    for bytes in [
        size,
        size + (64 << 10),
        size - (64 << 10),
        size / 2,
        2 * size,
    ] {
        println!(
            "neighbour: probe: same device, {bytes} bytes from the driver itself \
             (vkAllocateMemory): {}",
            raw_allocation(gpu, bytes)
        );
    }
    match Gpu::headless() {
        Ok(fresh) => {
            let whole = try_buffer(&fresh, size, "a probe");
            println!(
                "neighbour: probe: a new device, {size} bytes: {}",
                verdict(&whole)
            );
        }
        Err(e) => println!("neighbour: probe: no new device: {e}"),
    }
}

fn main() -> std::result::Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--neighbour") {
        let bytes = args.get(i + 1).and_then(|v| v.parse().ok()).unwrap_or(GIB);
        let hold = args.get(i + 2).and_then(|v| v.parse().ok()).unwrap_or(3.0);
        let polite = !args.iter().any(|a| a == "--retry");
        let probe = args.iter().any(|a| a == "--probe");
        if args.iter().any(|a| a == "--arena") {
            return Ok(arena_neighbour(bytes, hold)?);
        }
        return Ok(neighbour(bytes, hold, polite, probe)?);
    }
    let gpu = Gpu::headless()?;
    println!("device: {}", gpu.describe());
    let mut config = RuntimeConfig::default();
    config.arena.budget = Budget::FractionOfAvailable(0.9);
    config.arena.budget_refresh = Duration::from_millis(20);
    let rt = Runtime::new(&gpu, config)?;
    let arena = rt.arena();
    let reading = gpu.driver_memory();
    let total = reading
        .map(|m| m.total)
        .or(gpu.device_memory())
        .unwrap_or(2 * GIB);
    match reading {
        Some(m) => println!(
            "driver: {} reports budget {:.1} GiB, usage {:.1} GiB of {:.1} GiB",
            m.source,
            gib(m.budget),
            gib(m.usage),
            gib(m.total)
        ),
        None => println!(
            "driver: reports no budget (no VK_EXT_memory_budget): the live budget is the \
             fixed fraction, and no neighbour is started"
        ),
    }
    let budget_before = arena.refresh_budget()?.unwrap_or(0);
    println!("budget_before_gib: {:.2}", gib(budget_before));

    // A large cache: 60 % of the device, allocated and dropped (kept for reuse).
    let piece = (256u64 << 20).min(gpu.limits().max_storage_buffer_binding_size / 4 * 4);
    let cache = (total as f64 * 0.6) as u64 / piece * piece;
    {
        let mut held = Vec::new();
        for i in 0..cache / piece {
            held.push(arena.alloc(piece, &format!("cache {i}"))?);
        }
    }
    arena.synchronize()?;
    let cached_before = arena.stats().reserved;
    println!("cached_before_gib: {:.2}", gib(cached_before));

    // The neighbour: half of the device.
    let want = if reading.is_some() {
        total / 2 / GIB * GIB
    } else {
        0
    };
    let mut child = if want > 0 {
        Some(
            Command::new(std::env::current_exe()?)
                .args(["--neighbour", &want.to_string(), "4"])
                .args(
                    args.iter()
                        .any(|a| a == "--retrying-neighbour")
                        .then_some("--retry"),
                )
                .stdout(Stdio::piped())
                .spawn()?,
        )
    } else {
        None
    };
    let progress = child.as_mut().and_then(|c| c.stdout.take()).map(|out| {
        std::thread::spawn(move || {
            let mut last = 0u64;
            for line in BufReader::new(out).lines().map_while(std::io::Result::ok) {
                if let Some(v) = line.strip_prefix("neighbour: holding ") {
                    last = v
                        .split(' ')
                        .next()
                        .and_then(|b| b.parse().ok())
                        .unwrap_or(last);
                }
                let every_8_gib =
                    line.starts_with("neighbour: holding") && last.is_multiple_of(8 * GIB);
                if line.starts_with("neighbour: done") || line.contains("refused") || every_8_gib {
                    println!("{line}");
                }
            }
            last
        })
    });

    // The working loop: 10 % of the device in 256 MiB pieces, filled and summed on the
    // GPU, checked, dropped; until the neighbour has come and gone (or 6 s alone).
    let working = ((total as f64 * 0.1) as u64 / piece).max(1);
    let (mut ooms, mut wrong, mut iterations) = (0u64, 0u64, 0u64);
    let mut budget_min = budget_before;
    let mut reserved_min = u64::MAX;
    let start = Instant::now();
    loop {
        let value = (iterations % 7) as f32 + 1.0;
        let mut pieces = Vec::new();
        for _ in 0..working {
            match rt.alloc::<f32>((piece / 4) as usize, "work") {
                Ok(p) => pieces.push(p),
                Err(Error::OutOfMemory(e)) => {
                    ooms += 1;
                    println!("OOM: {e}");
                }
                Err(e) => return Err(e.into()),
            }
        }
        let sums = rt.alloc::<f32>(pieces.len().max(1), "sums")?;
        let totals: Vec<_> = (0..pieces.len())
            .map(|_| rt.alloc::<f32>(1, "total"))
            .collect::<Result<_>>()?;
        let mut batch = rt.batch();
        for (p, t) in pieces.iter().zip(&totals) {
            batch.fill(value, p)?.reduce(Reduce::Max, p, t)?;
        }
        batch.submit()?;
        for t in &totals {
            if rt.download(t)?[0] != value {
                wrong += 1;
            }
        }
        drop((pieces, sums, totals));
        arena.maintain();
        // An application does other things between steps; the neighbour's work gets the
        // GPU meanwhile.
        std::thread::sleep(Duration::from_millis(2));
        iterations += 1;
        let budget = arena.budget().unwrap_or(0);
        budget_min = budget_min.min(budget);
        reserved_min = reserved_min.min(arena.stats().reserved);
        let done = match child.as_mut() {
            Some(c) => c.try_wait().ok().flatten().is_some(),
            None => start.elapsed() > Duration::from_secs(6),
        };
        if iterations % 50 == 0 || done {
            let m = gpu.driver_memory();
            println!(
                "t {:5.2} s: budget {:6.2} GiB, reserved {:6.2} GiB, driver budget {}, usage {}",
                start.elapsed().as_secs_f64(),
                gib(budget),
                gib(arena.stats().reserved),
                m.map_or("-".into(), |m| format!("{:.2} GiB", gib(m.budget))),
                m.map_or("-".into(), |m| format!("{:.2} GiB", gib(m.usage)))
            );
        }
        if done || start.elapsed() > Duration::from_secs(120) {
            break;
        }
    }
    let neighbour_took = progress.and_then(|h| h.join().ok()).unwrap_or(0);
    std::thread::sleep(Duration::from_millis(100));
    let budget_after = arena.refresh_budget()?.unwrap_or(0);
    println!("iterations: {iterations}");
    println!("neighbour_gib: {:.2}", gib(neighbour_took));
    println!("neighbour_wanted_gib: {:.2}", gib(want));
    println!("budget_min_gib: {:.2}", gib(budget_min));
    println!("budget_after_gib: {:.2}", gib(budget_after));
    println!(
        "cache_given_back_gib: {:.2}",
        gib(cached_before.saturating_sub(reserved_min))
    );
    println!("oom_errors: {ooms}");
    println!("wrong_results: {wrong}");
    println!("\n{}", arena.summary());
    if ooms > 0 || wrong > 0 || neighbour_took < want {
        std::process::exit(1);
    }
    Ok(())
}
