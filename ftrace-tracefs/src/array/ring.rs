//! The instance's ring buffer: built from the platform's pages in the geometry the control
//! state holds, published whole, the old one freed after a grace period.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use ftrace_core::Errno;
use ftrace_core::reclaim::Published;
use ftrace_ringbuf::RingBuffer;
use ftrace_tracers::TraceOptions;

use super::{Control, Platform, TraceArray};

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// Builds the buffer if there is none yet.
    pub(super) fn ensure_buffer(&self, c: &mut Control) -> Result<(), Errno> {
        if self.buffer.is_empty() {
            self.rebuild_buffer(c, None)?;
        }
        Ok(())
    }

    /// Publishes a new, empty buffer of `c`'s geometry (`pages`: a new geometry to try
    /// first); the old one is freed after a grace period. On error nothing changes.
    pub(super) fn rebuild_buffer(
        &self,
        c: &mut Control,
        pages: Option<(Vec<usize>, usize)>,
    ) -> Result<(), Errno> {
        let (pages, subbuf) = pages.unwrap_or_else(|| (c.pages.clone(), c.subbuf));
        let rb = self.build_buffer(c, &pages, subbuf)?;
        // Held across the replacement: a `snapshot` trigger swaps the main ring with the
        // snapshot only while both have one geometry.
        let mut snapshot = self.snapshot.lock();
        self.resize_snapshot(&mut snapshot, c, &pages, subbuf)?;
        c.pages = pages;
        c.subbuf = subbuf;
        self.buffer
            .replace(Published::Owned(Box::new(rb)), self.reclaim());
        Ok(())
    }

    /// A new, empty ring of `pages` per CPU and `subbuf`-byte sub-buffers, recording as the
    /// instance does (`tracing_on`, `tracing_cpumask`).
    pub(super) fn build_buffer(
        &self,
        c: &Control,
        pages: &[usize],
        subbuf: usize,
    ) -> Result<RingBuffer<P::Pages>, Errno> {
        let max = pages.iter().copied().max().unwrap_or(2);
        let mut rb = RingBuffer::new(P::Pages::default(), pages.len(), max, subbuf)
            .map_err(|e| e.errno())?;
        for (cpu, &n) in pages.iter().enumerate() {
            if n != max {
                let buf = rb.cpu_mut(cpu).expect("one buffer per CPU");
                buf.resize(n).map_err(|e| e.errno())?;
            }
        }
        rb.set_record_on(self.tracing_on.load(Ordering::Relaxed));
        rb.set_mode(self.buffer_mode());
        for cpu in 0..pages.len() {
            rb.set_cpu_enabled(cpu, c.cpumask & (1 << cpu) != 0);
        }
        Ok(rb)
    }

    /// The ring's mode as the `overwrite` option says.
    pub(super) fn buffer_mode(&self) -> ftrace_ringbuf::Mode {
        let options = TraceOptions::from_bits_retain(self.options.load(Ordering::Relaxed));
        if options.contains(TraceOptions::OVERWRITE) {
            ftrace_ringbuf::Mode::Overwrite
        } else {
            ftrace_ringbuf::Mode::ProducerConsumer
        }
    }
}
