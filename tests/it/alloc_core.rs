//! The allocator core against a simple reference model (no GPU needed).

use proptest::prelude::*;
use vramkit::alloc::{
    AllocError, BlockPolicy, BlockSet, Placement, RangeAllocator, MAX_ALIGN, MIN_ALIGN,
};

#[test]
fn rejects_bad_requests_and_stays_consistent() {
    let mut a = RangeAllocator::new(1 << 20);
    let keep = a.allocate(4096, 256).unwrap();
    assert_eq!(a.allocate(0, 4), Err(AllocError::ZeroSize));
    assert_eq!(
        a.allocate(16, 3),
        Err(AllocError::BadAlignment { align: 3 })
    );
    assert_eq!(
        a.allocate(16, MAX_ALIGN * 2),
        Err(AllocError::BadAlignment {
            align: MAX_ALIGN * 2
        })
    );
    assert!(matches!(
        a.allocate(2 << 20, 4),
        Err(AllocError::TooLarge { .. })
    ));
    let msg = a.allocate(2 << 20, 4).unwrap_err().to_string();
    assert!(msg.contains("exceeds the block capacity"), "{msg}");
    a.check_invariants().unwrap();
    assert_eq!(a.allocation_count(), 1);
    a.free(keep.handle).unwrap();
    assert!(a.is_empty());
}

#[test]
fn out_of_space_reports_largest_free_range() {
    let mut a = RangeAllocator::new(64 * 1024);
    let ranges: Vec<_> = (0..16).map(|_| a.allocate(4096, 4).unwrap()).collect();
    // Free every other range: 32 KiB free, but no 8 KiB hole.
    for r in ranges.iter().step_by(2) {
        a.free(r.handle).unwrap();
    }
    match a.allocate(8192, 4) {
        Err(AllocError::OutOfSpace {
            largest_free,
            free_bytes,
            ..
        }) => {
            assert_eq!(largest_free, 4096);
            assert_eq!(free_bytes, 32 * 1024);
        }
        other => panic!("expected OutOfSpace, got {other:?}"),
    }
    assert!((a.fragmentation() - (1.0 - 4096.0 / 32768.0)).abs() < 1e-12);
    a.check_invariants().unwrap();
}

#[test]
fn double_free_and_foreign_handles_are_rejected() {
    let mut a = RangeAllocator::new(1 << 16);
    let mut b = RangeAllocator::new(1 << 16);
    let r = a.allocate(100, 4).unwrap();
    let other = b.allocate(100, 4).unwrap();
    assert!(matches!(
        a.free(other.handle),
        Err(AllocError::InvalidHandle { .. })
    ));
    a.free(r.handle).unwrap();
    assert!(matches!(
        a.free(r.handle),
        Err(AllocError::InvalidHandle { .. })
    ));
    // The slot is reused by a new allocation: the stale handle must still be rejected.
    let r2 = a.allocate(100, 4).unwrap();
    assert!(a.free(r.handle).is_err());
    a.free(r2.handle).unwrap();
    a.check_invariants().unwrap();
    assert_eq!(a.free_range_count(), 1);

    // Two allocators in the same state put their allocations in the same slots; the
    // handles still differ (stamps are unique process-wide), so each rejects the other's.
    let (ra, rb) = (a.allocate(64, 4).unwrap(), b.allocate(64, 4).unwrap());
    assert!(a.free(rb.handle).is_err() && b.free(ra.handle).is_err());
    // A clone accepts the original's live handles, and new handles of either side stay
    // foreign to the other.
    let mut c = a.clone();
    let (na, nc) = (a.allocate(64, 4).unwrap(), c.allocate(64, 4).unwrap());
    assert_eq!(na.offset, nc.offset);
    assert!(a.free(nc.handle).is_err() && c.free(na.handle).is_err());
    c.free(ra.handle).unwrap();
    c.free(nc.handle).unwrap();
    a.free(na.handle).unwrap();
    a.free(ra.handle).unwrap();
    b.free(rb.handle).unwrap();
    b.free(other.handle).unwrap();
    for x in [&a, &b, &c] {
        x.check_invariants().unwrap();
        assert!(x.is_empty());
    }
    // Handles are 8 bytes, and so are optional ones: cheap to keep in large tables.
    assert_eq!(
        std::mem::size_of::<Option<vramkit::alloc::RangeHandle>>(),
        8
    );
}

#[test]
fn merges_neighbours_back_into_one_range() {
    let mut a = RangeAllocator::new(1 << 20);
    let rs: Vec<_> = (0..100)
        .map(|i| a.allocate(1000 + i * 8, 4).unwrap())
        .collect();
    for r in rs.iter().rev().step_by(3).chain(rs.iter().step_by(3)) {
        let _ = a.free(r.handle);
    }
    for r in &rs {
        let _ = a.free(r.handle);
    }
    a.check_invariants().unwrap();
    assert_eq!(a.free_range_count(), 1);
    assert_eq!(a.largest_free(), 1 << 20);
}

#[test]
fn handles_blocks_beyond_4_gib_and_large_alignments() {
    let cap = 6u64 << 30;
    let mut a = RangeAllocator::new(cap);
    let big = a.allocate(5u64 << 30, 65536).unwrap();
    let small = a.allocate(12, 65536).unwrap();
    assert_eq!(small.offset % 65536, 0);
    assert!(small.offset >= 5u64 << 30);
    a.check_invariants().unwrap();
    a.free(big.handle).unwrap();
    a.free(small.handle).unwrap();
    assert_eq!(a.largest_free(), cap);
}

#[test]
fn a_million_live_ranges() {
    let mut a = RangeAllocator::new(1 << 32);
    let rs: Vec<_> = (0..1_000_000u64)
        .map(|i| a.allocate(64 + (i % 7) * 4, 4).unwrap())
        .collect();
    assert_eq!(a.allocation_count(), 1_000_000);
    for r in rs.iter().step_by(2) {
        a.free(r.handle).unwrap();
    }
    for r in rs.iter().skip(1).step_by(2) {
        a.free(r.handle).unwrap();
    }
    assert!(a.is_empty());
    assert_eq!(a.free_range_count(), 1);
}

/// A block that refused a request is passed over for requests at least as large until
/// one of its ranges is freed, and never for smaller ones: what goes where is what a
/// search of every block in creation order would give.
#[test]
fn block_set_passes_over_blocks_that_refused_until_they_free() {
    const KIB: u64 = 1 << 10;
    let policy = BlockPolicy {
        min_block: 1 << 20,
        max_block: 1 << 20,
        dedicated_threshold: 4 << 20,
        dedicated_share: 0,
        dedicated_granularity: 64 << 10,
        release_empty_before_grow: false,
    };
    let mut set: BlockSet = BlockSet::new(policy);
    let alloc = |set: &mut BlockSet, size: u64| {
        set.allocate::<AllocError>(size, 256, |_, _| Ok(()), |_| {})
            .expect("room for a new block")
    };
    // Three full blocks of four 256 KiB ranges.
    let mut live: Vec<_> = (0..12).map(|_| alloc(&mut set, 256 * KIB)).collect();
    assert_eq!(set.stats().blocks, 3);
    // A 256 KiB hole in block 0: a 512 KiB request is refused by every block.
    let hole = live.remove(1);
    assert_eq!(hole.block.0, 0);
    assert!(set.free(hole));
    let big = alloc(&mut set, 512 * KIB);
    assert_eq!((big.block.0, set.stats().blocks), (3, 4));
    // A smaller request still finds block 0's hole, the first in creation order.
    let small = alloc(&mut set, 128 * KIB);
    assert_eq!(small.block.0, 0);
    // Block 1 frees two neighbours: it takes the next 512 KiB request, before block 3.
    let (a, b) = (live.remove(4), live.remove(4));
    assert_eq!((a.block.0, b.block.0, a.offset + a.size), (1, 1, b.offset));
    assert!(set.free(a) && set.free(b));
    assert_eq!(alloc(&mut set, 512 * KIB).block.0, 1);
    // Now only block 3 has 512 KiB (block 0 has 128 KiB left).
    assert_eq!(alloc(&mut set, 512 * KIB).block.0, 3);
    assert_eq!(alloc(&mut set, 128 * KIB).block.0, 0);
    assert_eq!(set.check_invariants(), Ok(()));
}

#[test]
fn block_set_grows_by_a_sixteenth_and_dedicates_huge_requests() {
    let policy = BlockPolicy {
        min_block: 1 << 20,
        max_block: 16 << 20,
        dedicated_threshold: 4 << 20,
        dedicated_share: 0,
        dedicated_granularity: 64 << 10,
        release_empty_before_grow: true,
    };
    let mut set: BlockSet = BlockSet::new(policy);
    let mut reserved = Vec::new();
    let mut released = Vec::new();
    let mut live = Vec::new();
    for _ in 0..40 {
        live.push(
            set.allocate::<AllocError>(
                700 << 10,
                256,
                |id, size| {
                    reserved.push((id, size));
                    Ok(())
                },
                |id| released.push(id),
            )
            .unwrap(),
        );
    }
    // Each shared block is a sixteenth of the shared bytes before it (whole MiB, then
    // whole requests), at least min_block and at most max_block.
    let unit = (700u64 << 10).next_multiple_of(256);
    let mut before = 0u64;
    for &(_, size) in &reserved {
        let grown = (before / 16)
            .next_multiple_of(1 << 20)
            .clamp(1 << 20, 16 << 20);
        assert_eq!(
            size,
            grown.div_ceil(unit) * unit,
            "after {before} bytes: {reserved:?}"
        );
        before += size;
    }
    // 40 requests (27.3 MiB) in blocks that hold at most a block's worth more.
    let live_bytes = 40 * unit;
    assert!(
        before <= live_bytes + 2 * unit,
        "{before} reserved for {live_bytes}"
    );
    assert!(reserved.len() < 40, "blocks are shared: {}", reserved.len());
    let huge = set
        .allocate::<AllocError>(
            5 << 20,
            256,
            |id, size| {
                reserved.push((id, size));
                Ok(())
            },
            |_| {},
        )
        .unwrap();
    assert_eq!(
        reserved.last().unwrap().1,
        5 << 20,
        "dedicated block is exact"
    );
    assert!(set.free(huge));
    for l in live {
        assert!(set.free(l));
    }
    assert_eq!(set.stats().allocated, 0);
    let freed = set.release_empty(0, |id| released.push(id));
    assert_eq!(freed, set.stats().peak_reserved);
    assert_eq!(set.stats().reserved, 0);
}

/// A request large for what the program holds gets its own block, of exactly its size;
/// smaller ones share; one over the fixed threshold is rounded to 1/64 of its power of two.
#[test]
fn block_set_dedicates_requests_large_for_the_program() {
    let policy = BlockPolicy {
        min_block: 4 << 20,
        max_block: 256 << 20,
        dedicated_threshold: 32 << 20,
        dedicated_share: 16,
        dedicated_granularity: 64 << 10,
        release_empty_before_grow: true,
    };
    let mut set: BlockSet = BlockSet::new(policy);
    let mut sizes = std::collections::HashMap::new();
    let mut alloc = |set: &mut BlockSet, size: u64| {
        set.allocate::<AllocError>(
            size,
            256,
            |id, s| {
                sizes.insert(id.0, s);
                Ok(())
            },
            |_| {},
        )
        .unwrap()
    };
    // 64 MiB reserved in shared blocks by requests under 512 KiB, which always share.
    let mut live = Vec::new();
    while set.stats().reserved < 64 << 20 {
        live.push(alloc(&mut set, 256 << 10));
    }
    assert!(set.blocks().all(|b| !b.2), "256 KiB requests share blocks");
    let reserved = set.stats().reserved;
    // A quarter of a MiB under the share stays shared; at or above it gets its own block.
    let under = reserved / 16 - (256 << 10);
    assert!(!set.is_dedicated(under));
    let big = (reserved / 16).next_multiple_of(256) + 1000;
    assert!(set.is_dedicated(big));
    let a = alloc(&mut set, big);
    let (_, block_size, dedicated, _) = set.blocks().find(|b| b.0 == a.block).unwrap();
    assert!(dedicated);
    assert_eq!(block_size, big.next_multiple_of(256), "exact");
    let huge = (33 << 20) + 1000;
    let h = alloc(&mut set, huge);
    assert_eq!(block_size, sizes[&a.block.0]);
    let (_, block_size, dedicated, _) = set.blocks().find(|b| b.0 == h.block).unwrap();
    assert!(dedicated);
    assert_eq!(
        block_size,
        huge.next_multiple_of((32 << 20) / 64),
        "rounded to 1/64"
    );
    // Under 512 KiB, nothing is dedicated by share, however little is reserved.
    let small: BlockSet = BlockSet::new(BlockPolicy {
        dedicated_share: 1 << 30,
        ..set.policy().clone()
    });
    assert!(!small.is_dedicated((512 << 10) - 1));
    assert!(small.is_dedicated(512 << 10));
}

/// Growing gives back only as many cached empty blocks as keep reserved memory at its
/// peak; below the peak, they stay for reuse.
#[test]
fn block_set_gives_back_empty_blocks_only_past_the_peak() {
    let policy = BlockPolicy {
        min_block: 1 << 20,
        max_block: 64 << 20,
        dedicated_threshold: 4 << 20,
        dedicated_share: 0,
        dedicated_granularity: 64 << 10,
        release_empty_before_grow: true,
    };
    let mut set: BlockSet = BlockSet::new(policy);
    let mut released = Vec::new();
    let alloc = |set: &mut BlockSet, size: u64, released: &mut Vec<u32>| {
        set.allocate::<AllocError>(size, 256, |_, _| Ok(()), |id| released.push(id.0))
            .unwrap()
    };
    let a = alloc(&mut set, 8 << 20, &mut released);
    let b = alloc(&mut set, 8 << 20, &mut released);
    let c = alloc(&mut set, 8 << 20, &mut released);
    assert_eq!(set.stats().peak_reserved, 24 << 20);
    let (a_block, b_block) = (a.block.0, b.block.0);
    assert!(set.free(a) && set.free(b));
    // 5 MiB gets a block of its own (an 8 MiB one is too large to reuse for it): one
    // empty block goes, so the peak holds, and the other stays.
    let d = alloc(&mut set, 5 << 20, &mut released);
    assert_eq!(released.len(), 1, "{released:?}");
    assert!(released[0] == a_block || released[0] == b_block);
    assert_eq!(set.stats().reserved, 21 << 20);
    assert_eq!(set.stats().peak_reserved, 24 << 20);
    // 8 MiB again reuses the empty block that stayed.
    released.clear();
    let e = alloc(&mut set, 8 << 20, &mut released);
    assert!(released.is_empty());
    assert!(e.block.0 == a_block || e.block.0 == b_block);
    assert_eq!(set.stats().reserved, 21 << 20);
    // With c's block empty too, 12 MiB passes the peak by 9 MiB: more than the empty
    // 8 MiB block covers, so it goes and the peak rises by what is left.
    let c_block = c.block.0;
    assert!(set.free(c));
    released.clear();
    let f = alloc(&mut set, 12 << 20, &mut released);
    assert_eq!(released, vec![c_block]);
    assert_eq!(set.stats().reserved, 25 << 20);
    assert_eq!(set.stats().peak_reserved, 25 << 20);
    for x in [d, e, f] {
        assert!(set.free(x));
    }
}

#[test]
fn block_set_reserve_failure_leaves_the_set_unchanged() {
    let mut set: BlockSet = BlockSet::new(BlockPolicy::default());
    let before = set.stats();
    let r = set.allocate(1000, 256, |_, _| Err(AllocError::ZeroSize), |_| {});
    assert!(r.is_err());
    assert_eq!(set.stats(), before);
}

/// Reference model: a sorted list of live ranges; checks that the allocator's answers are
/// possible (inside capacity, aligned, disjoint) and that it only refuses when the model
/// has no aligned gap either.
#[derive(Default)]
struct Model {
    live: Vec<(u64, u64)>,
}

impl Model {
    fn overlaps(&self, off: u64, size: u64) -> bool {
        self.live
            .iter()
            .any(|&(o, s)| off < o + s && o < off + size)
    }
    fn largest_gap(&self, cap: u64) -> u64 {
        self.gaps(cap).iter().map(|g| g.1).max().unwrap_or(0)
    }
    /// The free ranges, `(offset, size)` in address order.
    fn gaps(&self, cap: u64) -> Vec<(u64, u64)> {
        let mut sorted = self.live.clone();
        sorted.sort_unstable();
        let mut pos = 0u64;
        let mut gaps = Vec::new();
        for (o, s) in sorted.into_iter().chain([(cap, 0)]) {
            if o > pos {
                gaps.push((pos, o - pos));
            }
            pos = o + s;
        }
        gaps
    }
}

#[derive(Clone, Debug)]
enum Op {
    Alloc { size: u64, align_log2: u32 },
    Free { which: usize },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (1u64..20_000, 0u32..=16).prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        2 => any::<usize>().prop_map(|which| Op::Free { which }),
    ]
}

/// Requests drawn from five sizes (and any alignment): a freed range is often asked for
/// again at its exact size, which is what parking serves.
fn repeating_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (prop::sample::select(vec![256u64, 1000, 4096, 8192, 20_000]), 0u32..=12)
            .prop_map(|(size, align_log2)| Op::Alloc { size, align_log2 }),
        2 => any::<usize>().prop_map(|which| Op::Free { which }),
    ]
}

fn run_against_model(placement: Placement, cap: u64, ops: Vec<Op>) {
    let mut a = RangeAllocator::with_placement(cap, placement);
    // A twin driven through `try_allocate`: the same ranges, and `None` where `allocate`
    // has an error.
    let mut twin = RangeAllocator::with_placement(cap, placement);
    let mut twin_handles = Vec::new();
    let mut model = Model::default();
    let mut handles = Vec::new();
    for op in ops {
        match op {
            Op::Alloc { size, align_log2 } => {
                let align = 1u64 << align_log2;
                let result = a.allocate(size, align);
                let tried = twin.try_allocate(size, align);
                assert_eq!(
                    tried.as_ref().map(|r| (r.offset, r.size)),
                    result.as_ref().ok().map(|r| (r.offset, r.size)),
                    "try_allocate and allocate disagree"
                );
                twin_handles.extend(tried);
                match result {
                    Ok(r) => {
                        assert_eq!(r.offset % align.max(MIN_ALIGN), 0);
                        assert_eq!(r.size, size.next_multiple_of(align.max(MIN_ALIGN)));
                        assert!(r.offset + r.size <= cap);
                        assert!(!model.overlaps(r.offset, r.size), "overlap at {}", r.offset);
                        model.live.push((r.offset, r.size));
                        handles.push(r);
                    }
                    Err(AllocError::OutOfSpace { largest_free, .. }) => {
                        // The O(1) guarantee: a refusal means no free range reaches the
                        // request (rounded up to its alignment) plus worst-case alignment
                        // padding, rounded up one size bin (12.5 %).
                        let needed = size.next_multiple_of(align.max(4)) + align.max(4) - 4;
                        let gap = model.largest_gap(cap);
                        assert!(
                            gap < needed + needed / 8 + 8,
                            "refused {needed} with a {gap} gap"
                        );
                        assert_eq!(largest_free, gap, "reported largest free range is exact");
                    }
                    Err(AllocError::TooLarge { .. }) => {
                        assert!(size.next_multiple_of(align.max(4)) > cap)
                    }
                    Err(e) => panic!("unexpected {e}"),
                }
            }
            Op::Free { which } => {
                if handles.is_empty() {
                    continue;
                }
                let r = handles.swap_remove(which % handles.len());
                let t = twin_handles.swap_remove(which % twin_handles.len());
                assert_eq!(twin.free(t.handle).unwrap(), r.size);
                assert_eq!(a.free(r.handle).unwrap(), r.size);
                model.live.retain(|&(o, _)| o != r.offset);
                assert!(a.free(r.handle).is_err(), "double free accepted");
            }
        }
        a.check_invariants().unwrap();
        twin.check_invariants().unwrap();
        assert_eq!(twin.used_bytes(), a.used_bytes());
        let used: u64 = model.live.iter().map(|l| l.1).sum();
        assert_eq!(a.used_bytes(), used);
        assert_eq!(a.free_bytes(), cap - used);
        // What the allocator reports of its free space is the model's gaps, whether the
        // ranges freed into them are merged yet or parked.
        let gaps = model.gaps(cap);
        let mut reported = Vec::new();
        a.for_each_range(|offset, size, used| {
            if !used {
                reported.push((offset, size));
            }
        });
        assert_eq!(reported, gaps);
        assert_eq!(a.free_range_count(), gaps.len());
        assert_eq!(
            a.largest_free(),
            gaps.iter().map(|g| g.1).max().unwrap_or(0)
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn good_fit_matches_model(ops in prop::collection::vec(op(), 1..200)) {
        run_against_model(Placement::GoodFit, 256 * 1024, ops);
    }

    #[test]
    fn best_fit_matches_model(ops in prop::collection::vec(op(), 1..200)) {
        run_against_model(Placement::BestFit, 256 * 1024, ops);
    }

    /// Repeated sizes in a block that parks ranges up to 8 KiB and runs out of room:
    /// parked ranges are reused, merged when a request needs them, and reported merged.
    #[test]
    fn parking_matches_model(ops in prop::collection::vec(repeating_op(), 1..400), best in any::<bool>()) {
        let placement = if best { Placement::BestFit } else { Placement::GoodFit };
        run_against_model(placement, 2 << 20, ops);
    }
}

#[test]
fn sizes_and_capacities_near_u64_max_are_errors_not_overflows() {
    // Capacities past MAX_CAPACITY are clamped; requests near u64::MAX are TooLarge.
    let mut a = RangeAllocator::new(u64::MAX);
    assert_eq!(a.capacity(), vramkit::alloc::MAX_CAPACITY);
    for size in [u64::MAX, u64::MAX - 10, vramkit::alloc::MAX_CAPACITY + 1] {
        assert!(matches!(
            a.allocate(size, MAX_ALIGN),
            Err(AllocError::TooLarge { .. })
        ));
    }
    let r = a
        .allocate(vramkit::alloc::MAX_CAPACITY - MAX_ALIGN, MAX_ALIGN)
        .unwrap();
    a.check_invariants().unwrap();
    a.free(r.handle).unwrap();

    let mut set: BlockSet = BlockSet::new(BlockPolicy::default());
    for size in [u64::MAX, u64::MAX - 10, u64::MAX / 2] {
        let r = set.allocate::<AllocError>(size, 256, |_, _| Ok(()), |_| {});
        assert!(
            matches!(r, Err(AllocError::TooLarge { .. })),
            "{size}: {r:?}"
        );
    }
    assert_eq!(set.stats().reserved, 0, "nothing was reserved");
}

#[test]
fn block_set_rejects_allocations_it_does_not_hold() {
    let mut one: BlockSet = BlockSet::new(BlockPolicy::default());
    let mut other: BlockSet = BlockSet::new(BlockPolicy::default());
    let a = one
        .allocate::<AllocError>(4096, 256, |_, _| Ok(()), |_| {})
        .unwrap();
    let _b = other
        .allocate::<AllocError>(4096, 256, |_, _| Ok(()), |_| {})
        .unwrap();
    // A's block id exists in `other` too, but its handle is not live there.
    assert!(!other.free(a), "a foreign allocation is refused");
    assert_eq!(other.stats().allocated, 4096, "and changes nothing");
    assert_eq!(one.stats().allocated, 4096);
}

/// One step of the block-set model: allocate `size`, or free the live allocation at
/// `index` (modulo the live count), or give empty blocks back.
#[derive(Clone, Debug)]
enum SetOp {
    Alloc(u64),
    Free(usize),
    Release(u64),
}

fn set_op() -> impl Strategy<Value = SetOp> {
    prop_oneof![
        4 => (1u64..(3 << 20)).prop_map(SetOp::Alloc),
        1 => (0u64..(u64::MAX - 1)).prop_map(SetOp::Alloc),
        4 => any::<usize>().prop_map(SetOp::Free),
        1 => (0u64..(16 << 20)).prop_map(SetOp::Release),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    /// The block set against a model, its invariants checked after every operation
    /// (`BlockSet::check_invariants`): live allocations never overlap within a block,
    /// `allocated` is the sum of live sizes, `reserved` the sum of the blocks reserved
    /// minus those released, and no block holding a live allocation is ever released.
    #[test]
    fn block_set_matches_model(
        ops in prop::collection::vec(set_op(), 1..150),
        share in prop_oneof![Just(0u64), Just(8), Just(384)],
    ) {
        let policy = BlockPolicy {
            min_block: 1 << 20,
            max_block: 8 << 20,
            dedicated_threshold: 2 << 20,
            dedicated_share: share,
            dedicated_granularity: 64 << 10,
            release_empty_before_grow: true,
        };
        let mut set: BlockSet = BlockSet::new(policy);
        let mut live: Vec<vramkit::alloc::BlockAlloc<vramkit::alloc::RangeHandle>> = Vec::new();
        let mut blocks: std::collections::HashMap<u32, u64> = Default::default();
        for op in ops {
            match op {
                SetOp::Alloc(size) => {
                    let shared = size != 0 && !set.is_dedicated(size);
                    let mut reserved = None;
                    let mut released = Vec::new();
                    let r = set.allocate::<AllocError>(
                        size,
                        256,
                        |id, s| { reserved = Some((id.0, s)); Ok(()) },
                        |id| released.push(id.0),
                    );
                    for id in released {
                        prop_assert!(live.iter().all(|l| l.block.0 != id), "released a live block");
                        blocks.remove(&id);
                    }
                    if let Some((id, s)) = reserved {
                        blocks.insert(id, s);
                    }
                    match r {
                        Ok(a) => {
                            // A new block only when no block had room: no block passed
                            // over as having refused a request could have taken it.
                            if shared && reserved.is_some() {
                                for (id, _, dedicated, _) in set.blocks() {
                                    let room = set.block(id).map_or(0, |b| b.largest_free());
                                    prop_assert!(
                                        dedicated || id == a.block || room < size + 255,
                                        "a new block while block {} had {} bytes free for {}",
                                        id.0, room, size
                                    );
                                }
                            }
                            prop_assert!(a.offset % 256 == 0);
                            prop_assert!(a.offset + a.size <= blocks[&a.block.0]);
                            for l in &live {
                                if l.block == a.block {
                                    prop_assert!(a.offset + a.size <= l.offset || l.offset + l.size <= a.offset);
                                }
                            }
                            live.push(a);
                        }
                        // Past MAX_CAPACITY, or a block whose size would overflow the
                        // set's reserved total.
                        Err(AllocError::TooLarge { .. }) => prop_assert!(
                            size > vramkit::alloc::MAX_CAPACITY
                                || set.stats().reserved as u128 + size as u128 * 9 / 8 + (1 << 20)
                                    > u64::MAX as u128
                        ),
                        Err(AllocError::ZeroSize) => prop_assert_eq!(size, 0),
                        Err(e) => prop_assert!(false, "unexpected {e:?}"),
                    }
                }
                SetOp::Free(i) => {
                    if !live.is_empty() {
                        let a = live.swap_remove(i % live.len());
                        prop_assert!(set.free(a));
                    }
                }
                SetOp::Release(keep) => {
                    let mut released = Vec::new();
                    set.release_empty(keep, |id| released.push(id.0));
                    for id in released {
                        prop_assert!(live.iter().all(|l| l.block.0 != id), "released a live block");
                        blocks.remove(&id);
                    }
                }
            }
            if let Err(broken) = set.check_invariants() {
                prop_assert!(false, "block set invariant {}", broken);
            }
            let s = set.stats();
            prop_assert_eq!(s.allocated, live.iter().map(|l| l.size).sum::<u64>());
            prop_assert_eq!(s.reserved, blocks.values().sum::<u64>());
        }
    }

    /// Any bytes give the trace parser a typed error or events, never a panic; ids stay
    /// dense (at most one per allocation), so a replay of them is bounded by its input.
    #[test]
    fn trace_parser_takes_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
        if let Ok(events) = vramkit::alloc::trace::parse_csv(std::io::Cursor::new(bytes)) {
            let allocs = events.iter().filter(|e| matches!(e, vramkit::alloc::trace::TraceEvent::Alloc { .. })).count();
            for e in &events {
                let id = match e {
                    vramkit::alloc::trace::TraceEvent::Alloc { id, .. } | vramkit::alloc::trace::TraceEvent::Free { id } => *id,
                };
                prop_assert!((id as usize) < allocs.max(1));
            }
        }
    }

    /// Hand-made events with ids anywhere in u32 replay in memory bounded by the events.
    #[test]
    fn replay_of_sparse_ids_is_bounded(ids in prop::collection::vec(any::<u32>(), 1..100)) {
        use vramkit::alloc::trace::{replay, TraceEvent};
        let mut events: Vec<TraceEvent> = ids.iter().map(|&id| TraceEvent::Alloc { id, size: 4096 }).collect();
        events.extend(ids.iter().map(|&id| TraceEvent::Free { id }));
        let r = replay::<RangeAllocator>(&events, &BlockPolicy::default(), 256);
        prop_assert_eq!(r.failures, 0);
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        prop_assert_eq!(r.peak_allocated, 4096 * distinct.len() as u64);
    }
}

#[test]
fn trace_parser_lines() {
    use vramkit::alloc::trace::{parse_csv, TraceEvent};
    let text = "seq,action,addr,size\n1,alloc,100,64\n2,alloc,200,0\n3,free_completed,100,64\n4,free,999,8\n5,segment_alloc,1,1\n";
    let events = parse_csv(std::io::Cursor::new(text)).unwrap();
    assert_eq!(
        events,
        vec![
            TraceEvent::Alloc { id: 0, size: 64 },
            TraceEvent::Free { id: 0 }
        ]
    );
    let err = parse_csv(std::io::Cursor::new("1,alloc,x,4\n")).unwrap_err();
    assert!(err.to_string().contains("line 1: bad addr"), "{err}");
    let err = parse_csv(std::io::Cursor::new("1,alloc\n")).unwrap_err();
    assert!(err.to_string().contains("expected 4 fields"), "{err}");
}
