// SPDX-License-Identifier: GPL-2.0
//! The module's tracing instance: ftrace-ringbuf per-CPU buffers on kernel pages, the
//! ftrace-tracers function tracer writing into them, and the reader side that turns the
//! buffers into the `trace` text.
//!
//! Invariants: the ring buffer takes every byte from [`KernelPages`] (the page allocator, or
//! vmalloc for blocks larger than a page), only in process context (creation, drop, reads).
//! A CPU's buffer is written only on that CPU with preemption disabled, through
//! ftrace-tracers' `CpuBufferSink`.
//! [`Snapshot`] copies the buffers out with the ring buffer's non-consuming iterator, so the
//! formatter reads plain memory that nothing writes while it is printed.

use core::alloc::Layout;
use core::ptr::NonNull;

use ftrace_ringbuf::{CpuBuffer, PageProvider, RingBuffer};
use ftrace_tracers::event::{EventRef, Missed};
use ftrace_tracers::iter::EventSource;

use crate::shim;

/// Ring-buffer memory from the kernel: `get_zeroed_page()` for blocks up to a page,
/// `vzalloc()` above (both zeroed, page aligned).
#[derive(Clone, Copy, Default)]
pub(crate) struct KernelPages;

// SAFETY: the shim returns zeroed, page-aligned blocks of at least `size` bytes that nothing
// else uses (or NULL, also for alignments above a page), and frees them with the same size.
unsafe impl PageProvider for KernelPages {
    fn alloc(&self, layout: Layout) -> Option<NonNull<u8>> {
        // SAFETY: process context (the ring buffer allocates only when created or resized).
        NonNull::new(unsafe { shim::rfl_shim_alloc(layout.size(), layout.align()) }.cast())
    }

    unsafe fn dealloc(&self, ptr: NonNull<u8>, layout: Layout) {
        // SAFETY: the caller passes back a block from `alloc` with its layout.
        unsafe { shim::rfl_shim_free(ptr.as_ptr().cast(), layout.size()) }
    }
}

/// The module's ring buffer type.
pub(crate) type Buffer = RingBuffer<KernelPages>;
/// One CPU's buffer of [`Buffer`].
pub(crate) type CpuBuf = CpuBuffer<KernelPages>;

/// Per-event record in a snapshot: `ts: u64, len: u32, missed: u32`, then `len` payload bytes
/// padded to 8.
const REC_HDR: usize = 16;

/// A copy of every CPU buffer's events, in the layout above, in one vmalloc'd block.
pub(crate) struct Snapshot {
    mem: NonNull<u8>,
    size: usize,
    /// Bytes of scratch space (one ring-buffer page) before the records.
    scratch: usize,
    /// Per CPU: (start, end) of its records, offsets into the records area.
    ranges: [(usize, usize); crate::MAX_CPUS],
    nr_cpus: usize,
    /// Events that did not fit (never expected: the block is sized for full buffers).
    pub(crate) truncated: u64,
}

impl Snapshot {
    /// Copies `rb`'s events out. The caller keeps writers away (recording stopped, grace
    /// period over); the ring buffer's reader lock is taken per CPU by its iterator anyway.
    pub(crate) fn take(rb: &Buffer) -> Option<Snapshot> {
        let nr_cpus = rb.nr_cpus().min(crate::MAX_CPUS);
        let page = rb.cpu(0)?.page_size();
        // A buffer holds at most (nr_pages + 1) pages of events (the reader page included); an
        // event takes at least 8 bytes there and at most REC_HDR + its 8-aligned payload here,
        // i.e. at most 3 times as much: room enough for full buffers.
        let per_cpu: usize = rb
            .cpus()
            .iter()
            .map(|c| (c.nr_pages() + 1) * page * 3)
            .max()?;
        let size = page + per_cpu * nr_cpus;
        // SAFETY: process context (a read of the trace file).
        let mem = NonNull::new(unsafe { shim::rfl_shim_alloc(size, 8) }.cast::<u8>())?;
        let mut s = Snapshot {
            mem,
            size,
            scratch: page,
            ranges: [(0, 0); crate::MAX_CPUS],
            nr_cpus,
            truncated: 0,
        };
        // SAFETY: `mem` is `size` bytes we own; the first page is the iterator's scratch and
        // the rest the records, disjoint.
        let (scratch, records) = unsafe {
            (
                core::slice::from_raw_parts_mut(mem.as_ptr(), page),
                core::slice::from_raw_parts_mut(mem.as_ptr().add(page), size - page),
            )
        };
        let mut at = 0;
        for (cpu, buf) in rb.cpus().iter().enumerate().take(nr_cpus) {
            let start = at;
            let mut it = buf.iter(scratch);
            while let Some(ev) = it.next() {
                let need = REC_HDR + ev.payload.len().next_multiple_of(8);
                if at + need > records.len() {
                    s.truncated += 1;
                    continue;
                }
                records[at..at + 8].copy_from_slice(&ev.ts.to_ne_bytes());
                records[at + 8..at + 12].copy_from_slice(&(ev.payload.len() as u32).to_ne_bytes());
                records[at + 12..at + 16].copy_from_slice(&(ev.missed as u32).to_ne_bytes());
                records[at + REC_HDR..at + REC_HDR + ev.payload.len()].copy_from_slice(ev.payload);
                at += need;
            }
            s.ranges[cpu] = (start, at);
        }
        Some(s)
    }

    fn records(&self) -> &[u8] {
        // SAFETY: the records area (after the scratch page) is ours and no longer written.
        unsafe {
            core::slice::from_raw_parts(
                self.mem.as_ptr().add(self.scratch),
                self.size - self.scratch,
            )
        }
    }

    /// The events of `cpu`, oldest first.
    pub(crate) fn events(&self, cpu: usize) -> SnapshotEvents<'_> {
        let (at, end) = self.ranges.get(cpu).copied().unwrap_or((0, 0));
        SnapshotEvents {
            recs: self.records(),
            cpu: cpu as u32,
            at,
            end,
        }
    }

    /// A merge source over every CPU (for ftrace-tracers' `TraceIter`).
    pub(crate) fn source(&self) -> SnapshotSource<'_> {
        SnapshotSource {
            cpus: core::array::from_fn(|cpu| self.events(cpu)),
            nr_cpus: self.nr_cpus as u32,
        }
    }
}

/// One CPU's events in a [`Snapshot`].
#[derive(Clone, Copy)]
pub(crate) struct SnapshotEvents<'a> {
    recs: &'a [u8],
    cpu: u32,
    at: usize,
    end: usize,
}

impl<'a> SnapshotEvents<'a> {
    fn peek(&self) -> Option<(EventRef<'a>, usize)> {
        if self.at >= self.end {
            return None;
        }
        let r = &self.recs[self.at..self.end];
        let ts = u64::from_ne_bytes(r.get(0..8)?.try_into().ok()?);
        let len = u32::from_ne_bytes(r.get(8..12)?.try_into().ok()?) as usize;
        let missed = u32::from_ne_bytes(r.get(12..16)?.try_into().ok()?) != 0;
        let data = r.get(REC_HDR..REC_HDR + len)?;
        let mut ev = EventRef::new(self.cpu, ts, data);
        if missed {
            ev.missed = Missed::Unknown;
        }
        Some((ev, REC_HDR + len.next_multiple_of(8)))
    }
}

impl<'a> Iterator for SnapshotEvents<'a> {
    type Item = EventRef<'a>;

    fn next(&mut self) -> Option<EventRef<'a>> {
        let (ev, step) = self.peek()?;
        self.at += step;
        Some(ev)
    }
}

/// Every CPU's [`SnapshotEvents`], as an ftrace-tracers [`EventSource`].
pub(crate) struct SnapshotSource<'a> {
    cpus: [SnapshotEvents<'a>; crate::MAX_CPUS],
    nr_cpus: u32,
}

impl<'a> EventSource<'a> for SnapshotSource<'a> {
    fn nr_cpus(&self) -> u32 {
        self.nr_cpus
    }

    fn peek(&mut self, cpu: u32) -> Option<EventRef<'a>> {
        self.cpus.get(cpu as usize)?.peek().map(|(ev, _)| ev)
    }

    fn advance(&mut self, cpu: u32) {
        if let Some(c) = self.cpus.get_mut(cpu as usize) {
            c.next();
        }
    }
}

impl Drop for Snapshot {
    fn drop(&mut self) {
        // SAFETY: allocated in `take` with this size.
        unsafe { shim::rfl_shim_free(self.mem.as_ptr().cast(), self.size) }
    }
}
