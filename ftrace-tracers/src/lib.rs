//! ftrace's tracers (nop, function, function_graph, the function profiler) and the formatter
//! that prints their entries exactly as Linux's `trace` file does.
//!
//! - [`tracer`]: the [`Tracer`](tracer::Tracer) trait and the registry (`available_tracers`,
//!   `current_tracer`); one module per tracer: [`nop`], [`function`], [`function_graph`],
//!   [`profiler`].
//! - [`output`]: Linux-identical text output (context prefix, every option variant,
//!   function_graph's call graph, headers) through `core::fmt::Write`.
//! - [`iter`]: per-CPU event streams merged by timestamp; [`event`]: one event and its decoding.
//! - [`ringbuf`]: the tracers' [`EntrySink`](tracer::EntrySink) over `ftrace-ringbuf`, and
//!   reading a ring buffer back for the formatter.
//! - [`options`]: `trace_options`; [`clock`]: `trace_clock`.
//! - [`trace_event`]: lines of registered trace events (`sched_switch`, ...) from their
//!   print formats.
//!
//! The crate is `#![no_std]`; the registry, the profiler's tables and the in-memory event lists
//! need the `alloc` feature. Formatting uses no floating point and no 128-bit arithmetic, so a
//! Linux kernel module can use it.
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod clock;
pub mod event;
pub mod function;
pub mod function_graph;
pub mod iter;
pub mod nop;
pub mod options;
pub mod output;
#[cfg(feature = "alloc")]
pub mod profiler;
pub mod ringbuf;
pub mod trace_event;
pub mod tracer;

pub use clock::ClockId;
pub use event::{Entry, EventRef, Missed};
pub use iter::{EventSource, TraceIter};
pub use options::{Options, TraceOptions, TracerOpt};
