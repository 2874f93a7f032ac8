//! Sets `vulkan_hal` where wgpu builds its Vulkan backend, as vramkit's own `build.rs`
//! does: matmul_lab reaches Vulkan through wgpu-hal only there.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(vulkan_hal)");
    println!("cargo::rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if matches!(os.as_str(), "windows" | "linux" | "android" | "freebsd") {
        println!("cargo::rustc-cfg=vulkan_hal");
    }
}
