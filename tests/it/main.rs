//! The integration tests: one binary of modules, as wgpu's `tests/tests/root.rs` (one
//! link of wgpu and naga instead of one per file), on a real adapter: lavapipe here and
//! in CI, the GPU through the device tool. A test that finds no adapter fails and says
//! how to install one. `cargo test --test it tier::` runs one module; the browser suite
//! (`tests/browser.rs`) keeps its own target for wasm-bindgen.

#[path = "../support/mod.rs"]
mod common;
/// The mixed workload of the observability tests (and of `examples/monitor.rs`).
#[path = "../../examples/support/observe.rs"]
mod observe;

mod alloc_core;
mod arena;
mod callbacks;
mod device_lost;
mod devices;
mod dry_run;
mod gpu_context;
mod history;
mod kernels;
mod kernels_math;
mod ledger;
mod metrics;
mod mips;
mod misuse;
mod model;
mod plan;
mod planned_loop;
mod runtime;
mod stream;
mod threads;
mod tier;
mod vt;
