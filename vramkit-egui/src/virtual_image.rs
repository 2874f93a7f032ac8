//! [`VirtualImage`], the widget, and [`VirtualImageState`], what it keeps between frames.

use std::collections::VecDeque;
use std::sync::Arc;

use egui::{Align2, Color32, Rect, Response, Sense, Stroke, Ui, Vec2, Widget};
use parking_lot::Mutex;
use vramkit::vt::{TileSource, VirtualTexture, VtConfig, VtLayout, VtStats};
use web_time::Instant;

use crate::format::Texel;
use crate::paint::{Callback, Gpu, Shared, ViewUniform};
use crate::view::View;

/// Frames whose CPU time the state keeps ([`VirtualImageState::cpu_ms_percentile`]).
const CPU_SAMPLES: usize = 1024;

/// What a [`VirtualImage`] keeps between frames: the virtual texture, the view, the
/// widget's GPU objects and the texel under the pointer. The app owns it (a field of its
/// `eframe::App`) and hands it to the widget every frame.
pub struct VirtualImageState {
    shared: Arc<Mutex<Shared>>,
    gpu: Gpu,
    layout: VtLayout,
    view: Option<View>,
    /// The virtual texture's frame that first drew the current view.
    view_since_frame: u64,
    /// The view drawn in the last frame, and the last view whose tiles were prefetched.
    last_drawn: Option<View>,
    prefetched_for: Option<View>,
    /// The widget's size at the last frame, in pixels (for the buttons' fit).
    size_px: [f32; 2],
    texels: TexelReader,
    hovered: Option<Texel>,
    background: Color32,
    /// CPU milliseconds the widget took in each recent frame: its `ui` plus the
    /// callback's `prepare` of the frame before.
    cpu_ms: VecDeque<f64>,
}

impl VirtualImageState {
    /// A virtual texture over `source` on `runtime`'s device, drawn into egui's target.
    /// `render_state` is the app's egui-wgpu renderer (eframe's
    /// `CreationContext::wgpu_render_state`), and `runtime` must be on its device
    /// ([`runtime_for`](crate::runtime_for)). Set [`VtConfig::render_size`] to the
    /// largest size the widget will have, in pixels: feedback beyond it is not read.
    ///
    /// Errors: those of [`VirtualTexture::new`] (a cache too large for the device, a
    /// device whose fragment shaders cannot write storage buffers, a failing source).
    pub fn new(
        render_state: &egui_wgpu::RenderState,
        runtime: &vramkit::Runtime,
        source: Arc<dyn TileSource>,
        config: VtConfig,
    ) -> vramkit::Result<VirtualImageState> {
        Self::with_msaa(render_state, runtime, source, config, 1)
    }

    /// [`new`](Self::new) for an egui renderer that draws with `msaa_samples` samples
    /// (eframe's `NativeOptions::multisampling`).
    pub fn with_msaa(
        render_state: &egui_wgpu::RenderState,
        runtime: &vramkit::Runtime,
        source: Arc<dyn TileSource>,
        config: VtConfig,
        msaa_samples: u32,
    ) -> vramkit::Result<VirtualImageState> {
        if render_state.device != *runtime.gpu().device() {
            return Err(vramkit::Error::misuse(
                vramkit::Misuse::Foreign,
                "a VirtualImageState on a runtime of another device than egui's",
                "make the runtime with vramkit_egui::runtime_for(render_state)",
            ));
        }
        let vt = VirtualTexture::new(runtime.gpu(), runtime.arena(), source.clone(), config)?;
        let gpu = Gpu::new(
            &render_state.device,
            &vt,
            render_state.target_format,
            msaa_samples,
        );
        Ok(VirtualImageState {
            layout: vt.layout(),
            shared: Arc::new(Mutex::new(Shared {
                vt,
                frame_open: false,
                error: None,
                prepare_ms: 0.0,
            })),
            gpu,
            texels: TexelReader::new(source),
            view: None,
            view_since_frame: 0,
            last_drawn: None,
            prefetched_for: None,
            size_px: [1.0, 1.0],
            hovered: None,
            background: Color32::from_rgb(16, 19, 28),
            cpu_ms: VecDeque::with_capacity(CPU_SAMPLES),
        })
    }

    /// The view, once the widget has been shown (it starts fitted).
    pub fn view(&self) -> Option<View> {
        self.view
    }

    /// Sets the view (what the buttons, the drag and the wheel change).
    pub fn set_view(&mut self, view: View) {
        self.change_view(view);
    }

    /// Records a view, and the frame that will first draw it when it is new.
    fn change_view(&mut self, view: View) {
        if self.view != Some(view) {
            self.view_since_frame = next_frame(&self.shared.lock().vt);
        }
        self.view = Some(view);
    }

    /// Whether the view drawn with `s` is exact: no tile pending, and the feedback of a
    /// frame drawn at this view back.
    fn settled(&self, s: &VtStats) -> bool {
        self.view.is_some()
            && s.pending_tiles == 0
            && s.feedback_frame_last >= self.view_since_frame
    }

    /// The image's size and mip chain.
    pub fn layout(&self) -> VtLayout {
        self.layout
    }

    /// The virtual texture's statistics (resident tiles, pending tiles, uploads, the
    /// GPU memory it holds).
    pub fn stats(&self) -> VtStats {
        self.shared.lock().vt.stats()
    }

    /// Whether what is drawn now is the image at the finest level the view wants: the
    /// feedback of a frame drawn at this view has come back and every tile it asked for
    /// is resident.
    pub fn is_settled(&self) -> bool {
        self.settled(&self.stats())
    }

    /// The level-0 texel under the pointer, exactly as the source stores it (read on a
    /// thread of its own; `None` until it arrives, or when the pointer is elsewhere).
    pub fn hovered_texel(&self) -> Option<&Texel> {
        self.hovered.as_ref()
    }

    /// The last error a frame met (the widget shows it too), e.g. a lost device.
    pub fn last_error(&self) -> Option<String> {
        self.shared.lock().error.clone()
    }

    /// The `p`-th percentile (0-100) of the CPU milliseconds the widget added to recent
    /// frames: its `ui` and the virtual texture's frame in the paint callback.
    pub fn cpu_ms_percentile(&self, p: f64) -> Option<f64> {
        percentile(self.cpu_ms.iter().copied(), p)
    }

    /// Forgets the CPU times recorded so far.
    pub fn reset_cpu_times(&mut self) {
        self.cpu_ms.clear();
    }

    /// Rebuilds the virtual texture on `runtime` after a device loss
    /// ([`VirtualTexture::recover`]) and the widget's GPU objects with it.
    pub fn recover(
        &mut self,
        render_state: &egui_wgpu::RenderState,
        runtime: &vramkit::Runtime,
        msaa_samples: u32,
    ) -> vramkit::Result<()> {
        let mut s = self.shared.lock();
        s.vt.recover(runtime.gpu(), runtime.arena())?;
        s.frame_open = false;
        s.error = None;
        // The new texture counts frames from 0: its first frame is the view's first.
        self.view_since_frame = next_frame(&s.vt);
        self.gpu = Gpu::new(
            &render_state.device,
            &s.vt,
            render_state.target_format,
            msaa_samples,
        );
        Ok(())
    }

    /// Once a view has been drawn twice in a row (the drag or the zoom has stopped), asks
    /// the virtual texture for every tile it shows. The feedback samples one pixel per
    /// cell at a random place each frame, so a sliver of a tile at the widget's edge could
    /// stay at a coarser level for many frames; the widget knows the rectangle and the
    /// level it draws, so it asks for them itself. Views in motion are left to the
    /// feedback (their tiles are stale a frame later), and so is a view showing more
    /// tiles than half the cache.
    fn prefetch_at_rest(&mut self, view: View) {
        let resting = self.last_drawn == Some(view);
        self.last_drawn = Some(view);
        if !resting || self.prefetched_for == Some(view) {
            return;
        }
        self.prefetched_for = Some(view);
        let image = (self.layout.width, self.layout.height);
        let (_, scale) = view.uv_mapping(image, self.size_px);
        let (origin, max) = view.visible_uv(image, self.size_px);
        let (ddx, ddy) = ([scale[0], 0.0], [0.0, scale[1]]);
        let level = self.layout.level_for(ddx, ddy);
        let mut tiles = self.layout.pages_covering(level, origin, max);
        // Where the texels per pixel sit on a power of two, the GPU's log2 may land on
        // the other side of it: ask for both levels.
        let d = (scale[0] * self.layout.width as f32).max(scale[1] * self.layout.height as f32);
        let lod = d.max(1e-12).log2();
        let edge = lod.round();
        if (lod - edge).abs() < 1e-3 && edge >= 1.0 {
            let other = if edge as u32 == level {
                level - 1
            } else {
                edge as u32
            };
            if other < self.layout.levels && other != level {
                tiles.extend(self.layout.pages_covering(other, origin, max));
            }
        }
        let mut s = self.shared.lock();
        if tiles.len() as u32 <= s.vt.stats().cache_slots / 2 {
            s.vt.prefetch(&tiles);
        }
    }

    fn max_texels_per_pixel(&self) -> f64 {
        View::fit((self.layout.width, self.layout.height), self.size_px).texels_per_pixel * 4.0
    }

    fn record_cpu(&mut self, ms: f64) {
        if self.cpu_ms.len() == CPU_SAMPLES {
            self.cpu_ms.pop_front();
        }
        self.cpu_ms.push_back(ms);
    }
}

/// The frame the next `prepare` begins: the first to draw a view recorded now.
fn next_frame(vt: &VirtualTexture) -> u64 {
    vt.stats().frames + 1
}

/// The `p`-th percentile of `values` (nearest rank), `None` when empty.
pub(crate) fn percentile(values: impl Iterator<Item = f64>, p: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// An image of any size, streamed through a virtual texture and drawn in egui's pass.
/// Drag pans, the wheel (or a pinch) zooms around the pointer, a double click fits; the
/// "fit" and "1:1" buttons sit in the top-left corner, the texel under the pointer in the
/// bottom-left, what is resident in the top-right.
///
/// ```no_run
/// # fn ui(ui: &mut egui::Ui, state: &mut vramkit_egui::VirtualImageState) {
/// let response = ui.add(vramkit_egui::VirtualImage::new(state).size(egui::vec2(640.0, 480.0)));
/// if response.dragged() {
///     // the view moved: state.view() has where to
/// }
/// # }
/// ```
pub struct VirtualImage<'a> {
    state: &'a mut VirtualImageState,
    size: Option<Vec2>,
    overlays: bool,
}

impl<'a> VirtualImage<'a> {
    /// The widget over `state`, filling the space left in the `Ui`.
    pub fn new(state: &'a mut VirtualImageState) -> VirtualImage<'a> {
        VirtualImage {
            state,
            size: None,
            overlays: true,
        }
    }

    /// A fixed size in points instead of the space left.
    pub fn size(mut self, size: Vec2) -> Self {
        self.size = Some(size);
        self
    }

    /// Without the buttons, the texel readout and the residency overview (the image
    /// alone, as snapshot tests and thumbnails want it).
    pub fn overlays(mut self, on: bool) -> Self {
        self.overlays = on;
        self
    }
}

impl Widget for VirtualImage<'_> {
    fn ui(self, ui: &mut Ui) -> Response {
        let start = Instant::now();
        let VirtualImage {
            state,
            size,
            overlays,
        } = self;
        let size = size.unwrap_or_else(|| ui.available_size());
        let (rect, mut response) = ui.allocate_exact_size(size, Sense::click_and_drag());
        // The image goes under the overlays: its place in the paint list is taken now and
        // filled once the input of this frame has moved the view.
        let image_shape = ui.painter().add(egui::Shape::Noop);
        let ppp = ui.ctx().pixels_per_point();
        // The callback's viewport is the rect rounded to pixels (egui-wgpu's
        // `viewport_in_pixels`); the mapping is made on the same pixels.
        let min_px = (rect.min.to_vec2() * ppp).round();
        let max_px = (rect.max.to_vec2() * ppp).round();
        let size_px = [
            (max_px.x - min_px.x).max(1.0),
            (max_px.y - min_px.y).max(1.0),
        ];
        if state.size_px != size_px {
            // More or less of the image shows: the view is new.
            state.size_px = size_px;
            state.view_since_frame = next_frame(&state.shared.lock().vt);
        }
        let image = (state.layout.width, state.layout.height);
        let mut view = state.view.unwrap_or_else(|| View::fit(image, size_px));

        // Input: drag pans, wheel and pinch zoom around the pointer, double click fits.
        let pointer = response.hover_pos();
        let from_center = |p: egui::Pos2| {
            let c = rect.center();
            [(p.x - c.x) * ppp, (p.y - c.y) * ppp]
        };
        if response.dragged() {
            let d = response.drag_delta() * ppp;
            view.pan([d.x, d.y]);
        }
        if let Some(p) = pointer {
            let (scroll, pinch) = ui.input(|i| (i.smooth_scroll_delta.y, i.zoom_delta()));
            let factor = pinch * (scroll / 200.0).exp();
            if factor != 1.0 {
                view.zoom(factor, from_center(p), state.max_texels_per_pixel());
            }
        }
        if response.double_clicked() {
            view = View::fit(image, size_px);
        }

        if overlays {
            let pad = 6.0;
            let button = |ui: &mut Ui, at: egui::Pos2, text: &str| {
                ui.put(
                    Rect::from_min_size(at, egui::vec2(34.0, 20.0)),
                    egui::Button::new(text).small(),
                )
            };
            let fit = button(ui, rect.min + egui::vec2(pad, pad), "fit");
            let one = button(ui, rect.min + egui::vec2(pad + 40.0, pad), "1:1");
            if fit.clicked() {
                view = View::fit(image, size_px);
            }
            if one.clicked() {
                let at = [0.0, 0.0];
                view.zoom(
                    (view.texels_per_pixel) as f32,
                    at,
                    state.max_texels_per_pixel(),
                );
            }
            response = response.union(fit).union(one);
        }
        state.change_view(view);

        // This frame's draw: the mapping for the shader, and the callback.
        let (origin, scale) = view.uv_mapping(image, size_px);
        state.prefetch_at_rest(view);
        let bg = state.background.to_normalized_gamma_f32();
        // What this frame reads of the texture, under one lock.
        let (vt_group, prepare_ms, stats, error) = {
            let s = state.shared.lock();
            let stats = s.vt.stats();
            (
                s.vt.bind_group().clone(),
                s.prepare_ms,
                stats,
                s.error.clone(),
            )
        };
        let callback = Callback {
            shared: state.shared.clone(),
            view: ViewUniform {
                origin,
                scale,
                rect_min: [min_px.x, min_px.y],
                pad: [0.0; 2],
                background: bg,
            },
            pipeline: state.gpu.pipeline.clone(),
            uniform: state.gpu.uniform.clone(),
            view_group: state.gpu.view_group.clone(),
            vt_group,
        };
        ui.painter().set(
            image_shape,
            egui_wgpu::Callback::new_paint_callback(rect, callback),
        );

        // The texel under the pointer, read off the frame's thread.
        let wanted = pointer.and_then(|p| view.texel_at(from_center(p), image));
        state.hovered = state.texels.texel(wanted);
        if wanted.is_some() && state.hovered.is_none() {
            // The reader thread's answer shows in a frame drawn after it comes.
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(16));
        }

        if overlays {
            draw_overview(ui, rect, &view, image, size_px, &stats);
            if let Some(t) = &state.hovered {
                ui.painter().text(
                    rect.left_bottom() + egui::vec2(6.0, -6.0),
                    Align2::LEFT_BOTTOM,
                    t.to_string(),
                    egui::FontId::monospace(12.0),
                    Color32::WHITE,
                );
            }
        }
        if let Some(e) = error {
            ui.painter().text(
                rect.center(),
                Align2::CENTER_CENTER,
                e,
                egui::FontId::proportional(14.0),
                Color32::LIGHT_RED,
            );
        }
        // Until the view is exact, draw again: tiles or this view's feedback are on their
        // way. A settled view asks for nothing, and an idle app stays idle.
        if !state.settled(&stats) {
            ui.ctx().request_repaint();
        }
        state.record_cpu(start.elapsed().as_secs_f64() * 1e3 + prepare_ms);
        response
    }
}

/// The overview in the top-right corner: the image's outline, the part on screen, and
/// the cache's figures.
fn draw_overview(
    ui: &Ui,
    rect: Rect,
    view: &View,
    image: (u32, u32),
    size_px: [f32; 2],
    stats: &VtStats,
) {
    let side = 96.0;
    let aspect = image.1 as f32 / image.0 as f32;
    let (w, h) = if aspect <= 1.0 {
        (side, side * aspect)
    } else {
        (side / aspect, side)
    };
    let frame = Rect::from_min_size(
        rect.right_top() + egui::vec2(-w - 6.0, 6.0),
        egui::vec2(w, h),
    );
    let painter = ui.painter().with_clip_rect(rect);
    painter.rect_filled(frame, 2.0, Color32::from_black_alpha(140));
    painter.rect_stroke(
        frame,
        2.0,
        Stroke::new(1.0, Color32::GRAY),
        egui::StrokeKind::Inside,
    );
    let (min, max) = view.visible_uv(image, size_px);
    let to_frame =
        |uv: [f32; 2]| frame.min + egui::vec2(uv[0].clamp(0.0, 1.0) * w, uv[1].clamp(0.0, 1.0) * h);
    painter.rect_stroke(
        Rect::from_min_max(to_frame(min), to_frame(max)),
        0.0,
        Stroke::new(1.5, Color32::from_rgb(255, 200, 60)),
        egui::StrokeKind::Middle,
    );
    let text = format!(
        "{}/{} tiles\n{} loading",
        stats.resident_tiles, stats.cache_slots, stats.pending_tiles
    );
    painter.text(
        frame.left_bottom() + egui::vec2(0.0, 4.0),
        Align2::LEFT_TOP,
        text,
        egui::FontId::monospace(10.0),
        Color32::WHITE,
    );
}

/// Reads the texel under the pointer from the tile source on a thread of its own (one
/// tile read per tile entered, the last request wins), so a slow source never stalls
/// the frame. In the browser, which has one thread, it reads in place.
struct TexelReader {
    source: Arc<dyn TileSource>,
    #[cfg(not(target_arch = "wasm32"))]
    worker: Option<ReaderThread>,
    /// The newest answer.
    last: Option<Texel>,
    /// The level-0 tile the last in-place read used.
    #[cfg(target_arch = "wasm32")]
    tile: Option<(vramkit::vt::TileId, Vec<u8>)>,
}

#[cfg(not(target_arch = "wasm32"))]
struct ReaderThread {
    ask: std::sync::mpsc::Sender<(u32, u32)>,
    answers: std::sync::mpsc::Receiver<Texel>,
}

impl TexelReader {
    fn new(source: Arc<dyn TileSource>) -> TexelReader {
        TexelReader {
            #[cfg(not(target_arch = "wasm32"))]
            worker: ReaderThread::spawn(source.clone()),
            source,
            last: None,
            #[cfg(target_arch = "wasm32")]
            tile: None,
        }
    }

    /// The texel at `at` if known now (asking for it otherwise); `None` for `None`.
    fn texel(&mut self, at: Option<(u32, u32)>) -> Option<Texel> {
        let (x, y) = at?;
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(w) = &self.worker {
            while let Ok(t) = w.answers.try_recv() {
                self.last = Some(t);
            }
            if self.last.as_ref().is_some_and(|t| (t.x, t.y) == (x, y)) {
                return self.last.clone();
            }
            // A closed channel (the thread is gone) falls through to reading in place.
            if w.ask.send((x, y)).is_ok() {
                return None;
            }
        }
        #[cfg(target_arch = "wasm32")]
        let t = read_texel(self.source.as_ref(), x, y, &mut self.tile);
        #[cfg(not(target_arch = "wasm32"))]
        let t = read_texel(self.source.as_ref(), x, y, &mut None);
        self.last = t.clone();
        t
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl ReaderThread {
    fn spawn(source: Arc<dyn TileSource>) -> Option<ReaderThread> {
        let (ask, asked) = std::sync::mpsc::channel::<(u32, u32)>();
        let (answer, answers) = std::sync::mpsc::channel();
        let spawned = std::thread::Builder::new()
            .name("vramkit-egui texel".into())
            .spawn(move || {
                let mut tile = None;
                // Ends when the state (the sender) is dropped.
                while let Ok(mut at) = asked.recv() {
                    while let Ok(newer) = asked.try_recv() {
                        at = newer;
                    }
                    if let Some(t) = read_texel(source.as_ref(), at.0, at.1, &mut tile) {
                        if answer.send(t).is_err() {
                            break;
                        }
                    }
                }
            });
        spawned.ok().map(|_| ReaderThread { ask, answers })
    }
}

/// Texel `(x, y)` of level 0, from the tile holding it (kept in `tile` for the next
/// read). A source that fails gives `None` (the texture counts its failures).
fn read_texel(
    source: &dyn TileSource,
    x: u32,
    y: u32,
    tile: &mut Option<(vramkit::vt::TileId, Vec<u8>)>,
) -> Option<Texel> {
    use vramkit::vt::{texel_bytes, TileId, BORDER, INNER, TILE};
    let id = TileId::new(0, x / INNER, y / INNER);
    if tile.as_ref().is_none_or(|(t, _)| *t != id) {
        *tile = Some((id, source.read_tile(id).ok()?));
    }
    let (_, bytes) = tile.as_ref()?;
    let format = source.format();
    let size = texel_bytes(format)?;
    let (u, v) = (x % INNER + BORDER, y % INNER + BORDER);
    let at = (v * TILE + u) as usize * size;
    Some(Texel {
        x,
        y,
        format,
        bytes: bytes.get(at..at + size)?.to_vec(),
    })
}
