//! The one place this crate takes its atomics from, and a tiny spin lock.
//!
//! Invariant: every atomic of the backend comes from here, so a model checker (or a different
//! memory model) can be swapped in at one place, as in the core crates. The spin lock is for
//! slow-path control state only (the shell, patching); the trace hot path never takes it.

pub use core::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence,
};

use core::cell::UnsafeCell;
use core::ops::{Deref, DerefMut};

/// A test-and-set spin lock around `T`.
pub struct SpinLock<T> {
    locked: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the lock hands out `&mut T` to one holder at a time, so sharing the lock between
// threads is sound whenever `T` itself may be sent between them.
unsafe impl<T: Send> Sync for SpinLock<T> {}

impl<T> SpinLock<T> {
    /// A new, unlocked lock.
    pub const fn new(value: T) -> Self {
        Self {
            locked: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// Spins until the lock is free, then takes it.
    pub fn lock(&self) -> SpinGuard<'_, T> {
        while self
            .locked
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        SpinGuard { lock: self }
    }
}

/// Holds a [`SpinLock`]; unlocks on drop.
pub struct SpinGuard<'a, T> {
    lock: &'a SpinLock<T>,
}

impl<T> Deref for SpinGuard<'_, T> {
    type Target = T;
    fn deref(&self) -> &T {
        // SAFETY: the guard exists only while this holder owns the lock.
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for SpinGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: the guard exists only while this holder owns the lock.
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for SpinGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.locked.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lock_gives_exclusive_access() {
        let l = SpinLock::new(1u32);
        {
            let mut g = l.lock();
            *g += 1;
            assert!(l.locked.load(Ordering::Relaxed));
        }
        assert!(!l.locked.load(Ordering::Relaxed));
        assert_eq!(*l.lock(), 2);
    }
}
