//! A model backend for the tree's tests.
//!
//! It stands in for ftrace-tracers and the dispatcher until they land on main. The buffers are
//! real ftrace-ringbuf `CpuBuffer`s (sizes, resize, stats text); the rest is modelled: ENOMEM
//! above a memory limit, tracer registry and options (nop refuses
//! `test_nop_refuse` like the kernel's nop tracer), events in per-CPU queues consumed by pipes,
//! and a filter that accepts full names and `*` globs over the reference kallsyms subset.
//! Its text (trace lines, filter read-back) is its own and is never compared with a golden.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc as Rc, Mutex, MutexGuard};

use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_ringbuf::CpuBuffer;
use ftrace_ringbuf::{At, HeapPages};
use ftrace_tracefs::{
    Errno, FilterEdit, FilterFile, FunctionRecords, Host, Param, Reader, TraceBackend, Tracefs,
    TracerOption, ring_buffer_pages,
};

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

const TRACER_OPTS: &[(&str, &str, bool)] = &[
    ("nop", "test_nop_accept", false),
    ("nop", "test_nop_refuse", false),
    ("function", "func_stack_trace", false),
    ("function", "func-no-repeats", false),
    ("function_graph", "funcgraph-overrun", false),
    ("function_graph", "funcgraph-cpu", true),
    ("function_graph", "funcgraph-overhead", true),
    ("function_graph", "funcgraph-proc", false),
    ("function_graph", "funcgraph-duration", true),
    ("function_graph", "funcgraph-abstime", false),
    ("function_graph", "funcgraph-irqs", true),
    ("function_graph", "funcgraph-tail", false),
    ("function_graph", "sleep-time", true),
];

#[derive(Clone, Debug)]
pub struct Event {
    pub cpu: u32,
    pub ts: u64,
    pub text: String,
}

pub struct State {
    pub name: Option<String>,
    pub cpus: u32,
    pub tracer: &'static str,
    pub opts: Vec<TracerOption>,
    pub recording: bool,
    pub bufs: Vec<CpuBuffer<HeapPages>>,
    pub subbuf: u32,
    /// The clock reading `per_cpu/cpuN/stats` prints as `now ts`.
    pub stats_now_ns: u64,
    pub events: Vec<Event>,
    pub written: u64,
    pub filters: BTreeMap<u8, BTreeSet<String>>,
    pub params: Vec<String>,
    pub clock_ns: u64,
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
    pub fn record(&mut self, cpu: u32, text: &str) {
        self.clock_ns += 1000;
        if self.recording {
            self.written += 1;
            self.events.push(Event {
                cpu,
                ts: self.clock_ns,
                text: text.to_owned(),
            });
        }
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
    pub functions: Option<ModelFunctions>,
}

/// Call-site records: one per function of the kallsyms subset (the model's own text).
pub struct ModelFunctions {
    syms: Rc<SortedSymbols>,
}

impl FunctionRecords for ModelFunctions {
    fn write_available(&self, w: &mut dyn fmt::Write, addrs: bool) -> fmt::Result {
        let mut r = Ok(());
        self.syms.for_each(&mut |s| {
            r = r.and_then(|()| {
                if addrs {
                    writeln!(w, "{:x} {}", s.addr, s.name)
                } else {
                    writeln!(w, "{}", s.name)
                }
            });
        });
        r
    }
    fn write_enabled(&self, _w: &mut dyn fmt::Write, _touched: bool) -> fmt::Result {
        Ok(())
    }
    fn write_total_info(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        writeln!(w, "{} pages:1 groups: 1", self.syms.len())
    }
}

impl ModelHost {
    pub fn new(cpus: u32) -> Self {
        let text = golden("11-kallsyms/kallsyms_subset.txt");
        let syms = SortedSymbols::from_kallsyms(&text).expect("kallsyms parses");
        let syms = Rc::new(syms);
        let functions = Some(ModelFunctions { syms: syms.clone() });
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
        let mut st = State {
            name: instance.map(str::to_owned),
            cpus: self.cpus,
            tracer: "nop",
            opts: TRACER_OPTS
                .iter()
                .map(|&(tracer, name, value)| TracerOption {
                    name,
                    tracer,
                    value,
                })
                .collect(),
            recording: true,
            bufs: Vec::new(),
            subbuf: 4096,
            stats_now_ns: 0,
            events: Vec::new(),
            written: 0,
            filters: BTreeMap::new(),
            params: Vec::new(),
            clock_ns: 0,
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
        self.functions.as_ref().map(|f| f as &dyn FunctionRecords)
    }
}

pub struct ModelBackend {
    pub st: Shared,
    syms: Rc<SortedSymbols>,
}

struct SnapshotReader {
    chunks: std::vec::IntoIter<String>,
}

impl Reader for SnapshotReader {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        match self.chunks.next() {
            Some(c) => {
                out.extend_from_slice(c.as_bytes());
                true
            }
            None => false,
        }
    }
}

struct PipeReader {
    st: Shared,
    cpu: Option<u32>,
}

impl Reader for PipeReader {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let mut st = self.st.borrow_mut();
        let Some(pos) = st
            .events
            .iter()
            .position(|e| self.cpu.is_none_or(|c| c == e.cpu))
        else {
            return false;
        };
        let e = st.events.remove(pos);
        out.extend_from_slice(line(&e).as_bytes());
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

pub fn line(e: &Event) -> String {
    format!(
        "[{:03}] {}.{:06}: {}\n",
        e.cpu,
        e.ts / 1_000_000_000,
        e.ts / 1000 % 1_000_000,
        e.text
    )
}

fn slot(which: FilterFile) -> u8 {
    match which {
        FilterFile::Filter => 0,
        FilterFile::Notrace => 1,
        FilterFile::GraphFunction => 2,
        FilterFile::GraphNotrace => 3,
    }
}

struct ModelFilter {
    st: Shared,
    syms: Rc<SortedSymbols>,
    which: FilterFile,
    pending: BTreeSet<String>,
}

fn glob(pat: &str, name: &str) -> bool {
    match (pat.strip_prefix('*'), pat.strip_suffix('*')) {
        (Some(p), _) if p.ends_with('*') => name.contains(&p[..p.len() - 1]),
        (Some(p), _) => name.ends_with(p),
        (None, Some(p)) => name.starts_with(p),
        _ => name == pat,
    }
}

impl FilterEdit for ModelFilter {
    fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        let text = std::str::from_utf8(data).map_err(|_| Errno::EINVAL)?;
        let mut next = self.pending.clone();
        for tok in text.split_whitespace() {
            let (neg, tok) = match tok.strip_prefix('!') {
                Some(t) => (true, t),
                None => (false, tok),
            };
            if tok.contains(':') {
                return Err(Errno::EINVAL);
            }
            let mut matched = Vec::new();
            self.syms.for_each(&mut |s| {
                if glob(tok, s.name) {
                    matched.push(s.name.to_owned());
                }
            });
            if matched.is_empty() {
                return Err(Errno::EINVAL);
            }
            for m in matched {
                if neg {
                    next.remove(&m);
                } else {
                    next.insert(m);
                }
            }
        }
        self.pending = next;
        Ok(data.len())
    }
    fn release(self: Box<Self>) -> Result<(), Errno> {
        self.st
            .borrow_mut()
            .filters
            .insert(slot(self.which), self.pending);
        Ok(())
    }
}

impl TraceBackend for ModelBackend {
    fn tracers(&self) -> Vec<&'static str> {
        vec!["function_graph", "function", "nop"]
    }
    fn current_tracer(&self) -> &'static str {
        self.st.borrow().tracer
    }
    fn set_tracer(&mut self, name: &str) -> Result<(), Errno> {
        let t = self
            .tracers()
            .into_iter()
            .find(|t| *t == name)
            .ok_or(Errno::EINVAL)?;
        self.st.borrow_mut().tracer = t;
        Ok(())
    }
    fn tracer_options(&self) -> Vec<TracerOption> {
        self.st.borrow().opts.clone()
    }
    fn set_tracer_option(&mut self, name: &str, on: bool) -> Result<(), Errno> {
        if name == "test_nop_refuse" {
            return Err(Errno::EINVAL);
        }
        let mut st = self.st.borrow_mut();
        let o = st
            .opts
            .iter_mut()
            .find(|o| o.name == name)
            .ok_or(Errno::EINVAL)?;
        o.value = on;
        Ok(())
    }
    fn set_param(&mut self, param: Param<'_>) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        match param {
            Param::TracingOn(on) => st.recording = on,
            Param::Clock(_) => st.events.clear(),
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
        st.events.clear();
        Ok(())
    }
    fn clear(&mut self, cpu: Option<u32>) {
        let mut st = self.st.borrow_mut();
        st.events.retain(|e| cpu.is_some_and(|c| c != e.cpu));
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
            .write_to(&mut s, true)?;
        w.write_str(&s)
    }
    fn open_trace(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        let st = self.st.borrow();
        let mut chunks = vec![format!("# tracer: {}\n", st.tracer)];
        chunks.extend(
            st.events
                .iter()
                .filter(|e| cpu.is_none_or(|c| c == e.cpu))
                .map(line),
        );
        Box::new(SnapshotReader {
            chunks: chunks.into_iter(),
        })
    }
    fn open_pipe(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        Box::new(PipeReader {
            st: self.st.clone(),
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
            return Err(Errno::EBADF);
        }
        let ts = st.clock_ns + 1000;
        st.bufs[0].write(text, &At(ts));
        let t = String::from_utf8_lossy(text);
        let t = t.strip_suffix('\n').unwrap_or(&t).to_owned();
        st.record(0, &format!("tracing_mark_write: {t}"));
        Ok(())
    }
    fn write_marker_raw(&mut self, id: u32, data: &[u8]) -> Result<(), Errno> {
        let mut st = self.st.borrow_mut();
        if !st.recording {
            return Err(Errno::EBADF);
        }
        st.record(0, &format!("# {id} buf: {data:02x?}"));
        Ok(())
    }
    fn open_filter(
        &mut self,
        which: FilterFile,
        truncate: bool,
    ) -> Result<Box<dyn FilterEdit>, Errno> {
        let pending = if truncate {
            BTreeSet::new()
        } else {
            self.st
                .borrow()
                .filters
                .get(&slot(which))
                .cloned()
                .unwrap_or_default()
        };
        Ok(Box::new(ModelFilter {
            st: self.st.clone(),
            syms: self.syms.clone(),
            which,
            pending,
        }))
    }
    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        let st = self.st.borrow();
        match st.filters.get(&slot(which)) {
            Some(set) if !set.is_empty() => set.iter().try_for_each(|n| writeln!(w, "{n}")),
            _ => match which {
                FilterFile::Filter | FilterFile::GraphFunction => {
                    w.write_str("#### all functions enabled ####\n")
                }
                _ => w.write_str("#### no functions disabled ####\n"),
            },
        }
    }
    fn write_saved_cmdlines(&self, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }
    fn write_saved_tgids(&self, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }
}

/// `cat path` as text.
pub fn cat(fs: &mut Tracefs<ModelHost>, path: &str) -> Result<String, Errno> {
    fs.read_to_end(path)
        .map(|b| String::from_utf8(b).expect("utf8"))
}

/// `echo data > path` (the shell adds the newline).
pub fn echo(fs: &mut Tracefs<ModelHost>, data: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{data}\n").as_bytes(), false)
}

/// `echo data >> path`.
pub fn echo_append(fs: &mut Tracefs<ModelHost>, data: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{data}\n").as_bytes(), true)
}
