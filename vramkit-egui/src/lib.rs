//! vramkit inside an egui app: two widgets on the device of the app's `egui-wgpu`
//! renderer (eframe's, or any host's), sharing it through [`runtime_for`].
//!
//! - [`VirtualImage`]: an image of any size (2^20 x 2^20 and beyond: larger than the
//!   GPU's texture limit and its memory) streamed through a vramkit virtual texture and
//!   drawn in egui's own render pass by a paint callback. Pan with a drag, zoom with the
//!   wheel or a pinch around the pointer, fit and 1:1 buttons, the exact texel under the
//!   pointer, and a small overlay of what is resident. Tiles still loading show their
//!   coarser mip, never garbage.
//! - [`MemoryInspector`]: the arena's live figures, its labels by bytes, a timeline of
//!   what it holds, its blocks, the tiers and the virtual textures' caches, drawn with
//!   egui. It reads what the arena records anyway and does nothing while not shown.
//!
//! Both are egui widgets as egui's are: `ui.add(...)` returns a [`egui::Response`], and
//! what persists between frames lives in a state value the app owns
//! ([`VirtualImageState`], [`InspectorState`]), never in globals.
//!
//! ```no_run
//! use std::sync::Arc;
//! use vramkit::vt::{Mandelbrot, VtConfig};
//! use vramkit_egui::{runtime_for, InspectorState, MemoryInspector, VirtualImage, VirtualImageState};
//!
//! struct App {
//!     runtime: vramkit::Runtime,
//!     image: VirtualImageState,
//!     inspector: InspectorState,
//! }
//!
//! impl App {
//!     /// Once, when eframe starts the app: vramkit on eframe's device.
//!     fn new(cc: &eframe::CreationContext<'_>) -> vramkit::Result<App> {
//!         let rs = cc.wgpu_render_state.as_ref().expect("eframe's wgpu renderer");
//!         let runtime = runtime_for(rs)?;
//!         let source = Arc::new(Mandelbrot::new(1 << 20)?);
//!         let image = VirtualImageState::new(rs, &runtime, source, VtConfig::default())?;
//!         Ok(App { runtime, image, inspector: InspectorState::default() })
//!     }
//! }
//!
//! impl eframe::App for App {
//!     fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
//!         let stats = self.image.stats();
//!         ui.add(MemoryInspector::new(&mut self.inspector, self.runtime.arena()).virtual_texture("image", stats));
//!         let response = ui.add(VirtualImage::new(&mut self.image));
//!         if let Some(texel) = self.image.hovered_texel() {
//!             response.on_hover_text(texel.to_string());
//!         }
//!     }
//! }
//! ```
//!
//! # Frame order
//! The image's per-frame work rides egui's frame: the widget queues a paint callback
//! whose `prepare` (in egui-wgpu's render, before its submit) ends the virtual texture's
//! previous frame, whose sampling egui submitted, and begins this one: feedback read
//! back without waiting, tiles uploaded, the page table rewritten. Its `paint` draws
//! one triangle in egui's pass. Nothing waits for the GPU.

mod format;
mod inspector;
mod paint;
mod timeline;
mod view;
mod virtual_image;

pub use format::Texel;
pub use inspector::{InspectorState, MemoryInspector};
pub use view::{level_for, pixel_uv, View};
pub use virtual_image::{VirtualImage, VirtualImageState};

/// A vramkit runtime on the device and queue of an egui-wgpu renderer (eframe's
/// `CreationContext::wgpu_render_state`), with its adapter, so that vramkit and egui
/// share one device.
pub fn runtime_for(render_state: &egui_wgpu::RenderState) -> vramkit::Result<vramkit::Runtime> {
    vramkit::Runtime::from_wgpu_with_adapter(
        &render_state.adapter,
        render_state.device.clone(),
        render_state.queue.clone(),
    )
}
