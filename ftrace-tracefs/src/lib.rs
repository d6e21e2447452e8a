//! The tracefs file tree with the kernel's semantics: paths to read/write, errno, `error_log`.
//!
//! This crate is being built (see the project's tracefs issue).
#![no_std]
