//! Binding the tracers to `ftrace-ringbuf`: where entries go, and reading them back.
//!
//! [`CpuBufferSink`] and [`RingBufferSink`] implement [`EntrySink`] by reserve, fill, commit on
//! one CPU's buffer (the current CPU's for the latter), stamping with the instance's clock.
//! With `alloc`, [`BufferedEvents`] copies a ring buffer's events out (non-consuming like
//! `trace`, or consuming like `trace_pipe`) into an [`EventSource`](crate::iter::EventSource)
//! the formatter reads. Invariant: a dropped reservation is reported as a dropped entry
//! (`false`), never as a written one; the ring buffer counts it.

use ftrace_core::platform::{CpuId, TraceClock};
use ftrace_ringbuf::{CpuBuffer, PageProvider, RingBuffer};

use crate::tracer::EntrySink;

/// Writes entries into one CPU's buffer.
pub struct CpuBufferSink<'a, P: PageProvider, C: TraceClock> {
    buf: &'a CpuBuffer<P>,
    clock: &'a C,
}

impl<'a, P: PageProvider, C: TraceClock> CpuBufferSink<'a, P, C> {
    /// A sink into `buf`, stamping with `clock`.
    pub fn new(buf: &'a CpuBuffer<P>, clock: &'a C) -> Self {
        CpuBufferSink { buf, clock }
    }
}

impl<P: PageProvider, C: TraceClock> EntrySink for CpuBufferSink<'_, P, C> {
    #[inline]
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        match self.buf.reserve(len, self.clock) {
            Some(mut r) => {
                let data = r.data();
                data.fill(0);
                fill(data);
                r.commit();
                true
            }
            None => false,
        }
    }
}

/// Writes entries into the current CPU's buffer of a [`RingBuffer`].
pub struct RingBufferSink<'a, P: PageProvider + Clone, C: TraceClock, I: CpuId + ?Sized> {
    rb: &'a RingBuffer<P>,
    clock: &'a C,
    cpu: &'a I,
}

impl<'a, P: PageProvider + Clone, C: TraceClock, I: CpuId + ?Sized> RingBufferSink<'a, P, C, I> {
    /// A sink into `rb`, on the CPU `cpu` reports, stamping with `clock`.
    pub fn new(rb: &'a RingBuffer<P>, clock: &'a C, cpu: &'a I) -> Self {
        RingBufferSink { rb, clock, cpu }
    }
}

impl<P: PageProvider + Clone, C: TraceClock, I: CpuId + ?Sized> EntrySink
    for RingBufferSink<'_, P, C, I>
{
    #[inline]
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        match self.rb.cpu(self.cpu.current_cpu() as usize) {
            Some(buf) => CpuBufferSink::new(buf, self.clock).write_entry(len, fill),
            None => false,
        }
    }
}

#[cfg(feature = "alloc")]
pub use owned::BufferedEvents;

#[cfg(feature = "alloc")]
mod owned {
    use alloc::vec;
    use alloc::vec::Vec;

    use ftrace_ringbuf::{PageProvider, RingBuffer};

    use crate::event::{EventRef, Missed};
    use crate::iter::EventLists;

    /// Events copied out of a ring buffer, per CPU, oldest first.
    #[derive(Clone, Debug, Default)]
    pub struct BufferedEvents {
        cpus: Vec<Vec<(u64, Vec<u8>, Missed)>>,
    }

    impl BufferedEvents {
        /// Copies every event without consuming (`trace`); events the writer overwrote under
        /// the reader are marked [`Missed::Unknown`].
        pub fn snapshot<P: PageProvider + Clone>(rb: &RingBuffer<P>) -> Self {
            let mut cpus = Vec::with_capacity(rb.nr_cpus());
            for buf in rb.cpus() {
                let mut scratch = vec![0u8; buf.page_size()];
                let mut it = buf.iter(&mut scratch);
                let mut evs = Vec::new();
                while let Some(ev) = it.next() {
                    let missed = if ev.missed {
                        Missed::Unknown
                    } else {
                        Missed::None
                    };
                    evs.push((ev.ts, ev.payload.to_vec(), missed));
                }
                cpus.push(evs);
            }
            BufferedEvents { cpus }
        }

        /// Consumes every event (`trace_pipe`), with the count of events lost before each.
        pub fn drain<P: PageProvider + Clone>(rb: &RingBuffer<P>) -> Self {
            Self::drain_cpu(rb, None)
        }

        /// Consumes every event of one CPU (`per_cpu/cpuN/trace_pipe`), or of all; the other
        /// CPUs' streams are left empty.
        pub fn drain_cpu<P: PageProvider + Clone>(rb: &RingBuffer<P>, cpu: Option<usize>) -> Self {
            let mut cpus = Vec::with_capacity(rb.nr_cpus());
            for (i, buf) in rb.cpus().iter().enumerate() {
                let mut evs = Vec::new();
                if cpu.is_none_or(|c| c == i) {
                    let mut c = buf.consumer();
                    while let Some(ev) = c.next() {
                        let missed = if ev.lost != 0 {
                            Missed::Count(ev.lost)
                        } else {
                            Missed::None
                        };
                        evs.push((ev.ts, ev.payload.to_vec(), missed));
                    }
                }
                cpus.push(evs);
            }
            BufferedEvents { cpus }
        }

        /// Number of events.
        pub fn len(&self) -> usize {
            self.cpus.iter().map(Vec::len).sum()
        }

        /// Whether there are none.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }

        /// The events as an event source for [`TraceIter`](crate::iter::TraceIter).
        pub fn lists(&self) -> EventLists<'_> {
            let mut l = EventLists::new(self.cpus.len() as u32);
            for (cpu, evs) in self.cpus.iter().enumerate() {
                for (ts, data, missed) in evs {
                    let mut ev = EventRef::new(cpu as u32, *ts, data);
                    ev.missed = *missed;
                    l.push(ev);
                }
            }
            l
        }
    }
}
