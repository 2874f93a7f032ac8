//! The browser demo: vramkit in a page's own WebGPU device. A virtual texture of a
//! 32768 x 32768 Mandelbrot image (computed tile by tile as the camera asks for them,
//! never whole) zooms into the seahorse valley and back, drawn by the page's render pass
//! into its canvas, with the arena's live figures and its memory timeline beside it.
//!
//! Build and serve (examples/web/README.md has the details):
//!
//! ```text
//! cargo build --release --example web --target wasm32-unknown-unknown
//! wasm-bindgen --target web --no-typescript --out-dir examples/web/pkg \
//!     target/wasm32-unknown-unknown/release/examples/web.wasm
//! python3 -m http.server -d examples/web 8000   # then open http://localhost:8000
//! ```
//!
//! Everything here runs on the page's one thread and never blocks: tiles are computed in
//! `begin_frame`, feedback lists come back through the event loop, and each frame waits
//! for the browser's next animation frame.

#[path = "support/vt_demo.rs"]
mod vt_demo;

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    eprintln!(
        "the web demo runs in a browser: build it for wasm32-unknown-unknown and serve \
         examples/web/ (see examples/web/README.md)"
    );
}

#[cfg(target_arch = "wasm32")]
fn main() {
    wasm_bindgen_futures::spawn_local(async {
        if let Err(e) = page::run().await {
            page::show_error(&e.to_string());
        }
    });
}

/// Texels a side of the page's Mandelbrot.
#[cfg(target_arch = "wasm32")]
const MANDELBROT: u32 = 1 << 15;

#[cfg(target_arch = "wasm32")]
mod page {
    use std::sync::Arc;

    use vramkit::arena::HistoryConfig;
    use vramkit::vt::{VirtualTexture, VtConfig};
    use vramkit::{Error, Runtime};
    use wasm_bindgen::{JsCast, JsValue};
    use web_time::Instant;

    use super::{vt_demo, MANDELBROT};
    use vramkit::vt::Mandelbrot;

    /// Draws the demo's RGBA8 frame onto the canvas's texture, whatever its format: a
    /// full-screen triangle that loads each texel.
    struct Blit {
        pipeline: wgpu::RenderPipeline,
        group: wgpu::BindGroup,
    }

    impl Blit {
        fn new(device: &wgpu::Device, frame: &wgpu::Texture, format: wgpu::TextureFormat) -> Blit {
            let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
                label: Some("blit"),
                source: wgpu::ShaderSource::Wgsl(
                    "@group(0) @binding(0) var frame: texture_2d<f32>;
                     @vertex fn vs(@builtin(vertex_index) i: u32) -> @builtin(position) vec4<f32> {
                         let p = vec2<f32>(f32((i << 1u) & 2u), f32(i & 2u));
                         return vec4<f32>(p * 2.0 - 1.0, 0.0, 1.0);
                     }
                     @fragment fn fs(@builtin(position) pos: vec4<f32>) -> @location(0) vec4<f32> {
                         return textureLoad(frame, vec2<i32>(pos.xy), 0);
                     }"
                    .into(),
                ),
            });
            let pipeline = vt_demo::fullscreen_pipeline(device, "blit", &module, None, format);
            let view = frame.create_view(&Default::default());
            let group = device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: Some("blit"),
                layout: &pipeline.get_bind_group_layout(0),
                entries: &[wgpu::BindGroupEntry {
                    binding: 0,
                    resource: wgpu::BindingResource::TextureView(&view),
                }],
            });
            Blit { pipeline, group }
        }

        fn draw(&self, e: &mut wgpu::CommandEncoder, target: &wgpu::TextureView) {
            let mut pass = vt_demo::cleared_pass(e, target, "blit");
            pass.set_pipeline(&self.pipeline);
            pass.set_bind_group(0, &self.group, &[]);
            pass.draw(0..3, 0..1);
        }
    }

    /// Frames of one zoom in and out.
    const PERIOD: u32 = 900;

    fn document() -> web_sys::Document {
        web_sys::window()
            .and_then(|w| w.document())
            .expect("a page has a document")
    }

    fn set_text(id: &str, text: &str) {
        if let Some(e) = document().get_element_by_id(id) {
            e.set_text_content(Some(text));
        }
    }

    /// Shows what failed on the page and marks it for the screenshot check.
    pub fn show_error(message: &str) {
        set_text("stats", &format!("vramkit failed: {message}"));
        if let Some(body) = document().body() {
            let _ = body.dataset().set("error", message);
        }
    }

    /// Resolves at the browser's next animation frame.
    async fn next_frame() {
        let promise = js_sys::Promise::new(&mut |resolve, _| {
            if let Some(w) = web_sys::window() {
                let _ = w.request_animation_frame(&resolve);
            }
        });
        let _ = wasm_bindgen_futures::JsFuture::from(promise).await;
    }

    fn invalid(what: &str, hint: &str) -> Error {
        Error::invalid(what, hint)
    }

    /// The camera at frame `f`: uv origin and uv per pixel. An exponential zoom from the
    /// whole image to 1.5 texels per pixel in the seahorse valley and back, drifting.
    fn camera(f: u32, size: (u32, u32)) -> ([f32; 2], f32) {
        let t = (f % PERIOD) as f32 / PERIOD as f32;
        let z = 1.0 - (2.0 * t - 1.0).abs(); // 0 -> 1 -> 0
        let z = z * z * (3.0 - 2.0 * z); // eased
        let whole = MANDELBROT as f32 / size.0 as f32;
        let texels_per_px = whole * (1.5 / whole).powf(z);
        let scale = texels_per_px / MANDELBROT as f32;
        let far = [0.5f32, 0.5];
        let near = Mandelbrot::uv(-0.7453, 0.1127);
        let drift = 6.0 * scale * (std::f32::consts::TAU * t * 3.0).sin() * size.0 as f32 / 100.0;
        let c = [
            far[0] + (near[0] - far[0]) * z.sqrt() + drift,
            far[1] + (near[1] - far[1]) * z.sqrt(),
        ];
        let origin = [
            c[0] - scale * size.0 as f32 / 2.0,
            c[1] - scale * size.1 as f32 / 2.0,
        ];
        (origin, scale)
    }

    pub async fn run() -> vramkit::Result<()> {
        let canvas: web_sys::HtmlCanvasElement = document()
            .get_element_by_id("view")
            .and_then(|e| e.dyn_into().ok())
            .ok_or_else(|| {
                invalid(
                    "the page has no <canvas id=\"view\">",
                    "serve examples/web/index.html",
                )
            })?;
        let size = (canvas.width(), canvas.height());
        // The page's own device, as a host renderer's: vramkit shares it.
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::BROWSER_WEBGPU;
        let instance = wgpu::Instance::new(desc);
        let surface = instance
            .create_surface(wgpu::SurfaceTarget::Canvas(canvas))
            .map_err(|e| {
                invalid(
                    &format!("a WebGPU canvas: {e}"),
                    "use a browser with WebGPU",
                )
            })?;
        let adapter = instance
            .request_adapter(&wgpu::RequestAdapterOptions {
                compatible_surface: Some(&surface),
                ..Default::default()
            })
            .await
            .map_err(|e| {
                invalid(
                    &format!("no WebGPU adapter ({e})"),
                    "use a browser with WebGPU (Chromium: --enable-unsafe-webgpu where it is off)",
                )
            })?;
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("page"),
                required_limits: adapter.limits(),
                ..Default::default()
            })
            .await
            .map_err(|e| invalid(&format!("a WebGPU device: {e}"), "reload the page"))?;
        // The canvas's preferred format (Chromium's headless swap chain makes no RGBA8 one),
        // which the blit below draws into whatever it is.
        let format = surface
            .get_capabilities(&adapter)
            .formats
            .first()
            .copied()
            .ok_or_else(|| invalid("a canvas with no formats", "use a browser with WebGPU"))?;
        surface.configure(
            &device,
            &wgpu::SurfaceConfiguration {
                usage: wgpu::TextureUsages::RENDER_ATTACHMENT,
                format,
                width: size.0,
                height: size.1,
                present_mode: wgpu::PresentMode::Fifo,
                desired_maximum_frame_latency: 2,
                alpha_mode: wgpu::CompositeAlphaMode::Opaque,
                view_formats: vec![],
                color_space: Default::default(),
            },
        );
        let rt = Runtime::from_wgpu_with_adapter(&adapter, device, queue)?;
        let gpu = rt.gpu().clone();
        rt.arena().record_history(Some(HistoryConfig::default()));
        let mut vt = VirtualTexture::new(
            &gpu,
            rt.arena(),
            Arc::new(Mandelbrot::new(MANDELBROT)?),
            VtConfig {
                cache_slots: 512,
                render_size: size,
                max_uploads_per_frame: 12,
                ..Default::default()
            },
        )?;
        let demo = vt_demo::Demo::new(&gpu, rt.arena(), &vt, size)?;
        let blit = Blit::new(gpu.device(), demo.target(), format);
        set_text("adapter", &gpu.describe());
        let mut frame_ms = 0.0f64;
        for f in 0u32.. {
            next_frame().await;
            let start = Instant::now();
            let (origin, scale) = camera(f, size);
            demo.frame(&gpu, &mut vt, origin, scale)?;
            let shown = match surface.get_current_texture() {
                wgpu::CurrentSurfaceTexture::Success(t)
                | wgpu::CurrentSurfaceTexture::Suboptimal(t) => t,
                other => {
                    let what = format!("the canvas's texture: {other:?}");
                    return Err(invalid(&what, "reload the page"));
                }
            };
            let view = shown.texture.create_view(&Default::default());
            let mut e = gpu.device().create_command_encoder(&Default::default());
            blit.draw(&mut e, &view);
            gpu.submit([e.finish()]);
            gpu.queue().present(shown);
            frame_ms = 0.9 * frame_ms + 0.1 * start.elapsed().as_secs_f64() * 1e3;
            if f % 10 == 0 {
                let a = rt.arena().stats();
                let v = vt.stats();
                let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
                let texels = scale * MANDELBROT as f32;
                set_text(
                    "stats",
                    &format!(
                        "frame {f}   CPU {frame_ms:.2} ms a frame   {texels:.2} texels a pixel\n\
                         virtual texture  {} of {} slots resident, {} uploads ({:.1} MiB), \
                         hit rate {:.1} %, feedback latency <= {} frames\n\
                         arena  allocated {:.2} MiB (peak {:.2})  reserved {:.2} MiB  \
                         cached {:.2} MiB\n       {} live allocations in {} blocks, {} GPU waits",
                        v.resident_tiles,
                        v.cache_slots,
                        v.uploads,
                        mib(v.bytes_streamed),
                        100.0 * v.hits as f64 / v.requests.max(1) as f64,
                        v.feedback_latency_frames_max,
                        mib(a.allocated),
                        mib(a.peak_allocated),
                        mib(a.reserved),
                        mib(a.cached),
                        a.live_allocations,
                        a.blocks,
                        a.waits,
                    ),
                );
                if let Some(body) = document().body() {
                    let _ = body.dataset().set("frames", &f.to_string());
                }
            }
            if f % 60 == 0 {
                if let Some(svg) = rt.arena().history().map(|h| h.to_timeline_svg(560, 300)) {
                    if let Some(e) = document().get_element_by_id("timeline") {
                        e.set_inner_html(&svg?);
                    }
                }
            }
            // WebGPU's late error reports, surfaced while the page runs.
            if f % 30 == 0 {
                gpu.errors_async().await?;
            }
        }
        let _ = JsValue::NULL;
        Ok(())
    }
}
