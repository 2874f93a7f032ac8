//! Writes the arena's state as JSON and as an SVG picture of every block (used ranges
//! coloured by label, free ranges grey, ranges still in use by the GPU orange).
//!
//! ```text
//! cargo run --release --example arena_dump [OUT_DIR]     # default: $TMPDIR/vramkit-arena-dump
//! ```

use rand::Rng;
use vramkit::{Arena, ArenaConfig, Gpu};

fn main() {
    // Errors are printed with Display: each says what was asked and what to do.
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    // Outside the working tree unless asked: a demo should not leave files in a checkout.
    let out = std::env::args()
        .nth(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("vramkit-arena-dump"));
    let gpu = Gpu::headless()?;
    let arena = Arena::new(
        &gpu,
        ArenaConfig {
            name: "dump-demo".into(),
            ..Default::default()
        },
    )?;
    let mut rng = rand::thread_rng();
    let labels = [
        "weights",
        "activations",
        "gradients",
        "optimizer state",
        "scratch",
    ];
    let mut live = Vec::new();
    for i in 0..300 {
        let size = rng.gen_range(4u64 << 10..2 << 20);
        live.push(arena.alloc(size, labels[i % labels.len()])?);
    }
    // Free a random half so the picture shows holes (and some ranges still pending).
    for _ in 0..150 {
        let i = rng.gen_range(0..live.len());
        live.swap_remove(i);
    }
    arena.maintain();
    std::fs::create_dir_all(&out)?;
    let json = out.join("arena.json");
    let svg = out.join("arena.svg");
    std::fs::write(&json, arena.to_json())?;
    std::fs::write(&svg, arena.to_svg())?;
    println!("{}", arena.summary());
    println!("wrote {} and {}", json.display(), svg.display());
    Ok(())
}
