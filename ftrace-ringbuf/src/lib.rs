//! The Linux ftrace ring buffer, for Rust: lock-free, per CPU, in the kernel's page format.
//!
//! This crate is being built (see the project's ring-buffer issue): the writer, readers and
//! accounting land here, with pages trace-cmd and libtraceevent read as the kernel's own.
#![no_std]
