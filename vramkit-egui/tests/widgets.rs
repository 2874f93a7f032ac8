//! The widgets as an egui user tests them: rendered headless by `egui_kittest` with
//! egui-wgpu on a real adapter (lavapipe in CI), driven by pointer and zoom events, the
//! frames read back and checked against CPU references on random inputs.

use std::sync::Arc;

use egui_kittest::kittest::Queryable;
use egui_kittest::wgpu::{create_render_state, default_wgpu_setup, WgpuTestRenderer};
use egui_kittest::Harness;
use rand::{Rng, SeedableRng};
use vramkit::vt::{ImageSource, ProceduralSource, ReferenceSampler, TileSource, VtConfig};
use vramkit_egui::{
    level_for, pixel_uv, runtime_for, InspectorState, MemoryInspector, VirtualImage,
    VirtualImageState,
};

/// How far a pixel may be from the reference, in 8-bit steps, beyond the filter's slack
/// at that pixel (`ReferenceSampler::filter_slack`: GPUs keep the bilinear weights to 8
/// sub-texel bits, Vulkan's `subTexelPrecisionBits`, where the reference's are `f32`):
/// one for rounding and half of one to spare.
const TOLERANCE: f32 = 1.5;

/// The app under test: a virtual image and where egui put it.
struct App {
    image: VirtualImageState,
    rect: egui::Rect,
}

fn render_state() -> egui_wgpu::RenderState {
    create_render_state(
        default_wgpu_setup(),
        egui_wgpu::RendererOptions::PREDICTABLE,
    )
}

fn rng() -> rand::rngs::SmallRng {
    let seed = std::env::var("VRAMKIT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (VRAMKIT_SEED={seed} repeats it)");
    rand::rngs::SmallRng::seed_from_u64(seed)
}

fn small_cache() -> VtConfig {
    VtConfig {
        cache_slots: 256,
        pinned_tiles: 21,
        render_size: (640, 480),
        ..Default::default()
    }
}

/// A harness showing `app`'s image (without its overlays) over the whole window, every
/// step rendered (each step is one frame of the virtual texture).
fn harness(rs: &egui_wgpu::RenderState, app: App, size: egui::Vec2) -> Harness<'static, App> {
    harness_with(rs, app, size, false)
}

fn harness_with(
    rs: &egui_wgpu::RenderState,
    app: App,
    size: egui::Vec2,
    overlays: bool,
) -> Harness<'static, App> {
    Harness::builder()
        .with_size(size)
        .with_pixels_per_point(1.0)
        .with_render_every_step(true)
        .with_render_cursor(false)
        .renderer(WgpuTestRenderer::from_render_state(rs.clone()))
        .build_ui_state(
            move |ui, app: &mut App| {
                let r = ui.add(VirtualImage::new(&mut app.image).overlays(overlays));
                app.rect = r.rect;
            },
            app,
        )
}

/// Steps until the image has been settled for 2 frames in a row, then until the app asks
/// for no more frames. Settled is exact: once the view rests the widget asks for every
/// tile it shows, so no sliver of a tile at the widget's edge waits for the feedback's
/// random sample to find it (CI seed 8257872261234366485 once ended with 210 pixels in
/// two rows at a coarser level when the widget left that to the feedback). The overlays
/// read the texture's figures before the frame's uploads, as an app's frame does: the
/// widget draws one frame more once settled, and the snapshot is of that frame.
fn settle(h: &mut Harness<'static, App>) -> usize {
    let mut calm = 0;
    for n in 0..400 {
        h.step();
        calm = if h.state().image.is_settled() {
            calm + 1
        } else {
            0
        };
        if calm == 2 {
            return n + h.run_ok().map_or(0, |steps| steps as usize);
        }
    }
    panic!(
        "the image did not settle in 400 frames: {}",
        h.state().image.stats()
    );
}

/// Pixels of the rendered frame inside the widget that match the CPU reference
/// (`ReferenceSampler` at the level the shader picks, the background outside the
/// image) within `tol` of 255 plus the filter's slack in every channel, and the largest
/// difference beyond the slack.
fn compare(
    image: &image::RgbaImage,
    app: &App,
    source: &dyn TileSource,
    tol: f32,
) -> (usize, usize, f32) {
    let layout = source.layout();
    let size = (layout.width, layout.height);
    let rect = app.rect;
    let (w, h) = (rect.width().round() as u32, rect.height().round() as u32);
    let view = app.image.view().expect("shown");
    let (origin, scale) = view.uv_mapping(size, [w as f32, h as f32]);
    let level = level_for(scale, size, layout.levels);
    let mut reference = ReferenceSampler::new(source);
    let (mut exact, mut worst) = (0, 0.0f32);
    let (x0, y0) = (rect.min.x.round() as u32, rect.min.y.round() as u32);
    for y in 0..h {
        for x in 0..w {
            let uv = pixel_uv(origin, scale, x, y);
            let inside = uv.iter().all(|c| (0.0..=1.0).contains(c));
            let (want, slack) = if inside {
                (
                    reference.sample(uv, level).unwrap(),
                    reference.filter_slack(uv, level).unwrap(),
                )
            } else {
                ([16.0 / 255.0, 19.0 / 255.0, 28.0 / 255.0, 1.0], [0.0; 4])
            };
            let got = image.get_pixel(x0 + x, y0 + y).0;
            // How far past the filter's own slack each pixel lands.
            let diff = (0..4)
                .map(|c| (f32::from(got[c]) - want[c] * 255.0).abs() - slack[c] * 255.0)
                .fold(0.0f32, f32::max);
            worst = worst.max(diff);
            exact += usize::from(diff <= tol);
        }
    }
    (exact, (w * h) as usize, worst)
}

#[test]
fn the_settled_frame_after_a_pan_and_a_zoom_is_the_cpu_reference() {
    let mut rng = rng();
    let rs = render_state();
    let runtime = runtime_for(&rs).unwrap();
    // A Mandelbrot of a random size around 2^17 (larger than any texture limit).
    let (w, h) = (
        rng.gen_range(100_000..200_000),
        rng.gen_range(100_000..200_000),
    );
    let source = Arc::new(ProceduralSource::new(w, h).unwrap());
    let image = VirtualImageState::new(&rs, &runtime, source.clone(), small_cache()).unwrap();
    let app = App {
        image,
        rect: egui::Rect::NOTHING,
    };
    let mut h = harness(&rs, app, egui::vec2(320.0, 240.0));
    settle(&mut h);
    let fitted = h.state().image.view().unwrap();

    // A drag by a random offset, then a pinch around a random point.
    let from = egui::pos2(rng.gen_range(100.0..220.0), rng.gen_range(80.0..160.0));
    let to = from + egui::vec2(rng.gen_range(-60.0..60.0), rng.gen_range(-60.0..60.0));
    h.hover_at(from);
    h.drag_at(from);
    h.step();
    for i in 1..=4 {
        h.hover_at(from + (to - from) * (i as f32 / 4.0));
        h.step();
    }
    h.drop_at(to);
    h.step();
    let panned = h.state().image.view().unwrap();
    assert_ne!(panned.center, fitted.center, "the drag moved the image");
    let at = egui::pos2(rng.gen_range(60.0..260.0), rng.gen_range(60.0..180.0));
    h.hover_at(at);
    h.step();
    let factor = rng.gen_range(200.0..900.0);
    h.event(egui::Event::Zoom(factor));
    h.step();
    let zoomed = h.state().image.view().unwrap();
    assert!(
        zoomed.texels_per_pixel < panned.texels_per_pixel / 100.0,
        "the pinch zoomed in: {panned:?} -> {zoomed:?}"
    );
    let frames = settle(&mut h);
    let frame = h.render().unwrap();
    let (exact, all, worst) = compare(&frame, h.state(), source.as_ref(), TOLERANCE);
    eprintln!(
        "{w}x{h} image, zoom {:.4} texels/pixel: {exact}/{all} pixels within {TOLERANCE}/255 and the \
         filter's slack of the CPU reference after {frames} frames (largest difference beyond \
         the slack {worst:.2}/255)",
        zoomed.texels_per_pixel,
        h = h_of(&source),
    );
    assert_eq!(
        exact, all,
        "every pixel is the reference's (largest difference beyond the slack {worst}/255)"
    );
    let stats = h.state().image.stats();
    assert_eq!(stats.load_errors, 0);
    assert!(stats.uploads > 0);
}

fn h_of(source: &ProceduralSource) -> u32 {
    source.layout().height
}

#[test]
fn the_texel_under_the_pointer_is_the_sources_own() {
    let mut rng = rng();
    let rs = render_state();
    let runtime = runtime_for(&rs).unwrap();
    let (w, h) = (rng.gen_range(300..1500), rng.gen_range(300..1500));
    let pixels: Vec<u8> = (0..w * h * 4).map(|_| rng.gen()).collect();
    let source = Arc::new(ImageSource::from_rgba8(w, h, pixels.clone()).unwrap());
    let image = VirtualImageState::new(&rs, &runtime, source, small_cache()).unwrap();
    let app = App {
        image,
        rect: egui::Rect::NOTHING,
    };
    let mut harness = harness(&rs, app, egui::vec2(256.0, 256.0));
    harness.step();
    for _ in 0..5 {
        let at = egui::pos2(rng.gen_range(1.0..255.0), rng.gen_range(1.0..255.0));
        harness.hover_at(at);
        let mut got = None;
        for _ in 0..200 {
            harness.step();
            got = harness.state().image.hovered_texel().cloned();
            if got.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        let view = harness.state().image.view().unwrap();
        let rect = harness.state().rect;
        let c = rect.center();
        let want_xy = view.texel_at([at.x - c.x, at.y - c.y], (w, h));
        match (got, want_xy) {
            (Some(t), Some((x, y))) => {
                assert_eq!((t.x, t.y), (x, y));
                let i = ((y * w + x) * 4) as usize;
                assert_eq!(t.bytes, pixels[i..i + 4].to_vec(), "texel ({x}, {y})");
            }
            (None, None) => {}
            (got, want) => panic!("hovered {got:?}, the view says {want:?}"),
        }
    }
}

#[test]
fn the_settled_image_matches_its_snapshot() {
    let rs = render_state();
    let runtime = runtime_for(&rs).unwrap();
    let source = Arc::new(ProceduralSource::new(1 << 20, 1 << 20).unwrap());
    let mut image = VirtualImageState::new(&rs, &runtime, source, small_cache()).unwrap();
    // A fixed view (the seahorse valley) from the first frame, then settled: the overlays
    // included. (Set before the first frame: a view shown in between would leave tiles
    // whose loads finish or not by the loaders' timing, and the overlay counts them.)
    image.set_view(vramkit_egui::View {
        center: [
            0.6245 * f64::from(1u32 << 20),
            0.4150 * f64::from(1u32 << 20),
        ],
        texels_per_pixel: 37.0,
    });
    let app = App {
        image,
        rect: egui::Rect::NOTHING,
    };
    let mut h = harness_with(&rs, app, egui::vec2(320.0, 240.0), true);
    settle(&mut h);
    h.snapshot("virtual_image_seahorse_valley");
}

#[test]
fn the_inspector_shows_the_arenas_figures() {
    let mut rng = rng();
    let rs = render_state();
    let runtime = runtime_for(&rs).unwrap();
    let arena = runtime.arena();
    let names = ["weights", "activations", "kv cache", "staging"];
    let mut held = Vec::new();
    for _ in 0..rng.gen_range(5..20) {
        let label = names[rng.gen_range(0..names.len())];
        held.push(arena.alloc(rng.gen_range(1..4 << 20), label).unwrap());
    }
    drop(held.split_off(held.len() / 2));
    // A texture of the app's own, registered with the device ledger.
    let side = rng.gen_range(16..300);
    let texture = runtime
        .gpu()
        .ledger()
        .create_texture(
            &wgpu::TextureDescriptor {
                label: Some("photo"),
                size: wgpu::Extent3d {
                    width: side,
                    height: side,
                    depth_or_array_layers: 1,
                },
                mip_level_count: 1,
                sample_count: 1,
                dimension: wgpu::TextureDimension::D2,
                format: wgpu::TextureFormat::Rgba8Unorm,
                usage: wgpu::TextureUsages::TEXTURE_BINDING,
                view_formats: &[],
            },
            "photos",
        )
        .unwrap();
    let mut h = Harness::builder()
        .with_size(egui::vec2(480.0, 1100.0))
        .renderer(WgpuTestRenderer::from_render_state(rs.clone()))
        .build_ui_state(
            |ui, state: &mut InspectorState| {
                ui.add(MemoryInspector::new(state, runtime.arena()));
            },
            InspectorState::default(),
        );
    h.step();
    let stats = arena.stats();
    let shown: std::collections::HashMap<_, _> =
        h.state().shown_figures().iter().cloned().collect();
    use vramkit::fmt_bytes;
    assert_eq!(shown["allocated"], fmt_bytes(stats.allocated));
    assert_eq!(shown["reserved"], fmt_bytes(stats.reserved));
    assert_eq!(shown["active"], fmt_bytes(stats.active));
    assert_eq!(
        shown["live allocations"],
        stats.live_allocations.to_string()
    );
    assert_eq!(shown["blocks"], stats.blocks.to_string());
    assert_eq!(
        shown["device: app"],
        fmt_bytes(u64::from(side) * u64::from(side) * 4)
    );
    assert!(
        h.query_by_label("app: photos").is_some(),
        "the app's owner listed"
    );
    assert!(
        h.query_by_label(&format!("vramkit: arena '{}'", arena.name()))
            .is_some(),
        "the arena's line listed"
    );
    // What is on screen, read through the accessibility tree as a user's screen reader
    // would: every figure, and every label with its live bytes.
    for (name, value) in h.state().shown_figures() {
        assert!(h.query_by_label(name).is_some(), "figure {name} shown");
        assert!(
            !h.query_all_by_label(value).collect::<Vec<_>>().is_empty(),
            "{name} = {value} shown"
        );
    }
    for (label, l) in stats.per_label.iter().filter(|(_, l)| l.count > 0) {
        assert!(h.query_by_label(label).is_some(), "label {label} listed");
        assert!(
            h.query_all_by_label(&fmt_bytes(l.bytes)).next().is_some(),
            "{label}: {} shown",
            fmt_bytes(l.bytes)
        );
    }
    h.render().unwrap();
    drop((held, texture));
}
