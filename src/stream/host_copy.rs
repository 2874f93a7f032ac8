//! Large host copies into and out of staging memory.
//!
//! An upload fills staging from the program's bytes and a download copies staging into
//! the program's buffer; both run on the CPU while the GPU's copy engine reads or writes
//! host memory too, so the host's memory traffic, not the copy loop, sets their rate.
//!
//! - **Threads.** A copy of at least [`PARALLEL_COPY_MIN`] bytes is cut into 256 KiB
//!   pieces that as many rayon jobs as threads asked for take in turn. With equal shares,
//!   one per thread, every copy waited for the slowest thread.
//! - **Streaming stores out of staging** (x86-64, [`copy_out_parallel`]). A plain store
//!   first reads the destination's cache line (the read-for-ownership), so a copy moves
//!   three bytes over the memory bus per byte copied; non-temporal stores write whole
//!   lines without reading them and bypass the caches: two bytes per byte. A download of
//!   at least [`STREAMING_MIN`] bytes into the program's memory uses them
//!   (`download_into`'s rate is in BENCHMARKS.md, Streaming). Smaller copies
//!   keep plain stores, whose result the program may still find in cache.
//! - **Plain stores into staging** ([`copy_parallel`], [`fill_parallel`]). Uploads fill
//!   memory the GPU reads next, and there streaming stores measured slower in paired
//!   runs, although a copy alone runs faster with them. Likely, though not measured
//!   directly, the GPU's reads find plainly stored staging still in the host's cache.
//!
//! Every piece written with streaming stores ends with a store fence on the thread that
//! wrote it, before rayon's join hands control back: the bytes are globally visible by
//! the time the caller reads them or reuses the staging buffer.

use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

/// Copies smaller than this run on the calling thread: splitting costs more than it saves.
pub(super) const PARALLEL_COPY_MIN: usize = 1 << 20;

/// Bytes per piece of a split copy.
const PIECE: usize = 256 << 10;

/// Copies of at least this many bytes use streaming stores where the CPU has them.
pub(super) const STREAMING_MIN: usize = 4 << 20;

/// `dst.copy_from_slice(src)` over the shorter of the two, split across rayon's pool when
/// large, with plain stores: for destinations the GPU reads next (see the module docs).
pub(crate) fn copy_parallel(dst: &mut [u8], src: &[u8], threads: usize) {
    let n = dst.len().min(src.len());
    // SAFETY: `dst` is an exclusive borrow of at least `n` bytes that cannot overlap `src`.
    unsafe { copy_to_raw(dst.as_mut_ptr(), &src[..n], threads, false) }
}

/// As [`copy_parallel`], with streaming stores when the copy is at least
/// [`STREAMING_MIN`] bytes: for the program's own memory, filled out of staging.
pub(crate) fn copy_out_parallel(dst: &mut [u8], src: &[u8], threads: usize) {
    let n = dst.len().min(src.len());
    // SAFETY: as in `copy_parallel`.
    unsafe { copy_to_raw(dst.as_mut_ptr(), &src[..n], threads, n >= STREAMING_MIN) }
}

/// Copies `src` into write-only `dst` (of the same length), split across rayon's pool
/// when large.
pub(super) fn fill_parallel(mut dst: wgpu::WriteOnly<'_, [u8]>, src: &[u8], threads: usize) {
    let n = dst.len().min(src.len());
    let ptr = dst.as_raw_element_ptr().as_ptr();
    // SAFETY: `dst` is an exclusive borrow of at least `n` writable bytes, which `src`
    // (a shared borrow) cannot overlap; the copy only writes them.
    unsafe { copy_to_raw(ptr, &src[..n], threads, false) }
}

/// A destination pointer that may move to rayon's threads: each gets a disjoint range.
#[derive(Clone, Copy)]
struct SendPtr(*mut u8);

// SAFETY: the pointer is only written through, by one thread per disjoint range, inside
// `copy_to_raw`'s scope (whose caller guarantees exclusive access).
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// The pointer `offset` bytes on. A method rather than a field read, so that closures
    /// capture the whole `SendPtr` (which is `Send`), not the raw pointer inside it.
    ///
    /// # Safety
    /// As `pointer::add`.
    unsafe fn add(self, offset: usize) -> *mut u8 {
        // SAFETY: as this function's contract.
        unsafe { self.0.add(offset) }
    }
}

/// Copies `src` to `dst`, with streaming stores when `streaming`.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes, not overlap `src`, and not be
/// accessed by anything else until this returns.
unsafe fn copy_to_raw(dst: *mut u8, src: &[u8], threads: usize, streaming: bool) {
    let n = src.len();
    if threads <= 1 || n < PARALLEL_COPY_MIN {
        // SAFETY: as this function's contract.
        unsafe { copy_piece(dst, src, streaming) };
        return;
    }
    // Equal pieces, one per thread, leave the whole copy waiting for the slowest thread
    // (on a shared host some thread is always late); small pieces that `threads` workers
    // take in turn keep every worker busy to the end.
    let pieces = n.div_ceil(PIECE);
    let next = AtomicUsize::new(0);
    let base = SendPtr(dst);
    (0..threads.min(pieces)).into_par_iter().for_each(|_| loop {
        let k = next.fetch_add(1, Ordering::Relaxed);
        if k >= pieces {
            break;
        }
        let at = k * PIECE;
        let piece = &src[at..n.min(at + PIECE)];
        // SAFETY: piece `k` covers bytes `at..` of `src`, so `dst`'s bytes at the same
        // offsets are in bounds, and only the worker that drew `k` writes them.
        unsafe { copy_piece(base.add(at), piece, streaming) };
    });
}

/// Copies one piece, with streaming stores when asked and the CPU has them.
///
/// # Safety
/// As [`copy_to_raw`].
unsafe fn copy_piece(dst: *mut u8, src: &[u8], streaming: bool) {
    #[cfg(target_arch = "x86_64")]
    if streaming {
        // SAFETY: as this function's contract.
        unsafe { x86::copy_streaming(dst, src) };
        return;
    }
    let _ = streaming;
    // SAFETY: as this function's contract.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) };
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_sfence, _mm_stream_si128};

    /// Bytes per loop step: one cache line, so each step fills one write-combining buffer.
    const LINE: usize = 64;

    /// Copies `src` to `dst` with non-temporal stores from the first 64-byte boundary of
    /// `dst` on (plain copies for the edges), then fences them. SSE2 only, which every
    /// x86-64 CPU has: the copy is bound by memory, not by the width of the stores.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `src.len()` bytes and not overlap `src`.
    pub(super) unsafe fn copy_streaming(dst: *mut u8, src: &[u8]) {
        let n = src.len();
        let s = src.as_ptr();
        let head = dst.align_offset(LINE).min(n);
        // SAFETY: the caller's contract; every range below lies within `0..n`.
        unsafe {
            std::ptr::copy_nonoverlapping(s, dst, head);
            let mut at = head;
            while at + LINE <= n {
                let from = s.add(at) as *const __m128i;
                let to = dst.add(at) as *mut __m128i;
                // Loads are unaligned (the source is the program's), stores aligned to
                // the line as `_mm_stream_si128` requires.
                let a = _mm_loadu_si128(from);
                let b = _mm_loadu_si128(from.add(1));
                let c = _mm_loadu_si128(from.add(2));
                let d = _mm_loadu_si128(from.add(3));
                _mm_stream_si128(to, a);
                _mm_stream_si128(to.add(1), b);
                _mm_stream_si128(to.add(2), c);
                _mm_stream_si128(to.add(3), d);
                at += LINE;
            }
            std::ptr::copy_nonoverlapping(s.add(at), dst.add(at), n - at);
            // Streaming stores are weakly ordered: make them visible before anything this
            // thread does next (the join, then the submit that lets the GPU read them).
            _mm_sfence();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length and misalignment around the edges, with and without threads, both
    /// below and above the streaming threshold, plain and streaming, against
    /// `copy_from_slice`.
    #[test]
    fn copies_match_copy_from_slice_at_every_edge() {
        let src: Vec<u8> = (0..STREAMING_MIN + 4096)
            .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        let lens = [
            0,
            1,
            63,
            64,
            65,
            200,
            PARALLEL_COPY_MIN - 1,
            PARALLEL_COPY_MIN + 77,
            STREAMING_MIN,
            STREAMING_MIN + 129,
        ];
        for &len in &lens {
            for src_at in [0usize, 3, 64] {
                for dst_at in [0usize, 1, 17, 64] {
                    for threads in [1usize, 3, 16] {
                        let s = &src[src_at..src_at + len];
                        let mut dst = vec![0xA5u8; len + dst_at + 64];
                        if threads == 3 {
                            copy_parallel(&mut dst[dst_at..dst_at + len], s, threads);
                        } else {
                            copy_out_parallel(&mut dst[dst_at..dst_at + len], s, threads);
                        }
                        assert_eq!(&dst[dst_at..dst_at + len], s, "len {len} at {dst_at}");
                        assert!(
                            dst[..dst_at].iter().all(|&b| b == 0xA5),
                            "before, len {len}"
                        );
                        assert!(
                            dst[dst_at + len..].iter().all(|&b| b == 0xA5),
                            "after, len {len} at {dst_at} threads {threads}"
                        );
                    }
                }
            }
        }
    }
}
