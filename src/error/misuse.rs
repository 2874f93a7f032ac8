//! What kind of misuse an [`Error::InvalidArgument`](super::Error::InvalidArgument) is, so
//! that a caller can match on the common ones instead of reading the message.

/// The kind of an invalid argument ([`Error::misuse_kind`](super::Error::misuse_kind)).
/// Exceeding a budget or the device's memory is [`Error::OutOfMemory`](super::Error) and a
/// lost device [`Error::DeviceLost`](super::Error), not a misuse.
///
/// ```
/// use vramkit::{Error, Misuse};
/// let e = Error::misuse(Misuse::Length, "an upload of 10 elements into 'x', which holds 8", "upload fewer");
/// assert_eq!(e.misuse_kind(), Some(Misuse::Length));
/// assert_eq!(Error::invalid("0 frames", "ask for 1").misuse_kind(), Some(Misuse::Other));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Misuse {
    /// An allocation, buffer, slice or range too short (or of another length) for what
    /// the call asked.
    Length,
    /// An offset, length, stride or alignment that is not a multiple of what the call
    /// needs (4-byte words, texture blocks, powers of two).
    Alignment,
    /// A count or shape the call cannot take: empty, past what one kernel indexes, or
    /// disagreeing with another argument (rows that do not divide the elements, products
    /// whose strides overlap).
    Shape,
    /// An output that shares bytes with an input it must not (or buffers bound in a way
    /// WebGPU refuses).
    Overlap,
    /// A handle of another device, arena, tier, set or texture than the one called: an
    /// allocation, pool, arena, pinned buffer, movable or shard.
    Foreign,
    /// A buffer or texture without the usage the call needs (`STORAGE`, `COPY_DST`, ...).
    Usage,
    /// Anything else: an option out of range, a call in the wrong state, an environment
    /// variable that does not parse.
    Other,
}
