//! The Linux ftrace ring buffer, for Rust: lock-free, per CPU, in the kernel's page format.
//!
//! Pages are the kernel's `buffer_data_page` (see [`page`]): a page this crate writes is a page
//! trace-cmd and libtraceevent read as the kernel's own, and a page the kernel wrote
//! (`trace_pipe_raw`) decodes with [`page::Page`].
#![no_std]
#![warn(missing_docs)]

#[cfg(test)]
extern crate std;

pub mod page;

pub use page::{Event, Page, PageError};
