//! The memory planner (pure CPU): random interval sets keep every promise of
//! `alloc::plan`, and the real traces plan close to their lower bound.

use std::io::BufReader;

use proptest::prelude::*;
use vramkit::alloc::plan::{
    intervals_from_trace, lower_bound, plan, plan_in_blocks, plan_with, Interval, GOOD_ENOUGH,
    HEURISTICS,
};
use vramkit::alloc::trace::parse_csv;

/// Checks a plan against the brute-force definition: intervals live at the same step
/// share no byte, offsets are aligned, the peak is the highest end and not below the
/// bound.
fn assert_valid(intervals: &[Interval], offsets: &[u64], peak: u64) {
    assert_eq!(offsets.len(), intervals.len());
    let mut top = 0;
    for (i, (a, &oa)) in intervals.iter().zip(offsets).enumerate() {
        assert_eq!(oa % a.align.max(1), 0, "interval {i} misaligned");
        top = top.max(oa + a.size);
        for (j, (b, &ob)) in intervals.iter().zip(offsets).enumerate().skip(i + 1) {
            let in_time = a.first <= b.last && b.first <= a.last;
            let in_memory = oa < ob + b.size && ob < oa + a.size;
            assert!(
                !(in_time && in_memory),
                "{i} {a:?} at {oa} and {j} {b:?} at {ob} overlap"
            );
        }
    }
    assert_eq!(peak, top);
    assert!(peak >= lower_bound(intervals));
}

/// The shipped ResNet-50 trace's events and its intervals at 256-byte alignment.
fn resnet_trace() -> (Vec<vramkit::alloc::trace::TraceEvent>, Vec<Interval>) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/data/trace_resnet50_train.csv.gz"
    );
    let file = std::fs::File::open(path).unwrap();
    let events = parse_csv(BufReader::new(flate2::read::GzDecoder::new(file))).unwrap();
    let v = intervals_from_trace(&events, 256);
    (events, v)
}

/// Random interval sets over up to three time buckets of the planner's index (so that
/// queries span several), mostly short-lived with some long-lived ones.
fn intervals() -> impl Strategy<Value = Vec<Interval>> {
    let span = 3 * vramkit::alloc::plan::BUCKET;
    let life = prop_oneof![4 => 0u32..120, 1 => 0u32..span];
    prop::collection::vec((1u64..5000, 0u32..9, 0u32..span, life), 0..120).prop_map(|v| {
        v.into_iter()
            .map(|(size, a, first, life)| Interval {
                size,
                align: 1 << a,
                first,
                last: first + life,
            })
            .collect()
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn every_heuristic_keeps_the_promises(v in intervals()) {
        for h in HEURISTICS {
            let p = plan_with(&v, h);
            assert_valid(&v, &p.offsets, p.peak);
            // Deterministic.
            prop_assert_eq!(&p, &plan_with(&v, h));
        }
        let best = plan(&v);
        assert_valid(&v, &best.offsets, best.peak);
        // The best of all orders, unless one came within 1/GOOD_ENOUGH of the bound first.
        let bound = lower_bound(&v);
        let good_enough = bound + bound / GOOD_ENOUGH;
        for h in HEURISTICS {
            prop_assert!(best.peak <= plan_with(&v, h).peak || best.peak <= good_enough);
        }
        prop_assert_eq!(&best, &plan(&v));
    }

    #[test]
    fn plans_in_blocks_never_cross_a_block(v in intervals(), blocks in 1u64..4) {
        // Blocks of one to three 64 KiB units: the intervals (up to 5000 bytes) are dense
        // enough that many would cross a boundary if let.
        let block = blocks << 16;
        let p = plan_in_blocks(&v, block);
        assert_valid(&v, &p.offsets, p.peak);
        prop_assert_eq!(p.block, block);
        for (i, (iv, &at)) in v.iter().zip(&p.offsets).enumerate() {
            prop_assert_eq!(at / block, (at + iv.size - 1) / block, "interval {} crosses", i);
        }
        prop_assert_eq!(&p, &plan_in_blocks(&v, block));
    }
}

/// A trace planned in blocks far smaller than its peak stays valid and close to the
/// bound (what a device with a small largest buffer asks of a big loop).
#[test]
fn a_trace_plans_in_small_blocks() {
    let (_, v) = resnet_trace();
    let largest = v.iter().map(|i| i.size).max().unwrap();
    let block = (2 * largest).next_multiple_of(1 << 16);
    let p = plan_in_blocks(&v, block);
    assert_valid(&v, &p.offsets, p.peak);
    for (iv, &at) in v.iter().zip(&p.offsets) {
        assert_eq!(at / block, (at + iv.size - 1) / block);
    }
    let bound = lower_bound(&v);
    assert!(p.peak > block, "the test needs several blocks");
    assert!(
        (p.peak as f64) < 1.3 * bound as f64,
        "{} over {bound}",
        p.peak
    );
}

#[test]
fn the_lower_bound_is_the_most_bytes_live_at_once() {
    let i = |size, first, last| Interval {
        size,
        align: 1,
        first,
        last,
    };
    // 10 + 20 live at step 1; 20 + 5 at step 2 (the first ended at 1).
    assert_eq!(lower_bound(&[i(10, 0, 1), i(20, 1, 2), i(5, 2, 3)]), 30);
    assert_eq!(lower_bound(&[]), 0);
    // Disjoint in time: the plan reuses the bytes and meets the bound.
    let v = [i(100, 0, 0), i(100, 1, 1), i(100, 2, 2)];
    let p = plan(&v);
    assert_eq!((p.peak, lower_bound(&v)), (100, 100));
}

#[test]
fn the_resnet_trace_plans_at_its_bound() {
    let (events, v) = resnet_trace();
    assert_eq!(
        v.len(),
        events
            .iter()
            .filter(|e| matches!(e, vramkit::alloc::trace::TraceEvent::Alloc { .. }))
            .count()
    );
    let p = plan(&v);
    let bound = lower_bound(&v);
    assert!(
        (p.peak as f64) <= 1.001 * bound as f64,
        "planned {} over a bound of {bound}",
        p.peak
    );
}
