//! Linux ftrace's core, for Rust kernels, firmware and programs.
//!
//! `ftrace-core` is the small, stable bottom of ftrace-rs. It holds what every other crate agrees
//! on and nothing more:
//!
//! - [`entry`]: the `#[repr(C)]` trace entries, byte-identical to Linux 6.12 on x86_64
//!   (`struct trace_entry`, `struct ftrace_entry`, the function-graph records, `print_entry`...),
//!   checked at compile time;
//! - [`event`]: the event ids (`common_type`) and the `TRACE_FLAG_*` bits;
//! - [`format`]: one field table per event, from which the `events/ftrace/<name>/format` files
//!   and `events/header_page` / `events/header_event` are generated;
//! - [`platform`]: the traits a backend implements (trace clock, current CPU, task context,
//!   deferred reclamation);
//! - [`symbols`]: the symbol-table trait (address to name, names to addresses);
//! - [`errno`]: the Linux error numbers tracefs answers with.
//!
//! The crate is `#![no_std]` and never allocates unless the `alloc` feature is on. It uses no
//! floating point and no 128-bit arithmetic, so it builds inside the Linux kernel.
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod entry;
pub mod errno;
pub mod event;
pub mod format;
pub mod platform;
pub mod symbols;

pub use errno::Errno;
pub use event::{EventId, TraceFlags};
