//! wgpu runs callbacks (`on_submitted_work_done`, `map_async`) inside `Device::poll` and
//! `Queue::submit`, on the thread that called them. Application code in such a callback
//! may drop, allocate, upload and read back through vramkit, and no vramkit call that polls
//! or submits may then wait on a lock of its own. Each scenario runs on a thread with a
//! deadline: a deadlock fails the test instead of hanging the suite. Every result is read
//! back and checked against what the host wrote.

use crate::common;

use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use common::{gpu, rng};
use parking_lot::Mutex;
use rand::Rng;
use vramkit::kernels::Kernels;
use vramkit::stream::{Downloader, Uploader};
use vramkit::{Allocation, Arena, ArenaConfig};

/// Runs `f` on its own thread and fails if it does not return within `secs` seconds.
fn within(secs: u64, what: &str, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => {}
        Err(RecvTimeoutError::Timeout) => {
            eprintln!("every thread:\n{}", common::hang::dump_all_threads());
            panic!("{what} did not return within {secs} s: a vramkit lock waits on itself")
        }
        Err(RecvTimeoutError::Disconnected) => panic!("{what} panicked (see above)"),
    }
}

/// An arena whose block memory is ordinary device buffers (so uploads go through staging
/// and submit, the path that runs callbacks) or host-visible (the in-place path).
fn arena(host_visible: bool) -> Arena {
    let block_memory = if host_visible {
        vramkit::arena::BlockMemory::Auto
    } else {
        vramkit::arena::BlockMemory::Device
    };
    Arena::new(
        gpu(),
        ArenaConfig {
            block_memory,
            ..Default::default()
        },
    )
    .unwrap()
}

/// What a callback did, for the main thread to check afterwards.
#[derive(Default)]
struct Made {
    allocations: Vec<(Allocation, Vec<u8>)>,
    ran: usize,
}

/// A callback body: drops `victim`, allocates a new range, uploads random bytes into it
/// and keeps both for the check.
fn drop_alloc_upload(
    arena: &Arena,
    uploader: &Uploader,
    victim: &Mutex<Option<Allocation>>,
    made: &Mutex<Made>,
    seed: u64,
) {
    drop(victim.lock().take());
    let bytes: Vec<u8> = (0..4096u64).map(|i| (i * 31 + seed) as u8).collect();
    let a = arena.alloc(4096, "from a callback").unwrap();
    uploader.upload(&a, 0, &bytes).unwrap();
    arena.maintain();
    let mut made = made.lock();
    made.allocations.push((a, bytes));
    made.ran += 1;
}

/// Waits (polling) until `done()`: a callback may be running on another test's thread,
/// which collected it in its own poll, when this thread's wait returns.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(std::time::Instant::now() < deadline, "{what}");
        gpu().poll();
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn check(downloader: &Downloader, made: &Mutex<Made>, expect_runs: usize) {
    eventually("every callback ran", || made.lock().ran == expect_runs);
    let made = made.lock();
    for (a, bytes) in &made.allocations {
        let got = downloader.download(a, 0, a.size()).unwrap();
        assert_eq!(&got, bytes, "bytes uploaded from a callback");
    }
}

/// A kernel in flight, frees pending, and a work-done callback
/// that drops an allocation; `synchronize` (and `maintain`, `trim`) must return.
#[test]
fn synchronize_returns_when_a_work_done_callback_drops_and_allocates() {
    for host_visible in [false, true] {
        within(60, "Arena::synchronize", move || {
            let arena = arena(host_visible);
            let kernels = Kernels::new(&arena).unwrap();
            let uploader = Arc::new(Uploader::new(gpu(), Default::default()));
            let downloader = Downloader::new(gpu(), Default::default());
            let made = Arc::new(Mutex::new(Made::default()));
            let n = 1u64 << 20;
            let x = arena.alloc(4 * n, "x").unwrap();
            let mut pending: Vec<Allocation> = (0..8)
                .map(|_| arena.alloc(1024, "pending").unwrap())
                .collect();
            for round in 0..3u64 {
                let victim = Arc::new(Mutex::new(Some(arena.alloc(2048, "victim").unwrap())));
                let mut batch = kernels.batch();
                batch.fill(round as f32, (&x, n)).unwrap();
                batch.submit().unwrap();
                pending.pop(); // a free waiting for the kernel
                let (arena2, uploader2, made2) = (arena.clone(), uploader.clone(), made.clone());
                gpu().queue().on_submitted_work_done(move || {
                    drop_alloc_upload(&arena2, &uploader2, &victim, &made2, round);
                });
                match round {
                    0 => arena.synchronize().unwrap(),
                    1 => {
                        arena.maintain();
                        arena.synchronize().unwrap();
                    }
                    _ => {
                        arena.trim();
                        arena.synchronize().unwrap();
                    }
                }
            }
            check(&downloader, &made, 3);
            let got = downloader.download(&x, 0, 4 * n).unwrap();
            let floats: &[f32] = bytemuck::cast_slice(&got);
            assert!(floats.iter().all(|&v| v == 2.0), "the last fill landed");
        });
    }
}

/// A map callback of the application's own buffer frees and allocates while the arena's
/// allocation path polls to reclaim frees.
#[test]
fn the_allocation_path_survives_map_callbacks_that_free_and_allocate() {
    within(60, "Arena::alloc polling", || {
        let arena = arena(false);
        let uploader = Arc::new(Uploader::new(gpu(), Default::default()));
        let downloader = Downloader::new(gpu(), Default::default());
        let made = Arc::new(Mutex::new(Made::default()));
        let mut r = rng();
        let mut maps = 0;
        for round in 0..20u64 {
            let readback = gpu().device().create_buffer(&wgpu::BufferDescriptor {
                label: Some("app readback"),
                size: 256,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            let victim = Arc::new(Mutex::new(Some(arena.alloc(512, "victim").unwrap())));
            let (arena2, uploader2, made2) = (arena.clone(), uploader.clone(), made.clone());
            let keep = readback.clone();
            readback.map_async(wgpu::MapMode::Read, .., move |result| {
                result.unwrap();
                drop_alloc_upload(&arena2, &uploader2, &victim, &made2, round);
                keep.unmap();
            });
            maps += 1;
            // Allocations and frees until the path polls (every `poll_interval`).
            let live: Vec<Allocation> = (0..r.gen_range(70..140))
                .map(|_| arena.alloc(r.gen_range(1..64) * 256, "churn").unwrap())
                .collect();
            drop(live);
        }
        arena.synchronize().unwrap();
        check(&downloader, &made, maps);
    });
}

/// A callback reads back with the downloader while the main thread downloads (the
/// downloader waits for the GPU inside `download`), and times work with `Gpu::time`
/// while the main thread does too.
#[test]
fn downloads_and_timings_from_callbacks_do_not_wait_on_themselves() {
    within(60, "Downloader::download and Gpu::time", || {
        let arena = arena(false);
        let uploader = Uploader::new(gpu(), Default::default());
        let downloader = Arc::new(Downloader::new(gpu(), Default::default()));
        let mut r = rng();
        let data: Vec<u8> = (0..(3 << 20)).map(|_| r.gen()).collect();
        let a = Arc::new(arena.alloc(data.len() as u64, "data").unwrap());
        uploader.upload(&a, 0, &data).unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        for _ in 0..4 {
            let (d2, a2, seen2) = (downloader.clone(), a.clone(), seen.clone());
            gpu().queue().on_submitted_work_done(move || {
                let got = d2.download(&a2, 1000, 5000).unwrap();
                let t = gpu().time(|_| {}).unwrap();
                seen2.lock().push((got, t.seconds >= 0.0));
            });
            let got = downloader.download(&a, 0, data.len() as u64).unwrap();
            assert!(got == data, "main-thread download");
            gpu().time(|_| {}).unwrap();
        }
        gpu().wait_idle().unwrap();
        eventually("every callback ran", || seen.lock().len() == 4);
        let seen = seen.lock();
        for (got, timed) in seen.iter() {
            assert_eq!(&got[..], &data[1000..6000], "callback download");
            assert!(timed);
        }
    });
}

/// The suite again, under the completion path this adapter does not take
/// ([`common::rerun_under_the_other_sealing_path`]).
#[test]
fn the_suite_passes_under_the_other_sealing_path() {
    common::rerun_under_the_other_sealing_path(module_path!());
}

/// Panics on vramkit's own threads (named `vramkit-...`) while `f` runs, by message: a
/// panic there kills the thread without failing the test that caused it.
fn vramkit_thread_panics(f: impl FnOnce()) -> Vec<String> {
    use std::sync::Mutex as StdMutex;
    static SEEN: StdMutex<Vec<String>> = StdMutex::new(Vec::new());
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current();
            if thread.name().is_some_and(|n| n.starts_with("vramkit")) {
                if let Ok(mut seen) = SEEN.lock() {
                    seen.push(format!("{:?}: {info}", thread.name()));
                }
            }
            previous(info);
        }));
    });
    let before = SEEN.lock().map(|s| s.len()).unwrap_or(0);
    f();
    SEEN.lock()
        .map(|s| s[before..].to_vec())
        .unwrap_or_default()
}

/// Issue 61, reproduction 1: a work-done callback owns the last handle of an allocation,
/// the user drops the runtime with an asynchronous upload pending, and the callback runs
/// on vramkit's polling thread: the drop there takes the arena, the `Gpu` and the poller
/// down with it. Nothing may join the current thread (before: "failed to join thread:
/// Resource deadlock avoided" on the polling thread, 5 of 5 on lavapipe).
#[test]
fn the_last_handle_dropped_in_a_callback_on_the_polling_thread() {
    gpu();
    for round in 0..5 {
        let panics = vramkit_thread_panics(|| {
            within(
                30,
                "the last handle dropped on the polling thread",
                move || {
                    let gpu = vramkit::Gpu::headless().unwrap();
                    let rt = vramkit::Runtime::new(&gpu, Default::default()).unwrap();
                    let kept = rt.alloc::<f32>(1 << 20, "kept by a callback").unwrap();
                    // GPU work long enough that everything below is dropped before it ends,
                    // then the callback, then an upload whose future the polling thread
                    // drives: the callback runs in the thread's poll.
                    let n = 1024;
                    let a = rt.alloc_from(&vec![1.0f32; n * n], "a").unwrap();
                    let c = rt.alloc::<f32>(n * n, "c").unwrap();
                    let shape = vramkit::kernels::MatmulShape {
                        m: n as u64,
                        k: n as u64,
                        n: n as u64,
                    };
                    let mut batch = rt.batch();
                    batch.matmul(shape, &a, &a, &c).unwrap();
                    batch.submit().unwrap();
                    let (tx, rx) = mpsc::channel();
                    rt.gpu().queue().on_submitted_work_done(move || {
                        drop(kept);
                        let _ = tx.send(std::thread::current().name().map(String::from));
                    });
                    // Small: a large one would wait for staging behind the product.
                    let bytes = vec![round as u8; 4096];
                    let target = rt.arena().alloc(4096, "upload target").unwrap();
                    let landed = rt.uploader().upload_async(&target, 0, &bytes).unwrap();
                    drop((a, c, target, landed, rt, gpu));
                    let ran_on = rx
                        .recv_timeout(Duration::from_secs(20))
                        .expect("the callback never finished dropping the last handle");
                    eprintln!("round {round}: the last handle dropped on {ran_on:?}");
                },
            );
        });
        assert!(panics.is_empty(), "round {round}: {panics:?}");
    }
}

/// The last handle of one device dropped in a work-done callback that runs inside a
/// vramkit submit on another device, under that device's queue lock: the teardown goes to
/// the reaper instead of taking the lifecycle lock out of rank (`gpu/lifecycle.rs`), and
/// devices open and close as before afterwards.
#[test]
fn the_last_handle_of_a_device_dropped_inside_another_devices_submit() {
    gpu();
    let panics = vramkit_thread_panics(|| {
        within(60, "a device dropped inside a submit", || {
            let a = vramkit::Gpu::headless().unwrap();
            let b = vramkit::Gpu::headless().unwrap();
            let rt_b = vramkit::Runtime::new(&b, Default::default()).unwrap();
            let kept = rt_b
                .alloc_from(&[2.0f32; 1024], "kept by a callback")
                .unwrap();
            let rt_a = vramkit::Runtime::new(&a, Default::default()).unwrap();
            let x = rt_a.alloc_from(&[1.0f32; 1024], "x").unwrap();
            let (tx, rx) = mpsc::channel();
            a.queue().on_submitted_work_done(move || {
                drop(kept);
                let _ = tx.send(());
            });
            drop((rt_b, b));
            // The work finishes on the GPU while nothing polls; the next submit runs the
            // callback inside itself.
            std::thread::sleep(Duration::from_millis(200));
            a.submit([]);
            rx.recv_timeout(Duration::from_secs(20))
                .expect("the callback never ran");
            assert_eq!(rt_a.download(&x).unwrap(), vec![1.0; 1024]);
            // The lifecycle lock is free: devices still open and close.
            drop(vramkit::Gpu::headless().unwrap());
        });
    });
    assert!(panics.is_empty(), "{panics:?}");
}
