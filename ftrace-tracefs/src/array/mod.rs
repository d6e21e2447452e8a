//! [`TraceArray`]: one complete tracing instance (Linux's `struct trace_array`), so that a
//! backend is only its [`Platform`].
//!
//! The instance owns the per-CPU ring buffer, the tracer registry (`nop`, `function`,
//! `function_graph`), the ftrace-core dispatcher and the tracers' ops, the function and
//! graph filters, `max_graph_depth`, `tracing_thresh`, trace and tracer options,
//! `trace_clock`, the markers, pid filters, the cpumask and the `function_graph` shadow
//! stacks. It is `const`-constructible, so it lives in a `static`, and it is the backend of
//! the [`Tracefs`](crate::Tracefs) tree ([`TraceArray::tracefs`]): every file of those features
//! reads and writes the instance.
//!
//! # Porting guide
//!
//! A platform provides the [`Platform`] trait: a clock, the current CPU and the number of
//! possible CPUs, the current pid, a page provider for the ring buffer, the symbol table of
//! the traced code, and the address of its return trampoline. The execution context, the
//! context word and task names have defaults. Grace periods need nothing: the instance uses
//! ftrace-core's [`ReaderCount`].
//!
//! The trampolines (the code that `mcount`/`fentry` call sites jump to) call two entry
//! points:
//!
//! - [`TraceArray::on_entry`]`(ip, parent_ip, ret_slot)` from the call site, with `ip` the
//!   traced function, `parent_ip` its caller and `ret_slot` the stack slot holding the
//!   function's return address. When `function_graph` hooks the call, `on_entry` saves the
//!   return address on the CPU's shadow stack and writes [`Platform::return_handler`] into
//!   the slot.
//! - [`TraceArray::on_return`]`()` from the return trampoline: it pops the shadow stack,
//!   records the return and gives back the original return address to jump to.
//!
//! Contract: both run with the CPU fixed (preemption or migration off between a hooked entry
//! and its return, or one thread per CPU id: the `unsafe` of [`Platform`] is this promise);
//! `on_return` is called exactly once for every hooked entry, in LIFO order per CPU. Neither
//! ever blocks or allocates.
//!
//! Not in the instance yet (each refused with an errno, never accepted and ignored):
//! `instances/` (`mkdir` is `ENODEV`), call-site patching (the platform's text poke and
//! ftrace-patch's record table: today every function reaches `on_entry` and the filter files
//! act in the dispatcher), trace events, the function profiler, snapshots, and the function
//! tracer's own options (`func_stack_trace`, `func-no-repeats`: `EINVAL`). Resizing and tracer
//! switches publish a new, empty ring (all CPUs), the old one freed after a grace period.
//!
//! ```
//! use ftrace_tracefs::array::{HeapPages, Platform, Symbol, SymbolSlice, SymbolTable, TraceArray};
//!
//! static SYMS: SymbolSlice = SymbolSlice(&[Symbol::new("work", 0x1000, 0x40)]);
//! struct Host;
//! // SAFETY: one CPU, one thread.
//! unsafe impl Platform for Host {
//!     type Pages = HeapPages;
//!     fn now_ns(&self) -> u64 { 1_000 }
//!     fn current_cpu(&self) -> u32 { 0 }
//!     fn current_pid(&self) -> i32 { 1 }
//!     fn symbols(&self) -> &'static (dyn SymbolTable + Sync) { &SYMS }
//!     fn return_handler(&self) -> usize { 0xdead }
//! }
//! static TRACE: TraceArray<Host, 1> = TraceArray::new(Host);
//!
//! let mut fs = TRACE.tracefs().unwrap();
//! fs.write_all("current_tracer", b"function\n", false).unwrap();
//! let mut ret = 0x2000;
//! TRACE.on_entry(0x1000, 0x2000, &mut ret);
//! let trace = String::from_utf8(fs.read_to_end("trace").unwrap()).unwrap();
//! assert!(trace.contains("work <-0x00002000"), "{trace}");
//! ```

mod backend;
mod lock;
mod platform;
mod render;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64, Ordering};

use ftrace_core::Errno;
use ftrace_core::dispatch::Dispatcher;
use ftrace_core::event::TraceCtx;
use ftrace_core::filter::{CommandEnv, FtraceHash, ProbeActions, ProbeCommand, ProbeRunner};
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::pid::PidFilter;
use ftrace_core::platform::{ExecContext, Reclaim, RecursionState, TaskContext, TraceClock};
use ftrace_core::reclaim::{Published, RcuCell, ReaderCount};
use ftrace_core::recursion::TraceRecursion;
use ftrace_ringbuf::RingBuffer;
use ftrace_tracers::TraceOptions;
use ftrace_tracers::function::FunctionTracer;
use ftrace_tracers::function_graph::{
    FunctionGraphTracer, GraphEntry, GraphFilter, GraphFunctions, ShadowStack,
};
use ftrace_tracers::nop::NopTracer;
use ftrace_tracers::ringbuf::CpuBufferSink;
use ftrace_tracers::tracer::{AdmitAll, Registry, Tracer};

use crate::backend::FilterFile;
use crate::filters::FilterState;

pub use backend::{ArrayBackend, ArrayHost};
pub use platform::Platform;

// What a platform names in its binding, re-exported so that one `use` line suffices.
pub use ftrace_core::symbols::{Symbol, SymbolSlice, SymbolTable};
pub use ftrace_ringbuf::HeapPages;

use lock::SpinLock;

/// The trace clocks an instance offers, in `trace_clock` order: the platform's clock and a
/// counter that ticks once per event.
pub const TRACE_CLOCKS: &[&str] = &["local", "counter"];

/// Sub-buffer size of a new instance, header included.
const SUBBUF_DEFAULT: usize = 4096;

/// The pages per CPU before anyone sets `buffer_size_kb` (the tree asks the top level's
/// buffer at its minimum until first use; tracing starts with the kernel's default).
const PAGES_DEFAULT: usize = crate::backend::ring_buffer_pages(
    crate::backend::TRACE_BUF_SIZE_DEFAULT,
    (SUBBUF_DEFAULT - 16) as u64,
) as usize;

/// One CPU's `function_graph` state: its shadow stack and who holds it.
struct CpuGraph {
    busy: AtomicBool,
    stack: UnsafeCell<ShadowStack>,
}

impl CpuGraph {
    const fn new() -> Self {
        CpuGraph {
            busy: AtomicBool::new(false),
            stack: UnsafeCell::new(ShadowStack::new()),
        }
    }
}

/// The platform as ftrace-core's dispatcher sees it: the task context plus one recursion word
/// per CPU.
pub struct Cx<P, const CPUS: usize> {
    platform: P,
    recursion: [TraceRecursion; CPUS],
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

/// The graph filter (`set_graph_function`, `set_graph_notrace`) as the entry hook reads it.
struct GraphHashes {
    functions: FtraceHash,
    notrace: FtraceHash,
}

impl GraphFilter for GraphHashes {
    fn all_functions(&self) -> bool {
        self.functions.is_empty()
    }
    fn is_graph_function(&self, ip: u64) -> bool {
        self.functions.contains(ip)
    }
    fn is_notrace(&self, ip: u64) -> bool {
        self.notrace.contains(ip)
    }
}

/// Which of the instance's tracers an ops calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TracerKind {
    Nop,
    Function,
    FunctionGraph,
}

impl TracerKind {
    const ALL: [TracerKind; 3] = [
        TracerKind::Nop,
        TracerKind::Function,
        TracerKind::FunctionGraph,
    ];
}

/// What only control paths touch, behind the instance's lock (built at first use).
struct Control {
    registry: Registry<'static>,
    /// Each tracer's option word, by [`TracerKind`] order.
    tracer_flags: [u32; 3],
    filters: FilterState,
    /// The current tracer's registered ops.
    ops: Option<Box<FtraceOps>>,
    /// The function commands' ops (`set_ftrace_filter`'s `func:traceoff`), registered while
    /// there is a command, filtered to the commands' functions.
    probe_ops: Option<Box<FtraceOps>>,
    /// Pages per CPU and the sub-buffer size of the next buffer built.
    pages: Vec<usize>,
    subbuf: usize,
    /// `tracing_cpumask`, bit n = CPU n.
    cpumask: u64,
    /// `saved_cmdlines`: the pids seen in the buffers by readers so far (the platform names
    /// them), at most `cmdlines_max`; a buffer reset keeps them, as the kernel's cache does.
    cmdlines: alloc::collections::BTreeSet<i32>,
    cmdlines_max: usize,
}

/// A complete tracing instance over platform `P` with at most `CPUS` CPUs (Linux's
/// `struct trace_array`). See the [module docs](self) for the porting guide.
pub struct TraceArray<P: Platform, const CPUS: usize> {
    dispatcher: Dispatcher<ReaderCount, Cx<P, CPUS>>,
    buffer: RcuCell<RingBuffer<P::Pages>>,
    control: SpinLock<Option<Control>>,
    nop: NopTracer,
    function: FunctionTracer,
    graph: FunctionGraphTracer,
    graph_filter: RcuCell<GraphHashes>,
    probes: RcuCell<ProbeRunner>,
    pids: PidFilter,
    graph_cpus: [CpuGraph; CPUS],
    tracing_on: AtomicBool,
    options: AtomicU64,
    clock: AtomicU8,
    counter: AtomicU64,
}

// SAFETY: the shadow stacks are only reached by their CPU, through `CpuGraph::busy`; every
// other field is atomic, lock-protected or a publication cell.
unsafe impl<P: Platform, const CPUS: usize> Sync for TraceArray<P, CPUS> {}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// An instance over `platform`: tracer `nop`, no buffer until the tree is built or a
    /// tracer is set.
    pub const fn new(platform: P) -> Self {
        const { assert!(CPUS > 0 && CPUS <= 64, "1..=64 CPUs") };
        TraceArray {
            dispatcher: Dispatcher::new(
                ReaderCount::new(),
                Cx {
                    platform,
                    recursion: [const { TraceRecursion::new() }; CPUS],
                },
            ),
            buffer: RcuCell::empty(),
            control: SpinLock::new(None),
            nop: NopTracer,
            function: FunctionTracer::new(),
            graph: FunctionGraphTracer::new(false),
            graph_filter: RcuCell::empty(),
            probes: RcuCell::empty(),
            pids: PidFilter::new(),
            graph_cpus: [const { CpuGraph::new() }; CPUS],
            tracing_on: AtomicBool::new(true),
            options: AtomicU64::new(TraceOptions::DEFAULT.bits()),
            clock: AtomicU8::new(0),
            counter: AtomicU64::new(0),
        }
    }

    /// The platform binding.
    pub fn platform(&self) -> &P {
        &self.dispatcher.platform().platform
    }

    fn reclaim(&self) -> &ReaderCount {
        self.dispatcher.reclaim()
    }

    fn nr_cpus(&self) -> usize {
        (self.platform().possible_cpus() as usize).clamp(1, CPUS)
    }

    /// The trampoline's entry point: `ip` was called from `parent_ip`, and `ret_slot` holds
    /// the return address (`function_graph` may replace it with
    /// [`Platform::return_handler`]; see the [porting guide](self#porting-guide)).
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

    fn cpu(&self) -> usize {
        (self.platform().current_cpu() as usize).min(CPUS - 1)
    }

    /// Whether the selected trace clock counts nanoseconds (`counter` does not).
    fn clock_in_ns(&self) -> bool {
        self.clock.load(Ordering::Relaxed) == 0
    }

    fn now(&self) -> u64 {
        self.now_ns()
    }

    /// The current CPU's buffer as a sink. Callers are inside a read-side section.
    fn sink(&self, cpu: usize) -> Sink<'_, P, CPUS> {
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

    /// The control state, built at first use with the instance's tracers registered.
    fn control(&'static self) -> Ctl {
        let mut c = self.control.lock();
        if c.is_none() {
            let mut registry = Registry::new(&self.nop);
            for k in [TracerKind::Function, TracerKind::FunctionGraph] {
                registry
                    .register(self.tracer_of(k))
                    .expect("distinct names");
            }
            let commands =
                alloc::sync::Arc::new(Commands(StaticSymbols(self.platform().symbols())));
            *c = Some(Control {
                registry,
                tracer_flags: TracerKind::ALL.map(|k| self.tracer_of(k).default_flags()),
                filters: FilterState::new(commands),
                ops: None,
                probe_ops: None,
                pages: alloc::vec![PAGES_DEFAULT; self.nr_cpus()],
                subbuf: SUBBUF_DEFAULT,
                cpumask: u64::MAX,
                cmdlines: alloc::collections::BTreeSet::new(),
                cmdlines_max: crate::fs::SAVED_CMDLINES_DEFAULT as usize,
            });
        }
        Ctl(c)
    }
}

/// The locked control state of an instance.
struct Ctl(lock::Guard<'static, Option<Control>>);

impl core::ops::Deref for Ctl {
    type Target = Control;
    fn deref(&self) -> &Control {
        self.0.as_ref().expect("built by control()")
    }
}

impl core::ops::DerefMut for Ctl {
    fn deref_mut(&mut self) -> &mut Control {
        self.0.as_mut().expect("built by control()")
    }
}

/// The platform's `&'static` symbol table as the filter files hold it.
struct StaticSymbols(&'static (dyn ftrace_core::symbols::SymbolTable + Sync));

impl ftrace_core::symbols::SymbolTable for StaticSymbols {
    fn lookup(&self, addr: u64) -> Option<ftrace_core::symbols::Symbol<'_>> {
        self.0.lookup(addr)
    }
    fn for_each(&self, f: &mut dyn FnMut(ftrace_core::symbols::Symbol<'_>)) {
        self.0.for_each(f)
    }
}

/// The filter files' command environment: the platform's symbols, no trace events, no
/// snapshot, and only the commands the probe ops runs (`traceon`, `traceoff`); the others are
/// refused with `EINVAL` at write time rather than accepted and ignored.
struct Commands(StaticSymbols);

impl CommandEnv for Commands {
    fn symbols(&self) -> &dyn ftrace_core::symbols::SymbolTable {
        &self.0
    }
    fn has_snapshot(&self) -> bool {
        false
    }
    fn supports(&self, cmd: ProbeCommand) -> bool {
        matches!(cmd, ProbeCommand::Traceon | ProbeCommand::Traceoff)
    }
}

/// What the function commands do to the instance.
struct Actions<'a, P: Platform, const CPUS: usize>(&'a TraceArray<P, CPUS>);

impl<P: Platform, const CPUS: usize> ProbeActions for Actions<'_, P, CPUS> {
    fn tracing_is_on(&self) -> bool {
        self.0.tracing_on.load(Ordering::Relaxed)
    }
    fn set_tracing_on(&self, on: bool) {
        self.0.set_tracing_on(on);
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

fn function_op<P: Platform, const CPUS: usize>(
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

fn probe_op<P: Platform, const CPUS: usize>(
    ip: u64,
    parent_ip: u64,
    op: &FtraceOps,
    _regs: Option<&mut FtraceRegs>,
) {
    // SAFETY: as in `function_op`.
    let array = unsafe { &*op.private().cast::<TraceArray<P, CPUS>>() };
    // SAFETY: inside the dispatcher's read-side section (see `on_entry`).
    if let Some(runner) = unsafe { array.probes.load() } {
        runner.run(ip, parent_ip, &Actions(array));
    }
}

fn graph_op<P: Platform, const CPUS: usize>(
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

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    fn known(name: &str) -> Option<TracerKind> {
        match name {
            "nop" => Some(TracerKind::Nop),
            "function" => Some(TracerKind::Function),
            "function_graph" => Some(TracerKind::FunctionGraph),
            _ => None,
        }
    }

    fn kind(name: &str) -> TracerKind {
        Self::known(name).unwrap_or(TracerKind::Nop)
    }

    fn tracer_of(&'static self, kind: TracerKind) -> &'static dyn Tracer {
        match kind {
            TracerKind::Nop => &self.nop,
            TracerKind::Function => &self.function,
            TracerKind::FunctionGraph => &self.graph,
        }
    }

    /// Builds the buffer if there is none yet.
    fn ensure_buffer(&self, c: &mut Control) -> Result<(), Errno> {
        if self.buffer.is_empty() {
            self.rebuild_buffer(c, None)?;
        }
        Ok(())
    }

    /// Publishes a new, empty buffer of `c`'s geometry (`pages`: a new geometry to try
    /// first); the old one is freed after a grace period. On error nothing changes.
    fn rebuild_buffer(
        &self,
        c: &mut Control,
        pages: Option<(Vec<usize>, usize)>,
    ) -> Result<(), Errno> {
        let (pages, subbuf) = pages.unwrap_or_else(|| (c.pages.clone(), c.subbuf));
        let rb = self.build_buffer(c, &pages, subbuf)?;
        c.pages = pages;
        c.subbuf = subbuf;
        self.buffer
            .replace(Published::Owned(Box::new(rb)), self.reclaim());
        Ok(())
    }

    /// A new, empty ring of `pages` per CPU and `subbuf`-byte sub-buffers, recording as the
    /// instance does (`tracing_on`, `tracing_cpumask`).
    fn build_buffer(
        &self,
        c: &Control,
        pages: &[usize],
        subbuf: usize,
    ) -> Result<RingBuffer<P::Pages>, Errno> {
        let max = pages.iter().copied().max().unwrap_or(2);
        let mut rb = RingBuffer::new(P::Pages::default(), pages.len(), max, subbuf)
            .map_err(|e| e.errno())?;
        for (cpu, &n) in pages.iter().enumerate() {
            if n != max {
                let buf = rb.cpu_mut(cpu).expect("one buffer per CPU");
                buf.resize(n).map_err(|e| e.errno())?;
            }
        }
        rb.set_record_on(self.tracing_on.load(Ordering::Relaxed));
        rb.set_mode(self.buffer_mode());
        for cpu in 0..pages.len() {
            rb.set_cpu_enabled(cpu, c.cpumask & (1 << cpu) != 0);
        }
        Ok(rb)
    }

    /// Switches tracer as `tracing_set_tracer` does: the old tracer's ops are unregistered
    /// and it is reset, the buffers start empty, the new one is initialised and its ops
    /// registered (filtered by the function filter files and the pid filter). An unknown
    /// name (`EINVAL`) or no memory for the new buffers (`ENOMEM`) changes nothing.
    fn set_tracer(&'static self, c: &mut Control, name: &str) -> Result<(), Errno> {
        let name = name.trim_end();
        let kind = Self::known(name).ok_or(Errno::EINVAL)?;
        if name == c.registry.current().name() {
            return Ok(());
        }
        let rb = self.build_buffer(c, &c.pages, c.subbuf)?;
        if let Some(op) = c.ops.take() {
            self.dispatcher.unregister(&op)?;
        }
        self.buffer
            .replace(Published::Owned(Box::new(rb)), self.reclaim());
        c.registry.set_current(name)?;
        let (func, flags): (ftrace_core::ops::FtraceFunc, _) = match kind {
            TracerKind::Nop => return Ok(()),
            TracerKind::Function => (function_op::<P, CPUS>, OpsFlags::empty()),
            TracerKind::FunctionGraph => (graph_op::<P, CPUS>, OpsFlags::GRAPH),
        };
        let op = Box::new(FtraceOps::with_private(
            func,
            flags,
            core::ptr::from_ref(self).cast(),
            Some(&self.pids),
        ));
        self.publish_filters(c, &op);
        // SAFETY: the ops lives in `c.ops` until `unregister` has returned.
        unsafe { self.dispatcher.register_dynamic(&op)? };
        c.ops = Some(op);
        Ok(())
    }

    /// The ring's mode as the `overwrite` option says.
    fn buffer_mode(&self) -> ftrace_ringbuf::Mode {
        let options = TraceOptions::from_bits_retain(self.options.load(Ordering::Relaxed));
        if options.contains(TraceOptions::OVERWRITE) {
            ftrace_ringbuf::Mode::Overwrite
        } else {
            ftrace_ringbuf::Mode::ProducerConsumer
        }
    }

    /// `tracing_on`: the switch the tracers check and the buffers' record switch.
    fn set_tracing_on(&self, on: bool) {
        self.tracing_on.store(on, Ordering::Relaxed);
        self.with_buffer(|rb| rb.set_record_on(on));
    }

    /// The function commands changed: the runner is published and the probe ops registered
    /// (filtered to the commands' functions) while there is any, unregistered when the last
    /// one goes (an empty filter would admit every function).
    fn publish_probes(&'static self, c: &mut Control) -> Result<(), Errno> {
        let runner = c.filters.probes().runner();
        if let Some(op) = c.probe_ops.take() {
            self.dispatcher.unregister(&op)?;
        }
        if runner.is_empty() {
            self.probes.replace(Published::None, self.reclaim());
            return Ok(());
        }
        let op = Box::new(FtraceOps::with_private(
            probe_op::<P, CPUS>,
            OpsFlags::empty(),
            core::ptr::from_ref(self).cast(),
            None,
        ));
        let hash = runner.hash().clone();
        self.probes
            .replace(Published::Owned(Box::new(runner)), self.reclaim());
        self.dispatcher
            .set_filter(&op, Published::Owned(Box::new(hash)));
        // SAFETY: the ops lives in `c.probe_ops` until `unregister` has returned.
        unsafe { self.dispatcher.register_dynamic(&op)? };
        c.probe_ops = Some(op);
        Ok(())
    }

    /// Publishes the filter files' hashes to `op` and the graph filter cell.
    fn publish_filters(&self, c: &Control, op: &FtraceOps) {
        let set = |f| c.filters.set(f).to_hash();
        self.dispatcher
            .set_filter(op, Published::Owned(Box::new(set(FilterFile::Filter))));
        self.dispatcher
            .set_notrace(op, Published::Owned(Box::new(set(FilterFile::Notrace))));
        let graph = GraphHashes {
            functions: set(FilterFile::GraphFunction),
            notrace: set(FilterFile::GraphNotrace),
        };
        let graph = if graph.functions.is_empty() && graph.notrace.is_empty() {
            Published::None
        } else {
            Published::Owned(Box::new(graph))
        };
        self.graph_filter.replace(graph, self.reclaim());
    }
}
