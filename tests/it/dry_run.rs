//! Dry runs and the largest batch that fits, on a real adapter: a dry run of the same code
//! reports exactly the peaks of the real run (which is checked against a CPU reference on
//! random inputs), takes no device memory, and checks arguments as a real run does;
//! `max_batch` finds the largest batch whose memory is a known function of its size, and
//! that batch then runs for real within the budget.

use crate::common;

#[path = "../../examples/support/model.rs"]
mod model;

use common::{assert_close, random_f32, rng};
use rand::Rng;
use vramkit::arena::Budget;
use vramkit::{Error, Runtime, RuntimeConfig};

fn runtime() -> Runtime {
    Runtime::new(common::gpu(), RuntimeConfig::default()).unwrap()
}

/// The model step twice, with a synchronize after each (where a dry run's frees come
/// back): the dry run's peaks (allocated, reserved, per label, per pool) equal the real
/// run's, and the real results match the CPU.
#[test]
fn a_dry_run_reports_the_peaks_of_the_real_run() {
    let mut r = rng();
    let weights = model::Weights::new(7);
    for batch in [1usize, 33, 300] {
        let input = random_f32(&mut r, batch * model::D_IN);
        let work = |rt: &Runtime| -> vramkit::Result<Vec<f32>> {
            let mut out = Vec::new();
            for _ in 0..2 {
                out = model::step(rt, &weights, batch, &input)?;
                rt.synchronize()?;
            }
            Ok(out)
        };
        let rt = runtime();
        let dry = rt.dry_run(work).unwrap();
        assert_eq!(
            rt.arena().stats().allocations,
            0,
            "the dry run used the real arena"
        );
        assert!(
            dry.value.iter().all(|&v| v == 0.0),
            "a dry download reads zeros"
        );
        let got = work(&rt).unwrap();
        let want = model::reference(&weights, batch, &input);
        assert_close(&got, &want, 1e-4, "model step");
        let real = rt.arena().stats();
        assert_eq!(dry.peak_allocated, real.peak_allocated, "batch {batch}");
        assert_eq!(dry.peak_reserved, real.peak_reserved, "batch {batch}");
        assert_eq!(dry.allocations, real.allocations);
        let mut real_labels: Vec<(String, u64)> = real
            .per_label
            .iter()
            .map(|(l, s)| (l.clone(), s.peak_bytes))
            .collect();
        real_labels.sort();
        let mut dry_labels: Vec<(String, u64)> = dry
            .per_label
            .iter()
            .map(|l| (l.label.clone(), l.peak_bytes))
            .collect();
        dry_labels.sort();
        assert_eq!(dry_labels, real_labels);
        let peaks = |p: &[vramkit::arena::PoolStats]| -> Vec<(String, u64)> {
            p.iter()
                .map(|p| (p.pool.clone(), p.peak_reserved))
                .collect()
        };
        assert_eq!(peaks(&dry.per_pool), peaks(&rt.arena().pool_stats()));
        // The data alone is a known function of the batch; kernel parameters come on top.
        let data = model::data_peak_bytes(batch);
        let params = dry
            .per_label
            .iter()
            .find(|l| l.label == "kernel params")
            .map_or(0, |l| l.peak_bytes);
        assert_eq!(dry.peak_allocated, data + params, "batch {batch}");
        let hidden = dry.per_label.iter().find(|l| l.label == "hidden").unwrap();
        assert_eq!(hidden.peak_bytes, (batch * model::HIDDEN * 4) as u64);
        // The history holds every allocation and free of the run.
        let allocs = dry
            .history
            .events
            .iter()
            .filter(|e| {
                matches!(
                    e.kind,
                    vramkit::arena::EventKind::Alloc | vramkit::arena::EventKind::Reuse
                )
            })
            .count() as u64;
        assert_eq!(allocs, dry.allocations);
    }
}

/// A dry run of far more than the device has: offsets and blocks without memory.
#[test]
fn a_dry_run_takes_no_device_memory() {
    let rt = runtime();
    let max = rt
        .gpu()
        .limits()
        .max_storage_buffer_binding_size
        .min(1 << 30);
    let count = (64u64 << 30) / max;
    let dry = rt
        .dry_run(|rt| {
            let mut held = Vec::new();
            for i in 0..count {
                let a = rt.arena().alloc(max, "huge")?;
                assert!(a.is_virtual());
                if i == 0 {
                    let mut b = rt.kernels().batch();
                    b.fill(1.0, (&a, max / 4))?;
                    b.submit()?;
                }
                held.push(a);
            }
            Ok(held.len())
        })
        .unwrap();
    assert_eq!(dry.value as u64, count);
    assert!(dry.peak_allocated >= count * max);
    assert!(dry.peak_reserved >= 64 << 30);
    let real = rt.arena().stats();
    assert_eq!((real.reserved, real.allocations), (0, 0));
}

/// Bad arguments fail the same way dry and real; what a dry run cannot do is a typed
/// error, not a wrong answer.
#[test]
fn a_dry_run_checks_arguments_like_a_real_run() {
    let rt = runtime();
    let bad = |rt: &Runtime| -> vramkit::Result<()> {
        let x = rt.alloc::<f32>(100, "x")?;
        let y = rt.alloc::<f32>(50, "y")?;
        let mut b = rt.batch();
        b.axpy(1.0, &x, &y)?; // lengths differ
        b.submit()?;
        Ok(())
    };
    let dry = rt.dry_run(bad).unwrap_err();
    let real = bad(&rt).unwrap_err();
    assert!(matches!(dry, Error::InvalidArgument { .. }), "{dry}");
    assert_eq!(dry.to_string(), real.to_string());
    let err = rt
        .dry_run(|rt| {
            let a = rt.arena().alloc(256, "a")?;
            rt.downloader().download_view(&a, 0, 256).map(|_| ())
        })
        .unwrap_err();
    assert!(err.to_string().contains("dry run"), "{err}");
    let err = rt
        .dry_run(|rt| vramkit::tier::Tiers::new(rt.arena(), Default::default()).map(|_| ()))
        .unwrap_err();
    assert!(err.to_string().contains("dry run"), "{err}");
    // The budget of the real arena holds in its dry run.
    rt.arena().set_budget(Budget::Bytes(8 << 20)).unwrap();
    let err = rt
        .dry_run(|rt| rt.arena().alloc(64 << 20, "too much").map(|_| ()))
        .unwrap_err();
    assert!(matches!(err, Error::OutOfMemory(_)), "{err}");
}

/// The largest batch of the model step under a budget: the answer fits, one more does
/// not, it takes O(log n) dry runs, and that batch runs for real within the budget with
/// results that match the CPU.
#[test]
fn max_batch_finds_the_largest_batch_that_fits_and_it_runs() {
    let weights = model::Weights::new(11);
    let mut r = rng();
    for budget in [8u64 << 20, 24 << 20] {
        let rt = runtime();
        let step = |rt: &Runtime, batch: usize| -> vramkit::Result<()> {
            let input = vec![0.5f32; batch * model::D_IN];
            model::step(rt, &weights, batch, &input).map(|_| ())
        };
        let fit = rt.max_batch(budget, 1..=1 << 16, step).unwrap();
        assert_eq!(fit.margin, budget / 32);
        assert!(fit.peak_reserved + fit.margin <= budget, "{fit}");
        assert!(fit.probes.len() <= 2 + 17, "{} dry runs", fit.probes.len());
        let next = rt.dry_run(|rt| step(rt, fit.batch + 1)).unwrap();
        assert!(
            next.peak_reserved + fit.margin > budget,
            "batch + 1 fits too: {fit}"
        );
        // The data peak grows with the batch, so the answer is near budget / bytes per
        // sample (blocks are at least 2 MiB, hence the slack).
        let per_sample = model::data_peak_bytes(2) - model::data_peak_bytes(1);
        assert!(fit.batch as u64 * per_sample <= budget, "{fit}");
        assert!(fit.batch as u64 * per_sample * 4 >= budget / 2, "{fit}");
        // For real, under that budget.
        rt.arena().set_budget(Budget::Bytes(budget)).unwrap();
        let input = random_f32(&mut r, fit.batch * model::D_IN);
        let got = model::step(&rt, &weights, fit.batch, &input).unwrap();
        // Rows are independent: the CPU checks a random window of 64 of them.
        let rows = 64.min(fit.batch);
        let first = r.gen_range(0..=fit.batch - rows);
        let window = &input[first * model::D_IN..(first + rows) * model::D_IN];
        let want = model::reference(&weights, rows, window);
        let c = model::CLASSES;
        assert_close(&got[first * c..(first + rows) * c], &want, 1e-4, "fit");
        let s = rt.arena().stats();
        assert!(
            s.peak_reserved <= budget,
            "{} over {budget}",
            s.peak_reserved
        );
        println!("{fit}; real peak reserved {}", s.peak_reserved);
    }
}
