//! Allocates past the device's physical memory with no budget set, to see what the driver
//! does: the arena must return a typed out-of-memory error caught from the driver (not
//! from a budget), stay usable, and give the memory back on `trim`.
//!
//! Meant for a real GPU (on a CPU adapter "device memory" is the host's RAM):
//!
//! ```text
//! cargo run --release -p vramkit-lab --bin driver_oom -- [CHUNK_MIB]     # default 1024
//! ```

use vramkit::arena::Limit;
use vramkit::{Arena, ArenaConfig, Error, Gpu};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let chunk: u64 = std::env::args().nth(1).map_or(Ok(1024), |s| s.parse())? << 20;
    let gpu = Gpu::headless()?;
    println!("{}", gpu.describe());
    if gpu.is_cpu() {
        return Err("a CPU adapter's device memory is host RAM: run this on a GPU".into());
    }
    let arena = Arena::new(&gpu, ArenaConfig::default())?;
    let mut held = Vec::new();
    let error = loop {
        match arena.alloc(chunk, "fill") {
            Ok(a) => {
                // Touch it, so a lazily backing driver has to back it.
                gpu.queue()
                    .write_buffer(a.buffer(), a.offset(), &[1u8; 256]);
                held.push(a);
            }
            Err(e) => break e,
        }
        if held.len() > 4096 {
            return Err("4096 allocations and no out-of-memory: stopping".into());
        }
    };
    let reserved_full = arena.stats().reserved;
    println!("allocations_before_oom: {}", held.len());
    println!("reserved_at_oom_bytes: {reserved_full}");
    println!("error: {error}");
    let kind = match &error {
        Error::OutOfMemory(o) if o.limit == Limit::Device => "device",
        Error::OutOfMemory(o) if o.limit == Limit::MaxBufferSize => "max_buffer_size",
        Error::OutOfMemory(_) => "other_limit",
        Error::DeviceLost { .. } => "device_lost",
        _ => "other",
    };
    println!("oom_kind: {kind}");
    // Still usable: give everything back, trim, allocate again.
    drop(held);
    arena.synchronize()?;
    let released = arena.trim();
    println!("trimmed_bytes: {released}");
    println!("reserved_after_trim_bytes: {}", arena.stats().reserved);
    let again = arena.alloc(chunk, "after");
    println!("alloc_after_trim_ok: {}", again.is_ok());
    if kind != "device" || again.is_err() {
        return Err("expected a typed device out-of-memory and a usable arena".into());
    }
    Ok(())
}
