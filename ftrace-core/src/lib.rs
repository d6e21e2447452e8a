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
//! - [`errno`]: the Linux error numbers tracefs answers with;
//! - [`ops`]: `struct ftrace_ops` (callback, flags, filter and notrace hashes);
//! - [`dispatch`]: the ops list and the entry point trampolines call (direct single-ops path,
//!   `ftrace_ops_list_func` otherwise);
//! - [`recursion`]: the per-context `trace_recursion` bits;
//! - [`filter`]: the ip hash and the `set_ftrace_filter` / `set_ftrace_notrace` /
//!   `set_graph_function` language, commands and read-back;
//! - [`pid`]: the `set_ftrace_pid` / `set_ftrace_notrace_pid` filter;
//! - [`reclaim`]: publication cells and grace periods (a reader-count one, and crossbeam-epoch
//!   with `std`);
//! - [`sync`]: the atomics every lock-free protocol of the crates uses (loom's under
//!   `cfg(loom)`), [`sync::loom_const_fn!`] and a loom-compatible `UnsafeCell`;
//! - [`static_key`]: reference-counted switches a call site tests with one relaxed load;
//!   `jump_label` (feature `jump-label`, x86_64): the same test as a patched 5-byte NOP;
//! - [`tracepoint`](mod@tracepoint): events declared in Rust ([`tracepoint!`]): record layout,
//!   `format` field table, id and a `trace_<name>(..)` call site from one declaration.
//!
//! The crate is `#![no_std]` and never allocates unless the `alloc` feature is on. It uses no
//! floating point and no 128-bit arithmetic, so it builds inside the Linux kernel.
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod dispatch;
pub mod entry;
pub mod errno;
pub mod event;
pub mod filter;
pub mod format;
#[cfg(all(feature = "jump-label", target_arch = "x86_64", not(loom)))]
pub mod jump_label;
pub mod ops;
pub mod pid;
pub mod platform;
pub mod reclaim;
pub mod recursion;
pub mod static_key;
pub mod symbols;
pub mod sync;
pub mod tracepoint;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

pub use dispatch::Dispatcher;
pub use errno::Errno;
pub use event::{EventId, TraceFlags};
pub use filter::FtraceHash;
pub use ops::{FtraceFunc, FtraceOps, FtraceRegs, OpsFlags};
