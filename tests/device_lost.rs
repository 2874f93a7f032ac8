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
