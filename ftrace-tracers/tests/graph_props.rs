//! Property tests: for any call tree, depth limit and shadow-stack size, function_graph records
//! balanced entry/exit pairs, counts overruns exactly, and prints a balanced call graph.

use std::cell::{Cell, RefCell};

use ftrace_core::entry::{FtraceGraphEntEntry, Pod};
use ftrace_core::event::TraceCtx;
use ftrace_core::platform::{ExecContext, TaskContext};
use ftrace_core::symbols::SortedSymbols;
use ftrace_tracers::event::read_graph_ret;
use ftrace_tracers::function_graph::{
    FunctionGraphTracer, GraphEntry, GraphFunctions, ShadowStack,
};
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{NoTaskNames, OutputEnv};
use ftrace_tracers::tracer::{EntrySink, Tracer};
use ftrace_tracers::{EventRef, TraceIter};
use proptest::prelude::*;

#[derive(Clone, Debug)]
struct Call(u64, Vec<Call>);

fn tree() -> impl Strategy<Value = Call> {
    let leaf = (1u64..8).prop_map(|f| Call(f, vec![]));
    leaf.prop_recursive(8, 64, 3, |inner| {
        ((1u64..8), prop::collection::vec(inner, 0..3)).prop_map(|(f, c)| Call(f, c))
    })
}

#[derive(Default)]
struct Sink(RefCell<Vec<(u64, Vec<u8>)>>, Cell<u64>);
impl EntrySink for Sink {
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let mut b = vec![0; len];
        fill(&mut b);
        self.1.set(self.1.get() + 1);
        self.0.borrow_mut().push((self.1.get(), b));
        true
    }
}

struct Task;
impl TaskContext for Task {
    fn current_pid(&self) -> i32 {
        1
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx::default()
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

const N: usize = 6;

fn run(t: &FunctionGraphTracer, st: &mut ShadowStack<N>, s: &Sink, now: &Cell<u64>, c: &Call) {
    now.set(now.get() + 100);
    let hooked = t.entry(
        st,
        c.0,
        c.0,
        now.get(),
        &GraphFunctions::default(),
        &Task,
        s,
    );
    for k in &c.1 {
        run(t, st, s, now, k);
    }
    now.set(now.get() + 100);
    if hooked == GraphEntry::Hooked {
        assert_eq!(t.exit(st, now.get(), &Task, s).unwrap().func, c.0);
    }
}

/// Calls at each depth of the tree.
fn per_depth(c: &Call, d: usize, out: &mut Vec<usize>) {
    if out.len() <= d {
        out.resize(d + 1, 0);
    }
    out[d] += 1;
    for k in &c.1 {
        per_depth(k, d + 1, out);
    }
}

proptest! {
    #[test]
    fn graph_is_balanced_and_overruns_are_exact(t in tree(), max_depth in 0u32..8) {
        let tracer = FunctionGraphTracer::new();
        tracer.init().unwrap();
        tracer.set_max_depth(max_depth);
        let (sink, now) = (Sink::default(), Cell::new(0));
        let mut st = ShadowStack::<N>::new();
        run(&tracer, &mut st, &sink, &now, &t);
        prop_assert_eq!(st.depth(), 0);

        let mut depths = Vec::new();
        per_depth(&t, 0, &mut depths);
        let limit = if max_depth == 0 { N } else { (max_depth as usize).min(N) };
        let traced: usize = depths.iter().take(limit).sum();
        // A full stack refuses calls before the depth limit is looked at.
        let overruns: usize = if max_depth == 0 || max_depth as usize > N {
            depths.iter().skip(N).sum()
        } else {
            0
        };
        prop_assert_eq!(st.overrun() as usize, overruns);

        // Records: balanced, one entry and one exit per traced call.
        let recs = sink.0.borrow();
        let mut open: Vec<u64> = Vec::new();
        let mut entries = 0;
        for (_, b) in recs.iter() {
            if b[0] == 11 {
                let e = FtraceGraphEntEntry::read_from(b).unwrap();
                prop_assert_eq!(e.depth as usize, open.len());
                open.push(e.func);
                entries += 1;
            } else {
                let r = read_graph_ret(b).unwrap();
                prop_assert_eq!(open.pop(), Some(r.func));
                prop_assert_eq!(r.depth as usize, open.len());
            }
        }
        prop_assert!(open.is_empty());
        prop_assert_eq!(entries, traced);

        // Printed: every `{` closed by a `}`, one line per leaf, two per nested call.
        let mut syms = SortedSymbols::new();
        for f in 1..8u64 {
            syms.push(&format!("f{f}"), f, 1, None);
        }
        syms.finish();
        let env = OutputEnv::new(&syms, &NoTaskNames, 1);
        let mut l = EventLists::new(1);
        for (ts, b) in recs.iter() {
            l.push(EventRef::new(0, *ts, b));
        }
        let mut gst = [GraphCpuState::INIT];
        let mut w = TraceWriter::new(OutputStyle::Graph(GraphFlags::DEFAULT), &mut gst, Overruns::None);
        let mut out = Vec::new();
        w.write_events(&mut out, &env, &mut TraceIter::new(&mut l, None)).unwrap();
        let text = String::from_utf8(out).unwrap();
        let opens = text.lines().filter(|l| l.ends_with("() {")).count();
        let closes = text.lines().filter(|l| l.trim_end().ends_with('}')).count();
        let leaves = text.lines().filter(|l| l.ends_with("();")).count();
        prop_assert_eq!(opens, closes);
        prop_assert_eq!(opens + leaves, traced);
        prop_assert_eq!(text.lines().count(), 2 * opens + leaves);
    }
}
