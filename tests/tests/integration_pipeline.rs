//! A simulated program traced end to end through the real crates: tracefs (the files), the
//! ftrace-core dispatcher and filter language, ftrace-patch's record table and update pass,
//! ftrace-tracers' function and function_graph tracers and formatter, ftrace-ringbuf's buffers.
//!
//! Simulated: the text segment (ftrace-patch's `SimText` with one NOP site per function), the
//! clock (1 µs per step) and the CPU, which runs the program's call tree and, at a function whose
//! site holds a call to the trampoline, enters the dispatcher with the site address (as the
//! trampoline does); a return whose address the graph tracer diverted goes through its exit hook.
//!
//! `echo 'f*' > set_ftrace_filter`, `echo function > current_tracer`: exactly the `f*` sites
//! become calls and `cat trace` shows exactly their calls; `function_graph` then shows the call
//! graph of those functions; `echo nop > current_tracer` returns every site to its NOP.

use std::cell::{Cell, RefCell};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::platform::{ExecContext, RecursionState, TaskContext, TraceClock};
use ftrace_core::reclaim::{Published, ReaderCount};
use ftrace_core::recursion::TraceRecursion;
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_core::{Dispatcher, FtraceOps, FtraceRegs, OpsFlags};
use ftrace_patch::sim::SimText;
use ftrace_patch::{
    DynFtrace, FixedTargets, FtraceOpsView, PageStats, Protocol, RecordOps, RecordTable, SiteForm,
    UpdatePass,
};
use ftrace_ringbuf::{ClockUnit, CpuBuffer, HeapPages};
use ftrace_tracefs::filters::{FilterState, FilterStore, FilterWriter};
use ftrace_tracefs::records::{CallSites, PatchRecords, RecordSource};
use ftrace_tracefs::{
    Errno, FilterEdit, FilterFile, FunctionRecords, Host, Param, Reader, TraceBackend, Tracefs,
    TracerOption, WriteMode, ring_buffer_pages,
};
use ftrace_tracers::function::{FunctionTracer, trace_marker_raw_write, trace_marker_write};
use ftrace_tracers::function_graph::{
    FunctionGraphTracer, GraphEntry, GraphFunctions, ShadowStack,
};
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::nop::NopTracer;
use ftrace_tracers::output::graph::GraphCpuState;
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::ringbuf::CpuBufferSink;
use ftrace_tracers::tracer::{AdmitAll, Registry, Tracer};
use ftrace_tracers::{EventRef, TraceIter, TraceOptions};

// ---- the program -------------------------------------------------------------------------

const BASE: u64 = 0x40_0000;
/// Each function is 0x100 bytes; its call site sits after a 4-byte `endbr64`.
const FUNC_SIZE: u64 = 0x100;
const SITE_OFFSET: u64 = 4;
/// Where a call returns to inside its caller.
const RET_OFFSET: u64 = 0x20;
const PID: i32 = 1234;
const COMM: &str = "prog";

/// The program's functions and whom each calls, in order. `_start` has no call site.
const PROGRAM: &[(&str, &[&str])] = &[
    ("_start", &["main"]),
    ("main", &["f_alpha", "g_gamma", "f_beta"]),
    ("f_alpha", &["h_helper"]),
    ("f_beta", &["f_alpha"]),
    ("g_gamma", &["h_helper"]),
    ("h_helper", &[]),
];

fn func_addr(name: &str) -> u64 {
    let i = PROGRAM.iter().position(|(n, _)| *n == name).unwrap() as u64;
    BASE + i * FUNC_SIZE
}

fn site(name: &str) -> u64 {
    func_addr(name) + SITE_OFFSET
}

const TARGETS: FixedTargets = FixedTargets {
    caller: BASE + 0x10_0000,
    regs_caller: BASE + 0x10_0100,
    list_ops: 0,
    nop_ops: 0,
};

// ---- the simulated clock and task -----------------------------------------------------------

static CLOCK: AtomicU64 = AtomicU64::new(1_000_000_000);

struct SimClock;

impl TraceClock for SimClock {
    const NAME: &'static str = "local";
    fn now_ns(&self) -> u64 {
        CLOCK.load(Ordering::Relaxed)
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Task;

static RECURSION: TraceRecursion = TraceRecursion::new();

impl TaskContext for Task {
    fn current_pid(&self) -> i32 {
        PID
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx::new(TraceFlags::empty(), 0, 0)
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

impl RecursionState for Task {
    fn trace_recursion(&self) -> &TraceRecursion {
        &RECURSION
    }
}

struct Names;

impl TaskNames for Names {
    fn comm(&self, pid: i32) -> Option<&str> {
        (pid == PID).then_some(COMM)
    }
}

// ---- the tracing machinery: dispatcher, ops, tracers, buffers -------------------------------

static DISPATCHER: Dispatcher<ReaderCount, Task> = Dispatcher::new(ReaderCount::new(), Task);
static FUNCTION: FunctionTracer = FunctionTracer::new();
static GRAPH: FunctionGraphTracer = FunctionGraphTracer::new();
static NOP: NopTracer = NopTracer;
/// The function tracer's ops (`function_trace_call`).
static FUNC_OPS: FtraceOps = FtraceOps::new(function_trace_call, OpsFlags::empty());
/// The function_graph tracer's ops (its entry hook).
static GRAPH_OPS: FtraceOps = FtraceOps::new(graph_entry_call, OpsFlags::GRAPH);
/// One CPU's ring buffer.
static BUFS: RwLock<Vec<CpuBuffer<HeapPages>>> = RwLock::new(Vec::new());
/// `set_graph_function` and `set_graph_notrace` as the graph tracer reads them.
static GRAPH_FILTER: RwLock<(Vec<u64>, Vec<u64>)> = RwLock::new((Vec::new(), Vec::new()));

thread_local! {
    static SHADOW: RefCell<ShadowStack> = RefCell::new(ShadowStack::default());
    /// Set by the graph entry hook when it diverted the return of the call being made.
    static DIVERTED: Cell<bool> = const { Cell::new(false) };
}

fn function_trace_call(ip: u64, parent: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    let bufs = BUFS.read().unwrap();
    let sink = CpuBufferSink::new(&bufs[0], &SimClock);
    FUNCTION.trace_call(ip, parent, &AdmitAll, &Task, &sink);
}

fn graph_entry_call(ip: u64, parent: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    let bufs = BUFS.read().unwrap();
    let sink = CpuBufferSink::new(&bufs[0], &SimClock);
    let f = GRAPH_FILTER.read().unwrap();
    let filter = GraphFunctions {
        functions: &f.0,
        notrace: &f.1,
    };
    let now = SimClock.now_ns();
    let hooked =
        SHADOW.with(|s| GRAPH.entry(&mut s.borrow_mut(), ip, parent, now, &filter, &Task, &sink));
    if hooked == GraphEntry::Hooked {
        DIVERTED.set(true);
    }
}

/// The function_graph return hook (`return_to_handler`): returns the real return address.
fn graph_return() -> u64 {
    let bufs = BUFS.read().unwrap();
    let sink = CpuBufferSink::new(&bufs[0], &SimClock);
    let now = SimClock.now_ns();
    let exit = SHADOW.with(|s| GRAPH.exit(&mut s.borrow_mut(), now, &Task, &sink));
    exit.expect("a hooked frame").ret
}

// ---- the world a backend serves: text, records, filters, tracers ---------------------------

struct World {
    syms: Arc<SortedSymbols>,
    text: SimText,
    table: RecordTable<Vec<DynFtrace>>,
    filters: FilterState,
    registry: Registry<'static>,
    trace_flags: u64,
    /// The ops enabled on the records, in enabling order.
    enabled: Vec<&'static FtraceOps>,
    pages: PageStats,
}

fn view(op: &'static FtraceOps) -> FtraceOpsView<'static> {
    // SAFETY: the ops' hashes are replaced only in `World::republish`, under the world's lock,
    // which every user of a view holds.
    unsafe { FtraceOpsView::new(op) }
}

impl World {
    fn views(ops: &[&'static FtraceOps]) -> Vec<FtraceOpsView<'static>> {
        ops.iter().map(|o| view(o)).collect()
    }

    fn update_calls(&mut self) {
        let views = Self::views(&self.enabled);
        let list: Vec<&dyn RecordOps> = views.iter().map(|v| v as &dyn RecordOps).collect();
        let pass = UpdatePass {
            targets: &TARGETS,
            ops: &list,
            enable: true,
            protocol: Protocol::Breakpoint,
        };
        let st = self
            .table
            .replace_code_all(&mut self.text, &pass, &mut |b| panic!("ftrace bug: {b:?}"));
        assert_eq!(st.failed, 0);
    }

    fn enable(&mut self, op: &'static FtraceOps) -> Result<(), Errno> {
        DISPATCHER.register(op)?;
        self.enabled.push(op);
        let views = Self::views(&self.enabled);
        let list: Vec<&dyn RecordOps> = views.iter().map(|v| v as &dyn RecordOps).collect();
        if let Err(e) = self.table.ops_enable(&view(op), &list) {
            self.enabled.pop();
            DISPATCHER.unregister(op)?;
            return Err(e);
        }
        self.update_calls();
        Ok(())
    }

    fn disable(&mut self, op: &'static FtraceOps) {
        let Some(i) = self.enabled.iter().position(|o| core::ptr::eq(*o, op)) else {
            return;
        };
        self.enabled.remove(i);
        let views = Self::views(&self.enabled);
        let list: Vec<&dyn RecordOps> = views.iter().map(|v| v as &dyn RecordOps).collect();
        self.table.ops_disable(&view(op), &list);
        // no site calls it any more: now it can leave the dispatcher
        self.update_calls();
        DISPATCHER.unregister(op).unwrap();
    }

    /// A filter file changed: the hashes go to the dispatcher, the record counts follow.
    fn republish(&mut self) -> Result<(), Errno> {
        let enabled = self.enabled.clone();
        for i in (0..enabled.len()).rev() {
            let rest = Self::views(&enabled[..i]);
            let list: Vec<&dyn RecordOps> = rest.iter().map(|v| v as &dyn RecordOps).collect();
            self.table.ops_disable(&view(enabled[i]), &list);
        }
        let filter = self.filters.set(FilterFile::Filter).to_hash();
        let notrace = self.filters.set(FilterFile::Notrace).to_hash();
        for op in [&FUNC_OPS, &GRAPH_OPS] {
            DISPATCHER.set_filter(op, Published::Owned(Box::new(filter.clone())));
            DISPATCHER.set_notrace(op, Published::Owned(Box::new(notrace.clone())));
        }
        *GRAPH_FILTER.write().unwrap() = (
            self.filters.set(FilterFile::GraphFunction).ips().collect(),
            self.filters.set(FilterFile::GraphNotrace).ips().collect(),
        );
        let mut r = Ok(());
        for i in 0..enabled.len() {
            let upto = Self::views(&enabled[..=i]);
            let list: Vec<&dyn RecordOps> = upto.iter().map(|v| v as &dyn RecordOps).collect();
            r = r.and(self.table.ops_enable(&view(enabled[i]), &list).map(|_| ()));
        }
        self.update_calls();
        r
    }

    fn tracer_ops(name: &str) -> Option<&'static FtraceOps> {
        match name {
            "function" => Some(&FUNC_OPS),
            "function_graph" => Some(&GRAPH_OPS),
            _ => None,
        }
    }

    fn trace_text(&self) -> Vec<u8> {
        let bufs = BUFS.read().unwrap();
        let mut events = Vec::new();
        let mut scratch = vec![0u8; 4096];
        for (cpu, b) in bufs.iter().enumerate() {
            let mut it = b.iter(&mut scratch);
            while let Some(e) = it.next() {
                events.push((cpu as u32, e.ts, e.payload.to_vec()));
            }
        }
        let mut lists = EventLists::new(1);
        for (c, ts, data) in &events {
            lists.push(EventRef::new(*c, *ts, data));
        }
        let s = bufs[0].stats(0);
        let t = self.registry.current();
        let info = HeaderInfo {
            tracer: t.name(),
            entries: s.entries,
            written: s.entries + s.overrun,
            online_cpus: 1,
            latency: LatencyInfo::default(),
        };
        let mut env = OutputEnv::new(&*self.syms, &Names, 1);
        env.options = TraceOptions::from_bits_retain(self.trace_flags);
        let mut state = vec![GraphCpuState::INIT; 1];
        let mut w = TraceWriter::new(
            t.output_style(t.default_flags()),
            &mut state,
            Overruns::None,
        );
        let mut iter = TraceIter::new(&mut lists, None);
        let mut out = Vec::new();
        w.write_trace(&mut out, &env, Some(&info), &mut iter)
            .expect("formats");
        out
    }
}

#[derive(Clone)]
struct Shared(Arc<Mutex<World>>);

impl Shared {
    fn lock(&self) -> MutexGuard<'_, World> {
        self.0.lock().unwrap()
    }
}

impl FilterStore for Shared {
    fn with_state(&self, f: &mut dyn FnMut(&mut FilterState)) {
        f(&mut self.lock().filters)
    }
    fn publish(&self, _which: FilterFile) -> Result<(), Errno> {
        self.lock().republish()
    }
}

impl RecordSource for Shared {
    fn with_records(&self, f: &mut dyn FnMut(CallSites<'_>)) {
        let w = self.lock();
        let views = World::views(&w.enabled);
        let list: Vec<&dyn RecordOps> = views.iter().map(|v| v as &dyn RecordOps).collect();
        f(CallSites {
            table: &w.table,
            ops: &list,
            pages: &w.pages,
        })
    }
}

// ---- the backend and host --------------------------------------------------------------------

struct Backend(Shared);

struct Chunks(std::vec::IntoIter<Vec<u8>>);

impl Reader for Chunks {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        self.0.next().is_some_and(|c| {
            out.extend_from_slice(&c);
            true
        })
    }
}

impl TraceBackend for Backend {
    fn tracers(&self) -> Vec<&'static str> {
        let w = self.0.lock();
        let mut s = String::new();
        w.registry.write_available(&mut s).unwrap();
        s.split_whitespace()
            .map(|n| match n {
                "function" => "function",
                "function_graph" => "function_graph",
                _ => "nop",
            })
            .collect()
    }
    fn current_tracer(&self) -> &'static str {
        self.0.lock().registry.current().name()
    }
    fn set_tracer(&mut self, name: &str) -> Result<(), Errno> {
        let mut w = self.0.lock();
        let old = w.registry.current().name();
        w.registry.set_current(name)?;
        let new = w.registry.current().name();
        if old == new {
            return Ok(());
        }
        if let Some(op) = World::tracer_ops(old) {
            w.disable(op);
        }
        // `tracer_init` starts the new tracer on empty buffers
        BUFS.write().unwrap().iter_mut().for_each(CpuBuffer::reset);
        match World::tracer_ops(new) {
            Some(op) => w.enable(op),
            None => Ok(()),
        }
    }
    fn tracer_options(&self) -> Vec<TracerOption> {
        let tracers: [&'static dyn Tracer; 3] = [&NOP, &FUNCTION, &GRAPH];
        tracers
            .iter()
            .flat_map(|t| {
                t.options().iter().map(|o| TracerOption {
                    name: o.name,
                    tracer: t.name(),
                    value: t.default_flags() & o.bit != 0,
                })
            })
            .collect()
    }
    fn set_tracer_option(&mut self, _name: &str, _on: bool) -> Result<(), Errno> {
        Err(Errno::EINVAL)
    }
    fn set_param(&mut self, param: Param<'_>) -> Result<(), Errno> {
        let mut w = self.0.lock();
        match param {
            Param::TracingOn(on) => BUFS
                .read()
                .unwrap()
                .iter()
                .for_each(|b| b.set_record_on(on)),
            Param::Flags(f) => w.trace_flags = f.bits(),
            _ => {}
        }
        Ok(())
    }
    fn resize(&mut self, cpu: Option<u32>, bytes: u64) -> Result<(), Errno> {
        let pages = ring_buffer_pages(bytes, 4080) as usize;
        let mut bufs = BUFS.write().unwrap();
        for (i, b) in bufs.iter_mut().enumerate() {
            if cpu.is_none_or(|c| c as usize == i) {
                b.resize(pages).map_err(|e| e.errno())?;
            }
        }
        Ok(())
    }
    fn buffer_bytes(&self, cpu: u32) -> u64 {
        let bufs = BUFS.read().unwrap();
        let b = &bufs[cpu as usize];
        (b.nr_pages() * b.subbuf_size()) as u64
    }
    fn subbuf_size(&self) -> u32 {
        4096
    }
    fn set_subbuf_size(&mut self, bytes: u32) -> Result<(), Errno> {
        if bytes == 4096 {
            Ok(())
        } else {
            Err(Errno::EINVAL)
        }
    }
    fn clear(&mut self, cpu: Option<u32>) {
        let mut bufs = BUFS.write().unwrap();
        for (i, b) in bufs.iter_mut().enumerate() {
            if cpu.is_none_or(|c| c as usize == i) {
                b.reset();
            }
        }
    }
    fn write_stats(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        let mut s = String::new();
        BUFS.read().unwrap()[cpu as usize]
            .stats(SimClock.now_ns())
            .write_to(&mut s, ClockUnit::Nanoseconds)?;
        w.write_str(&s)
    }
    fn open_trace(&mut self, _cpu: Option<u32>) -> Box<dyn Reader> {
        Box::new(Chunks(vec![self.0.lock().trace_text()].into_iter()))
    }
    fn open_pipe(&mut self, _cpu: Option<u32>) -> Box<dyn Reader> {
        // consumes: the whole text now, then the buffer is empty
        let text = self.0.lock().trace_text();
        BUFS.write().unwrap().iter_mut().for_each(CpuBuffer::reset);
        Box::new(Chunks(vec![text].into_iter()))
    }
    fn open_pipe_raw(&mut self, cpu: u32) -> Box<dyn Reader> {
        let bufs = BUFS.read().unwrap();
        let b = &bufs[cpu as usize];
        let mut pages = Vec::new();
        while let Ok(mut page) = b.alloc_read_page() {
            if b.consumer().read_page(&mut page).is_none() {
                break;
            }
            pages.push(page.as_bytes().to_vec());
        }
        Box::new(Chunks(pages.into_iter()))
    }
    fn write_marker(&mut self, text: &[u8]) -> Result<(), Errno> {
        let w = self.0.lock();
        let bufs = BUFS.read().unwrap();
        let sink = CpuBufferSink::new(&bufs[0], &SimClock);
        let opts = TraceOptions::from_bits_retain(w.trace_flags);
        trace_marker_write(text, func_addr("_start"), opts, &Task, &sink).map(|_| ())
    }
    fn write_marker_raw(&mut self, id: u32, data: &[u8]) -> Result<(), Errno> {
        let w = self.0.lock();
        let bufs = BUFS.read().unwrap();
        let sink = CpuBufferSink::new(&bufs[0], &SimClock);
        let mut all = id.to_ne_bytes().to_vec();
        all.extend_from_slice(data);
        let opts = TraceOptions::from_bits_retain(w.trace_flags);
        trace_marker_raw_write(&all, opts, &Task, &sink).map(|_| ())
    }
    fn open_filter(
        &mut self,
        which: FilterFile,
        mode: ftrace_tracefs::WriteMode,
    ) -> Result<Box<dyn FilterEdit>, Errno> {
        Ok(FilterWriter::open(self.0.clone(), which, mode))
    }
    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        self.0.lock().filters.write_filter(which, w)
    }
    fn write_saved_cmdlines(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(w, "{PID} {COMM}")
    }
    fn write_saved_tgids(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(w, "{PID} {PID}")
    }
}

struct SimHost {
    world: Shared,
    records: PatchRecords<Shared>,
}

impl Host for SimHost {
    fn nr_cpus(&self) -> u32 {
        1
    }
    fn local_clock_ns(&self) -> u64 {
        SimClock.now_ns()
    }
    fn trace_clocks(&self) -> &[&'static str] {
        &["local"]
    }
    fn create_backend(
        &mut self,
        instance: Option<&str>,
        bytes: u64,
    ) -> Result<Box<dyn TraceBackend>, Errno> {
        if instance.is_some() {
            return Err(Errno::ENOMEM);
        }
        let pages = ring_buffer_pages(bytes, 4080) as usize;
        let buf = CpuBuffer::new(HeapPages, pages, 4096).map_err(|e| e.errno())?;
        *BUFS.write().unwrap() = vec![buf];
        Ok(Box::new(Backend(self.world.clone())))
    }
    fn symbols(&self) -> Option<&dyn SymbolTable> {
        None
    }
    fn functions(&self) -> Option<&dyn FunctionRecords> {
        Some(&self.records)
    }
}

/// Loads the program: symbols, a text with a NOP site at every function but `_start`, the
/// record table, and the filter files resolving against its sites.
fn boot() -> (Tracefs<SimHost>, Shared) {
    let mut syms = SortedSymbols::new();
    for (name, _) in PROGRAM {
        syms.push(name, func_addr(name), FUNC_SIZE, None);
    }
    syms.finish();
    let syms = Arc::new(syms);
    let mut text = SimText::new(BASE, PROGRAM.len() * FUNC_SIZE as usize);
    let mut recs = Vec::new();
    for (name, _) in &PROGRAM[1..] {
        text.poke(site(name), &SiteForm::X86Nop5.nop());
        recs.push(DynFtrace::new(site(name), SiteForm::X86Nop5));
    }
    let n = recs.len();
    let table = RecordTable::new(recs).unwrap();
    let sites: Arc<dyn SymbolTable + Send + Sync> = Arc::new(table.site_symbols(&*syms));
    let mut registry = Registry::new(&NOP);
    registry.register(&FUNCTION).unwrap();
    registry.register(&GRAPH).unwrap();
    let mut pages = PageStats::kernel();
    pages.add_text(n, 0);
    let world = Shared(Arc::new(Mutex::new(World {
        syms: syms.clone(),
        text,
        table,
        filters: FilterState::with_symbols(sites),
        registry,
        trace_flags: 0,
        enabled: Vec::new(),
        pages,
    })));
    let host = SimHost {
        world: world.clone(),
        records: PatchRecords::new(world.clone(), syms),
    };
    (Tracefs::new(host).unwrap(), world)
}

// ---- the simulated CPU -----------------------------------------------------------------------

/// Runs `name` (called from a site returning to `ret`): one clock step on entry, the trampoline
/// call if its site is patched, its callees, one step on return, and the return hook if the
/// graph tracer diverted the return.
fn run(world: &Shared, name: &str, ret: u64) {
    CLOCK.fetch_add(1000, Ordering::Relaxed);
    let mut diverted = false;
    if name != "_start" {
        let ip = site(name);
        let bytes = world.lock().text.bytes(ip, 5).to_vec();
        if bytes != SiteForm::X86Nop5.nop().as_slice() {
            let target = SiteForm::X86Nop5.call_target(ip, &bytes);
            assert_eq!(target, Some(TARGETS.caller), "{name} calls the trampoline");
            DISPATCHER.call(ip, ret, None);
            diverted = DIVERTED.take();
        }
    }
    let callees = PROGRAM.iter().find(|(n, _)| *n == name).unwrap().1;
    for callee in callees {
        run(world, callee, func_addr(name) + RET_OFFSET);
    }
    CLOCK.fetch_add(1000, Ordering::Relaxed);
    if diverted {
        assert_eq!(
            graph_return(),
            ret,
            "the graph hook returns where the call came from"
        );
    }
}

// ---- the session -----------------------------------------------------------------------------

fn cat(fs: &mut Tracefs<SimHost>, path: &str) -> String {
    String::from_utf8(fs.read_to_end(path).unwrap()).unwrap()
}

fn echo(fs: &mut Tracefs<SimHost>, text: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{text}\n").as_bytes(), WriteMode::Truncate)
}

fn body(trace: &str) -> Vec<&str> {
    trace.lines().filter(|l| !l.starts_with('#')).collect()
}

fn calls_sites(world: &Shared) -> Vec<&'static str> {
    let w = world.lock();
    PROGRAM[1..]
        .iter()
        .map(|(n, _)| *n)
        .filter(|n| w.text.bytes(site(n), 5) != SiteForm::X86Nop5.nop().as_slice())
        .collect()
}

/// `%16s-%-7d [%03d] %s %5lu.%06lu: ` of the kernel's default format.
fn prefix(ts_us: u64) -> String {
    format!(
        "{COMM:>16}-{PID:<7} [000] ..... {:>5}.{:06}: ",
        ts_us / 1_000_000,
        ts_us % 1_000_000
    )
}

#[test]
fn a_program_traced_through_tracefs() {
    let (mut fs, world) = boot();
    assert_eq!(
        cat(&mut fs, "available_filter_functions"),
        "main\nf_alpha\nf_beta\ng_gamma\nh_helper\n"
    );
    assert_eq!(
        cat(&mut fs, "available_filter_functions_addrs"),
        "400104 main\n400204 f_alpha\n400304 f_beta\n400404 g_gamma\n400504 h_helper\n"
    );
    assert_eq!(
        cat(&mut fs, "dyn_ftrace_total_info"),
        "5 pages:1 groups: 1\n"
    );

    // the filter, then the tracer
    echo(&mut fs, "f*", "set_ftrace_filter").unwrap();
    assert_eq!(cat(&mut fs, "set_ftrace_filter"), "f_alpha\nf_beta\n");
    assert!(
        calls_sites(&world).is_empty(),
        "no tracer yet: every site a NOP"
    );
    echo(&mut fs, "function", "current_tracer").unwrap();
    assert_eq!(calls_sites(&world), ["f_alpha", "f_beta"]);
    assert_eq!(
        cat(&mut fs, "enabled_functions"),
        "f_alpha (1)           \nf_beta (1)           \n"
    );

    // the CPU runs the program from t = 1 s: one µs per step
    CLOCK.store(1_000_000_000, Ordering::Relaxed);
    run(&world, "_start", 0);
    let trace = cat(&mut fs, "trace");
    assert!(trace.starts_with("# tracer: function\n"), "{trace}");
    assert!(
        trace.contains("# entries-in-buffer/entries-written: 3/3   #P:1\n"),
        "{trace}"
    );
    // _start 1.000001, main .000002, f_alpha .000003 (h_helper .000004-.000005, back .000006),
    // g_gamma .000007-.000010, f_beta .000011, f_alpha .000012
    assert_eq!(
        body(&trace),
        [
            format!("{}f_alpha <-main", prefix(1_000_003)),
            format!("{}f_beta <-main", prefix(1_000_011)),
            format!("{}f_alpha <-f_beta", prefix(1_000_012)),
        ]
    );

    // a filter change while tracing re-patches: add g_gamma
    fs.write_all("set_ftrace_filter", b"g_gamma\n", WriteMode::Append)
        .unwrap();
    assert_eq!(calls_sites(&world), ["f_alpha", "f_beta", "g_gamma"]);
    echo(&mut fs, "f*", "set_ftrace_filter").unwrap();
    assert_eq!(calls_sites(&world), ["f_alpha", "f_beta"]);

    // function_graph on the same filter: the call graph of exactly those functions
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    assert_eq!(calls_sites(&world), ["f_alpha", "f_beta"]);
    assert_eq!(
        cat(&mut fs, "trace")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .count(),
        0
    );
    run(&world, "_start", 0);
    let graph = cat(&mut fs, "trace");
    assert!(graph.starts_with("# tracer: function_graph\n"), "{graph}");
    let lines = body(&graph);
    let calls: Vec<&str> = lines
        .iter()
        .map(|l| l.split_once("|  ").unwrap_or_else(|| panic!("{graph}")).1)
        .collect();
    assert_eq!(
        calls,
        ["f_alpha();", "f_beta() {", "  f_alpha();", "}"],
        "{graph}"
    );
    // f_alpha runs 3 µs (h_helper in and out, its return); f_beta 5 µs around it
    assert!(lines[0].contains("   3.000 us    |"), "{graph}");
    assert!(lines[2].contains("   3.000 us    |"), "{graph}");
    assert!(lines[3].contains("   5.000 us    |"), "{graph}");
    SHADOW.with(|s| assert_eq!(s.borrow().depth(), 0));

    // set_graph_function: only f_beta's subtree (the other f_alpha call is outside it)
    echo(&mut fs, "f_beta", "set_graph_function").unwrap();
    assert_eq!(cat(&mut fs, "set_graph_function"), "f_beta\n");
    echo(&mut fs, "", "trace").unwrap();
    run(&world, "_start", 0);
    let graph = cat(&mut fs, "trace");
    let calls: Vec<&str> = body(&graph)
        .iter()
        .map(|l| l.split_once("|  ").unwrap().1)
        .collect();
    assert_eq!(calls, ["f_beta() {", "  f_alpha();", "}"], "{graph}");
    echo(&mut fs, "", "set_graph_function").unwrap();

    // nop: every site back to a NOP, the dispatcher empty, the touched sites remembered
    echo(&mut fs, "nop", "current_tracer").unwrap();
    assert!(calls_sites(&world).is_empty());
    {
        let w = world.lock();
        for r in w.table.records() {
            assert_eq!(w.text.bytes(r.ip, 5), SiteForm::X86Nop5.nop().as_slice());
        }
    }
    assert!(DISPATCHER.is_empty());
    assert_eq!(cat(&mut fs, "enabled_functions"), "");
    // (g_gamma was a call while the filter held it)
    assert_eq!(
        cat(&mut fs, "touched_functions"),
        "f_alpha (0)           \nf_beta (0)           \ng_gamma (0)           \n"
    );
    // the switch started nop on empty buffers (Linux `tracer_init`), and nothing is traced now
    run(&world, "_start", 0);
    let after = cat(&mut fs, "trace");
    assert!(after.starts_with("# tracer: nop\n"), "{after}");
    assert!(
        after.contains("# entries-in-buffer/entries-written: 0/0   #P:1\n"),
        "{after}"
    );
    assert!(body(&after).is_empty());
    // the filter survives the tracer switch, as in Linux
    assert_eq!(cat(&mut fs, "set_ftrace_filter"), "f_alpha\nf_beta\n");
}
