//! Synchronisation of vramkit's own (floor 1: knows nothing above it): the lock ranks
//! every lock of the crate is taken in ([`rank`]), and the biased mutex the arena's state
//! lives under ([`biased`]).

// With the lab's `lock-parking-lot` or `lock-none`, the biased lock is built but not used.
#[cfg_attr(
    any(feature = "lock-parking-lot", feature = "lock-none"),
    allow(dead_code)
)]
pub(crate) mod biased;
pub(crate) mod rank;
