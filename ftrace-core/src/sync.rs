//! The one place ftrace-core takes its atomics from.
//!
//! Every atomic the lock-free code (the ops list, published hashes, the reader-count grace
//! period, the recursion word) uses comes from here. Under `cfg(loom)` they are loom's, so the
//! algorithms are model-checked exactly as written (`tests/loom.rs`); otherwise they are
//! `core::sync::atomic`'s. Constructors that are `const fn` in core are not in loom, hence the
//! [`loom_const_fn!`] helper.

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, fence};
#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicUsize, fence};

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
    ($(#[$attr:meta])* $vis:vis fn $name:ident $(<$($lt:lifetime),*>)? ($($arg:ident : $ty:ty),* $(,)?) -> $ret:ty $body:block) => {
        #[cfg(not(loom))]
        $(#[$attr])* $vis const fn $name $(<$($lt),*>)? ($($arg: $ty),*) -> $ret $body
        #[cfg(loom)]
        $(#[$attr])* $vis fn $name $(<$($lt),*>)? ($($arg: $ty),*) -> $ret $body
    };
}
pub(crate) use loom_const_fn;
