//! The tracefs file tree with the kernel's semantics: paths to read/write, errno, `error_log`.
//!
//! A file system is the whole user interface of ftrace: `cat available_tracers`,
//! `echo function > current_tracer`, `cat trace`. This crate is that interface, independent of
//! how it is served (FUSE in userspace, a serial shell on bare metal). [`Tracefs`] is the tree:
//! list directories, open, read at an offset, write, release, `mkdir`/`rmdir` under
//! `instances/`, with per-open state (a `trace` reader keeps its snapshot iterator, `trace_pipe`
//! consumes, `>` vs `>>` open semantics for filter files).
//!
//! The tree owns what *is* the interface: file names and modes, the parsing of every write
//! ([`parse`]: `kstrtoul_from_user`, cpumasks), the read-back text of its own values
//! (`buffer_size_kb`'s `7 (expanded: 1408)`, `trace_clock`'s brackets, `trace_options`), the errno
//! of every rejected write, `error_log` ([`error_log`]), instances and `README`. What the tracing
//! machinery does (tracers, ring buffer, filters, call-site records) is asked through the traits
//! of [`backend`], which a backend binds to ftrace-tracers, ftrace-ringbuf, the ftrace-core
//! dispatcher and ftrace-patch; what only the server knows comes from [`Host`].
//!
//! [`array::TraceArray`] is the tracing machinery itself, generic over one small
//! [`array::Platform`] binding: a backend that uses it writes only its platform (see the
//! [porting guide](mod@array#porting-guide)).
//!
//! Trace events are registered by the host ([`Tracefs::register_event`]); [`events`] keeps
//! their per-instance state, [`event_filter`] and [`triggers`] parse what users write into
//! their `filter` and `trigger` files with the kernel's errors.
//!
//! Without the `alloc` feature only the allocation-free parsers are built.
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;

pub mod parse;

#[cfg(feature = "alloc")]
pub mod array;
#[cfg(feature = "alloc")]
pub mod backend;
#[cfg(feature = "alloc")]
pub mod dynevent;
#[cfg(feature = "alloc")]
pub mod error_log;
#[cfg(feature = "alloc")]
pub mod event_filter;
#[cfg(feature = "alloc")]
pub mod events;
#[cfg(feature = "alloc")]
pub mod filter_edit;
#[cfg(feature = "alloc")]
pub mod filters;
#[cfg(feature = "alloc")]
mod fs;
#[cfg(feature = "alloc")]
pub mod hist;
#[cfg(feature = "alloc")]
pub mod readme;
#[cfg(feature = "alloc")]
pub mod records;
#[cfg(feature = "alloc")]
pub mod tree;
#[cfg(feature = "alloc")]
pub mod trigger_run;
#[cfg(feature = "alloc")]
pub mod triggers;

#[cfg(feature = "alloc")]
pub use backend::{
    EventState, FilterEdit, FilterFile, FunctionRecords, Host, Param, PidFile, Reader,
    SnapshotCommand, TRACE_BUF_SIZE_DEFAULT, TextReader, TraceBackend, TracerOption,
    ring_buffer_pages,
};
#[cfg(feature = "alloc")]
pub use fs::{
    Fh, MAX_TRACER_SIZE, OpenFlags, PID_BUF_SIZE, PID_LIST_MAX, PID_MAX_DEFAULT, RAW_DATA_MAX_SIZE,
    SAVED_CMDLINES_DEFAULT, Stat, TRACE_MARKER_MAX_SIZE, Tracefs, WaitKey, WriteMode,
    marker_text_max, saved_cmdlines_capacity,
};
pub use ftrace_core::Errno;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
