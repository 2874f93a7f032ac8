//! What a new user gets wrong, and gets a typed error for instead of a wrong result, a
//! silent no-op or a panic: allocations and pools of another device or arena, kernels
//! that would overlap their output with an input, operands kernels cannot bind, devices
//! with downlevel limits. After every error the data already on the GPU is unchanged
//! (read back and compared).

use crate::common;

use common::{assert_close, gpu, random_f32, rng};
use vramkit::arena::PoolConfig;
use vramkit::kernels::MatmulShape;
use vramkit::kernels::{Kernels, Reduce, ScanKind, Unary};
use vramkit::stream::{Downloader, Uploader};
use vramkit::{readback, Allocation, Arena, Error, Gpu, Misuse};

fn upload(arena: &Arena, data: &[f32], label: &str) -> Allocation {
    let a = arena.alloc(4 * data.len() as u64, label).unwrap();
    arena
        .gpu()
        .queue()
        .write_buffer(a.buffer(), a.offset(), bytemuck::cast_slice(data));
    a
}

fn read(a: &Allocation, n: usize) -> Vec<f32> {
    readback::read_as::<f32>(a.gpu(), a.buffer(), a.offset(), n).unwrap()
}

fn invalid<T: std::fmt::Debug>(r: vramkit::Result<T>, needle: &str) {
    match r {
        Err(e @ Error::InvalidArgument { .. }) => {
            assert!(e.to_string().contains(needle), "'{needle}' not in: {e}")
        }
        other => panic!("expected InvalidArgument ({needle}), got {other:?}"),
    }
}

/// A second context on the same adapter: its buffer ids repeat the first one's, so an
/// unchecked call would read or write an unrelated allocation of the first.
#[test]
fn allocations_and_pools_of_another_device_or_arena_are_refused() {
    let gpu2 = Gpu::headless().unwrap();
    assert!(!gpu().same_device(&gpu2) && gpu().same_device(&gpu().clone()));
    let arena1 = Arena::new(gpu(), Default::default()).unwrap();
    let arena2 = Arena::new(&gpu2, Default::default()).unwrap();
    let kernels1 = Kernels::new(&arena1).unwrap();
    let mut r = rng();
    let (x, y) = (random_f32(&mut r, 1024), random_f32(&mut r, 1024));
    let y1 = upload(&arena1, &y, "y on gpu1");
    let canary = upload(&arena1, &[42.0; 1024], "canary on gpu1");
    let x2 = upload(&arena2, &x, "x on gpu2");
    gpu2.wait_idle().unwrap();

    let mut batch = kernels1.batch();
    invalid(
        batch.axpy(3.0, (&x2, 1024), (&y1, 1024)).map(|_| ()),
        "another device",
    );
    invalid(batch.fill(1.0, (&x2, 1024)).map(|_| ()), "another device");
    assert!(batch.is_empty(), "nothing was recorded");
    batch.submit().unwrap();

    let up1 = Uploader::new(gpu(), Default::default());
    let down1 = Downloader::new(gpu(), Default::default());
    invalid(up1.upload(&x2, 0, &[0u8; 64]), "another device");
    invalid(down1.download(&x2, 0, 64), "another device");
    let mut ub = up1.batch();
    invalid(ub.add(&x2, 0, &[0u8; 64]).map(|_| ()), "another device");
    ub.submit().unwrap();

    let pool2 = arena2.default_pool();
    invalid(arena1.alloc_in(pool2, 64, "foreign pool"), "another arena");
    let other_arena_same_gpu = Arena::new(gpu(), Default::default()).unwrap();
    let pool = other_arena_same_gpu
        .add_pool(
            "mine",
            PoolConfig {
                quota: None,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                ..Default::default()
            },
        )
        .unwrap();
    invalid(arena1.alloc_in(pool, 64, "foreign pool"), "another arena");

    // Nothing was touched on either device.
    assert_eq!(read(&y1, 1024), y);
    assert_eq!(read(&canary, 1024), vec![42.0; 1024]);
    assert_eq!(read(&x2, 1024), x);
}

/// Every kernel with an output refuses an output that overlaps an input, except the
/// elementwise maps and row softmax on the very same range, which are correct in place
/// (checked against the CPU).
#[test]
fn overlapping_outputs_are_refused_and_in_place_maps_are_correct() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let mut r = rng();
    let n = 4096usize;
    let data = random_f32(&mut r, 2 * n);
    let a = upload(&arena, &data[..n], "a");
    let b = upload(&arena, &data[n..], "b");
    let mut batch = kernels.batch();
    invalid(
        batch.to_f16((&a, n as u64), (&a, n as u64)).map(|_| ()),
        "overlaps",
    );
    invalid(
        batch.to_f32((&a, n as u64), (&a, n as u64)).map(|_| ()),
        "overlaps",
    );
    invalid(
        batch
            .reduce(Reduce::Sum, (&a, n as u64), (&a, 1))
            .map(|_| ()),
        "overlaps",
    );
    invalid(
        batch
            .reduce_rows(Reduce::Max, (&a, 4 * ((n / 4) as u64)), (&a, 4))
            .map(|_| ()),
        "overlaps",
    );
    invalid(
        batch
            .scan::<f32>(ScanKind::Inclusive, (&a, n as u64), (&a, n as u64))
            .map(|_| ()),
        "overlaps",
    );
    invalid(
        batch
            .transpose(64, (&a, 64 * 64), (&a, 64 * 64))
            .map(|_| ()),
        "overlaps",
    );
    invalid(
        batch
            .matmul::<f32>(
                MatmulShape {
                    m: 64,
                    k: 64,
                    n: 64,
                },
                &a,
                &b,
                &a,
            )
            .map(|_| ()),
        "overlaps",
    );
    assert!(batch.is_empty());
    // In place and correct: y = relu(y); y = 2y + y; softmax rows of y in place.
    batch
        .map(Unary::Relu, (&a, n as u64), (&a, n as u64))
        .unwrap();
    batch.axpy(2.0, (&a, n as u64), (&a, n as u64)).unwrap();
    batch
        .softmax_rows(
            16,
            (&b, 16 * ((n / 16) as u64)),
            (&b, 16 * ((n / 16) as u64)),
        )
        .unwrap();
    batch.submit().unwrap();
    let want_a: Vec<f32> = data[..n].iter().map(|&v| 3.0 * v.max(0.0)).collect();
    assert_close(&read(&a, n), &want_a, 1e-6, "relu then axpy in place");
    let mut want_b = data[n..].to_vec();
    for row in want_b.chunks_mut(n / 16) {
        let m = row.iter().cloned().fold(f32::MIN, f32::max);
        let s: f32 = row.iter().map(|v| (v - m).exp()).sum();
        row.iter_mut().for_each(|v| *v = (*v - m).exp() / s);
    }
    assert_close(&read(&b, n), &want_b, 1e-5, "softmax in place");
}

/// Operands a kernel cannot bind are typed errors: larger than the storage-binding
/// limit, in a pool without STORAGE; the same for pools with invalid usage at add_pool.
#[test]
fn operands_kernels_cannot_bind_are_typed_errors() {
    let arena = Arena::new(gpu(), Default::default()).unwrap();
    let kernels = Kernels::new(&arena).unwrap();
    let limit = gpu().limits().max_storage_buffer_binding_size;
    let huge = (limit + (8 << 20) <= gpu().limits().max_buffer_size / 2).then(|| {
        arena
            .alloc(limit + (8 << 20), "past the binding limit")
            .unwrap()
    });
    let mut batch = kernels.batch();
    if let Some(huge) = &huge {
        invalid(
            batch.fill(1.0, (huge, 1024)).map(|_| ()),
            "storage-binding limit",
        );
    }
    let copy_only = arena
        .add_pool(
            "copy only",
            PoolConfig {
                quota: None,
                usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                ..Default::default()
            },
        )
        .unwrap();
    let no_storage = arena.alloc_in(copy_only, 4096, "no storage").unwrap();
    invalid(
        batch.fill(1.0, (&no_storage, 1024)).map(|_| ()),
        "without STORAGE",
    );
    assert!(batch.is_empty());
    batch.submit().unwrap();
    for usage in [
        wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::STORAGE,
        wgpu::BufferUsages::MAP_WRITE | wgpu::BufferUsages::COPY_DST,
        wgpu::BufferUsages::empty(),
    ] {
        if usage.contains(wgpu::BufferUsages::MAP_READ)
            && gpu().has(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS)
        {
            continue;
        }
        invalid(
            arena.add_pool(
                &format!("bad {usage:?}"),
                PoolConfig {
                    quota: None,
                    usage,
                    ..Default::default()
                },
            ),
            "pool",
        );
    }
}

/// A host app's device with downlevel (WebGL2) limits: the arena works, the kernel
/// library says it cannot run there instead of panicking in wgpu.
#[test]
fn kernels_on_a_downlevel_device_are_a_typed_error() {
    let (device, queue) = common::host_device(wgpu::Limits::downlevel_webgl2_defaults());
    let low = Gpu::from_wgpu(device, queue);
    let arena = Arena::new(&low, Default::default()).unwrap();
    let a = arena.alloc(256, "works").unwrap();
    assert_eq!(a.size(), 256);
    invalid(Kernels::new(&arena), "cannot run vramkit's kernels");
}

/// What each row of the misuse table expects.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// An `InvalidArgument` of this kind.
    Invalid(Misuse),
    OutOfMemory,
    Alloc,
    Io,
    Tile,
}

fn matches(e: &Error, want: Expect) -> bool {
    match (e, want) {
        (Error::InvalidArgument { kind, .. }, Expect::Invalid(want)) => *kind == want,
        _ => matches!(
            (e, want),
            (Error::OutOfMemory(_), Expect::OutOfMemory)
                | (Error::Alloc(_), Expect::Alloc)
                | (Error::Io { .. }, Expect::Io)
                | (Error::Tile { .. }, Expect::Tile)
        ),
    }
}

/// Every public entry point x every class of bad input (zero, huge, misaligned, out of
/// range, wrong usage, wrong device, wrong length): a typed error of the expected kind,
/// and afterwards the arena's live allocations and a canary's bytes are unchanged. (Use
/// after drop does not compile: allocations are RAII and batches borrow them; device loss
/// is `tests/device_lost.rs`.)
#[test]
fn every_entry_point_refuses_each_class_of_bad_input_and_changes_nothing() {
    use std::sync::Arc;
    use vramkit::arena::Budget;
    use vramkit::vt::{PackFile, ProceduralSource, VirtualTexture, VtConfig, VtLayout};
    use vramkit::{Runtime, RuntimeConfig};

    let rt = Runtime::new(
        gpu(),
        RuntimeConfig {
            arena: vramkit::ArenaConfig {
                budget: Budget::Bytes(64 << 20),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .unwrap();
    let other_gpu = Gpu::headless().unwrap();
    let other = Arena::new(&other_gpu, Default::default()).unwrap();
    let foreign = other.alloc(1024, "foreign").unwrap();
    let foreign_pool = other.default_pool();
    let foreign_x = other
        .alloc(1024, "foreign x")
        .unwrap()
        .typed::<f32>()
        .unwrap();
    let mut r = rng();
    let canary_data = random_f32(&mut r, 1024);
    let canary = rt.alloc_from(&canary_data, "canary").unwrap();
    let a = rt.alloc_from(&random_f32(&mut r, 256), "a").unwrap();
    let b = rt.alloc_from(&random_f32(&mut r, 100), "b").unwrap();
    let no_copy_dst = rt
        .arena()
        .add_pool(
            "no-copy-dst",
            PoolConfig {
                quota: None,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                ..Default::default()
            },
        )
        .unwrap();
    let read_only = rt.arena().alloc_in(no_copy_dst, 256, "read only").unwrap();
    let sampled_only = gpu().device().create_texture(&wgpu::TextureDescriptor {
        label: Some("sampled only"),
        size: wgpu::Extent3d {
            width: 128,
            height: 128,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba8Unorm,
        usage: wgpu::TextureUsages::TEXTURE_BINDING,
        view_formats: &[],
    });
    let texture = gpu().device().create_texture(&wgpu::TextureDescriptor {
        label: Some("target"),
        size: wgpu::Extent3d {
            width: 128,
            height: 128,
            depth_or_array_layers: 1,
        },
        mip_level_count: 1,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format: wgpu::TextureFormat::Rgba8Unorm,
        usage: wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::TEXTURE_BINDING,
        view_formats: &[],
    });
    let tile = wgpu::Extent3d {
        width: 128,
        height: 128,
        depth_or_array_layers: 1,
    };
    let tile_bytes = vec![1u8; 128 * 128 * 4];
    let up = rt.uploader();
    let down = rt.downloader();
    let arena = rt.arena();
    let source = Arc::new(ProceduralSource::new(1 << 12, 1 << 12).unwrap());
    let vt_config = |slots, format| VtConfig {
        cache_slots: slots,
        format: Some(format),
        render_size: (64, 64),
        ..Default::default()
    };
    // A virtual texture on the other device too, so `other` has the vt pools and only the
    // device check can refuse it.
    let _other_vt = VirtualTexture::new(
        &other_gpu,
        &other,
        source.clone(),
        vt_config(64, wgpu::TextureFormat::Rgba8Unorm),
    )
    .unwrap();
    let vt = VirtualTexture::new(
        gpu(),
        arena,
        source.clone(),
        vt_config(64, wgpu::TextureFormat::Rgba8Unorm),
    )
    .unwrap();
    type Row<'r> = (&'r str, Expect, Box<dyn Fn() -> vramkit::Result<()> + 'r>);
    let table: Vec<Row> = vec![
        (
            "alloc: zero bytes",
            Expect::Alloc,
            Box::new(|| arena.alloc(0, "x").map(drop)),
        ),
        (
            "alloc: u64::MAX bytes",
            Expect::OutOfMemory,
            Box::new(|| arena.alloc(u64::MAX, "x").map(drop)),
        ),
        (
            "alloc: past the budget",
            Expect::OutOfMemory,
            Box::new(|| arena.alloc(1 << 30, "x").map(drop)),
        ),
        (
            "alloc_in: another arena's pool",
            Expect::Invalid(Misuse::Foreign),
            Box::new(|| arena.alloc_in(foreign_pool, 64, "x").map(drop)),
        ),
        (
            "typed alloc: zero elements",
            Expect::Alloc,
            Box::new(|| rt.alloc::<f32>(0, "x").map(drop)),
        ),
        (
            "upload: offset past the end",
            Expect::Invalid(Misuse::Length),
            Box::new(|| up.upload(&a, a.size(), &[1, 2, 3, 4])),
        ),
        (
            "upload: length past the end",
            Expect::Invalid(Misuse::Length),
            Box::new(|| up.upload(&a, 4, &vec![0u8; a.size() as usize])),
        ),
        (
            "upload: huge offset",
            Expect::Invalid(Misuse::Length),
            Box::new(|| up.upload(&a, u64::MAX - 2, &[1, 2, 3, 4])),
        ),
        (
            "upload: another device's allocation",
            Expect::Invalid(Misuse::Foreign),
            Box::new(|| up.upload(&foreign, 0, &[0; 16])),
        ),
        (
            "upload: a pool without COPY_DST",
            Expect::Invalid(Misuse::Usage),
            Box::new(|| up.upload(&read_only, 0, &[0; 16])),
        ),
        (
            "typed upload: wrong length",
            Expect::Invalid(Misuse::Length),
            Box::new(|| rt.upload(&a, &[1.0f32; 3])),
        ),
        (
            "download: offset past the end",
            Expect::Invalid(Misuse::Length),
            Box::new(|| down.download(&a, a.size() + 4, 4).map(drop)),
        ),
        (
            "download: huge length",
            Expect::Invalid(Misuse::Length),
            Box::new(|| down.download(&a, 0, u64::MAX).map(drop)),
        ),
        (
            "download: another device's allocation",
            Expect::Invalid(Misuse::Foreign),
            Box::new(|| down.download(&foreign, 0, 16).map(drop)),
        ),
        (
            "download_into: more than the allocation",
            Expect::Invalid(Misuse::Length),
            Box::new(|| down.download_into(&a, 0, &mut vec![0u8; a.size() as usize + 4])),
        ),
        (
            "download_view: past the end",
            Expect::Invalid(Misuse::Length),
            Box::new(|| down.download_view(&a, 8, a.size()).map(drop)),
        ),
        (
            "upload_texture: wrong data length",
            Expect::Invalid(Misuse::Length),
            Box::new(|| up.upload_texture(texture.as_image_copy(), tile, &tile_bytes[4..])),
        ),
        (
            "upload_texture: no COPY_DST",
            Expect::Invalid(Misuse::Usage),
            Box::new(|| up.upload_texture(sampled_only.as_image_copy(), tile, &tile_bytes)),
        ),
        (
            "upload_texture: region outside",
            Expect::Invalid(Misuse::Length),
            Box::new(|| {
                let dst = wgpu::TexelCopyTextureInfo {
                    origin: wgpu::Origin3d { x: 64, y: 0, z: 0 },
                    ..texture.as_image_copy()
                };
                up.upload_texture(dst, tile, &tile_bytes)
            }),
        ),
        (
            "upload_texture_tiles: a tile outside",
            Expect::Invalid(Misuse::Length),
            Box::new(|| {
                up.upload_texture_tiles(
                    &texture,
                    tile,
                    &[(wgpu::Origin3d { x: 128, y: 0, z: 0 }, &tile_bytes[..])],
                )
            }),
        ),
        (
            "upload_texture_regions: wrong data length",
            Expect::Invalid(Misuse::Length),
            Box::new(|| {
                up.upload_texture_regions(
                    &texture,
                    &[(wgpu::Origin3d::ZERO, tile, &tile_bytes[8..])],
                )
            }),
        ),
        (
            "axpy: lengths differ",
            Expect::Invalid(Misuse::Length),
            Box::new(|| rt.batch().axpy(1.0, &a, &b).map(drop)),
        ),
        (
            "axpy: another device's operand",
            Expect::Invalid(Misuse::Foreign),
            Box::new(|| {
                let y = a.first(foreign_x.len()).expect("a holds more");
                rt.batch().axpy(1.0, &foreign_x, y).map(drop)
            }),
        ),
        (
            "matmul: shapes do not match",
            Expect::Invalid(Misuse::Length),
            Box::new(|| {
                rt.batch()
                    .matmul::<f32>(
                        MatmulShape {
                            m: 16,
                            k: 16,
                            n: 16,
                        },
                        &a,
                        &a,
                        &b,
                    )
                    .map(drop)
            }),
        ),
        (
            "reduce: output overlaps the input",
            Expect::Invalid(Misuse::Overlap),
            Box::new(|| {
                rt.batch()
                    .reduce(Reduce::Sum, &a, a.first(1).expect("non-empty"))
                    .map(drop)
            }),
        ),
        (
            "alloc core: alignment not a power of two",
            Expect::Alloc,
            Box::new(|| {
                let mut core = vramkit::alloc::RangeAllocator::new(1 << 20);
                core.allocate(64, 3).map(drop).map_err(Error::from)
            }),
        ),
        (
            "VtLayout: zero size",
            Expect::Invalid(Misuse::Shape),
            Box::new(|| VtLayout::new(0, 16).map(drop)),
        ),
        (
            "VirtualTexture: 0 cache slots",
            Expect::Invalid(Misuse::Other),
            Box::new(|| {
                VirtualTexture::new(
                    gpu(),
                    arena,
                    source.clone(),
                    vt_config(0, wgpu::TextureFormat::Rgba8Unorm),
                )
                .map(drop)
            }),
        ),
        (
            "VirtualTexture: more slots than a texture holds",
            Expect::Invalid(Misuse::Other),
            Box::new(|| {
                VirtualTexture::new(
                    gpu(),
                    arena,
                    source.clone(),
                    vt_config(u32::MAX, wgpu::TextureFormat::Rgba8Unorm),
                )
                .map(drop)
            }),
        ),
        (
            "VirtualTexture: a format tiles are not",
            Expect::Invalid(Misuse::Other),
            Box::new(|| {
                VirtualTexture::new(
                    gpu(),
                    arena,
                    source.clone(),
                    vt_config(64, wgpu::TextureFormat::R32Float),
                )
                .map(drop)
            }),
        ),
        (
            "VirtualTexture: an arena of another device",
            Expect::Invalid(Misuse::Foreign),
            Box::new(|| {
                VirtualTexture::new(
                    gpu(),
                    &other,
                    source.clone(),
                    vt_config(64, wgpu::TextureFormat::Rgba8Unorm),
                )
                .map(drop)
            }),
        ),
        (
            "VirtualTexture::sample_points: an arena of another device",
            Expect::Invalid(Misuse::Foreign),
            Box::new(|| vt.sample_points(&other, &[([0.5, 0.5], 0)]).map(drop)),
        ),
        (
            "PackFile: no such file",
            Expect::Io,
            Box::new(|| PackFile::open("/nonexistent/vramkit.vtpack").map(drop)),
        ),
        (
            "PackFile: not a pack",
            Expect::Tile,
            Box::new(|| PackFile::from_bytes(vec![0x55; 200]).map(drop)),
        ),
    ];
    let before = rt.arena().stats();
    for (name, want, call) in &table {
        match call() {
            Err(e) => assert!(matches(&e, *want), "{name}: expected {want:?}, got {e}"),
            Ok(()) => panic!("{name}: expected a {want:?} error, got Ok"),
        }
        let now = rt.arena().stats();
        assert_eq!(
            (now.allocated, now.live_allocations),
            (before.allocated, before.live_allocations),
            "{name}: the arena changed"
        );
        assert_eq!(
            rt.download(&canary).unwrap(),
            canary_data,
            "{name}: the canary changed"
        );
    }
    assert!(table.len() >= 30);
}
