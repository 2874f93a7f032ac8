//! The GPU context on a real adapter: selection, limits, features, embedding, timing,
//! and every shipped shader compiling on the device.

use crate::common;

use common::{assert_close, gpu, random_f32, rng};
use vramkit::kernels::Kernels;
use vramkit::kernels::MatmulShape;
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
    batch.axpy(0.5, (&xa, n as u64), (&ya, n as u64)).unwrap();
    batch.submit().unwrap();
    let got = readback::read_as::<f32>(&embedded, ya.buffer(), ya.offset(), n).unwrap();
    let want: Vec<f32> = x.iter().zip(&y).map(|(a, b)| 0.5 * a + b).collect();
    assert_close(&got, &want, 1e-6, "axpy on an embedded device");
}

/// A host that hands over its adapter and enabled the cooperative-matrix feature lends
/// vramkit its matrix units: the f16 matmul runs on them (where the adapter has them) and
/// matches the CPU. Without the adapter, or without the feature, they stay off.
#[test]
fn a_host_device_with_its_adapter_lends_the_matrix_units() {
    let name = gpu().info().name.clone();
    let _lock = Gpu::lifecycle_lock();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
        .into_iter()
        .find(|a| a.get_info().name == name)
        .expect("the test GPU's adapter");
    let wanted = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SHADER_F16
        | wgpu::Features::SUBGROUP;
    let device = |features: wgpu::Features| {
        pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
            required_features: adapter.features() & features,
            required_limits: adapter.limits(),
            // SAFETY: the test enables wgpu's experimental cooperative matrices as a host
            // app would; its one use is vramkit's matmul, checked below against the CPU.
            experimental_features: unsafe { wgpu::ExperimentalFeatures::enabled() },
            ..Default::default()
        }))
        .expect("a device")
    };
    let without = device(wgpu::Features::SHADER_F16 | wgpu::Features::SUBGROUP);
    let alone = device(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
    let with = device(wanted);
    // Released before either context is dropped: dropping a `Gpu` takes it.
    drop(_lock);
    assert!(
        !Gpu::from_wgpu_with_adapter(&adapter, without.0, without.1).has_matrix_units(),
        "off when the host did not enable the feature"
    );
    assert!(
        !Gpu::from_wgpu_with_adapter(&adapter, alone.0, alone.1).has_matrix_units(),
        "off when the host enabled it without f16 and subgroups, which the kernel needs"
    );
    let host = Gpu::from_wgpu_with_adapter(&adapter, with.0.clone(), with.1.clone());
    assert_eq!(host.has_matrix_units(), gpu().has_matrix_units());
    // The runtime built the same way (clones of the host's handles) lends them too.
    let rt = vramkit::Runtime::from_wgpu_with_adapter(&adapter, with.0, with.1).unwrap();
    assert_eq!(rt.gpu().has_matrix_units(), host.has_matrix_units());
    let arena = Arena::new(&host, Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    assert_eq!(kernels.options().matrix_units, host.has_matrix_units());
    let (m, n, k) = (48usize, 272usize, 40usize);
    let mut r = rng();
    let half = |v: &[f32]| -> Vec<u16> {
        v.iter()
            .map(|&x| half::f16::from_f32(x).to_bits())
            .collect()
    };
    let (a, b) = (
        half(&random_f32(&mut r, m * k)),
        half(&random_f32(&mut r, k * n)),
    );
    let aa = arena.alloc(2 * (m * k) as u64, "a").unwrap();
    let ba = arena.alloc(2 * (k * n) as u64, "b").unwrap();
    let other = Arena::new(&host, Default::default()).unwrap();
    let c = other.alloc_typed::<f32>(m * n, "c").unwrap();
    host.write_buffer(aa.buffer(), aa.offset(), bytemuck::cast_slice(&a));
    host.write_buffer(ba.buffer(), ba.offset(), bytemuck::cast_slice(&b));
    let mut batch = kernels.batch();
    batch
        .matmul::<half::f16>(
            MatmulShape {
                m: m as u64,
                k: k as u64,
                n: n as u64,
            },
            &aa,
            &ba,
            &c,
        )
        .unwrap();
    batch.submit().unwrap();
    let got = readback::read_as::<f32>(&host, c.buffer(), c.offset(), m * n).unwrap();
    let f = |h: u16| half::f16::from_bits(h).to_f32() as f64;
    for i in 0..m {
        for j in 0..n {
            let want: f64 = (0..k).map(|p| f(a[i * k + p]) * f(b[p * n + j])).sum();
            let mag: f64 = (0..k)
                .map(|p| (f(a[i * k + p]) * f(b[p * n + j])).abs())
                .sum();
            let err = (got[i * n + j] as f64 - want).abs() / mag.max(1e-30);
            assert!(err < 1e-5, "c[{i}][{j}] = {} want {want}", got[i * n + j]);
        }
    }
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
    assert_eq!(t.source, common::expected_timing_source());
}

#[test]
fn every_shipped_shader_is_portable_and_compiles_here() {
    for shader in vramkit::SHADERS {
        let source = shader.source().unwrap_or_else(|e| panic!("{e}"));
        let outcomes = vramkit::shaders::check::check(shader.name, &source, shader.requires)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outcomes.len(), 4, "{}", shader.name);
        if !gpu().has(shader.requires) {
            continue;
        }
        let module = naga::front::wgsl::parse_str(&source).unwrap();
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

/// A device that gives a workgroup only WebGPU's default 16 KiB (as a browser does; OpenGL
/// gives 32 KiB) gets every kernel family in variants that fit: the portable scan in
/// tiles of 2048 (the tiles of 8192 need 37 892 bytes), checked against the CPU at sizes
/// that end inside a tile and span several look-back windows.
#[test]
fn a_device_with_webgpus_default_workgroup_memory_runs_every_kernel_family() {
    use rand::Rng;
    use vramkit::kernels::{KernelOptions, ScanKind};
    let name = gpu().info().name.clone();
    let lock = Gpu::lifecycle_lock();
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle());
    let adapter = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()))
        .into_iter()
        .find(|a| a.get_info().name == name)
        .expect("the test GPU's adapter");
    let limits = wgpu::Limits {
        max_compute_workgroup_storage_size: 16 << 10,
        ..adapter.limits()
    };
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        required_limits: limits,
        ..Default::default()
    }))
    .expect("a device with 16 KiB of workgroup memory");
    drop(lock);
    let host = Gpu::from_wgpu(device, queue);
    assert_eq!(host.limits().max_compute_workgroup_storage_size, 16 << 10);
    let arena = Arena::new(&host, Default::default()).unwrap();
    let kernels = Kernels::with_options(&arena, KernelOptions::portable()).unwrap();
    let mut rng = common::rng();
    for n in [1usize, 2047, 2049, 8193, (1 << 20) + 5] {
        let x: Vec<u32> = (0..n).map(|_| rng.gen()).collect();
        let a = arena.alloc(4 * n as u64, "x").unwrap();
        let y = arena.alloc(4 * n as u64, "y").unwrap();
        host.write_buffer(a.buffer(), a.offset(), bytemuck::cast_slice(&x));
        for kind in [ScanKind::Inclusive, ScanKind::Exclusive] {
            let mut batch = kernels.batch();
            batch
                .scan::<u32>(kind, (&a, n as u64), (&y, n as u64))
                .unwrap();
            batch.submit().unwrap();
            let got = vramkit::readback::read_as::<u32>(&host, y.buffer(), y.offset(), n).unwrap();
            let want = common::reference::cpu_scan_u32(&x, kind);
            assert_eq!(got, want, "{kind:?} n={n}");
        }
    }
    // The other families fit too: a sum of ones, a softmax of zeros, a product of ones,
    // a transpose of 0, 1, 2, ... (exact in f32 at these sizes).
    use vramkit::kernels::Reduce;
    let f32s = |v: &[f32], label: &str| {
        let a = arena.alloc(4 * v.len() as u64, label).unwrap();
        host.write_buffer(a.buffer(), a.offset(), bytemuck::cast_slice(v));
        a
    };
    let read = |a: &vramkit::arena::Allocation, n: usize| {
        vramkit::readback::read_as::<f32>(&host, a.buffer(), a.offset(), n).unwrap()
    };
    let (rows, cols) = (67usize, 300usize);
    let ones = f32s(&vec![1.0; rows * cols], "ones");
    let zeros = f32s(&vec![0.0; rows * cols], "zeros");
    let iota: Vec<f32> = (0..rows * cols).map(|i| i as f32).collect();
    let iota = f32s(&iota, "iota");
    let (sum, soft, prod, tr) = (
        f32s(&[0.0], "sum"),
        f32s(&vec![0.0; rows * cols], "softmax"),
        f32s(&vec![0.0; rows * rows], "matmul"),
        f32s(&vec![0.0; rows * cols], "transpose"),
    );
    let mut batch = kernels.batch();
    batch
        .reduce(Reduce::Sum, (&ones, (rows * cols) as u64), (&sum, 1))
        .unwrap();
    batch
        .softmax_rows(
            rows as u64,
            (&zeros, rows as u64 * cols as u64),
            (&soft, rows as u64 * cols as u64),
        )
        .unwrap();
    batch
        .matmul::<f32>(
            MatmulShape {
                m: rows as u64,
                k: cols as u64,
                n: rows as u64,
            },
            &ones,
            &ones,
            &prod,
        )
        .unwrap();
    batch
        .transpose(
            rows as u64,
            (&iota, rows as u64 * cols as u64),
            (&tr, rows as u64 * cols as u64),
        )
        .unwrap();
    batch.submit().unwrap();
    assert_eq!(read(&sum, 1), vec![(rows * cols) as f32]);
    assert!(read(&soft, rows * cols)
        .iter()
        .all(|&v| (v - 1.0 / cols as f32).abs() < 1e-6));
    assert!(read(&prod, rows * rows).iter().all(|&v| v == cols as f32));
    let t = read(&tr, rows * cols);
    for r in 0..rows {
        for c in 0..cols {
            assert_eq!(
                t[c * rows + r],
                (r * cols + c) as f32,
                "transpose ({r}, {c})"
            );
        }
    }
}

/// Issue 61: two wrappers of one wgpu device are one `Gpu` (one queue lock, one identity),
/// also for a device vramkit opened itself; a device set refuses them as two devices,
/// and a different device with wgpu's same id is told apart.
#[test]
fn one_wgpu_device_is_one_gpu_however_often_it_is_wrapped() {
    let (device, queue) = common::host_device(wgpu::Limits::default());
    let first = Gpu::from_wgpu(device.clone(), queue.clone());
    let second = Gpu::from_wgpu(device.clone(), queue.clone());
    assert!(first.same_device(&second), "two wrappers of one device");
    let opened = common::gpu();
    let rewrapped = Gpu::from_wgpu(opened.device().clone(), opened.queue().clone());
    assert!(
        rewrapped.same_device(opened),
        "a vramkit device wrapped again"
    );
    assert!(!first.same_device(opened), "two devices on one adapter");
    let runtimes = vec![
        vramkit::Runtime::new(&first, Default::default()).unwrap(),
        vramkit::Runtime::new(&second, Default::default()).unwrap(),
    ];
    let refused = vramkit::devices::DeviceSet::from_runtimes(runtimes, Default::default());
    assert!(refused.is_err(), "a device set of one device wrapped twice");
    // The wrappers share the queue lock: writes through either land before the next
    // submit of the other, and the bytes read back are the ones written last.
    let arena = vramkit::Arena::new(&first, Default::default()).unwrap();
    let a = arena.alloc(1024, "a").unwrap();
    second.write_buffer(a.buffer(), a.offset(), &[7u8; 1024]);
    first.write_buffer(a.buffer(), a.offset(), &[9u8; 1024]);
    let got = vramkit::readback::read_as::<u8>(&second, a.buffer(), a.offset(), 1024).unwrap();
    assert_eq!(got, vec![9u8; 1024]);
}

/// Issue 62: wgpu's `boids` pattern on a host's own device with its buffers from the
/// arena, through the public API: a compute pass reads one particle buffer (`read`) and
/// writes the other (`read_write`) with a uniform of parameters, then a render pass draws
/// what it wrote as a vertex buffer; the two swap every frame. Both particle buffers are
/// buffers of their own (a shared block is refused with a typed error naming both), and
/// every frame's pixels match the CPU.
#[test]
fn a_boids_style_host_app_binds_arena_buffers_as_its_own() {
    use std::sync::Arc;
    use vramkit::arena::{BindEntry, BindGroup, HostUse};
    let (device, queue) = common::host_device(wgpu::Limits::default());
    let rt = vramkit::Runtime::from_wgpu(device.clone(), queue.clone()).unwrap();
    let arena = rt.arena();
    let (vertex, uniform) = (
        arena.host_pool(HostUse::Vertex).unwrap(),
        arena.host_pool(HostUse::Uniform).unwrap(),
    );
    // Two triangles covering the target, each vertex (x, y, value).
    let quad: Vec<f32> = [
        [-1.0, -1.0],
        [1.0, -1.0],
        [1.0, 1.0],
        [-1.0, -1.0],
        [1.0, 1.0],
        [-1.0, 1.0],
    ]
    .iter()
    .flat_map(|[x, y]| [*x, *y, 0.125])
    .collect();
    let compute_wgsl = r#"
struct Params { scale: f32, add: f32, pad0: f32, pad1: f32 }
@group(0) @binding(0) var<uniform> params: Params;
@group(0) @binding(1) var<storage, read> src: array<f32>;
@group(0) @binding(2) var<storage, read_write> dst: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    let i = id.x;
    if i >= arrayLength(&dst) { return; }
    // Positions stay, values step: v' = v * scale + add (exact in f32 for these).
    if i % 3u == 2u { dst[i] = src[i] * params.scale + params.add; } else { dst[i] = src[i]; }
}"#;
    let render_wgsl = r#"
struct Out { @builtin(position) pos: vec4<f32>, @location(0) @interpolate(flat) value: f32 }
@vertex fn vs(@location(0) xy: vec2<f32>, @location(1) value: f32) -> Out {
    return Out(vec4<f32>(xy, 0.0, 1.0), value);
}
@fragment fn fs(@location(0) @interpolate(flat) value: f32) -> @location(0) vec4<f32> {
    return vec4<f32>(value, 0.0, 0.0, 1.0);
}"#;
    let cs = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("boids-like compute"),
        source: wgpu::ShaderSource::Wgsl(compute_wgsl.into()),
    });
    let compute = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some("boids-like compute"),
        layout: None,
        module: &cs,
        entry_point: Some("main"),
        compilation_options: Default::default(),
        cache: None,
    });
    let rs = device.create_shader_module(wgpu::ShaderModuleDescriptor {
        label: Some("boids-like render"),
        source: wgpu::ShaderSource::Wgsl(render_wgsl.into()),
    });
    let size = 16u32;
    let target = device.create_texture(&wgpu::TextureDescriptor {
        label: Some("frame"),
        size: wgpu::Extent3d {
            width: size,
            height: size,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba32Float,
        usage: wgpu::TextureUsages::RENDER_ATTACHMENT | wgpu::TextureUsages::COPY_SRC,
        view_formats: &[],
    });
    let render = device.create_render_pipeline(&wgpu::RenderPipelineDescriptor {
        label: Some("boids-like render"),
        layout: None,
        vertex: wgpu::VertexState {
            module: &rs,
            entry_point: Some("vs"),
            compilation_options: Default::default(),
            buffers: &[Some(wgpu::VertexBufferLayout {
                array_stride: 12,
                step_mode: wgpu::VertexStepMode::Vertex,
                attributes: &wgpu::vertex_attr_array![0 => Float32x2, 1 => Float32],
            })],
        },
        fragment: Some(wgpu::FragmentState {
            module: &rs,
            entry_point: Some("fs"),
            compilation_options: Default::default(),
            targets: &[Some(wgpu::TextureFormat::Rgba32Float.into())],
        }),
        primitive: Default::default(),
        depth_stencil: None,
        multisample: Default::default(),
        multiview_mask: None,
        cache: None,
    });
    let layout = compute.get_bind_group_layout(0);
    let params = Arc::new(
        arena
            .alloc_typed_in::<[f32; 4]>(uniform, 1, "sim params")
            .unwrap(),
    );
    rt.upload(&*params, &[[2.0, 0.25, 0.0, 0.0]]).unwrap();
    // Both particle buffers in the vertex pool's shared block: refused, naming both.
    {
        let a = Arc::new(
            arena
                .alloc_typed_in::<f32>(vertex, quad.len(), "particles a")
                .unwrap(),
        );
        let b = Arc::new(
            arena
                .alloc_typed_in::<f32>(vertex, quad.len(), "particles b")
                .unwrap(),
        );
        assert!(a.buffer() == b.buffer(), "the pool put them in one block");
        let refused = BindGroup::new(
            rt.gpu(),
            "shared",
            &layout,
            &[
                BindEntry::uniform(0, &params),
                BindEntry::read(1, &a),
                BindEntry::read_write(2, &b),
            ],
        );
        match refused {
            Err(vramkit::Error::InvalidArgument {
                kind: vramkit::Misuse::Overlap,
                what,
                hint,
            }) => {
                assert!(
                    what.contains("particles a") && what.contains("particles b"),
                    "{what}"
                );
                assert!(hint.contains("alloc_own_buffer_in"), "{hint}");
            }
            other => panic!("expected a typed refusal, got {other:?}"),
        }
    }
    // Buffers of their own: the frames run, swapping read and write as boids does.
    let own = |label: &str| {
        let a = arena
            .alloc_own_buffer_in(vertex, 4 * quad.len() as u64, label)
            .unwrap();
        Arc::new(a.typed::<f32>().unwrap())
    };
    let particles = [own("particles a"), own("particles b")];
    assert!(particles[0].buffer() != particles[1].buffer());
    rt.upload(&*particles[0], &quad).unwrap();
    let groups: Vec<BindGroup> = (0..2)
        .map(|k| {
            BindGroup::new(
                rt.gpu(),
                "boids step",
                &layout,
                &[
                    BindEntry::uniform(0, &params),
                    BindEntry::read(1, &particles[k]),
                    BindEntry::read_write(2, &particles[1 - k]),
                ],
            )
            .unwrap()
        })
        .collect();
    let view = target.create_view(&Default::default());
    let mut expected = 0.125f32;
    for frame in 0..6 {
        let (k, written) = (frame % 2, &particles[1 - frame % 2]);
        let mut encoder = device.create_command_encoder(&Default::default());
        {
            let mut pass = encoder.begin_compute_pass(&Default::default());
            pass.set_pipeline(&compute);
            pass.set_bind_group(0, groups[k].group(), &[]);
            pass.dispatch_workgroups((quad.len() as u32).div_ceil(64), 1, 1);
        }
        {
            let mut pass = encoder.begin_render_pass(&wgpu::RenderPassDescriptor {
                label: Some("frame"),
                color_attachments: &[Some(wgpu::RenderPassColorAttachment {
                    view: &view,
                    depth_slice: None,
                    resolve_target: None,
                    ops: wgpu::Operations {
                        load: wgpu::LoadOp::Clear(wgpu::Color::BLACK),
                        store: wgpu::StoreOp::Store,
                    },
                })],
                depth_stencil_attachment: None,
                timestamp_writes: None,
                occlusion_query_set: None,
                multiview_mask: None,
            });
            pass.set_pipeline(&render);
            let range = written.offset()..written.offset() + written.size();
            pass.set_vertex_buffer(0, written.buffer().slice(range));
            pass.draw(0..6, 0..1);
        }
        rt.gpu().submit([encoder.finish()]);
        expected = expected * 2.0 + 0.25;
        let pixels = read_texture_rgba32f(&rt, &target, size);
        assert!(
            pixels.chunks(4).all(|p| p[0] == expected),
            "frame {frame}: want {expected}, got {:?}",
            &pixels[..4]
        );
    }
}

/// The rgba32float texture `target` (`size` x `size`), read back.
fn read_texture_rgba32f(rt: &vramkit::Runtime, target: &wgpu::Texture, size: u32) -> Vec<f32> {
    let row = (size * 16).next_multiple_of(256);
    let staging = rt
        .arena()
        .alloc((row * size) as u64, "frame readback")
        .unwrap();
    let mut encoder = rt
        .gpu()
        .device()
        .create_command_encoder(&Default::default());
    encoder.copy_texture_to_buffer(
        target.as_image_copy(),
        wgpu::TexelCopyBufferInfo {
            buffer: staging.buffer(),
            layout: wgpu::TexelCopyBufferLayout {
                offset: staging.offset(),
                bytes_per_row: Some(row),
                rows_per_image: None,
            },
        },
        wgpu::Extent3d {
            width: size,
            height: size,
            depth_or_array_layers: 1,
        },
    );
    rt.gpu().submit([encoder.finish()]);
    let bytes = rt
        .downloader()
        .download(&staging, 0, (row * size) as u64)
        .unwrap();
    bytes
        .chunks(row as usize)
        .flat_map(|r| bytemuck::cast_slice::<u8, f32>(&r[..(size * 16) as usize]).to_vec())
        .collect()
}

/// Issue 62: a bind group holds the allocations it binds: dropped by the program, they
/// stay where they are (the next allocation of that size lands elsewhere) until the bind
/// group drops.
#[test]
fn a_bind_group_keeps_what_it_binds_alive() {
    use std::sync::Arc;
    use vramkit::arena::{BindEntry, BindGroup};
    let gpu = common::gpu();
    let arena = Arena::new(gpu, Default::default()).unwrap();
    let layout = gpu
        .device()
        .create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
            label: Some("one storage buffer"),
            entries: &[wgpu::BindGroupLayoutEntry {
                binding: 0,
                visibility: wgpu::ShaderStages::COMPUTE,
                ty: wgpu::BindingType::Buffer {
                    ty: wgpu::BufferBindingType::Storage { read_only: false },
                    has_dynamic_offset: false,
                    min_binding_size: None,
                },
                count: None,
            }],
        });
    let bound = Arc::new(arena.alloc(4096, "bound").unwrap());
    let place = (bound.buffer().clone(), bound.offset());
    let group = BindGroup::new(gpu, "kept", &layout, &[BindEntry::read_write(0, &bound)]).unwrap();
    drop(bound);
    arena.synchronize().unwrap();
    let next = arena.alloc(4096, "next").unwrap();
    assert!(
        (next.buffer().clone(), next.offset()) != place,
        "an allocation took the range a live bind group still binds"
    );
    assert_eq!(arena.stats().live_allocations, 2, "{}", arena.summary());
    drop(group);
    arena.synchronize().unwrap();
    assert_eq!(arena.stats().live_allocations, 1);
}
