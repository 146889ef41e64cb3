//! `memcpy` and `memmove` for the static (musl) x86_64 build.
//!
//! musl copies every size with `rep movsq` and finishes with a byte loop: a 20-byte copy pays the
//! string instruction's start-up and four loop turns. Most copies on the reconcile path are that
//! small (names, object references, statuses cloned), so the static build spent a quarter of a no-op
//! reconcile in `memcpy` where glibc's took 6 %. Here a copy of up to 64 bytes is a few overlapping
//! loads and stores, and a longer one is one `rep movsb`, which processors since 2012 run at full speed
//! (ERMS). uv tracks the same cost (astral-sh/uv#10610) and openvmm replaced musl's copy the same way.
//!
//! Both symbols are defined because musl's `memmove` jumps into its `memcpy`'s object file: linking
//! that file for `memmove` would define `memcpy` twice. No loop here copies memory, so the compiler
//! cannot turn one back into a call to `memcpy` (which would call itself).

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
