//! The `recovery` suite: a runtime with `VRAMKIT_RECOVERY_MIB` of movables (1 GiB on a
//! GPU) loses its device (`Device::destroy`) and recovers (`Runtime::recover`), half the
//! movables coming back from the host tier and half from restore functions that copy
//! from host arrays; against the time to open a fresh device in the same process. Every
//! movable is read back and checked afterwards (outside the timing).

use std::sync::Arc;
use std::time::Instant;

use vramkit::tier::{Movable, TierConfig, Tiers};
use vramkit::{Gpu, Runtime, RuntimeConfig};

use crate::bench_tier::env_or;
use crate::Figures;

const MIB: u64 = 1 << 20;

pub fn suite_recovery(gpu: &Gpu, figures: &mut Figures) {
    let cpu = gpu.is_cpu();
    let total_mib: u64 = env_or("VRAMKIT_RECOVERY_MIB", if cpu { 64 } else { 1024 });
    let piece_mib: u64 = env_or("VRAMKIT_RECOVERY_PIECE_MIB", if cpu { 4 } else { 64 });
    let pieces = (total_mib / piece_mib).max(2) as usize;
    let piece = piece_mib * MIB;
    // The peer: a fresh device on the same adapter, three times, the median.
    let mut opens: Vec<f64> = (0..3)
        .map(|_| {
            let start = Instant::now();
            let fresh = Gpu::headless().expect("a fresh device");
            let took = start.elapsed().as_secs_f64() * 1e3;
            drop(fresh);
            took
        })
        .collect();
    opens.sort_by(f64::total_cmp);
    let open_ms = opens[1];

    let own = Gpu::headless().expect("a device to lose");
    let mut rt = Runtime::new(&own, RuntimeConfig::default()).expect("runtime");
    let tiers = Tiers::new(rt.arena(), TierConfig::default()).expect("tiers");
    let words = (piece / 4) as usize;
    let data: Vec<Arc<Vec<u32>>> = (0..pieces)
        .map(|k| {
            Arc::new(
                (0..words as u32)
                    .map(|i| i.wrapping_mul(2654435761) ^ k as u32)
                    .collect(),
            )
        })
        .collect();
    let movables: Vec<Movable> = data
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let m = tiers.alloc(piece, &format!("piece{k}")).expect("alloc");
            {
                let r = tiers.make_resident(&[&m]).expect("resident");
                rt.upload(r.elements::<u32>(&m).expect("elements"), d)
                    .expect("upload");
            }
            if k % 2 == 1 {
                let source = d.clone();
                m.set_restore(move |bytes: &mut [u8]| {
                    bytes.copy_from_slice(bytemuck::cast_slice(&source));
                    Ok(())
                });
            }
            m
        })
        .collect();
    let evicted: Vec<&Movable> = movables.iter().step_by(2).collect();
    tiers.evict(&evicted).expect("evict");
    rt.synchronize().expect("idle");
    own.device().destroy();
    // What a program sees first: a call that fails with DeviceLost.
    let _ = rt.synchronize();
    assert!(
        own.lost().is_some(),
        "the destroyed device is not reported lost"
    );
    let report = rt.recover().expect("recovery");
    println!("\n== recovery: {} of movables ({pieces} of {piece_mib} MiB), half from the host tier, half from restore functions ==", vramkit::fmt_bytes(total_mib * MIB));
    println!("{report}");
    println!(
        "fresh device (median of 3): {open_ms:.1} ms; recovery {:.1} ms = {:.2}x",
        report.total.as_secs_f64() * 1e3,
        report.total.as_secs_f64() * 1e3 / open_ms
    );
    assert_eq!(report.movables.lost.len(), 0, "{report:?}");
    // Checked after the timing: every piece's bytes.
    let start = Instant::now();
    for (m, d) in movables.iter().zip(&data) {
        let r = tiers.make_resident(&[m]).expect("resident after recovery");
        let got = rt
            .download(r.elements::<u32>(m).expect("elements"))
            .expect("download");
        assert!(got == **d, "{} came back wrong", m.label());
    }
    let check_ms = start.elapsed().as_secs_f64() * 1e3;
    figures.add("recovery_mib", total_mib);
    figures.add(
        "recovery_total_ms",
        format!("{:.1}", report.total.as_secs_f64() * 1e3),
    );
    figures.add(
        "recovery_open_device_ms",
        format!("{:.1}", report.open_device.as_secs_f64() * 1e3),
    );
    figures.add(
        "recovery_movables_ms",
        format!("{:.1}", report.movables_time.as_secs_f64() * 1e3),
    );
    figures.add("recovery_fresh_device_ms", format!("{open_ms:.1}"));
    figures.add(
        "recovery_vs_fresh_device",
        format!("{:.2}", report.total.as_secs_f64() * 1e3 / open_ms),
    );
    figures.add("recovery_check_all_resident_ms", format!("{check_ms:.1}"));
}
