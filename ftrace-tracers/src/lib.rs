//! ftrace's tracers (nop, function, function_graph, the function profiler) and the formatter
//! that prints their entries exactly as Linux's `trace` file does.
//!
//! This crate is being built (see the project's tracers issue).
#![no_std]
