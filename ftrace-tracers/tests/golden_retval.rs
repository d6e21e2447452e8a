//! function_graph return values and `tracing_thresh` against a real Linux 6.12 built with
//! `CONFIG_FUNCTION_GRAPH_RETVAL`, byte for byte.
//!
//! `tests/goldens/linux-6.12/graph-retval/` holds, per run, the kernel's `trace` text and the
//! raw pages of every CPU's `trace_pipe_raw` for the same buffer (captured by
//! `scripts/goldens/capture-6.12.sh`). Each test decodes the pages with ftrace-ringbuf, formats
//! the kernel's own records with our formatter under the options the run's `trace_options`
//! lists, and compares with the kernel's text, header included.

use std::collections::HashMap;

use ftrace_core::EventId;
use ftrace_core::entry::{FtraceGraphRetvalEntry, Pod, TraceEntry};
use ftrace_core::symbols::SortedSymbols;
use ftrace_ringbuf::page::Page;
use ftrace_tracers::event::{Entry, read_graph_return};
use ftrace_tracers::function_graph::{FunctionGraphTracer, ReturnValues};
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::header::HeaderInfo;
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::tracer::Tracer;
use ftrace_tracers::{EventRef, Options, TraceIter, TraceOptions};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/goldens/linux-6.12/graph-retval"
);

fn read(rel: &str) -> Vec<u8> {
    let p = format!("{DIR}/{rel}");
    std::fs::read(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn text(rel: &str) -> String {
    String::from_utf8(read(rel)).unwrap()
}

struct Tasks(HashMap<i32, String>);

impl TaskNames for Tasks {
    fn comm(&self, pid: i32) -> Option<&str> {
        self.0.get(&pid).map(String::as_str)
    }
}

/// `kallsyms` as the capture script keeps it: "address size name".
fn symbols() -> (SortedSymbols, Option<(u64, u64)>) {
    let mut s = SortedSymbols::new();
    let (mut start, mut end) = (None, None);
    for line in text("kallsyms").lines() {
        let mut f = line.split_whitespace();
        let addr = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
        let size = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
        let name = f.next().unwrap();
        match name {
            "__irqentry_text_start" => start = Some(addr),
            "__irqentry_text_end" => end = Some(addr),
            _ => s.push(name, addr, size, None),
        }
    }
    s.finish();
    (s, start.zip(end))
}

/// `saved_cmdlines`: "pid comm".
fn tasks(run: &str) -> Tasks {
    let mut m = HashMap::new();
    for line in text(&format!("{run}/saved_cmdlines")).lines() {
        let (pid, comm) = line.split_once(' ').unwrap();
        m.insert(pid.parse().unwrap(), comm.to_string());
    }
    Tasks(m)
}

/// The global options and function_graph's flags that the run's `trace_options` lists.
fn options(run: &str) -> (TraceOptions, GraphFlags) {
    let (mut global, mut graph) = (TraceOptions::empty(), GraphFlags::empty());
    for line in text(&format!("{run}/trace_options")).lines() {
        if let Some(f) = TraceOptions::by_name(line) {
            global |= f;
        } else if let Some(o) = GraphFlags::OPTS_WITH_RETVAL.iter().find(|o| o.name == line) {
            graph |= GraphFlags::from_bits_truncate(o.bit);
        }
    }
    (global, graph)
}

struct Ev {
    cpu: u32,
    ts: u64,
    data: Vec<u8>,
}

/// Every event of every CPU's raw pages, in page order.
fn events(run: &str) -> (Vec<Ev>, u32) {
    let mut evs = Vec::new();
    let mut cpus = 0;
    while let Ok(raw) = std::fs::read(format!("{DIR}/{run}/cpu{cpus}.raw")) {
        for chunk in raw.chunks(4096) {
            let page = Page::new(chunk).unwrap();
            assert!(
                !page.missed_events(),
                "{run} cpu{cpus}: the capture lost events"
            );
            for e in page.events() {
                let e = e.unwrap();
                evs.push(Ev {
                    cpu: cpus,
                    ts: e.ts,
                    data: e.payload.to_vec(),
                });
            }
        }
        cpus += 1;
    }
    assert!(cpus > 0, "{run}: no raw pages");
    (evs, cpus)
}

fn render(run: &str) -> (String, Vec<Ev>) {
    let (syms, irq_text) = symbols();
    let t = tasks(run);
    let (global, graph) = options(run);
    let (evs, cpus) = events(run);
    let mut env = OutputEnv::new(&syms, &t, cpus);
    env.options = global;
    env.irq_text = irq_text;
    let mut l = EventLists::new(cpus);
    for e in &evs {
        l.push(EventRef::new(e.cpu, e.ts, &e.data));
    }
    let header = HeaderInfo {
        tracer: "function_graph",
        entries: 0,
        written: 0,
        online_cpus: cpus,
        latency: Default::default(),
    };
    let mut state = vec![GraphCpuState::INIT; cpus as usize];
    let mut w = TraceWriter::new(OutputStyle::Graph(graph), &mut state, Overruns::None);
    let mut out = Vec::new();
    w.write_trace(
        &mut out,
        &env,
        Some(&header),
        &mut TraceIter::new(&mut l, None),
    )
    .unwrap();
    (String::from_utf8(out).unwrap(), evs)
}

fn assert_same(got: &str, want: &str, what: &str) {
    if got != want {
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(g, w, "{what}: first difference at line {}", i + 1);
        }
        panic!(
            "{what}: lengths differ: got {} lines, want {}",
            got.lines().count(),
            want.lines().count()
        );
    }
}

fn check(run: &str) -> Vec<Ev> {
    let (got, evs) = render(run);
    let want = text(&format!("{run}/trace"));
    assert_same(&got, &want, run);
    evs
}

/// The return records of a run: (func, retval, duration).
fn returns(evs: &[Ev]) -> Vec<(u64, u64, u64)> {
    evs.iter()
        .filter_map(|e| match EventRef::new(e.cpu, e.ts, &e.data).entry() {
            Entry::GraphReturn(r) => Some((r.func, r.retval.unwrap(), r.rettime - r.calltime)),
            _ => None,
        })
        .collect()
}

#[test]
fn kernel_records_are_64_bytes_with_the_value() {
    let evs = check("retval");
    let exits: Vec<&Ev> = evs
        .iter()
        .filter(|e| {
            TraceEntry::read_from(&e.data).unwrap().type_ == EventId::FuncgraphExit.as_u16()
        })
        .collect();
    assert!(!exits.is_empty());
    for e in &exits {
        assert_eq!(e.data.len(), size_of::<FtraceGraphRetvalEntry>());
        assert!(read_graph_return(&e.data).unwrap().retval.is_some());
    }
    // The failing open's -ENOENT is there, as the kernel printed it.
    let open = range_of("do_sys_openat2");
    assert!(
        returns(&evs)
            .iter()
            .any(|&(f, v, _)| open.contains(&f) && v == (-2i64) as u64)
    );
    assert!(text("retval/trace").contains("/* do_sys_openat2 = -2 */"));
    // filename_lookup returns an int: its -ENOENT sits zero-extended in the register, and the
    // kernel prints it sign-extended.
    let lookup = range_of("filename_lookup");
    let lookups: Vec<u64> = returns(&evs)
        .iter()
        .filter(|r| lookup.contains(&r.0))
        .map(|r| r.1)
        .collect();
    assert!(lookups.contains(&0xffff_fffe), "{lookups:x?}");
    assert!(text("retval/trace").contains("filename_lookup(); /* = -2 */"));
}

/// The address range `kallsyms` gives `name` (a recorded `func` may sit past an `endbr64`).
fn range_of(name: &str) -> core::ops::Range<u64> {
    let line = text("kallsyms")
        .lines()
        .find(|l| l.split_whitespace().nth(2) == Some(name))
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no {name} in kallsyms"));
    let mut f = line.split_whitespace();
    let addr = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
    let size = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
    addr..addr + size
}

#[test]
fn retval_hex() {
    check("retval-hex");
}

#[test]
fn retval_with_tail() {
    check("retval-tail");
}

#[test]
fn records_with_values_print_plain_without_the_option() {
    check("plain");
}

#[test]
fn tracing_thresh_returns_only() {
    for run in ["thresh", "thresh-retval"] {
        let evs = check(run);
        let thresh_ns = text(&format!("{run}/tracing_thresh"))
            .trim()
            .parse::<u64>()
            .unwrap()
            * 1000;
        assert!(thresh_ns > 0);
        // No entries; every return lasted at least the threshold.
        for e in &evs {
            let id = TraceEntry::read_from(&e.data).unwrap().type_;
            assert_ne!(
                id,
                EventId::FuncgraphEntry.as_u16(),
                "{run}: an entry under tracing_thresh"
            );
        }
        let r = returns(&evs);
        assert!(!r.is_empty(), "{run}: nothing lasted the threshold");
        assert!(r.iter().all(|&(_, _, d)| d >= thresh_ns), "{run}");
    }
}

#[test]
fn trace_options_listing_with_retval() {
    // The kernel lists funcgraph-retval and funcgraph-retval-hex after funcgraph-tail; a tracer
    // with return values lists the same names in the same order (this kernel has no profiler).
    let t = FunctionGraphTracer::new().with_return_values(ReturnValues::Recorded);
    for run in ["retval", "retval-hex", "plain"] {
        let (global, graph) = options(run);
        let o = Options {
            trace: global,
            tracer: graph.bits(),
        };
        let mut got = String::new();
        o.write_listing(&mut got, t.options()).unwrap();
        assert_same(&got, &text(&format!("{run}/trace_options")), run);
    }
}
