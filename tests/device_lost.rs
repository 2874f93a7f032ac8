//! A lost device (simulated with `Device::destroy`, as the WebGPU spec defines it) is
//! reported as `Error::DeviceLost` by every call, nothing hangs, no drop panics, and the
//! arena's statistics and leak report still work.

mod common;

use std::sync::mpsc;
use std::time::Duration;

use vramkit::{Error, Gpu, Runtime, RuntimeConfig};

fn lost<T: std::fmt::Debug>(r: vramkit::Result<T>, what: &str) {
    match r {
        Err(Error::DeviceLost { reason, .. }) => {
            assert!(reason.contains("Destroyed"), "{what}: {reason}")
        }
        other => panic!("{what}: expected DeviceLost, got {other:?}"),
    }
}

#[test]
fn every_call_after_a_device_loss_says_so() {
    common::gpu(); // fails with install advice when there is no adapter
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        // A device of its own: the loss must not reach the other tests.
        let gpu = Gpu::headless().unwrap();
        let rt = Runtime::new(&gpu, RuntimeConfig::default()).unwrap();
        let x = rt.alloc_from(&[1.0f32; 1024], "x").unwrap();
        let kept = rt.alloc::<f32>(1024, "kept").unwrap();
        assert_eq!(rt.download(&x).unwrap(), vec![1.0; 1024]);
        gpu.device().destroy();
        // No poll: the first call that reaches wgpu (here a download's wait) notices, and
        // from then on every call fails fast. (An allocation served from the arena's cache
        // touches no device; it notices at the arena's next poll.)
        lost(rt.download(&x), "download");
        assert!(gpu.lost().is_some_and(|r| r.contains("Destroyed")));
        lost(rt.alloc::<f32>(16, "after"), "alloc");
        lost(rt.upload(&x, &[2.0f32; 1024]), "upload");
        lost(rt.batch().axpy(1.0, &x, &kept).map(|_| ()), "kernel");
        lost(rt.synchronize(), "synchronize");
        lost(gpu.wait_idle(), "wait_idle");
        let raw = rt.arena().alloc(1 << 20, "raw");
        lost(raw, "arena alloc");
        // Statistics, the summary and the leak report still work; drops do not panic.
        let s = rt.arena().stats();
        assert_eq!(s.live_allocations, 2);
        assert!(rt.arena().summary().contains("kept"));
        drop((x, kept));
        drop(rt);
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("calls after a device loss hung or panicked");
}

/// A runtime on a device of its own with `x` and `y` uploaded and read back (the queue is
/// idle), and the device destroyed just now: nothing has waited or polled since.
fn destroyed_just_now() -> (
    Gpu,
    Runtime,
    vramkit::arena::Typed<f32>,
    vramkit::arena::Typed<f32>,
) {
    let gpu = Gpu::headless().unwrap();
    let rt = Runtime::new(&gpu, RuntimeConfig::default()).unwrap();
    let x = rt.alloc_from(&[1.0f32; 1024], "x").unwrap();
    let y = rt.alloc_from(&[2.0f32; 1024], "y").unwrap();
    assert_eq!(rt.download(&y).unwrap(), vec![2.0; 1024]);
    gpu.device().destroy();
    (gpu, rt, x, y)
}

/// Runs `f` on a thread of its own (a device of its own, whose loss must not reach the
/// other tests) and fails if it panics or hangs.
fn on_own_thread(f: impl FnOnce() + Send + 'static) {
    common::gpu();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("calls after a device loss hung or panicked");
}

#[test]
fn the_first_batch_after_a_destroy_is_refused_without_a_wait_first() {
    on_own_thread(|| {
        let (_gpu, rt, x, y) = destroyed_just_now();
        let mut batch = rt.batch();
        let recorded = batch.axpy(1.0, &x, &y).map(|_| ());
        match recorded {
            Ok(()) => lost(batch.submit().map(drop), "batch submitted after destroy"),
            Err(e) => lost(Err::<(), _>(e), "kernel recorded after destroy"),
        }
        lost(rt.synchronize(), "synchronize");
    });
}

#[test]
fn a_new_block_after_a_destroy_is_refused_without_a_wait_first() {
    on_own_thread(|| {
        let (_gpu, rt, x, _y) = destroyed_just_now();
        lost(rt.arena().alloc(8 << 20, "a new block"), "8 MiB allocation");
        lost(rt.upload(&x, &[3.0f32; 1024]), "upload");
        lost(rt.download(&x), "download");
    });
}

/// The device destroyed while threads allocate, upload, compute, download, evict and
/// defragment: no call panics or hangs, every result that comes back `Ok` is right, and
/// once the loss is recorded every call returns `DeviceLost`.
#[test]
fn destroying_the_device_mid_work_gives_typed_errors_and_no_panic() {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use vramkit::tier::{TierConfig, Tiers};
    on_own_thread(|| {
        let gpu = Gpu::headless().unwrap();
        let rt = Arc::new(Runtime::new(&gpu, RuntimeConfig::default()).unwrap());
        let tiers = Tiers::new(rt.arena(), TierConfig::default()).unwrap();
        let recorded = Arc::new(AtomicBool::new(false));
        let calls_after = Arc::new(AtomicU64::new(0));
        // Each worker's call: Ok(true) when it did something the device had to do.
        type Call = Box<dyn FnMut() -> vramkit::Result<()> + Send>;
        let compute: Call = {
            let rt = rt.clone();
            let mut k = 0.0f32;
            Box::new(move || {
                k += 1.0;
                let x = rt.alloc_from(&vec![k; 1 << 16], "x")?;
                let y = rt.alloc_from(&vec![1.0f32; 1 << 16], "y")?;
                let mut batch = rt.batch();
                batch.axpy(2.0, &x, &y)?;
                batch.submit()?;
                let got = rt.download(&y)?;
                assert!(
                    got.iter().all(|&v| v == 2.0 * k + 1.0),
                    "a wrong result came back Ok"
                );
                Ok(())
            })
        };
        let tiered: Call = {
            let (rt, tiers) = (rt.clone(), tiers.clone());
            Box::new(move || {
                let m = tiers.alloc(1 << 18, "m")?;
                {
                    let r = tiers.make_resident(&[&m])?;
                    let mut batch = rt.batch();
                    batch.fill(3.0, r.elements::<f32>(&m)?)?;
                    batch.submit()?;
                }
                tiers.evict(&[&m])?;
                tiers.defragment(Default::default())?;
                let r = tiers.make_resident(&[&m])?;
                let got = rt.download(r.elements::<f32>(&m)?)?;
                assert!(
                    got.iter().all(|&v| v == 3.0),
                    "a wrong movable came back Ok"
                );
                Ok(())
            })
        };
        let workers: Vec<_> = [compute, tiered]
            .into_iter()
            .map(|mut call| {
                let (recorded, calls_after) = (recorded.clone(), calls_after.clone());
                std::thread::spawn(move || loop {
                    let after = recorded.load(Ordering::Acquire);
                    let enough = match call() {
                        Err(Error::DeviceLost { .. }) if after => {
                            calls_after.fetch_add(1, Ordering::Relaxed) > 200
                        }
                        Ok(()) if after => panic!("a call after the loss was recorded returned Ok"),
                        Err(e) if after => panic!("after the loss: {e}"),
                        _ => false,
                    };
                    if enough {
                        return;
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300));
        gpu.device().destroy();
        // The loss is recorded once the queue has drained, at the next poll.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while gpu.wait_idle().is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "the loss was never recorded"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(gpu.lost().is_some());
        recorded.store(true, Ordering::Release);
        for w in workers {
            w.join().unwrap();
        }
        // Statistics still work, and nothing is stuck.
        let _ = rt.arena().summary();
        let _ = tiers.stats();
    });
}
