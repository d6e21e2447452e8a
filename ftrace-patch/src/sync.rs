//! The crate's one source of atomics: `core::sync::atomic`'s, or loom's under `cfg(loom)`, so
//! the breakpoint protocol's model (`tests/loom.rs`) checks the code as written.
//!
//! Invariant: the atomics are each patch site's status byte, written by the patching thread
//! and read by breakpoint handlers on other CPUs while a batch is armed (a full fence separates
//! publishing the statuses from writing the first breakpoint), and the pointer of the armed
//! [`BreakpointSlot`](crate::breakpoint::BreakpointSlot): its armed flag and the table it
//! holds (an [`UnsafeCell`] loom tracks, so a handler reading it while a disarm clears it is a
//! reported race).

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, fence};
#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, fence};

pub(crate) use core::sync::atomic::Ordering;

/// Tells the CPU (or loom's scheduler) that the caller is spinning.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Declares a function that is `const fn` normally and a plain `fn` under loom (whose atomics
/// have no const constructors).
macro_rules! loom_const_fn {
    ($(#[$attr:meta])* $vis:vis fn $name:ident () -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $name() -> $ret $body
        #[cfg(loom)]
        $(#[$attr])* $vis fn $name() -> $ret $body
    };
}
pub(crate) use loom_const_fn;

/// `core::cell::UnsafeCell` with loom's `with` / `with_mut` access API (loom's own under
/// `cfg(loom)`).
#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    pub(crate) const fn new(v: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }

    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
