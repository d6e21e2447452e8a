//! The freestanding runtime a kernel image built with the host target needs (feature `rt`):
//! the `mem*` functions and the global allocator ([`KernelHeap`]).
//!
//! The host target's compiler_builtins leaves `memcpy`, `memmove`, `memset`, `memcmp` and `bcmp`
//! to libc, which a kernel does not link. They are written with `rep movsb`/`rep stosb` and
//! plain loops the compiler cannot turn back into calls to themselves. Invariant: this module
//! is only compiled into freestanding images (a hosted binary would lose libc's versions).

use core::alloc::{GlobalAlloc, Layout};
use core::arch::asm;
use core::cell::UnsafeCell;
use core::ptr::NonNull;

use linked_list_allocator::Heap;

use crate::cpu::this_cpu_if_ready;
use crate::port::{irq_restore, irq_save};
use crate::sync::{AtomicBool, AtomicUsize, Ordering, SpinLock};

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

/// Size of the [`KernelHeap`]'s arena.
pub const HEAP_SIZE: usize = 8 << 20;

/// The kernel's global allocator: `linked_list_allocator`'s first-fit [`Heap`] over a static
/// arena of [`HEAP_SIZE`] bytes, behind the backend's spin lock with interrupts off while it
/// is held. Freed blocks go back on the free list (merged with their neighbours), so a long
/// shell session reuses memory instead of running the arena dry.
///
/// Invariant: only control paths (boot, the shell, patching) allocate. The trace hooks and
/// exception/interrupt handlers never do; an allocation made from one is counted
/// ([`KernelHeap::hook_allocs`]) so a run can show none happened. Interrupts are off while
/// the lock is held, so an interrupt on the same CPU can never find it taken.
///
/// Not generic on purpose: its code is compiled here, in an uninstrumented crate, rather than
/// instantiated inside the (instrumented) kernel crate.
///
/// [`Heap`]: linked_list_allocator::Heap
pub struct KernelHeap {
    arena: UnsafeCell<[u8; HEAP_SIZE]>,
    heap: SpinLock<Heap>,
    ready: AtomicBool,
    hook_allocs: AtomicUsize,
}

// SAFETY: the arena is only reached through `heap`, which the spin lock serialises; the arena
// pointer handed to `Heap::init` is the only other use, made once under that lock.
unsafe impl Sync for KernelHeap {}

impl KernelHeap {
    /// An empty heap; the arena is handed to the allocator on first use.
    pub const fn new() -> Self {
        Self {
            arena: UnsafeCell::new([0; HEAP_SIZE]),
            heap: SpinLock::new(Heap::empty()),
            ready: AtomicBool::new(false),
            hook_allocs: AtomicUsize::new(0),
        }
    }

    /// Runs `f` on the initialised heap, holding the lock with interrupts off.
    fn with<R>(&self, f: impl FnOnce(&mut Heap) -> R) -> R {
        let flags = irq_save();
        let r = {
            let mut heap = self.heap.lock();
            if !self.ready.load(Ordering::Relaxed) {
                // SAFETY: the arena is a static block of HEAP_SIZE bytes owned by this heap
                // alone; `ready` (checked and set under the lock) makes this the only init.
                unsafe { heap.init(self.arena.get().cast::<u8>(), HEAP_SIZE) };
                self.ready.store(true, Ordering::Relaxed);
            }
            f(&mut heap)
        };
        irq_restore(flags);
        r
    }

    /// Bytes in live allocations (including the allocator's rounding of each block).
    pub fn used(&self) -> usize {
        self.with(|h| h.used())
    }

    /// Allocations made from a trace hook or an exception/interrupt handler: none is
    /// expected.
    pub fn hook_allocs(&self) -> usize {
        self.hook_allocs.load(Ordering::Relaxed)
    }
}

impl Default for KernelHeap {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: `Heap` hands out distinct, suitably aligned blocks inside the arena (or fails, and
// null is returned); every access to it is serialised by the lock.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if this_cpu_if_ready().is_some_and(|c| c.in_trace_hook() || c.in_exception()) {
            self.hook_allocs.fetch_add(1, Ordering::Relaxed);
        }
        self.with(|h| h.allocate_first_fit(layout))
            .map_or(core::ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        let Some(ptr) = NonNull::new(ptr) else {
            return;
        };
        // SAFETY: the GlobalAlloc contract: `ptr` came from `alloc` with this `layout`.
        self.with(|h| unsafe { h.deallocate(ptr, layout) });
    }
}

/// The precompiled `liballoc` of the host target is built with `panic=unwind` and its landing
/// pads call this; with `panic=abort` no unwind ever starts, so it is unreachable. Should it
/// ever run, it fails the run loudly rather than continue.
#[unsafe(no_mangle)]
pub extern "C" fn _Unwind_Resume() -> ! {
    crate::qemu::exit(crate::qemu::Verdict::Fail, "_Unwind_Resume called")
}
