//! Synchronisation of vramkit's own (floor 1: knows nothing above it): the lock ranks
//! every lock of the crate is taken in ([`rank`]), and the biased mutex the arena's state
//! lives under ([`biased`]).

pub(crate) mod biased;
pub(crate) mod rank;
