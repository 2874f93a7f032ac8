//! Sets `vulkan_hal` where wgpu builds its Vulkan backend (Windows, Linux, Android,
//! FreeBSD; wgpu's own `vulkan` cfg with its default features): the places that reach
//! Vulkan through wgpu-hal (host memory the GPU copies directly, the host-read barrier,
//! the device-local heap size) compile only there and fall back to wgpu's portable paths
//! elsewhere (Metal, WebGPU).
//!
//! Sets `dx12_hal` on Windows and `metal_hal` on Apple targets, where wgpu builds those
//! backends: the driver-memory readers of DXGI and Metal (`gpu/driver_memory.rs`).
//!
//! Sets `native` or `web`: the browser build (wasm32) against every other, the one
//! distinction the crate's `cfg`s draw by target.
//!
//! Sets `validate_locks` (the lock-rank checks of `src/lock_rank.rs`) in builds with debug
//! assertions, and in optimised builds asked for it, as wgpu-core's `wgpu_validate_locks`:
//! `VRAMKIT_VALIDATE_LOCKS=1 cargo test --release`, or
//! `RUSTFLAGS="--cfg vramkit_validate_locks"`.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(vulkan_hal)");
    println!("cargo::rustc-check-cfg=cfg(dx12_hal)");
    println!("cargo::rustc-check-cfg=cfg(metal_hal)");
    println!("cargo::rustc-check-cfg=cfg(native)");
    println!("cargo::rustc-check-cfg=cfg(web)");
    // `native` and `web` (as wgpu's cfg_aliases): the browser build (wasm32, WebGPU, one
    // thread, nothing may block) against every other.
    if std::env::var("CARGO_CFG_TARGET_ARCH").is_ok_and(|a| a == "wasm32") {
        println!("cargo::rustc-cfg=web");
    } else {
        println!("cargo::rustc-cfg=native");
    }
    println!("cargo::rustc-check-cfg=cfg(validate_locks)");
    println!("cargo::rustc-check-cfg=cfg(vramkit_validate_locks)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=VRAMKIT_VALIDATE_LOCKS");
    let asked = std::env::var("VRAMKIT_VALIDATE_LOCKS").is_ok_and(|v| v == "1")
        || std::env::var_os("CARGO_CFG_VRAMKIT_VALIDATE_LOCKS").is_some();
    if asked || std::env::var_os("CARGO_CFG_DEBUG_ASSERTIONS").is_some() {
        println!("cargo::rustc-cfg=validate_locks");
    }
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if matches!(os.as_str(), "windows" | "linux" | "android" | "freebsd") {
        println!("cargo::rustc-cfg=vulkan_hal");
    }
    if os == "windows" {
        println!("cargo::rustc-cfg=dx12_hal");
    }
    if std::env::var("CARGO_CFG_TARGET_VENDOR").is_ok_and(|v| v == "apple") {
        println!("cargo::rustc-cfg=metal_hal");
    }
}
