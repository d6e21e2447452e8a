//! What a declared tracepoint costs through the `TraceArray` instance: off (one relaxed load
//! of its key), enabled and recorded into the ring buffer, enabled but filtered out, and
//! recorded with a hist trigger aggregating it.
#![allow(missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::sim::{Sim, become_task};
use criterion::{Criterion, criterion_group, criterion_main};
use ftrace_core::tracepoint;
use ftrace_tracefs::WriteMode;
use ftrace_tracefs::array::TraceArray;
use std::hint::black_box;

tracepoint! {
    /// `bench:sample`.
    pub fn trace_sample(bucket: u32 => "unsigned int", len: u64 => "u64");
    record Sample;
    static SAMPLE = ("bench", "sample", 600, "\"bucket=%u len=%llu\", REC->bucket, REC->len");
}

static TRACE: TraceArray<Sim, 2> = TraceArray::new(Sim);

fn array_events(c: &mut Criterion) {
    become_task(0, 2);
    TRACE.register_tracepoint(&SAMPLE).unwrap();
    let mut fs = TRACE.tracefs().unwrap();
    let mut write = |path: &str, text: &str| {
        fs.write_all(path, text.as_bytes(), WriteMode::Truncate)
            .unwrap()
    };
    let fire = || trace_sample(black_box(3), black_box(100));
    c.bench_function("tracepoint, off", |b| b.iter(fire));
    write("events/bench/sample/enable", "1");
    c.bench_function("tracepoint, recorded", |b| b.iter(fire));
    write("events/bench/sample/filter", "len > 1000");
    c.bench_function("tracepoint, filtered out", |b| b.iter(fire));
    write("events/bench/sample/filter", "0");
    write("events/bench/sample/trigger", "hist:keys=bucket:vals=len");
    c.bench_function("tracepoint, recorded + hist", |b| b.iter(fire));
}

criterion_group!(benches, array_events);
criterion_main!(benches);
