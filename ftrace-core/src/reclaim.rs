//! Deferred reclamation: publishing a pointer to readers that never lock, and freeing what it
//! replaced only after a grace period.
//!
//! The [`Reclaim`] trait (in [`platform`](crate::platform)) says how a
//! platform waits for readers. This module has:
//!
//! - [`Published`] and [`RcuCell`], the one publication cell of the crates: a pointer that is either
//!   `&'static` (never freed: the no-`alloc` case, or data a backend keeps forever) or an owned
//!   `Box` (freed through [`Reclaim::defer`]);
//! - [`ReaderCount`], a `no_std`, no-`alloc` grace period: two reader counters and a phase bit
//!   (the shape of the kernel's SRCU). It is what bare-metal backends can use as is, and what
//!   the loom model checks the ops list with;
//! - `EpochReclaim` (feature `std`), crossbeam-epoch's global collector: the default for
//!   userspace.
//!
//! Invariant: a pointer removed from a cell is freed only after every read-side guard that was
//! live when it was removed has been dropped.

use crate::platform::Reclaim;
use crate::sync::{AtomicBool, AtomicPtr, AtomicUsize, Ordering, fence, loom_const_fn, spin_loop};
use core::marker::PhantomData;
use core::ptr;

#[cfg(feature = "alloc")]
use alloc::boxed::Box;

/// A value to publish through a cell that readers load without locking.
pub enum Published<T: 'static> {
    /// Nothing (an empty hash, no pid list).
    None,
    /// Data that outlives the cell and is never freed by it.
    Static(&'static T),
    /// Heap data the cell owns; freed after a grace period once replaced.
    #[cfg(feature = "alloc")]
    Owned(Box<T>),
}

impl<T: 'static> core::fmt::Debug for Published<T> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Published::None => "None",
            Published::Static(_) => "Static",
            #[cfg(feature = "alloc")]
            Published::Owned(_) => "Owned",
        })
    }
}

/// A pointer published to lock-free readers (the kernel's `rcu_assign_pointer` /
/// `rcu_dereference` pair plus `call_rcu` of what it replaced). Bit 0 tags owned (boxed)
/// values. `const`-constructible ([`RcuCell::empty`]) so it can sit in a `static`.
pub struct RcuCell<T> {
    ptr: AtomicPtr<T>,
    _owns: PhantomData<T>,
}

const OWNED: usize = 1;

impl<T> RcuCell<T> {
    loom_const_fn! {
        /// A cell with nothing published.
        pub fn empty() -> RcuCell<T> {
            RcuCell {
                ptr: AtomicPtr::new(ptr::null_mut()),
                _owns: PhantomData,
            }
        }
    }

    /// Whether nothing is published (no dereference: safe without a guard).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.ptr.load(Ordering::Relaxed).is_null()
    }

    /// The published value.
    ///
    /// # Safety
    /// The caller is inside a read-side critical section of the [`Reclaim`] used to replace
    /// this cell, and does not use the reference after leaving it.
    #[inline]
    pub unsafe fn load<'g>(&self) -> Option<&'g T> {
        let p = self.ptr.load(Ordering::Acquire);
        // SAFETY: a non-null untagged pointer was published from a live `&'static T` or
        // `Box<T>`; the caller's guard keeps an owned one from being freed.
        unsafe { p.map_addr(|a| a & !OWNED).as_ref() }
    }

    /// Publishes `new` and retires the old value through `reclaim` (freed after a grace
    /// period if it was owned).
    pub fn replace<R: Reclaim + ?Sized>(&self, new: Published<T>, reclaim: &R) {
        self.swap(new).retire(reclaim);
    }

    /// Publishes `new`; the old value must then be [retired](Retired::retire).
    pub fn swap(&self, new: Published<T>) -> Retired<T> {
        const { assert!(core::mem::align_of::<T>() >= 2) };
        let raw = match new {
            Published::None => ptr::null_mut(),
            Published::Static(r) => ptr::from_ref(r).cast_mut(),
            #[cfg(feature = "alloc")]
            Published::Owned(b) => Box::into_raw(b).map_addr(|a| a | OWNED),
        };
        Retired(self.ptr.swap(raw, Ordering::AcqRel))
    }

    /// Publishes again a value swapped out before (of this cell or of another cell read
    /// under the same [`Reclaim`]), returning the value it replaces. No grace period is
    /// needed: a retired value is freed only by consuming its [`Retired`], which this does
    /// without freeing; the value is freed after a grace period that starts when it is
    /// swapped out for the last time. What a tracepoint uses to exchange two buffers it may
    /// not wait for (a `snapshot` trigger swapping the main and the snapshot buffer).
    pub fn swap_retired(&self, value: Retired<T>) -> Retired<T> {
        Retired(self.ptr.swap(value.0, Ordering::AcqRel))
    }
}

/// A value swapped out of a cell, still visible to readers that loaded it before.
#[must_use = "an owned value leaks unless retired"]
pub struct Retired<T>(*mut T);

// SAFETY: a `Retired<T>` is a `Box<T>` (or a `&'static T`) that readers on other threads may
// still share: sending it needs what sending a `Box<T>` needs, plus `Sync` for those readers.
unsafe impl<T: Send + Sync> Send for Retired<T> {}
// SAFETY: `&Retired<T>` only gives `&T` ([`Retired::get`]).
unsafe impl<T: Sync> Sync for Retired<T> {}

impl<T> Retired<T> {
    /// The swapped-out value (`None`: nothing was published). It stays alive while this
    /// `Retired` is held: only consuming it ([`retire`](Retired::retire),
    /// [`into_owned`](Retired::into_owned)) frees it. Readers that loaded it before the swap
    /// may still use it too, so it is shared, never exclusive.
    pub fn get(&self) -> Option<&T> {
        // SAFETY: a non-null pointer was published from a live `&'static T` or `Box<T>`, and
        // an owned one is freed only through `self`, which this borrow keeps alive.
        unsafe { self.0.map_addr(|a| a & !OWNED).as_ref() }
    }

    /// Takes an owned value back at once, for a holder that knows no reader can still reach
    /// it (the structure that kept it is being dropped after its own grace period). `None`
    /// if the value was not owned.
    ///
    /// # Safety
    /// Every read-side critical section that could have loaded the value has ended.
    #[cfg(feature = "alloc")]
    pub unsafe fn into_owned_unshared(self) -> Option<Box<T>> {
        let old = self.0;
        if old.addr() & OWNED == 0 {
            return None;
        }
        // SAFETY: `old` came from `Box::into_raw` (tagged owned); the caller guarantees no
        // reader holds it.
        Some(unsafe { Box::from_raw(old.map_addr(|a| a & !OWNED)) })
    }

    /// Takes an owned value back after a grace period (`synchronize_rcu()`, then the caller
    /// owns it alone: every reader that could have loaded it has left its section), for
    /// values that are swapped out to be kept rather than freed (the snapshot buffer's
    /// swap). `None` if the swapped-out value was not owned (nothing, or static data).
    /// Must not be called from a read-side critical section.
    #[cfg(feature = "alloc")]
    pub fn into_owned<R: Reclaim + ?Sized>(self, reclaim: &R) -> Option<Box<T>> {
        let old = self.0;
        if old.addr() & OWNED == 0 {
            return None;
        }
        reclaim.synchronize();
        // SAFETY: `old` came from `Box::into_raw` (tagged owned), it was swapped out so no new
        // reader reaches it, and the grace period above ended every section that loaded it.
        Some(unsafe { Box::from_raw(old.map_addr(|a| a & !OWNED)) })
    }

    /// Hands an owned value to `reclaim` to free after a grace period.
    pub fn retire<R: Reclaim + ?Sized>(self, reclaim: &R) {
        let old = self.0;
        if old.addr() & OWNED != 0 {
            // SAFETY: `old` is unreachable for new readers (swapped out), it came from
            // `Box::into_raw`, and `free_box::<T>` frees exactly that, once.
            unsafe { reclaim.defer(old.map_addr(|a| a & !OWNED).cast(), free_box::<T>) };
        }
    }
}

impl<T> Drop for RcuCell<T> {
    fn drop(&mut self) {
        #[cfg(feature = "alloc")]
        {
            let p = self.ptr.load(Ordering::Relaxed);
            if p.addr() & OWNED != 0 {
                // SAFETY: the cell is being dropped, so no reader can reach it any more (the
                // owner unregistered it and waited a grace period), and the pointer came from
                // `Box::into_raw`.
                unsafe { free_box::<T>(p.map_addr(|a| a & !OWNED).cast()) };
            }
        }
    }
}

/// Frees a `Box<T>` given as `*mut ()`.
///
/// # Safety
/// `p` came from `Box::<T>::into_raw` and is freed once.
unsafe fn free_box<T>(p: *mut ()) {
    #[cfg(feature = "alloc")]
    // SAFETY: per the contract above.
    drop(unsafe { Box::from_raw(p.cast::<T>()) });
    #[cfg(not(feature = "alloc"))]
    let _ = p;
}

/// A grace period made of two reader counters and a phase bit (an SRCU in miniature).
///
/// [`pin`](Reclaim::pin) increments the counter of the current phase and issues a full fence;
/// [`synchronize`](Reclaim::synchronize) issues a full fence, then twice flips the phase and
/// waits for the counter of the old phase to drain. A reader whose fence came before the
/// writer's is seen in one of the counters and waited for; a reader whose fence came after
/// sees the writer's update. Flipping the phase keeps new readers from starving the writer.
///
/// [`defer`](Reclaim::defer) waits a grace period in place and then frees: there is no
/// background reclaimer. `no_std`, no `alloc`, const-constructible; pinning costs one atomic
/// increment and a fence on a shared counter, so it suits few CPUs or rare control paths.
#[derive(Debug)]
pub struct ReaderCount {
    phase: AtomicUsize,
    readers: [AtomicUsize; 2],
    writer: AtomicBool,
}

impl Default for ReaderCount {
    fn default() -> Self {
        Self::new()
    }
}

impl ReaderCount {
    loom_const_fn! {
        /// A grace-period domain with no reader.
        pub fn new() -> ReaderCount {
            ReaderCount {
                phase: AtomicUsize::new(0),
                readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
                writer: AtomicBool::new(false),
            }
        }
    }

    fn wait_drained(&self, idx: usize) {
        while self.readers[idx].load(Ordering::Acquire) != 0 {
            spin_loop();
        }
    }
}

/// A read-side critical section of [`ReaderCount`].
#[derive(Debug)]
pub struct ReaderCountGuard<'a> {
    domain: &'a ReaderCount,
    idx: usize,
}

impl Drop for ReaderCountGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.domain.readers[self.idx].fetch_sub(1, Ordering::Release);
    }
}

// SAFETY: `synchronize` returns only after every guard live at its start is dropped (see the
// type's docs), and `defer` frees only after such a `synchronize`.
unsafe impl Reclaim for ReaderCount {
    type Guard<'a> = ReaderCountGuard<'a>;

    #[inline]
    fn pin(&self) -> ReaderCountGuard<'_> {
        let idx = self.phase.load(Ordering::Relaxed) & 1;
        self.readers[idx].fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        ReaderCountGuard { domain: self, idx }
    }

    unsafe fn defer(&self, ptr: *mut (), free: unsafe fn(*mut ())) {
        self.synchronize();
        // SAFETY: the caller made `ptr` unreachable for new readers, and the grace period
        // above has let every older reader go.
        unsafe { free(ptr) };
    }

    fn synchronize(&self) {
        while self
            .writer
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
        fence(Ordering::SeqCst);
        for _ in 0..2 {
            let old = self.phase.load(Ordering::Relaxed) & 1;
            self.phase.store(old ^ 1, Ordering::Relaxed);
            self.wait_drained(old);
        }
        self.writer.store(false, Ordering::Release);
    }
}

#[cfg(feature = "std")]
pub use epoch::EpochReclaim;

#[cfg(feature = "std")]
mod epoch {
    extern crate std;

    use crate::platform::Reclaim;
    use alloc::sync::Arc;
    use core::sync::atomic::{AtomicBool, Ordering};

    /// crossbeam-epoch's global collector as a [`Reclaim`]: the default for userspace.
    ///
    /// A zero-sized, const-constructible handle (`EpochReclaim` is a unit struct). Pinning is
    /// crossbeam's: a thread-local access plus, for the outermost guard, a full fence.
    #[derive(Clone, Copy, Debug, Default)]
    pub struct EpochReclaim;

    struct SendPtr(*mut ());
    // SAFETY: the `Reclaim::defer` contract lets `free` run on any thread.
    unsafe impl Send for SendPtr {}

    // SAFETY: crossbeam-epoch runs a deferred function only after every guard pinned before
    // the `defer` call is dropped; `synchronize` waits until such a function has run.
    unsafe impl Reclaim for EpochReclaim {
        type Guard<'a> = crossbeam_epoch::Guard;

        #[inline]
        fn pin(&self) -> crossbeam_epoch::Guard {
            crossbeam_epoch::pin()
        }

        unsafe fn defer(&self, ptr: *mut (), free: unsafe fn(*mut ())) {
            let guard = crossbeam_epoch::pin();
            let p = SendPtr(ptr);
            // SAFETY: `ptr` is unreachable for new readers (caller's contract), so running
            // `free` once the epoch has moved past every current reader is sound.
            unsafe {
                guard.defer_unchecked(move || {
                    let p = p;
                    free(p.0)
                })
            };
            guard.flush();
        }

        fn synchronize(&self) {
            let done = Arc::new(AtomicBool::new(false));
            {
                let done = done.clone();
                let guard = crossbeam_epoch::pin();
                guard.defer(move || done.store(true, Ordering::Release));
                guard.flush();
            }
            while !done.load(Ordering::Acquire) {
                crossbeam_epoch::pin().flush();
                std::thread::yield_now();
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn reader_count_drains() {
        let d = ReaderCount::new();
        {
            let _g = d.pin();
            let _h = d.pin();
        }
        d.synchronize();
        assert_eq!(d.readers[0].load(Ordering::Relaxed), 0);
        assert_eq!(d.readers[1].load(Ordering::Relaxed), 0);
    }

    #[cfg(feature = "std")]
    #[test]
    fn epoch_defer_frees_after_synchronize() {
        extern crate std;
        use alloc::boxed::Box;
        use core::sync::atomic::AtomicUsize as StdUsize;
        static FREED: StdUsize = StdUsize::new(0);
        unsafe fn free(p: *mut ()) {
            // SAFETY: `p` came from `Box::into_raw` below.
            drop(unsafe { Box::from_raw(p.cast::<u64>()) });
            FREED.fetch_add(1, core::sync::atomic::Ordering::SeqCst);
        }
        let cell = RcuCell::<u64>::empty();
        cell.replace(Published::Owned(Box::new(7)), &EpochReclaim);
        let g = EpochReclaim.pin();
        // SAFETY: a guard is held while the reference is used.
        let v = unsafe { cell.load() }.copied();
        assert_eq!(v, Some(7));
        drop(g);
        let p = Box::into_raw(Box::new(1u64)).cast::<()>();
        // SAFETY: `p` is not reachable by any reader.
        unsafe { EpochReclaim.defer(p, free) };
        EpochReclaim.synchronize();
        // A deferred function runs once the epoch advanced past it; synchronize waited for a
        // later one, and crossbeam runs its bag in order.
        for _ in 0..100 {
            if FREED.load(core::sync::atomic::Ordering::SeqCst) == 1 {
                break;
            }
            EpochReclaim.synchronize();
        }
        assert_eq!(FREED.load(core::sync::atomic::Ordering::SeqCst), 1);
        cell.replace(Published::None, &EpochReclaim);
        assert!(cell.is_empty());
    }
}
