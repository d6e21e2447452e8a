//! What a `tracepoint!` call site costs: off (one relaxed load of its key), and on with one
//! `u64` field, the probe writing the record into a ring buffer with the same clock the
//! simulated platform gives the function tracer; beside it, in the same run, the function
//! tracer's traced call through `TraceArray` (as `benches/array.rs` measures it).
#![allow(missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use common::sim::{DO_WORK, RETURN_HANDLER, SCHEDULE, Sim, become_task};
use criterion::{Criterion, criterion_group, criterion_main};
use ftrace_core::platform::TraceClock;
use ftrace_core::tracepoint;
use ftrace_core::tracepoint::Tracepoint;
use ftrace_ringbuf::{CpuBuffer, HeapPages};
use ftrace_tracefs::WriteMode;
use ftrace_tracefs::array::TraceArray;

tracepoint! {
    /// `bench:bench_value`.
    pub fn trace_bench_value(value: u64 => "u64");
    record BenchValue;
    static BENCH_VALUE = ("bench", "bench_value", 500, "\"value=%llu\", REC->value");
}

static TRACE: TraceArray<Sim, 2> = TraceArray::new(Sim);
static BUF: OnceLock<CpuBuffer<HeapPages>> = OnceLock::new();
static CLOCK: AtomicU64 = AtomicU64::new(1_000_000_000);

struct Clock;

impl TraceClock for Clock {
    const NAME: &'static str = "counter";
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        CLOCK.fetch_add(1000, Ordering::Relaxed)
    }
}

/// The instance's side: the common fields, then reserve, copy, commit.
fn probe(_tp: &Tracepoint, rec: &mut [u8]) {
    rec[4..8].copy_from_slice(&2i32.to_le_bytes());
    let buf = BUF.get().unwrap();
    if let Some(mut r) = buf.reserve(rec.len(), &Clock) {
        r.data()[..rec.len()].copy_from_slice(rec);
        r.commit();
    }
}

fn traced_call() {
    let mut slot = SCHEDULE + 0x10;
    TRACE.on_entry(black_box(DO_WORK), SCHEDULE + 0x10, &mut slot);
    if slot == RETURN_HANDLER {
        black_box(TRACE.on_return());
    }
}

fn tracepoints(c: &mut Criterion) {
    BUF.set(CpuBuffer::new(HeapPages, 256, 4096).unwrap())
        .unwrap();
    let mut g = c.benchmark_group("tracepoint");
    g.bench_function("off, 1 u64 field", |b| {
        b.iter(|| trace_bench_value(black_box(7)))
    });
    BENCH_VALUE.connect(probe).unwrap();
    g.bench_function("on, 1 u64 field, into a ring buffer", |b| {
        b.iter(|| trace_bench_value(black_box(7)))
    });
    BENCH_VALUE.disconnect();
    become_task(0, 2);
    let mut fs = TRACE.tracefs().unwrap();
    fs.write_all("current_tracer", b"function", WriteMode::Truncate)
        .unwrap();
    g.bench_function("function tracer, traced call (TraceArray)", |b| {
        b.iter(traced_call)
    });
    g.finish();
}

criterion_group!(benches, tracepoints);
criterion_main!(benches);
