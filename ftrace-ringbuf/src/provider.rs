//! Where pages come from: the [`PageProvider`] trait a backend implements.
//!
//! The ring buffer never touches a global allocator. Every sub-buffer page and every
//! bookkeeping array is asked of the provider when a buffer is created or resized, and given
//! back when it shrinks or drops; writers and readers never allocate. The Linux kernel module
//! implements the trait with `alloc_pages`/`kmalloc`, bare metal with its frame allocator, and
//! the `alloc` feature offers [`HeapPages`] on top of `alloc::alloc`.

use core::alloc::Layout;
use core::ptr::NonNull;

/// A source of zeroed memory blocks for ring-buffer pages and bookkeeping.
///
/// # Safety
/// `alloc` must return either `None` or a block of at least `layout.size()` bytes, aligned to
/// `layout.align()`, filled with zeros, valid for reads and writes from any thread and not
/// used by anything else until it is passed back to `dealloc` with the same layout.
pub unsafe trait PageProvider {
    /// Allocates a zeroed block (`None` when out of memory).
    fn alloc(&self, layout: Layout) -> Option<NonNull<u8>>;

    /// Returns a block.
    ///
    /// # Safety
    /// `ptr` came from `alloc` on this provider with this `layout` and is no longer used.
    unsafe fn dealloc(&self, ptr: NonNull<u8>, layout: Layout);
}

// SAFETY: forwards to `T`, which upholds the contract.
unsafe impl<T: PageProvider + ?Sized> PageProvider for &T {
    fn alloc(&self, layout: Layout) -> Option<NonNull<u8>> {
        (**self).alloc(layout)
    }
    unsafe fn dealloc(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller's contract is ours.
        unsafe { (**self).dealloc(ptr, layout) }
    }
}

/// A provider backed by the global allocator (`alloc` feature).
#[cfg(feature = "alloc")]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HeapPages;

#[cfg(feature = "alloc")]
// SAFETY: `alloc_zeroed` returns zeroed, aligned, exclusively owned blocks (or null).
unsafe impl PageProvider for HeapPages {
    fn alloc(&self, layout: Layout) -> Option<NonNull<u8>> {
        if layout.size() == 0 {
            return Some(NonNull::new(layout.align() as *mut u8).unwrap_or(NonNull::dangling()));
        }
        // SAFETY: the layout has a non-zero size.
        NonNull::new(unsafe { alloc::alloc::alloc_zeroed(layout) })
    }

    unsafe fn dealloc(&self, ptr: NonNull<u8>, layout: Layout) {
        if layout.size() != 0 {
            // SAFETY: the caller passes back a block from `alloc` with its layout.
            unsafe { alloc::alloc::dealloc(ptr.as_ptr(), layout) }
        }
    }
}
