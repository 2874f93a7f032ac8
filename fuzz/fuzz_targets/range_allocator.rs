//! Fuzzes the allocator core: any sequence of allocations (any size, any alignment, valid
//! or not) and frees (live, stale, double or foreign handles) must keep every invariant.
//!
//! ```text
//! cargo +nightly fuzz run range_allocator
//! ```
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vramkit::alloc::{AllocError, Placement, RangeAllocator};

#[derive(Arbitrary, Debug)]
enum Op {
    Alloc { size: u32, align_log2: u8 },
    Free { which: u16 },
    FreeTwice { which: u16 },
    FreeForeign,
}

#[derive(Arbitrary, Debug)]
struct Input {
    capacity: u32,
    best_fit: bool,
    ops: Vec<Op>,
}

fuzz_target!(|input: Input| {
    let placement = if input.best_fit { Placement::BestFit } else { Placement::GoodFit };
    let capacity = (input.capacity as u64).max(4);
    let mut a = RangeAllocator::with_placement(capacity, placement);
    let mut other = RangeAllocator::new(1024);
    let foreign = other.allocate(16, 4).ok();
    let mut live = Vec::new();
    let mut freed = Vec::new();
    for op in input.ops.iter().take(512) {
        match *op {
            Op::Alloc { size, align_log2 } => {
                let align = 1u64 << (align_log2 % 20);
                match a.allocate(size as u64, align) {
                    Ok(r) => {
                        assert!(r.offset % align.max(4) == 0 && r.offset + r.size <= a.capacity());
                        live.push(r);
                    }
                    Err(AllocError::InvalidHandle { .. }) => panic!("allocate never reports a bad handle"),
                    Err(_) => {}
                }
            }
            Op::Free { which } if !live.is_empty() => {
                let r = live.swap_remove(which as usize % live.len());
                assert_eq!(a.free(r.handle), Ok(r.size));
                freed.push(r);
            }
            Op::FreeTwice { which } if !freed.is_empty() => {
                let r = freed[which as usize % freed.len()];
                assert!(a.free(r.handle).is_err());
            }
            Op::FreeForeign => {
                if let Some(f) = foreign {
                    assert!(a.free(f.handle).is_err());
                }
            }
            _ => {}
        }
        a.check_invariants().unwrap();
    }
    let used: u64 = live.iter().map(|r| r.size).sum();
    assert_eq!(a.used_bytes(), used);
});
