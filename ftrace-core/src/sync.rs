//! The one place the ftrace-rs crates take their atomics from.
//!
//! Every atomic the lock-free code uses (the ops list, published hashes, the reader-count grace
//! period, the recursion word here; the breakpoint protocol's site statuses in ftrace-patch; the
//! ring buffer's commit words in ftrace-ringbuf; the tracers' switches) comes from this module.
//! Under `cfg(loom)` they are loom's, so the algorithms are model-checked exactly as written
//! (each crate's `tests/loom.rs`); otherwise they are `core::sync::atomic`'s. `cfg(loom)` is
//! set for the whole build (`RUSTFLAGS="--cfg loom"`), so every crate sees the same switch.
//!
//! Constructors that are `const fn` in core are not in loom, hence [`loom_const_fn!`]; loom's
//! [`UnsafeCell`] tracks accesses through closures, so the non-loom one offers the same
//! `with` / `with_mut` API.
//!
//! ```
//! use ftrace_core::sync::{AtomicU32, Ordering, loom_const_fn};
//!
//! struct Counter(AtomicU32);
//!
//! impl Counter {
//!     loom_const_fn! {
//!         /// A zero counter (`const` unless built under loom).
//!         pub fn new() -> Counter { Counter(AtomicU32::new(0)) }
//!     }
//! }
//!
//! static HITS: Counter = Counter::new();
//! HITS.0.fetch_add(1, Ordering::Relaxed);
//! assert_eq!(HITS.0.load(Ordering::Relaxed), 1);
//! ```

#[cfg(all(not(loom), target_has_atomic = "64"))]
pub use core::sync::atomic::AtomicU64;
#[cfg(not(loom))]
pub use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicUsize, fence};
#[cfg(loom)]
pub use loom::cell::UnsafeCell;
#[cfg(loom)]
pub use loom::sync::atomic::{
    AtomicBool, AtomicPtr, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, fence,
};

pub use core::sync::atomic::Ordering;

/// Tells the CPU (or loom's scheduler, so models with spinning threads terminate) that the
/// caller is spinning.
#[inline]
pub fn spin_loop() {
    #[cfg(not(loom))]
    core::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Declares a function that is `const fn` normally and a plain `fn` under loom (whose atomics
/// have no const constructors). The switch is the calling crate's `cfg(loom)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __sync_loom_const_fn {
    ($(#[$attr:meta])* $vis:vis fn $name:ident $(<$($lt:lifetime),*>)? ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $name $(<$($lt),*>)? ($($arg: $ty),*) -> $ret $body
        #[cfg(loom)]
        $(#[$attr])* $vis fn $name $(<$($lt),*>)? ($($arg: $ty),*) -> $ret $body
    };
}
#[doc(inline)]
pub use crate::__sync_loom_const_fn as loom_const_fn;

/// `core::cell::UnsafeCell` with loom's `with` / `with_mut` access API (loom's own under
/// `cfg(loom)`, which reports a read racing a write).
#[cfg(not(loom))]
#[derive(Debug)]
pub struct UnsafeCell<T>(core::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    /// A cell holding `v`.
    pub const fn new(v: T) -> Self {
        UnsafeCell(core::cell::UnsafeCell::new(v))
    }

    /// Runs `f` with a pointer for reading the value.
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Runs `f` with a pointer for writing the value.
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}
