//! Stress: writer threads, each with its own buffer, against concurrent readers on other
//! threads; 10 million events per mode. Every event is accounted exactly:
//! read + overrun + dropped == written, and the sequence gaps a reader sees are the overrun.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use ftrace_ringbuf::{At, CpuBuffer, HeapPages, Mode};

const WRITERS: usize = 4;
const READERS: usize = 2;
const EVENTS: u64 = 10_000_000;
const PER_WRITER: u64 = EVENTS / WRITERS as u64;

/// What a reader observed on one buffer.
#[derive(Default, Clone, Copy)]
struct Seen {
    events: u64,
    last: Option<u64>,
    gaps: u64,
    reported_lost: u64,
}

impl Seen {
    fn saw(&mut self, payload: &[u8], ts: u64, writer: usize) {
        let seq = u64::from_le_bytes(payload[..8].try_into().unwrap());
        let who = u64::from_le_bytes(payload[8..16].try_into().unwrap());
        assert_eq!(who, writer as u64, "payload intact");
        assert_eq!(ts, seq * 3, "timestamp of event {seq}");
        if let Some(last) = self.last {
            assert!(seq > last, "order: {seq} after {last}");
            self.gaps += seq - last - 1;
        } else {
            self.gaps += seq;
        }
        self.last = Some(seq);
        self.events += 1;
    }
}

/// Reads whatever buffer `b` has: by event, by page, or a non-consuming look first.
fn read_some(b: &CpuBuffer<HeapPages>, writer: usize, seen: &mut Seen, round: u64) {
    if round % 7 == 1 {
        // A non-consuming look: intact events, in order unless the iterator says it missed
        // some (the writer recycled its page).
        let mut scratch = [0u8; 4096];
        let mut it = b.iter(&mut scratch);
        let mut last = None;
        for _ in 0..500 {
            let Some(ev) = it.next() else { break };
            let seq = u64::from_le_bytes(ev.payload[..8].try_into().unwrap());
            let who = u64::from_le_bytes(ev.payload[8..16].try_into().unwrap());
            assert_eq!(who, writer as u64, "iterated payload intact");
            assert_eq!(ev.ts, seq * 3, "iterated timestamp");
            if let (Some(l), false) = (last, ev.missed) {
                assert!(seq > l, "iterator order: {seq} after {l}");
            }
            last = Some(seq);
        }
        return;
    }
    let Some(mut c) = b.try_consumer() else {
        return;
    };
    if round % 3 == 0 {
        let mut page = b.alloc_read_page().unwrap();
        if c.read_page(&mut page).is_some() {
            let p = page.page();
            if p.missed_events() {
                seen.reported_lost += p.missed_count().unwrap_or(0);
            }
            for ev in p.events() {
                let ev = ev.unwrap();
                seen.saw(ev.payload, ev.ts, writer);
            }
        }
    } else {
        for _ in 0..2000 {
            let Some(ev) = c.next() else { break };
            seen.reported_lost += ev.lost;
            let (p, ts) = (ev.payload.to_vec(), ev.ts);
            seen.saw(&p, ts, writer);
        }
    }
}

fn run(mode: Mode) {
    let bufs: Arc<Vec<CpuBuffer<HeapPages>>> = Arc::new(
        (0..WRITERS)
            .map(|_| {
                let b = CpuBuffer::new(HeapPages, 16, 4096).unwrap();
                b.set_mode(mode);
                b
            })
            .collect(),
    );
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..READERS)
        .map(|r| {
            let (bufs, done) = (bufs.clone(), done.clone());
            std::thread::spawn(move || {
                let mut seen = vec![Seen::default(); WRITERS];
                let mut round = 0;
                while !done.load(Ordering::Acquire) {
                    for w in (r..WRITERS).step_by(READERS) {
                        read_some(&bufs[w], w, &mut seen[w], round);
                    }
                    round += 1;
                    std::thread::yield_now();
                }
                seen
            })
        })
        .collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let bufs = bufs.clone();
            std::thread::spawn(move || {
                let b = &bufs[w];
                let mut ok = 0u64;
                let mut payload = [0u8; 16];
                payload[8..].copy_from_slice(&(w as u64).to_le_bytes());
                for seq in 0..PER_WRITER {
                    payload[..8].copy_from_slice(&seq.to_le_bytes());
                    if b.write(&payload, &At(seq * 3)) {
                        ok += 1;
                    }
                    // Half the writers pause now and then, so readers keep up with them
                    // (swapping pages the writer is on) as well as fall behind the others.
                    if w % 2 == 1 && seq % 128 == 0 {
                        std::thread::yield_now();
                    }
                }
                ok
            })
        })
        .collect();
    let ok: Vec<u64> = writers.into_iter().map(|h| h.join().unwrap()).collect();
    done.store(true, Ordering::Release);
    let mut seen = [Seen::default(); WRITERS];
    for h in readers {
        for (w, s) in h.join().unwrap().into_iter().enumerate() {
            if s.events > 0 {
                seen[w] = s;
            }
        }
    }
    let concurrent: Vec<u64> = seen.iter().map(|s| s.events).collect();
    let mut total = 0;
    for w in 0..WRITERS {
        // Final drain.
        {
            let mut c = bufs[w].consumer();
            while let Some(ev) = c.next() {
                seen[w].reported_lost += ev.lost;
                let (p, ts) = (ev.payload.to_vec(), ev.ts);
                seen[w].saw(&p, ts, w);
            }
        }
        bufs[w].debug_check_bytes();
        let st = bufs[w].stats(0);
        let s = &seen[w];
        assert_eq!(st.written, ok[w], "writer {w}: committed");
        assert_eq!(st.read_events, s.events, "writer {w}: read counter");
        if st.entries != 0 {
            let mut d = String::new();
            bufs[w].dump_state(&mut d).unwrap();
            panic!("writer {w}: not drained: {st:?}\n{d}");
        }
        assert_eq!(st.commit_overrun, 0);
        assert_eq!(
            s.events + st.overrun + st.dropped_events,
            PER_WRITER,
            "writer {w}: read + overrun + dropped == written ({:?})",
            st
        );
        // Gaps in the sequence are exactly the losses (counting the tail end).
        let tail_gap = PER_WRITER - 1 - s.last.unwrap();
        match mode {
            Mode::Overwrite => {
                assert_eq!(st.dropped_events, 0);
                assert_eq!(s.gaps + tail_gap, st.overrun, "writer {w}: gaps");
                assert!(s.reported_lost <= st.overrun);
            }
            Mode::ProducerConsumer => {
                assert_eq!(st.overrun, 0);
                assert_eq!(s.gaps + tail_gap, st.dropped_events, "writer {w}: gaps");
            }
        }
        eprintln!(
            "{mode:?} writer {w}: read {} (concurrently {}), overrun {}, dropped {}",
            s.events, concurrent[w], st.overrun, st.dropped_events
        );
        total += s.events + st.overrun + st.dropped_events;
    }
    assert_eq!(total, EVENTS);
}

#[test]
fn ten_million_events_overwrite() {
    run(Mode::Overwrite);
}

#[test]
fn ten_million_events_producer_consumer() {
    run(Mode::ProducerConsumer);
}
