//! The crate's one source of atomics (the project's convention: switch here, and only here,
//! should a model checker ever need to see them).
//!
//! Invariant: the only atomic is each patch site's status byte, written by the patching thread
//! and read by breakpoint handlers on other CPUs while a batch is armed; a full fence separates
//! publishing the statuses from writing the first breakpoint.

pub(crate) use core::sync::atomic::{AtomicU8, Ordering, fence};
