//! `memcpy`, `memmove`, `memcmp` and `bcmp` for the static (musl) x86_64 build.
//!
//! musl copies every size with `rep movsq` and finishes with a byte loop: a 20-byte copy pays the
//! string instruction's start-up and four loop turns. Most copies on the reconcile path are that
//! small (names, object references, statuses cloned), so the static build spent a quarter of a no-op
//! reconcile in `memcpy` where glibc's took 6 %. Here a copy of up to 64 bytes is a few overlapping
//! loads and stores, and a longer one is one `rep movsb`, which processors since 2012 run at full speed
//! (ERMS). uv tracks the same cost (astral-sh/uv#10610) and openvmm replaced musl's copy the same way.
//!
//! musl compares a byte at a time; a no-op reconcile compares names and labels all along (`==` on
//! strings is `bcmp`), and with the copies mended that loop was the static build's largest remaining
//! cost against glibc's vector compare (a profile of `bench noop-rate`: 817 samples in musl's
//! `memcmp` against 570 in glibc's, the rest of the two profiles alike). Here 16 bytes are compared at
//! once, and a shorter tail as two overlapping words.
//!
//! Both copies are defined because musl's `memmove` jumps into its `memcpy`'s object file: linking
//! that file for `memmove` would define `memcpy` twice; `bcmp` too, as musl's calls its `memcmp`. No
//! loop here copies or compares memory a byte or a word at a time, so the compiler cannot turn one
//! back into a call to the function it is in.

use std::arch::asm;
use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_storeu_si128};

/// `memcpy`: the C library's copy, replaced in the static build only (see the module doc).
///
/// # Safety
/// The C contract: `src` readable and `dst` writable for `n` bytes, not overlapping.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    unsafe { copy(dst, src, n) };
    dst
}

/// `memmove`: as [`memcpy`], and the two ranges may overlap.
///
/// # Safety
/// The C contract: `src` readable and `dst` writable for `n` bytes.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    unsafe { copy_overlapping(dst, src, n) };
    dst
}

/// `memcmp`: the C library's compare, replaced in the static build only (see the module doc).
///
/// # Safety
/// The C contract: `a` and `b` readable for `n` bytes.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    unsafe { compare(a, b, n) }
}

/// `bcmp`: zero when equal, as [`memcmp`]; what `==` on byte strings calls.
///
/// # Safety
/// The C contract: `a` and `b` readable for `n` bytes.
#[cfg(target_env = "musl")]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    unsafe { compare(a, b, n) }
}

/// Compares `n` bytes as unsigned numbers: below zero, zero or above as `a`'s first byte that differs
/// is below or above `b`'s, or none does.
///
/// # Safety
/// `a` and `b` readable for `n` bytes.
pub unsafe fn compare(a: *const u8, b: *const u8, n: usize) -> i32 {
    unsafe {
        if n < 16 {
            return compare_short(a, b, n);
        }
        // Whole 16-byte blocks, then the last 16 bytes, which may overlap the last block compared.
        let mut at = 0;
        while at + 16 <= n {
            if let Some(order) = compare_block(a, b, at) {
                return order;
            }
            at += 16;
        }
        if at < n {
            compare_block(a, b, n - 16).unwrap_or(0)
        } else {
            0
        }
    }
}

/// The order of the 16 bytes at `at`, if any of them differ.
#[inline(always)]
unsafe fn compare_block(a: *const u8, b: *const u8, at: usize) -> Option<i32> {
    use std::arch::x86_64::{_mm_cmpeq_epi8, _mm_movemask_epi8};
    unsafe {
        let (x, y) = (
            _mm_loadu_si128(a.add(at).cast::<__m128i>()),
            _mm_loadu_si128(b.add(at).cast::<__m128i>()),
        );
        // One bit per byte, set where the bytes are equal.
        let equal = _mm_movemask_epi8(_mm_cmpeq_epi8(x, y)) as u32;
        let differ = !equal & 0xffff;
        (differ != 0).then(|| {
            let i = at + differ.trailing_zeros() as usize;
            i32::from(*a.add(i)) - i32::from(*b.add(i))
        })
    }
}

/// Under 16 bytes: the first and the last word of the widest size that fits, read big-endian so
/// that the numbers order as the bytes do (the overlap is equal by then, so the last word's order
/// is its differing bytes' order).
#[inline(always)]
unsafe fn compare_short(a: *const u8, b: *const u8, n: usize) -> i32 {
    unsafe {
        let order = |x: u64, y: u64| match x.cmp(&y) {
            std::cmp::Ordering::Less => -1,
            std::cmp::Ordering::Equal => 0,
            std::cmp::Ordering::Greater => 1,
        };
        let word = |p: *const u8| u64::from_be(p.cast::<u64>().read_unaligned());
        let half = |p: *const u8| u64::from(u32::from_be(p.cast::<u32>().read_unaligned()));
        let byte = |p: *const u8, i: usize| u64::from(*p.add(i));
        if n >= 8 {
            let first = order(word(a), word(b));
            if first != 0 {
                return first;
            }
            order(word(a.add(n - 8)), word(b.add(n - 8)))
        } else if n >= 4 {
            let first = order(half(a), half(b));
            if first != 0 {
                return first;
            }
            order(half(a.add(n - 4)), half(b.add(n - 4)))
        } else if n > 0 {
            // 1..=3 bytes as one big-endian number: the first, the middle, the last.
            let number = |p: *const u8| byte(p, 0) << 16 | byte(p, n / 2) << 8 | byte(p, n - 1);
            order(number(a), number(b))
        } else {
            0
        }
    }
}

/// Copies `n` bytes from `src` to `dst`, which do not overlap.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes.
pub unsafe fn copy(dst: *mut u8, src: *const u8, n: usize) {
    unsafe {
        if n <= 64 {
            copy_small(dst, src, n);
        } else {
            copy_forward(dst, src, n);
        }
    }
}

/// Copies `n` bytes from `src` to `dst`, which may overlap.
///
/// # Safety
/// `src` readable and `dst` writable for `n` bytes.
pub unsafe fn copy_overlapping(dst: *mut u8, src: *const u8, n: usize) {
    unsafe {
        if n <= 64 {
            copy_small(dst, src, n);
        } else if (dst as usize).wrapping_sub(src as usize) >= n {
            // `dst` below `src`, or the ranges apart: a forward copy never reads a byte it wrote.
            copy_forward(dst, src, n);
        } else {
            copy_backward(dst, src, n);
        }
    }
}

/// Up to 64 bytes as at most four pairs of overlapping loads and stores. Every load comes before
/// any store, so the ranges may overlap.
#[inline(always)]
unsafe fn copy_small(dst: *mut u8, src: *const u8, n: usize) {
    unsafe {
        if n >= 16 {
            let load = |at: usize| _mm_loadu_si128(src.add(at).cast::<__m128i>());
            let store = |at: usize, v| _mm_storeu_si128(dst.add(at).cast::<__m128i>(), v);
            // 16..=64 bytes: the first and last 16, and for more than 32 the 16 after the first
            // and before the last.
            let (first, last) = (load(0), load(n - 16));
            if n > 32 {
                let (second, before_last) = (load(16), load(n - 32));
                store(16, second);
                store(n - 32, before_last);
            }
            store(0, first);
            store(n - 16, last);
        } else if n >= 8 {
            let (first, last) = (load_u64(src), load_u64(src.add(n - 8)));
            dst.cast::<u64>().write_unaligned(first);
            dst.add(n - 8).cast::<u64>().write_unaligned(last);
        } else if n >= 4 {
            let first = src.cast::<u32>().read_unaligned();
            let last = src.add(n - 4).cast::<u32>().read_unaligned();
            dst.cast::<u32>().write_unaligned(first);
            dst.add(n - 4).cast::<u32>().write_unaligned(last);
        } else if n > 0 {
            // 1..=3 bytes: the first, the middle and the last cover them all.
            let (first, middle, last) = (*src, *src.add(n / 2), *src.add(n - 1));
            *dst = first;
            *dst.add(n / 2) = middle;
            *dst.add(n - 1) = last;
        }
    }
}

#[inline(always)]
unsafe fn load_u64(at: *const u8) -> u64 {
    unsafe { at.cast::<u64>().read_unaligned() }
}

/// Lowest byte first, in one `rep movsb`.
#[inline(always)]
unsafe fn copy_forward(dst: *mut u8, src: *const u8, n: usize) {
    unsafe {
        asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rdi") dst => _,
            inout("rsi") src => _,
            options(nostack, preserves_flags),
        );
    }
}

/// Highest byte first, for `dst` above an overlapping `src` (more than 64 bytes): the top `n % 8`
/// bytes, then the rest in 8-byte words downwards with the direction flag set, as musl does.
#[inline(always)]
unsafe fn copy_backward(dst: *mut u8, src: *const u8, n: usize) {
    unsafe {
        let words = n / 8;
        let tail = n % 8;
        copy_small(dst.add(words * 8), src.add(words * 8), tail);
        asm!(
            "std",
            "rep movsq",
            "cld",
            inout("rcx") words => _,
            inout("rdi") dst.add(words * 8 - 8) => _,
            inout("rsi") src.add(words * 8 - 8) => _,
            options(nostack),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a copy of `n` bytes from `from` to `to` inside `buffer` leaves: a byte at a time through
    /// a scratch copy, the definition `memmove` has.
    fn expected(buffer: &[u8], from: usize, to: usize, n: usize) -> Vec<u8> {
        let moved: Vec<u8> = buffer[from..from + n].to_vec();
        let mut out = buffer.to_vec();
        for (i, b) in moved.into_iter().enumerate() {
            out[to + i] = b;
        }
        out
    }

    /// A buffer whose bytes differ from their neighbours, so a misplaced byte shows.
    fn pattern(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    const SIZES: &[usize] = &[
        0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 47, 48, 63, 64, 65, 66, 71, 72, 73, 127,
        128, 129, 255, 256, 1000, 4096, 4099, 70_001,
    ];

    #[test]
    fn copy_moves_exactly_the_bytes_asked_for_at_every_size_and_alignment() {
        for &n in SIZES {
            for src_at in 0..8 {
                for dst_at in 0..8 {
                    let mut buffer = pattern(2 * n + 64);
                    let (from, to) = (src_at, n + 32 + dst_at);
                    let want = expected(&buffer, from, to, n);
                    let base = buffer.as_mut_ptr();
                    unsafe { copy(base.add(to), base.add(from), n) };
                    assert!(buffer == want, "copy of {n} bytes from +{from} to +{to}");
                }
            }
        }
    }

    #[test]
    fn copy_overlapping_moves_up_and_down_by_any_distance() {
        for &n in SIZES {
            for shift in [1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, n + 1] {
                for (from, to) in [(0, shift), (shift, 0)] {
                    let mut buffer = pattern(n + shift + 8);
                    let want = expected(&buffer, from, to, n);
                    let base = buffer.as_mut_ptr();
                    unsafe { copy_overlapping(base.add(to), base.add(from), n) };
                    assert!(buffer == want, "move of {n} bytes from +{from} to +{to}");
                }
            }
        }
    }

    /// The definition: the first differing byte's order, as unsigned numbers.
    fn expected_order(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
        a.iter()
            .zip(b)
            .find(|(x, y)| x != y)
            .map_or(std::cmp::Ordering::Equal, |(x, y)| x.cmp(y))
    }

    #[test]
    fn compare_orders_by_the_first_differing_byte_at_every_size_and_position() {
        for &n in SIZES.iter().filter(|&&n| n <= 4099) {
            for offset in 0..4 {
                let a = pattern(n + offset);
                let a = &a[offset..];
                let same = unsafe { compare(a.as_ptr(), a.to_vec().as_ptr(), n) };
                assert_eq!(same, 0, "{n} equal bytes at +{offset}");
                for at in (0..n).filter(|i| *i < 40 || *i + 40 > n || i % 97 == 0) {
                    // Above and below at `at`, and a later byte changed the other way, which must not count.
                    for (here, later) in [(1u8, 0xff_u8), (0xff, 1)] {
                        let mut b = a.to_vec();
                        b[at] = b[at].wrapping_add(here);
                        if at + 1 < n {
                            b[n - 1] = b[n - 1].wrapping_add(later);
                        }
                        let got = unsafe { compare(a.as_ptr(), b.as_ptr(), n) };
                        assert_eq!(
                            got.cmp(&0),
                            expected_order(a, &b),
                            "{n} bytes at +{offset}, differing first at {at}: {:?} against {:?}",
                            a[at],
                            b[at]
                        );
                        let back = unsafe { compare(b.as_ptr(), a.as_ptr(), n) };
                        assert_eq!(back.cmp(&0), expected_order(&b, a), "{n} bytes, swapped");
                    }
                }
            }
        }
    }

    #[test]
    fn compare_reads_bytes_as_unsigned() {
        let (low, high) = ([0x01_u8; 20], [0x80_u8; 20]);
        for n in [1, 3, 4, 8, 15, 16, 20] {
            assert!(
                unsafe { compare(low.as_ptr(), high.as_ptr(), n) } < 0,
                "{n} bytes"
            );
            assert!(
                unsafe { compare(high.as_ptr(), low.as_ptr(), n) } > 0,
                "{n} bytes"
            );
        }
    }

    #[test]
    fn copying_onto_itself_changes_nothing() {
        for &n in SIZES {
            let mut buffer = pattern(n);
            let base = buffer.as_mut_ptr();
            unsafe { copy_overlapping(base, base, n) };
            assert_eq!(buffer, pattern(n), "{n} bytes onto themselves");
        }
    }
}
