//! The tracers' recording logic, driven the way a backend drives them, with the recorded
//! entries checked directly and through the formatter.

use std::cell::{Cell, RefCell};

use ftrace_core::EventId;
use ftrace_core::entry::{FtraceEntry, FtraceGraphEntEntry, Pod};
use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::platform::{ExecContext, TaskContext};
use ftrace_core::symbols::SortedSymbols;
use ftrace_tracers::event::read_graph_ret;
use ftrace_tracers::function::{FunctionTracer, trace_marker_raw_write, trace_marker_write};
use ftrace_tracers::function_graph::{
    FunctionGraphTracer, FunctionProfiler, GraphEntry, GraphFunctions, ShadowStack,
};
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::nop::NopTracer;
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{NoTaskNames, OutputEnv, TaskNames};
use ftrace_tracers::profiler::{GraphTime, ProfileMode, ProfileTable};
use ftrace_tracers::tracer::{AdmitAll, EntrySink, Registry, Tracer};
use ftrace_tracers::{EventRef, Options, TraceIter, TraceOptions};

/// Records entries with a clock, as a one-CPU ring buffer would.
#[derive(Default)]
struct VecSink {
    entries: RefCell<Vec<(u64, Vec<u8>)>>,
    clock: Cell<u64>,
    full: Cell<bool>,
}

impl EntrySink for VecSink {
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        if self.full.get() {
            return false;
        }
        let mut b = vec![0u8; len];
        fill(&mut b);
        self.clock.set(self.clock.get() + 1);
        self.entries.borrow_mut().push((self.clock.get(), b));
        true
    }
}

struct Task(i32);

impl TaskContext for Task {
    fn current_pid(&self) -> i32 {
        self.0
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx::new(TraceFlags::IRQS_OFF, 1, 0)
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

fn ids(sink: &VecSink) -> Vec<u16> {
    sink.entries
        .borrow()
        .iter()
        .map(|(_, b)| u16::from_le_bytes([b[0], b[1]]))
        .collect()
}

#[test]
fn function_tracer_records_exactly_what_the_filter_admits() {
    let t = FunctionTracer::new();
    let sink = VecSink::default();
    let filter = |ip: u64| ip == 0x10 || ip == 0x30;
    // Not the current tracer yet: nothing.
    assert!(!t.trace_call(0x10, 0x1, &filter, &Task(7), &sink));
    t.init().unwrap();
    let calls = [0x10, 0x20, 0x30, 0x10, 0x40];
    let n = calls
        .iter()
        .filter(|&&ip| t.trace_call(ip, ip + 1, &filter, &Task(7), &sink))
        .count();
    assert_eq!(n, 3);
    assert_eq!(t.recorded(), 3);
    let got: Vec<(u64, u64, i32, u8, u8)> = sink
        .entries
        .borrow()
        .iter()
        .map(|(_, b)| {
            let e = FtraceEntry::read_from(b).unwrap();
            (
                e.ip,
                e.parent_ip,
                e.ent.pid,
                e.ent.flags,
                e.ent.preempt_count,
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (0x10, 0x11, 7, 1, 1),
            (0x30, 0x31, 7, 1, 1),
            (0x10, 0x11, 7, 1, 1)
        ]
    );
    assert_eq!(ids(&sink), [1, 1, 1]);
    t.stop();
    assert!(!t.trace_call(0x10, 0, &AdmitAll, &Task(7), &sink));
    t.start();
    assert!(t.trace_call(0x99, 0, &AdmitAll, &Task(7), &sink));
    t.reset();
    assert!(!t.trace_call(0x99, 0, &AdmitAll, &Task(7), &sink));
    // A full buffer drops and does not count.
    t.init().unwrap();
    sink.full.set(true);
    assert!(!t.trace_call(0x10, 0, &AdmitAll, &Task(7), &sink));
    assert_eq!(t.recorded(), 4);
}

#[test]
fn func_no_repeats_folds_identical_calls() {
    use ftrace_tracers::function::RepeatState;
    let t = FunctionTracer::new();
    t.init().unwrap();
    let sink = VecSink::default();
    let mut last = RepeatState::default();
    // a a a a b: a is recorded once, then a func_repeats (3 more, last at 4000), then b.
    for (ip, now) in [
        (0xa, 1000),
        (0xa, 2000),
        (0xa, 3000),
        (0xa, 4000),
        (0xb, 9000),
    ] {
        t.trace_call_no_repeats(ip, 0xe, now, &mut last, &AdmitAll, &Task(3), &sink);
    }
    assert_eq!(ids(&sink), [1, 19, 1]);
    // Printed as the kernel does, with the last repeat's time: the record is stamped 3 ticks
    // (3000 ns) into this sink's clock, 5000 ns after the last repeat.
    let mut entries = sink.entries.borrow_mut();
    entries[1].0 = 9; // the func_repeats record was written at 9000 ns
    drop(entries);
    let got = format(&sink, &syms(), OutputStyle::Default, TraceOptions::DEFAULT);
    let line = got.lines().nth(1).unwrap();
    assert!(
        line.ends_with("0.000009: a <-e (repeats: 3, last_ts:     0.000004)"),
        "{line}"
    );
}

/// A call tree: (function, children).
struct Call(u64, Vec<Call>);

/// Runs `call` as a backend would: entry hook, children, return hook, one clock tick per step.
fn run<const N: usize>(
    t: &FunctionGraphTracer,
    stack: &mut ShadowStack<N>,
    filter: &GraphFunctions<'_>,
    sink: &VecSink,
    now: &Cell<u64>,
    call: &Call,
) {
    now.set(now.get() + 1000);
    let ret = 0xdead_0000 + call.0;
    let hooked = t.entry(stack, call.0, ret, now.get(), filter, &Task(5), sink);
    for c in &call.1 {
        run(t, stack, filter, sink, now, c);
    }
    now.set(now.get() + 1000);
    if hooked == GraphEntry::Hooked {
        let exit = t.exit(stack, now.get(), &Task(5), sink).unwrap();
        assert_eq!(exit.func, call.0, "LIFO");
        assert_eq!(exit.ret, ret, "the original return address comes back");
    }
}

/// Runs [`tree`] through `t` with no graph filter, from time 0; returns what it recorded.
fn run_tree<const N: usize>(t: &FunctionGraphTracer, stack: &mut ShadowStack<N>) -> VecSink {
    let (sink, now) = (VecSink::default(), Cell::new(0));
    run(t, stack, &GraphFunctions::default(), &sink, &now, &tree());
    sink
}

fn tree() -> Call {
    // a { b { c { d } } e }  f
    Call(
        0xa,
        vec![
            Call(0xb, vec![Call(0xc, vec![Call(0xd, vec![])])]),
            Call(0xe, vec![]),
        ],
    )
}

/// (is_entry, func, depth, overrun) of every recorded graph entry.
fn graph_records(sink: &VecSink) -> Vec<(bool, u64, i32, u32)> {
    sink.entries
        .borrow()
        .iter()
        .map(|(_, b)| {
            let id = u16::from_le_bytes([b[0], b[1]]);
            if id == EventId::FuncgraphEntry.as_u16() {
                let e = FtraceGraphEntEntry::read_from(b).unwrap();
                (true, e.func, e.depth, 0)
            } else {
                let r = read_graph_ret(b).unwrap();
                (false, r.func, r.depth, r.overrun)
            }
        })
        .collect()
}

/// Every entry has a matching exit at the same depth, properly nested.
fn assert_paired(recs: &[(bool, u64, i32, u32)]) {
    let mut open: Vec<(u64, i32)> = Vec::new();
    for &(is_entry, func, depth, _) in recs {
        if is_entry {
            assert_eq!(
                depth as usize,
                open.len(),
                "entry depth is the nesting level"
            );
            open.push((func, depth));
        } else {
            assert_eq!(
                open.pop(),
                Some((func, depth)),
                "exit matches the last open entry"
            );
        }
    }
    assert!(open.is_empty(), "every entry got its exit");
}

#[test]
fn function_graph_pairs_every_entry_with_its_exit() {
    let t = FunctionGraphTracer::new();
    t.init().unwrap();
    let (sink, now) = (VecSink::default(), Cell::new(0));
    let mut stack = ShadowStack::<50>::new();
    let f = GraphFunctions::default();
    run(&t, &mut stack, &f, &sink, &now, &tree());
    run(&t, &mut stack, &f, &sink, &now, &Call(0xf, vec![]));
    let recs = graph_records(&sink);
    assert_eq!(recs.len(), 12);
    assert_paired(&recs);
    assert_eq!(stack.depth(), 0);
    // Durations are rettime - calltime of each call.
    let b = sink.entries.borrow();
    let d = read_graph_ret(&b[4].1).unwrap();
    assert_eq!((d.func, d.rettime - d.calltime), (0xd, 1000));
}

#[test]
fn function_graph_respects_max_depth() {
    let t = FunctionGraphTracer::new();
    t.init().unwrap();
    t.set_max_depth_str("2\n").unwrap();
    assert_eq!(t.set_max_depth_str("x"), Err(ftrace_core::Errno::EINVAL));
    let mut stack = ShadowStack::<50>::new();
    let sink = run_tree(&t, &mut stack);
    let recs = graph_records(&sink);
    assert_paired(&recs);
    assert!(recs.iter().all(|r| r.2 < 2), "nothing at depth 2 or deeper");
    let funcs: Vec<u64> = recs.iter().filter(|r| r.0).map(|r| r.1).collect();
    assert_eq!(funcs, [0xa, 0xb, 0xe]);
}

#[test]
fn function_graph_filters_roots_and_notrace() {
    let t = FunctionGraphTracer::new();
    t.init().unwrap();
    let (sink, now) = (VecSink::default(), Cell::new(0));
    let mut stack = ShadowStack::<50>::new();
    // set_graph_function=b: only b and what it calls, b at depth 0.
    let f = GraphFunctions {
        functions: &[0xb],
        notrace: &[],
    };
    run(&t, &mut stack, &f, &sink, &now, &tree());
    run(&t, &mut stack, &f, &sink, &now, &Call(0xf, vec![]));
    let recs = graph_records(&sink);
    assert_paired(&recs);
    let funcs: Vec<(u64, i32)> = recs.iter().filter(|r| r.0).map(|r| (r.1, r.2)).collect();
    assert_eq!(funcs, [(0xb, 0), (0xc, 1), (0xd, 2)]);

    // set_graph_notrace=b: b and everything under it vanish, the rest stays.
    let sink = VecSink::default();
    let f = GraphFunctions {
        functions: &[],
        notrace: &[0xb],
    };
    run(&t, &mut stack, &f, &sink, &now, &tree());
    let recs = graph_records(&sink);
    assert_paired(&recs);
    let funcs: Vec<u64> = recs.iter().filter(|r| r.0).map(|r| r.1).collect();
    assert_eq!(funcs, [0xa, 0xe]);
    assert_eq!(stack.depth(), 0);
}

#[test]
fn function_graph_counts_overruns_like_the_kernel() {
    let t = FunctionGraphTracer::new();
    t.init().unwrap();
    // A 2-frame shadow stack: c and d do not fit.
    let mut stack = ShadowStack::<2>::new();
    let sink = run_tree(&t, &mut stack);
    assert_eq!(stack.overrun(), 2);
    let recs = graph_records(&sink);
    assert_paired(&recs);
    let rets: Vec<(u64, u32)> = recs.iter().filter(|r| !r.0).map(|r| (r.1, r.3)).collect();
    // Every return after the overflow carries the running count.
    assert_eq!(rets, [(0xb, 2), (0xe, 2), (0xa, 2)]);
}

#[test]
fn function_graph_thresh_records_only_slow_returns() {
    let t = FunctionGraphTracer::new();
    t.init().unwrap();
    t.set_thresh_ns(2500);
    let mut stack = ShadowStack::<50>::new();
    let sink = run_tree(&t, &mut stack);
    let recs = graph_records(&sink);
    assert!(recs.iter().all(|r| !r.0), "no entries under tracing_thresh");
    let funcs: Vec<u64> = recs.iter().map(|r| r.1).collect();
    // d, e take 1000 ns; c 3000; b 5000; a 9000.
    assert_eq!(funcs, [0xc, 0xb, 0xa]);
}

struct Names;
impl TaskNames for Names {
    fn comm(&self, _: i32) -> Option<&str> {
        Some("prog")
    }
}

fn format(sink: &VecSink, syms: &SortedSymbols, style: OutputStyle, opts: TraceOptions) -> String {
    let entries = sink.entries.borrow();
    let mut l = EventLists::new(1);
    for (ts, b) in entries.iter() {
        l.push(EventRef::new(0, *ts * 1000, b));
    }
    let mut env = OutputEnv::new(syms, &Names, 1);
    env.options = opts;
    let mut st = [GraphCpuState::INIT];
    let mut w = TraceWriter::new(style, &mut st, Overruns::None);
    let mut it = TraceIter::new(&mut l, None);
    let mut out = Vec::new();
    w.write_events(&mut out, &env, &mut it).unwrap();
    String::from_utf8(out).unwrap()
}

fn syms() -> SortedSymbols {
    let mut s = SortedSymbols::new();
    for (n, a) in [("a", 0xa), ("b", 0xb), ("c", 0xc), ("d", 0xd), ("e", 0xe)] {
        s.push(n, a, 1, None);
    }
    s.push("tracing_mark_write", 0x100, 0x100, None);
    s.finish();
    s
}

#[test]
fn recorded_graph_prints_as_a_call_graph() {
    let t = FunctionGraphTracer::new();
    t.init().unwrap();
    let mut stack = ShadowStack::<50>::new();
    let sink = run_tree(&t, &mut stack);
    let got = format(
        &sink,
        &syms(),
        OutputStyle::Graph(GraphFlags::DEFAULT),
        TraceOptions::DEFAULT,
    );
    assert_eq!(
        got,
        " 0)               |  a() {\n\
        \x20\x200)               |    b() {\n\
        \x20\x200)               |      c() {\n\
        \x20\x200)   1.000 us    |        d();\n\
        \x20\x200)   3.000 us    |      }\n\
        \x20\x200)   5.000 us    |    }\n\
        \x20\x200)   1.000 us    |    e();\n\
        \x20\x200)   9.000 us    |  }\n"
            .replace("\x20\x200)", " 0)")
    );
}

#[test]
fn markers_record_and_print_as_the_kernel_shows_them() {
    let sink = VecSink::default();
    let o = TraceOptions::DEFAULT;
    assert_eq!(
        trace_marker_write(b"hello\n", 0x1df, o, &Task(144), &sink),
        Ok(6)
    );
    assert_eq!(
        trace_marker_write(b"no-newline", 0x1df, o, &Task(144), &sink),
        Ok(10)
    );
    // markers=0 refuses the write (Linux 6.12: EINVAL) and records nothing.
    assert_eq!(
        trace_marker_write(b"x", 0x1df, o - TraceOptions::MARKERS, &Task(144), &sink),
        Err(ftrace_core::Errno::EINVAL)
    );
    let mut raw = 1u32.to_ne_bytes().to_vec();
    raw.extend_from_slice(b"ABCDEFGH");
    assert_eq!(trace_marker_raw_write(&raw, o, &Task(144), &sink), Ok(12));
    assert_eq!(
        trace_marker_raw_write(b"ab", o, &Task(144), &sink),
        Err(ftrace_core::Errno::EINVAL)
    );
    assert_eq!(
        trace_marker_raw_write(&raw, o - TraceOptions::MARKERS, &Task(144), &sink),
        Err(ftrace_core::Errno::EINVAL)
    );
    let got = format(&sink, &syms(), OutputStyle::Default, o);
    let lines: Vec<&str> = got.lines().map(|l| l.split_once(": ").unwrap().1).collect();
    assert_eq!(
        lines,
        [
            "tracing_mark_write: hello",
            "tracing_mark_write: no-newline",
            // 09-marker/trace_pipe.txt: the kernel pads the raw write to 16 bytes.
            "# 1 buf: 41 42 43 44 45 46 47 48 00 00 00 00 00 00 00 00",
        ]
    );
    // Under function_graph, markers become comments.
    let got = format(&sink, &syms(), OutputStyle::Graph(GraphFlags::DEFAULT), o);
    assert!(
        got.starts_with(" 0)               |  /* hello */\n"),
        "{got}"
    );
}

#[test]
fn profiler_tables_print_trace_stat() {
    let mut t = ProfileTable::with_capacity(4);
    for (ip, ns) in [(0xa, 3000), (0xa, 5000), (0xb, 1000), (0xc, 100)] {
        t.hit(ip);
        t.add_time(ip, ns);
    }
    for ip in 0x1000..0x1100 {
        t.hit(ip); // growth keeps earlier records
    }
    assert_eq!(t.get(0xa).unwrap().hits, 2);
    let s = syms();
    let mut out = String::new();
    let mut small = ProfileTable::with_capacity(4);
    for (ip, ns) in [(0xa, 3000), (0xa, 5000), (0xb, 1000)] {
        small.hit(ip);
        small.add_time(ip, ns);
    }
    small
        .write_stat(&mut out, &s, ProfileMode::Graph, 0)
        .unwrap();
    // s^2 of {3000, 5000} ns = (2*(9e6+25e6) - 8000^2) / (2*1*1000) = 2000 -> "2.000 us".
    assert_eq!(
        out,
        "  Function                               Hit    Time            Avg             s^2\n\
         \x20 --------                               ---    ----            ---             ---\n\
         \x20 a                                        2    8.000 us        4.000 us        2.000 us    \n\
         \x20 b                                        1    1.000 us        1.000 us        0.000 us    \n"
    );
    let mut out = String::new();
    small
        .write_stat(&mut out, &s, ProfileMode::Hits, 0)
        .unwrap();
    assert!(out.ends_with("  a                                        2\n  b                                        1\n"));
    // tracing_thresh hides rows with a smaller average.
    let mut out = String::new();
    small
        .write_stat(&mut out, &s, ProfileMode::Graph, 2000)
        .unwrap();
    assert!(out.contains("  a ") && !out.contains("  b "));
    // Counters taken elsewhere add up to the same record as the calls themselves.
    let mut merged = ProfileTable::with_capacity(4);
    merged.add(&small.get(0xa).unwrap());
    merged.add(&small.get(0xa).unwrap());
    let r = merged.get(0xa).unwrap();
    assert_eq!((r.hits, r.time, r.time_squared), (4, 16_000, 68_000_000));
}

#[test]
fn profiler_fed_by_function_graph_with_and_without_graph_time() {
    let t = FunctionGraphTracer::new().with_profiler(FunctionProfiler::Present);
    t.init().unwrap();
    let sink = VecSink::default();
    let mut stack = ShadowStack::<50>::new();
    let f = GraphFunctions::default();
    let (mut with, mut without) = (ProfileTable::default(), ProfileTable::default());
    // a { b(); } : a 0..5000, b 1000..3000
    for (ip, now) in [(0xa, 0), (0xb, 1000)] {
        t.entry(&mut stack, ip, 0, now, &f, &Task(1), &sink);
        with.hit(ip);
        without.hit(ip);
    }
    for now in [3000, 5000] {
        let exit = t.exit(&mut stack, now, &Task(1), &sink).unwrap();
        with.graph_return(&exit, GraphTime::Included);
        without.graph_return(&exit, GraphTime::Excluded);
    }
    assert_eq!(with.get(0xa).unwrap().time, 5000);
    assert_eq!(without.get(0xa).unwrap().time, 3000);
    assert_eq!(without.get(0xb).unwrap().time, 2000);
    let o = Options {
        trace: TraceOptions::DEFAULT,
        tracer: t.default_flags(),
    };
    let mut s = String::new();
    o.write_listing(&mut s, t.options()).unwrap();
    assert!(s.ends_with("sleep-time\ngraph-time\n"));
}

#[test]
fn registry_switches_tracers_and_lists_them() {
    static NOP: NopTracer = NopTracer;
    static FUNC: FunctionTracer = FunctionTracer::new();
    static GRAPH: FunctionGraphTracer = FunctionGraphTracer::new();
    let mut r = Registry::new(&NOP);
    r.register(&FUNC).unwrap();
    r.register(&GRAPH).unwrap();
    assert_eq!(r.register(&FUNC), Err(ftrace_core::Errno::EBUSY));
    let mut s = String::new();
    r.write_available(&mut s).unwrap();
    assert_eq!(s, "function_graph function nop\n");
    assert_eq!(r.current().name(), "nop");
    assert_eq!(r.set_current("bogus\n"), Err(ftrace_core::Errno::EINVAL));
    r.set_current("function\n").unwrap();
    assert!(FUNC.is_enabled());
    r.set_current("function_graph").unwrap();
    assert!(!FUNC.is_enabled() && GRAPH.is_enabled());
    assert_eq!(r.current().name(), "function_graph");
}

#[test]
fn trace_options_listing_matches_the_kernel() {
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reference/ftrace-6.12.117"
    );
    let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
    let nop = NopTracer;
    let func = FunctionTracer::new();
    let graph = FunctionGraphTracer::new();
    for (t, file) in [
        (&nop as &dyn Tracer, "02-files/trace_options.txt"),
        (&func, "04-function/trace_options.txt"),
        (&graph, "05-function-graph/trace_options.txt"),
    ] {
        let o = Options {
            trace: TraceOptions::DEFAULT,
            tracer: t.default_flags(),
        };
        let mut s = String::new();
        o.write_listing(&mut s, t.options()).unwrap();
        assert_eq!(s, read(file), "{file}");
    }
    let mut o = Options {
        trace: TraceOptions::DEFAULT,
        tracer: graph.default_flags(),
    };
    o.apply("nofuncgraph-cpu", graph.options()).unwrap();
    o.apply("latency-format", graph.options()).unwrap();
    assert!(o.trace.contains(TraceOptions::LATENCY_FORMAT));
    assert_eq!(o.tracer & GraphFlags::CPU.bits(), 0);
    assert_eq!(
        o.apply("bogus", graph.options()),
        Err(ftrace_core::Errno::EINVAL)
    );
    assert_eq!(o.apply("nobogus", &[]), Err(ftrace_core::Errno::EINVAL));
}

#[test]
fn no_task_names_prints_idle_and_unknown() {
    assert_eq!(ftrace_tracers::output::comm_of(&NoTaskNames, 0), "<idle>");
    assert_eq!(ftrace_tracers::output::comm_of(&NoTaskNames, 5), "<...>");
}

#[test]
fn tracers_print_their_headers() {
    use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
    let dir = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/reference/ftrace-6.12.117"
    );
    let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
    let s = syms();
    let env = OutputEnv::new(&s, &NoTaskNames, 2);
    let nop = NopTracer;
    let func = FunctionTracer::new();
    let graph = FunctionGraphTracer::new();
    for (t, file) in [
        (&nop as &dyn Tracer, "02-files/trace.txt"),
        (&func, "04-function/trace_empty.txt"),
        (&graph, "05-function-graph/trace_empty.txt"),
    ] {
        let info = HeaderInfo {
            tracer: t.name(),
            entries: 0,
            written: 0,
            online_cpus: 2,
            latency: LatencyInfo::default(),
        };
        let mut out = String::new();
        t.print_header(&mut out, &env, &info, t.default_flags(), true)
            .unwrap();
        assert_eq!(out, read(file), "{file}");
    }
}
