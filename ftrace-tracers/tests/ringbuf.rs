//! The tracers writing into the real `ftrace-ringbuf` ring buffer, read back and printed.

use std::cell::Cell;

use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::platform::{CpuId, ExecContext, TaskContext, TraceClock};
use ftrace_core::symbols::SortedSymbols;
use ftrace_ringbuf::{HeapPages, RingBuffer};
use ftrace_tracers::function::{FunctionTracer, trace_marker_write};
use ftrace_tracers::function_graph::{
    FunctionGraphTracer, GraphEntry, GraphFunctions, ShadowStack,
};
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::ringbuf::{BufferedEvents, RingBufferSink};
use ftrace_tracers::tracer::Tracer;
use ftrace_tracers::{TraceIter, TraceOptions};

struct Clock(Cell<u64>);
impl TraceClock for Clock {
    const NAME: &'static str = "test";
    fn now_ns(&self) -> u64 {
        self.0.get()
    }
}

struct Cpu(Cell<u32>);
impl CpuId for Cpu {
    fn current_cpu(&self) -> u32 {
        self.0.get()
    }
    fn possible_cpus(&self) -> u32 {
        2
    }
}

struct Task(i32);
impl TaskContext for Task {
    fn current_pid(&self) -> i32 {
        self.0
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx::new(TraceFlags::empty(), 0, 0)
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

struct Names;
impl TaskNames for Names {
    fn comm(&self, pid: i32) -> Option<&str> {
        match pid {
            100 => Some("cat"),
            200 => Some("dd"),
            _ => None,
        }
    }
}

fn syms() -> SortedSymbols {
    let mut s = SortedSymbols::new();
    for (i, n) in [
        "vfs_read",
        "vfs_write",
        "ksys_read",
        "do_sys_openat2",
        "rw_verify_area",
    ]
    .iter()
    .enumerate()
    {
        s.push(n, 0xffffffff81000000 + 0x1000 * i as u64, 0x1000, None);
    }
    s.push("tracing_mark_write", 0xffffffff81237720, 0x100, None);
    s.finish();
    s
}

fn addr(i: u64) -> u64 {
    0xffffffff81000004 + 0x1000 * i
}

fn print(ev: &BufferedEvents, rb_totals: (u64, u64), style: OutputStyle, tracer: &str) -> String {
    let s = syms();
    let env = OutputEnv::new(&s, &Names, 2);
    let mut lists = ev.lists();
    let mut st = [GraphCpuState::INIT; 2];
    let mut w = TraceWriter::new(style, &mut st, Overruns::None);
    let info = HeaderInfo {
        tracer,
        entries: rb_totals.0,
        written: rb_totals.1,
        online_cpus: 2,
        latency: LatencyInfo::default(),
    };
    let mut out = Vec::new();
    w.write_trace(
        &mut out,
        &env,
        Some(&info),
        &mut TraceIter::new(&mut lists, None),
    )
    .unwrap();
    String::from_utf8(out).unwrap()
}

#[test]
fn function_tracer_into_the_ring_buffer() {
    let rb = RingBuffer::new(HeapPages, 2, 4, 4096).unwrap();
    let (clock, cpu) = (Clock(Cell::new(25_053_148_816)), Cpu(Cell::new(0)));
    let sink = RingBufferSink::new(&rb, &clock, &cpu);
    let t = FunctionTracer::new();
    t.init().unwrap();
    // set_ftrace_filter = vfs_read vfs_write: ksys_read is not admitted.
    let filter = |ip: u64| ip == addr(0) || ip == addr(1);
    let calls = [
        (0, 100, 0),
        (1, 200, 2),
        (1, 200, 1),
        (0, 100, 1),
        (1, 200, 0),
    ];
    for (c, pid, f) in calls {
        cpu.0.set(c);
        clock.0.set(clock.0.get() + 1_000_000);
        t.trace_call(addr(f), addr(3) + 0x6a, &filter, &Task(pid), &sink);
    }
    // A marker on CPU 0 too.
    cpu.0.set(0);
    clock.0.set(clock.0.get() + 1_000_000);
    trace_marker_write(
        b"hi",
        0xffffffff812377ff,
        TraceOptions::DEFAULT,
        &Task(100),
        &sink,
    )
    .unwrap();

    assert_eq!(rb.entries_and_written(), (5, 5));
    let ev = BufferedEvents::snapshot(&rb);
    let out = print(
        &ev,
        rb.entries_and_written(),
        OutputStyle::Default,
        "function",
    );
    let body: Vec<&str> = out.lines().skip(12).collect();
    assert_eq!(
        body,
        [
            "             cat-100     [000] .....    25.054149: vfs_read <-do_sys_openat2",
            "              dd-200     [001] .....    25.056149: vfs_write <-do_sys_openat2",
            "             cat-100     [000] .....    25.057149: vfs_write <-do_sys_openat2",
            "              dd-200     [001] .....    25.058149: vfs_read <-do_sys_openat2",
            "             cat-100     [000] .....    25.059149: tracing_mark_write: hi",
        ]
    );
    assert_eq!(
        out.lines().nth(2).unwrap(),
        "# entries-in-buffer/entries-written: 5/5   #P:2"
    );
    // Per-CPU file: that CPU's events, the global totals.
    let mut lists = ev.lists();
    let mut it = TraceIter::new(&mut lists, Some(1));
    assert_eq!(it.next_event().unwrap().cpu, 1);
    // trace_pipe consumes: a second drain is empty.
    assert_eq!(BufferedEvents::drain(&rb).len(), 5);
    assert!(BufferedEvents::drain(&rb).is_empty());
}

#[test]
fn function_graph_into_the_ring_buffer() {
    let rb = RingBuffer::new(HeapPages, 2, 4, 4096).unwrap();
    let (clock, cpu) = (Clock(Cell::new(43_418_351_000)), Cpu(Cell::new(0)));
    let sink = RingBufferSink::new(&rb, &clock, &cpu);
    let t = FunctionGraphTracer::new();
    t.init().unwrap();
    let mut stack = ShadowStack::<50>::new();
    let f = GraphFunctions::default();
    let task = Task(200);
    let tick = |ns: u64| {
        clock.0.set(clock.0.get() + ns);
        clock.0.get()
    };
    // vfs_read { rw_verify_area(); ksys_read(); }
    assert_eq!(
        t.entry(&mut stack, addr(0), 1, tick(0), &f, &task, &sink),
        GraphEntry::Hooked
    );
    t.entry(&mut stack, addr(4), 2, tick(30_000), &f, &task, &sink);
    t.exit(&mut stack, tick(60_053), &task, &sink).unwrap();
    t.entry(&mut stack, addr(2), 3, tick(1_000), &f, &task, &sink);
    t.exit(&mut stack, tick(2_500), &task, &sink).unwrap();
    let e = t.exit(&mut stack, tick(591_441), &task, &sink).unwrap();
    assert_eq!((e.ret, e.duration), (1, 684_994));
    let ev = BufferedEvents::snapshot(&rb);
    assert_eq!(ev.len(), 6);
    let out = print(
        &ev,
        rb.entries_and_written(),
        OutputStyle::Graph(GraphFlags::DEFAULT),
        "function_graph",
    );
    assert_eq!(
        out,
        "# tracer: function_graph\n#\n\
         # CPU  DURATION                  FUNCTION CALLS\n\
         # |     |   |                     |   |   |   |\n\
         \x200)               |  vfs_read() {\n\
         \x200) + 60.053 us   |    rw_verify_area();\n\
         \x200)   2.500 us    |    ksys_read();\n\
         \x200) ! 684.994 us  |  }\n"
    );
}

#[test]
fn overwritten_events_are_reported_as_lost() {
    // Two 256-byte pages per CPU: most of 100 entries are overwritten.
    let rb = RingBuffer::new(HeapPages, 1, 2, 256).unwrap();
    let (clock, cpu) = (Clock(Cell::new(1_000)), Cpu(Cell::new(0)));
    let sink = RingBufferSink::new(&rb, &clock, &cpu);
    let t = FunctionTracer::new();
    t.init().unwrap();
    for _ in 0..100 {
        clock.0.set(clock.0.get() + 1_000);
        t.trace_call(
            addr(0),
            addr(3),
            &ftrace_tracers::tracer::AdmitAll,
            &Task(100),
            &sink,
        );
    }
    let (entries, written) = rb.entries_and_written();
    assert_eq!(written, 100);
    assert!(entries < 20, "{entries}");
    let ev = BufferedEvents::drain(&rb);
    assert_eq!(ev.len() as u64, entries);
    let s = syms();
    let env = OutputEnv::new(&s, &Names, 1);
    let mut lists = ev.lists();
    let mut st = [GraphCpuState::INIT];
    let mut w = TraceWriter::new(OutputStyle::Default, &mut st, Overruns::Lost);
    let mut out = Vec::new();
    w.write_events(&mut out, &env, &mut TraceIter::new(&mut lists, None))
        .unwrap();
    let out = String::from_utf8(out).unwrap();
    let first = out.lines().next().unwrap();
    assert_eq!(first, format!("CPU:0 [LOST {} EVENTS]", written - entries));
    assert_eq!(out.lines().count() as u64, entries + 1);
}
