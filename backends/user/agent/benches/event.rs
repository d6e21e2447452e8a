//! Recording a trace event (`ftrace/tracepoint.h`'s enabled path past the call): the record
//! split into slots ([`event::encode`]) and written as one span, beside a function entry's
//! one-slot write on the same ring (what the function tracer's event costs here).

use criterion::{Criterion, criterion_main};
use ftrace_agent::buffer::{self, KIND_FUNC};
use ftrace_agent::event;
use ftrace_ringbuf::slot::SlotEvent;

fn write(c: &mut Criterion) {
    let len = buffer::HEADER_SIZE + (1 << 15) * buffer::SLOT_SIZE;
    let mut mem = vec![0u64; len / 8];
    // SAFETY: zeroed, 8-aligned, `len` bytes, alive for the whole benchmark.
    let w = unsafe {
        buffer::init(
            mem.as_mut_ptr().cast(),
            len,
            buffer::SlotMode::Overwrite,
            1,
            1,
            b"bench",
        )
    };
    // SAFETY: `w` describes `mem`.
    let ring = unsafe { w.ring() };
    let mut ts = 0u64;
    c.bench_function("function entry slot", |b| {
        b.iter(|| {
            ts += 1;
            // SAFETY: `w` describes `mem`.
            unsafe { w.write(ts, ts, 7, KIND_FUNC, 0, 0) }
        })
    });
    for (name, payload) in [
        ("trace event, one u64 field (1 slot)", &[7u8; 8][..]),
        ("trace event, 28-byte fields (2 slots)", &[7u8; 28][..]),
        ("trace event, 64-byte fields (3 slots)", &[7u8; 64][..]),
    ] {
        c.bench_function(name, |b| {
            b.iter(|| {
                ts += 1;
                let mut tail = [SlotEvent::default(); 8];
                let (head, n) = event::encode(ts, 0, 1024, payload, &mut tail).unwrap();
                let _ = ring.write_span(head, &tail[..n]);
            })
        });
    }
    drop(mem);
}

// The macro-generated group function has no doc comment.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::write);
}
use group::benches;
criterion_main!(benches);
