//! function_graph return values (`CONFIG_FUNCTION_GRAPH_RETVAL`): the tracer records them when
//! the backend passes them at exit, the options exist only then, and the printer writes them as
//! Linux 6.12's `print_graph_retval` does (decimal errnos, hex otherwise, hex only under
//! `funcgraph-retval-hex`, leaf and closing-brace forms).

use std::cell::{Cell, RefCell};

use ftrace_core::EventId;
use ftrace_core::entry::{FtraceGraphEntEntry, FtraceGraphRetvalEntry, Pod, TraceEntry};
use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::platform::{ExecContext, TaskContext};
use ftrace_core::symbols::SortedSymbols;
use ftrace_tracers::event::{Entry, read_graph_return};
use ftrace_tracers::function_graph::{
    FunctionGraphTracer, FunctionProfiler, GraphEntry, GraphFunctions, ReturnValues, ShadowStack,
};
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::tracer::{EntrySink, Tracer};
use ftrace_tracers::{EventRef, Options, TraceIter, TraceOptions};

#[derive(Default)]
struct VecSink {
    entries: RefCell<Vec<Vec<u8>>>,
}

impl EntrySink for VecSink {
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let mut b = vec![0u8; len];
        fill(&mut b);
        self.entries.borrow_mut().push(b);
        true
    }
}

struct Task;

impl TaskContext for Task {
    fn current_pid(&self) -> i32 {
        144
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx::new(TraceFlags::empty(), 0, 0)
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

struct Sh;
impl TaskNames for Sh {
    fn comm(&self, pid: i32) -> Option<&str> {
        (pid == 144).then_some("sh")
    }
}

const OPEN: u64 = 0xffff_ffff_8145_3d90;
const GETNAME: u64 = 0xffff_ffff_8146_0000;
const READ: u64 = 0xffff_ffff_8147_0000;

fn syms() -> SortedSymbols {
    let mut s = SortedSymbols::new();
    s.push("do_sys_openat2", OPEN, 0xe0, None);
    s.push("getname", GETNAME, 0x40, None);
    s.push("vfs_read", READ, 0x100, None);
    s.finish();
    s
}

/// do_sys_openat2 { getname(); } returning `open_ret`, then the leaf vfs_read returning
/// `read_ret`, recorded by the tracer with `values`.
fn record(values: ReturnValues, open_ret: u64, read_ret: u64) -> Vec<Vec<u8>> {
    let t = FunctionGraphTracer::new().with_return_values(values);
    t.init().unwrap();
    let sink = VecSink::default();
    let mut st = ShadowStack::<50>::new();
    let f = GraphFunctions::default();
    let now = Cell::new(1_000_000_000u64);
    let tick = |d: u64| {
        now.set(now.get() + d);
        now.get()
    };
    let enter = |st: &mut ShadowStack<50>, func, t0| {
        assert_eq!(
            t.entry(st, func, 0x1, t0, &f, &Task, &sink),
            GraphEntry::Hooked
        );
    };
    enter(&mut st, OPEN, tick(0));
    enter(&mut st, GETNAME, tick(100));
    t.exit_with_retval(&mut st, tick(1_500), 0xffff_8880_0123_4000, &Task, &sink)
        .unwrap();
    t.exit_with_retval(&mut st, tick(2_000), open_ret, &Task, &sink)
        .unwrap();
    enter(&mut st, READ, tick(10_000));
    t.exit_with_retval(&mut st, tick(250), read_ret, &Task, &sink)
        .unwrap();
    sink.entries.into_inner()
}

fn render(recs: &[Vec<u8>], flags: GraphFlags) -> String {
    let s = syms();
    let mut l = EventLists::new(1);
    for (i, b) in recs.iter().enumerate() {
        l.push(EventRef::new(0, 1_000_000_000 + i as u64 * 1000, b));
    }
    let env = OutputEnv::new(&s, &Sh, 1);
    let mut st = [GraphCpuState::INIT; 1];
    let mut w = TraceWriter::new(OutputStyle::Graph(flags), &mut st, Overruns::None);
    let mut out = Vec::new();
    w.write_trace(&mut out, &env, None, &mut TraceIter::new(&mut l, None))
        .unwrap();
    String::from_utf8(out).unwrap()
}

const ENOENT: u64 = (-2i64) as u64;

#[test]
fn recorded_values_are_64_byte_records() {
    let recs = record(ReturnValues::Recorded, ENOENT, 3);
    let exits: Vec<_> = recs
        .iter()
        .filter(|b| u16::from_le_bytes([b[0], b[1]]) == EventId::FuncgraphExit.as_u16())
        .collect();
    assert_eq!(exits.len(), 3);
    for b in &exits {
        assert_eq!(b.len(), size_of::<FtraceGraphRetvalEntry>());
    }
    let r = read_graph_return(exits[1]).unwrap();
    assert_eq!((r.func, r.depth, r.retval), (OPEN, 0, Some(ENOENT)));
    assert_eq!(r.rettime - r.calltime, 3_600);
    // Without return values the value is dropped and the record is the 56-byte one.
    let recs = record(ReturnValues::Absent, ENOENT, 3);
    let r = read_graph_return(&recs[3]).unwrap();
    assert_eq!((recs[3].len(), r.func, r.retval), (56, OPEN, None));
}

#[test]
fn retval_text_as_print_graph_retval() {
    let recs = record(ReturnValues::Recorded, ENOENT, 3);
    let d = GraphFlags::DEFAULT;
    assert_eq!(
        render(&recs, d),
        " 0)               |  do_sys_openat2() {\n\
         \x200)   1.500 us    |    getname();\n\
         \x200)   3.600 us    |  }\n\
         \x200)   0.250 us    |  vfs_read();\n"
    );
    assert_eq!(
        render(&recs, d | GraphFlags::RETVAL),
        " 0)               |  do_sys_openat2() {\n\
         \x200)   1.500 us    |    getname(); /* = 0xffff888001234000 */\n\
         \x200)   3.600 us    |  } /* do_sys_openat2 = -2 */\n\
         \x200)   0.250 us    |  vfs_read(); /* = 0x3 */\n"
    );
    assert_eq!(
        render(&recs, d | GraphFlags::RETVAL | GraphFlags::RETVAL_HEX),
        " 0)               |  do_sys_openat2() {\n\
         \x200)   1.500 us    |    getname(); /* = 0xffff888001234000 */\n\
         \x200)   3.600 us    |  } /* do_sys_openat2 = 0xfffffffffffffffe */\n\
         \x200)   0.250 us    |  vfs_read(); /* = 0x3 */\n"
    );
    // funcgraph-tail changes nothing once the value is printed; without it, it names the brace.
    assert_eq!(
        render(&recs, d | GraphFlags::RETVAL | GraphFlags::TAIL),
        render(&recs, d | GraphFlags::RETVAL)
    );
    assert!(render(&recs, d | GraphFlags::TAIL).contains("|  } /* do_sys_openat2 */\n"));
}

#[test]
fn errno_forms() {
    // (value, default text, the leaf's printed value)
    let cases: [(u64, &str); 8] = [
        (0, "0x0"),
        (1, "0x1"),
        ((-1i64) as u64, "-1"),
        ((-4095i64) as u64, "-4095"),
        // Just below -MAX_ERRNO: not an errno.
        ((-4096i64) as u64, "0xfffffffffffff000"),
        // A 32-bit int's -EINVAL in a zero-extended register: sign-extended, an errno.
        (0xffff_ffea, "-22"),
        // Bit 31 set but not an errno once sign-extended.
        (0x8000_0000, "0x80000000"),
        // Upper half not zero: taken as is.
        (0x1_ffff_ffea, "0x1ffffffea"),
    ];
    for (v, want) in cases {
        let recs = record(ReturnValues::Recorded, 0, v);
        let out = render(&recs, GraphFlags::DEFAULT | GraphFlags::RETVAL);
        let last = out.lines().last().unwrap();
        assert_eq!(
            last,
            format!(" 0)   0.250 us    |  vfs_read(); /* = {want} */"),
            "{v:#x}"
        );
        let hex = render(
            &recs,
            GraphFlags::DEFAULT | GraphFlags::RETVAL | GraphFlags::RETVAL_HEX,
        );
        assert!(
            hex.lines()
                .last()
                .unwrap()
                .ends_with(&format!("vfs_read(); /* = {v:#x} */")),
            "{hex}"
        );
    }
}

#[test]
fn records_without_values_print_as_before() {
    // A 56-byte record under funcgraph-retval: nothing to print, the plain forms stay.
    let recs = record(ReturnValues::Absent, ENOENT, 3);
    let d = GraphFlags::DEFAULT;
    assert_eq!(render(&recs, d | GraphFlags::RETVAL), render(&recs, d));
}

#[test]
fn options_exist_only_with_return_values() {
    let names =
        |t: &FunctionGraphTracer| -> Vec<&str> { t.options().iter().map(|o| o.name).collect() };
    let plain = FunctionGraphTracer::new();
    assert!(!names(&plain).contains(&"funcgraph-retval"));
    let with = FunctionGraphTracer::new().with_return_values(ReturnValues::Recorded);
    let n = names(&with);
    let tail = n.iter().position(|&x| x == "funcgraph-tail").unwrap();
    assert_eq!(
        &n[tail..],
        [
            "funcgraph-tail",
            "funcgraph-retval",
            "funcgraph-retval-hex",
            "sleep-time"
        ]
    );
    let prof = FunctionGraphTracer::new()
        .with_profiler(FunctionProfiler::Present)
        .with_return_values(ReturnValues::Recorded);
    assert_eq!(names(&prof).last(), Some(&"graph-time"));
    assert_eq!(names(&prof).len(), 12);
    // trace_options: set by name, listed after funcgraph-tail, the bits the printer reads.
    let mut o = Options {
        trace: TraceOptions::DEFAULT,
        tracer: with.default_flags(),
    };
    o.apply_for("funcgraph-retval", &with).unwrap();
    o.apply_for("funcgraph-retval-hex", &with).unwrap();
    let flags = GraphFlags::from_bits_truncate(o.tracer);
    assert!(flags.contains(GraphFlags::RETVAL | GraphFlags::RETVAL_HEX));
    let mut listing = String::new();
    o.write_listing(&mut listing, with.options()).unwrap();
    assert!(
        listing.contains("nofuncgraph-tail\nfuncgraph-retval\nfuncgraph-retval-hex\nsleep-time\n")
    );
    assert_eq!(
        Options {
            trace: TraceOptions::DEFAULT,
            tracer: plain.default_flags()
        }
        .apply_for("funcgraph-retval", &plain),
        Err(ftrace_core::Errno::EINVAL)
    );
}

#[test]
fn decoder_tells_layouts_by_length() {
    let r = FtraceGraphRetvalEntry {
        ent: TraceEntry {
            type_: 10,
            flags: 0,
            preempt_count: 0,
            pid: 1,
        },
        func: OPEN,
        retval: 7,
        depth: 2,
        overrun: 1,
        calltime: 5,
        rettime: 9,
        backport_calltime: 0,
        backport_rettime: 0,
    };
    let e = EventRef::new(0, 0, r.as_bytes());
    let Entry::GraphReturn(g) = e.entry() else {
        panic!("not a return")
    };
    assert_eq!(
        (g.func, g.depth, g.overrun, g.calltime, g.rettime),
        (OPEN, 2, 1, 5, 9)
    );
    assert_eq!(g.retval, Some(7));
    // An entry is not a return.
    let ent = FtraceGraphEntEntry {
        ent: TraceEntry { type_: 11, ..r.ent },
        func: OPEN,
        depth: 0,
    };
    assert!(matches!(
        EventRef::new(0, 0, ent.as_bytes()).entry(),
        Entry::GraphEntry(_)
    ));
}
