//! The backend's tracing instance. Every traced call goes trampoline -> entry hook ->
//! ftrace-core's `Dispatcher` (one static `FtraceOps` per tracer, enabled while it is the
//! current tracer) -> the tracer's ops callback.
//!
//! Which functions are traced is decided the kernel's way ([`crate::functions`]): the call
//! sites are ftrace-patch's `RecordTable` records, the filter files ftrace-tracefs's
//! `FilterState` (ftrace-core's filter language), whose `set_ftrace_filter` /
//! `set_ftrace_notrace` hashes are published to the tracers' ops (the dispatcher filters by
//! them) and whose graph files go to the graph filter the function_graph entry hook reads
//! ([`GRAPH_FILTER`]); the records' reference counts follow the enabled ops' hashes, and the
//! sites change in one batch per update through ftrace-patch's update pass and protocols on
//! [`crate::text::KernelText`].
//!
//! Events are written by ftrace-tracers' `FunctionTracer` and `FunctionGraphTracer` (with its
//! `ShadowStack`, one per CPU), and by `trace_marker` / `trace_marker_raw`
//! ([`Tracing::write_marker`]), into ftrace-ringbuf's per-CPU [`RingBuffer`] (pages from
//! [`StaticPages`]), stamped by the backend's clock, read back with its non-consuming
//! iterators and formatted by ftrace-tracers' `TraceWriter` (the `trace` text is Linux's); the
//! file tree is ftrace-tracefs's (`crate::tracefs`).
//!
//! Invariant: a CPU's shadow stack is touched only by that CPU with interrupts off (the hooks
//! disable them around their work), and each CPU writes only its own ring buffer, so writers
//! nest strictly as the ring buffer requires.

use core::cell::{Cell, UnsafeCell};
use core::fmt::{self, Write};

use ftrace_core::Errno;
use ftrace_core::dispatch::Dispatcher;
use ftrace_core::event::TraceCtx;
use ftrace_core::filter::ProbeActions;
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::platform::ExecContext;
use ftrace_core::platform::{CpuId, TaskContext, TraceClock};
use ftrace_core::reclaim::ReaderCount;
use ftrace_core::symbols::SymbolTable;
use ftrace_patch::{FixedTargets, FtraceBug, Protocol, UpdateStats};
use ftrace_ringbuf::{ClockUnit, RingBuffer};
use ftrace_tracefs::FilterFile;
use ftrace_tracefs::filters::FilterState;
use ftrace_tracefs::records::CallSites;
use ftrace_tracers::TraceOptions;
use ftrace_tracers::event::EventRef;
use ftrace_tracers::function::{FunctionTracer, trace_marker_raw_write, trace_marker_write};
use ftrace_tracers::function_graph::{FunctionGraphTracer, GraphEntry, ShadowStack};
use ftrace_tracers::iter::{EventSource, TraceIter};
use ftrace_tracers::output::graph::{GraphCpuState, GraphFlags};
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{ByteSink, NoTaskNames, OutputEnv};
use ftrace_tracers::tracer::{AdmitAll, EntrySink, Tracer as TracerImpl};

use crate::cpu::{BareMetal, MAX_CPUS, this_cpu};
use crate::functions::{FunctionSites, GraphFilterCell, ProbeCell};
use crate::pages::StaticPages;
use crate::port::{irq_restore, irq_save};
use crate::sites::SiteTable;
use crate::sync::{AtomicBool, AtomicU8, AtomicU64, Ordering, SpinLock};
use crate::text::KernelText;
use crate::trampoline;

/// Ring-buffer pages per CPU (4 KiB each; overwrite mode, as Linux's default).
pub const PAGES_PER_CPU: usize = 32;
/// The ring buffer's page size.
pub const PAGE_SIZE: usize = 4096;
/// Deepest function_graph nesting followed per CPU.
pub const GRAPH_DEPTH: usize = 64;

/// The tracers the instance offers, in `available_tracers` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Tracer {
    /// `function_graph`.
    FunctionGraph = 2,
    /// `function`.
    Function = 1,
    /// `nop`.
    Nop = 0,
}

impl Tracer {
    const ALL: [Tracer; 3] = [Tracer::FunctionGraph, Tracer::Function, Tracer::Nop];

    /// The name `current_tracer` shows.
    pub const fn name(self) -> &'static str {
        match self {
            Tracer::FunctionGraph => "function_graph",
            Tracer::Function => "function",
            Tracer::Nop => "nop",
        }
    }

    fn from_u8(v: u8) -> Tracer {
        match v {
            1 => Tracer::Function,
            2 => Tracer::FunctionGraph,
            _ => Tracer::Nop,
        }
    }
}

struct CpuTrace {
    /// function_graph's shadow return stack for what runs on this CPU (no tasks here).
    shadow: ShadowStack<GRAPH_DEPTH>,
}

struct PerCpuTraces(UnsafeCell<[CpuTrace; MAX_CPUS]>);
// SAFETY: the module invariant: each CPU's slot is used by that CPU with interrupts off, or by
// the reader while no traced code runs.
unsafe impl Sync for PerCpuTraces {}

struct Control {
    /// The records, the filter files and the enabled ops (set by `install`).
    sites: Option<FunctionSites>,
}

/// The one tracing instance of the backend.
pub struct Tracing {
    tracer: AtomicU8,
    tracing_on: AtomicBool,
    /// The trace option flag word (ftrace-tracers' `TraceOptions` bits), as `trace_options`
    /// set it.
    options: AtomicU64,
    control: SpinLock<Control>,
    /// The kernel's symbols (set by `install`). A lock of its own, held only to copy the
    /// reference out: the call-site files resolve names while the control lock is held.
    symbols: SpinLock<Option<&'static (dyn SymbolTable + Sync)>>,
    cpus: PerCpuTraces,
    /// Set once by `install`; read-only afterwards except `reset`, which runs with recording
    /// off and every CPU synced (no writer inside).
    buffer: UnsafeCell<Option<RingBuffer<&'static StaticPages>>>,
    buffer_ready: AtomicBool,
}

// SAFETY: `buffer` is written once before `buffer_ready` is published and afterwards only
// under the quiescence described on the field; everything else is atomics, a lock, or per-CPU
// state under the module invariant.
unsafe impl Sync for Tracing {}

static PAGES: StaticPages = StaticPages::new();

/// The backend's tracing instance.
pub static TRACING: Tracing = Tracing {
    tracer: AtomicU8::new(Tracer::Nop as u8),
    tracing_on: AtomicBool::new(true),
    options: AtomicU64::new(TraceOptions::MARKERS.bits()),
    control: SpinLock::new(Control { sites: None }),
    symbols: SpinLock::new(None),
    cpus: PerCpuTraces(UnsafeCell::new(
        [const {
            CpuTrace {
                shadow: ShadowStack::new(),
            }
        }; MAX_CPUS],
    )),
    buffer: UnsafeCell::new(None),
    buffer_ready: AtomicBool::new(false),
};

/// The ring buffer, once installed.
#[inline]
fn ring() -> Option<&'static RingBuffer<&'static StaticPages>> {
    if !TRACING.buffer_ready.load(Ordering::Acquire) {
        return None;
    }
    // SAFETY: published by install; see the field's invariant.
    unsafe { (*TRACING.buffer.get()).as_ref() }
}

/// Recursion bit of the entry hook.
const RECURSION_ENTRY: u32 = 0;
/// Bit the return hook holds while it runs (never refused: a redirected return must be
/// resumed); it marks the CPU as in a trace hook (`PerCpu::in_trace_hook`).
const RECURSION_RETURN: u32 = 1;

fn cpu_trace(cpu: u32) -> *mut CpuTrace {
    // SAFETY: only the address is taken; the module invariant governs its use.
    unsafe { (*TRACING.cpus.0.get()).as_mut_ptr().add(cpu as usize) }
}

/// The function tracer (ftrace-tracers).
static FUNCTION: FunctionTracer = FunctionTracer::new();
/// The function_graph tracer (ftrace-tracers).
static GRAPH: FunctionGraphTracer = FunctionGraphTracer::new();

/// The current CPU's ring buffer as the tracers' entry sink.
struct CpuSink(u32);

impl EntrySink for CpuSink {
    #[inline]
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let Some(buf) = ring().and_then(|r| r.cpu(self.0 as usize)) else {
            return false;
        };
        let Some(mut r) = buf.reserve(len, &BareMetal) else {
            return false;
        };
        let data = r.data();
        data.fill(0);
        fill(data);
        r.commit();
        true
    }
}

/// The task context as sampled at the hook's entry (before it disabled interrupts for its
/// own work), so the irqs-off flag describes the traced code.
struct Sampled(TraceCtx);

impl TaskContext for Sampled {
    fn current_pid(&self) -> i32 {
        BareMetal.current_pid()
    }
    fn trace_ctx(&self) -> TraceCtx {
        self.0
    }
    fn exec_context(&self) -> ExecContext {
        BareMetal.exec_context()
    }
}

/// `set_graph_function` / `set_graph_notrace`, as the graph entry hook reads them.
pub static GRAPH_FILTER: GraphFilterCell = GraphFilterCell::new();

/// The ops dispatcher (ftrace-core): the entry hook hands every traced call to it.
static DISPATCHER: Dispatcher<ReaderCount, BareMetal> =
    Dispatcher::new(ReaderCount::new(), BareMetal);

/// The function tracer's ops.
static FUNCTION_OPS: FtraceOps = FtraceOps::new(function_call, OpsFlags::empty());
/// function_graph's entry ops (`graph_ops`).
static GRAPH_OPS: FtraceOps = FtraceOps::new(graph_entry, OpsFlags::GRAPH);
/// The ops the global filter files (`set_ftrace_filter`, `set_ftrace_notrace`) apply to.
static TRACER_OPS: [&FtraceOps; 2] = [&FUNCTION_OPS, &GRAPH_OPS];

/// The function commands of `set_ftrace_filter` (`bm_leaf:traceoff:1`), as the probe ops runs
/// them.
static PROBES: ProbeCell = ProbeCell::new();
/// The probe ops (`trace_probe_ops`): enabled while any function command exists, its filter
/// hash the commands' functions, independent of the current tracer.
static PROBE_OPS: FtraceOps = FtraceOps::new(probe_call, OpsFlags::empty());

/// What the function commands act on: the instance's ring buffer record switch.
struct BmProbeActions;

impl ProbeActions for BmProbeActions {
    fn tracing_is_on(&self) -> bool {
        TRACING.tracing_on()
    }

    fn set_tracing_on(&self, on: bool) {
        TRACING.set_tracing_on(on);
    }
}

/// `function_trace_probe_call`: the probe ops' callback.
fn probe_call(ip: u64, parent_ip: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    PROBES.run(ip, parent_ip, &BmProbeActions);
}

/// `function_trace_call`: the function tracer's ops callback.
fn function_call(ip: u64, parent_ip: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    // The context is sampled before interrupts are disabled for the write.
    let task = Sampled(BareMetal.trace_ctx());
    let irq = irq_save();
    if TRACING.tracing_on.load(Ordering::Relaxed) {
        // The dispatcher applied the ops' hashes (`AdmitAll`: nothing more to check here).
        FUNCTION.trace_call(
            ip,
            parent_ip,
            &AdmitAll,
            &task,
            &CpuSink(this_cpu().index()),
        );
    }
    irq_restore(irq);
}

/// function_graph's entry callback: pushes a shadow frame and redirects the return.
/// `regs.sp` is the address of the traced function's return slot.
fn graph_entry(ip: u64, parent_ip: u64, _op: &FtraceOps, regs: Option<&mut FtraceRegs>) {
    let Some(regs) = regs else {
        return;
    };
    let task = Sampled(BareMetal.trace_ctx());
    let irq = irq_save();
    if TRACING.tracing_on.load(Ordering::Relaxed) {
        let cpu = this_cpu().index();
        // SAFETY: this CPU's slot, interrupts off (module invariant).
        let t = unsafe { &mut *cpu_trace(cpu) };
        let now = BareMetal.now_ns();
        let sink = CpuSink(cpu);
        let hooked = GRAPH_FILTER
            .with(|filter| GRAPH.entry(&mut t.shadow, ip, parent_ip, now, filter, &task, &sink));
        if hooked == GraphEntry::Hooked {
            // SAFETY: the trampoline passes the address of the traced function's return
            // slot in `sp`; the return hook gives `parent_ip` back when it returns.
            unsafe { *(regs.sp as *mut u64) = trampoline::return_to_handler_addr() };
        }
    }
    irq_restore(irq);
}

extern "C" fn entry_hook(ip: u64, parent_ip: u64, parent_slot: *mut u64) {
    let me = this_cpu();
    if !me.try_enter(RECURSION_ENTRY) {
        return;
    }
    // The trampoline's save area as the dispatcher sees it: where the call resumes and the
    // stack pointer at the call site (the return slot). Argument registers are not copied.
    let mut regs = FtraceRegs {
        ip: ip + 5,
        sp: parent_slot as u64,
        ..FtraceRegs::default()
    };
    DISPATCHER.call(ip, parent_ip, Some(&mut regs));
    me.leave(RECURSION_ENTRY);
}

extern "C" fn return_hook() -> u64 {
    let me = this_cpu();
    // Not a guard: the bit only marks this CPU as in a hook (nothing here is instrumented).
    let _ = me.try_enter(RECURSION_RETURN);
    let task = Sampled(BareMetal.trace_ctx());
    let irq = irq_save();
    let cpu = me.index();
    // SAFETY: this CPU's slot, interrupts off (module invariant).
    let t = unsafe { &mut *cpu_trace(cpu) };
    let now = BareMetal.now_ns();
    let Some(exit) = GRAPH.exit(&mut t.shadow, now, &task, &CpuSink(cpu)) else {
        // A redirected return with no frame cannot be resumed: report it loudly.
        // (Unlocked: the shell may hold the console lock around the traced call.)
        let _ = writeln!(
            crate::serial::Com1::force(),
            "ftrace: return_to_handler with an empty shadow stack"
        );
        crate::qemu::exit(crate::qemu::Verdict::Fail, "graph shadow stack underflow");
    };
    irq_restore(irq);
    me.leave(RECURSION_RETURN);
    exit.ret
}

/// Prints an `ftrace_bug()` report on the console (unlocked: the shell holds the console lock
/// while it runs the write that patches).
fn report_bug(bug: &FtraceBug, symbols: Option<&'static (dyn SymbolTable + Sync)>) {
    let mut out = crate::serial::Com1::force();
    let _ = match symbols {
        Some(s) => bug.write_report(&mut out, s),
        None => write!(out, "{bug}"),
    };
    let _ = writeln!(out);
}

/// An update that could not rewrite every site it had to (each one reported and disabled) is
/// the write's `EIO`.
fn update_result(st: UpdateStats) -> Result<(), Errno> {
    if st.failed > 0 {
        Err(Errno::EIO)
    } else {
        Ok(())
    }
}

/// `trace_marker`'s writer, named as Linux's: the entries carry an address inside it, so the
/// `trace` text reads `tracing_mark_write: ...` as the kernel's does.
#[unsafe(no_mangle)]
#[inline(never)]
pub fn tracing_mark_write(text: &[u8], options: TraceOptions) -> Result<(), Errno> {
    let ip = tracing_mark_write as *const () as u64;
    TRACING.write_event(|task, sink| trace_marker_write(text, ip, options, task, sink))
}

/// An entry sink that remembers whether the ring buffer took the entry.
struct Taken<'a> {
    sink: CpuSink,
    taken: &'a Cell<bool>,
}

impl EntrySink for Taken<'_> {
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let ok = self.sink.write_entry(len, fill);
        self.taken.set(ok);
        ok
    }
}

impl Tracing {
    /// Hands the instance its sites and symbols and registers the trampolines' hooks: one
    /// call-site record per site (ftrace-patch's `init_records`; a site that is not a NOP is
    /// reported and disabled), empty filter files resolving against them. Sites stay NOPs
    /// until a tracer is set.
    pub fn install(
        &'static self,
        sites: &'static SiteTable,
        symbols: &'static (dyn SymbolTable + Sync),
    ) -> Result<(), Errno> {
        let mut c = self.control.lock();
        let targets = FixedTargets {
            caller: trampoline::caller_addr(),
            regs_caller: trampoline::caller_addr(),
            list_ops: 0,
            nop_ops: 0,
        };
        let records = FunctionSites::new(
            &mut KernelText,
            sites.sites(),
            symbols,
            &TRACER_OPS,
            targets,
            Protocol::Auto,
            &mut |b| report_bug(b, Some(symbols)),
        )?;
        c.sites = Some(records);
        *self.symbols.lock() = Some(symbols);
        if !self.buffer_ready.load(Ordering::Acquire) {
            let rb = RingBuffer::new(&PAGES, MAX_CPUS, PAGES_PER_CPU, PAGE_SIZE)
                .map_err(|e| e.errno())?;
            // SAFETY: not yet published: nobody else can see the field.
            unsafe { *self.buffer.get() = Some(rb) };
            self.buffer_ready.store(true, Ordering::Release);
        }
        trampoline::set_return_hook(return_hook);
        trampoline::set_entry_hook(Some(entry_hook));
        Ok(())
    }

    /// The current tracer.
    pub fn tracer(&self) -> Tracer {
        Tracer::from_u8(self.tracer.load(Ordering::Relaxed))
    }

    /// Switches tracers (`tracing_set_tracer`): the old tracer's ops is disabled (its sites
    /// restored, then unregistered), the buffers are cleared, the new tracer's ops enabled
    /// (registered, then the sites its hashes admit patched). `ENODEV` before `install`.
    pub fn set_tracer(&self, t: Tracer) -> Result<(), Errno> {
        let mut c = self.control.lock();
        if t == self.tracer() {
            return Ok(());
        }
        let symbols = self.symbols();
        let sites = c.sites.as_mut().ok_or(Errno::ENODEV)?;
        let tracer_of = |t: Tracer| -> Option<(&'static dyn TracerImpl, &'static FtraceOps)> {
            match t {
                Tracer::Function => Some((&FUNCTION, &FUNCTION_OPS)),
                Tracer::FunctionGraph => Some((&GRAPH, &GRAPH_OPS)),
                Tracer::Nop => None,
            }
        };
        if let Some((new, _)) = tracer_of(t) {
            new.init()?;
        }
        let mut r = Ok(());
        if let Some((old, ops)) = tracer_of(self.tracer()) {
            old.reset();
            let st = sites.disable(&DISPATCHER, ops, &mut KernelText, &mut |b| {
                report_bug(b, symbols)
            })?;
            r = update_result(st);
        }
        self.tracer.store(Tracer::Nop as u8, Ordering::Relaxed);
        self.reset_buffers();
        if let Some((_, ops)) = tracer_of(t) {
            let st = sites.enable(&DISPATCHER, ops, &mut KernelText, &mut |b| {
                report_bug(b, symbols)
            })?;
            self.tracer.store(t as u8, Ordering::Relaxed);
            r = r.and(update_result(st));
        }
        r
    }

    /// Empties the ring buffer (`tracing_reset_online_cpus`): recording disabled (counted,
    /// `ring_buffer_record_disable`: the `tracing_on` switch is left alone), every CPU synced
    /// (an IPI cannot land inside a writer, which runs with interrupts off), reset, recording
    /// enabled again.
    pub fn reset_buffers(&self) {
        let Some(rb) = ring() else {
            return;
        };
        let cpus = || (0..MAX_CPUS).filter_map(|c| rb.cpu(c));
        cpus().for_each(|c| c.record_disable());
        crate::text::sync_cores();
        // SAFETY: recording is off and every CPU has passed a sync point after that, so no
        // writer is inside the buffer; readers only run from the shell, which is us.
        unsafe {
            if let Some(rb) = (*self.buffer.get()).as_mut() {
                rb.reset();
            }
        }
        cpus().for_each(|c| c.record_enable());
    }

    /// Runs `f` on the filter files under the instance's lock (ftrace-tracefs's
    /// `FilterStore::with_state`). `ENODEV` before `install` (and `f` does not run).
    pub fn with_filters(&self, f: &mut dyn FnMut(&mut FilterState)) -> Result<(), Errno> {
        let mut c = self.control.lock();
        let sites = c.sites.as_mut().ok_or(Errno::ENODEV)?;
        f(sites.filters_mut());
        Ok(())
    }

    /// A filter file was written: the hashes go to the ops and the graph filter, the
    /// function commands to the probe ops (enabled while there is any), the records and
    /// sites follow (`EIO` if a site could not be rewritten; it is reported).
    pub fn republish_filters(&self) -> Result<(), Errno> {
        let mut c = self.control.lock();
        let symbols = self.symbols();
        let sites = c.sites.as_mut().ok_or(Errno::ENODEV)?;
        let st = sites.republish(&DISPATCHER, &GRAPH_FILTER, &mut KernelText, &mut |b| {
            report_bug(b, symbols)
        })?;
        let probes = sites.republish_probes(
            &DISPATCHER,
            &PROBE_OPS,
            &PROBES,
            &mut KernelText,
            &mut |b| report_bug(b, symbols),
        )?;
        update_result(st).and(update_result(probes))
    }

    /// The read-back text of filter file `which`.
    pub fn read_filter(&self, which: FilterFile, out: &mut dyn Write) -> fmt::Result {
        let c = self.control.lock();
        match &c.sites {
            Some(s) => s.filters().write_filter(which, out),
            None => Ok(()),
        }
    }

    /// Runs `f` on the call-site records (ftrace-tracefs's `RecordSource`), under the lock.
    /// Before `install` there are none and `f` does not run.
    pub fn with_call_sites(&self, f: &mut dyn FnMut(CallSites<'_>)) {
        let c = self.control.lock();
        if let Some(s) = &c.sites {
            s.with_call_sites(f);
        }
    }

    /// The trace option flag word (`trace_options`).
    pub fn set_options(&self, options: TraceOptions) {
        self.options.store(options.bits(), Ordering::Relaxed);
    }

    /// Writes one event from the current CPU with `write` (interrupts off around it, as a
    /// nested writer of that CPU's buffer); `EBADF` if the ring buffer refused it (recording
    /// off), as Linux's marker writes answer.
    fn write_event(
        &self,
        write: impl FnOnce(&Sampled, &Taken<'_>) -> Result<usize, Errno>,
    ) -> Result<(), Errno> {
        let task = Sampled(BareMetal.trace_ctx());
        let taken = Cell::new(false);
        let irq = irq_save();
        let sink = Taken {
            sink: CpuSink(this_cpu().index()),
            taken: &taken,
        };
        let r = write(&task, &sink);
        irq_restore(irq);
        match r {
            Ok(0) => Ok(()),
            Ok(_) if taken.get() => Ok(()),
            Ok(_) => Err(Errno::EBADF),
            Err(e) => Err(e),
        }
    }

    /// `trace_marker`: `text` as a `print` entry (ftrace-tracers' `trace_marker_write`).
    pub fn write_marker(&self, text: &[u8]) -> Result<(), Errno> {
        tracing_mark_write(text, self.trace_options())
    }

    /// `trace_marker_raw`: `id` and `data` as a `raw_data` entry.
    pub fn write_marker_raw(&self, id: u32, data: &[u8]) -> Result<(), Errno> {
        let mut all = alloc::vec::Vec::with_capacity(4 + data.len());
        all.extend_from_slice(&id.to_ne_bytes());
        all.extend_from_slice(data);
        let options = self.trace_options();
        self.write_event(|task, sink| trace_marker_raw_write(&all, options, task, sink))
    }

    fn trace_options(&self) -> TraceOptions {
        TraceOptions::from_bits_retain(self.options.load(Ordering::Relaxed))
    }

    /// Copies every held event of every CPU into the snapshot (`trace` opens a snapshot
    /// iterator in the kernel too) and returns (entries, written) as the header prints them.
    fn take_snapshot(&self, snap: &mut Snapshot) -> (u64, u64) {
        snap.clear();
        let Some(rb) = ring() else {
            return (0, 0);
        };
        let mut scratch = [0u8; PAGE_SIZE];
        for cpu in 0..MAX_CPUS {
            let Some(buf) = rb.cpu(cpu) else {
                continue;
            };
            let mut it = buf.iter(&mut scratch);
            while let Some(ev) = it.next() {
                if !snap.push(cpu, ev.ts, ev.payload) {
                    break;
                }
            }
        }
        rb.entries_and_written()
    }

    /// The `trace` text of every CPU (`None`) or one (`per_cpu/cpuN/trace`), formatted by
    /// ftrace-tracers' `TraceWriter` (Linux's `s_show`).
    pub fn format_trace(&self, cpu_file: Option<u32>, out: &mut dyn Write) -> fmt::Result {
        let _snapshot_owner = self.control.lock();
        // SAFETY: the snapshot is only used here, under the control lock.
        let snap = unsafe { &mut *SNAPSHOT.0.get() };
        let (entries, written) = self.take_snapshot(snap);
        let symbols: &dyn SymbolTable = match self.symbols() {
            Some(s) => s,
            None => &NoSymbols,
        };
        let cpus = BareMetal.possible_cpus();
        let env = OutputEnv::new(symbols, &NoTaskNames, cpus);
        let tracer = self.tracer();
        let style = match tracer {
            Tracer::FunctionGraph => OutputStyle::Graph(GraphFlags::DEFAULT),
            _ => OutputStyle::Default,
        };
        let mut graph = [GraphCpuState::INIT; MAX_CPUS];
        let mut writer = TraceWriter::new(
            style,
            &mut graph,
            Overruns::of(written.saturating_sub(entries)),
        );
        let info = HeaderInfo {
            tracer: tracer.name(),
            entries,
            written,
            online_cpus: cpus,
            latency: LatencyInfo::default(),
        };
        let mut src = SnapshotSource {
            snap,
            next: [0; MAX_CPUS],
        };
        let mut iter = TraceIter::new(&mut src, cpu_file);
        writer.write_trace(&mut TextSink(out), &env, Some(&info), &mut iter)
    }
}

/// The most events one `trace` read shows (every event of full buffers fits).
const SNAPSHOT_EVENTS: usize = MAX_CPUS * PAGES_PER_CPU * PAGE_SIZE / 16;
const SNAPSHOT_BYTES: usize = MAX_CPUS * PAGES_PER_CPU * PAGE_SIZE;

/// Copies of the buffers' events for one `trace` read, per CPU in buffer order.
struct Snapshot {
    bytes: [u8; SNAPSHOT_BYTES],
    used: usize,
    /// (ts, offset, len) of each event, grouped by CPU.
    events: [(u64, u32, u32); SNAPSHOT_EVENTS],
    count: usize,
    /// Each CPU's range in `events`.
    ranges: [(usize, usize); MAX_CPUS],
}

impl Snapshot {
    fn clear(&mut self) {
        self.used = 0;
        self.count = 0;
        self.ranges = [(0, 0); MAX_CPUS];
    }

    fn push(&mut self, cpu: usize, ts: u64, payload: &[u8]) -> bool {
        let end = self.used + payload.len();
        if end > SNAPSHOT_BYTES || self.count == SNAPSHOT_EVENTS {
            return false;
        }
        self.bytes[self.used..end].copy_from_slice(payload);
        if self.ranges[cpu].1 == 0 {
            self.ranges[cpu] = (self.count, self.count);
        }
        self.events[self.count] = (ts, self.used as u32, payload.len() as u32);
        self.count += 1;
        self.ranges[cpu].1 = self.count;
        self.used = end;
        true
    }
}

struct SnapshotCell(UnsafeCell<Snapshot>);
// SAFETY: used only under the control lock (read_trace).
unsafe impl Sync for SnapshotCell {}

static SNAPSHOT: SnapshotCell = SnapshotCell(UnsafeCell::new(Snapshot {
    bytes: [0; SNAPSHOT_BYTES],
    used: 0,
    events: [(0, 0, 0); SNAPSHOT_EVENTS],
    count: 0,
    ranges: [(0, 0); MAX_CPUS],
}));

/// ftrace-tracers' per-CPU event streams over a snapshot.
struct SnapshotSource<'a> {
    snap: &'a Snapshot,
    next: [usize; MAX_CPUS],
}

impl<'a> EventSource<'a> for SnapshotSource<'a> {
    fn nr_cpus(&self) -> u32 {
        MAX_CPUS as u32
    }

    fn peek(&mut self, cpu: u32) -> Option<EventRef<'a>> {
        let (start, end) = *self.snap.ranges.get(cpu as usize)?;
        let i = start + self.next[cpu as usize];
        if i >= end {
            return None;
        }
        let (ts, off, len) = self.snap.events[i];
        let snap: &'a Snapshot = self.snap;
        Some(EventRef::new(
            cpu,
            ts,
            &snap.bytes[off as usize..(off + len) as usize],
        ))
    }

    fn advance(&mut self, cpu: u32) {
        if let Some(n) = self.next.get_mut(cpu as usize) {
            *n += 1;
        }
    }
}

/// The formatter's byte sink over the shell's text output (the trace text is ASCII).
struct TextSink<'a>(&'a mut dyn Write);

impl ByteSink for TextSink<'_> {
    fn put(&mut self, bytes: &[u8]) -> fmt::Result {
        match core::str::from_utf8(bytes) {
            Ok(s) => self.0.write_str(s),
            Err(_) => bytes.iter().try_for_each(|&b| {
                self.0
                    .write_char(if b.is_ascii() { b as char } else { '?' })
            }),
        }
    }
}

/// No symbols (before `install`): addresses print in hex.
struct NoSymbols;

impl SymbolTable for NoSymbols {
    fn lookup(&self, _addr: u64) -> Option<ftrace_core::symbols::Symbol<'_>> {
        None
    }
    fn for_each(&self, _f: &mut dyn FnMut(ftrace_core::symbols::Symbol<'_>)) {}
}

impl Tracing {
    /// `tracing_on` (`tracer_tracing_is_on`): the ring buffer's sticky record switch, as
    /// last set by [`Tracing::set_tracing_on`] (the file, or a `traceon` / `traceoff`
    /// function command from the probe ops).
    pub fn tracing_on(&self) -> bool {
        self.tracing_on.load(Ordering::SeqCst)
    }

    /// Sets `tracing_on` (`tracer_tracing_on` / `tracer_tracing_off`: the ring buffer's
    /// sticky record switch, and its mirror [`Tracing::tracing_on`] reads). Callable from any
    /// CPU, inside a traced function (the probe ops does).
    pub fn set_tracing_on(&self, on: bool) {
        if let Some(rb) = ring() {
            rb.set_record_on(on);
        }
        self.tracing_on.store(on, Ordering::SeqCst);
    }

    /// Switches to the tracer called `name` (`EINVAL` if there is none).
    pub fn set_tracer_by_name(&self, name: &str) -> Result<(), Errno> {
        let t = Tracer::ALL
            .into_iter()
            .find(|t| t.name() == name)
            .ok_or(Errno::EINVAL)?;
        self.set_tracer(t)
    }

    /// The tracers, in `available_tracers` order.
    pub fn tracer_names(&self) -> [&'static str; 3] {
        Tracer::ALL.map(Tracer::name)
    }

    /// `per_cpu/cpuN/stats`.
    pub fn write_stats(&self, cpu: u32, w: &mut dyn Write) -> fmt::Result {
        match ring().and_then(|r| r.cpu(cpu as usize)) {
            Some(b) => {
                let mut s = Buf::<512>::new();
                b.stats(BareMetal.now_ns())
                    .write_to(&mut s, ClockUnit::Nanoseconds)?;
                w.write_str(s.as_str())
            }
            None => Ok(()),
        }
    }

    /// Bytes of data one CPU's buffer holds.
    pub fn buffer_bytes(&self) -> u64 {
        (PAGES_PER_CPU * (PAGE_SIZE - ftrace_core::format::BUF_PAGE_HDR_SIZE)) as u64
    }

    /// The symbol table handed to `install`.
    pub fn symbols(&self) -> Option<&'static (dyn SymbolTable + Sync)> {
        *self.symbols.lock()
    }
}

/// A small stack buffer implementing `fmt::Write`.
struct Buf<const N: usize> {
    b: [u8; N],
    len: usize,
}

impl<const N: usize> Buf<N> {
    fn new() -> Self {
        Self { b: [0; N], len: 0 }
    }
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.b[..self.len]).unwrap_or("")
    }
}

impl<const N: usize> Write for Buf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > N {
            return Err(fmt::Error);
        }
        self.b[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}
