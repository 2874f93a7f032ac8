//! A camera flies over, then zooms deep into, a virtual texture: a 32768 x 32768
//! Mandelbrot image computed tile by tile (`--procedural` for the 2^20 x 2^20 test
//! pattern, `--pack` for a pack file), rendered each frame by a real render pass whose fragment shader calls
//! `vt_sample` and `vt_feedback`, with a tile cache far smaller than what the path visits.
//! It writes a contact sheet of four labelled frames (`vt_contact.svg` in the working
//! directory, the frames as PNG inside it; `--out` elsewhere) and prints `name: value`
//! lines; after the camera stops it compares every pixel with the CPU reference sampler.
//!
//! ```text
//! cargo run --release --example virtual_texture                      # the Mandelbrot image
//! cargo run --release --example virtual_texture -- --procedural      # the 2^20 test pattern
//! cargo run --release --example virtual_texture -- --pack big.vtpack # a pack file
//! options: --frames N  --size WxH  --slots N  --max-uploads N (per frame)  --fps N (0: unpaced)
//!          --out contact.svg
//! ```
//!
//! Frames are paced at `--fps` (60 by default), as an app waiting for the display is; the
//! tile source's threads work in the time between. Once the camera rests, the example asks
//! for every tile of its view (`VirtualTexture::prefetch`) and settles: the check that
//! follows holds on any speed of GPU, not only where the GPU is slow beside the CPU that
//! makes the tiles.

use std::sync::Arc;
use std::time::Instant;

use vramkit::vt::{
    Mandelbrot, PackFile, ProceduralSource, ReferenceSampler, TileSource, VirtualTexture, VtConfig,
};

/// Texels a side of the demo's Mandelbrot.
const MANDELBROT: u32 = 1 << 15;
use vramkit::{Arena, Gpu};

#[path = "support/vt_demo.rs"]
mod vt_demo;

struct Args {
    pack: Option<String>,
    procedural: bool,
    frames: u32,
    size: (u32, u32),
    slots: u32,
    max_uploads: u32,
    fps: u32,
    out: std::path::PathBuf,
}

fn args() -> Result<Args, Box<dyn std::error::Error>> {
    let mut a = Args {
        pack: None,
        procedural: false,
        frames: 240,
        size: (512, 384),
        slots: 256,
        max_uploads: VtConfig::default().max_uploads_per_frame,
        fps: 60,
        out: "vt_contact.svg".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let mut v = || it.next().ok_or(format!("{k} needs a value"));
        match k.as_str() {
            "--pack" => a.pack = Some(v()?),
            "--procedural" => a.procedural = true,
            "--frames" => a.frames = v()?.parse()?,
            "--slots" => a.slots = v()?.parse()?,
            "--max-uploads" => a.max_uploads = v()?.parse()?,
            "--fps" => a.fps = v()?.parse()?,
            "--out" => a.out = v()?.into(),
            "--size" => {
                let s = v()?;
                let (w, h) = s.split_once('x').ok_or("--size is WxH")?;
                a.size = (w.parse::<u32>()?.next_multiple_of(64), h.parse()?);
            }
            _ => return Err(format!("unknown argument {k}").into()),
        }
    }
    Ok(a)
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let gpu = Gpu::headless()?;
    println!("{}", gpu.describe());
    let arena = Arena::new(&gpu, Default::default())?;
    // The camera's zoom ends on the seahorse valley of the Mandelbrot image, on the
    // pattern's and a pack's usual spot otherwise.
    let (source, target): (Arc<dyn TileSource>, [f32; 2]) = match &a.pack {
        Some(p) => (Arc::new(PackFile::open(p)?), [0.65, 0.42]),
        None if a.procedural => (
            Arc::new(ProceduralSource::new(1 << 20, 1 << 20)?),
            [0.65, 0.42],
        ),
        None => (
            Arc::new(Mandelbrot::new(MANDELBROT)?),
            Mandelbrot::uv(-0.7453, 0.1127),
        ),
    };
    let layout = source.layout();
    let config = VtConfig {
        cache_slots: a.slots,
        render_size: a.size,
        max_uploads_per_frame: a.max_uploads,
        ..Default::default()
    };
    let mut vt = VirtualTexture::new(&gpu, &arena, source.clone(), config)?;
    let demo = vt_demo::Demo::new(&gpu, &arena, &vt, a.size)?;
    let (w, h) = a.size;
    let texels = layout.width.max(layout.height) as f32;
    let coarse = (1u32 << (layout.levels - 1).min(5)) as f32 * 1.5;
    let bar = indicatif::ProgressBar::new(u64::from(a.frames));
    let mut cpu_ms = Vec::new();
    let mut shots = Vec::new();
    let mut visited = std::collections::HashSet::new();
    let start = Instant::now();
    // Every page of the view at the level it samples.
    let view_tiles = |origin: [f32; 2], scale: f32| {
        let level = layout.level_for([scale, 0.0], [0.0, scale]);
        let end = [origin[0] + scale * w as f32, origin[1] + scale * h as f32];
        layout.pages_covering(level, origin, end)
    };
    let frame_interval =
        (a.fps > 0).then(|| std::time::Duration::from_secs_f64(1.0 / f64::from(a.fps)));
    for f in 0..a.frames {
        let frame_start = Instant::now();
        let (origin, scale) = vt_demo::camera_towards(f, a.frames, a.size, texels, coarse, target);
        demo.frame(&gpu, &mut vt, origin, scale)?;
        let s = vt.stats();
        cpu_ms.push(s.cpu_ms_last);
        visited.extend(view_tiles(origin, scale));
        if [a.frames / 4, a.frames / 2, 3 * a.frames / 4].contains(&f) {
            gpu.wait_idle()?;
            let texels_per_px = scale * texels;
            let what = if f < a.frames / 2 {
                "fly-over"
            } else {
                "zooming in"
            };
            let label = format!("frame {f}: {what}, {texels_per_px:.1} texels a pixel");
            shots.push((label, demo.read(&gpu)?));
        }
        bar.inc(1);
        if let Some(rest) = frame_interval.and_then(|i| i.checked_sub(frame_start.elapsed())) {
            std::thread::sleep(rest);
        }
    }
    bar.finish_and_clear();
    let seconds = start.elapsed().as_secs_f64();

    // Settled: the resting view's tiles asked for, every requested tile arrived, rendered
    // once more, every pixel compared.
    let (origin, scale) =
        vt_demo::camera_towards(a.frames, a.frames, a.size, texels, coarse, target);
    vt.prefetch(&view_tiles(origin, scale));
    for _ in 0..4 {
        gpu.wait_idle()?;
        vt.settle(64)?;
        demo.frame(&gpu, &mut vt, origin, scale)?;
    }
    gpu.wait_idle()?;
    let last = demo.read(&gpu)?;
    let mut reference = ReferenceSampler::new(source.as_ref());
    let level = reference.level_for([scale, 0.0], [0.0, scale]);
    let mut exact = 0u64;
    for y in 0..h {
        for x in 0..w {
            let uv = [
                origin[0] + (x as f32 + 0.5) * scale,
                origin[1] + (y as f32 + 0.5) * scale,
            ];
            let want = reference.sample(uv, level)?;
            let at = ((y * w + x) * 4) as usize;
            let ok =
                (0..4).all(|c| (f32::from(last[at + c]) / 255.0 - want[c]).abs() <= 3.0 / 255.0);
            exact += u64::from(ok);
        }
    }
    let texels_per_px = scale * texels;
    let label =
        format!("settled at {texels_per_px:.1} texels a pixel, checked: {exact} exact pixels");
    shots.push((label, last));
    contact_sheet(&shots, w, h, &a.out)?;

    let s = vt.stats();
    let mut sorted = cpu_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let p99 = sorted[((sorted.len() as f64 * 0.99) as usize).min(sorted.len() - 1)];
    println!("{s}");
    println!("contact_sheet: {}", a.out.display());
    println!("frames: {}", a.frames);
    println!("seconds: {seconds:.2}");
    println!("virtual_texels: {}x{}", layout.width, layout.height);
    println!("cache_slots: {}", a.slots);
    println!("tiles_visited: {}", visited.len());
    println!(
        "oversubscription: {:.2}",
        visited.len() as f64 / f64::from(a.slots)
    );
    println!("unmapped_samples: {}", vt.unmapped_samples()?);
    println!(
        "settled_exact_fraction: {:.4}",
        exact as f64 / f64::from(w * h)
    );
    println!(
        "feedback_latency_frames_max: {}",
        s.feedback_latency_frames_max
    );
    println!("upload_wait_frames_max: {}", s.upload_wait_frames_max);
    println!("tiles_uploaded_per_frame_max: {}", s.uploads_max);
    println!("cpu_ms_per_frame_p99: {p99:.3}");
    println!("hit_rate: {:.3}", s.hit_rate());
    println!("load_errors: {}", s.load_errors);
    // A still camera with a cache that holds its view must end exact (bias 0: not
    // degraded); no sample may ever be unmapped.
    let unmapped = vt.unmapped_samples()?;
    if unmapped > 0 || (s.bias == 0 && exact < u64::from(w * h) * 99 / 100) {
        return Err(format!(
            "unmapped samples {unmapped}, settled exact {exact} of {}",
            w * h
        )
        .into());
    }
    Ok(())
}

/// Four frames at full size, two by two, each under its label: an SVG document with the
/// frames inside as PNG (the labels are text, so no font is needed here).
fn contact_sheet(
    shots: &[(String, Vec<u8>)],
    w: u32,
    h: u32,
    out: &std::path::Path,
) -> Result<(), Box<dyn std::error::Error>> {
    let caption = 24;
    let (cw, ch) = (w, h + caption);
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" \
         font-family=\"sans-serif\" font-size=\"14\">\n<rect width=\"100%\" height=\"100%\" fill=\"#10131c\"/>\n",
        2 * cw,
        2 * ch
    );
    for (k, (label, shot)) in shots.iter().take(4).enumerate() {
        let (ox, oy) = ((k as u32 % 2) * cw, (k as u32 / 2) * ch);
        let mut png = Vec::new();
        image::write_buffer_with_format(
            &mut std::io::Cursor::new(&mut png),
            shot,
            w,
            h,
            image::ExtendedColorType::Rgba8,
            image::ImageFormat::Png,
        )?;
        svg += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"#d8dce8\">{}</text>\n<image x=\"{ox}\" y=\"{}\" \
             width=\"{w}\" height=\"{h}\" href=\"data:image/png;base64,{}\"/>\n",
            ox + 6,
            oy + 17,
            label.replace('&', "&amp;").replace('<', "&lt;"),
            oy + caption,
            base64(&png)
        );
    }
    svg += "</svg>\n";
    std::fs::write(out, svg)?;
    Ok(())
}

/// Standard base64 (RFC 4648, padded), for the PNGs inside the SVG.
fn base64(bytes: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ABC[((n >> shift) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
