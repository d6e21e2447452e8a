//! Unit tests that need the crate's internals: the interrupt-injection test (a complete nested
//! write at every step of an outer write, through the `sync::inject` hook) and behaviour tests
//! of the writer and readers.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::string::String;
use std::vec;
use std::vec::Vec;

use ftrace_core::platform::TraceClock;

use crate::page::{self, Page, RecordKind};
use crate::sync::inject;
use crate::{At, ClockUnit, CpuBuffer, HeapPages, Mode};

/// A clock that advances by one on every read, with jumps on demand.
struct Tick(Cell<u64>);

impl TraceClock for Tick {
    const NAME: &'static str = "counter";
    fn now_ns(&self) -> u64 {
        let v = self.0.get();
        self.0.set(v + 1);
        v
    }
}

/// A payload that identifies its event and proves it intact.
fn payload(id: u32, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    v[..4].copy_from_slice(&id.to_le_bytes());
    for (i, b) in v.iter_mut().enumerate().skip(4) {
        *b = (id as usize * 31 + i * 7) as u8;
    }
    v
}

/// The id of an intact payload (panics on a corrupted one).
fn check_payload(p: &[u8], len: usize) -> u32 {
    assert!(p.len() >= len, "payload of {} bytes, want {len}", p.len());
    let id = u32::from_le_bytes(p[..4].try_into().unwrap());
    assert_eq!(
        &p[..len],
        &payload(id, len)[..],
        "payload of event {id} corrupted"
    );
    id
}

const OUTER: u32 = 999;
const NESTED: u32 = 1000;
const PAGE: usize = 128;
const PAGES: usize = 4;

#[derive(Clone, Copy, Debug)]
struct Scenario {
    mode: Mode,
    prefill: u32,
    gap: u64,
    outer_len: usize,
    nested_len: usize,
    discard: bool,
}

/// Runs the outer write of `s` with a nested write injected at each hook point in `ks`
/// (ascending); returns the step name of the last one, or `None` once it is past the last
/// step.
fn run_injected(s: Scenario, ks: &[usize]) -> Option<&'static str> {
    let buf = Rc::new(CpuBuffer::new(HeapPages, PAGES, PAGE).unwrap());
    buf.set_mode(s.mode);
    let clock = Rc::new(Tick(Cell::new(1000)));
    let mut attempted = 0u64;
    // (id, ts written) of every committed event, in commit order.
    let committed: Rc<RefCell<Vec<(u32, u64)>>> = Rc::default();
    for i in 0..s.prefill {
        attempted += 1;
        if let Some(mut r) = buf.reserve(16, &*clock) {
            r.data().copy_from_slice(&payload(i, 16));
            committed.borrow_mut().push((i, r.timestamp()));
            r.commit();
        }
    }
    clock.0.set(clock.0.get() + s.gap);
    let fired: Rc<Cell<Option<&'static str>>> = Rc::default();
    let nested_ok = Rc::new(Cell::new(0u64));
    {
        let (buf, clock, committed, fired, nested_ok) = (
            buf.clone(),
            clock.clone(),
            committed.clone(),
            fired.clone(),
            nested_ok.clone(),
        );
        let mut count = 0;
        let ks = ks.to_vec();
        inject::set(Some(std::boxed::Box::new(move |step| {
            count += 1;
            let Some(j) = ks.iter().position(|&k| k == count - 1) else {
                return;
            };
            if j == ks.len() - 1 {
                fired.set(Some(step));
            }
            // The interrupt: a complete nested write.
            let id = NESTED + j as u32;
            let r = buf.reserve(s.nested_len, &*clock);
            nested_ok.set(nested_ok.get() + 1);
            if let Some(mut r) = r {
                r.data().copy_from_slice(&payload(id, s.nested_len));
                committed.borrow_mut().push((id, r.timestamp()));
                r.commit();
            }
        })));
    }
    let outer = buf.reserve(s.outer_len, &*clock);
    let outer_ok = outer.is_some();
    if !(s.discard && outer_ok) {
        attempted += 1;
    }
    if let Some(mut r) = outer {
        r.data().copy_from_slice(&payload(OUTER, s.outer_len));
        if s.discard {
            r.discard();
        } else {
            committed.borrow_mut().push((OUTER, r.timestamp()));
            r.commit();
        }
    }
    inject::set(None);
    let step = fired.get()?;
    attempted += nested_ok.get();
    let ctx = std::format!("{s:?} nested at steps {ks:?} ({step})");

    // Read everything back.
    let committed = committed.borrow().clone();
    let mut got = Vec::new();
    let mut lost = 0;
    {
        let mut c = buf.consumer();
        while let Some(ev) = c.next() {
            let id = u32::from_le_bytes(ev.payload[..4].try_into().unwrap());
            let len = match id {
                OUTER => s.outer_len,
                NESTED.. => s.nested_len,
                _ => 16,
            };
            check_payload(ev.payload, len);
            lost += ev.lost;
            got.push((id, ev.ts));
        }
    }
    buf.debug_check_bytes();
    let st = buf.stats(0);
    assert_eq!(st.written as usize, committed.len(), "{ctx}: written");
    assert_eq!(st.entries, 0, "{ctx}: all read");
    assert_eq!(
        st.read_events + st.overrun,
        st.written,
        "{ctx}: read + overrun == written ({st:?})"
    );
    assert_eq!(
        st.written + st.dropped_events + st.commit_overrun,
        attempted,
        "{ctx}: every attempt accounted ({st:?}), outer ok {outer_ok}"
    );
    assert_eq!(lost, st.overrun, "{ctx}: the reader saw every loss");
    // Every byte read, except a page left holding only a discarded event's padding (the
    // reader does not swap in pages once no events are left, as the kernel).
    assert!(
        st.bytes == 0 || (s.discard && st.bytes <= PAGE as u64),
        "{ctx}: bytes {st:?}"
    );
    // What was read is the newest committed events, in buffer order: the committed sequence
    // minus its overwritten prefix, with the outer and nested events in either order.
    let ids: Vec<u32> = got.iter().map(|e| e.0).collect();
    let mut want: Vec<u32> = committed.iter().map(|e| e.0).collect();
    want.drain(..want.len() - ids.len());
    let n = ids.len();
    let tail_ok = |a: &[u32], b: &[u32]| {
        let mut a = a.to_vec();
        let mut b = b.to_vec();
        a.sort();
        b.sort();
        a == b
    };
    let split = n.saturating_sub(1 + ks.len());
    assert_eq!(ids[..split], want[..split], "{ctx}: order");
    assert!(
        tail_ok(&ids[split..], &want[split..]),
        "{ctx}: {ids:?} vs {want:?}"
    );
    // Timestamps never go backwards and never run ahead of the writer's clock.
    for w in got.windows(2) {
        assert!(w[0].1 <= w[1].1, "{ctx}: timestamps go backwards: {got:?}");
    }
    // A discarded event that was interrupted at delta 0 becomes padding with delta 1 (a
    // padding record needs a non-zero delta): events after it may read 1 ns late.
    let slack = u64::from(s.discard);
    for (id, ts) in &got {
        let written = committed.iter().find(|e| e.0 == *id).unwrap().1;
        assert!(
            *ts <= written + slack,
            "{ctx}: event {id} read at {ts}, written at {written}"
        );
        if *id < OUTER {
            assert_eq!(*ts, written, "{ctx}: undisturbed event {id}");
        }
    }
    Some(step)
}

#[test]
fn nested_write_at_every_step_of_an_outer_write() {
    let mut total = 0;
    let mut steps_seen = std::collections::BTreeSet::new();
    for mode in [Mode::Overwrite, Mode::ProducerConsumer] {
        for prefill in 0..(PAGES as u32 * 6 + 2) {
            for gap in [0, 1 << 28] {
                for (outer_len, nested_len) in [(24, 8), (8, 24), (100, 8)] {
                    for discard in [false, true] {
                        let s = Scenario {
                            mode,
                            prefill,
                            gap,
                            outer_len,
                            nested_len,
                            discard,
                        };
                        let mut k = 0;
                        while let Some(step) = run_injected(s, &[k]) {
                            steps_seen.insert(step);
                            k += 1;
                        }
                        // Two interrupts in one outer write (the second one lands in the
                        // paths only an earlier interrupt opens, e.g. the slow path E-F).
                        if prefill % 3 == 0 && !discard {
                            for k1 in 0..k {
                                for k2 in k1 + 1.. {
                                    let Some(step) = run_injected(s, &[k1, k2]) else {
                                        break;
                                    };
                                    steps_seen.insert(step);
                                    total += 1;
                                }
                            }
                        }
                        assert!(k >= 4, "{s:?}: only {k} injection points");
                        total += k;
                    }
                }
            }
        }
    }
    for step in [
        "start_commit",
        "A",
        "B",
        "C",
        "D",
        "E",
        "reserved",
        "moved_tail",
        "tail_update",
        "head_update",
        "head_set",
        "commit_page",
        "commit_read",
        "commit_index",
        "end_commit",
        "entries",
        "discard",
    ] {
        assert!(steps_seen.contains(step), "never injected at {step}");
    }
    assert!(total > 5000, "{total} nested writes");
}

#[test]
fn nested_write_during_a_reader_swap() {
    // A writer interrupting a reader on the same CPU, at every step of the reader's swap.
    for k in 0..6 {
        let buf = Rc::new(CpuBuffer::new(HeapPages, 3, PAGE).unwrap());
        let clock = Rc::new(Tick(Cell::new(1)));
        let mut n = 0u32;
        while buf.stats(0).pages_touched < 2 {
            assert!(buf.write(&payload(n, 16), &*clock));
            n += 1;
        }
        {
            let (buf, clock) = (buf.clone(), clock.clone());
            let mut count = 0;
            inject::set(Some(std::boxed::Box::new(move |_| {
                count += 1;
                if count - 1 == k {
                    assert!(buf.write(&payload(NESTED, 16), &*clock));
                }
            })));
        }
        let mut ids = Vec::new();
        {
            let mut c = buf.consumer();
            while let Some(ev) = c.next() {
                ids.push(check_payload(ev.payload, 16));
            }
        }
        inject::set(None);
        let st = buf.stats(0);
        assert_eq!(st.read_events + st.overrun, st.written, "k={k} {st:?}");
        assert_eq!(ids.len() as u64, st.read_events);
        let mut sorted: Vec<u32> = ids.iter().copied().filter(|&i| i != NESTED).collect();
        sorted.sort();
        assert_eq!(
            sorted,
            ids.iter()
                .copied()
                .filter(|&i| i != NESTED)
                .collect::<Vec<_>>()
        );
    }
}

fn drain(buf: &CpuBuffer<HeapPages>) -> Vec<(u64, Vec<u8>, u64)> {
    let mut c = buf.consumer();
    let mut v = Vec::new();
    while let Some(ev) = c.next() {
        v.push((ev.ts, ev.payload.to_vec(), ev.lost));
    }
    v
}

#[test]
fn events_read_back_in_order_with_their_timestamps() {
    let buf = CpuBuffer::new(HeapPages, 4, 4096).unwrap();
    let mut ts = 5u64;
    for i in 0..600u32 {
        ts += (i as u64 * 7919) % 5000;
        assert!(buf.write(&payload(i, 4 + (i as usize % 60)), &At(ts)));
    }
    let got = drain(&buf);
    assert!(
        got.len() < 600,
        "4 pages cannot hold 600 events: overwritten"
    );
    let first = 600 - got.len() as u32;
    let mut ts = 5u64;
    let mut want = Vec::new();
    for i in 0..600u32 {
        ts += (i as u64 * 7919) % 5000;
        want.push(ts);
    }
    for (k, (t, p, _)) in got.iter().enumerate() {
        let i = first + k as u32;
        assert_eq!(check_payload(p, 4 + (i as usize % 60)), i);
        assert_eq!(*t, want[i as usize]);
    }
    let st = buf.stats(0);
    assert_eq!(st.overrun as u32, first);
    assert_eq!(
        got[0].2, st.overrun,
        "the first event read reports the loss"
    );
    assert!(got[1..].iter().all(|e| e.2 == 0));
}

#[test]
fn large_gaps_use_time_extends_and_large_events_a_length_word() {
    let buf = CpuBuffer::new(HeapPages, 4, 4096).unwrap();
    let stamps = [10u64, 20, 20 + (1 << 27), (1 << 40) + 3, (1 << 40) + 4];
    for (i, &t) in stamps.iter().enumerate() {
        assert!(buf.write(&payload(i as u32, 200), &At(t)));
    }
    let mut out = buf.alloc_read_page().unwrap();
    assert_eq!(buf.consumer().read_page(&mut out), Some(5));
    let page = out.page();
    let kinds: Vec<u32> = page.records().map(|r| r.unwrap().type_len).collect();
    assert_eq!(kinds, [0, 0, 30, 0, 30, 0, 0]);
    let ts: Vec<u64> = page.events().map(|e| e.unwrap().ts).collect();
    assert_eq!(ts, stamps);
    for (i, e) in page.events().enumerate() {
        assert_eq!(check_payload(e.unwrap().payload, 200), i as u32);
    }
}

#[test]
fn producer_consumer_mode_drops_new_events() {
    let buf = CpuBuffer::new(HeapPages, 3, 128).unwrap();
    buf.set_mode(Mode::ProducerConsumer);
    let mut ok = 0;
    for i in 0..100u32 {
        if buf.write(&payload(i, 16), &At(i as u64)) {
            ok += 1;
        }
    }
    let st = buf.stats(0);
    assert_eq!(st.written, ok);
    assert_eq!(st.dropped_events, 100 - ok);
    assert_eq!(st.overrun, 0);
    let got = drain(&buf);
    // The oldest events survive, in order.
    for (i, e) in got.iter().enumerate() {
        assert_eq!(check_payload(&e.1, 16), i as u32);
    }
    assert_eq!(got.len() as u64, ok);
    // Once read, there is room again.
    assert!(buf.write(&payload(7, 16), &At(1000)));
}

#[test]
fn discard_gives_space_back_or_leaves_padding() {
    let buf = CpuBuffer::new(HeapPages, 4, 4096).unwrap();
    assert!(buf.write(&payload(1, 16), &At(100)));
    // Discarding the last event gives its space back...
    let r = buf.reserve(16, &At(150)).unwrap();
    r.discard();
    // ...and an event reserved and dropped (dropping discards) too.
    drop(buf.reserve(40, &At(160)).unwrap());
    assert!(buf.write(&payload(2, 16), &At(200)));
    // A discard under a later event leaves padding.
    let mut outer = buf.reserve(16, &At(300)).unwrap();
    outer.data().fill(0);
    {
        assert!(buf.write(&payload(3, 16), &At(310)));
    }
    outer.discard();
    assert!(buf.write(&payload(4, 16), &At(400)));
    let mut out = buf.alloc_read_page().unwrap();
    assert_eq!(buf.consumer().read_page(&mut out), Some(4));
    let page = out.page();
    let kinds: Vec<_> = page
        .records()
        .map(|r| match r.unwrap().kind {
            RecordKind::Data { .. } => "data",
            RecordKind::Padding => "padding",
            RecordKind::TimeStamp { .. } => "stamp",
            RecordKind::TimeExtend { .. } => "extend",
            RecordKind::NullPadding => "null",
        })
        .collect();
    // 1; the dropped reservation's absolute stamp stays (its event's space is given back);
    // 2 with an absolute stamp (a discard forces one); the discarded outer event as padding
    // keeping its delta; the nested 3 and 4 with plain deltas.
    assert_eq!(
        kinds,
        ["data", "stamp", "stamp", "data", "padding", "data", "data"]
    );
    let evs: Vec<_> = page
        .events()
        .map(|e| {
            let e = e.unwrap();
            (e.ts, check_payload(e.payload, 16))
        })
        .collect();
    assert_eq!(evs, [(100, 1), (200, 2), (310, 3), (400, 4)]);
    let st = buf.stats(0);
    assert_eq!((st.written, st.read_events, st.entries), (4, 4, 0));
}

/// The reference `per_cpu/cpu0/stats` before and after the raw read, reproduced by writing
/// the capture's events and reading them as `trace_pipe_raw` did.
#[test]
fn stats_render_like_the_kernel() {
    let base = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reference/ftrace-6.12.117/06-raw-function/"
    );
    let raw = std::fs::read(std::format!("{base}raw_cpu0.bin")).unwrap();
    let buf = CpuBuffer::new(HeapPages, 8, 4096).unwrap();
    for ev in Page::new(&raw).unwrap().events() {
        let ev = ev.unwrap();
        assert!(buf.write(ev.payload, &At(ev.ts)));
    }
    let text = |now| {
        let mut s = String::new();
        buf.stats(now)
            .write_to(&mut s, ClockUnit::Nanoseconds)
            .unwrap();
        s
    };
    let before =
        std::fs::read_to_string(std::format!("{base}per_cpu_cpu0_stats_before_read.txt")).unwrap();
    assert_eq!(text(82_097_893_000), before);
    let mut out = buf.alloc_read_page().unwrap();
    buf.consumer().read_page(&mut out).unwrap();
    let after =
        std::fs::read_to_string(std::format!("{base}per_cpu_cpu0_stats_after_read.txt")).unwrap();
    assert_eq!(text(93_363_363_000), after);
    // A fresh buffer: the boot-time stats file.
    let fresh = CpuBuffer::new(HeapPages, 8, 4096).unwrap();
    let boot = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reference/ftrace-6.12.117/02-files/per_cpu__cpu0__stats.txt"
    ))
    .unwrap();
    assert_eq!(std::format!("{}", fresh.stats(13_853_691_000)), boot);
}

#[test]
fn iterator_does_not_consume_and_sees_what_the_consumer_sees() {
    let buf = CpuBuffer::new(HeapPages, 4, 256).unwrap();
    for i in 0..40u32 {
        assert!(buf.write(&payload(i, 12), &At(10 * i as u64)));
    }
    // Consume a few so the reader page is partly read.
    {
        let mut c = buf.consumer();
        for _ in 0..3 {
            c.next().unwrap();
        }
    }
    let mut scratch = vec![0u8; 256];
    let mut seen = Vec::new();
    {
        let mut it = buf.iter(&mut scratch);
        while let Some(ev) = it.next() {
            seen.push((ev.ts, check_payload(ev.payload, 12)));
        }
    }
    let consumed: Vec<_> = drain(&buf)
        .into_iter()
        .map(|e| (e.0, check_payload(&e.1, 12)))
        .collect();
    assert!(!seen.is_empty());
    assert_eq!(seen, consumed);
}

#[test]
fn merge_interleaves_cpus_by_timestamp() {
    let a = CpuBuffer::new(HeapPages, 4, 4096).unwrap();
    let b = CpuBuffer::new(HeapPages, 4, 4096).unwrap();
    for i in 0..50u32 {
        let t = i as u64 * 3;
        assert!(a.write(&payload(i, 8), &At(t)));
        if i % 2 == 0 {
            assert!(b.write(&payload(100 + i, 8), &At(t + 1)));
        }
    }
    let before = a.stats(0);
    let mut cs = [a.consumer(), b.consumer()];
    // Stats stay available while a reader holds the lock (no self-deadlock).
    assert_eq!(a.stats(0), before);
    assert_eq!(cs[0].stats(0), before);
    let mut last = 0;
    let mut n = 0;
    while let Some((cpu, ts)) = crate::merge_next(&mut cs) {
        let ev = cs[cpu].next().unwrap();
        assert_eq!(ev.ts, ts);
        assert!(ts >= last);
        last = ts;
        n += 1;
    }
    assert_eq!(n, 75);
}

#[test]
fn record_switches_reset_and_resize() {
    let mut buf = CpuBuffer::new(HeapPages, 4, 4096).unwrap();
    buf.set_record_on(false);
    assert!(!buf.write(&payload(1, 8), &At(1)));
    buf.set_record_on(true);
    buf.record_disable();
    buf.record_disable();
    buf.record_enable();
    assert!(!buf.write(&payload(1, 8), &At(1)));
    buf.record_enable();
    buf.set_cpu_enabled(false);
    assert!(!buf.is_recording());
    buf.set_cpu_enabled(true);
    assert!(buf.write(&payload(2, 8), &At(2)));
    assert_eq!(buf.stats(0).entries, 1);
    buf.reset();
    assert_eq!(buf.stats(0), crate::Stats::default());
    buf.set_mode(Mode::ProducerConsumer);
    buf.resize(9).unwrap();
    assert_eq!(buf.nr_pages(), 9);
    assert_eq!(buf.mode(), Mode::ProducerConsumer);
    for i in 0..(2 * 9 * 4080 / 16) as u32 {
        buf.write(&payload(i, 8), &At(i as u64));
    }
    let st = buf.stats(0);
    assert!(st.written > 8 * 4080 / 16, "{st:?}");
    assert!(st.dropped_events > 0);
    assert_eq!(drain(&buf).len() as u64, st.written);
    assert_eq!(buf.resize(1).unwrap_err(), crate::BufferError::TooFewPages);
    assert!(CpuBuffer::new(HeapPages, 4, 1000).is_err());
    assert!(buf.reserve(buf.max_payload() + 1, &At(0)).is_none());
    assert_eq!(buf.stats(0).too_big, 1);
}

#[test]
fn full_page_swap_reports_missed_events_like_the_kernel() {
    let buf = CpuBuffer::new(HeapPages, 3, 128).unwrap();
    for i in 0..40u32 {
        assert!(buf.write(&payload(i, 16), &At(i as u64 * 10)));
    }
    let st = buf.stats(0);
    assert!(st.overrun > 0);
    let mut out = buf.alloc_read_page().unwrap();
    let n = buf.consumer().read_page(&mut out).unwrap();
    let page = out.page();
    assert!(page.missed_events());
    // 128-byte pages: 5 events of 20 bytes leave 12 bytes: room for the count.
    assert!(page.missed_stored());
    assert_eq!(page.missed_count(), Some(st.overrun));
    // The commit word's upper half is the kernel's sign extension.
    let word = u64::from_le_bytes(out.as_bytes()[8..16].try_into().unwrap());
    assert_eq!(word >> 32, 0xffff_ffff);
    assert_eq!(page.events().count(), n);
    let first = check_payload(page.events().next().unwrap().unwrap().payload, 16);
    assert_eq!(first as u64, st.overrun);
    let _ = page::MISSED_MASK;
}

/// The writer runs (on another CPU) while the reader is preempted between splicing its old
/// reader page into the ring and publishing the new `reader_page`, fills the spliced-in page
/// and reaches the head. `reader_page` still names the page the writer is on, so a writer
/// that takes `commit_page == reader_page` for "the commit is on the reader page" moves onto
/// the head page and wipes unread events that were already counted as written (the stress
/// test's "not drained" failure). The kernel asks the links instead (`rb_is_reader_page`):
/// the spliced-in page is in the ring, so the buffer is full and the event is dropped.
#[test]
fn writer_fills_the_spliced_in_page_before_the_reader_publishes_its_new_page() {
    for mode in [Mode::ProducerConsumer, Mode::Overwrite] {
        let buf = Rc::new(CpuBuffer::new(HeapPages, PAGES, PAGE).unwrap());
        buf.set_mode(mode);
        let written = Rc::new(RefCell::new(Vec::new()));
        let attempts = Rc::new(Cell::new(0u32));
        let write = {
            let (buf, written, attempts) = (buf.clone(), written.clone(), attempts.clone());
            move |n: u32| {
                for _ in 0..n {
                    let id = attempts.get();
                    attempts.set(id + 1);
                    if buf.write(&payload(id, 16), &At(10 + id as u64)) {
                        written.borrow_mut().push(id);
                    }
                }
            }
        };
        // Fill the ring (in overwrite mode: exactly, without pushing the head yet).
        let per_page = (PAGE - page::PAGE_HEADER_SIZE) as u32 / 20;
        write(per_page * PAGES as u32);
        let spliced = Rc::new(Cell::new(false));
        {
            let (write, spliced) = (write.clone(), spliced.clone());
            inject::set(Some(std::boxed::Box::new(move |step| {
                if step == "reader_spliced" && !spliced.get() {
                    spliced.set(true);
                    // Two pages' worth: the spliced-in page, then the attempt at the head.
                    write(2 * per_page + 1);
                }
            })));
        }
        let mut ids = Vec::new();
        {
            let mut c = buf.consumer();
            while let Some(ev) = c.next() {
                ids.push(check_payload(ev.payload, 16));
            }
        }
        inject::set(None);
        assert!(spliced.get(), "{mode:?}: the reader never swapped");
        let st = buf.stats(0);
        let mut d = String::new();
        buf.dump_state(&mut d).unwrap();
        assert_eq!(st.entries, 0, "{mode:?}: not drained: {st:?}\n{d}");
        assert_eq!(st.commit_overrun, 0, "{mode:?}");
        assert_eq!(ids.len() as u64, st.read_events, "{mode:?}");
        assert_eq!(
            ids.len() as u64 + st.overrun + st.dropped_events,
            attempts.get() as u64,
            "{mode:?}: read + overrun + dropped == written: {st:?}\n{d}"
        );
        match mode {
            // Nothing overwritten: what was read is every event the writer got in.
            Mode::ProducerConsumer => assert_eq!(ids, *written.borrow(), "{st:?}\n{d}"),
            // Whole pages of the ring are lost (the reader page is the reader's): what was
            // read is in order, and what is missing is exactly the overrun.
            Mode::Overwrite => {
                let w = written.borrow();
                assert!(ids.windows(2).all(|p| p[0] < p[1]), "{ids:?}");
                assert!(ids.iter().all(|i| w.contains(i)), "{ids:?}");
                assert_eq!((w.len() - ids.len()) as u64, st.overrun, "{st:?}\n{d}");
            }
        }
    }
}

/// The iterator steps onto the page the writer has just moved its commit to, before the
/// writer stamps the page with its first event's time; the writer then commits that event.
/// The page time the iterator took on entering is the page's previous one (a lap ago), so
/// the event must not be timed from it (the kernel re-checks the page stamp after copying).
#[test]
fn iterator_entering_a_page_before_the_writer_stamps_it() {
    use std::sync::Arc;
    use std::sync::mpsc::channel;
    let buf = Arc::new(CpuBuffer::new(HeapPages, PAGES, PAGE).unwrap());
    buf.set_mode(Mode::ProducerConsumer);
    let per_page = (PAGE - page::PAGE_HEADER_SIZE) as u64 / 20;
    let mut seq = 0u64;
    let mut write = |buf: &CpuBuffer<HeapPages>| {
        assert!(buf.write(&payload(seq as u32, 16), &At(1000 + 3 * seq)));
        seq += 1;
    };
    // A lap and a half, read as we go: every page has an old stamp, the writer is on a page
    // of its own with the reader page behind it, and one event short of a full page.
    for _ in 0..(PAGES as u64 + 1) * per_page + per_page - 1 {
        write(&buf);
        drop(drain(&buf));
    }
    write(&buf);
    // The writer's page is full: the next event moves it on. Park the writer right after it
    // moved its commit (before it stamps the new page); the iterator steps onto that page,
    // and there waits for the writer to finish.
    let (parked, parked_rx) = channel::<()>();
    let (resume, resume_rx) = channel::<()>();
    let (done, done_rx) = channel::<()>();
    let last = seq;
    let mut got = Vec::new();
    std::thread::scope(|s| {
        let wb = &*buf;
        s.spawn(move || {
            let mut once = Some((parked, resume_rx));
            inject::set(Some(std::boxed::Box::new(move |step| {
                if step == "moved_tail" {
                    if let Some((parked, resume)) = once.take() {
                        parked.send(()).unwrap();
                        resume.recv().unwrap();
                    }
                }
            })));
            assert!(wb.write(&payload(last as u32, 16), &At(1000 + 3 * last)));
            inject::set(None);
            done.send(()).unwrap();
        });
        parked_rx.recv().unwrap();
        let mut once = Some((resume, done_rx));
        inject::set(Some(std::boxed::Box::new(move |step| {
            if step == "iter_entered" {
                if let Some((resume, done)) = once.take() {
                    resume.send(()).unwrap();
                    done.recv().unwrap();
                }
            }
        })));
        let mut scratch = [0u8; PAGE];
        let mut it = buf.iter(&mut scratch);
        while let Some(ev) = it.next() {
            got.push((check_payload(ev.payload, 16) as u64, ev.ts));
        }
        inject::set(None);
    });
    assert_eq!(got.last().map(|e| e.0), Some(last), "{got:?}");
    for (id, ts) in got {
        assert_eq!(ts, 1000 + 3 * id, "iterated timestamp of event {id}");
    }
}

/// An overwriting writer moves onto the page the iterator is about to enter (the oldest): it
/// has bumped the page's update counter but not yet emptied the page when the iterator enters
/// it, so the iterator takes the new counter with the page's old stamp and old first event
/// (consistent, as far as they go). The writer then empties the page and writes new events
/// on it, under the same counter: the iterator must not time them from the old stamp (it
/// re-checks the page stamp after copying, as the kernel's `rb_iter_head_event` does).
#[test]
fn iterator_entering_a_page_the_writer_is_recycling() {
    use std::sync::mpsc::channel;
    let buf = CpuBuffer::new(HeapPages, PAGES, PAGE).unwrap();
    buf.set_mode(Mode::Overwrite);
    let per_page = (PAGE - page::PAGE_HEADER_SIZE) as u64 / 20;
    let write = |buf: &CpuBuffer<HeapPages>, seq: u64| {
        assert!(buf.write(&payload(seq as u32, 16), &At(1000 + 3 * seq)));
    };
    // Two laps and more, nothing read: the tail page is full, and the next event moves the
    // writer onto the oldest page.
    let filled = (2 * PAGES as u64 + 1) * per_page;
    for seq in 0..filled {
        write(&buf, seq);
    }
    let (go, go_rx) = channel::<()>();
    let (parked, parked_rx) = channel::<()>();
    let (resume, resume_rx) = channel::<()>();
    let (done, done_rx) = channel::<()>();
    let mut got = Vec::new();
    std::thread::scope(|s| {
        let wb = &buf;
        s.spawn(move || {
            go_rx.recv().unwrap();
            let mut once = Some((parked, resume_rx));
            inject::set(Some(std::boxed::Box::new(move |step| {
                if step == "tail_update" {
                    if let Some((parked, resume)) = once.take() {
                        parked.send(()).unwrap();
                        resume.recv().unwrap();
                    }
                }
            })));
            write(wb, filled);
            inject::set(None);
            for seq in filled + 1..filled + per_page - 1 {
                write(wb, seq);
            }
            done.send(()).unwrap();
        });
        // The iterator starts on the (empty) reader page; its next page is the oldest. Once
        // it has found it, the writer moves onto it and stops after bumping its counter.
        let mut once = Some((go, parked_rx));
        inject::set(Some(std::boxed::Box::new(move |step| {
            if step == "iter_found_next" {
                if let Some((go, parked)) = once.take() {
                    go.send(()).unwrap();
                    parked.recv().unwrap();
                }
            }
        })));
        let mut scratch = [0u8; PAGE];
        let mut it = buf.iter(&mut scratch);
        let first = it.next().expect("the oldest page's first event");
        got.push((check_payload(first.payload, 16) as u64, first.ts));
        // The writer empties the page and fills most of it anew.
        resume.send(()).unwrap();
        done_rx.recv().unwrap();
        while let Some(ev) = it.next() {
            got.push((check_payload(ev.payload, 16) as u64, ev.ts));
        }
        inject::set(None);
    });
    assert!(got.len() > 1, "{got:?}");
    for (id, ts) in got {
        assert_eq!(ts, 1000 + 3 * id, "iterated timestamp of event {id}");
    }
}

/// An outer reservation is discarded after writers nested in it (the same thread, strictly
/// nested, as an interrupt) filled its page and moved the tail on: the discard finds the
/// event's page by its address (not the tail page any more), turns it into padding there, and
/// the accounting is exact. While the outer reservation is open, `written` counts it.
#[test]
fn discard_after_nested_writers_moved_the_tail() {
    for mode in [Mode::Overwrite, Mode::ProducerConsumer] {
        let buf = CpuBuffer::new(HeapPages, 4, 128).unwrap();
        buf.set_mode(mode);
        let clock = Tick(Cell::new(1000));
        let mut outer = buf.reserve(16, &clock).unwrap();
        outer.data().copy_from_slice(&payload(OUTER, 16));
        assert_eq!(buf.stats(0).written, 1, "{mode:?}: the open reservation");
        // 20-byte records, 112 data bytes a page: eight nested events move the tail twice.
        let mut nested = 0;
        for i in 0..8 {
            assert!(
                buf.write(&payload(i, 16), &clock),
                "{mode:?}: nested write {i}"
            );
            nested += 1;
        }
        assert_ne!(
            buf.tail_page.load(crate::sync::Ordering::Relaxed),
            0,
            "{mode:?}: the tail moved off the outer event's page"
        );
        // Nothing is readable yet: the outer writer has not finished.
        assert_eq!(buf.consumer().next().map(|e| e.ts), None, "{mode:?}");
        outer.discard();
        buf.debug_check_bytes();
        let st = buf.stats(0);
        assert_eq!(st.written, nested, "{mode:?}: {st:?}");
        assert_eq!(st.entries, nested, "{mode:?}: {st:?}");
        let got = drain(&buf);
        let ids: Vec<u32> = got.iter().map(|e| check_payload(&e.1, 16)).collect();
        assert_eq!(ids, (0..nested as u32).collect::<Vec<_>>(), "{mode:?}");
        let st = buf.stats(0);
        assert_eq!((st.entries, st.read_events, st.overrun), (0, nested, 0));
        assert_eq!((st.dropped_events, st.commit_overrun), (0, 0));
    }
}
