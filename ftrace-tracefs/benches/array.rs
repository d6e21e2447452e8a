//! What a traced call costs through the `TraceArray` entry points, per tracer: `nop` (no ops
//! registered), `function` (one entry recorded), `function_graph` (entry and return recorded,
//! the return address swapped through the shadow stack).
#![allow(missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use common::sim::{DO_WORK, RETURN_HANDLER, SCHEDULE, Sim, become_task};
use criterion::{Criterion, criterion_group, criterion_main};
use ftrace_tracefs::WriteMode;
use ftrace_tracefs::array::TraceArray;
use std::hint::black_box;

static TRACE: TraceArray<Sim, 2> = TraceArray::new(Sim);

fn traced_call() {
    let mut slot = SCHEDULE + 0x10;
    TRACE.on_entry(black_box(DO_WORK), SCHEDULE + 0x10, &mut slot);
    if slot == RETURN_HANDLER {
        black_box(TRACE.on_return());
    }
}

fn array(c: &mut Criterion) {
    become_task(0, 2);
    let mut fs = TRACE.tracefs().unwrap();
    for tracer in ["nop", "function", "function_graph"] {
        fs.write_all("current_tracer", tracer.as_bytes(), WriteMode::Truncate)
            .unwrap();
        c.bench_function(&format!("traced call, {tracer}"), |b| b.iter(traced_call));
    }
}

criterion_group!(benches, array);
criterion_main!(benches);
