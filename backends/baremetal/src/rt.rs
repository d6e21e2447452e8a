//! The freestanding runtime a kernel image built with the host target needs (feature `rt`):
//! the `mem*` functions and a bump heap.
//!
//! The host target's compiler_builtins leaves `memcpy`, `memmove`, `memset`, `memcmp` and `bcmp`
//! to libc, which a kernel does not link. They are written with `rep movsb`/`rep stosb` and
//! plain loops the compiler cannot turn back into calls to themselves. Invariant: this module
//! is only compiled into freestanding images (a hosted binary would lose libc's versions).

use core::alloc::{GlobalAlloc, Layout};
use core::arch::asm;
use core::cell::UnsafeCell;

use crate::sync::{AtomicUsize, Ordering};

/// `memcpy`.
///
/// # Safety
/// The C contract: valid, non-overlapping ranges of `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcpy(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    // SAFETY: the C contract; rep movsb copies exactly n bytes forward (DF is clear per ABI).
    unsafe {
        asm!("rep movsb", inout("rcx") n => _, inout("rdi") dst => _, inout("rsi") src => _,
             options(nostack, preserves_flags))
    };
    dst
}

/// `memmove`.
///
/// # Safety
/// The C contract: valid ranges of `n` bytes (they may overlap).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memmove(dst: *mut u8, src: *const u8, n: usize) -> *mut u8 {
    if (dst as usize) <= (src as usize) || (dst as usize) >= (src as usize).wrapping_add(n) {
        // SAFETY: a forward copy is correct when dst does not start inside src.
        return unsafe { memcpy(dst, src, n) };
    }
    // SAFETY: overlapping with dst above src: copy backwards (DF set, then cleared again).
    unsafe {
        asm!("std", "rep movsb", "cld",
             inout("rcx") n => _, inout("rdi") dst.add(n - 1) => _, inout("rsi") src.add(n - 1) => _,
             options(nostack))
    };
    dst
}

/// `memset`.
///
/// # Safety
/// The C contract: a valid range of `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memset(dst: *mut u8, c: i32, n: usize) -> *mut u8 {
    // SAFETY: the C contract; rep stosb writes exactly n bytes.
    unsafe {
        asm!("rep stosb", inout("rcx") n => _, inout("rdi") dst => _, in("al") c as u8,
             options(nostack, preserves_flags))
    };
    dst
}

/// `memcmp`.
///
/// # Safety
/// The C contract: valid ranges of `n` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn memcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    let mut i = 0;
    while i < n {
        // SAFETY: i < n, within the caller's ranges; volatile keeps this a loop.
        let (x, y) = unsafe {
            (
                core::ptr::read_volatile(a.add(i)),
                core::ptr::read_volatile(b.add(i)),
            )
        };
        if x != y {
            return x as i32 - y as i32;
        }
        i += 1;
    }
    0
}

/// `bcmp`.
///
/// # Safety
/// As [`memcmp`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn bcmp(a: *const u8, b: *const u8, n: usize) -> i32 {
    // SAFETY: same contract.
    unsafe { memcmp(a, b, n) }
}

/// Size of a [`BumpHeap`]'s arena.
pub const HEAP_SIZE: usize = 8 << 20;

/// A bump allocator over a static arena of [`HEAP_SIZE`] bytes: allocation is a pointer bump,
/// `dealloc` only reclaims the most recent block. Enough for a test kernel's boot-time tables.
///
/// Not generic on purpose: its code is compiled here, in an uninstrumented crate, rather than
/// instantiated inside the (instrumented) kernel crate.
pub struct BumpHeap {
    arena: UnsafeCell<[u8; HEAP_SIZE]>,
    next: AtomicUsize,
}

const N: usize = HEAP_SIZE;

// SAFETY: blocks are handed out by an atomic bump, so no two callers get overlapping memory.
unsafe impl Sync for BumpHeap {}

impl BumpHeap {
    /// An empty heap.
    pub const fn new() -> Self {
        Self {
            arena: UnsafeCell::new([0; N]),
            next: AtomicUsize::new(0),
        }
    }

    /// Bytes handed out so far.
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Relaxed)
    }
}

impl Default for BumpHeap {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: alloc returns distinct, suitably aligned blocks inside the arena or null.
unsafe impl GlobalAlloc for BumpHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let base = self.arena.get() as usize;
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let start = (base + cur).next_multiple_of(layout.align()) - base;
            let Some(end) = start.checked_add(layout.size()).filter(|&e| e <= N) else {
                return core::ptr::null_mut();
            };
            match self
                .next
                .compare_exchange_weak(cur, end, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return (base + start) as *mut u8,
                Err(now) => cur = now,
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let base = self.arena.get() as usize;
        let off = ptr as usize - base;
        // Only the last block can be given back; others stay until reboot.
        let _ = self.next.compare_exchange(
            off + layout.size(),
            off,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }
}

/// The precompiled `liballoc` of the host target is built with `panic=unwind` and its landing
/// pads call this; with `panic=abort` no unwind ever starts, so it is unreachable. Should it
/// ever run, it fails the run loudly rather than continue.
#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Resume() -> ! {
    crate::qemu::exit(crate::qemu::Verdict::Fail, "_Unwind_Resume called")
}
