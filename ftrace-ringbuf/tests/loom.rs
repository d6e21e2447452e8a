//! loom models of the lock-free protocols: a writer against a concurrent reader that swaps
//! pages out of the ring, in both modes, including the overwrite case where the writer pushes
//! the head page while the reader tries to take it.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test -p ftrace-ringbuf --test loom --release`.
#![cfg(loom)]

use std::sync::atomic::{AtomicUsize, Ordering};

use loom::sync::Arc;
use loom::thread;

use ftrace_ringbuf::{At, CpuBuffer, HeapPages, Mode};

/// 64-byte pages: 48 data bytes, two 16-byte-payload events (20 bytes each) per page.
const PAGE: usize = 64;

fn payload(seq: u32) -> [u8; 16] {
    let mut p = [0u8; 16];
    for (i, b) in p.iter_mut().enumerate() {
        *b = (seq as u8).wrapping_mul(13).wrapping_add(i as u8);
    }
    p[..4].copy_from_slice(&seq.to_le_bytes());
    p
}

fn seq_of(p: &[u8]) -> u32 {
    let seq = u32::from_le_bytes(p[..4].try_into().unwrap());
    assert_eq!(&p[..16], &payload(seq), "payload intact");
    seq
}

#[derive(Clone, Copy, Debug)]
enum ReaderKind {
    /// `trace_pipe_raw`: one page, swapped out or copied.
    Page,
    /// `trace_pipe`: events one by one.
    Events,
}

/// A writer writes `events` events into a 2-page ring while a reader reads concurrently;
/// afterwards the rest is drained and every event is accounted for. Returns how many of the
/// explored executions lost events to a head push and how many dropped events.
fn model(mode: Mode, events: u32, reader: ReaderKind) -> (usize, usize) {
    let lost_runs = std::sync::Arc::new(AtomicUsize::new(0));
    let dropped_runs = std::sync::Arc::new(AtomicUsize::new(0));
    let (lost_out, dropped_out) = (lost_runs.clone(), dropped_runs.clone());
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(2);
    builder.check(move || {
        let buf = Arc::new(CpuBuffer::new(HeapPages, 2, PAGE).unwrap());
        buf.set_mode(mode);
        let rb = buf.clone();
        let reader = thread::spawn(move || {
            let mut seen = Vec::new();
            let mut c = rb.consumer();
            match reader {
                ReaderKind::Page => {
                    let mut page = rb.alloc_read_page().unwrap();
                    if let Some(n) = c.read_page(&mut page) {
                        let p = page.page();
                        for ev in p.events() {
                            let ev = ev.unwrap();
                            seen.push((seq_of(ev.payload), ev.ts));
                        }
                        assert_eq!(seen.len(), n);
                    }
                }
                ReaderKind::Events => {
                    for _ in 0..2 {
                        if let Some(ev) = c.next() {
                            seen.push((seq_of(ev.payload), ev.ts));
                        }
                    }
                }
            }
            seen
        });
        let mut written = 0;
        for seq in 0..events {
            if buf.write(&payload(seq), &At(100 + 10 * seq as u64)) {
                written += 1;
            }
        }
        let mut seen = reader.join().unwrap();
        {
            let mut c = buf.consumer();
            while let Some(ev) = c.next() {
                seen.push((seq_of(ev.payload), ev.ts));
            }
        }
        let st = buf.stats(0);
        if st.pages_lost > 0 {
            lost_runs.fetch_add(1, Ordering::Relaxed);
        }
        if st.dropped_events > 0 {
            dropped_runs.fetch_add(1, Ordering::Relaxed);
        }
        assert_eq!(st.written, written);
        assert_eq!(st.read_events, seen.len() as u64, "{st:?}");
        if st.entries != 0 {
            let mut d = String::new();
            buf.dump_state(&mut d).unwrap();
            panic!("not drained: {st:?} seen {seen:?}\n{d}");
        }
        assert_eq!(st.commit_overrun, 0);
        assert_eq!(
            seen.len() as u64 + st.overrun + st.dropped_events,
            events as u64,
            "read + overrun + dropped == written: {st:?} {seen:?}"
        );
        for w in seen.windows(2) {
            assert!(w[0].0 < w[1].0, "order: {seen:?}");
        }
        for &(seq, ts) in &seen {
            assert_eq!(ts, 100 + 10 * seq as u64, "timestamp of {seq}");
        }
        match mode {
            Mode::Overwrite => {
                // What is lost is the oldest, and only that.
                assert_eq!(st.dropped_events, 0);
                let first = seen.first().map_or(events, |e| e.0);
                let holes: u64 = seen.windows(2).map(|w| (w[1].0 - w[0].0 - 1) as u64).sum();
                assert_eq!(first as u64 + holes, st.overrun, "{seen:?} {st:?}");
            }
            Mode::ProducerConsumer => {
                assert_eq!(st.overrun, 0);
                // What is dropped is the newest at the time, so what was read is in order.
                assert_eq!(
                    seen.first().map(|e| e.0),
                    Some(0).filter(|_| !seen.is_empty())
                );
            }
        }
    });
    (
        lost_out.load(Ordering::Relaxed),
        dropped_out.load(Ordering::Relaxed),
    )
}

#[test]
fn overwrite_writer_pushes_head_against_page_swap() {
    // 5 events need 3 pages' worth: the writer wraps the 2-page ring and pushes the head.
    let (lost, _) = model(Mode::Overwrite, 5, ReaderKind::Page);
    assert!(lost > 0, "no execution pushed the head");
}

#[test]
fn overwrite_writer_against_event_reader() {
    let (lost, _) = model(Mode::Overwrite, 5, ReaderKind::Events);
    assert!(lost > 0, "no execution pushed the head");
}

#[test]
fn producer_consumer_writer_against_page_swap() {
    let (_, dropped) = model(Mode::ProducerConsumer, 5, ReaderKind::Page);
    assert!(dropped > 0, "no execution filled the buffer");
}

#[test]
fn producer_consumer_writer_against_event_reader() {
    let (_, dropped) = model(Mode::ProducerConsumer, 5, ReaderKind::Events);
    assert!(dropped > 0, "no execution filled the buffer");
}

mod slot_ring {
    //! The fixed-slot ring (`ftrace_ringbuf::slot`): a writer (and a nested writer) against a
    //! concurrent consumer in producer/consumer mode, and against a concurrent reader in
    //! overwrite mode. Every event a reader returns must be whole; every event written must be
    //! read or counted lost.
    //!
    //! Weakening tried (each fails at least one model here): the commit store `Release ->
    //! Relaxed` and the reader's kind load `Acquire -> Relaxed` (all three: a committed slot
    //! read with stale fields); the writer's release fence after the reservation or the
    //! reader's acquire fence before re-reading `head`, removed (the overwrite model: a
    //! torn copy accepted); the writer's load of the consumer's `limit` when its cached
    //! `limit_seen` says full (`reserve_past_limit_seen`) `Acquire -> Relaxed`, and the
    //! consumer's `limit` store `Release -> Relaxed` (both producer/consumer models: "Causality
    //! violation: Concurrent read and write accesses to `UnsafeCell`", a slot refilled while
    //! the consumer's copy of it is not ordered before the fill). That last pair is seen
    //! through the slot's loom-only ownership cell (`Slot::owner`: the fill a write access, a
    //! consumer's copy a read access), not through the atomics, whose failure there (load
    //! buffering) loom does not produce.

    use super::*;
    use ftrace_ringbuf::slot::{
        Cursor, Drain, RingHeader, Slot, SlotEvent, SlotMode, SlotRead, SlotRing,
    };

    fn ev(n: u64) -> SlotEvent {
        SlotEvent {
            ts: n,
            ip: n * 3 + 1,
            arg: n * 7 + 1,
            kind: 1,
            cpu: n as u32 + 1,
        }
    }

    fn check(e: SlotEvent) -> u64 {
        assert_eq!(e, ev(e.ts), "slot read whole");
        e.ts
    }

    struct Ring {
        header: RingHeader,
        slots: Vec<Slot>,
    }

    impl Ring {
        fn new(cap: u64, mode: SlotMode) -> Arc<Ring> {
            Arc::new(Ring {
                header: RingHeader::new(cap, mode),
                slots: (0..cap).map(|_| Slot::default()).collect(),
            })
        }

        fn ring(&self) -> SlotRing<'_> {
            SlotRing::new(&self.header, &self.slots).unwrap()
        }
    }

    #[derive(Clone, Copy)]
    enum Writer {
        /// Three events one after the other.
        Plain,
        /// An event reserved, a whole nested event written, then the first committed.
        Nested,
    }

    fn producer_consumer(writer: Writer) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(move || {
            let r = Ring::new(2, SlotMode::ProducerConsumer);
            let rc = r.clone();
            let consumer = thread::spawn(move || {
                let mut c = Cursor::default();
                let mut seen = Vec::new();
                rc.ring()
                    .consume(&mut c, Drain::Live, |e, _| seen.push(check(e)));
                (c, seen)
            });
            let ring = r.ring();
            let mut written = Vec::new();
            match writer {
                Writer::Plain => {
                    for n in 0..3 {
                        if ring.write(ev(n)).is_ok() {
                            written.push(n);
                        }
                    }
                }
                Writer::Nested => {
                    let outer = ring.reserve();
                    if ring.write(ev(1)).is_ok() {
                        written.push(1);
                    }
                    if let Ok(o) = outer {
                        o.commit(ev(0));
                        written.insert(0, 0);
                    }
                    if ring.write(ev(2)).is_ok() {
                        written.push(2);
                    }
                }
            }
            let (mut c, mut seen) = consumer.join().unwrap();
            ring.consume(&mut c, Drain::Final, |e, _| seen.push(check(e)));
            // Recording order within the ring: the nested event may precede the outer one.
            let mut sorted_seen = seen.clone();
            sorted_seen.sort();
            assert_eq!(sorted_seen, written, "every written event read once");
            assert_eq!(c.overrun, 0, "nothing torn or unfinished");
            assert_eq!(
                c.dropped + c.pending_drops(),
                3 - written.len() as u64,
                "drops counted"
            );
        });
    }

    #[test]
    fn slot_writer_vs_consumer() {
        producer_consumer(Writer::Plain);
    }

    #[test]
    fn slot_nested_writer_vs_consumer() {
        producer_consumer(Writer::Nested);
    }

    /// The writers' owner moves them to a larger ring and answers `GROWN`: a consumer that
    /// sees the answer finishes the ring with every event written before it, nothing counted
    /// lost. Fails with `grown`'s store (or `growth_offered`'s load) weakened to `Relaxed`: the
    /// consumer may then see the answer with an older head and end the ring short.
    #[test]
    fn slot_consumer_seeing_grown_has_every_event() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let r = Ring::new(4, SlotMode::ProducerConsumer);
            let rc = r.clone();
            let writer = thread::spawn(move || {
                let ring = rc.ring();
                ring.write(ev(0)).unwrap();
                ring.write(ev(1)).unwrap();
                ring.grown();
            });
            let ring = r.ring();
            let mut c = Cursor::default();
            let mut seen = Vec::new();
            if ring.growth_offered() == ftrace_ringbuf::slot::GROWN {
                ring.consume(&mut c, Drain::Final, |e, _| seen.push(check(e)));
                assert_eq!(seen, [0, 1], "finished with every event");
                assert_eq!(c.overrun, 0, "nothing counted lost");
            }
            writer.join().unwrap();
        });
    }

    /// One event over two slots (`write_span`) against a live consumer: the consumer
    /// delivers the whole span or none of it. Fails when `Span::commit` stores the head
    /// before the tail, or with the commit store `Release -> Relaxed`.
    #[test]
    fn slot_span_is_read_whole_or_not_at_all() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let r = Ring::new(4, SlotMode::ProducerConsumer);
            let rc = r.clone();
            let consumer = thread::spawn(move || {
                let mut c = Cursor::default();
                let mut seen = Vec::new();
                rc.ring()
                    .consume(&mut c, Drain::Live, |e, _| seen.push(check(e)));
                (c, seen)
            });
            let ring = r.ring();
            ring.write_span(ev(0), &[ev(1)]).unwrap();
            let (mut c, seen) = consumer.join().unwrap();
            assert!(
                seen.is_empty() || seen == [0, 1],
                "a span read in part: {seen:?}"
            );
            let mut rest = Vec::new();
            ring.consume(&mut c, Drain::Final, |e, _| rest.push(check(e)));
            assert_eq!(seen.len() + rest.len(), 2, "the span read once");
        });
    }

    /// Overwrite mode, one slot: the second write laps the first while a reader copies it.
    #[test]
    fn slot_overwrite_reader_never_returns_a_torn_slot() {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(2);
        builder.check(|| {
            let r = Ring::new(1, SlotMode::Overwrite);
            let rc = r.clone();
            let reader = thread::spawn(move || {
                if let SlotRead::Event(e) = rc.ring().read(0) {
                    assert_eq!(check(e), 0, "the slot of index 0");
                }
            });
            let ring = r.ring();
            for n in 0..2 {
                ring.write(ev(n)).unwrap();
            }
            reader.join().unwrap();
        });
    }
}
