//! The formatter against real Linux 6.12.117 output, byte for byte.
//!
//! Each test parses a reference capture back into the events it shows (addresses and exact
//! nanosecond timestamps from the `raw`/`hex` renderings of the same buffer, names from the
//! default rendering), then formats those events with the general formatter under each option
//! the capture was taken with, and compares with the kernel's bytes. Nothing is copied from the
//! expected text into the output: a wrong column, rounding or option interaction fails.

use std::collections::HashMap;

use ftrace_core::TraceFlags;
use ftrace_core::entry::{
    FtraceEntry, FtraceGraphEntEntry, FtraceGraphRetEntry, Pod, PrintEntry, RawDataEntry,
    TraceEntry,
};
use ftrace_core::symbols::SortedSymbols;
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::{EventRef, TraceIter, TraceOptions};

const REF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/reference/ftrace-6.12.117"
);

fn read(rel: &str) -> String {
    let p = format!("{REF}/{rel}");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

#[derive(Default)]
struct Tasks(HashMap<i32, String>);

impl TaskNames for Tasks {
    fn comm(&self, pid: i32) -> Option<&str> {
        self.0.get(&pid).map(String::as_str)
    }
}

struct Ev {
    cpu: u32,
    ts: u64,
    data: Vec<u8>,
}

fn lists(evs: &[Ev]) -> EventLists<'_> {
    let mut l = EventLists::new(2);
    for e in evs {
        l.push(EventRef::new(e.cpu, e.ts, &e.data));
    }
    l
}

struct Render<'a> {
    env: OutputEnv<'a>,
    style: OutputStyle,
    header: Option<HeaderInfo<'a>>,
    cpu_file: Option<u32>,
}

fn render(evs: &[Ev], r: &Render<'_>) -> String {
    let mut l = lists(evs);
    let mut state = [GraphCpuState::INIT; 2];
    let mut w = TraceWriter::new(r.style, &mut state, Overruns::None);
    let mut it = TraceIter::new(&mut l, r.cpu_file);
    let mut out: Vec<u8> = Vec::new();
    w.write_trace(&mut out, &r.env, r.header.as_ref(), &mut it)
        .unwrap();
    String::from_utf8(out).unwrap()
}

fn assert_same(got: &str, want: &str, what: &str) {
    if got != want {
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            if g != w {
                panic!(
                    "{what}: first difference at line {}:\n got: {g:?}\nwant: {w:?}",
                    i + 1
                );
            }
        }
        panic!(
            "{what}: lengths differ: got {} lines, want {}",
            got.lines().count(),
            want.lines().count()
        );
    }
}

/// Inverse of the five flag characters.
fn parse_flags(s: &str) -> (u8, u8) {
    let c: Vec<char> = s.chars().collect();
    assert_eq!(c.len(), 5, "flags {s:?}");
    let mut f = TraceFlags::empty();
    match c[0] {
        'D' => f |= TraceFlags::IRQS_OFF | TraceFlags::BH_OFF,
        'd' => f |= TraceFlags::IRQS_OFF,
        'b' => f |= TraceFlags::BH_OFF,
        'X' => f |= TraceFlags::IRQS_NOSUPPORT,
        _ => {}
    }
    match c[1] {
        'N' => f |= TraceFlags::NEED_RESCHED | TraceFlags::PREEMPT_RESCHED,
        'n' => f |= TraceFlags::NEED_RESCHED,
        'p' => f |= TraceFlags::PREEMPT_RESCHED,
        _ => {}
    }
    match c[2] {
        'Z' => f |= TraceFlags::NMI | TraceFlags::HARDIRQ,
        'z' => f |= TraceFlags::NMI,
        'H' => f |= TraceFlags::HARDIRQ | TraceFlags::SOFTIRQ,
        'h' => f |= TraceFlags::HARDIRQ,
        's' => f |= TraceFlags::SOFTIRQ,
        _ => {}
    }
    let pc = c[3].to_digit(16).unwrap_or(0) as u8 | ((c[4].to_digit(16).unwrap_or(0) as u8) << 4);
    (f.bits(), pc)
}

/// A default-format line: (comm, pid, cpu, flags, body).
fn parse_line(line: &str) -> (String, i32, u32, String, String) {
    let (task, rest) = line.split_at(25);
    let task = task.trim();
    let dash = task.rfind('-').unwrap();
    let comm = task[..dash].to_string();
    let pid: i32 = task[dash + 1..].parse().unwrap();
    let cpu: u32 = rest[1..4].parse().unwrap();
    let flags = rest[6..11].to_string();
    let colon = rest.find(": ").unwrap();
    let body = rest[colon + 2..].to_string();
    (comm, pid, cpu, flags, body)
}

fn stats_totals(dir: &str, files: &[&str]) -> (u64, u64) {
    let (mut entries, mut overrun) = (0, 0);
    for f in files {
        for line in read(&format!("{dir}/{f}")).lines() {
            if let Some(v) = line.strip_prefix("entries: ") {
                entries += v.trim().parse::<u64>().unwrap();
            }
            if let Some(v) = line.strip_prefix("overrun: ") {
                overrun += v.trim().parse::<u64>().unwrap();
            }
        }
    }
    (entries, entries + overrun)
}

fn uts_release() -> String {
    read("00-meta/uname.txt")
        .split_whitespace()
        .nth(2)
        .unwrap()
        .to_string()
}

fn body_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.starts_with('#'))
}

// ---------------------------------------------------------------------------------------------
// 04-function

struct FunctionRun {
    evs: Vec<Ev>,
    tasks: Tasks,
    syms: SortedSymbols,
    sized_syms: SortedSymbols,
    entries: u64,
    written: u64,
}

fn function_run() -> FunctionRun {
    let text = read("04-function/trace.txt");
    let raw = read("04-function/trace_raw.txt");
    let offs = read("04-function/trace_sym-offset.txt");
    let mut tasks = Tasks::default();
    let mut evs = Vec::new();
    let mut addrs: HashMap<u64, String> = HashMap::new();
    let mut sized: HashMap<String, (u64, u64)> = HashMap::new();
    for ((line, rline), oline) in body_lines(&text)
        .zip(body_lines(&raw))
        .zip(body_lines(&offs))
    {
        let (comm, pid, cpu, flags, body) = parse_line(line);
        let f: Vec<&str> = rline.split_whitespace().collect();
        assert_eq!(f[0].parse::<i32>().unwrap(), pid);
        assert_eq!(f[1].parse::<u32>().unwrap(), cpu);
        let ts: u64 = f[2].parse().unwrap();
        let ip = u64::from_str_radix(f[3], 16).unwrap();
        let parent = u64::from_str_radix(f[4], 16).unwrap();
        let (name, pname) = body.split_once(" <-").unwrap();
        addrs.insert(ip, name.to_string());
        addrs.insert(parent, pname.to_string());
        let (_, _, _, _, obody) = parse_line(oline);
        for (sym, addr) in obody.split(" <-").zip([ip, parent]) {
            let (n, rest) = sym.split_once('+').unwrap();
            let (off, size) = rest.split_once('/').unwrap();
            let off = u64::from_str_radix(&off[2..], 16).unwrap();
            let size = u64::from_str_radix(&size[2..], 16).unwrap();
            sized.insert(n.to_string(), (addr - off, size));
        }
        tasks.0.insert(pid, comm);
        let (flags, pc) = parse_flags(&flags);
        let e = FtraceEntry {
            ent: TraceEntry {
                type_: 1,
                flags,
                preempt_count: pc,
                pid,
            },
            ip,
            parent_ip: parent,
        };
        evs.push(Ev {
            cpu,
            ts,
            data: e.as_bytes().to_vec(),
        });
    }
    assert_eq!(evs.len(), 53);
    // The kernel's symbol table: kallsyms (a subset holding every symbol of the captures).
    let syms = SortedSymbols::from_kallsyms(&read("11-kallsyms/kallsyms_subset.txt")).unwrap();
    for (addr, name) in &addrs {
        assert_eq!(
            ftrace_core::symbols::SymbolTable::lookup(&syms, *addr).map(|s| s.name),
            Some(name.as_str()),
            "kallsyms covers {addr:x}"
        );
    }
    // Symbol sizes are not in /proc/kallsyms; sym-offset shows them.
    let mut sized_syms = SortedSymbols::new();
    for (n, (a, s)) in &sized {
        sized_syms.push(n, *a, *s, None);
    }
    sized_syms.finish();
    let (entries, written) = stats_totals(
        "04-function",
        &["per_cpu_cpu0_stats.txt", "per_cpu_cpu1_stats.txt"],
    );
    FunctionRun {
        evs,
        tasks,
        syms,
        sized_syms,
        entries,
        written,
    }
}

fn header<'a>(
    tracer: &'a str,
    entries: u64,
    written: u64,
    uts: &'a str,
    cpu: u32,
) -> HeaderInfo<'a> {
    HeaderInfo {
        tracer,
        entries,
        written,
        online_cpus: 2,
        latency: LatencyInfo {
            uts_release: uts,
            preempt_model: "desktop",
            cpu,
            ..LatencyInfo::default()
        },
    }
}

#[test]
fn function_trace_all_cpus_and_per_cpu() {
    let run = function_run();
    let uts = uts_release();
    let env = OutputEnv::new(&run.syms, &run.tasks, 2);
    let mut r = Render {
        env,
        style: OutputStyle::Default,
        header: Some(header("function", run.entries, run.written, &uts, 0)),
        cpu_file: None,
    };
    assert_same(
        &render(&run.evs, &r),
        &read("04-function/trace.txt"),
        "trace",
    );
    for cpu in 0..2 {
        r.cpu_file = Some(cpu);
        let want = read(&format!("04-function/per_cpu_cpu{cpu}_trace.txt"));
        assert_same(&render(&run.evs, &r), &want, "per-cpu trace");
    }
    r.cpu_file = None;
    r.header = Some(header("function", 0, 0, &uts, 0));
    assert_same(
        &render(&[], &r),
        &read("04-function/trace_empty.txt"),
        "empty",
    );
}

#[test]
fn function_trace_raw_hex_sym_offset() {
    let run = function_run();
    let uts = uts_release();
    for (opt, file, sized) in [
        ("raw", "trace_raw.txt", false),
        ("hex", "trace_hex.txt", false),
        ("sym-offset", "trace_sym-offset.txt", true),
    ] {
        let syms: &SortedSymbols = if sized { &run.sized_syms } else { &run.syms };
        let mut env = OutputEnv::new(syms, &run.tasks, 2);
        env.options |= TraceOptions::by_name(opt).unwrap();
        let r = Render {
            env,
            style: OutputStyle::Default,
            header: Some(header("function", run.entries, run.written, &uts, 0)),
            cpu_file: None,
        };
        assert_same(
            &render(&run.evs, &r),
            &read(&format!("04-function/{file}")),
            opt,
        );
    }
}

#[test]
fn function_trace_bin() {
    // `bin` keeps the text header, then 32 bytes per event: pid, cpu, ts, ip, parent.
    let run = function_run();
    let uts = uts_release();
    let mut env = OutputEnv::new(&run.syms, &run.tasks, 2);
    env.options |= TraceOptions::BIN;
    let mut l = lists(&run.evs);
    let mut state = [GraphCpuState::INIT; 2];
    let mut w = TraceWriter::new(OutputStyle::Default, &mut state, Overruns::None);
    let mut it = TraceIter::new(&mut l, None);
    let mut out: Vec<u8> = Vec::new();
    let info = header("function", run.entries, run.written, &uts, 0);
    w.write_trace(&mut out, &env, Some(&info), &mut it).unwrap();
    let text = read("04-function/trace.txt");
    let head: String = text.lines().take(12).map(|l| format!("{l}\n")).collect();
    assert_eq!(head.len(), 522);
    assert_eq!(&out[..522], head.as_bytes());
    assert_eq!(out.len(), 522 + 53 * 32);
    let mut order: Vec<&Ev> = run.evs.iter().collect();
    order.sort_by_key(|e| (e.ts, e.cpu));
    for (rec, ev) in out[522..].chunks(32).zip(order) {
        let f = FtraceEntry::read_from(&ev.data).unwrap();
        let mut want = Vec::new();
        want.extend_from_slice(&{ f.ent.pid }.to_le_bytes());
        want.extend_from_slice(&(ev.cpu as i32).to_le_bytes());
        want.extend_from_slice(&ev.ts.to_le_bytes());
        want.extend_from_slice(&{ f.ip }.to_le_bytes());
        want.extend_from_slice(&{ f.parent_ip }.to_le_bytes());
        assert_eq!(rec, &want[..]);
    }
}

#[test]
fn function_trace_latency_format() {
    let run = function_run();
    let uts = uts_release();
    let want = read("04-function/trace_latency-format.txt");
    // The buffer's reset time (`time_start`) is kernel state no capture file holds: recover the
    // interval every printed relative time allows, and format with a value inside it.
    let (mut lo, mut hi) = (i128::MIN, i128::MAX);
    let mut order: Vec<&Ev> = run.evs.iter().collect();
    order.sort_by_key(|e| (e.ts, e.cpu));
    for (line, ev) in body_lines(&want).zip(&order) {
        let us: i128 = line[25..]
            .split("us")
            .next()
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let ts = ev.ts as i128;
        lo = lo.max(ts - us * 1000 - 500);
        hi = hi.min(ts - us * 1000 + 500);
    }
    assert!(lo < hi, "a consistent time_start exists");
    let mut env = OutputEnv::new(&run.syms, &run.tasks, 2);
    env.options |= TraceOptions::LATENCY_FORMAT;
    env.time_start = (lo + 1) as u64;
    let r = Render {
        env,
        style: OutputStyle::Default,
        header: Some(header("function", run.entries, run.written, &uts, 0)),
        cpu_file: None,
    };
    assert_same(&render(&run.evs, &r), &want, "latency-format");
}

// ---------------------------------------------------------------------------------------------
// 05-function-graph

struct GraphRun {
    evs: Vec<Ev>,
    tasks: Tasks,
    syms: SortedSymbols,
}

/// Parses `trace_abstime.txt` (the only rendering with timestamps) into entry/return events.
fn graph_run() -> GraphRun {
    let text = read("05-function-graph/trace_abstime.txt");
    let mut tasks = Tasks::default();
    let mut names: Vec<String> = Vec::new();
    let mut evs = Vec::new();
    let mut cur_pid: [Option<i32>; 2] = [None, None];
    let mut stacks: [Vec<u64>; 2] = [Vec::new(), Vec::new()];
    // Pids before the first banner of a CPU are the banner's "prev".
    let mut pending: Vec<(usize, u32)> = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let addr_of = |names: &mut Vec<String>, n: &str| -> u64 {
        let i = names.iter().position(|x| x == n).unwrap_or_else(|| {
            names.push(n.to_string());
            names.len() - 1
        });
        0xffff_ffff_8100_0000 + 0x1000 * i as u64
    };
    let proc_of = |s: &str| -> (String, i32) {
        let s = s.trim();
        let d = s.rfind('-').unwrap();
        (s[..d].to_string(), s[d + 1..].parse().unwrap())
    };
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        i += 1;
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with(" ---") {
            // " N) prev => next" then the closing dashes and a blank line.
            let l = lines[i];
            i += 3;
            let cpu: u32 = l[..l.find(')').unwrap()].trim().parse().unwrap();
            let (a, b) = l[l.find(')').unwrap() + 2..].split_once(" => ").unwrap();
            let (pc, pp) = proc_of(a);
            let (nc, np) = proc_of(b);
            tasks.0.insert(pp, pc);
            tasks.0.insert(np, nc);
            if cur_pid[cpu as usize].is_none() {
                for (idx, c) in pending.drain(..) {
                    if c == cpu {
                        evs_set_pid(&mut evs, idx, pp);
                    }
                }
            }
            cur_pid[cpu as usize] = Some(np);
            continue;
        }
        // "   43.274896 |   1) ! 176.171 us  |  mutex_unlock();"
        let (time, rest) = line.split_once(" |").unwrap();
        let (secs, us) = time.trim().split_once('.').unwrap();
        let ts_us: u64 = secs.parse::<u64>().unwrap() * 1_000_000 + us.parse::<u64>().unwrap();
        let ts = ts_us * 1000 + i as u64; // keep the capture's order within a microsecond
        let close = rest.find(')').unwrap();
        let cpu: u32 = rest[..close].trim().parse().unwrap();
        let rest = &rest[close + 2..];
        let (dur, func) = rest.split_once("|  ").unwrap();
        let dur = dur
            .trim()
            .trim_start_matches(['+', '!', '#', '*', '@', '$'])
            .trim();
        let dur_ns = dur.strip_suffix(" us").map(|d| {
            let (a, b) = d.split_once('.').unwrap_or((d, ""));
            let frac = format!("{b:0<3}");
            a.parse::<u64>().unwrap() * 1000 + frac[..3].parse::<u64>().unwrap()
        });
        let depth = (func.len() - func.trim_start().len()) / 2;
        let func = func.trim_start();
        let pid = cur_pid[cpu as usize].unwrap_or(-1);
        if pid == -1 {
            pending.push((evs.len(), cpu));
        }
        let ctx = TraceEntry {
            type_: 0,
            flags: 0,
            preempt_count: 0,
            pid,
        };
        let st = &mut stacks[cpu as usize];
        if let Some(name) = func.strip_suffix("();") {
            let f = addr_of(&mut names, name);
            evs.push(graph_ent(cpu, ts, ctx, f, depth));
            evs.push(graph_ret(cpu, ts, ctx, f, depth, ts, ts + dur_ns.unwrap()));
        } else if let Some(name) = func.strip_suffix("() {") {
            let f = addr_of(&mut names, name);
            st.truncate(depth);
            st.push(f);
            evs.push(graph_ent(cpu, ts, ctx, f, depth));
        } else {
            assert_eq!(func, "}", "line {line:?}");
            let f = st[depth];
            st.truncate(depth);
            let calltime = ts - dur_ns.unwrap();
            evs.push(graph_ret(cpu, ts, ctx, f, depth, calltime, ts));
        }
    }
    // A CPU that never switched (CPU 1's lone line): any pid will do; name it as the shell.
    for (idx, _) in pending.drain(..) {
        evs_set_pid(&mut evs, idx, 144);
    }
    tasks.0.insert(144, "sh".into());
    let mut syms = SortedSymbols::new();
    for (k, n) in names.iter().enumerate() {
        syms.push(n, 0xffff_ffff_8100_0000 + 0x1000 * k as u64, 0x1000, None);
    }
    syms.finish();
    GraphRun { evs, tasks, syms }
}

fn evs_set_pid(evs: &mut [Ev], from: usize, pid: i32) {
    // The events pushed for one parsed line: an entry, and for a leaf its return too.
    for e in evs[from..].iter_mut().take(2) {
        let mut h = TraceEntry::read_from(&e.data).unwrap();
        if h.pid == -1 {
            h.pid = pid;
            e.data[..8].copy_from_slice(h.as_bytes());
        }
    }
}

fn graph_ent(cpu: u32, ts: u64, mut ent: TraceEntry, func: u64, depth: usize) -> Ev {
    ent.type_ = 11;
    let e = FtraceGraphEntEntry {
        ent,
        func,
        depth: depth as i32,
    };
    Ev {
        cpu,
        ts,
        data: e.as_bytes().to_vec(),
    }
}

fn graph_ret(
    cpu: u32,
    ts: u64,
    mut ent: TraceEntry,
    func: u64,
    depth: usize,
    calltime: u64,
    rettime: u64,
) -> Ev {
    ent.type_ = 10;
    let e = FtraceGraphRetEntry {
        ent,
        func,
        depth: depth as i32,
        overrun: 0,
        calltime,
        rettime,
        backport_calltime: 0,
        backport_rettime: 0,
    };
    Ev {
        cpu,
        ts,
        data: e.as_bytes().to_vec(),
    }
}

fn graph_render(run: &GraphRun, flags: GraphFlags, cpu_file: Option<u32>, evs: &[Ev]) -> String {
    let env = OutputEnv::new(&run.syms, &run.tasks, 2);
    let r = Render {
        env,
        style: OutputStyle::Graph(flags),
        header: Some(header("function_graph", 0, 0, "", 0)),
        cpu_file,
    };
    render(evs, &r)
}

#[test]
fn function_graph_default_abstime_tail() {
    let run = graph_run();
    let d = GraphFlags::DEFAULT;
    for (flags, file) in [
        (d, "trace.txt"),
        (d | GraphFlags::ABS_TIME, "trace_abstime.txt"),
        (d | GraphFlags::TAIL, "trace_tail.txt"),
    ] {
        let want = read(&format!("05-function-graph/{file}"));
        assert_same(&graph_render(&run, flags, None, &run.evs), &want, file);
    }
}

#[test]
fn function_graph_per_cpu_and_empty() {
    let run = graph_run();
    for cpu in 0..2 {
        let want = read(&format!("05-function-graph/per_cpu_cpu{cpu}_trace.txt"));
        assert_same(
            &graph_render(&run, GraphFlags::DEFAULT, Some(cpu), &run.evs),
            &want,
            "per-cpu graph",
        );
    }
    let want = read("05-function-graph/trace_empty.txt");
    assert_same(
        &graph_render(&run, GraphFlags::DEFAULT, None, &[]),
        &want,
        "empty",
    );
}

// ---------------------------------------------------------------------------------------------
// 09-marker

fn marker_events() -> (Vec<Ev>, Tasks) {
    let text = read("09-marker/trace.txt");
    let raw = read("09-marker/trace_raw.txt");
    let mut tasks = Tasks::default();
    let mut evs = Vec::new();
    for (line, rline) in body_lines(&text).zip(body_lines(&raw)) {
        let (comm, pid, cpu, flags, _) = parse_line(line);
        tasks.0.insert(pid, comm);
        // "144 1 127974176880 # ffffffff812377ff hello"
        let mut f = rline.splitn(6, ' ');
        assert_eq!(f.next().unwrap().parse::<i32>().unwrap(), pid);
        assert_eq!(f.next().unwrap().parse::<u32>().unwrap(), cpu);
        let ts: u64 = f.next().unwrap().parse().unwrap();
        assert_eq!(f.next(), Some("#"));
        let ip = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
        let msg = f.next().unwrap();
        let (flags, pc) = parse_flags(&flags);
        let p = PrintEntry {
            ent: TraceEntry {
                type_: 5,
                flags,
                preempt_count: pc,
                pid,
            },
            ip,
        };
        let mut data = p.as_bytes().to_vec();
        data.extend_from_slice(msg.as_bytes());
        data.extend_from_slice(b"\n\0");
        evs.push(Ev { cpu, ts, data });
    }
    (evs, tasks)
}

#[test]
fn markers_trace_raw_and_pipe() {
    let (mut evs, tasks) = marker_events();
    let syms = SortedSymbols::from_kallsyms(&read("11-kallsyms/kallsyms_subset.txt")).unwrap();
    let n = evs.len() as u64;
    let mut r = Render {
        env: OutputEnv::new(&syms, &tasks, 2),
        style: OutputStyle::Default,
        header: Some(header("nop", n, n, "", 0)),
        cpu_file: None,
    };
    assert_same(&render(&evs, &r), &read("09-marker/trace.txt"), "markers");
    assert_same(
        &render(&evs, &r),
        &read("09-marker/trace_after_markers0.txt"),
        "markers after markers=0",
    );
    r.env.options |= TraceOptions::RAW;
    assert_same(&render(&evs, &r), &read("09-marker/trace_raw.txt"), "raw");

    // trace_pipe also shows the trace_marker_raw write (id 1, "ABCDEFGH"), read after `trace`.
    let pipe = read("09-marker/trace_pipe.txt");
    let last = body_lines(&pipe).nth(4).unwrap();
    let (_, pid, cpu, _, body) = parse_line(last);
    let time = &last[36..last.find(": ").unwrap()];
    let (s, us) = time.trim().split_once('.').unwrap();
    let ts = (s.parse::<u64>().unwrap() * 1_000_000 + us.parse::<u64>().unwrap()) * 1000;
    let (id, bytes) = body
        .strip_prefix("# ")
        .unwrap()
        .split_once(" buf:")
        .unwrap();
    let mut data = RawDataEntry {
        ent: TraceEntry {
            type_: 18,
            flags: 0,
            preempt_count: 0,
            pid,
        },
        id: u32::from_str_radix(id, 16).unwrap(),
    }
    .as_bytes()
    .to_vec();
    data.extend(
        bytes
            .split_whitespace()
            .map(|b| u8::from_str_radix(b, 16).unwrap()),
    );
    evs.push(Ev { cpu, ts, data });
    r.env.options.remove(TraceOptions::RAW);
    r.header = None;
    let want = pipe.strip_suffix("rc=0\n").unwrap();
    assert_same(&render(&evs, &r), want, "trace_pipe");
}
