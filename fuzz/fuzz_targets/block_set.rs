//! Fuzzes the block set: any sequence of allocations (any 64-bit size, any alignment),
//! frees of live allocations and releases of empty blocks must give typed errors, never
//! panic or overflow, keep `allocated` equal to the live sizes and never release a block
//! that holds a live allocation.
//!
//! ```text
//! fuzz/run-stable.sh 60 block_set
//! ```
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use vramkit::alloc::{AllocError, BlockAlloc, BlockPolicy, BlockSet, RangeHandle};

#[derive(Arbitrary, Debug)]
enum Op {
    Alloc { size: u64, align_log2: u8 },
    Free { which: u16 },
    Release { keep: u64 },
}

fuzz_target!(|ops: Vec<Op>| {
    let policy = BlockPolicy {
        min_block: 1 << 20,
        max_block: 16 << 20,
        dedicated_threshold: 2 << 20,
        dedicated_granularity: 64 << 10,
        release_empty_before_grow: true,
    };
    let mut set: BlockSet = BlockSet::new(policy);
    let mut live: Vec<BlockAlloc<RangeHandle>> = Vec::new();
    for op in ops {
        match op {
            Op::Alloc { size, align_log2 } => {
                // Sizes the host could never back are still fed through: the set only
                // does arithmetic on them (the reserve callback accepts everything).
                let align = 1u64 << (align_log2 % 20);
                let mut released = Vec::new();
                let result =
                    set.allocate::<AllocError>(size, align, |_, _| Ok(()), |id| released.push(id));
                // Checked before the new allocation joins `live`: a block reserved, given
                // back and reserved again larger (a retry) reuses its id.
                for id in released {
                    assert!(live.iter().all(|l| l.block != id), "released a live block");
                }
                match result {
                    Ok(a) => {
                        assert!(a.offset % align == 0);
                        live.push(a);
                    }
                    Err(AllocError::ZeroSize) => assert_eq!(size, 0),
                    Err(_) => {}
                }
            }
            Op::Free { which } => {
                if !live.is_empty() {
                    let a = live.swap_remove(which as usize % live.len());
                    assert!(set.free(a));
                }
            }
            Op::Release { keep } => {
                let mut released = Vec::new();
                set.release_empty(keep, |id| released.push(id));
                for id in released {
                    assert!(live.iter().all(|l| l.block != id), "released a live block");
                }
            }
        }
        assert_eq!(set.stats().allocated, live.iter().map(|l| l.size).sum::<u64>());
    }
});
