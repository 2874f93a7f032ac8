//! The GPU context on a real adapter: selection, limits, features, embedding, timing,
//! and every shipped shader compiling on the device.

mod common;

use common::{assert_close, gpu, random_f32, rng};
use vramkit::kernels::Kernels;
use vramkit::{readback, Arena, Gpu};

#[test]
fn describes_the_adapter_in_one_line() {
    let line = gpu().describe();
    assert!(!line.contains('\n'));
    assert!(line.contains(&gpu().info().name), "{line}");
    assert!(
        line.contains(&format!("{:?}", gpu().info().backend)),
        "{line}"
    );
    assert!(line.contains("max storage binding"), "{line}");
}

#[test]
fn requests_the_adapters_real_limits() {
    let _ = gpu();
    let adapters = {
        // Instances are made one thread at a time (`Gpu::lifecycle_lock`).
        let _lock = vramkit::Gpu::lifecycle_lock();
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
        pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
    };
    let same = adapters
        .iter()
        .find(|a| {
            a.get_info().name == gpu().info().name && a.get_info().backend == gpu().info().backend
        })
        .expect("the test adapter is enumerable");
    let adapter_limits = same.limits();
    let l = gpu().limits();
    assert_eq!(
        l.max_storage_buffer_binding_size,
        adapter_limits.max_storage_buffer_binding_size
    );
    assert_eq!(l.max_buffer_size, adapter_limits.max_buffer_size);
    assert_eq!(
        l.max_compute_invocations_per_workgroup,
        adapter_limits.max_compute_invocations_per_workgroup
    );
    // Optional features the adapter offers are on.
    let offered = same.features() & vramkit::OPTIONAL_FEATURES;
    assert_eq!(gpu().features() & vramkit::OPTIONAL_FEATURES, offered);
}

#[test]
fn embeds_a_device_the_host_owns() {
    // A host renderer creates its own device with default (WebGPU) limits.
    let (device, queue) = common::host_device(wgpu::Limits::default());
    let host_limits = device.limits();
    let host_features = device.features();
    let embedded = Gpu::from_wgpu(device, queue);
    assert_eq!(
        embedded.limits().max_storage_buffer_binding_size,
        host_limits.max_storage_buffer_binding_size
    );
    // Exactly what the host enabled (none of vramkit's optional features were asked for).
    assert_eq!(embedded.features(), host_features);
    assert!(
        !embedded.has(wgpu::Features::SUBGROUP) || host_features.contains(wgpu::Features::SUBGROUP)
    );
    // vramkit works on it: a kernel through an arena on the host's device.
    let arena = Arena::new(&embedded, Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    let n = 1000;
    let (x, y) = (random_f32(&mut r, n), random_f32(&mut r, n));
    let xa = arena.alloc_typed::<f32>(n, "x").unwrap();
    let ya = arena.alloc_typed::<f32>(n, "y").unwrap();
    embedded
        .queue()
        .write_buffer(xa.buffer(), xa.offset(), bytemuck::cast_slice(&x));
    embedded
        .queue()
        .write_buffer(ya.buffer(), ya.offset(), bytemuck::cast_slice(&y));
    let mut batch = kernels.batch();
    batch.axpy(n as u64, 0.5, &xa, &ya).unwrap();
    batch.submit().unwrap();
    let got = readback::read_as::<f32>(&embedded, ya.buffer(), ya.offset(), n).unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 0.5 * a + b).collect();
    assert_close(&got, &want, 1e-6, "axpy on an embedded device");
}

#[test]
fn times_gpu_work() {
    let g = gpu();
    let buf = g.device().create_buffer(&wgpu::BufferDescriptor {
        label: None,
        size: 1 << 20,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let t = g.time(|e| e.clear_buffer(&buf, 0, None)).unwrap();
    assert!(t.seconds >= 0.0 && t.seconds.is_finite());
    assert!(t.wall_seconds > 0.0);
    let expected = if g.has(wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS) {
        vramkit::TimingSource::GpuTimestamps
    } else {
        vramkit::TimingSource::WallClock
    };
    assert_eq!(t.source, expected);
}

#[test]
fn every_shipped_shader_is_portable_and_compiles_here() {
    for shader in vramkit::shaders::ALL {
        let outcomes = vramkit::shaders::check::check(shader.name, shader.source, shader.requires)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outcomes.len(), 4, "{}", shader.name);
        if !gpu().has(shader.requires) {
            continue;
        }
        let module = naga::front::wgsl::parse_str(shader.source).unwrap();
        for ep in &module.entry_points {
            gpu()
                .pipeline(shader, &ep.name)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

/// "No adapter" names the real cause: a name filter that matched nothing says so (and
/// lists what was seen) instead of suggesting a Vulkan driver that is installed.
#[test]
fn selection_by_name_fails_clearly_when_nothing_matches() {
    gpu(); // an adapter exists
    let options = vramkit::GpuOptions {
        adapter_name: Some("no-such-gpu-xyz".into()),
        ..Default::default()
    };
    let e = Gpu::headless_with(&options).unwrap_err().to_string();
    assert!(
        e.contains("no adapter's name contains 'no-such-gpu-xyz'"),
        "{e}"
    );
    assert!(
        e.contains(&gpu().info().name),
        "lists the adapters seen: {e}"
    );
    assert!(!e.contains("mesa-vulkan-drivers"), "no install advice: {e}");
}
