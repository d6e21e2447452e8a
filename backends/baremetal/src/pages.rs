//! Memory for the ring buffer: a [`PageProvider`] over a static arena (the kernel has no frame
//! allocator; its pages are part of its image's `.bss`).
//!
//! Allocation bumps a pointer; giving back the most recent block rewinds it, any other block
//! stays used until reboot (the ring buffer allocates once at setup, and resizes are rare).
//! Invariant: every block handed out is zeroed and lies inside the arena.

use core::alloc::Layout;
use core::cell::UnsafeCell;
use core::ptr::NonNull;

use ftrace_ringbuf::PageProvider;

use crate::sync::{AtomicUsize, Ordering};

/// Size of the arena.
pub const ARENA_SIZE: usize = 2 << 20;

#[repr(C, align(4096))]
struct Arena(UnsafeCell<[u8; ARENA_SIZE]>);

/// The ring buffer's page provider.
pub struct StaticPages {
    arena: Arena,
    next: AtomicUsize,
}

// SAFETY: blocks are handed out by an atomic bump; no two users share one.
unsafe impl Sync for StaticPages {}

impl StaticPages {
    /// An empty arena.
    pub const fn new() -> Self {
        Self {
            arena: Arena(UnsafeCell::new([0; ARENA_SIZE])),
            next: AtomicUsize::new(0),
        }
    }

    /// Bytes in use.
    pub fn used(&self) -> usize {
        self.next.load(Ordering::Relaxed)
    }
}

impl Default for StaticPages {
    fn default() -> Self {
        Self::new()
    }
}

// SAFETY: blocks are distinct, aligned, inside the arena, and zeroed before they are returned.
unsafe impl PageProvider for StaticPages {
    fn alloc(&self, layout: Layout) -> Option<NonNull<u8>> {
        let base = self.arena.0.get() as usize;
        let mut cur = self.next.load(Ordering::Relaxed);
        loop {
            let start = (base + cur).next_multiple_of(layout.align()) - base;
            let end = start
                .checked_add(layout.size())
                .filter(|&e| e <= ARENA_SIZE)?;
            match self
                .next
                .compare_exchange_weak(cur, end, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => {
                    let p = (base + start) as *mut u8;
                    // SAFETY: [start, end) is inside the arena and now ours alone.
                    unsafe { p.write_bytes(0, layout.size()) };
                    return NonNull::new(p);
                }
                Err(now) => cur = now,
            }
        }
    }

    unsafe fn dealloc(&self, ptr: NonNull<u8>, layout: Layout) {
        let off = ptr.as_ptr() as usize - self.arena.0.get() as usize;
        // Only the most recent block can be given back.
        let _ = self.next.compare_exchange(
            off + layout.size(),
            off,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_aligned_zeroed_and_disjoint() {
        static P: StaticPages = StaticPages::new();
        let p = &P;
        let a = p.alloc(Layout::from_size_align(100, 8).unwrap()).unwrap();
        // SAFETY: a is a fresh 100-byte block.
        unsafe { a.as_ptr().write_bytes(0xAA, 100) };
        let l = Layout::from_size_align(4096, 4096).unwrap();
        let b = p.alloc(l).unwrap();
        assert_eq!(b.as_ptr() as usize % 4096, 0);
        assert!(b.as_ptr() as usize >= a.as_ptr() as usize + 100);
        // SAFETY: b is a fresh 4096-byte block.
        let bytes = unsafe { core::slice::from_raw_parts(b.as_ptr(), 4096) };
        assert!(bytes.iter().all(|&x| x == 0));
        // SAFETY: b is the last block, given back with its layout.
        unsafe { p.dealloc(b, l) };
        let c = p.alloc(l).unwrap();
        assert_eq!(c, b, "the last block is reused");
        assert!(
            p.alloc(Layout::from_size_align(ARENA_SIZE, 8).unwrap())
                .is_none()
        );
    }

    #[test]
    fn a_ring_buffer_lives_in_it() {
        static P: StaticPages = StaticPages::new();
        let p = &P;
        let rb = ftrace_ringbuf::RingBuffer::new(p, 2, 4, 4096).unwrap();
        assert!(
            rb.cpu(1)
                .unwrap()
                .write(&[1, 2, 3, 4], &ftrace_ringbuf::At(5))
        );
        assert_eq!(rb.entries_and_written(), (1, 1));
        assert!(p.used() >= 8 * 4096);
    }
}
