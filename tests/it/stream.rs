//! Uploads through the staging ring, read back byte by byte against the expected bytes.

use crate::common;

use std::sync::Arc;

use common::{gpu, rng};
use rand::{Rng, RngCore};
use vramkit::arena::{BlockMemory, PoolConfig};
use vramkit::stream::{Downloader, DownloaderConfig, Uploader, UploaderConfig};
use vramkit::{readback, Arena, ArenaConfig};

/// Tiny chunks and ring so that chunking, reuse and back-pressure all happen; `host`
/// chooses the staging kind (see [`STAGING_KINDS`]).
fn small_ring(host: bool) -> UploaderConfig {
    UploaderConfig {
        chunk_size: 4096,
        max_staging: 3 * 4096,
        copy_threads: 3,
        host_staging: host,
        // The ring itself is under test: no upload takes the write_buffer shortcut.
        small_upload: 0,
        ..Default::default()
    }
}

/// Both kinds of staging: host memory the GPU copies directly (Vulkan) and wgpu mapped
/// buffers (every backend; the fallback).
const STAGING_KINDS: [bool; 2] = [true, false];

/// On Vulkan, host staging must really be used when asked for (the fallback would hide a
/// broken host path); elsewhere it falls back.
fn expect_host(host: bool) -> bool {
    host && gpu().info().backend == wgpu::Backend::Vulkan
}

/// An arena whose blocks are ordinary device buffers, so every upload goes through the
/// staging ring (on CPU and integrated adapters the default places blocks in host-visible
/// memory, where an upload into an idle queue is a direct host write instead).
fn staged_arena() -> Arena {
    arena_with(BlockMemory::Device)
}

fn arena_with(block_memory: BlockMemory) -> Arena {
    arena_on(gpu(), block_memory)
}

fn arena_on(gpu: &vramkit::Gpu, block_memory: BlockMemory) -> Arena {
    let config = ArenaConfig {
        block_memory,
        ..Default::default()
    };
    Arena::new(gpu, config).unwrap()
}

/// The device for a test of `block_memory`: host-visible blocks get a device of their own,
/// because the in-place path runs only while the queue is idle, and other tests sharing a
/// device keep its queue busy (the checks that it was taken would then depend on timing).
fn device_for(block_memory: BlockMemory) -> vramkit::Gpu {
    match block_memory {
        BlockMemory::HostVisible => vramkit::Gpu::headless().expect("a second device"),
        _ => gpu().clone(),
    }
}

/// On Vulkan, host-visible blocks must really be used when asked for.
fn expect_direct(block_memory: BlockMemory) -> bool {
    block_memory == BlockMemory::HostVisible && gpu().info().backend == wgpu::Backend::Vulkan
}

#[test]
fn random_bytes_round_trip_at_any_size_and_offset() {
    for host in STAGING_KINDS {
        round_trip_at_any_size_and_offset(host, BlockMemory::Device);
    }
    round_trip_at_any_size_and_offset(true, BlockMemory::HostVisible);
}

fn round_trip_at_any_size_and_offset(host: bool, block_memory: BlockMemory) {
    let gpu = device_for(block_memory);
    let arena = arena_on(&gpu, block_memory);
    let up = Uploader::new(&gpu, small_ring(host));
    let mut r = rng();
    let size = 40_000u64;
    let dst = arena.alloc(size, "dst").unwrap();
    // Known background, so bytes the upload must not touch are checked too.
    let mut expected = vec![0u8; size as usize];
    r.fill_bytes(&mut expected);
    up.upload(&dst, 0, &expected).unwrap();
    for len in [
        1usize,
        2,
        3,
        4,
        5,
        7,
        8,
        1000,
        4095,
        4096,
        4097,
        3 * 4096 + 5,
        30_001,
    ] {
        for offset in [0u64, 1, 2, 3, 5, 4096 - 1] {
            if offset + len as u64 > size {
                continue;
            }
            let mut data = vec![0u8; len];
            r.fill_bytes(&mut data);
            up.upload(&dst, offset, &data).unwrap();
            expected[offset as usize..offset as usize + len].copy_from_slice(&data);
        }
    }
    let got = readback::read_buffer(&gpu, dst.buffer(), dst.offset(), size).unwrap();
    assert!(
        got == expected,
        "host staging {host}, blocks {block_memory:?}: first differing byte: {:?}",
        got.iter().zip(&expected).position(|(a, b)| a != b)
    );
    let s = up.stats();
    if expect_direct(block_memory) {
        // Uploads write in place whenever the queue is idle; other tests share the device,
        // so some may have gone through staging instead. Either way the bytes must match.
        assert!(s.direct > 0, "{s:?}");
        return;
    }
    assert_eq!(s.direct, 0, "{s:?}");
    let host_buffers = if expect_host(host) {
        s.staging_created
    } else {
        0
    };
    assert_eq!(s.staging_host, host_buffers, "{s:?}");
    assert!(
        s.staging_bytes <= 3 * 4096,
        "staging stays within its bound: {s:?}"
    );
    assert!(
        s.staging_created <= 3 && s.chunks > 10 * s.staging_created,
        "the ring is reused: {s:?}"
    );
    assert!(s.patches > 0, "{s:?}");
}

/// A ring of one staging buffer waits for the GPU instead of creating another, with and
/// without copy threads.
#[test]
fn a_one_buffer_ring_applies_back_pressure_instead_of_growing() {
    let arena = staged_arena();
    for copy_threads in [1, 3] {
        let up = Uploader::new(
            gpu(),
            UploaderConfig {
                chunk_size: 1024,
                max_staging: 1024,
                copy_threads,
                small_upload: 0,
                ..Default::default()
            },
        );
        let mut r = rng();
        let mut data = vec![0u8; 64 * 1024];
        r.fill_bytes(&mut data);
        let dst = arena.alloc(data.len() as u64, "dst").unwrap();
        up.upload(&dst, 0, &data).unwrap();
        let s = up.stats();
        assert_eq!((s.staging_created, s.chunks), (1, 64), "{s:?}");
        let got =
            readback::read_buffer(gpu(), dst.buffer(), dst.offset(), data.len() as u64).unwrap();
        assert!(got == data, "{copy_threads} copy threads");
    }
}

/// Chunks of several 256 KiB pieces, which the copy threads share: an upload of 7.5 MiB
/// and 5 bytes at an odd offset, through 1 MiB chunks and a ring of three, on both kinds
/// of staging, lands byte for byte.
#[test]
fn large_uploads_through_multi_piece_chunks() {
    let arena = staged_arena();
    let mut r = rng();
    for host in STAGING_KINDS {
        let up = Uploader::new(
            gpu(),
            UploaderConfig {
                chunk_size: 1 << 20,
                max_staging: 3 << 20,
                copy_threads: 4,
                host_staging: host,
                small_upload: 0,
                ..Default::default()
            },
        );
        let len = (15 << 19) + 5;
        let mut data = vec![0u8; len];
        r.fill_bytes(&mut data);
        let dst = arena.alloc(len as u64 + 8, "dst").unwrap();
        up.upload(&dst, 3, &data).unwrap();
        let s = up.stats();
        assert_eq!(s.chunks, 8, "{s:?}");
        assert!(s.staging_bytes <= 3 << 20, "{s:?}");
        let words = (len as u64 + 3).next_multiple_of(4);
        let got = readback::read_buffer(gpu(), dst.buffer(), dst.offset(), words).unwrap();
        assert!(got[3..3 + len] == data[..], "host staging {host}");
    }
}

#[test]
fn many_threads_upload_at_once() {
    many_threads_upload(BlockMemory::Device);
    many_threads_upload(BlockMemory::HostVisible);
}

fn many_threads_upload(block_memory: BlockMemory) {
    let arena = arena_with(block_memory);
    let up = Arc::new(Uploader::new(gpu(), small_ring(true)));
    let handles: Vec<_> = (0..4)
        .map(|t| {
            let (arena, up) = (arena.clone(), up.clone());
            std::thread::spawn(move || {
                let mut r = rng();
                for i in 0..10 {
                    let len = r.gen_range(1..20_000usize);
                    let dst = arena.alloc(len as u64 + 8, "t").unwrap();
                    let mut data = vec![0u8; len];
                    r.fill_bytes(&mut data);
                    let offset = r.gen_range(0..8u64);
                    up.upload(&dst, offset, &data).unwrap();
                    let start = offset / 4 * 4;
                    let words = (offset + len as u64).next_multiple_of(4) - start;
                    let got =
                        readback::read_buffer(gpu(), dst.buffer(), dst.offset() + start, words)
                            .unwrap();
                    let skip = (offset - start) as usize;
                    assert!(
                        got[skip..skip + len] == data[..],
                        "{block_memory:?} blocks, thread {t} upload {i}"
                    );
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Eight threads through a ring of two mapped staging buffers: every slot is handed from
/// thread to thread constantly, half the time by its map callback and half by a thread
/// that waited for its copy. A thread that waited must not touch a slot the callback
/// already gave to another thread (probing it opened a view beside that thread's write,
/// which wgpu refused as aliasing: a failed upload in CI).
#[test]
fn a_ring_of_two_hands_its_buffers_between_eight_threads() {
    let arena = staged_arena();
    let up = Arc::new(Uploader::new(
        gpu(),
        UploaderConfig {
            max_staging: 2 * 4096,
            host_staging: false,
            ..small_ring(false)
        },
    ));
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let (arena, up) = (arena.clone(), up.clone());
            std::thread::spawn(move || {
                let mut r = rng();
                let dst = arena.alloc(3 * 4096, "t").unwrap();
                let mut expected = vec![0u8; 3 * 4096];
                for _ in 0..150 {
                    let len = r.gen_range(1..6000usize);
                    let offset = r.gen_range(0..(3 * 4096 - len)) as u64;
                    let mut data = vec![0u8; len];
                    r.fill_bytes(&mut data);
                    up.upload(&dst, offset, &data).unwrap();
                    expected[offset as usize..offset as usize + len].copy_from_slice(&data);
                }
                let got =
                    readback::read_buffer(gpu(), dst.buffer(), dst.offset(), 3 * 4096).unwrap();
                assert!(got == expected, "thread {t}: the last bytes of each range");
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

/// Direct host writes into host-visible blocks keep queue order: bytes queued with
/// `Queue::write_buffer` before an upload land before it (the direct path must submit them
/// first, or they would overwrite the upload at the next submit), and a kernel submitted
/// before an upload reads the old bytes even when it is still running as the upload is
/// called (the direct path must then step aside for staging, or the kernel would read a
/// mix of old and new bytes).
#[test]
fn direct_uploads_keep_queue_order() {
    let gpu = device_for(BlockMemory::HostVisible);
    let arena = arena_on(&gpu, BlockMemory::HostVisible);
    let kernels = vramkit::kernels::Kernels::new(&arena).unwrap();
    let up = Uploader::new(&gpu, Default::default());
    let mut r = rng();
    // 16 MiB per array: a copy long enough to be in flight when the upload follows it.
    let n = 4 << 20;
    let dst = arena.alloc_typed::<f32>(n, "dst").unwrap();
    let out = arena.alloc_typed::<f32>(n, "out").unwrap();
    for round in 0..4 {
        let queued = common::random_f32(&mut r, n);
        let uploaded = common::random_f32(&mut r, n);
        let later = common::random_f32(&mut r, n);
        gpu.queue()
            .write_buffer(dst.buffer(), dst.offset(), bytemuck::cast_slice(&queued));
        up.upload(&dst, 0, bytemuck::cast_slice(&uploaded)).unwrap();
        let mut b = kernels.batch();
        b.copy((&dst, n as u64), (&out, n as u64)).unwrap();
        b.submit().unwrap();
        up.upload(&dst, 0, bytemuck::cast_slice(&later)).unwrap();
        let seen = readback::read_as::<f32>(&gpu, out.buffer(), out.offset(), n).unwrap();
        let now = readback::read_as::<f32>(&gpu, dst.buffer(), dst.offset(), n).unwrap();
        let first_bad = |got: &[f32], want: &[f32]| got.iter().zip(want).position(|(a, b)| a != b);
        assert_eq!(
            first_bad(&seen, &uploaded),
            None,
            "round {round}: the kernel's input"
        );
        assert_eq!(
            first_bad(&now, &later),
            None,
            "round {round}: the last upload"
        );
    }
    if expect_direct(BlockMemory::HostVisible) {
        assert!(up.stats().direct > 0, "{:?}", up.stats());
    }
}

#[test]
fn bad_uploads_get_typed_errors() {
    let arena = staged_arena();
    let up = Uploader::new(gpu(), Default::default());
    let dst = arena.alloc(100, "short").unwrap();
    let e = up.upload(&dst, 90, &[0u8; 20]).unwrap_err().to_string();
    assert!(
        e.contains("short") && e.contains("within the allocation"),
        "{e}"
    );
    let no_copy = arena
        .add_pool(
            "storage only",
            PoolConfig {
                quota: None,
                usage: wgpu::BufferUsages::STORAGE,
                ..Default::default()
            },
        )
        .unwrap();
    let s = arena.alloc_in(no_copy, 64, "no copy dst").unwrap();
    let e = up.upload(&s, 0, &[1u8; 8]).unwrap_err().to_string();
    assert!(e.contains("COPY_DST"), "{e}");
    up.upload(&dst, 100, &[]).unwrap();

    // Chunk sizes beyond the device's largest buffer are capped, not a wgpu panic.
    let huge = UploaderConfig {
        chunk_size: u64::MAX - 3,
        max_staging: u64::MAX,
        ..small_ring(true)
    };
    let up = Uploader::new(gpu(), huge);
    let data: Vec<u8> = (0..100u8).collect();
    up.upload(&dst, 0, &data).unwrap();
    let down = Downloader::new(
        gpu(),
        DownloaderConfig {
            chunk_size: u64::MAX,
            depth: 2,
            ..Default::default()
        },
    );
    assert_eq!(down.download(&dst, 0, 100).unwrap(), data);

    // The plain readback path: out of range, too large and overflowing counts are errors.
    let max = gpu().limits().max_buffer_size;
    let block = dst.buffer().size();
    for (offset, size) in [(block, 4), (0, block + 4), (u64::MAX - 3, 8), (0, max + 4)] {
        let e = vramkit::readback::read_buffer(gpu(), dst.buffer(), offset, size);
        assert!(
            matches!(e, Err(vramkit::Error::InvalidArgument { .. })),
            "{e:?}"
        );
    }
    let e = vramkit::readback::read_as::<u64>(gpu(), dst.buffer(), 0, usize::MAX);
    assert!(
        matches!(e, Err(vramkit::Error::InvalidArgument { .. })),
        "{e:?}"
    );
}

#[test]
fn downloads_read_back_any_range_through_the_ring() {
    for host in STAGING_KINDS {
        downloads_through_the_ring(host, BlockMemory::Device);
    }
    // Host-visible blocks: read in place while the queue is idle, else through the ring.
    downloads_through_the_ring(true, BlockMemory::HostVisible);
}

fn downloads_through_the_ring(host: bool, block_memory: BlockMemory) {
    use vramkit::stream::{Downloader, DownloaderConfig};
    let gpu = device_for(block_memory);
    let arena = arena_on(&gpu, block_memory);
    let up = Uploader::new(&gpu, Default::default());
    // A small ring so that chunks wrap around it several times; chunks of 2 MiB take the
    // parallel copy path.
    let down = Downloader::new(
        &gpu,
        DownloaderConfig {
            chunk_size: 4096,
            depth: 3,
            copy_threads: 2,
            host_staging: host,
        },
    );
    let mut r = rng();
    let size = 50_000u64;
    let src = arena.alloc(size, "src").unwrap();
    let mut data = vec![0u8; size as usize];
    r.fill_bytes(&mut data);
    up.upload(&src, 0, &data).unwrap();
    for (offset, len) in [
        (0u64, size),
        (1, 1),
        (3, 2),
        (5, 4096),
        (4095, 12_289),
        (17, size - 17),
        (size, 0),
    ] {
        let got = down.download(&src, offset, len).unwrap();
        assert!(
            got[..] == data[offset as usize..(offset + len) as usize],
            "host staging {host}, {block_memory:?} blocks: offset {offset} len {len}"
        );
    }
    if !expect_direct(block_memory) {
        assert_eq!(down.direct_reads(), 0);
        assert_eq!(down.staging_buffers(), 3);
    } else if gpu.info().device_type == wgpu::DeviceType::Cpu {
        // Reads go in place only from host-cached memory, which a CPU adapter's always is
        // (a discrete GPU's host-visible device memory, its BAR, is not: the ring serves it).
        assert!(down.direct_reads() > 0);
    }
    assert!(down.download(&src, size - 2, 4).is_err());
    // Into memory the caller keeps, reused; poisoned first so an unwritten byte fails.
    let mut out = vec![0u8; size as usize - 9];
    for _ in 0..2 {
        out.fill(0xEE);
        down.download_into(&src, 9, &mut out).unwrap();
        assert!(out[..] == data[9..], "host staging {host}: download_into");
    }
    // A refused request leaves `out` alone.
    out.fill(0xEE);
    assert!(down.download_into(&src, 10, &mut out).is_err());
    assert!(out.iter().all(|&b| b == 0xEE));

    // Large chunks: the copy out of staging is split across threads, and the first
    // chunk's (8 MiB less 3 bytes) is written with streaming stores where the CPU has them.
    let big = arena.alloc(12 << 20, "big").unwrap();
    let mut bytes = vec![0u8; 12 << 20];
    r.fill_bytes(&mut bytes);
    up.upload(&big, 0, &bytes).unwrap();
    let down = Downloader::new(
        &gpu,
        DownloaderConfig {
            chunk_size: 8 << 20,
            depth: 2,
            copy_threads: 4,
            host_staging: host,
        },
    );
    let mut out = vec![0xEEu8; (12 << 20) - 3];
    down.download_into(&big, 3, &mut out).unwrap();
    assert!(out[..] == bytes[3..], "host staging {host}: large download");
}

#[test]
fn upload_with_fills_staging_in_place_and_recovers_from_a_failing_fill() {
    let arena = staged_arena();
    let up = Uploader::new(gpu(), small_ring(true));
    let mut r = rng();
    let size = 30_000u64; // several 4 KiB chunks and a short last one
    let mut data = vec![0u8; size as usize];
    r.fill_bytes(&mut data);
    let dst = arena.alloc(size + 8, "dst").unwrap();
    let mut calls = Vec::new();
    up.upload_with(&dst, 8, size, |pos, mut bytes| {
        calls.push((pos, bytes.len()));
        bytes.copy_from_slice(&data[pos as usize..pos as usize + bytes.len()]);
        Ok(())
    })
    .unwrap();
    assert_eq!(calls.len(), 8, "4096-byte chunks: {calls:?}");
    assert_eq!(calls.last(), Some(&(28_672, 1328)));
    let got = readback::read_buffer(gpu(), dst.buffer(), dst.offset() + 8, size).unwrap();
    assert!(got == data, "bytes differ after upload_with");

    // Not whole words: refused, nothing written.
    assert!(up.upload_with(&dst, 1, 8, |_, _| Ok(())).is_err());
    assert!(up.upload_with(&dst, 0, 6, |_, _| Ok(())).is_err());
    // A failing fill returns its error and gives the staging buffer back.
    let before = up.stats();
    let err = up
        .upload_with(&dst, 0, 8192, |pos, _| {
            if pos > 0 {
                Err(vramkit::Error::invalid("source ran dry", "test"))
            } else {
                Ok(())
            }
        })
        .unwrap_err();
    assert!(err.to_string().contains("source ran dry"), "{err}");
    for _ in 0..10 {
        up.upload(&dst, 0, &data[..8192]).unwrap();
    }
    assert!(up.stats().staging_created <= before.staging_created.max(3));
}

#[test]
fn a_pipeline_reduces_a_source_larger_than_its_window() {
    use vramkit::kernels::{Kernels, Reduce};
    use vramkit::stream::{Pipeline, PipelineConfig, Source};
    let arena = staged_arena();
    let kernels = Kernels::new(&arena).unwrap();
    let up = Uploader::new(gpu(), small_ring(true));
    let mut r = rng();
    // 10.5 chunks of 64 KiB through a window of 3.
    let values: Vec<f32> = (0..(10 * 16384 + 8192))
        .map(|_| r.gen_range(0.0..1.0))
        .collect();
    let bytes: &[u8] = bytemuck::cast_slice(&values);
    let config = PipelineConfig {
        chunk_bytes: 64 << 10,
        slots: 3,
        result_bytes: 4,
    };
    let mut pipeline = Pipeline::new(&kernels, &up, config).unwrap();
    let mut reader = std::io::Cursor::new(bytes.to_vec());
    let sources: [Source<'_>; 2] = [
        Source::Bytes(bytes),
        Source::Reader(&mut reader, bytes.len() as u64),
    ];
    for source in sources {
        let mut partials = Vec::new();
        let report = pipeline
            .run(
                source,
                |batch, chunk, n, result| {
                    batch.reduce(Reduce::Sum, (chunk, n / 4), (result, 1))?;
                    Ok(())
                },
                |k, result| partials.push((k, f32::from_le_bytes(result[..4].try_into().unwrap()))),
            )
            .unwrap();
        assert_eq!(report.chunks, 11);
        assert_eq!(report.bytes, bytes.len() as u64);
        assert!(report.window_bytes < bytes.len() as u64 / 3);
        for (i, (k, got)) in partials.iter().enumerate() {
            assert_eq!(*k, i as u64, "results come back in order");
            let chunk = &values[i * 16384..((i + 1) * 16384).min(values.len())];
            let want: f64 = chunk.iter().map(|&v| v as f64).sum();
            assert!(
                ((*got as f64) - want).abs() / want < 1e-5,
                "chunk {i}: {got} vs {want}"
            );
        }
    }
    // A reader that ends early: a typed I/O error, not a panic.
    let mut short = std::io::Cursor::new(vec![0u8; 1000]);
    let err = pipeline
        .run(
            Source::Reader(&mut short, 1 << 20),
            |_, _, _, _| Ok(()),
            |_, _| {},
        )
        .unwrap_err();
    assert!(matches!(err, vramkit::Error::Io { .. }), "{err}");
    assert!(Pipeline::new(
        &kernels,
        &up,
        PipelineConfig {
            chunk_bytes: 6,
            ..config
        }
    )
    .is_err());
}

#[test]
fn download_views_read_mapped_bytes_at_any_offset_and_length() {
    for host in STAGING_KINDS {
        download_views_at_any_offset_and_length(host);
    }
}

fn download_views_at_any_offset_and_length(host: bool) {
    use vramkit::stream::{Downloader, DownloaderConfig};
    let arena = staged_arena();
    let mut r = rng();
    let size = 300_000u64;
    let src = arena.alloc(size, "src").unwrap();
    let mut bytes = vec![0u8; size as usize];
    r.fill_bytes(&mut bytes);
    gpu()
        .queue()
        .write_buffer(src.buffer(), src.offset(), &bytes);
    let down = Downloader::new(
        gpu(),
        DownloaderConfig {
            depth: 2,
            host_staging: host,
            ..Default::default()
        },
    );
    for (offset, len) in [
        (0u64, 0u64),
        (0, 1),
        (1, 3),
        (3, 5),
        (5, 1000),
        (4096, 65_537),
        (0, size),
        (size - 3, 3),
    ] {
        let view = down.download_view(&src, offset, len).unwrap();
        assert_eq!(
            &view[..],
            &bytes[offset as usize..(offset + len) as usize],
            "view of {len} bytes at {offset}"
        );
    }
    // Views return their staging buffers; at most `depth` are kept.
    assert!(down.view_buffers() <= 2, "{} kept", down.view_buffers());
    assert!(
        down.download_view(&src, size - 3, 4).is_err(),
        "past the end"
    );
    // The arena is unchanged by the refused request and still reads back.
    assert_eq!(&down.download_view(&src, 7, 9).unwrap()[..], &bytes[7..16]);
}

#[test]
fn async_downloads_resolve_on_their_own_and_in_any_number() {
    use vramkit::stream::Downloader;
    let arena = staged_arena();
    let mut r = rng();
    let down = Downloader::new(gpu(), Default::default());
    let mut sources = Vec::new();
    for i in 0..8u64 {
        let size = 1 + r.gen_range(0..100_000u64) + i;
        let a = arena.alloc(size, "src").unwrap();
        let mut bytes = vec![0u8; a.size() as usize];
        r.fill_bytes(&mut bytes);
        gpu().queue().write_buffer(a.buffer(), a.offset(), &bytes);
        bytes.truncate(size as usize);
        sources.push((a, bytes));
    }
    let futures: Vec<_> = sources
        .iter()
        .map(|(a, b)| down.download_async(a, 0, b.len() as u64).unwrap())
        .collect();
    // Resolved on another thread with a plain executor: nothing here polls the device, so
    // on a GPU that runs copies asynchronously only the downloader's polling thread can
    // make them resolve (lavapipe finishes copies inside submit, and wgpu may resolve
    // their mappings during the next submit).
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(futures::executor::block_on(futures::future::try_join_all(
            futures,
        )));
    });
    let views = rx
        .recv_timeout(std::time::Duration::from_secs(60))
        .expect("async downloads did not resolve within 60 s: nothing drives the device")
        .unwrap();
    for (view, (_, bytes)) in views.iter().zip(&sources) {
        assert_eq!(&view[..], &bytes[..]);
    }
    drop(views);
    // The downloader still works after its futures are gone, and after it drops its
    // polling thread stops (the drop joins it, so a hang here would fail the test run).
    let (a, bytes) = &sources[0];
    assert_eq!(
        &down.download_view(a, 0, bytes.len() as u64).unwrap()[..],
        &bytes[..]
    );
    drop(down);
}

#[test]
fn idle_staging_is_released_and_recreated_on_demand() {
    use std::time::Duration;
    let arena = staged_arena();
    let up = Uploader::new(gpu(), small_ring(true));
    let mut r = rng();
    let dst = arena.alloc(20_000, "dst").unwrap();
    let mut data = vec![0u8; 20_000];
    r.fill_bytes(&mut data);
    up.upload(&dst, 0, &data).unwrap();
    let held = up.stats().staging_bytes;
    assert!(held > 0);
    // Recently used buffers stay.
    assert_eq!(up.release_idle(Duration::from_secs(3600)), 0);
    gpu().wait_idle().unwrap();
    std::thread::sleep(Duration::from_millis(20));
    // Every buffer back from the GPU and idle for 10 ms goes.
    let released = up.release_idle(Duration::from_millis(10));
    assert_eq!(released, held, "all staging released once idle");
    let s = up.stats();
    assert_eq!(s.staging_bytes, 0);
    assert_eq!(s.staging_released * 4096, held);
    // Uploads still work and create staging again as they need it.
    r.fill_bytes(&mut data);
    up.upload(&dst, 0, &data).unwrap();
    assert_eq!(
        readback::read_buffer(gpu(), dst.buffer(), dst.offset(), 20_000).unwrap(),
        data
    );
    assert!(up.stats().staging_created > s.staging_created);
}

#[test]
fn a_batch_applies_many_small_uploads_in_order_with_few_submits() {
    for host in STAGING_KINDS {
        batch_in_order_with_few_submits(host);
    }
}

fn batch_in_order_with_few_submits(host: bool) {
    let arena = staged_arena();
    let up = Uploader::new(gpu(), small_ring(host));
    let mut r = rng();
    let size = 64 * 1024usize;
    let dst = arena.alloc(size as u64, "dst").unwrap();
    let mut model = vec![0u8; size];
    r.fill_bytes(&mut model);
    up.upload(&dst, 0, &model).unwrap();
    let before = up.stats();
    let mut batch = up.batch();
    let mut adds = 0u64;
    for i in 0..1500 {
        // Mostly small word-aligned writes (gathered), some unaligned (patched), a few
        // larger than a staging buffer; ranges overlap, so order matters.
        let (offset, len) = match i % 50 {
            0 => (r.gen_range(0..size - 9000), 9000),
            1..=3 => {
                let o = r.gen_range(0..size - 20);
                (o, r.gen_range(1..20))
            }
            _ => (
                4 * r.gen_range(0..(size - 512) / 4),
                4 * r.gen_range(1..128),
            ),
        };
        let mut bytes = vec![0u8; len];
        r.fill_bytes(&mut bytes);
        batch.add(&dst, offset as u64, &bytes).unwrap();
        model[offset..offset + len].copy_from_slice(&bytes);
        adds += 1;
        if i == 700 {
            assert!(
                batch.add(&dst, size as u64 - 2, &[1, 2, 3]).is_err(),
                "past the end"
            );
        }
    }
    batch.submit().unwrap();
    assert_eq!(
        readback::read_buffer(gpu(), dst.buffer(), dst.offset(), size as u64).unwrap(),
        model
    );
    let chunks = up.stats().chunks - before.chunks;
    assert!(
        chunks < adds / 4,
        "{chunks} submissions for {adds} uploads: the batch should gather them"
    );
}

#[test]
fn a_dropped_batch_still_submits() {
    let arena = staged_arena();
    let up = Uploader::new(gpu(), small_ring(true));
    let dst = arena.alloc(1024, "dst").unwrap();
    {
        let mut batch = up.batch();
        batch.add(&dst, 0, &[7u8; 1024]).unwrap();
    }
    assert_eq!(
        readback::read_buffer(gpu(), dst.buffer(), dst.offset(), 1024).unwrap(),
        vec![7u8; 1024]
    );
}

#[test]
fn a_batch_merges_adjacent_uploads_into_one_copy_and_keeps_later_writes_on_top() {
    let arena = staged_arena();
    let up = Uploader::new(gpu(), small_ring(true));
    let mut r = rng();
    let size = 8192usize;
    let dst = arena.alloc(size as u64, "dst").unwrap();
    let mut model = vec![0u8; size];
    up.upload(&dst, 0, &model).unwrap();
    let mut batch = up.batch();
    // Consecutive pieces (merged), then a write inside them (must land on top).
    let mut at = 0usize;
    while at < 4096 {
        let len = (4 * r.gen_range(1..16usize)).min(4096 - at);
        let mut piece = vec![0u8; len];
        r.fill_bytes(&mut piece);
        batch.add(&dst, at as u64, &piece).unwrap();
        model[at..at + len].copy_from_slice(&piece);
        at += len;
    }
    batch.add(&dst, 100, &[0xAB; 8]).unwrap();
    model[100..108].copy_from_slice(&[0xAB; 8]);
    batch.submit().unwrap();
    assert_eq!(
        readback::read_buffer(gpu(), dst.buffer(), dst.offset(), size as u64).unwrap(),
        model
    );
}

#[test]
fn async_uploads_resolve_once_the_bytes_have_landed() {
    let arena = staged_arena();
    let up = Uploader::new(gpu(), small_ring(true));
    let mut r = rng();
    let mut pending = Vec::new();
    let mut expected = Vec::new();
    for i in 0..6u64 {
        let len = 1 + r.gen_range(0..30_000usize) + i as usize;
        let dst = arena.alloc(len as u64, "dst").unwrap();
        let mut data = vec![0u8; len];
        r.fill_bytes(&mut data);
        pending.push(up.upload_async(&dst, 0, &data).unwrap());
        expected.push((dst, data));
    }
    // Resolved on another thread that never calls into wgpu: only the uploader's polling
    // thread can make them resolve on a GPU that copies asynchronously.
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(futures::executor::block_on(futures::future::try_join_all(
            pending,
        )));
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("async uploads did not resolve within 60 s: nothing drives the device")
        .unwrap();
    for (dst, data) in &expected {
        let got = readback::read_buffer(gpu(), dst.buffer(), dst.offset(), dst.size()).unwrap();
        assert!(got[..data.len()] == data[..]);
    }
    // Bad input is refused before anything is staged.
    let (dst, _) = &expected[0];
    assert!(up.upload_async(dst, dst.size(), &[1]).is_err());
}

/// A 2D texture (array) for upload tests.
fn new_texture(
    label: &str,
    size: wgpu::Extent3d,
    mips: u32,
    format: wgpu::TextureFormat,
    usage: wgpu::TextureUsages,
) -> wgpu::Texture {
    gpu().device().create_texture(&wgpu::TextureDescriptor {
        label: Some(label),
        size,
        mip_level_count: mips,
        sample_count: 1,
        dimension: wgpu::TextureDimension::D2,
        format,
        usage,
        view_formats: &[],
    })
}

/// Reads `size` texels at `origin` of mip level `mip` back as tightly packed rows.
fn read_texture(
    texture: &wgpu::Texture,
    mip: u32,
    origin: wgpu::Origin3d,
    size: wgpu::Extent3d,
    texel_bytes: u32,
) -> Vec<u8> {
    let row = size.width * texel_bytes;
    let pitch = row.next_multiple_of(wgpu::COPY_BYTES_PER_ROW_ALIGNMENT);
    let total = u64::from(pitch) * u64::from(size.height) * u64::from(size.depth_or_array_layers);
    let buffer = gpu().device().create_buffer(&wgpu::BufferDescriptor {
        label: Some("texture readback"),
        size: total,
        usage: wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
        mapped_at_creation: false,
    });
    let mut encoder = gpu().device().create_command_encoder(&Default::default());
    encoder.copy_texture_to_buffer(
        wgpu::TexelCopyTextureInfo {
            texture,
            mip_level: mip,
            origin,
            aspect: wgpu::TextureAspect::All,
        },
        wgpu::TexelCopyBufferInfo {
            buffer: &buffer,
            layout: wgpu::TexelCopyBufferLayout {
                offset: 0,
                bytes_per_row: Some(pitch),
                rows_per_image: Some(size.height),
            },
        },
        size,
    );
    gpu().queue().submit([encoder.finish()]);
    let padded = readback::read_buffer(gpu(), &buffer, 0, total).unwrap();
    padded
        .chunks_exact(pitch as usize)
        .flat_map(|r| r[..row as usize].to_vec())
        .collect()
}

/// A CPU model of one mip level: `width` x `height` x `layers` texels of `texel` bytes.
struct TexelModel {
    width: u32,
    height: u32,
    texel: u32,
    bytes: Vec<u8>,
}

impl TexelModel {
    fn write(&mut self, origin: wgpu::Origin3d, size: wgpu::Extent3d, data: &[u8]) {
        let (t, row) = (self.texel as usize, (size.width * self.texel) as usize);
        let mut src = data.chunks_exact(row);
        for z in 0..size.depth_or_array_layers {
            for y in 0..size.height {
                let at = (((origin.z + z) * self.height + origin.y + y) * self.width + origin.x)
                    as usize
                    * t;
                self.bytes[at..at + row].copy_from_slice(src.next().unwrap());
            }
        }
    }
}

#[test]
fn texture_uploads_lay_out_any_row_length_at_the_copy_pitch() {
    for host in STAGING_KINDS {
        texture_uploads(host);
    }
}

fn texture_uploads(host: bool) {
    let mut r = rng();
    // 4 KiB staging: a level-0 row of 400 bytes takes 512 in staging, 8 rows per band.
    let up = Uploader::new(
        gpu(),
        UploaderConfig {
            chunk_size: 4096,
            max_staging: 2 * 4096,
            copy_threads: 2,
            host_staging: host,
            ..Default::default()
        },
    );
    let full = wgpu::Extent3d {
        width: 100,
        height: 37,
        depth_or_array_layers: 3,
    };
    let texture = new_texture(
        "array",
        full,
        2,
        wgpu::TextureFormat::Rgba8Unorm,
        wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::COPY_SRC,
    );
    let mut model = TexelModel {
        width: 100,
        height: 37,
        texel: 4,
        bytes: vec![0; 100 * 37 * 3 * 4],
    };
    let origin0 = wgpu::Origin3d::ZERO;
    let mut everything = vec![0u8; model.bytes.len()];
    r.fill_bytes(&mut everything);
    up.upload_texture(texture.as_image_copy(), full, &everything)
        .unwrap();
    model.write(origin0, full, &everything);
    // Sub-regions with odd row lengths, on the upper layers.
    for (origin, size) in [
        ((5, 3, 1), (37, 19, 2)),
        ((0, 36, 2), (100, 1, 1)),
        ((99, 0, 0), (1, 37, 3)),
        ((64, 10, 1), (36, 20, 1)),
    ] {
        let origin = wgpu::Origin3d {
            x: origin.0,
            y: origin.1,
            z: origin.2,
        };
        let size = wgpu::Extent3d {
            width: size.0,
            height: size.1,
            depth_or_array_layers: size.2,
        };
        let mut data =
            vec![0u8; (size.width * size.height * size.depth_or_array_layers * 4) as usize];
        r.fill_bytes(&mut data);
        let dst = wgpu::TexelCopyTextureInfo {
            texture: &texture,
            mip_level: 0,
            origin,
            aspect: wgpu::TextureAspect::All,
        };
        up.upload_texture(dst, size, &data).unwrap();
        model.write(origin, size, &data);
    }
    assert!(
        read_texture(&texture, 0, origin0, full, 4) == model.bytes,
        "host staging {host}: level 0 differs from the model"
    );
    // Mip level 1 (50 x 18), whole.
    let level1 = wgpu::Extent3d {
        width: 50,
        height: 18,
        depth_or_array_layers: 3,
    };
    let mut data = vec![0u8; 50 * 18 * 3 * 4];
    r.fill_bytes(&mut data);
    let dst = wgpu::TexelCopyTextureInfo {
        texture: &texture,
        mip_level: 1,
        origin: origin0,
        aspect: wgpu::TextureAspect::All,
    };
    up.upload_texture(dst, level1, &data).unwrap();
    assert!(read_texture(&texture, 1, origin0, level1, 4) == data);

    // Refused, and the texture is unchanged.
    let one = wgpu::Extent3d {
        width: 1,
        height: 1,
        depth_or_array_layers: 1,
    };
    let at = |x, y, z, mip| wgpu::TexelCopyTextureInfo {
        texture: &texture,
        mip_level: mip,
        origin: wgpu::Origin3d { x, y, z },
        aspect: wgpu::TextureAspect::All,
    };
    for (what, dst, size, len) in [
        ("past the right edge", at(100, 0, 0, 0), one, 4),
        ("past the last layer", at(0, 0, 3, 0), one, 4),
        ("past level 1's edge", at(50, 0, 0, 1), one, 4),
        ("no such mip level", at(0, 0, 0, 2), one, 4),
        ("data too short", at(0, 0, 0, 0), one, 3),
        ("data too long", at(0, 0, 0, 0), one, 8),
    ] {
        assert!(
            up.upload_texture(dst, size, &vec![0xFF; len]).is_err(),
            "{what} must be refused"
        );
    }
    let wide = wgpu::Extent3d {
        width: 1100,
        height: 1,
        depth_or_array_layers: 1,
    };
    let wide_texture = new_texture(
        "wide",
        wide,
        1,
        wgpu::TextureFormat::Rgba8Unorm,
        wgpu::TextureUsages::COPY_DST,
    );
    assert!(
        up.upload_texture(wide_texture.as_image_copy(), wide, &vec![0; 4400])
            .is_err(),
        "a row larger than a staging buffer"
    );
    let sampled_only = new_texture(
        "no copy dst",
        one,
        1,
        wgpu::TextureFormat::Rgba8Unorm,
        wgpu::TextureUsages::TEXTURE_BINDING,
    );
    assert!(up
        .upload_texture(sampled_only.as_image_copy(), one, &[0; 4])
        .is_err());
    assert!(
        read_texture(&texture, 0, origin0, full, 4) == model.bytes,
        "refused uploads changed the texture"
    );

    // Rows already at the pitch (64 x 4-byte texels = 256 bytes) go in one copy per band.
    let aligned = wgpu::Extent3d {
        width: 64,
        height: 40,
        depth_or_array_layers: 1,
    };
    let float_texture = new_texture(
        "r32float",
        aligned,
        1,
        wgpu::TextureFormat::R32Float,
        wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::COPY_SRC,
    );
    let values: Vec<f32> = (0..64 * 40).map(|_| r.gen_range(-1e6f32..1e6)).collect();
    up.upload_texture(
        float_texture.as_image_copy(),
        aligned,
        bytemuck::cast_slice(&values),
    )
    .unwrap();
    assert!(
        read_texture(&float_texture, 0, origin0, aligned, 4)
            == bytemuck::cast_slice::<f32, u8>(&values)
    );

    // A band of several MiB: its rows are laid out at the pitch by several threads.
    let up = Uploader::new(
        gpu(),
        UploaderConfig {
            chunk_size: 4 << 20,
            max_staging: 8 << 20,
            copy_threads: 4,
            host_staging: host,
            ..Default::default()
        },
    );
    let large = wgpu::Extent3d {
        width: 1000,
        height: 700,
        depth_or_array_layers: 1,
    };
    let large_texture = new_texture(
        "large",
        large,
        1,
        wgpu::TextureFormat::Rgba8Unorm,
        wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::COPY_SRC,
    );
    let mut texels = vec![0u8; 1000 * 700 * 4];
    r.fill_bytes(&mut texels);
    up.upload_texture(large_texture.as_image_copy(), large, &texels)
        .unwrap();
    assert!(
        read_texture(&large_texture, 0, origin0, large, 4) == texels,
        "host staging {host}: rows laid out by several threads"
    );
}

/// Small uploads go through `Queue::write_buffer` (no staging at all) and keep queue
/// order with the kernels around them; larger ones hold staging sized to what they move,
/// not a 32 MiB chunk.
#[test]
fn small_uploads_skip_staging_and_staging_scales_with_what_is_moved() {
    let arena = staged_arena();
    let kernels = vramkit::kernels::Kernels::new(&arena).unwrap();
    let up = Uploader::new(gpu(), Default::default());
    let mut r = rng();
    let x = arena.alloc(256, "x").unwrap();
    // Upload, double it on the GPU, upload again, double again: each step must see the
    // one before it in queue order.
    for _round in 0..2 {
        let values: Vec<f32> = (0..64).map(|_| r.gen_range(-1.0..1.0)).collect();
        up.upload(&x, 0, bytemuck::cast_slice(&values)).unwrap();
        let mut batch = kernels.batch();
        batch.scale(2.0, 0.0, (&x, 64), (&x, 64)).unwrap();
        batch.submit().unwrap();
        let got = readback::read_as::<f32>(gpu(), x.buffer(), x.offset(), 64).unwrap();
        assert_eq!(got, values.iter().map(|v| v * 2.0).collect::<Vec<_>>());
    }
    let s = up.stats();
    assert_eq!((s.small, s.staging_bytes), (2, 0), "{s:?}");

    // 100 KiB through staging (device blocks): one buffer of 1 MiB, not 32 MiB.
    let big = arena.alloc(100 << 10, "big").unwrap();
    let data: Vec<u8> = (0..100 << 10).map(|_| r.gen()).collect();
    up.upload(&big, 0, &data).unwrap();
    let s = up.stats();
    assert!(s.staging_bytes <= 1 << 20, "{s:?}");
    let got = readback::read_buffer(gpu(), big.buffer(), big.offset(), data.len() as u64).unwrap();
    assert!(got == data);
}

#[test]
fn tile_and_region_batches_land_where_they_were_sent() {
    let mut r = rng();
    // A small staging chunk: the 24 tiles need several staging buffers and runs split.
    let up = Uploader::new(
        gpu(),
        UploaderConfig {
            chunk_size: 5 * 64 * 64 * 4,
            max_staging: 4 * 5 * 64 * 64 * 4,
            ..Default::default()
        },
    );
    let size = wgpu::Extent3d {
        width: 8 * 64,
        height: 4 * 64,
        depth_or_array_layers: 1,
    };
    let texture = new_texture(
        "tiles",
        size,
        1,
        wgpu::TextureFormat::Rgba8Unorm,
        wgpu::TextureUsages::COPY_DST | wgpu::TextureUsages::COPY_SRC,
    );
    let mut model = TexelModel {
        width: size.width,
        height: size.height,
        texel: 4,
        bytes: vec![0; (size.width * size.height * 4) as usize],
    };
    let tile = wgpu::Extent3d {
        width: 64,
        height: 64,
        depth_or_array_layers: 1,
    };
    // Runs of neighbours, single tiles and a slot written twice (the later one wins).
    let mut slots: Vec<u32> = (0..32).filter(|_| r.gen_bool(0.75)).collect();
    slots.push(slots[0]);
    let data: Vec<Vec<u8>> = slots
        .iter()
        .map(|_| (0..64 * 64 * 4).map(|_| r.gen()).collect())
        .collect();
    let origin = |s: u32| wgpu::Origin3d {
        x: (s % 8) * 64,
        y: (s / 8) * 64,
        z: 0,
    };
    let tiles: Vec<_> = slots
        .iter()
        .zip(&data)
        .map(|(&s, d)| (origin(s), &d[..]))
        .collect();
    up.upload_texture_tiles(&texture, tile, &tiles).unwrap();
    for (o, d) in &tiles {
        model.write(*o, tile, d);
    }
    assert_eq!(
        read_texture(&texture, 0, wgpu::Origin3d::ZERO, size, 4),
        model.bytes
    );
    // The same through regions of different sizes.
    let regions: Vec<(wgpu::Origin3d, wgpu::Extent3d, Vec<u8>)> = (0..6)
        .map(|k| {
            let w = 4 * r.gen_range(1..40u32);
            let h = r.gen_range(1..60u32);
            let o = wgpu::Origin3d {
                x: r.gen_range(0..size.width - w),
                y: r.gen_range(0..size.height - h),
                z: 0,
            };
            let e = wgpu::Extent3d {
                width: w,
                height: h,
                depth_or_array_layers: 1,
            };
            (o, e, vec![k as u8 * 40 + 1; (w * h * 4) as usize])
        })
        .collect();
    let refs: Vec<_> = regions.iter().map(|(o, e, d)| (*o, *e, &d[..])).collect();
    up.upload_texture_regions(&texture, &refs).unwrap();
    for (o, e, d) in &regions {
        model.write(*o, *e, d);
    }
    assert_eq!(
        read_texture(&texture, 0, wgpu::Origin3d::ZERO, size, 4),
        model.bytes
    );
    // A tile outside the texture is refused before anything is copied.
    let outside = [(
        wgpu::Origin3d {
            x: 8 * 64,
            y: 0,
            z: 0,
        },
        &data[0][..],
    )];
    assert!(up.upload_texture_tiles(&texture, tile, &outside).is_err());
}

/// Pinned buffers: random bytes up into an allocation and back down, at several ranges
/// and offsets, checked against the bytes that went up (and against a readback that
/// does not use pinned memory); misuse gets typed errors and leaves everything usable.
#[test]
fn pinned_buffers_move_random_bytes_both_ways() {
    use vramkit::stream::PinnedBuffer;
    let gpu = gpu();
    let arena = staged_arena();
    let uploader = Uploader::new(gpu, Default::default());
    let downloader = Downloader::new(gpu, Default::default());
    let mut r = rng();
    let len: u64 = 3 << 20;
    let mut up = PinnedBuffer::new(gpu, len, "up").unwrap();
    let mut down = PinnedBuffer::new(gpu, len, "down").unwrap();
    assert_eq!(up.len(), len);
    assert!(
        up.as_slice().iter().all(|&b| b == 0),
        "a new buffer is zeroed"
    );
    if gpu.info().backend == wgpu::Backend::Vulkan {
        assert!(
            up.is_pinned(),
            "Vulkan must give host memory the GPU copies directly"
        );
    }
    let dst = arena.alloc(len + 4096, "dst").unwrap();
    for (src_range, offset) in [
        (0..len, 0u64),
        (4..len - 1024, 4096),
        (1 << 20..(1 << 20) + 12, 8),
    ] {
        r.fill_bytes(up.as_mut_slice());
        let want = up.as_slice()[src_range.start as usize..src_range.end as usize].to_vec();
        uploader
            .upload_pinned(&dst, offset, &up, src_range.clone())
            .unwrap();
        // The uploaded bytes, read back without pinned memory.
        let got =
            readback::read_buffer(gpu, dst.buffer(), dst.offset() + offset, want.len() as u64)
                .unwrap();
        assert!(got == want, "upload_pinned {src_range:?} at {offset}");
        // And down into another pinned buffer, at a different place in it.
        let at = len - (src_range.end - src_range.start);
        down.as_mut_slice().fill(0xAB);
        downloader
            .download_pinned(&dst, offset, &mut down, at..len)
            .unwrap();
        assert!(
            down.as_slice()[at as usize..] == want[..],
            "download_pinned {src_range:?} at {offset}"
        );
        assert!(
            down.as_slice()[..at as usize].iter().all(|&b| b == 0xAB),
            "download_pinned wrote outside its range"
        );
    }
    // Misuse: each is an error and changes nothing.
    let unaligned = uploader.upload_pinned(&dst, 2, &up, 0..8).unwrap_err();
    assert!(
        unaligned.to_string().contains("not whole words"),
        "{unaligned}"
    );
    assert!(uploader.upload_pinned(&dst, 0, &up, 0..6).is_err());
    assert!(uploader.upload_pinned(&dst, 0, &up, 0..len + 4).is_err());
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = 8..4;
    assert!(uploader.upload_pinned(&dst, 0, &up, backwards).is_err());
    assert!(
        uploader.upload_pinned(&dst, len, &up, 0..8192).is_err(),
        "past dst's end"
    );
    assert!(downloader
        .download_pinned(&dst, 0, &mut down, 0..len + 4)
        .is_err());
    assert!(PinnedBuffer::new(gpu, 0, "empty").is_err());
    assert!(PinnedBuffer::new(gpu, 6, "odd").is_err());
    assert!(PinnedBuffer::new(gpu, u64::MAX / 4 * 4, "huge").is_err());
    // Still usable after the errors.
    r.fill_bytes(up.as_mut_slice());
    uploader.upload_pinned(&dst, 0, &up, 0..len).unwrap();
    downloader
        .download_pinned(&dst, 0, &mut down, 0..len)
        .unwrap();
    assert!(down.as_slice() == up.as_slice());
}
