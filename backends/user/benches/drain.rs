//! The drainer's cost per event: consuming a producer/consumer slot ring and encoding each
//! event into the compact events-file form ([`ftrace_user::stream`]), one thread, the ring
//! filled beforehand (cache-warm: the cross-core misses of a live drain are not in it).

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_main};
use ftrace_agent::buffer::{KIND_FUNC, KIND_GRAPH_ENT, KIND_GRAPH_RET};
use ftrace_ringbuf::slot::{Cursor, Drain, RingHeader, Slot, SlotEvent, SlotMode, SlotRing};
use ftrace_user::stream::{StreamHeader, StreamWriter};

/// Slots in the ring (the default per-thread buffer).
const SLOTS: u64 = 1 << 15;

/// The `i`th event of a call-heavy thread: two functions, ~20 ns apart, under one caller.
fn event(i: u64, graph: bool) -> SlotEvent {
    let ip = 0x401000 + (i & 2) * 0x20;
    let ts = 1_000_000 + i * 20;
    let (kind, arg) = match (graph, i & 1) {
        (false, _) => (KIND_FUNC, 0x401200),
        (true, 0) => (KIND_GRAPH_ENT, 0x401200),
        (true, _) => (KIND_GRAPH_RET, ts - 15),
    };
    SlotEvent {
        ts,
        ip,
        arg,
        kind,
        cpu: 1,
    }
}

fn drain(c: &mut Criterion) {
    let mut g = c.benchmark_group("drain");
    for (name, graph, encode) in [
        ("consume only (function)", false, false),
        ("consume + encode (function)", false, true),
        ("consume + encode (function_graph)", true, true),
    ] {
        let header = RingHeader::new(SLOTS, SlotMode::ProducerConsumer);
        let slots: Vec<Slot> = (0..SLOTS).map(|_| Slot::default()).collect();
        let ring = SlotRing::new(&header, &slots).expect("a power-of-two ring");
        // Criterion may run the routine more than once: the consumer's state lives with the
        // ring.
        let mut cursor = Cursor::default();
        let mut out = StreamWriter::new(std::io::sink(), &StreamHeader::default())
            .expect("a sink takes the header");
        let mut i = 0u64;
        g.throughput(Throughput::Elements(SLOTS - 1));
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut t = Duration::ZERO;
                for _ in 0..iters {
                    for _ in 0..SLOTS - 1 {
                        ring.write(event(i, graph))
                            .expect("room for a ring's worth");
                        i += 1;
                    }
                    let start = Instant::now();
                    let n = ring.consume(&mut cursor, Drain::Live, |ev, missed| {
                        if encode {
                            out.event(&ev, missed).expect("a sink never fails");
                        } else {
                            std::hint::black_box((ev, missed));
                        }
                    });
                    t += start.elapsed();
                    assert_eq!(n, SLOTS - 1);
                }
                t
            });
        });
    }
    g.finish();
}

// The macro-generated group function has no doc comment.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::drain);
}
use group::benches;
criterion_main!(benches);
