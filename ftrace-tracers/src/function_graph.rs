//! `function_graph`: entry and return of every traced call, driven through a shadow return
//! stack.
//!
//! A backend owns one [`ShadowStack`] per thread (or task) and calls
//! [`FunctionGraphTracer::entry`] when a traced function is entered; if that returns
//! [`GraphEntry::Hooked`] it redirects the function's return to its return trampoline, which
//! calls [`FunctionGraphTracer::exit`] to get the original return address back.
//!
//! Invariants (Linux 6.12's fgraph semantics):
//! - every hooked entry gets exactly one exit, in LIFO order; `depth` is the number of hooked
//!   frames below the call;
//! - a full stack hooks nothing and counts an overrun, which every later return record carries;
//! - `max_graph_depth` (0 = unlimited), `set_graph_function` (trace only inside those
//!   functions), `set_graph_notrace` (trace nothing inside those) and `tracing_thresh` (record
//!   only returns that took at least that long, no entries) decide what is recorded;
//! - under [`ReturnValues::Recorded`] a return passed through
//!   [`FunctionGraphTracer::exit_with_retval`] carries the function's return value, which
//!   `funcgraph-retval` prints (`CONFIG_FUNCTION_GRAPH_RETVAL`).

use ftrace_core::entry::{
    FtraceGraphEntEntry, FtraceGraphRetEntry, FtraceGraphRetvalEntry, Pod, TraceEntry,
};
use ftrace_core::platform::TaskContext;
use ftrace_core::{Errno, EventId};

use crate::options::TracerOpt;
use crate::output::graph::{FTRACE_RETFUNC_DEPTH, GraphFlags};
use crate::output::trace_file::OutputStyle;
use crate::tracer::{EntrySink, Tracer};
use ftrace_core::sync::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// The graph filters: `set_graph_function` and `set_graph_notrace`.
pub trait GraphFilter {
    /// Whether `set_graph_function` is empty (every function is a graph root).
    fn all_functions(&self) -> bool;
    /// Whether `ip` is in `set_graph_function`.
    fn is_graph_function(&self, ip: u64) -> bool;
    /// Whether `ip` is in `set_graph_notrace`.
    fn is_notrace(&self, ip: u64) -> bool;
}

/// Graph filters over address lists (empty `functions` = all functions).
#[derive(Clone, Copy, Debug, Default)]
pub struct GraphFunctions<'a> {
    /// `set_graph_function` addresses.
    pub functions: &'a [u64],
    /// `set_graph_notrace` addresses.
    pub notrace: &'a [u64],
}

impl GraphFilter for GraphFunctions<'_> {
    fn all_functions(&self) -> bool {
        self.functions.is_empty()
    }
    fn is_graph_function(&self, ip: u64) -> bool {
        self.functions.contains(&ip)
    }
    fn is_notrace(&self, ip: u64) -> bool {
        self.notrace.contains(&ip)
    }
}

/// One hooked call on the shadow stack.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetFrame {
    /// The function.
    pub func: u64,
    /// The original return address.
    pub ret: u64,
    /// When it was entered.
    pub calltime: u64,
    /// Time spent in hooked children (for the profiler's `graph-time` off).
    pub subtime: u64,
    /// A `set_graph_notrace` frame: nothing is recorded until it returns.
    notrace: bool,
}

/// A per-thread shadow return stack of at most `N` frames.
#[derive(Clone, Debug)]
pub struct ShadowStack<const N: usize = FTRACE_RETFUNC_DEPTH> {
    frames: [RetFrame; N],
    len: usize,
    overrun: u32,
    /// Depth of the `set_graph_function` root we are inside (`TRACE_GRAPH_FL`).
    graph_root: Option<usize>,
    notrace: bool,
}

impl<const N: usize> Default for ShadowStack<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> ShadowStack<N> {
    /// An empty stack.
    pub const fn new() -> Self {
        ShadowStack {
            frames: [RetFrame {
                func: 0,
                ret: 0,
                calltime: 0,
                subtime: 0,
                notrace: false,
            }; N],
            len: 0,
            overrun: 0,
            graph_root: None,
            notrace: false,
        }
    }

    /// Hooked frames now on the stack.
    pub fn depth(&self) -> usize {
        self.len
    }

    /// Entries refused because the stack was full (`trace_overrun`).
    pub fn overrun(&self) -> u32 {
        self.overrun
    }

    /// The frames, outermost first.
    pub fn frames(&self) -> &[RetFrame] {
        &self.frames[..self.len]
    }
}

/// What [`FunctionGraphTracer::entry`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GraphEntry {
    /// A frame was pushed: redirect the return and call `exit` when it happens.
    Hooked,
    /// Nothing to do on return.
    NotHooked,
}

/// What [`FunctionGraphTracer::exit`] popped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GraphExit {
    /// The original return address to continue at.
    pub ret: u64,
    /// The function that returned.
    pub func: u64,
    /// Its duration, children included.
    pub duration: u64,
    /// Its duration minus hooked children's (`graph-time` off).
    pub self_time: u64,
    /// Whether a return record was written.
    pub recorded: bool,
}

/// The function_graph tracer.
#[derive(Debug)]
pub struct FunctionGraphTracer {
    enabled: AtomicBool,
    max_depth: AtomicU32,
    thresh_ns: AtomicU64,
    profiler: FunctionProfiler,
    return_values: ReturnValues,
}

/// Whether a function_graph tracer's backend passes return values at exit
/// (`CONFIG_FUNCTION_GRAPH_RETVAL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReturnValues {
    /// No return values: 56-byte return records, no `funcgraph-retval` options (Debian 6.12).
    Absent,
    /// The backend calls [`FunctionGraphTracer::exit_with_retval`]: 64-byte return records
    /// and the `funcgraph-retval` and `funcgraph-retval-hex` options.
    Recorded,
}

/// Whether the function profiler is built in (`CONFIG_FUNCTION_PROFILER`): it adds
/// function_graph's `graph-time` option.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FunctionProfiler {
    /// No profiler: no `graph-time` option.
    Absent,
    /// A profiler fed by this tracer: the `graph-time` option (see
    /// [`GraphTime`](crate::profiler::GraphTime)).
    Present,
}

impl Default for FunctionGraphTracer {
    fn default() -> Self {
        Self::new()
    }
}

impl FunctionGraphTracer {
    /// A disabled tracer without return values or the profiler's `graph-time` option.
    pub const fn new() -> Self {
        FunctionGraphTracer {
            enabled: AtomicBool::new(false),
            max_depth: AtomicU32::new(0),
            thresh_ns: AtomicU64::new(0),
            profiler: FunctionProfiler::Absent,
            return_values: ReturnValues::Absent,
        }
    }

    /// This tracer with the function profiler as `profiler` says (`Present` adds the
    /// `graph-time` option).
    pub const fn with_profiler(mut self, profiler: FunctionProfiler) -> Self {
        self.profiler = profiler;
        self
    }

    /// This tracer with return values as `values` says (the options it offers follow).
    pub const fn with_return_values(mut self, values: ReturnValues) -> Self {
        self.return_values = values;
        self
    }

    /// Whether this tracer records return values.
    pub fn return_values(&self) -> ReturnValues {
        self.return_values
    }

    /// `tracing_thresh` in nanoseconds (0 = off).
    pub fn thresh_ns(&self) -> u64 {
        self.thresh_ns.load(Ordering::Relaxed)
    }

    /// `max_graph_depth` (0 = unlimited).
    pub fn max_depth(&self) -> u32 {
        self.max_depth.load(Ordering::Relaxed)
    }

    /// Writes `max_graph_depth`: a decimal number; anything else is `EINVAL`.
    pub fn set_max_depth_str(&self, text: &str) -> Result<(), Errno> {
        let v: u32 = text.trim().parse().map_err(|_| Errno::EINVAL)?;
        self.max_depth.store(v, Ordering::Relaxed);
        Ok(())
    }

    /// Sets `max_graph_depth`.
    pub fn set_max_depth(&self, depth: u32) {
        self.max_depth.store(depth, Ordering::Relaxed);
    }

    /// Sets `tracing_thresh` in nanoseconds (0 = off).
    pub fn set_thresh_ns(&self, ns: u64) {
        self.thresh_ns.store(ns, Ordering::Relaxed);
    }

    /// Whether entries are being recorded.
    pub fn is_enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    /// `graph_entry` + the fgraph push: decides whether `func` (called at `now`, returning to
    /// `ret`) is hooked, and records its entry.
    #[allow(clippy::too_many_arguments)]
    pub fn entry<const N: usize>(
        &self,
        stack: &mut ShadowStack<N>,
        func: u64,
        ret: u64,
        now: u64,
        filter: &(impl GraphFilter + ?Sized),
        task: &(impl TaskContext + ?Sized),
        sink: &(impl EntrySink + ?Sized),
    ) -> GraphEntry {
        if !self.enabled.load(Ordering::Relaxed) || stack.notrace {
            return GraphEntry::NotHooked;
        }
        if stack.len == N {
            stack.overrun = stack.overrun.wrapping_add(1);
            return GraphEntry::NotHooked;
        }
        let depth = stack.len;
        if filter.is_notrace(func) {
            stack.notrace = true;
            stack.frames[depth] = RetFrame {
                func,
                ret,
                calltime: now,
                subtime: 0,
                notrace: true,
            };
            stack.len += 1;
            return GraphEntry::Hooked;
        }
        let max = self.max_depth.load(Ordering::Relaxed) as usize;
        if max != 0 && depth >= max {
            return GraphEntry::NotHooked;
        }
        let root = if stack.graph_root.is_some() || filter.all_functions() {
            false
        } else if filter.is_graph_function(func) {
            true
        } else {
            return GraphEntry::NotHooked;
        };
        if root {
            stack.graph_root = Some(depth);
        }
        stack.frames[depth] = RetFrame {
            func,
            ret,
            calltime: now,
            subtime: 0,
            notrace: false,
        };
        stack.len += 1;
        if self.thresh_ns.load(Ordering::Relaxed) == 0 {
            let e = FtraceGraphEntEntry {
                ent: TraceEntry::new(
                    EventId::FuncgraphEntry,
                    task.trace_ctx(),
                    task.current_pid(),
                ),
                func,
                depth: depth as i32,
            };
            sink.write_entry(size_of::<FtraceGraphEntEntry>(), &mut |b| {
                b[..size_of::<FtraceGraphEntEntry>()].copy_from_slice(e.as_bytes())
            });
        }
        GraphEntry::Hooked
    }

    /// The return trampoline's half: pops the frame, records the return (unless under
    /// `tracing_thresh` or inside a notrace function) and gives back the return address.
    /// Returns `None` on an empty stack (a return that was never hooked: a backend bug).
    /// The record has no return value; see [`FunctionGraphTracer::exit_with_retval`].
    pub fn exit<const N: usize>(
        &self,
        stack: &mut ShadowStack<N>,
        now: u64,
        task: &(impl TaskContext + ?Sized),
        sink: &(impl EntrySink + ?Sized),
    ) -> Option<GraphExit> {
        self.pop_and_record(stack, now, None, task, sink)
    }

    /// [`FunctionGraphTracer::exit`] for a backend that captured the function's return value
    /// (the integer return register): under [`ReturnValues::Recorded`] the record is the
    /// 64-byte [`FtraceGraphRetvalEntry`] carrying `retval`; under [`ReturnValues::Absent`]
    /// the value is dropped and the record is the 56-byte one.
    pub fn exit_with_retval<const N: usize>(
        &self,
        stack: &mut ShadowStack<N>,
        now: u64,
        retval: u64,
        task: &(impl TaskContext + ?Sized),
        sink: &(impl EntrySink + ?Sized),
    ) -> Option<GraphExit> {
        let retval = match self.return_values {
            ReturnValues::Recorded => Some(retval),
            ReturnValues::Absent => None,
        };
        self.pop_and_record(stack, now, retval, task, sink)
    }

    fn pop_and_record<const N: usize>(
        &self,
        stack: &mut ShadowStack<N>,
        now: u64,
        retval: Option<u64>,
        task: &(impl TaskContext + ?Sized),
        sink: &(impl EntrySink + ?Sized),
    ) -> Option<GraphExit> {
        let depth = stack.len.checked_sub(1)?;
        let frame = stack.frames[depth];
        stack.len = depth;
        let duration = now.wrapping_sub(frame.calltime);
        let self_time = duration.saturating_sub(frame.subtime);
        if let Some(parent) = depth.checked_sub(1) {
            stack.frames[parent].subtime = stack.frames[parent].subtime.wrapping_add(duration);
        }
        let mut exit = GraphExit {
            ret: frame.ret,
            func: frame.func,
            duration,
            self_time,
            recorded: false,
        };
        if frame.notrace {
            stack.notrace = false;
            return Some(exit);
        }
        if stack.graph_root == Some(depth) {
            stack.graph_root = None;
        }
        let thresh = self.thresh_ns.load(Ordering::Relaxed);
        if thresh != 0 && duration < thresh {
            return Some(exit);
        }
        let r = FtraceGraphRetEntry {
            ent: TraceEntry::new(EventId::FuncgraphExit, task.trace_ctx(), task.current_pid()),
            func: frame.func,
            depth: depth as i32,
            overrun: stack.overrun,
            calltime: frame.calltime,
            rettime: now,
            backport_calltime: 0,
            backport_rettime: 0,
        };
        exit.recorded = match retval {
            None => sink.write_entry(size_of::<FtraceGraphRetEntry>(), &mut |b| {
                b[..size_of::<FtraceGraphRetEntry>()].copy_from_slice(r.as_bytes())
            }),
            Some(retval) => {
                let r = FtraceGraphRetvalEntry {
                    ent: r.ent,
                    func: r.func,
                    retval,
                    depth: r.depth,
                    overrun: r.overrun,
                    calltime: r.calltime,
                    rettime: r.rettime,
                    backport_calltime: 0,
                    backport_rettime: 0,
                };
                sink.write_entry(size_of::<FtraceGraphRetvalEntry>(), &mut |b| {
                    b[..size_of::<FtraceGraphRetvalEntry>()].copy_from_slice(r.as_bytes())
                })
            }
        };
        Some(exit)
    }
}

impl Tracer for FunctionGraphTracer {
    fn name(&self) -> &'static str {
        "function_graph"
    }
    fn options(&self) -> &'static [TracerOpt] {
        match (self.return_values, self.profiler) {
            (ReturnValues::Absent, FunctionProfiler::Absent) => &GraphFlags::OPTS,
            (ReturnValues::Absent, FunctionProfiler::Present) => &GraphFlags::OPTS_WITH_PROFILER,
            (ReturnValues::Recorded, FunctionProfiler::Absent) => &GraphFlags::OPTS_WITH_RETVAL,
            (ReturnValues::Recorded, FunctionProfiler::Present) => {
                &GraphFlags::OPTS_WITH_RETVAL_AND_PROFILER
            }
        }
    }
    fn default_flags(&self) -> u32 {
        GraphFlags::DEFAULT.bits()
    }
    fn init(&self) -> Result<(), Errno> {
        self.enabled.store(true, Ordering::Relaxed);
        Ok(())
    }
    fn reset(&self) {
        self.enabled.store(false, Ordering::Relaxed);
    }
    fn start(&self) {
        self.enabled.store(true, Ordering::Relaxed);
    }
    fn stop(&self) {
        self.enabled.store(false, Ordering::Relaxed);
    }
    fn output_style(&self, flags: u32) -> OutputStyle {
        OutputStyle::Graph(GraphFlags::from_bits_retain(flags))
    }
    fn allow_instances(&self) -> bool {
        true
    }
}
