//! The atomics this crate uses, from `loom` under `cfg(loom)` and `core` otherwise, so any
//! lock-free protocol here is model-checked as written.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
