//! Sets `vulkan_hal` where wgpu builds its Vulkan backend (Windows, Linux, Android,
//! FreeBSD; wgpu's own `vulkan` cfg with its default features): the places that reach
//! Vulkan through wgpu-hal (host memory the GPU copies directly, the host-read barrier,
//! the device-local heap size) compile only there and fall back to wgpu's portable paths
//! elsewhere (Metal, WebGPU).

fn main() {
    println!("cargo::rustc-check-cfg=cfg(vulkan_hal)");
    println!("cargo::rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if matches!(os.as_str(), "windows" | "linux" | "android" | "freebsd") {
        println!("cargo::rustc-cfg=vulkan_hal");
    }
}
