//! Reduces a file several times larger than its device window on the GPU.
//!
//! Writes a file of f32 values, memory-maps it (memmap2), streams it through a window of
//! 3 device chunks (upload chunk k+1 while chunk k is summed and chunk k-1's partial comes
//! back), checks the total against the CPU, and compares the rate with a plain upload of
//! the same bytes in the same run.
//!
//! cargo run --release --example stream_file -- [--mib N] [--chunk-mib N] [--path FILE]

use std::io::{BufWriter, Write};
use std::time::Instant;

use vramkit::kernels::{Kernels, Reduce};
use vramkit::stream::{Pipeline, PipelineConfig, Source, Uploader};
use vramkit::{fmt_bytes, Arena, Gpu};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn value(i: u64) -> f32 {
    // Deterministic values in [0, 1) that do not repeat with any chunk size.
    ((i.wrapping_mul(2654435761) >> 7) % 1_000_003) as f32 / 1_000_003.0
}

/// One-line progress bar on stderr.
fn progress(done: u64, total: u64, start: Instant) {
    let width = 40;
    let filled = (done * width / total.max(1)) as usize;
    let gbps = done as f64 / start.elapsed().as_secs_f64().max(1e-9) / 1e9;
    eprint!(
        "\r[{}{}] {:>3}% {:>6.2} GB/s",
        "#".repeat(filled),
        ".".repeat(width as usize - filled),
        done * 100 / total.max(1),
        gbps
    );
    if done == total {
        eprintln!();
    }
}

fn main() {
    // Errors are printed with Display: each says what was asked and what to do.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    env_logger::init();
    let gpu = Gpu::headless()?;
    println!("{}", gpu.describe());
    // The file is 32x (CPU adapters) or 85x (GPUs) the 3-chunk device window.
    let (default_mib, default_chunk) = if gpu.is_cpu() { (96, 1) } else { (4096, 16) };
    let mib: u64 = arg("--mib").map_or(Ok(default_mib), |s| s.parse())?;
    let chunk_mib: u64 = arg("--chunk-mib").map_or(Ok(default_chunk), |s| s.parse())?;
    let path = arg("--path").map_or_else(
        || std::env::temp_dir().join("vramkit-stream.f32"),
        std::path::PathBuf::from,
    );
    let bytes = mib << 20;
    let elements = bytes / 4;

    // The file, written once.
    {
        let mut w = BufWriter::with_capacity(8 << 20, std::fs::File::create(&path)?);
        let mut buf = Vec::with_capacity(1 << 20);
        for start in (0..elements).step_by(1 << 18) {
            buf.clear();
            for i in start..(start + (1 << 18)).min(elements) {
                buf.extend_from_slice(&value(i).to_le_bytes());
            }
            w.write_all(&buf)?;
        }
        w.flush()?;
    }
    let file = std::fs::File::open(&path)?;
    // SAFETY: the file was written above and nothing else modifies it while mapped.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    let want: f64 = bytemuck::cast_slice::<u8, f32>(&map)
        .iter()
        .map(|&v| v as f64)
        .sum();

    let arena = Arena::new(&gpu, Default::default())?;
    let kernels = Kernels::new(&arena)?;
    let uploader = Uploader::new(&gpu, Default::default());
    let config = PipelineConfig {
        chunk_bytes: chunk_mib << 20,
        slots: 3,
        result_bytes: 4,
    };
    let mut pipeline = Pipeline::new(&kernels, &uploader, config)?;

    // Warm-up pass (staging ring, pipelines), then the measured one.
    let mut run = |show: bool| -> vramkit::Result<(f64, vramkit::stream::PipelineReport)> {
        let mut partials = vec![f64::NAN; bytes.div_ceil(config.chunk_bytes) as usize];
        let start = Instant::now();
        let report = pipeline.run(
            Source::Bytes(&map),
            |batch, chunk, n, result| {
                batch.reduce(Reduce::Sum, (chunk, n / 4), (result, 1))?;
                Ok(())
            },
            |k, result| {
                partials[k as usize] =
                    f32::from_le_bytes([result[0], result[1], result[2], result[3]]) as f64;
                if show {
                    progress((k + 1) * config.chunk_bytes.min(bytes), bytes, start);
                }
            },
        )?;
        Ok((partials.iter().sum(), report))
    };
    run(false)?;
    let (got, report) = run(true)?;

    // The same bytes through a plain upload into the window, same chunking.
    let window = arena.alloc(config.chunk_bytes, "upload window")?;
    let start = Instant::now();
    for piece in map.chunks(config.chunk_bytes as usize) {
        uploader.upload(&window, 0, piece)?;
    }
    gpu.wait_idle()?;
    let upload_gbps = bytes as f64 / start.elapsed().as_secs_f64() / 1e9;

    let rel = (got - want).abs() / want.abs().max(1.0);
    println!("file: {} ({})", path.display(), fmt_bytes(bytes));
    println!("file_bytes: {bytes}");
    println!("window_bytes: {}", report.window_bytes);
    println!(
        "file_over_window: {:.1}",
        bytes as f64 / report.window_bytes as f64
    );
    println!(
        "device_peak_reserved: {}",
        fmt_bytes(arena.stats().peak_reserved)
    );
    println!("chunks: {}", report.chunks);
    println!("stream_gbps: {:.2}", report.gbps());
    println!("upload_gbps: {upload_gbps:.2}");
    println!("stream_vs_upload: {:.2}", report.gbps() / upload_gbps);
    let st = uploader.stats();
    println!(
        "staging: {} buffers created ({}), {} waits for a free one",
        st.staging_created,
        fmt_bytes(st.staging_bytes),
        st.waits
    );
    println!("sum: gpu {got:.3} cpu {want:.3} (relative error {rel:.1e})");
    drop(map);
    let _ = std::fs::remove_file(&path);
    if rel > 1e-5 {
        return Err(format!("the GPU sum differs from the CPU by {rel:e}").into());
    }
    println!("result: OK");
    Ok(())
}
