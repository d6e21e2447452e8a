//! [`TraceArray`]: one complete tracing instance (Linux's `struct trace_array`), so that a
//! backend is only its [`Platform`].
//!
//! The instance owns the per-CPU ring buffer, the tracer registry (`nop`, `function`,
//! `function_graph`), the ftrace-core dispatcher and the tracers' ops, the function and
//! graph filters, the call-site records (ftrace-patch's record table over the platform's
//! text), `max_graph_depth`, `tracing_thresh`, trace and tracer options,
//! `trace_clock`, the markers, pid filters, the cpumask and the `function_graph` shadow
//! stacks. It is `const`-constructible, so it lives in a `static`, and it is the backend of
//! the [`Tracefs`](crate::Tracefs) tree ([`TraceArray::tracefs`]): every file of those features
//! reads and writes the instance.
//!
//! # Porting guide
//!
//! A platform provides the [`Platform`] trait: a clock, the current CPU and the number of
//! possible CPUs, the current pid, a page provider for the ring buffer, the text holding its
//! call sites ([`CallSiteText`]: the sites' addresses, the trampoline they call, and the text
//! poke — write, sync cores, stop the others, the breakpoint slot its trap handler reads — as
//! ftrace-patch's [`TextPoke`](ftrace_patch::TextPoke); or [`NoCallSites`] where every traced
//! function always calls the trampoline), the symbol table of the traced code, and the
//! address of its return trampoline. The execution context, the context word, task names and
//! `ftrace_bug()` reports have defaults. Grace periods need nothing: the instance uses
//! ftrace-core's [`ReaderCount`].
//!
//! With call sites, the instance owns ftrace-patch's record table: `available_filter_functions`,
//! `enabled_functions` and the other call-site files read it, and every change of what its ops
//! admit (a tracer switch, `set_ftrace_filter`, `set_ftrace_notrace`, a function command) ends
//! in one `ftrace_replace_code` batch through ftrace-patch's protocols on the platform's text:
//! a site calls the trampoline exactly while some ops of the instance admits its function.
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
//! Worked example: the bare-metal backend (`backends/baremetal/src/platform.rs` in the
//! repository) is one such binding for an x86_64 kernel: its zero-sized `BareMetal` is the
//! `Platform` (TSC clock, the CPU id from the GS base, pid 0, RFLAGS for the context word,
//! the kernel heap as `HeapPages`), its `KernelText` the `CallSiteText` (the boot's
//! `__patchable_function_entries`, CR0.WP writes, IPIs to sync and stop the other CPUs, the
//! `#BP` handler's breakpoint slot), a `static TRACE: TraceArray<BareMetal, 4>`, and two
//! `extern "C"` hooks its assembly trampolines call, which do nothing but call
//! [`TraceArray::on_entry`] and [`TraceArray::on_return`]. Everything else is this crate's.
//!
//! With call sites, `function_profile_enabled` and `trace_stat/function<cpu>` are the
//! function profiler: an ops of its own counting every call per CPU, whatever the tracer.
//!
//! `mkdir instances/NAME` makes an instance of its own (buffer, tracer, options, filter files,
//! markers, pid filters), reached from the top level's dispatcher through a forwarding ops;
//! an instance offers `nop` and `function` (see the `instances` module).
//!
//! `snapshot` swaps the main ring with a snapshot ring of the same geometry (Linux's
//! `max_buffer`), per instance, and so does an event's `snapshot` trigger, from the
//! tracepoint without waiting; `per_cpu/cpuN/snapshot` reads and clears one CPU's part (see
//! the `snapshot` module).
//!
//! Trace events: the tracepoints the program declares (ftrace-core's `tracepoint!`),
//! registered once with [`TraceArray::register_tracepoint`], are served under `events/` and
//! recorded into the buffer while enabled, filtered and triggered, in the top level and in
//! each of `instances/` on its own (see the `events` module).
//!
//! Not in the instance yet (each refused with an errno, never accepted and ignored): the
//! profiler's per-call times (it counts hits: see the `profile` module), the `snapshot`
//! function command, `snapshot_raw`, `function_graph` in an instance, and the function
//! tracer's own options (`func_stack_trace`, `func-no-repeats`: `EINVAL`). Resizing and
//! tracer switches publish a new, empty ring (all CPUs), the old one freed after a grace
//! period.
//!
//! ```
//! use ftrace_tracefs::array::{
//!     HeapPages, NoCallSites, Platform, Symbol, SymbolSlice, SymbolTable, TraceArray, WriteMode,
//! };
//!
//! static SYMS: SymbolSlice = SymbolSlice(&[Symbol::new("work", 0x1000, 0x40)]);
//! struct Host;
//! // SAFETY: one CPU, one thread.
//! unsafe impl Platform for Host {
//!     type Pages = HeapPages;
//!     type Text = NoCallSites;
//!     fn now_ns(&self) -> u64 { 1_000 }
//!     fn current_cpu(&self) -> u32 { 0 }
//!     fn current_pid(&self) -> i32 { 1 }
//!     fn symbols(&self) -> &'static (dyn SymbolTable + Sync) { &SYMS }
//!     fn return_handler(&self) -> usize { 0xdead }
//! }
//! static TRACE: TraceArray<Host, 1> = TraceArray::new(Host);
//!
//! let mut fs = TRACE.tracefs().unwrap();
//! fs.write_all("current_tracer", b"function\n", WriteMode::Truncate).unwrap();
//! let mut ret = 0x2000;
//! TRACE.on_entry(0x1000, 0x2000, &mut ret);
//! let trace = String::from_utf8(fs.read_to_end("trace").unwrap()).unwrap();
//! assert!(trace.contains("work <-0x00002000"), "{trace}");
//! ```

mod backend;
mod commands;
mod entry;
mod events;
mod instances;
pub(crate) mod lock;
mod platform;
mod profile;
mod render;
mod ring;
mod sites;
mod snapshot;
mod text;

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, AtomicU64};

use ftrace_core::Errno;
use ftrace_core::dispatch::Dispatcher;
use ftrace_core::filter::ProbeRunner;
use ftrace_core::ops::{FtraceOps, OpsFlags};
use ftrace_core::pid::PidFilter;
use ftrace_core::reclaim::{Published, RcuCell, ReaderCount};
use ftrace_core::recursion::TraceRecursion;
use ftrace_ringbuf::RingBuffer;
use ftrace_tracers::TraceOptions;
use ftrace_tracers::function::FunctionTracer;
use ftrace_tracers::function_graph::FunctionGraphTracer;
use ftrace_tracers::nop::NopTracer;
use ftrace_tracers::tracer::{Registry, Tracer};

use crate::filters::FilterState;

pub use backend::{ArrayBackend, ArrayHost};
pub use platform::Platform;
pub use text::{CallSiteText, NoCallSites};

// What a platform names in its binding, re-exported so that one `use` line suffices.
pub use ftrace_core::symbols::{Symbol, SymbolSlice, SymbolTable};
pub use ftrace_ringbuf::HeapPages;
// What a session writes with (`echo >` or `echo >>`).
pub use crate::fs::WriteMode;

use commands::{Commands, GraphHashes, StaticSymbols};
use entry::{CpuGraph, Cx, function_op, graph_op};
use lock::SpinLock;
use sites::{SiteRecords, Sites};

/// The trace clocks an instance offers, in `trace_clock` order: the platform's clock and a
/// counter that ticks once per event.
pub const TRACE_CLOCKS: &[&str] = &["local", "counter"];

/// Sub-buffer size of a new instance, header included.
const SUBBUF_DEFAULT: usize = 4096;

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

/// Where an instance sits: the top level, which the trampolines call and which owns the call
/// sites, or one of its `instances/`, which the top level's dispatcher calls through a
/// forwarding ops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ArrayKind {
    Top,
    Instance,
}

/// What only control paths touch, behind the instance's lock (built at first use).
struct Control {
    registry: Registry<'static>,
    /// Each tracer's option word, by [`TracerKind`] order.
    tracer_flags: [u32; 3],
    filters: FilterState,
    /// The call-site records (`None`: the platform has none, every function reaches
    /// `on_entry`).
    sites: Option<Box<dyn SiteRecords>>,
    /// The current tracer's registered ops.
    ops: Option<Box<FtraceOps>>,
    /// The function commands' ops (`set_ftrace_filter`'s `func:traceoff`), registered while
    /// there is a command, filtered to the commands' functions.
    probe_ops: Option<Box<FtraceOps>>,
    /// The forwarding ops of the `instances/` that trace (each calls its instance's
    /// `on_entry`), filtered as the instance's tracer is.
    #[allow(
        clippy::vec_box,
        reason = "a registered ops must not move when the Vec grows"
    )]
    instances: Vec<Box<FtraceOps>>,
    /// The function profiler's ops, registered while `function_profile_enabled` is 1.
    profile_ops: Option<Box<FtraceOps>>,
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
    kind: ArrayKind,
    dispatcher: Dispatcher<ReaderCount, Cx<P, CPUS>>,
    buffer: RcuCell<RingBuffer<P::Pages>>,
    /// The snapshot ring (`max_buffer`), while allocated; only control paths reach it.
    snapshot: SpinLock<Option<snapshot::SnapshotBuffer<P::Pages>>>,
    control: SpinLock<Option<Control>>,
    nop: NopTracer,
    function: FunctionTracer,
    graph: FunctionGraphTracer,
    graph_filter: RcuCell<GraphHashes>,
    probes: RcuCell<ProbeRunner>,
    /// The registered tracepoints (see the `events` module).
    events: RcuCell<events::EventSlots<P, CPUS>>,
    pids: PidFilter,
    /// `set_event_pid` / `set_event_notrace_pid`: whose events are recorded.
    event_pids: PidFilter,
    graph_cpus: [CpuGraph; CPUS],
    profile: [profile::CpuProfile; CPUS],
    profile_missed: AtomicU64,
    tracing_on: AtomicBool,
    options: AtomicU64,
    clock: AtomicU8,
    counter: AtomicU64,
}

// SAFETY: the shadow stacks and profile tables are only reached by whoever holds their CPU's
// `busy` flag; every other field is atomic, lock-protected or a publication cell.
unsafe impl<P: Platform, const CPUS: usize> Sync for TraceArray<P, CPUS> {}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// An instance over `platform`: tracer `nop`, no buffer until the tree is built or a
    /// tracer is set.
    pub const fn new(platform: P) -> Self {
        Self::with_kind(platform, ArrayKind::Top)
    }

    const fn with_kind(platform: P, kind: ArrayKind) -> Self {
        const { assert!(CPUS > 0 && CPUS <= 64, "1..=64 CPUs") };
        TraceArray {
            kind,
            dispatcher: Dispatcher::new(
                ReaderCount::new(),
                Cx {
                    platform,
                    recursion: [const { TraceRecursion::new() }; CPUS],
                },
            ),
            buffer: RcuCell::empty(),
            snapshot: SpinLock::new(None),
            control: SpinLock::new(None),
            nop: NopTracer,
            function: FunctionTracer::new(),
            graph: FunctionGraphTracer::new(),
            graph_filter: RcuCell::empty(),
            probes: RcuCell::empty(),
            events: RcuCell::empty(),
            pids: PidFilter::new(),
            event_pids: PidFilter::new(),
            graph_cpus: [const { CpuGraph::new() }; CPUS],
            profile: [const { profile::CpuProfile::new() }; CPUS],
            profile_missed: AtomicU64::new(0),
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

    /// The control state (built by [`TraceArray::build_control`] before any file is served).
    fn control(&'static self) -> Ctl {
        let c = self.control.lock();
        assert!(c.is_some(), "the control state is built with the tree");
        Ctl(c)
    }

    /// Builds the control state at first use: the instance's tracers registered, the call-site
    /// records made from the platform's text. `EINVAL` if the platform's call sites overlap
    /// (nothing is built; the next call tries again).
    fn build_control(&'static self) -> Result<(), Errno> {
        let mut c = self.control.lock();
        if c.is_none() {
            let symbols = self.platform().symbols();
            let on_bug = &mut |b: &_| self.platform().ftrace_bug(b);
            let (sites, commands) = match Sites::new(P::Text::default(), symbols, on_bug)? {
                Some((s, site_syms)) => (
                    Some(Box::new(s) as Box<dyn SiteRecords>),
                    Commands(Box::new(site_syms)),
                ),
                None => (None, Commands(Box::new(StaticSymbols(symbols)))),
            };
            let mut registry = Registry::new(&self.nop);
            // An instance's trampoline is the top level's: its return hook serves the top
            // level's shadow stacks, so function_graph runs at the top level only.
            let tracers: &[TracerKind] = match self.kind {
                ArrayKind::Top => &[TracerKind::Function, TracerKind::FunctionGraph],
                ArrayKind::Instance => &[TracerKind::Function],
            };
            for &k in tracers {
                registry
                    .register(self.tracer_of(k))
                    .expect("distinct names");
            }
            *c = Some(Control {
                registry,
                tracer_flags: TracerKind::ALL.map(|k| self.tracer_of(k).default_flags()),
                filters: FilterState::new(alloc::sync::Arc::new(commands)),
                sites,
                ops: None,
                probe_ops: None,
                instances: Vec::new(),
                profile_ops: None,
                // The pages per CPU before anyone sets `buffer_size_kb`: the platform's
                // `trace_buf_size` (the tree shows the top level's buffer at its minimum until
                // first use).
                pages: alloc::vec![
                    crate::backend::ring_buffer_pages(
                        self.platform().trace_buf_size(),
                        (SUBBUF_DEFAULT - 16) as u64,
                    ) as usize;
                    self.nr_cpus()
                ],
                subbuf: SUBBUF_DEFAULT,
                cpumask: u64::MAX,
                cmdlines: alloc::collections::BTreeSet::new(),
                cmdlines_max: crate::fs::SAVED_CMDLINES_DEFAULT as usize,
            });
        }
        Ok(())
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

    /// Switches tracer as `tracing_set_tracer` does: the old tracer's ops are unregistered
    /// and it is reset, the buffers start empty, the new one is initialised and its ops
    /// registered (filtered by the function filter files and the pid filter). An unknown
    /// name (`EINVAL`) or no memory for the new buffers (`ENOMEM`) changes nothing.
    fn set_tracer(&'static self, c: &mut Control, name: &str) -> Result<(), Errno> {
        let name = name.trim_end();
        let kind = Self::known(name).ok_or(Errno::EINVAL)?;
        if kind == TracerKind::FunctionGraph && self.kind == ArrayKind::Instance {
            return Err(Errno::EINVAL);
        }
        if name == c.registry.current().name() {
            return Ok(());
        }
        let rb = self.build_buffer(c, &c.pages, c.subbuf)?;
        let func: Option<(ftrace_core::ops::FtraceFunc, _)> = match kind {
            TracerKind::Nop => None,
            TracerKind::Function => Some((function_op::<P, CPUS>, OpsFlags::empty())),
            TracerKind::FunctionGraph => Some((graph_op::<P, CPUS>, OpsFlags::GRAPH)),
        };
        self.update_sites(c, |c| {
            if let Some(op) = c.ops.take() {
                self.dispatcher.unregister(&op)?;
            }
            self.buffer
                .replace(Published::Owned(Box::new(rb)), self.reclaim());
            c.registry.set_current(name)?;
            let Some((func, flags)) = func else {
                return Ok(());
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
        })
    }
}
