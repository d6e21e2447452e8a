//! The in-process ftrace-rs agent: preloaded into a traced program, it discovers the program's
//! call sites, patches them, and records into per-thread ring buffers.
//!
//! This crate is being built (see the project's userspace-tracing issue).
