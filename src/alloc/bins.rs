//! Size classes: a size maps to a bin like a float with a 3-bit mantissa.
//!
//! Bin `b` covers sizes `[bin_size(b), bin_size(b + 1))`; bins below 8 are exact. With
//! three mantissa bits the bins are at most 12.5 % wide, which bounds what good-fit wastes
//! (the same encoding as Sebastian Aaltonen's OffsetAllocator, widened to 64-bit sizes).

pub(crate) const MANTISSA_BITS: u32 = 3;
const MANTISSA_VALUE: u64 = 1 << MANTISSA_BITS;
const MANTISSA_MASK: u64 = MANTISSA_VALUE - 1;

/// Number of top-level classes (exponents); one bit each in the top bitmap.
pub(crate) const TOP_BINS: usize = 64;
/// Sub-bins per class; one bit each in a class's `u8` bitmap.
pub(crate) const SUB_BINS: usize = 8;
/// Total bins. Sizes up to `2^63` map below this.
pub(crate) const BINS: usize = TOP_BINS * SUB_BINS;

/// The bin whose every size is `>= size`: where an allocation of `size` may search.
pub(crate) fn bin_round_up(size: u64) -> usize {
    if size < MANTISSA_VALUE {
        return size as usize;
    }
    let highest = 63 - size.leading_zeros();
    let start = highest - MANTISSA_BITS;
    let exp = start as u64 + 1;
    let mut mantissa = (size >> start) & MANTISSA_MASK;
    if size & ((1u64 << start) - 1) != 0 {
        mantissa += 1; // may carry into the exponent, which is exactly right
    }
    ((exp << MANTISSA_BITS) + mantissa) as usize
}

/// The bin whose range contains `size`: where a free range of `size` is filed.
pub(crate) fn bin_round_down(size: u64) -> usize {
    if size < MANTISSA_VALUE {
        return size as usize;
    }
    let highest = 63 - size.leading_zeros();
    let start = highest - MANTISSA_BITS;
    let exp = start as u64 + 1;
    let mantissa = (size >> start) & MANTISSA_MASK;
    ((exp << MANTISSA_BITS) | mantissa) as usize
}

/// The smallest size in bin `bin`.
pub(crate) fn bin_size(bin: usize) -> u64 {
    let exp = (bin >> MANTISSA_BITS) as u32;
    let mantissa = bin as u64 & MANTISSA_MASK;
    if exp == 0 {
        mantissa
    } else {
        (mantissa | MANTISSA_VALUE) << (exp - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_brackets() {
        for size in (1u64..5000).chain([1 << 20, (1 << 32) + 7, u64::MAX >> 1]) {
            let down = bin_round_down(size);
            let up = bin_round_up(size);
            assert!(bin_size(down) <= size, "size {size}");
            assert!(bin_size(up) >= size, "size {size}");
            assert!(up == down || up == down + 1);
            assert!(up < BINS);
            if size < (1 << 62) {
                assert!(bin_size(down + 1) > size, "size {size}");
            }
        }
        // Bins past 495 would describe sizes above 2^63, which a u64 cannot hold.
        for bin in 0..=495 {
            assert_eq!(bin_round_down(bin_size(bin)), bin);
            assert_eq!(bin_round_up(bin_size(bin)), bin);
        }
    }
}
