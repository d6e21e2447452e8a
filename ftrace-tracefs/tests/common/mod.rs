//! The test backend: the tree on the real crates where they exist on main.
//!
//! Real: the ring buffers (ftrace-ringbuf `CpuBuffer`s: sizes, resize, stats, pages), the
//! tracers and their registry and options, `trace_marker` entries and the `trace` /
//! `trace_pipe` text (ftrace-tracers), the function-filter files (ftrace-core's filter language
//! through `ftrace_tracefs::filters`, over the reference kallsyms subset). Modelled: ENOMEM
//! above a memory limit.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc as Rc, Mutex, MutexGuard};

use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::format::TraceEventFormat;
use ftrace_core::platform::{ExecContext, TaskContext};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_patch::{DynFtrace, PageStats, RecordTable, SiteForm};
use ftrace_ringbuf::CpuBuffer;
use ftrace_ringbuf::{At, ClockUnit, HeapPages};
use ftrace_tracefs::event_filter::EventFilter;
use ftrace_tracefs::filters::{FilterState, FilterStore, FilterWriter};
use ftrace_tracefs::records::{PatchRecords, StaticRecords};
use ftrace_tracefs::trigger_run::{TriggerActions, TriggerRunner};
use ftrace_tracefs::triggers::Trigger;
use ftrace_tracefs::{
    Errno, EventState, FilterEdit, FilterFile, FunctionRecords, Host, Param, Reader, TraceBackend,
    Tracefs, TracerOption, WriteMode, ring_buffer_pages,
};
use ftrace_tracers::function::{FunctionTracer, trace_marker_raw_write, trace_marker_write};
use ftrace_tracers::function_graph::FunctionGraphTracer;
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::nop::NopTracer;
use ftrace_tracers::output::graph::GraphCpuState;
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{OutputStyle, Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames, TextToBytes};
use ftrace_tracers::trace_event;
use ftrace_tracers::tracer::{EntrySink, Registry, Tracer};
use ftrace_tracers::{EventRef, TraceIter, TraceOptions};

pub mod sim;

pub const REF: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/reference/ftrace-6.12.117"
);

pub fn golden(path: &str) -> String {
    std::fs::read_to_string(format!("{REF}/{path}")).unwrap_or_else(|e| panic!("{path}: {e}"))
}

pub const CLOCKS: &[&str] = &[
    "local", "global", "counter", "uptime", "perf", "mono", "mono_raw", "boot", "tai", "x86-tsc",
];

/// Per-CPU memory the model can "allocate" (ENOMEM above).
pub const MEM_LIMIT: u64 = 8 << 20;

/// The task a write comes from, and the time it happens at (the tests set both, so entries
/// carry the capture's pids, CPUs and time stamps).
#[derive(Clone, Copy, Debug)]
pub struct Writer {
    pub pid: i32,
    pub cpu: u32,
    pub ts: u64,
}

impl TaskContext for Writer {
    fn current_pid(&self) -> i32 {
        self.pid
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx::new(TraceFlags::empty(), 0, 0)
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

/// The address `trace_marker` entries carry (inside `tracing_mark_write` in the kallsyms
/// subset), as in the capture.
pub const MARK_WRITE_IP: u64 = 0xffff_ffff_8123_77ff;

pub struct State {
    pub name: Option<String>,
    pub cpus: u32,
    pub registry: Registry<'static>,
    pub all_tracers: Vec<&'static dyn Tracer>,
    /// Each tracer's option flag word.
    pub tracer_flags: BTreeMap<&'static str, u32>,
    pub trace_flags: u64,
    pub recording: bool,
    pub bufs: Vec<CpuBuffer<HeapPages>>,
    pub subbuf: u32,
    /// The clock reading `per_cpu/cpuN/stats` prints as `now ts`.
    pub stats_now_ns: u64,
    pub writer: Writer,
    /// The four filter files and the function commands (ftrace-core's filter language).
    pub filters: FilterState,
    pub params: Vec<String>,
    pub comms: BTreeMap<i32, String>,
    /// What the tree told about each trace event (by id): state, filter, triggers.
    pub event_states: BTreeMap<u16, EventState>,
    pub event_filters: BTreeMap<u16, Option<String>>,
    pub event_triggers: BTreeMap<u16, Vec<String>>,
    /// The triggers as they run when the event fires (ftrace-tracefs's trigger runner).
    pub trigger_runners: BTreeMap<u16, Rc<TriggerRunner>>,
    /// Refuse every event state change (a backend that cannot arm tracepoints).
    pub refuse_events: bool,
    /// The trace events the tree told about (their formats print their records).
    pub event_formats: Vec<TraceEventFormat>,
}

struct CpuSink<'a> {
    buf: &'a CpuBuffer<HeapPages>,
    ts: u64,
}

impl EntrySink for CpuSink<'_> {
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        match self.buf.reserve(len, &At(self.ts)) {
            Some(mut r) => {
                let d = r.data();
                d.fill(0);
                fill(d);
                r.commit();
                true
            }
            None => false,
        }
    }
}

impl TaskNames for State {
    fn comm(&self, pid: i32) -> Option<&str> {
        self.comms.get(&pid).map(String::as_str)
    }
}

impl State {
    fn pages_for(&self, bytes: u64) -> usize {
        ring_buffer_pages(bytes, u64::from(self.subbuf) - 16) as usize
    }
    fn new_buffer(&self, bytes: u64) -> Result<CpuBuffer<HeapPages>, Errno> {
        if bytes > MEM_LIMIT {
            return Err(Errno::ENOMEM);
        }
        CpuBuffer::new(HeapPages, self.pages_for(bytes), self.subbuf as usize)
            .map_err(|e| e.errno())
    }
    fn options(&self) -> TraceOptions {
        TraceOptions::from_bits_retain(self.trace_flags)
    }
    fn sink(&self) -> CpuSink<'_> {
        CpuSink {
            buf: &self.bufs[self.writer.cpu as usize],
            ts: self.writer.ts,
        }
    }
    /// Records a `trace_marker` entry with `text` from the current writer (tests use it as
    /// "some event happened"); the writer's clock then moves on by 1 µs.
    pub fn record(&mut self, cpu: u32, text: &str) {
        self.writer.cpu = cpu;
        if self.recording {
            let _ = trace_marker_write(
                text.as_bytes(),
                MARK_WRITE_IP,
                self.options(),
                &self.writer,
                &self.sink(),
            );
        }
        self.writer.ts += 1000;
    }
    /// Writes a whole entry (header and fields) into `cpu`'s buffer at time `ts`, as a
    /// tracepoint of an enabled trace event does; `false` if the buffer refused it.
    pub fn write_raw(&mut self, cpu: u32, ts: u64, entry: &[u8]) -> bool {
        let Some(buf) = self.bufs.get(cpu as usize) else {
            return false;
        };
        match buf.reserve(entry.len(), &At(ts)) {
            Some(mut r) => {
                r.data()[..entry.len()].copy_from_slice(entry);
                r.commit();
                true
            }
            None => false,
        }
    }
    /// A tracepoint of a registered event fires: the entry is recorded only if the tree has
    /// the event enabled (and not soft-disabled) and its filter, if any, passes it.
    pub fn tracepoint(&mut self, cpu: u32, ts: u64, entry: &[u8]) -> bool {
        let id = u16::from_le_bytes([entry[0], entry[1]]);
        let runner = self.trigger_runners.get(&id).cloned();
        let armed = self.event_states.get(&id).is_some_and(|s| s.enabled);
        if let Some(r) = runner.as_ref().filter(|_| armed) {
            r.before_record(&ModelActions(std::cell::RefCell::new(self)));
        }
        let written = self.record_event(cpu, ts, id, entry);
        if let Some(r) = runner.as_ref().filter(|_| armed) {
            let cx = ftrace_tracefs::event_filter::RecordCtx { cpu, comm: b"" };
            r.after_record(entry, &cx, &ModelActions(std::cell::RefCell::new(self)));
        }
        written
    }
    fn record_event(&mut self, cpu: u32, ts: u64, id: u16, entry: &[u8]) -> bool {
        let on = self
            .event_states
            .get(&id)
            .is_some_and(|s| s.enabled && !s.soft_disabled);
        let format = self.event_formats.iter().find(|f| f.id == id).copied();
        let passes = match (self.event_filters.get(&id), format) {
            (Some(Some(text)), Some(f)) => ftrace_tracefs::event_filter::parse(&f, text)
                .expect("the tree only passes valid filters")
                .matches(
                    entry,
                    &ftrace_tracefs::event_filter::RecordCtx { cpu, comm: b"" },
                ),
            _ => true,
        };
        on && passes && self.write_raw(cpu, ts, entry)
    }
    /// Every event of the buffers (of `cpu`, or all), copied out, oldest first per CPU.
    fn snapshot(&self) -> Vec<(u32, u64, Vec<u8>)> {
        let mut out = Vec::new();
        let mut scratch = vec![0u8; self.subbuf as usize];
        for (cpu, b) in self.bufs.iter().enumerate() {
            let mut it = b.iter(&mut scratch);
            while let Some(e) = it.next() {
                out.push((cpu as u32, e.ts, e.payload.to_vec()));
            }
        }
        out
    }
    fn env<'a>(&'a self, syms: &'a SortedSymbols) -> OutputEnv<'a> {
        let mut env = OutputEnv::new(syms, self, self.cpus);
        env.options = self.options();
        env
    }
    fn style(&self) -> OutputStyle {
        let t = self.registry.current();
        t.output_style(self.tracer_flags[t.name()])
    }
    /// The `trace` file (all CPUs or one) as the real formatter prints it.
    pub fn trace_text(&self, syms: &SortedSymbols, cpu: Option<u32>) -> Vec<u8> {
        let events = self.snapshot();
        let mut lists = EventLists::new(self.cpus);
        for (c, ts, data) in &events {
            lists.push(EventRef::new(*c, *ts, data));
        }
        let (mut entries, mut written) = (0, 0);
        for b in &self.bufs {
            let s = b.stats(0);
            entries += s.entries;
            written += s.entries + s.overrun;
        }
        let info = HeaderInfo {
            tracer: self.registry.current().name(),
            entries,
            written,
            online_cpus: self.cpus,
            latency: LatencyInfo::default(),
        };
        let mut state = vec![GraphCpuState::INIT; self.cpus as usize];
        let mut w = TraceWriter::new(self.style(), &mut state, Overruns::None);
        let mut iter = TraceIter::new(&mut lists, cpu);
        let mut out = Vec::new();
        let env = self.env(syms);
        let empty = iter.is_empty();
        w.write_header(&mut TextToBytes(&mut out), &env, &info, empty)
            .expect("formats");
        // Registered trace events print through their formats; the rest as ftrace prints them.
        while let Some(ev) = iter.next_event() {
            match trace_event::find(&self.event_formats, &ev) {
                Some(f) => trace_event::write_event_line(&mut TextToBytes(&mut out), &env, &ev, f),
                None => w.write_line(&mut out, &env, &mut iter, &ev),
            }
            .expect("formats");
        }
        out
    }
}

/// The state a backend shares with the test (a `Mutex`, as backends must be `Send`).
#[derive(Clone)]
pub struct Shared(Rc<Mutex<State>>);

impl Shared {
    pub fn borrow(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }
    pub fn borrow_mut(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }
}

pub struct ModelHost {
    pub cpus: u32,
    pub now_ns: u64,
    pub syms: Rc<SortedSymbols>,
    pub states: BTreeMap<Option<String>, Shared>,
    pub fail_create: bool,
    pub functions: Option<Box<dyn FunctionRecords + Send>>,
}

/// Call-site records: one per function of the kallsyms subset (the model's own text), never
/// patched: ftrace-patch's record table through `ftrace_tracefs::records`.
pub type ModelFunctions = PatchRecords<StaticRecords>;

/// The model's records: a NOP site at every function of `syms`.
pub fn model_functions(syms: Rc<SortedSymbols>) -> ModelFunctions {
    let mut recs = Vec::new();
    syms.for_each(&mut |s| recs.push(DynFtrace::new(s.addr, SiteForm::X86Nop5)));
    let n = recs.len();
    let table = RecordTable::new(recs).expect("sites do not overlap");
    let mut pages = PageStats::kernel();
    pages.add_text(n, 0);
    PatchRecords::new(StaticRecords { table, pages }, syms)
}

impl ModelHost {
    pub fn new(cpus: u32) -> Self {
        let text = golden("11-kallsyms/kallsyms_subset.txt");
        let syms = SortedSymbols::from_kallsyms(&text).expect("kallsyms parses");
        let syms = Rc::new(syms);
        let functions: Option<Box<dyn FunctionRecords + Send>> =
            Some(Box::new(model_functions(syms.clone())));
        ModelHost {
            cpus,
            now_ns: 125_746_853_000,
            syms,
            states: BTreeMap::new(),
            fail_create: false,
            functions,
        }
    }
    pub fn state(&self, inst: Option<&str>) -> Shared {
        self.states[&inst.map(str::to_owned)].clone()
    }
}

/// The tree with the `sched` events of Linux 6.12 registered, as a Linux-like host does.
pub fn tracefs_with_sched() -> Tracefs<ModelHost> {
    let mut fs = tracefs();
    for ev in ftrace_core::format::sched::SCHED_EVENTS {
        fs.register_event(*ev).unwrap();
    }
    fs
}

pub fn tracefs() -> Tracefs<ModelHost> {
    Tracefs::new(ModelHost::new(2)).expect("tree builds")
}

impl Host for ModelHost {
    fn nr_cpus(&self) -> u32 {
        self.cpus
    }
    fn local_clock_ns(&self) -> u64 {
        self.now_ns
    }
    fn trace_clocks(&self) -> &[&'static str] {
        CLOCKS
    }
    fn create_backend(
        &mut self,
        instance: Option<&str>,
        bytes: u64,
    ) -> Result<Box<dyn TraceBackend>, Errno> {
        if self.fail_create {
            return Err(Errno::ENOMEM);
        }
        // Each backend gets its own tracer objects (they keep state in atomics).
        let nop: &'static dyn Tracer = Box::leak(Box::new(NopTracer));
        let func: &'static dyn Tracer = Box::leak(Box::new(FunctionTracer::new()));
        let graph: &'static dyn Tracer = Box::leak(Box::new(FunctionGraphTracer::new()));
        let mut registry = Registry::new(nop);
        for t in [func, graph] {
            if instance.is_none() || t.allow_instances() {
                registry.register(t).expect("distinct names");
            }
        }
        let mut comms = BTreeMap::new();
        comms.insert(144, "sh".to_owned());
        let mut st = State {
            name: instance.map(str::to_owned),
            cpus: self.cpus,
            registry,
            all_tracers: vec![nop, func, graph],
            tracer_flags: [nop, func, graph]
                .iter()
                .map(|t| (t.name(), t.default_flags()))
                .collect(),
            trace_flags: 0,
            recording: true,
            bufs: Vec::new(),
            subbuf: 4096,
            stats_now_ns: 0,
            writer: Writer {
                pid: 144,
                cpu: 0,
                ts: 1_000_000_000,
            },
            filters: FilterState::new(std::sync::Arc::new(ModelCommands(self.syms.clone()))),
            params: Vec::new(),
            comms,
            event_states: BTreeMap::new(),
            event_filters: BTreeMap::new(),
            event_triggers: BTreeMap::new(),
            trigger_runners: BTreeMap::new(),
            refuse_events: false,
            event_formats: Vec::new(),
        };
        for _ in 0..self.cpus {
            let b = st.new_buffer(bytes)?;
            st.bufs.push(b);
        }
        let shared = Shared(Rc::new(Mutex::new(st)));
        self.states
            .insert(instance.map(str::to_owned), shared.clone());
        Ok(Box::new(ModelBackend {
            st: shared,
            syms: self.syms.clone(),
        }))
    }
    fn symbols(&self) -> Option<&dyn SymbolTable> {
        Some(&*self.syms)
    }
    fn functions(&self) -> Option<&dyn FunctionRecords> {
        self.functions.as_deref().map(|f| f as &dyn FunctionRecords)
    }
}

pub struct ModelBackend {
    pub st: Shared,
    syms: Rc<SortedSymbols>,
}

struct SnapshotReader {
    chunks: std::vec::IntoIter<Vec<u8>>,
}

impl Reader for SnapshotReader {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        match self.chunks.next() {
            Some(c) => {
                out.extend_from_slice(&c);
                true
            }
            None => false,
        }
    }
}

/// `trace_pipe`: consumes the oldest event (of one CPU or all) and prints its line with the
/// real formatter.
struct PipeReader {
    st: Shared,
    syms: Rc<SortedSymbols>,
    cpu: Option<u32>,
}

impl Reader for PipeReader {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let st = self.st.borrow();
        let mut best: Option<(u64, usize)> = None;
        for (cpu, b) in st.bufs.iter().enumerate() {
            if self.cpu.is_some_and(|c| c as usize != cpu) {
                continue;
            }
            if let Some(ts) = b.consumer().peek_ts() {
                if best.is_none_or(|(t, _)| ts < t) {
                    best = Some((ts, cpu));
                }
            }
        }
        let Some((_, cpu)) = best else {
            return false;
        };
        let (ts, data) = {
            let mut c = st.bufs[cpu].consumer();
            let e = c.next().expect("peeked");
            (e.ts, e.payload.to_vec())
        };
        let ev = EventRef::new(cpu as u32, ts, &data);
        if let Some(f) = trace_event::find(&st.event_formats, &ev) {
            trace_event::write_event_line(&mut TextToBytes(out), &st.env(&self.syms), &ev, f)
                .expect("formats");
            return true;
        }
        let mut lists = EventLists::new(st.cpus);
        lists.push(ev);
        let mut state = vec![GraphCpuState::INIT; st.cpus as usize];
        let mut w = TraceWriter::new(st.style(), &mut state, Overruns::None);
        let mut iter = TraceIter::new(&mut lists, None);
        w.write_events(out, &st.env(&self.syms), &mut iter)
            .expect("formats");
        true
    }
}

/// `trace_pipe_raw` on the real ring buffer: one kernel-format page per chunk.
struct RawReader {
    st: Shared,
    cpu: usize,
}

impl Reader for RawReader {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let st = self.st.borrow();
        let buf = &st.bufs[self.cpu];
        let Ok(mut page) = buf.alloc_read_page() else {
            return false;
        };
        if buf.consumer().read_page(&mut page).is_none() {
            return false;
        }
        out.extend_from_slice(page.as_bytes());
        true
    }
}

/// The filter files' state lives in the instance's `State`, behind its lock.
impl FilterStore for Shared {
    fn with_state(&self, f: &mut dyn FnMut(&mut FilterState)) {
        f(&mut self.borrow_mut().filters)
    }
}

impl TraceBackend for ModelBackend {
    fn tracers(&self) -> Vec<&'static str> {
        let st = self.st.borrow();
        let mut avail = String::new();
        st.registry.write_available(&mut avail).unwrap();
        avail
            .split_whitespace()
            .filter_map(|n| {
                st.all_tracers
                    .iter()
                    .find(|t| t.name() == n)
                    .map(|t| t.name())
            })
            .collect()
    }
    fn current_tracer(&self) -> &'static str {
        self.st.borrow().registry.current().name()
    }
    fn set_tracer(&mut self, name: &str) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        let old = st.registry.current().name();
        st.registry.set_current(name)?;
        if st.registry.current().name() != old {
            // `tracer_init` starts the new tracer on empty buffers
            st.bufs.iter_mut().for_each(CpuBuffer::reset);
        }
        Ok(())
    }
    fn tracer_options(&self) -> Vec<TracerOption> {
        let st = self.st.borrow();
        let mut v = Vec::new();
        for t in &st.all_tracers {
            let flags = st.tracer_flags[t.name()];
            for o in t.options() {
                v.push(TracerOption {
                    name: o.name,
                    tracer: t.name(),
                    value: flags & o.bit != 0,
                });
            }
        }
        v
    }
    fn set_tracer_option(&mut self, name: &str, on: bool) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        let (t, bit) = st
            .all_tracers
            .iter()
            .find_map(|t| {
                t.options()
                    .iter()
                    .find(|o| o.name == name)
                    .map(|o| (*t, o.bit))
            })
            .ok_or(Errno::EINVAL)?;
        let flags = st.tracer_flags[t.name()];
        t.set_flag(flags, bit, on)?;
        let new = if on { flags | bit } else { flags & !bit };
        st.tracer_flags.insert(t.name(), new);
        Ok(())
    }
    fn set_param(&mut self, param: Param<'_>) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        match param {
            Param::TracingOn(on) => {
                st.recording = on;
                st.bufs.iter().for_each(|b| b.set_record_on(on));
            }
            Param::Flags(f) => st.trace_flags = f.bits(),
            Param::Clock(_) => st.bufs.iter_mut().for_each(CpuBuffer::reset),
            _ => {}
        }
        st.params.push(format!("{param:?}"));
        Ok(())
    }
    fn resize(&mut self, cpu: Option<u32>, bytes: u64) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        if bytes > MEM_LIMIT {
            return Err(Errno::ENOMEM);
        }
        let pages = st.pages_for(bytes);
        let cpus: Vec<usize> = match cpu {
            Some(c) => vec![c as usize],
            None => (0..st.bufs.len()).collect(),
        };
        for c in cpus {
            st.bufs[c].resize(pages).map_err(|e| e.errno())?;
        }
        Ok(())
    }
    fn buffer_bytes(&self, cpu: u32) -> u64 {
        let st = self.st.borrow();
        let b = &st.bufs[cpu as usize];
        (b.nr_pages() * b.subbuf_size()) as u64
    }
    fn subbuf_size(&self) -> u32 {
        self.st.borrow().subbuf
    }
    fn set_subbuf_size(&mut self, bytes: u32) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        let old: Vec<u64> = st
            .bufs
            .iter()
            .map(|b| (b.nr_pages() * b.subbuf_size()) as u64)
            .collect();
        let old_subbuf = st.subbuf;
        st.subbuf = bytes;
        let mut new = Vec::new();
        for b in old {
            match st.new_buffer(b) {
                Ok(buf) => new.push(buf),
                Err(e) => {
                    st.subbuf = old_subbuf;
                    return Err(e);
                }
            }
        }
        st.bufs = new;
        Ok(())
    }
    fn clear(&mut self, cpu: Option<u32>) {
        let mut st = self.st.borrow_mut();
        for (i, b) in st.bufs.iter_mut().enumerate() {
            if cpu.is_none_or(|c| c as usize == i) {
                b.reset();
            }
        }
    }
    fn write_stats(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        let st = self.st.borrow();
        let mut s = String::new();
        st.bufs[cpu as usize]
            .stats(st.stats_now_ns)
            .write_to(&mut s, ClockUnit::Nanoseconds)?;
        w.write_str(&s)
    }
    fn open_trace(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        let text = self.st.borrow().trace_text(&self.syms, cpu);
        Box::new(SnapshotReader {
            chunks: vec![text].into_iter(),
        })
    }
    fn open_pipe(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        Box::new(PipeReader {
            st: self.st.clone(),
            syms: self.syms.clone(),
            cpu,
        })
    }
    fn open_pipe_raw(&mut self, cpu: u32) -> Box<dyn Reader> {
        Box::new(RawReader {
            st: self.st.clone(),
            cpu: cpu as usize,
        })
    }
    fn write_marker(&mut self, text: &[u8]) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        if !st.recording {
            // The ring buffer refuses the entry: Linux answers EBADF.
            return Err(Errno::EBADF);
        }
        trace_marker_write(text, MARK_WRITE_IP, st.options(), &st.writer, &st.sink())?;
        st.writer.ts += 1000;
        Ok(())
    }
    fn write_marker_raw(&mut self, id: u32, data: &[u8]) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        if !st.recording {
            return Err(Errno::EBADF);
        }
        let mut all = id.to_ne_bytes().to_vec();
        all.extend_from_slice(data);
        trace_marker_raw_write(&all, st.options(), &st.writer, &st.sink())?;
        st.writer.ts += 1000;
        Ok(())
    }
    fn open_filter(
        &mut self,
        which: FilterFile,
        mode: ftrace_tracefs::WriteMode,
    ) -> Result<Box<dyn FilterEdit>, Errno> {
        Ok(FilterWriter::open(self.st.clone(), which, mode))
    }
    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        self.st.borrow().filters.write_filter(which, w)
    }
    fn write_saved_cmdlines(&self, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }
    fn write_saved_tgids(&self, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }
    fn set_event_state(
        &mut self,
        event: &TraceEventFormat,
        state: EventState,
    ) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        if st.refuse_events {
            return Err(Errno::ENODEV);
        }
        st.event_states.insert(event.id, state);
        if !st.event_formats.contains(event) {
            st.event_formats.push(*event);
        }
        Ok(())
    }
    fn set_event_filter(&mut self, event: &TraceEventFormat, filter: Option<&EventFilter>) {
        self.st
            .borrow_mut()
            .event_filters
            .insert(event.id, filter.map(|f| f.text().to_owned()));
    }
    fn set_event_triggers(
        &mut self,
        event: &TraceEventFormat,
        triggers: &[Trigger],
    ) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        st.event_triggers
            .insert(event.id, triggers.iter().map(|t| t.to_string()).collect());
        st.trigger_runners
            .insert(event.id, Rc::new(TriggerRunner::new(event, triggers)));
        Ok(())
    }
    fn probe_event_targets(&self) -> Vec<(String, String)> {
        let st = self.st.borrow();
        st.filters
            .probes()
            .entries()
            .filter_map(|p| p.event)
            .map(|(sys, name)| (sys.to_string(), name.to_string()))
            .collect()
    }
    fn event_trigger_counts(&self, event: &TraceEventFormat) -> Option<Vec<i64>> {
        Some(self.st.borrow().trigger_runners.get(&event.id)?.counts())
    }
    /// The soft-disabled bit as the triggers left it.
    fn event_soft_disabled(&self, event: &TraceEventFormat) -> Option<bool> {
        Some(self.st.borrow().event_states.get(&event.id)?.soft_disabled)
    }
    /// The ring buffers' record switch is the truth (a trigger may turn it off).
    fn tracing_on(&self) -> Option<bool> {
        Some(self.st.borrow().recording)
    }
}

/// The model's filter language: its symbols, and the sched events as the targets of the
/// `enable_event` / `disable_event` function commands.
struct ModelCommands(std::sync::Arc<dyn SymbolTable + Send + Sync>);

impl ftrace_tracefs::filter_edit::CommandEnv for ModelCommands {
    fn symbols(&self) -> &dyn SymbolTable {
        &*self.0
    }
    fn event_exists(&self, system: &str, event: &str) -> bool {
        ftrace_core::format::sched::SCHED_EVENTS
            .iter()
            .any(|e| e.system == system && e.name == event)
    }
}

/// The model's side of the event triggers: the ring buffers' record switch and the events'
/// soft-disabled bits.
struct ModelActions<'a>(std::cell::RefCell<&'a mut State>);

impl TriggerActions for ModelActions<'_> {
    fn tracing_is_on(&self) -> bool {
        self.0.borrow().recording
    }
    fn set_tracing_on(&self, on: bool) {
        let mut st = self.0.borrow_mut();
        st.recording = on;
        st.bufs.iter().for_each(|b| b.set_record_on(on));
    }
    fn event_soft_disabled(&self, id: u16) -> Option<bool> {
        self.0
            .borrow()
            .event_states
            .get(&id)
            .map(|s| s.soft_disabled)
    }
    fn set_event_soft_disabled(&self, id: u16, disabled: bool) {
        if let Some(s) = self.0.borrow_mut().event_states.get_mut(&id) {
            s.soft_disabled = disabled;
        }
    }
}

/// `cat path` as text.
pub fn cat(fs: &mut Tracefs<ModelHost>, path: &str) -> Result<String, Errno> {
    fs.read_to_end(path)
        .map(|b| String::from_utf8(b).expect("utf8"))
}

/// `echo data > path` (the shell adds the newline).
pub fn echo(fs: &mut Tracefs<ModelHost>, data: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{data}\n").as_bytes(), WriteMode::Truncate)
}

/// `echo data >> path`.
pub fn echo_append(fs: &mut Tracefs<ModelHost>, data: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{data}\n").as_bytes(), WriteMode::Append)
}
