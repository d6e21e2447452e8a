//! Formatting throughput (lines per second) of function and function_graph output.
//!
//! Events are built in memory (as a decoded ring-buffer page would give them) and printed
//! through the same `TraceWriter` the `trace` file and `ftrace report` use.
#![allow(missing_docs)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ftrace_core::entry::{FtraceEntry, FtraceGraphEntEntry, FtraceGraphRetEntry, Pod, TraceEntry};
use ftrace_core::symbols::SortedSymbols;
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::{EventRef, TraceIter};

struct Names;
impl TaskNames for Names {
    fn comm(&self, _pid: i32) -> Option<&str> {
        Some("bench-task")
    }
}

const N: usize = 4096;

fn symbols() -> SortedSymbols {
    let mut s = SortedSymbols::new();
    for i in 0..256u64 {
        s.push(
            &format!("function_number_{i}"),
            0xffff_ffff_8100_0000 + i * 0x100,
            0x100,
            None,
        );
    }
    s.finish();
    s
}

fn ent(type_: u16) -> TraceEntry {
    TraceEntry {
        type_,
        flags: 0,
        preempt_count: 0,
        pid: 1234,
    }
}

fn function_events() -> Vec<(u32, u64, Vec<u8>)> {
    (0..N)
        .map(|i| {
            let e = FtraceEntry {
                ent: ent(1),
                ip: 0xffff_ffff_8100_0004 + (i as u64 % 256) * 0x100,
                parent_ip: 0xffff_ffff_8100_0040 + ((i as u64 + 7) % 256) * 0x100,
            };
            (
                (i % 2) as u32,
                1_000_000_000 + i as u64 * 1000,
                e.as_bytes().to_vec(),
            )
        })
        .collect()
}

/// Nested calls three deep with a leaf at the bottom: entries, leaves and returns in the
/// proportions a real graph trace has.
fn graph_events() -> Vec<(u32, u64, Vec<u8>)> {
    let mut v = Vec::new();
    let mut ts = 1_000_000_000u64;
    let f = |i: u64| 0xffff_ffff_8100_0000 + (i % 256) * 0x100;
    let mut i = 0u64;
    while v.len() < N {
        for d in 0..3 {
            let e = FtraceGraphEntEntry {
                ent: ent(11),
                func: f(i + d),
                depth: d as i32,
            };
            v.push((0, ts, e.as_bytes().to_vec()));
            ts += 100;
        }
        for d in (0..4).rev() {
            if d == 3 {
                let e = FtraceGraphEntEntry {
                    ent: ent(11),
                    func: f(i + 3),
                    depth: 3,
                };
                v.push((0, ts, e.as_bytes().to_vec()));
            }
            let r = FtraceGraphRetEntry {
                ent: ent(10),
                func: f(i + d),
                depth: d as i32,
                overrun: 0,
                calltime: ts - 1000 * (4 - d),
                rettime: ts,
                backport_calltime: 0,
                backport_rettime: 0,
            };
            v.push((0, ts, r.as_bytes().to_vec()));
            ts += 100;
        }
        i += 1;
    }
    v
}

fn run(
    c: &mut Criterion,
    name: &str,
    evs: &[(u32, u64, Vec<u8>)],
    style: OutputStyle,
    lines: usize,
) {
    let syms = symbols();
    let env = OutputEnv::new(&syms, &Names, 2);
    let mut out = Vec::with_capacity(1 << 20);
    let mut g = c.benchmark_group("format");
    g.throughput(Throughput::Elements(lines as u64));
    g.bench_function(name, |b| {
        b.iter(|| {
            let mut l = EventLists::new(2);
            for (cpu, ts, d) in evs {
                l.push(EventRef::new(*cpu, *ts, d));
            }
            let mut st = [GraphCpuState::INIT; 2];
            let mut w = TraceWriter::new(style, &mut st, Overruns::None);
            let mut it = TraceIter::new(&mut l, None);
            out.clear();
            w.write_events(&mut out, &env, &mut it).unwrap();
            out.len()
        })
    });
    g.finish();
}

fn bench(c: &mut Criterion) {
    let f = function_events();
    run(c, "function_lines", &f, OutputStyle::Default, f.len());
    let g = graph_events();
    // Each leaf's entry and return print as one line.
    let lines = g.len() - g.len() / 7;
    run(
        c,
        "function_graph_lines",
        &g,
        OutputStyle::Graph(GraphFlags::DEFAULT),
        lines,
    );
}

criterion_group!(benches, bench);
criterion_main!(benches);
