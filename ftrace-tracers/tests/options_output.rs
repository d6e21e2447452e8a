//! Option variants the 6.12.117 captures describe but do not store as files
//! (shared/docs/feasibility-kernel.md §4): each expected line is the kernel's, as observed.

use ftrace_core::entry::{FtraceEntry, Pod, TraceEntry};
use ftrace_core::symbols::SortedSymbols;
use ftrace_tracers::clock::ClockUnit;
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::{EventRef, Missed, TraceIter, TraceOptions};

struct Sh;
impl TaskNames for Sh {
    fn comm(&self, pid: i32) -> Option<&str> {
        (pid == 148 || pid == 144).then_some("sh")
    }
}

fn syms() -> SortedSymbols {
    let mut s = SortedSymbols::new();
    s.push("do_sys_openat2", 0xffffffff81453d90, 0xe0, None);
    s.push("__x64_sys_openat", 0xffffffff81454400, 0xa0, None);
    s.push("mod_func", 0xffffffffc0001000, 0x40, Some("mymod"));
    s.finish();
    s
}

fn openat(pid: i32) -> Vec<u8> {
    FtraceEntry {
        ent: TraceEntry {
            type_: 1,
            flags: 0,
            preempt_count: 0,
            pid,
        },
        ip: 0xffffffff81453d90,
        parent_ip: 0xffffffff8145446e,
    }
    .as_bytes()
    .to_vec()
}

const TS: u64 = 33_607_019_616;

fn info() -> HeaderInfo<'static> {
    HeaderInfo {
        tracer: "function",
        entries: 2,
        written: 2,
        online_cpus: 2,
        latency: LatencyInfo {
            uts_release: "6.12.117+deb12-amd64",
            ..LatencyInfo::default()
        },
    }
}

/// What a [`TraceWriter`] in `style` prints of `l` under `env` (one graph state per CPU): the
/// whole `trace` file with `header`, only the event lines without one.
fn text(
    l: &mut EventLists<'_>,
    env: &OutputEnv<'_>,
    style: OutputStyle,
    overruns: Overruns,
    header: Option<&HeaderInfo<'_>>,
) -> String {
    let mut st = vec![GraphCpuState::INIT; env.nr_cpu_ids as usize];
    let mut w = TraceWriter::new(style, &mut st, overruns);
    let mut out = Vec::new();
    w.write_trace(&mut out, env, header, &mut TraceIter::new(l, None))
        .unwrap();
    String::from_utf8(out).unwrap()
}

/// Two events 42.413 ms apart on CPU 0, printed with `opts`.
fn print(opts: TraceOptions, unit: ClockUnit, header: bool, time_start: u64) -> String {
    let d = openat(148);
    let mut l = EventLists::new(2);
    l.push(EventRef::new(0, TS, &d));
    l.push(EventRef::new(0, TS + 42_413_000, &d));
    let s = syms();
    let mut env = OutputEnv::new(&s, &Sh, 2);
    env.options = opts;
    env.clock_unit = unit;
    env.time_start = time_start;
    let i = info();
    text(
        &mut l,
        &env,
        OutputStyle::Default,
        Overruns::None,
        header.then_some(&i),
    )
}

fn first_line(s: &str) -> &str {
    s.lines().next().unwrap()
}

const D: TraceOptions = TraceOptions::DEFAULT;

#[test]
fn sym_addr() {
    let s = print(D | TraceOptions::SYM_ADDR, ClockUnit::Nanoseconds, false, 0);
    assert!(
        first_line(&s)
            .ends_with(": do_sys_openat2 <ffffffff81453d90> <-__x64_sys_openat <ffffffff8145446e>"),
        "{s}"
    );
}

#[test]
fn raw_and_hex() {
    let s = print(D | TraceOptions::RAW, ClockUnit::Nanoseconds, false, 0);
    assert_eq!(
        first_line(&s),
        "148 0 33607019616 ffffffff81453d90 ffffffff8145446e"
    );
    let s = print(D | TraceOptions::HEX, ClockUnit::Nanoseconds, false, 0);
    assert_eq!(
        first_line(&s),
        "00000094 00000000 00000007d3226c60 ffffffff81453d90 ffffffff8145446e "
    );
}

#[test]
fn latency_format_and_verbose() {
    let start = TS - 21_275_000;
    let s = print(
        D | TraceOptions::LATENCY_FORMAT,
        ClockUnit::Nanoseconds,
        false,
        start,
    );
    assert_eq!(
        first_line(&s),
        "      sh-148       0..... 21275us*: do_sys_openat2 <-__x64_sys_openat"
    );
    // The last event has no next one: its delta is 0, no mark.
    assert_eq!(
        s.lines().nth(1).unwrap(),
        "      sh-148       0..... 63688us : do_sys_openat2 <-__x64_sys_openat"
    );
    let s = print(
        D | TraceOptions::LATENCY_FORMAT | TraceOptions::VERBOSE,
        ClockUnit::Nanoseconds,
        false,
        start,
    );
    assert_eq!(
        first_line(&s),
        "              sh     148   0 0 00000000 00000000 [0200cd6c] 21.275ms (+42.413ms): \
         do_sys_openat2 <-__x64_sys_openat"
    );
    // The verbose latency header has the block but no column legend.
    let s = print(
        D | TraceOptions::LATENCY_FORMAT | TraceOptions::VERBOSE,
        ClockUnit::Nanoseconds,
        true,
        start,
    );
    assert_eq!(
        s.lines().nth(4).unwrap(),
        "# latency: 0 us, #2/2, CPU#0 | (M:desktop VP:0, KP:0, SP:0 HP:0 #P:2)"
    );
    assert_eq!(s.lines().nth(8).unwrap(), "#");
    assert!(s.lines().nth(9).unwrap().starts_with("              sh"));
}

#[test]
fn counter_clock_prints_the_raw_value() {
    let d = openat(148);
    let mut l = EventLists::new(1);
    l.push(EventRef::new(0, 5, &d));
    let s = syms();
    let mut env = OutputEnv::new(&s, &Sh, 1);
    env.clock_unit = ClockUnit::Ticks;
    let out = text(&mut l, &env, OutputStyle::Default, Overruns::None, None);
    assert!(
        out.ends_with(".....            5: do_sys_openat2 <-__x64_sys_openat\n"),
        "{out}"
    );
}

#[test]
fn no_context_info_and_no_irq_info() {
    let s = print(
        D - TraceOptions::CONTEXT_INFO,
        ClockUnit::Nanoseconds,
        true,
        0,
    );
    assert_eq!(
        s,
        "# tracer: function\n#\ndo_sys_openat2 <-__x64_sys_openat\n\
         do_sys_openat2 <-__x64_sys_openat\n"
    );
    let s = print(D - TraceOptions::IRQ_INFO, ClockUnit::Nanoseconds, true, 0);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines[4],
        "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION"
    );
    assert_eq!(lines[5], "#              | |         |         |         |");
    assert_eq!(
        lines[6],
        "              sh-148     [000]     33.607020: do_sys_openat2 <-__x64_sys_openat"
    );
    let s = print(
        D - TraceOptions::PRINT_PARENT,
        ClockUnit::Nanoseconds,
        false,
        0,
    );
    assert!(first_line(&s).ends_with(": do_sys_openat2"));
}

#[test]
fn record_tgid() {
    let s = print(
        D | TraceOptions::RECORD_TGID,
        ClockUnit::Nanoseconds,
        true,
        0,
    );
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(
        lines[4],
        "#                                          _-----=> irqs-off/BH-disabled"
    );
    assert_eq!(
        lines[10],
        "#           TASK-PID       TGID    CPU#  |||||  TIMESTAMP  FUNCTION"
    );
    assert_eq!(
        lines[11],
        "#              | |           |       |   |||||     |         |"
    );
    assert!(lines[12].starts_with("              sh-148     (-------) [000] ....."));
}

#[test]
fn module_symbols_and_lost_events_and_annotate() {
    let mut d = openat(144);
    d[8..16].copy_from_slice(&0xffffffffc0001004u64.to_le_bytes());
    let e = openat(144);
    let mut l = EventLists::new(2);
    l.push(EventRef::new(0, 1000, &e));
    l.push(EventRef::new(0, 2000, &e));
    let mut lost = EventRef::new(0, 3000, &d);
    lost.missed = Missed::Count(7);
    l.push(lost);
    l.push(EventRef::new(1, 4000, &e));
    let mut unknown = EventRef::new(1, 5000, &e);
    unknown.missed = Missed::Unknown;
    l.push(unknown);
    let s = syms();
    let mut env = OutputEnv::new(&s, &Sh, 2);
    env.options |= TraceOptions::SYM_OFFSET;
    let out = text(&mut l, &env, OutputStyle::Default, Overruns::Lost, None);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[2], "CPU:0 [LOST 7 EVENTS]");
    assert!(lines[3].ends_with(": mod_func+0x4/0x40 [mymod] <-__x64_sys_openat+0x6e/0xa0"));
    assert_eq!(lines[4], "##### CPU 1 buffer started ####");
    assert_eq!(lines[6], "CPU:1 [LOST EVENTS]");
}

#[test]
fn graph_proc_overrun_latency_and_irqs() {
    use ftrace_core::entry::{FtraceGraphEntEntry, FtraceGraphRetEntry};
    let ent = |type_, pid| TraceEntry {
        type_,
        flags: 0x1,
        preempt_count: 1,
        pid,
    };
    let mut s = SortedSymbols::new();
    s.push("do_sys_openat2", 0xffffffff81453d90, 0xe0, None);
    s.push("__sysvec_irq_work", 0xffffffff81e00100, 0x40, None);
    s.finish();
    let e1 = FtraceGraphEntEntry {
        ent: ent(11, 144),
        func: 0xffffffff81453d90,
        depth: 0,
    };
    let irq = FtraceGraphEntEntry {
        ent: ent(11, 144),
        func: 0xffffffff81e00100,
        depth: 1,
    };
    let irq_r = FtraceGraphRetEntry {
        ent: ent(10, 144),
        func: 0xffffffff81e00100,
        depth: 1,
        overrun: 0,
        calltime: 10,
        rettime: 20,
        backport_calltime: 0,
        backport_rettime: 0,
    };
    let r1 = FtraceGraphRetEntry {
        ent: ent(10, 144),
        func: 0xffffffff81453d90,
        depth: 0,
        overrun: 3,
        calltime: 0,
        rettime: 150_000,
        backport_calltime: 0,
        backport_rettime: 0,
    };
    let bytes = [
        e1.as_bytes(),
        irq.as_bytes(),
        irq_r.as_bytes(),
        r1.as_bytes(),
    ];
    let render = |flags: GraphFlags, opts: TraceOptions| {
        let mut l = EventLists::new(1);
        for (i, b) in bytes.iter().enumerate() {
            l.push(EventRef::new(0, 1_000_000_000 + i as u64 * 1000, b));
        }
        let mut env = OutputEnv::new(&s, &Sh, 4);
        env.options = opts;
        env.irq_text = Some((0xffffffff81e00000, 0xffffffff81f00000));
        let mut i = info();
        i.tracer = "function_graph";
        text(
            &mut l,
            &env,
            OutputStyle::Graph(flags),
            Overruns::None,
            Some(&i),
        )
    };
    let f = GraphFlags::DEFAULT | GraphFlags::PROC | GraphFlags::OVERRUN;
    assert_eq!(
        render(f, D),
        "# tracer: function_graph\n#\n\
         # CPU  TASK/PID         DURATION                  FUNCTION CALLS\n\
         # |     |    |           |   |                     |   |   |   |\n\
         \x200)     sh-144     |               |  do_sys_openat2() {\n\
         \x200)     sh-144     |   ==========> |\n\
         \x200)     sh-144     |   0.010 us    |    __sysvec_irq_work();\n\
         \x200)     sh-144     |   <========== |\n\
         \x200)     sh-144     | ! 150.000 us  |  }\n\
         \x20(Overruns: 3)\n"
    );
    // funcgraph-irqs off hides the interrupt; latency-format adds the flag columns.
    let out = render(
        GraphFlags::DEFAULT - GraphFlags::IRQS,
        D | TraceOptions::LATENCY_FORMAT,
    );
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[2],
        "# function_graph latency trace v1.1.5 on 6.12.117+deb12-amd64"
    );
    assert_eq!(lines[9], "#      _-----=> irqs-off        ");
    assert_eq!(
        lines[14],
        "# CPU||||     DURATION                  FUNCTION CALLS"
    );
    assert_eq!(
        lines[15],
        "# |  ||||      |   |                     |   |   |   |"
    );
    assert_eq!(
        lines[16],
        " 0)  d..1. |               |  do_sys_openat2() {"
    );
    assert_eq!(lines[17], " 0)  d..1. | ! 150.000 us  |  }");
    assert_eq!(lines.len(), 18);
}

#[test]
fn scheduler_records_and_stacks() {
    use ftrace_core::entry::CtxSwitchEntry;
    let ctx = CtxSwitchEntry {
        ent: TraceEntry {
            type_: 2,
            flags: 0,
            preempt_count: 0,
            pid: 148,
        },
        prev_pid: 148,
        next_pid: 144,
        next_cpu: 1,
        prev_prio: 120,
        prev_state: 1,
        next_prio: 120,
        next_state: 0,
    };
    let mut wake = ctx;
    wake.ent.type_ = 3;
    let mut stack = TraceEntry {
        type_: 4,
        flags: 0,
        preempt_count: 0,
        pid: 148,
    }
    .as_bytes()
    .to_vec();
    stack.extend_from_slice(&2i32.to_le_bytes());
    stack.extend_from_slice(&[0; 4]);
    stack.extend_from_slice(&0xffffffff81453d94u64.to_le_bytes());
    stack.extend_from_slice(&0xffffffff8145446eu64.to_le_bytes());
    stack.extend_from_slice(&u64::MAX.to_le_bytes());
    let s = syms();
    let render = |opts: TraceOptions| {
        let mut l = EventLists::new(1);
        l.push(EventRef::new(0, 1000, ctx.as_bytes()));
        l.push(EventRef::new(0, 2000, wake.as_bytes()));
        l.push(EventRef::new(0, 3000, &stack));
        let mut env = OutputEnv::new(&s, &Sh, 1);
        env.options = opts;
        text(&mut l, &env, OutputStyle::Default, Overruns::None, None)
    };
    let out = render(D - TraceOptions::CONTEXT_INFO);
    assert_eq!(
        out,
        "     148:120:S ==> [001]     144:120:R sh\n\
         \x20    148:120:S   + [001]     144:120:R sh\n\
         <stack trace>\n\
         \x20=> do_sys_openat2\n\
         \x20=> __x64_sys_openat\n"
    );
    let out = render((D | TraceOptions::RAW) - TraceOptions::CONTEXT_INFO);
    assert_eq!(
        out,
        "148 120 S 1 144 120 R\n148 120 + 1 144 120 R\ntype: 4\n"
    );
}

#[test]
fn graph_without_duration_or_overhead_or_context() {
    use ftrace_core::entry::{FtraceGraphEntEntry, FtraceGraphRetEntry};
    let ent = |type_| TraceEntry {
        type_,
        flags: 0,
        preempt_count: 0,
        pid: 144,
    };
    let mut s = SortedSymbols::new();
    s.push("vfs_read", 0x1000, 0x100, None);
    s.push("aa_file_perm", 0x2000, 0x100, None);
    s.finish();
    let e = FtraceGraphEntEntry {
        ent: ent(11),
        func: 0x1000,
        depth: 0,
    };
    let l1 = FtraceGraphEntEntry {
        ent: ent(11),
        func: 0x2000,
        depth: 1,
    };
    let r1 = FtraceGraphRetEntry {
        ent: ent(10),
        func: 0x2000,
        depth: 1,
        overrun: 0,
        calltime: 0,
        rettime: 11_361,
        backport_calltime: 0,
        backport_rettime: 0,
    };
    let r = FtraceGraphRetEntry {
        func: 0x1000,
        depth: 0,
        rettime: 684_994,
        ..r1
    };
    let bytes = [e.as_bytes(), l1.as_bytes(), r1.as_bytes(), r.as_bytes()];
    let render = |flags: GraphFlags, opts: TraceOptions| {
        let mut l = EventLists::new(1);
        for (i, b) in bytes.iter().enumerate() {
            l.push(EventRef::new(0, 43_418_351_000 + i as u64 * 1000, b));
        }
        let mut env = OutputEnv::new(&s, &Sh, 2);
        env.options = opts;
        let mut i = info();
        i.tracer = "function_graph";
        text(
            &mut l,
            &env,
            OutputStyle::Graph(flags),
            Overruns::None,
            Some(&i),
        )
    };
    let d = GraphFlags::DEFAULT;
    assert_eq!(
        render(d - GraphFlags::DURATION, D),
        "# tracer: function_graph\n#\n\
         # CPU               FUNCTION CALLS\n\
         # |                 |   |   |   |\n\
         \x200) vfs_read() {\n\
         \x200)   aa_file_perm();\n\
         \x200) }\n"
    );
    assert_eq!(
        render(d - GraphFlags::OVERHEAD, D).lines().nth(5).unwrap(),
        " 0)   11.361 us   |    aa_file_perm();"
    );
    assert_eq!(
        render(d | GraphFlags::ABS_TIME, D).lines().nth(6).unwrap(),
        "   43.418354 |   0) ! 684.994 us  |  }"
    );
    // No context: only the call graph, no header.
    assert_eq!(
        render(d, D - TraceOptions::CONTEXT_INFO),
        "# tracer: function_graph\n#\nvfs_read() {\n  aa_file_perm();\n}\n"
    );
}
