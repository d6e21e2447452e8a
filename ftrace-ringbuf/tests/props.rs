//! Property test: any sequence of writes (any size, any time gap), discards, event reads, page
//! reads and non-consuming looks keeps the buffer's invariants: what a reader gets is the
//! newest suffix of what was committed (overwrite) or its oldest prefix (producer/consumer),
//! in order, intact, with exact timestamps, and the counters add up at every step.

use ftrace_ringbuf::{At, CpuBuffer, HeapPages, Mode};
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    Write { len: usize, gap: u64 },
    Discard { len: usize },
    Consume { n: usize },
    ReadPage,
    Look,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (8usize..200, prop_oneof![0u64..1000, Just(1u64 << 27), 0u64..(1u64 << 34)])
            .prop_map(|(len, gap)| Op::Write { len, gap }),
        1 => (8usize..200).prop_map(|len| Op::Discard { len }),
        1 => (1usize..20).prop_map(|n| Op::Consume { n }),
        1 => Just(Op::ReadPage),
        1 => Just(Op::Look),
    ]
}

fn payload(seq: u32, len: usize) -> Vec<u8> {
    let mut v: Vec<u8> = (0..len).map(|i| (seq as usize * 7 + i) as u8).collect();
    v[..4].copy_from_slice(&seq.to_le_bytes());
    v
}

/// (seq, ts) of an intact event.
fn check(p: &[u8], lens: &[usize]) -> u32 {
    let seq = u32::from_le_bytes(p[..4].try_into().unwrap());
    let len = lens[seq as usize];
    assert_eq!(&p[..len], &payload(seq, len)[..], "event {seq} intact");
    seq
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 1000,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn invariants_hold(
        ops in proptest::collection::vec(op(), 1..400),
        overwrite in any::<bool>(),
        pages in 2usize..5,
    ) {
        let mode = if overwrite { Mode::Overwrite } else { Mode::ProducerConsumer };
        let buf = CpuBuffer::new(HeapPages, pages, 512).unwrap();
        buf.set_mode(mode);
        let mut ts = 1000u64;
        let mut lens = Vec::new(); // payload length per seq
        let mut stamps = Vec::new(); // timestamp per seq
        let mut committed = Vec::new(); // seqs committed, in order
        let mut attempts = 0u64;
        let mut read: Vec<(u32, u64)> = Vec::new();
        for op in ops {
            match op {
                Op::Write { len, gap } => {
                    ts += gap;
                    let seq = lens.len() as u32;
                    lens.push(len);
                    stamps.push(ts);
                    attempts += 1;
                    if buf.write(&payload(seq, len), &At(ts)) {
                        committed.push(seq);
                    }
                }
                Op::Discard { len } => {
                    match buf.reserve(len, &At(ts)) {
                        Some(r) => r.discard(),
                        // A reservation refused for lack of room counts as dropped.
                        None => attempts += 1,
                    }
                }
                Op::Consume { n } => {
                    let mut c = buf.consumer();
                    for _ in 0..n {
                        let Some(ev) = c.next() else { break };
                        read.push((check(ev.payload, &lens), ev.ts));
                    }
                }
                Op::ReadPage => {
                    let mut page = buf.alloc_read_page().unwrap();
                    if buf.consumer().read_page(&mut page).is_some() {
                        for ev in page.page().events() {
                            let ev = ev.unwrap();
                            read.push((check(ev.payload, &lens), ev.ts));
                        }
                    }
                }
                Op::Look => {
                    let mut scratch = vec![0u8; 512];
                    let mut it = buf.iter(&mut scratch);
                    let mut last = None;
                    while let Some(ev) = it.next() {
                        prop_assert!(!ev.missed, "no writer runs concurrently");
                        let seq = check(ev.payload, &lens);
                        prop_assert_eq!(ev.ts, stamps[seq as usize]);
                        prop_assert!(last.is_none_or(|l| seq > l));
                        last = Some(seq);
                    }
                }
            }
            // (Debug builds: bytes folded per page == bytes counted per write.)
            buf.debug_check_bytes();
            let st = buf.stats(0);
            prop_assert_eq!(st.written, committed.len() as u64);
            prop_assert_eq!(st.read_events, read.len() as u64);
            prop_assert_eq!(st.entries + st.read_events + st.overrun, st.written);
            prop_assert_eq!(st.written + st.dropped_events, attempts);
            prop_assert_eq!(st.commit_overrun, 0);
        }
        {
            let mut c = buf.consumer();
            while let Some(ev) = c.next() {
                read.push((check(ev.payload, &lens), ev.ts));
            }
        }
        let st = buf.stats(0);
        prop_assert_eq!(st.entries, 0);
        // Exact timestamps, strictly increasing sequence.
        for &(seq, t) in &read {
            prop_assert_eq!(t, stamps[seq as usize], "timestamp of {}", seq);
        }
        for w in read.windows(2) {
            prop_assert!(w[0].0 < w[1].0, "order");
        }
        // Everything committed is read or counted lost, nothing else.
        let read_seqs: Vec<u32> = read.iter().map(|e| e.0).collect();
        let mut lost = committed.clone();
        lost.retain(|s| read_seqs.binary_search(s).is_err());
        prop_assert_eq!(lost.len() as u64, st.overrun);
        prop_assert!(read_seqs.iter().all(|s| committed.binary_search(s).is_ok()));
        if mode == Mode::ProducerConsumer {
            prop_assert_eq!(read_seqs, committed);
        }
    }
}
