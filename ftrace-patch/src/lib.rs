//! Dynamic ftrace's patching engine: call-site records, the NOP/CALL state machine, x86_64 and
//! aarch64 encoders, and SMP-safe live patch protocols.
//!
//! This crate is being built (see the project's patch-engine issue).
#![no_std]
