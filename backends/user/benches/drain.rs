//! The drainer's cost per event: consuming a producer/consumer slot ring and encoding each
//! event into the compact events-file form ([`ftrace_user::stream`]), one thread, the ring
//! filled beforehand (cache-warm: the cross-core misses of a live drain are not in it).
//! "one at a time" is `StreamWriter::event` per event (a reservation and a flush check
//! each); "batched" is what the drainer does (`consume_at_most` into a `Batch` of 4096
//! events, one reservation per batch).

use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_main};
use ftrace_agent::buffer::{KIND_FUNC, KIND_GRAPH_ENT, KIND_GRAPH_RET};
use ftrace_ringbuf::slot::{Cursor, Drain, RingHeader, Slot, SlotEvent, SlotMode, SlotRing};
use ftrace_user::stream::{StreamHeader, StreamWriter};

/// Slots in the ring (the default per-thread buffer).
const SLOTS: u64 = 1 << 15;
/// Events per batch (the drainer's).
const BATCH: u64 = 4096;

/// How the consumed events are encoded.
#[derive(Clone, Copy)]
enum Encode {
    /// Not at all (the consume loop alone).
    No,
    /// `StreamWriter::event` per event.
    OneAtATime,
    /// `StreamWriter::batch` per 4096 events, as the drainer does.
    Batched,
}

/// Where the traced functions lie.
#[derive(Clone, Copy)]
enum Layout {
    /// Two functions side by side (every delta fits a byte or two).
    Tight,
    /// Functions spread over 1 MiB of text, called in a scrambled order ~10-40 ns apart, as
    /// an interpreter's are (Lua's: ip deltas of tens to hundreds of KiB, three-byte varints).
    Spread,
}

/// The `i`th event of a call-heavy thread under one caller.
fn event(i: u64, graph: bool, layout: Layout) -> SlotEvent {
    let (ip, ts) = match layout {
        Layout::Tight => (0x401000 + (i & 2) * 0x20, 1_000_000 + i * 20),
        Layout::Spread => {
            // A fixed scramble of the function index (xorshift of i / 2: entry and exit of
            // one call share a function).
            let mut x = (i / 2).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
            x ^= x >> 29;
            (0x401000 + (x & 0xf_fff0), 1_000_000 + i * 25 + (x & 15))
        }
    };
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

/// Which CPU wrote the ring before it is drained.
#[derive(Clone, Copy)]
enum Writer {
    /// The draining thread itself (the ring is in its cache).
    Same,
    /// A thread on another CPU, as in a live recording: every line the drainer reads comes
    /// from that CPU's cache.
    OtherCpu,
}

/// Pins the calling thread to `cpu` (best effort: a machine of one CPU keeps it where it is).
fn pin(cpu: usize) {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls only read it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

fn drain(c: &mut Criterion) {
    let mut g = c.benchmark_group("drain");
    pin(0);
    for (name, graph, encode, layout, writer) in [
        (
            "consume only (function)",
            false,
            Encode::No,
            Layout::Tight,
            Writer::Same,
        ),
        (
            "consume only (function, written on another CPU)",
            false,
            Encode::No,
            Layout::Tight,
            Writer::OtherCpu,
        ),
        (
            "consume + encode one at a time (function)",
            false,
            Encode::OneAtATime,
            Layout::Tight,
            Writer::Same,
        ),
        (
            "consume + encode batched (function)",
            false,
            Encode::Batched,
            Layout::Tight,
            Writer::Same,
        ),
        (
            "consume + encode batched (function, spread over 1 MiB)",
            false,
            Encode::Batched,
            Layout::Spread,
            Writer::Same,
        ),
        (
            "consume + encode one at a time (function_graph)",
            true,
            Encode::OneAtATime,
            Layout::Tight,
            Writer::Same,
        ),
        (
            "consume + encode batched (function_graph)",
            true,
            Encode::Batched,
            Layout::Tight,
            Writer::Same,
        ),
        (
            "consume + encode batched (function_graph, written on another CPU)",
            true,
            Encode::Batched,
            Layout::Tight,
            Writer::OtherCpu,
        ),
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
                    let fill = |i: &mut u64| {
                        for _ in 0..SLOTS - 1 {
                            ring.write(event(*i, graph, layout))
                                .expect("room for a ring's worth");
                            *i += 1;
                        }
                    };
                    match writer {
                        Writer::Same => fill(&mut i),
                        Writer::OtherCpu => std::thread::scope(|s| {
                            s.spawn(|| {
                                pin(1);
                                fill(&mut i)
                            });
                        }),
                    }
                    let start = Instant::now();
                    let n = match encode {
                        Encode::No => ring.consume(&mut cursor, Drain::Live, |ev, missed| {
                            std::hint::black_box((ev, missed));
                        }),
                        Encode::OneAtATime => {
                            ring.consume(&mut cursor, Drain::Live, |ev, missed| {
                                out.event(&ev, missed).expect("a sink never fails");
                            })
                        }
                        Encode::Batched => {
                            let mut n = 0;
                            loop {
                                let mut batch = out.batch(BATCH as usize);
                                let got = ring.consume_at_most(
                                    &mut cursor,
                                    Drain::Live,
                                    BATCH,
                                    |ev, missed| batch.event(&ev, missed),
                                );
                                drop(batch);
                                out.flush_if_full().expect("a sink never fails");
                                n += got;
                                if got < BATCH {
                                    break n;
                                }
                            }
                        }
                    };
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
