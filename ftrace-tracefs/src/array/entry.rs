//! The traced paths: the trampolines' entry points, the tracers' ops callbacks, the per-CPU
//! shadow stacks and sinks. Invariant: every load of a published cell here happens inside a
//! read-side section of the instance's `ReaderCount` (the dispatcher's, or `on_return`'s).

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

use ftrace_core::event::TraceCtx;
use ftrace_core::ops::{FtraceOps, FtraceRegs};
use ftrace_core::platform::{ExecContext, Reclaim, RecursionState, TaskContext, TraceClock};
use ftrace_core::recursion::TraceRecursion;
use ftrace_ringbuf::ClockUnit;
use ftrace_tracers::function_graph::{GraphEntry, GraphFilter, GraphFunctions, ShadowStack};
use ftrace_tracers::ringbuf::CpuBufferSink;
use ftrace_tracers::tracer::AdmitAll;

use super::{Platform, TraceArray};

/// One CPU's `function_graph` state: its shadow stack and who holds it.
pub(super) struct CpuGraph {
    busy: AtomicBool,
    stack: UnsafeCell<ShadowStack>,
}

impl CpuGraph {
    pub(super) const fn new() -> Self {
        CpuGraph {
            busy: AtomicBool::new(false),
            stack: UnsafeCell::new(ShadowStack::new()),
        }
    }
}

/// The platform as ftrace-core's dispatcher sees it: the task context plus one recursion word
/// per CPU.
pub(super) struct Cx<P, const CPUS: usize> {
    pub(super) platform: P,
    pub(super) recursion: [TraceRecursion; CPUS],
}

impl<P: Platform, const CPUS: usize> TaskContext for Cx<P, CPUS> {
    fn current_pid(&self) -> i32 {
        self.platform.current_pid()
    }
    fn trace_ctx(&self) -> TraceCtx {
        self.platform.trace_ctx()
    }
    fn exec_context(&self) -> ExecContext {
        self.platform.exec_context()
    }
}

impl<P: Platform, const CPUS: usize> RecursionState for Cx<P, CPUS> {
    fn trace_recursion(&self) -> &TraceRecursion {
        let cpu = (self.platform.current_cpu() as usize).min(CPUS - 1);
        &self.recursion[cpu]
    }
}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// The trampoline's entry point: `ip` was called from `parent_ip`, and `ret_slot` holds
    /// the return address (`function_graph` may replace it with
    /// [`Platform::return_handler`]; see the [porting guide](mod@crate::array#porting-guide)).
    #[inline]
    pub fn on_entry(&self, ip: usize, parent_ip: usize, ret_slot: &mut usize) {
        // No guard here: the instance registers its ops dynamic, which needs the ops list
        // (`OpsFlags::NEEDS_LIST`), so the dispatcher runs them inside its own read-side
        // section of `reclaim()` and its recursion protection; their loads of the buffer, the
        // graph filter and the probes rely on that section.
        let mut regs = FtraceRegs {
            sp: core::ptr::from_mut(ret_slot) as u64,
            ..FtraceRegs::default()
        };
        self.dispatcher
            .call(ip as u64, parent_ip as u64, Some(&mut regs));
    }

    /// The return trampoline's entry point: records the return of the innermost hooked
    /// function of this CPU and gives back its original return address.
    ///
    /// # Panics
    /// If no function is hooked on this CPU (the trampoline contract was broken: there is no
    /// address to return to).
    pub fn on_return(&self) -> usize {
        let _guard = self.reclaim().pin();
        let cpu = self.cpu();
        let g = &self.graph_cpus[cpu];
        assert!(
            !g.busy.swap(true, Ordering::Acquire),
            "on_return nested in an entry of the same CPU"
        );
        // SAFETY: `busy` was clear and is now ours: nobody else holds this stack.
        let stack = unsafe { &mut *g.stack.get() };
        let exit = self.graph.exit(
            stack,
            self.now(),
            self.dispatcher.platform(),
            &self.sink(cpu),
        );
        g.busy.store(false, Ordering::Release);
        exit.expect("on_return with an empty shadow stack").ret as usize
    }

    pub(super) fn cpu(&self) -> usize {
        (self.platform().current_cpu() as usize).min(CPUS - 1)
    }

    /// What the selected trace clock counts (`local`: nanoseconds, `counter`: ticks).
    pub(super) fn clock_unit(&self) -> ClockUnit {
        match self.clock.load(Ordering::Relaxed) {
            0 => ClockUnit::Nanoseconds,
            _ => ClockUnit::Ticks,
        }
    }

    pub(super) fn now(&self) -> u64 {
        self.now_ns()
    }

    /// The current CPU's buffer as a sink. Callers are inside a read-side section.
    pub(super) fn sink(&self, cpu: usize) -> Sink<'_, P, CPUS> {
        // SAFETY: every caller is inside a read-side section of `reclaim()` (the dispatcher's
        // around an ops callback, or its own), which the buffer is replaced through; the
        // reference does not outlive the sink, which lives inside the section.
        let buf = unsafe { self.buffer.load() }.and_then(|b| b.cpu(cpu))?;
        Some(CpuBufferSink::new(buf, self))
    }

    fn function_call(&self, ip: u64, parent_ip: u64) {
        if self.tracing_on.load(Ordering::Relaxed) {
            let sink = self.sink(self.cpu());
            let task = self.dispatcher.platform();
            self.function
                .trace_call(ip, parent_ip, &AdmitAll, task, &sink);
        }
    }

    fn graph_entry(&self, ip: u64, ret_slot: &mut usize) {
        if !self.tracing_on.load(Ordering::Relaxed) {
            return;
        }
        let cpu = self.cpu();
        let g = &self.graph_cpus[cpu];
        if g.busy.swap(true, Ordering::Acquire) {
            return;
        }
        // SAFETY: `busy` was clear and is now ours.
        let stack = unsafe { &mut *g.stack.get() };
        // SAFETY: inside the dispatcher's read-side section (see `on_entry`).
        let filter = unsafe { self.graph_filter.load() };
        let all = GraphFunctions::default();
        let filter: &dyn GraphFilter = match filter {
            Some(f) => f,
            None => &all,
        };
        let task = self.dispatcher.platform();
        let hooked = self.graph.entry(
            stack,
            ip,
            *ret_slot as u64,
            self.now(),
            filter,
            task,
            &self.sink(cpu),
        );
        g.busy.store(false, Ordering::Release);
        if hooked == GraphEntry::Hooked {
            *ret_slot = self.platform().return_handler();
        }
    }
}

/// The instance's selected trace clock: the platform's (`local`) or the event counter.
impl<P: Platform, const CPUS: usize> TraceClock for TraceArray<P, CPUS> {
    const NAME: &'static str = "local";
    #[inline]
    fn now_ns(&self) -> u64 {
        match self.clock.load(Ordering::Relaxed) {
            0 => self.platform().now_ns(),
            _ => self.counter.fetch_add(1, Ordering::Relaxed),
        }
    }
}

/// One CPU's ring buffer as the tracers' sink (`None`: no buffer, nothing recorded).
type Sink<'a, P, const CPUS: usize> =
    Option<CpuBufferSink<'a, <P as Platform>::Pages, TraceArray<P, CPUS>>>;

pub(super) fn function_op<P: Platform, const CPUS: usize>(
    ip: u64,
    parent_ip: u64,
    op: &FtraceOps,
    _regs: Option<&mut FtraceRegs>,
) {
    // SAFETY: the instance registered this ops with `private` = itself (`&'static`).
    let array = unsafe { &*op.private().cast::<TraceArray<P, CPUS>>() };
    debug_assert!(
        !array.dispatcher.is_direct(),
        "dynamic ops run from the list"
    );
    array.function_call(ip, parent_ip);
}

pub(super) fn graph_op<P: Platform, const CPUS: usize>(
    ip: u64,
    _parent_ip: u64,
    op: &FtraceOps,
    regs: Option<&mut FtraceRegs>,
) {
    let Some(regs) = regs else { return };
    // SAFETY: as in `function_op`.
    let array = unsafe { &*op.private().cast::<TraceArray<P, CPUS>>() };
    // SAFETY: `on_entry` put the address of its `&mut usize` return slot in `sp`, and the
    // slot outlives this call.
    let slot = unsafe { &mut *(regs.sp as *mut usize) };
    array.graph_entry(ip, slot);
}
