//! The Linux ftrace ring buffer, for Rust: lock-free, per CPU, in the kernel's page format.
//!
//! - [`page`]: the kernel's `buffer_data_page` format and a decoder for raw pages (a page the
//!   kernel wrote to `trace_pipe_raw` decodes with [`page::Page`]; a page this crate writes is
//!   a page trace-cmd reads).
//! - [`CpuBuffer`]: one CPU's buffer. Writers [`reserve`](CpuBuffer::reserve) and
//!   [`commit`](Reservation::commit): lock-free, wait-free on the fast path, no allocation,
//!   safe for strictly nested writers (interrupts, NMIs, signal handlers). Overwrite or
//!   producer/consumer [`Mode`]. Exact [`Stats`].
//! - Readers on any CPU, concurrent with writers: [`Consumer`] (events, `trace_pipe`; whole
//!   pages swapped out zero-copy, `trace_pipe_raw`), [`Iter`] (non-consuming, `trace`), and
//!   [`merge_next`] across CPUs by timestamp.
//! - [`RingBuffer`]: one [`CpuBuffer`] per CPU from one [`PageProvider`].
//! - [`slot`]: a fixed-slot ring (one `xadd` to reserve, one store to commit) for writers whose
//!   events are all small and fixed-size, e.g. a userspace agent's assembly fast paths.
//!
//! ```
//! # #[cfg(feature = "alloc")] {
//! use ftrace_ringbuf::{At, CpuBuffer, HeapPages};
//!
//! let buf = CpuBuffer::new(HeapPages, 4, 4096).unwrap();
//! let mut r = buf.reserve(24, &At(1_000)).unwrap();
//! r.data().copy_from_slice(&[7; 24]);
//! r.commit();
//!
//! let mut reader = buf.consumer();
//! let ev = reader.next().unwrap();
//! assert_eq!((ev.ts, ev.payload), (1_000, &[7u8; 24][..]));
//! # }
//! ```
//!
//! The crate is `#![no_std]`, uses no floating point and no 128-bit arithmetic, and takes every
//! byte of memory from a [`PageProvider`]; the `alloc` feature adds [`HeapPages`].
#![no_std]
#![warn(missing_docs)]

#[cfg(feature = "alloc")]
extern crate alloc;
#[cfg(test)]
extern crate std;

mod buffer;
mod cpu;
pub mod page;
mod provider;
mod reader;
pub mod slot;
mod sync;

#[cfg(test)]
mod tests;

pub use buffer::RingBuffer;
pub use cpu::{
    At, BufferError, ClockUnit, CpuBuffer, MAX_PAGE_SIZE, MIN_PAGE_SIZE, Mode, ReadPage,
    Reservation, Stats, ns_to_secs_usecs,
};
pub use page::{Event, Page, PageError};
#[cfg(feature = "alloc")]
pub use provider::HeapPages;
pub use provider::PageProvider;
pub use reader::{ConsumedEvent, Consumer, Iter, IterEvent, PeekTs, merge_next};
