//! An eframe app: a 2^20 x 2^20 Mandelbrot (4 TiB of RGBA8 with its mips, 128 times the
//! side of the largest texture a GPU allows) in a [`VirtualImage`] beside the
//! [`MemoryInspector`] of the arena it streams through. One app, native and in the
//! browser, on eframe's own device.
//!
//! ```text
//! cargo run --release -p vramkit-egui --example viewer             # a window
//! cargo run --release -p vramkit-egui --example viewer -- --check  # headless: the figures
//! cargo run --release -p vramkit-egui --example viewer -- --screenshot viewer.png
//! ```
//! In the browser (eframe's web runner, WebGPU): `examples/viewer/README.md`.
//!
//! `--check` renders the app offscreen at 1920 x 1080 with egui_kittest on the first
//! adapter (no window), pans and zooms it with pointer events, and prints `name: value`
//! lines: the settled frame against the CPU reference (`exact_fraction`), the widget's CPU
//! time per frame against an ordinary `egui::Image` panned the same way, and the GPU
//! memory the viewer holds against its cache and page table. It exits non-zero when the
//! frame is not the reference's.

use std::sync::Arc;

use vramkit::vt::{Mandelbrot, VtConfig};
use vramkit_egui::{runtime_for, InspectorState, MemoryInspector, VirtualImage, VirtualImageState};

/// Texels a side.
const SIDE: u32 = 1 << 20;

/// The app: vramkit on eframe's device, the image and the inspector.
struct Viewer {
    runtime: vramkit::Runtime,
    image: VirtualImageState,
    inspector: InspectorState,
    #[cfg(target_arch = "wasm32")]
    page: Page,
}

impl Viewer {
    fn new(render_state: &egui_wgpu::RenderState) -> vramkit::Result<Viewer> {
        let runtime = runtime_for(render_state)?;
        let source = Arc::new(Mandelbrot::new(SIDE)?);
        let config = VtConfig {
            render_size: (3840, 2160),
            ..Default::default()
        };
        let image = VirtualImageState::new(render_state, &runtime, source, config)?;
        Ok(Viewer {
            runtime,
            image,
            inspector: InspectorState::default(),
            #[cfg(target_arch = "wasm32")]
            page: Page::default(),
        })
    }

    /// The viewer on eframe's device (native and web alike).
    fn from_eframe(
        cc: &eframe::CreationContext<'_>,
    ) -> Result<Viewer, Box<dyn std::error::Error + Send + Sync>> {
        let rs = cc
            .wgpu_render_state
            .as_ref()
            .ok_or("eframe started without its wgpu renderer")?;
        Ok(Viewer::new(rs)?)
    }

    fn ui(&mut self, ui: &mut egui::Ui) {
        egui::Panel::left("inspector")
            .resizable(true)
            .default_size(340.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical().show(ui, |ui| {
                    ui.add(
                        MemoryInspector::new(&mut self.inspector, self.runtime.arena())
                            .virtual_texture("mandelbrot", self.image.stats()),
                    );
                });
            });
        egui::CentralPanel::default().show(ui, |ui| {
            let response = ui.add(VirtualImage::new(&mut self.image));
            if let Some(texel) = self.image.hovered_texel() {
                response.on_hover_text(texel.to_string());
            }
        });
        #[cfg(target_arch = "wasm32")]
        self.page.frame(&mut self.image, ui.ctx());
    }
}

/// What the page tells its test (`examples/viewer/index.html`, `screenshot.py`): frames
/// drawn, errors, and with `#pan` in the address a pan across the image, one step a
/// frame, timed.
#[cfg(target_arch = "wasm32")]
#[derive(Default)]
struct Page {
    frames: u64,
    pan_started: Option<f64>,
}

#[cfg(target_arch = "wasm32")]
impl Page {
    /// Frames panned before the rate is reported.
    const PAN_FRAMES: u64 = 120;

    fn frame(&mut self, image: &mut VirtualImageState, ctx: &egui::Context) {
        let Some(window) = web_sys::window() else {
            return;
        };
        let Some(body) = window.document().and_then(|d| d.body()) else {
            return;
        };
        self.frames += 1;
        let data = body.dataset();
        let _ = data.set("frames", &self.frames.to_string());
        if let Some(e) = image.last_error() {
            let _ = data.set("error", &e);
        }
        let panning = window.location().hash().is_ok_and(|h| h == "#pan");
        let now = window.performance().map_or(0.0, |p| p.now());
        if panning {
            // Drawn continuously: eframe repaints on input or when asked.
            ctx.request_repaint();
        }
        if panning && self.frames > 30 {
            let start = *self.pan_started.get_or_insert(now);
            let n = self.frames - 30;
            if let Some(mut view) = image.view() {
                view.pan([-3.0, -1.0]);
                image.set_view(view);
            }
            if n == Self::PAN_FRAMES {
                let fps = Self::PAN_FRAMES as f64 / ((now - start) / 1e3);
                let _ = data.set("fps", &format!("{fps:.1}"));
            }
        }
    }
}

impl eframe::App for Viewer {
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        Viewer::ui(self, ui);
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--screenshot") {
        let path = args.get(i + 1).map_or("viewer.png", String::as_str);
        if let Err(e) = check::screenshot(path) {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
        return;
    }
    if args.iter().any(|a| a == "--check") {
        match check::run() {
            Ok(true) => {}
            Ok(false) => std::process::exit(1),
            Err(e) => {
                eprintln!("error: {e}");
                std::process::exit(2);
            }
        }
        return;
    }
    let options = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_inner_size([1280.0, 800.0])
            .with_title("vramkit viewer"),
        ..Default::default()
    };
    let started = eframe::run_native(
        "vramkit viewer",
        options,
        Box::new(|cc| Ok(Box::new(Viewer::from_eframe(cc)?))),
    );
    if let Err(e) = started {
        eprintln!("error: {e} (no display? `--check` runs headless)");
        std::process::exit(2);
    }
}

/// In the browser: eframe's web runner on the page's canvas `viewer`, WebGPU through
/// egui-wgpu.
#[cfg(target_arch = "wasm32")]
fn main() {
    use wasm_bindgen::JsCast;
    wasm_bindgen_futures::spawn_local(async {
        let canvas = web_sys::window()
            .and_then(|w| w.document())
            .and_then(|d| d.get_element_by_id("viewer"))
            .and_then(|e| e.dyn_into::<web_sys::HtmlCanvasElement>().ok());
        let Some(canvas) = canvas else {
            web_sys::console::error_1(&"no canvas with id 'viewer'".into());
            return;
        };
        let started = eframe::WebRunner::new()
            .start(
                canvas,
                eframe::WebOptions::default(),
                Box::new(|cc| Ok(Box::new(Viewer::from_eframe(cc)?))),
            )
            .await;
        if let Err(e) = started {
            web_sys::console::error_1(&e);
            if let Some(body) = web_sys::window()
                .and_then(|w| w.document())
                .and_then(|d| d.body())
            {
                let _ = body.dataset().set("error", &format!("{e:?}"));
            }
        }
    });
}

/// `--check`: the app headless, measured.
#[cfg(not(target_arch = "wasm32"))]
mod check {
    use egui_kittest::wgpu::{create_render_state, WgpuTestRenderer};
    use egui_kittest::Harness;
    use vramkit::vt::ReferenceSampler;
    use vramkit_egui::{level_for, pixel_uv, VirtualImage};

    use super::{Viewer, SIDE};

    const SIZE: egui::Vec2 = egui::vec2(1920.0, 1080.0);
    /// Frames of panning measured for each app.
    const PAN_FRAMES: usize = 240;

    /// The app and where its image is.
    struct Checked {
        viewer: Viewer,
        rect: egui::Rect,
    }

    /// The first adapter wgpu offers (a GPU where there is one: not egui_kittest's
    /// preference for a CPU adapter).
    fn setup() -> egui_wgpu::WgpuSetup {
        let mut setup = egui_wgpu::WgpuSetupCreateNew::without_display_handle();
        setup
            .instance_descriptor
            .backends
            .remove(wgpu::Backends::BROWSER_WEBGPU | wgpu::Backends::GL);
        egui_wgpu::WgpuSetup::CreateNew(setup)
    }

    /// The whole app (inspector and image), 1280 x 800, settled, saved as a PNG: the
    /// README's picture of the native app, drawn by egui-wgpu as the window would be.
    pub fn screenshot(path: &str) -> Result<(), String> {
        let rs = create_render_state(setup(), egui_wgpu::RendererOptions::PREDICTABLE);
        let viewer = Viewer::new(&rs).map_err(|e| e.to_string())?;
        let mut h = Harness::builder()
            .with_size(egui::vec2(1280.0, 800.0))
            .with_pixels_per_point(1.0)
            .with_render_every_step(true)
            .with_render_cursor(false)
            .renderer(WgpuTestRenderer::from_render_state(rs.clone()))
            .build_ui_state(|ui, v: &mut Viewer| v.ui(ui), viewer);
        h.step();
        // Into the seahorse valley, where there is detail at every level.
        let target = vramkit::vt::Mandelbrot::uv(-0.7453, 0.1127);
        h.state_mut().image.set_view(vramkit_egui::View {
            center: [
                f64::from(target[0]) * f64::from(SIDE),
                f64::from(target[1]) * f64::from(SIDE),
            ],
            texels_per_pixel: 40.0,
        });
        for _ in 0..2000 {
            h.step();
            if h.state().image.is_settled() {
                break;
            }
        }
        h.run_steps(3);
        let image = h.render()?;
        image.save(path).map_err(|e| format!("writing {path}: {e}"))
    }

    pub fn run() -> Result<bool, String> {
        let rs = create_render_state(setup(), egui_wgpu::RendererOptions::PREDICTABLE);
        let viewer = Viewer::new(&rs).map_err(|e| e.to_string())?;
        println!("device: {}", viewer.runtime.gpu().describe());
        let max_texture = rs.device.limits().max_texture_dimension_2d;
        let mut h = Harness::builder()
            .with_size(SIZE)
            .with_pixels_per_point(1.0)
            .with_render_every_step(true)
            .with_render_cursor(false)
            .with_step_dt(1.0 / 60.0)
            .renderer(WgpuTestRenderer::from_render_state(rs.clone()))
            .build_ui_state(
                |ui, c: &mut Checked| {
                    egui::CentralPanel::no_frame().show(ui, |ui| {
                        let r = ui.add(VirtualImage::new(&mut c.viewer.image).overlays(false));
                        c.rect = r.rect;
                    });
                },
                Checked {
                    viewer,
                    rect: egui::Rect::NOTHING,
                },
            );
        settle(&mut h);

        // Zoom towards the seahorse valley with pinches, then pan across it with drags.
        let target = vramkit::vt::Mandelbrot::uv(-0.7453, 0.1127);
        let view = h.state().viewer.image.view().expect("shown");
        let rect = h.state().rect;
        let at = rect.center()
            + egui::vec2(
                ((f64::from(target[0]) * f64::from(SIDE) - view.center[0]) / view.texels_per_pixel)
                    as f32,
                ((f64::from(target[1]) * f64::from(SIDE) - view.center[1]) / view.texels_per_pixel)
                    as f32,
            );
        h.hover_at(at);
        for _ in 0..12 {
            h.event(egui::Event::Zoom(1.6));
            h.step();
        }
        settle(&mut h);
        h.state_mut().viewer.image.reset_cpu_times();
        pan(&mut h, PAN_FRAMES);
        let (p50, p99) = (
            h.state()
                .viewer
                .image
                .cpu_ms_percentile(50.0)
                .unwrap_or(0.0),
            h.state()
                .viewer
                .image
                .cpu_ms_percentile(99.0)
                .unwrap_or(0.0),
        );
        let frames = settle(&mut h);
        let frame = h
            .render()
            .map_err(|e| format!("rendering the frame: {e}"))?;
        let (exact, all) = exact_pixels(&frame, h.state());
        let stats = h.state().viewer.image.stats();
        let peer = egui_image_peer();

        println!("image_texels_per_side: {SIDE}");
        println!("max_texture_dimension_2d: {max_texture}");
        println!(
            "image_vs_texture_limit: {:.0}",
            f64::from(SIDE) / f64::from(max_texture)
        );
        println!("settle_frames: {frames}");
        println!("exact_pixels: {exact}/{all}");
        println!("exact_fraction: {:.6}", exact as f64 / all.max(1) as f64);
        println!("widget_cpu_ms_p50: {p50:.3}");
        println!("widget_cpu_ms_p99: {p99:.3}");
        println!("egui_image_cpu_ms_p50: {:.3}", peer.0);
        println!("egui_image_cpu_ms_p99: {:.3}", peer.1);
        let table = stats.buffer_bytes;
        let resident = stats.cache_bytes + table;
        let slots = u64::from(stats.cache_slots);
        let cache_plus_table =
            slots * (vramkit::vt::TILE_BYTES as u64) + table_bytes(stats.cache_slots);
        println!(
            "resident_tiles: {}/{}",
            stats.resident_tiles, stats.cache_slots
        );
        println!("resident_bytes: {resident}");
        println!("cache_plus_table_bytes: {cache_plus_table}");
        println!("cache_texture_bytes: {}", stats.cache_bytes);
        println!("buffer_bytes: {}", stats.buffer_bytes);
        println!("bytes_streamed: {}", stats.bytes_streamed);
        println!("load_errors: {}", stats.load_errors);
        Ok(exact == all)
    }

    /// The page table's bytes for `slots` cache slots: twice as many entries as slots,
    /// rounded up to a power of two, 8 bytes each (`vt/page_table.rs`).
    fn table_bytes(slots: u32) -> u64 {
        u64::from((slots * 2).next_power_of_two()) * 8
    }

    /// Drags across the image for `frames` frames: a circle of 300 pixels.
    fn pan<S>(h: &mut Harness<'static, S>, frames: usize) {
        let c = egui::pos2(SIZE.x / 2.0, SIZE.y / 2.0);
        h.hover_at(c);
        h.drag_at(c);
        h.step();
        for i in 0..frames {
            let a = i as f32 / frames as f32 * std::f32::consts::TAU;
            h.hover_at(c + egui::vec2(a.cos() - 1.0, a.sin()) * 300.0);
            h.step();
        }
        h.drop_at(c);
        h.step();
    }

    fn settle(h: &mut Harness<'static, Checked>) -> usize {
        let mut calm = 0;
        for n in 0..2000 {
            h.step();
            calm = if h.state().viewer.image.is_settled() {
                calm + 1
            } else {
                0
            };
            if calm == 3 {
                return n;
            }
        }
        2000
    }

    /// Pixels of the frame inside the image that are the CPU reference's within 1.5/255
    /// (rounding) plus the filter's slack at that pixel
    /// ([`ReferenceSampler::filter_slack`]: the texture unit's 8-bit weights at edges).
    fn exact_pixels(frame: &image::RgbaImage, c: &Checked) -> (usize, usize) {
        let source = vramkit::vt::Mandelbrot::new(SIDE).expect("a valid size");
        let layout = vramkit::vt::TileSource::layout(&source);
        let size = (layout.width, layout.height);
        let rect = c.rect;
        let (w, h) = (rect.width().round() as u32, rect.height().round() as u32);
        let view = c.viewer.image.view().expect("shown");
        let (origin, scale) = view.uv_mapping(size, [w as f32, h as f32]);
        let level = level_for(scale, size, layout.levels);
        let mut reference = ReferenceSampler::new(&source);
        let (x0, y0) = (rect.min.x.round() as u32, rect.min.y.round() as u32);
        let mut exact = 0;
        for y in 0..h {
            for x in 0..w {
                let uv = pixel_uv(origin, scale, x, y);
                if !uv.iter().all(|v| (0.0..=1.0).contains(v)) {
                    exact += 1;
                    continue;
                }
                let want = reference.sample(uv, level).unwrap_or([2.0; 4]);
                let slack = reference.filter_slack(uv, level).unwrap_or([0.0; 4]);
                let got = frame.get_pixel(x0 + x, y0 + y).0;
                exact += usize::from((0..4).all(|i| {
                    (f32::from(got[i]) - want[i] * 255.0).abs() <= 1.5 + slack[i] * 255.0
                }));
            }
        }
        (exact, (w * h) as usize)
    }

    /// The same app showing an ordinary egui image (a 4096 x 4096 texture, the largest
    /// that needs no tiling on most GPUs) panned the same way: the CPU milliseconds of its
    /// `ui` per frame, p50 and p99.
    fn egui_image_peer() -> (f64, f64) {
        // egui_kittest takes a render state that has not drawn yet: a second one on the
        // same adapter.
        let rs = create_render_state(setup(), egui_wgpu::RendererOptions::PREDICTABLE);
        struct Peer {
            texture: Option<egui::TextureHandle>,
            offset: egui::Vec2,
            ms: Vec<f64>,
        }
        let mut h = Harness::builder()
            .with_size(SIZE)
            .with_pixels_per_point(1.0)
            .with_render_every_step(true)
            .with_render_cursor(false)
            .renderer(WgpuTestRenderer::from_render_state(rs))
            .build_ui_state(
                |ui, p: &mut Peer| {
                    egui::CentralPanel::no_frame().show(ui, |ui| {
                        let texture = p.texture.get_or_insert_with(|| {
                            let side = 4096;
                            let pixels: Vec<egui::Color32> = (0..side * side)
                                .map(|i| {
                                    egui::Color32::from_rgb((i % side) as u8, (i / side) as u8, 90)
                                })
                                .collect();
                            ui.ctx().load_texture(
                                "peer",
                                egui::ColorImage::new([side, side], pixels),
                                egui::TextureOptions::LINEAR,
                            )
                        });
                        let start = std::time::Instant::now();
                        let size = ui.available_size();
                        let (rect, response) =
                            ui.allocate_exact_size(size, egui::Sense::click_and_drag());
                        p.offset += response.drag_delta();
                        let uv = egui::Rect::from_min_size(
                            egui::pos2(-p.offset.x / 4096.0, -p.offset.y / 4096.0),
                            egui::vec2(size.x / 4096.0, size.y / 4096.0),
                        );
                        egui::Image::new((texture.id(), size))
                            .uv(uv)
                            .paint_at(ui, rect);
                        p.ms.push(start.elapsed().as_secs_f64() * 1e3);
                    });
                },
                Peer {
                    texture: None,
                    offset: egui::Vec2::ZERO,
                    ms: Vec::new(),
                },
            );
        h.step();
        h.state_mut().ms.clear();
        pan(&mut h, PAN_FRAMES);
        let mut ms = h.state().ms.clone();
        ms.sort_by(f64::total_cmp);
        let at =
            |p: f64| ms[((p / 100.0 * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1];
        (at(50.0), at(99.0))
    }
}
