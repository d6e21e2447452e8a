//! The trace iterator: per-CPU event streams merged by timestamp.
//!
//! A reader (the `trace` file, `trace_pipe`, an offline report) sees one stream per CPU through
//! [`EventSource`]; [`TraceIter`] merges them the way the kernel's `__find_next_entry` does.
//! Invariant: the next event is the one with the smallest timestamp; on equal timestamps the
//! lowest CPU wins (the kernel compares with a strict `<` while walking CPUs upwards). A
//! per-CPU file (`per_cpu/cpuN/trace`) looks at that CPU's stream only.

use crate::event::EventRef;

/// Per-CPU event streams.
pub trait EventSource<'a> {
    /// How many CPU streams there are (CPU ids `0..nr_cpus()`).
    fn nr_cpus(&self) -> u32;
    /// The next event of `cpu`'s stream, without consuming it.
    fn peek(&mut self, cpu: u32) -> Option<EventRef<'a>>;
    /// Consumes the next event of `cpu`'s stream.
    fn advance(&mut self, cpu: u32);
}

/// Merges the streams of an [`EventSource`], all CPUs or one.
pub struct TraceIter<'s, 'a> {
    src: &'s mut dyn EventSource<'a>,
    cpu_file: Option<u32>,
    idx: u64,
}

impl<'s, 'a> TraceIter<'s, 'a> {
    /// Iterates every CPU (`trace`), or only `cpu_file` (`per_cpu/cpuN/trace`).
    pub fn new(src: &'s mut dyn EventSource<'a>, cpu_file: Option<u32>) -> Self {
        TraceIter {
            src,
            cpu_file,
            idx: 0,
        }
    }

    /// The CPU this iterator is restricted to, if any.
    pub fn cpu_file(&self) -> Option<u32> {
        self.cpu_file
    }

    /// The number of events returned by [`TraceIter::next_event`] so far.
    pub fn index(&self) -> u64 {
        self.idx
    }

    /// The next event in merged order, without consuming it.
    pub fn peek_next(&mut self) -> Option<EventRef<'a>> {
        if let Some(cpu) = self.cpu_file {
            return self.src.peek(cpu);
        }
        let mut best: Option<EventRef<'a>> = None;
        for cpu in 0..self.src.nr_cpus() {
            if let Some(ev) = self.src.peek(cpu) {
                if best.is_none_or(|b| ev.ts < b.ts) {
                    best = Some(ev);
                }
            }
        }
        best
    }

    /// Consumes and returns the next event in merged order.
    pub fn next_event(&mut self) -> Option<EventRef<'a>> {
        let ev = self.peek_next()?;
        self.src.advance(ev.cpu);
        self.idx += 1;
        Some(ev)
    }

    /// The next event of one CPU's stream, without consuming it (function_graph's leaf check).
    pub fn peek_cpu(&mut self, cpu: u32) -> Option<EventRef<'a>> {
        self.src.peek(cpu)
    }

    /// Consumes the next event of one CPU's stream.
    pub fn advance_cpu(&mut self, cpu: u32) {
        self.src.advance(cpu);
    }

    /// Whether no event is left (in the streams this iterator looks at).
    pub fn is_empty(&mut self) -> bool {
        self.peek_next().is_none()
    }
}

#[cfg(feature = "alloc")]
pub use lists::EventLists;

#[cfg(feature = "alloc")]
mod lists {
    use alloc::vec::Vec;

    use super::EventSource;
    use crate::event::EventRef;

    /// An [`EventSource`] over per-CPU lists of events held in memory (decoded pages, tests).
    #[derive(Clone, Debug, Default)]
    pub struct EventLists<'a> {
        cpus: Vec<Vec<EventRef<'a>>>,
        pos: Vec<usize>,
    }

    impl<'a> EventLists<'a> {
        /// `nr_cpus` empty streams.
        pub fn new(nr_cpus: u32) -> Self {
            EventLists {
                cpus: (0..nr_cpus).map(|_| Vec::new()).collect(),
                pos: (0..nr_cpus).map(|_| 0).collect(),
            }
        }

        /// Appends an event to its CPU's stream (growing the CPU count if needed). Events of
        /// one CPU must be pushed in timestamp order.
        pub fn push(&mut self, ev: EventRef<'a>) {
            let cpu = ev.cpu as usize;
            while self.cpus.len() <= cpu {
                self.cpus.push(Vec::new());
                self.pos.push(0);
            }
            self.cpus[cpu].push(ev);
        }

        /// Rewinds every stream to its start.
        pub fn rewind(&mut self) {
            self.pos.iter_mut().for_each(|p| *p = 0);
        }

        /// How many events of `cpu`'s stream have been consumed (a reader that refills its
        /// lists drops these; 0 for a CPU without a stream).
        pub fn consumed(&self, cpu: u32) -> usize {
            self.pos.get(cpu as usize).copied().unwrap_or(0)
        }

        /// The events of one CPU.
        pub fn cpu_events(&self, cpu: u32) -> &[EventRef<'a>] {
            self.cpus.get(cpu as usize).map_or(&[], |v| v.as_slice())
        }

        /// Total number of events.
        pub fn len(&self) -> usize {
            self.cpus.iter().map(Vec::len).sum()
        }

        /// Whether there are no events at all.
        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    impl<'a> EventSource<'a> for EventLists<'a> {
        fn nr_cpus(&self) -> u32 {
            self.cpus.len() as u32
        }
        fn peek(&mut self, cpu: u32) -> Option<EventRef<'a>> {
            let c = cpu as usize;
            self.cpus.get(c)?.get(self.pos[c]).copied()
        }
        fn advance(&mut self, cpu: u32) {
            if let Some(p) = self.pos.get_mut(cpu as usize) {
                *p += 1;
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::iter::TraceIter;

        #[test]
        fn merges_by_timestamp_lowest_cpu_first_on_ties() {
            let d = [0u8; 8];
            let mut l = EventLists::new(3);
            for (cpu, ts) in [(0, 5), (0, 9), (1, 5), (1, 7), (2, 1)] {
                l.push(EventRef::new(cpu, ts, &d));
            }
            let mut it = TraceIter::new(&mut l, None);
            let mut got = Vec::new();
            while let Some(ev) = it.next_event() {
                got.push((ev.cpu, ev.ts));
            }
            assert_eq!(got, [(2, 1), (0, 5), (1, 5), (1, 7), (0, 9)]);
            l.rewind();
            let mut it = TraceIter::new(&mut l, Some(1));
            assert_eq!(it.next_event().map(|e| e.ts), Some(5));
            assert_eq!(it.next_event().map(|e| e.ts), Some(7));
            assert!(it.next_event().is_none());
            assert_eq!((l.consumed(0), l.consumed(1), l.consumed(2)), (0, 2, 0));
            assert_eq!(l.consumed(7), 0);
        }
    }
}
