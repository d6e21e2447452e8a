//! The tracers driven the whole way: call sites fire into the ftrace-core dispatcher, whose ops
//! call the tracers, which write into the ftrace-ringbuf ring buffer; the buffer is read back
//! and printed.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicU64, Ordering};

use ftrace_core::dispatch::Dispatcher;
use ftrace_core::event::TraceCtx;
use ftrace_core::filter::FtraceHash;
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::platform::{CpuId, ExecContext, RecursionState, TaskContext, TraceClock};
use ftrace_core::reclaim::{Published, ReaderCount};
use ftrace_core::recursion::TraceRecursion;
use ftrace_core::symbols::SortedSymbols;
use ftrace_ringbuf::{HeapPages, RingBuffer};
use ftrace_tracers::TraceIter;
use ftrace_tracers::function::{FunctionTraceTarget, FunctionTracer, function_ops};
use ftrace_tracers::function_graph::{
    FunctionGraphTracer, GraphEntry, GraphFunctions, ShadowStack,
};
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::ringbuf::{BufferedEvents, RingBufferSink};
use ftrace_tracers::tracer::{AdmitAll, Tracer};

thread_local! {
    static RECURSION: TraceRecursion = const { TraceRecursion::new() };
}

/// The platform: pid 321, CPU 0, a clock that advances 1 µs per read (shared by the tests).
#[derive(Clone, Copy, Default)]
struct Platform;

static NOW: AtomicU64 = AtomicU64::new(5_000_000_000);

impl TaskContext for Platform {
    fn current_pid(&self) -> i32 {
        321
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx(0)
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

impl RecursionState for Platform {
    fn trace_recursion(&self) -> &TraceRecursion {
        // SAFETY: the thread-local outlives every dispatch on this thread, and the dispatcher
        // uses the reference only during the call.
        RECURSION.with(|r| unsafe { &*(r as *const TraceRecursion) })
    }
}

impl TraceClock for Platform {
    const NAME: &'static str = "test";
    fn now_ns(&self) -> u64 {
        NOW.fetch_add(1000, Ordering::Relaxed)
    }
}

impl CpuId for Platform {
    fn current_cpu(&self) -> u32 {
        0
    }
    fn possible_cpus(&self) -> u32 {
        1
    }
}

/// The function tracer bound to its buffer: what the ops' private pointer leads to.
struct FunctionTarget {
    tracer: FunctionTracer,
    rb: RingBuffer<HeapPages>,
}

impl FunctionTarget {
    fn leak() -> &'static FunctionTarget {
        Box::leak(Box::new(FunctionTarget {
            tracer: FunctionTracer::new(),
            rb: RingBuffer::new(HeapPages, 1, 4, 4096).unwrap(),
        }))
    }
}

impl FunctionTraceTarget for FunctionTarget {
    fn trace(&self, ip: u64, parent_ip: u64) {
        let sink = RingBufferSink::new(&self.rb, &Platform, &Platform);
        self.tracer
            .trace_call(ip, parent_ip, &AdmitAll, &Platform, &sink);
    }
}

const F: [(&str, u64); 4] = [
    ("vfs_read", 0xffffffff81457344),
    ("vfs_write", 0xffffffff81457c14),
    ("ksys_read", 0xffffffff81458074),
    ("do_syscall_64", 0xffffffff81ce0ff7),
];

fn syms() -> SortedSymbols {
    let mut s = SortedSymbols::new();
    for (n, a) in F {
        s.push(n, a & !0xf, 0x100, None);
    }
    s.finish();
    s
}

struct Names;
impl TaskNames for Names {
    fn comm(&self, _: i32) -> Option<&str> {
        Some("prog")
    }
}

fn print(rb: &RingBuffer<HeapPages>, style: OutputStyle) -> Vec<String> {
    let ev = BufferedEvents::snapshot(rb);
    let s = syms();
    let env = OutputEnv::new(&s, &Names, 1);
    let mut l = ev.lists();
    let mut st = [GraphCpuState::INIT];
    let mut w = TraceWriter::new(style, &mut st, Overruns::None);
    let mut out = Vec::new();
    w.write_events(&mut out, &env, &mut TraceIter::new(&mut l, None))
        .unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .map(|l| l.to_string())
        .collect()
}

#[test]
fn function_tracer_through_the_dispatcher_records_what_the_filter_admits() {
    let d: &'static Dispatcher<ReaderCount, Platform> =
        Box::leak(Box::new(Dispatcher::new(ReaderCount::new(), Platform)));
    let target = FunctionTarget::leak();
    let ops: &'static FtraceOps = Box::leak(Box::new(function_ops(target, OpsFlags::empty())));
    d.register(ops).unwrap();
    target.tracer.init().unwrap();
    // set_ftrace_filter = vfs_read vfs_write
    d.set_filter(
        ops,
        Published::Owned(Box::new(FtraceHash::from_ips([F[0].1, F[1].1]))),
    );

    let fire = |ip: u64| d.call(ip, F[3].1, None);
    for ip in [F[0].1, F[2].1, F[1].1, F[2].1, F[0].1] {
        fire(ip);
    }
    let lines = print(&target.rb, OutputStyle::Default);
    let bodies: Vec<&str> = lines
        .iter()
        .map(|l| l.split_once(": ").unwrap().1)
        .collect();
    assert_eq!(
        bodies,
        [
            "vfs_read <-do_syscall_64",
            "vfs_write <-do_syscall_64",
            "vfs_read <-do_syscall_64",
        ]
    );
    assert!(lines[0].starts_with("            prog-321     [000] .....     5.0000"));
    assert_eq!(target.rb.entries_and_written(), (3, 3));

    // Tracer off (tracing_on = 0): the ops still fire, nothing is recorded.
    target.tracer.stop();
    fire(F[0].1);
    assert_eq!(target.rb.entries_and_written(), (3, 3));
    target.tracer.start();
    // Unregistered: call sites no longer reach it.
    d.unregister(ops).unwrap();
    fire(F[0].1);
    assert_eq!(target.rb.entries_and_written(), (3, 3));
}

/// function_graph's entry hook as an ops; the shadow stack is per thread, and the test's
/// "return trampoline" pops it.
struct GraphTarget {
    tracer: FunctionGraphTracer,
    rb: RingBuffer<HeapPages>,
}

thread_local! {
    static STACK: RefCell<ShadowStack<50>> = const { RefCell::new(ShadowStack::new()) };
    static HOOKED: RefCell<Vec<bool>> = const { RefCell::new(Vec::new()) };
    static LAST_HOOK: Cell<bool> = const { Cell::new(false) };
}

impl FunctionTraceTarget for GraphTarget {
    fn trace(&self, ip: u64, parent_ip: u64) {
        let sink = RingBufferSink::new(&self.rb, &Platform, &Platform);
        let now = Platform.now_ns();
        let hooked = STACK.with(|s| {
            self.tracer.entry(
                &mut s.borrow_mut(),
                ip,
                parent_ip,
                now,
                &GraphFunctions::default(),
                &Platform,
                &sink,
            )
        });
        LAST_HOOK.with(|h| h.set(hooked == GraphEntry::Hooked));
    }
}

#[test]
fn function_graph_through_the_dispatcher() {
    let d: &'static Dispatcher<ReaderCount, Platform> =
        Box::leak(Box::new(Dispatcher::new(ReaderCount::new(), Platform)));
    let target: &'static GraphTarget = Box::leak(Box::new(GraphTarget {
        tracer: FunctionGraphTracer::new(),
        rb: RingBuffer::new(HeapPages, 1, 4, 4096).unwrap(),
    }));
    let ops: &'static FtraceOps = Box::leak(Box::new(function_ops(target, OpsFlags::empty())));
    d.register(ops).unwrap();
    target.tracer.init().unwrap();
    // set_ftrace_notrace = ksys_read: its calls never reach the graph tracer.
    d.set_notrace(
        ops,
        Published::Owned(Box::new(FtraceHash::from_ips([F[2].1]))),
    );

    // A call: the site fires into the dispatcher; if the tracer hooked it, the return runs
    // through the return trampoline (here: exit).
    fn call(d: &Dispatcher<ReaderCount, Platform>, t: &GraphTarget, ip: u64, body: &dyn Fn()) {
        LAST_HOOK.with(|h| h.set(false));
        d.call(ip, 0, None::<&mut FtraceRegs>);
        let hooked = LAST_HOOK.with(Cell::get);
        HOOKED.with(|h| h.borrow_mut().push(hooked));
        body();
        if HOOKED.with(|h| h.borrow_mut().pop().unwrap()) {
            let sink = RingBufferSink::new(&t.rb, &Platform, &Platform);
            STACK.with(|s| {
                t.tracer
                    .exit(&mut s.borrow_mut(), Platform.now_ns(), &Platform, &sink)
                    .unwrap()
            });
        }
    }
    call(d, target, F[3].1, &|| {
        call(d, target, F[2].1, &|| {
            call(d, target, F[0].1, &|| {});
        });
        call(d, target, F[1].1, &|| {});
    });
    STACK.with(|s| assert_eq!(s.borrow().depth(), 0));
    let lines = print(&target.rb, OutputStyle::Graph(GraphFlags::DEFAULT));
    // ksys_read is filtered out, so vfs_read sits directly under do_syscall_64.
    let text: Vec<&str> = lines
        .iter()
        .map(|l| l.split_once("|  ").unwrap().1)
        .collect();
    assert_eq!(
        text,
        ["do_syscall_64() {", "  vfs_read();", "  vfs_write();", "}"]
    );
    // Leaves and the return carry durations (the shared test clock moves 1 µs per read).
    for l in &lines[1..] {
        assert!(l.starts_with(" 0) ") && l.contains(" us "), "{lines:?}");
    }
}
