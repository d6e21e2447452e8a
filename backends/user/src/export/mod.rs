//! Exporters: a capture (the tracefs-like directory `ftrace report` reads, see
//! [`crate::report`]) or a recording written in other tools' formats.
//!
//! - [`tracedat`]: trace-cmd's `trace.dat` (version 6 or 7), read by `trace-cmd report` and
//!   KernelShark; the raw pages go in as they are, the trace events' formats beside ftrace's;
//! - [`uftrace`]: a `uftrace.data` directory, read by `uftrace replay`/`report`/`dump`;
//! - [`chrome`]: Chrome trace-event JSON, loaded by Perfetto UI and `chrome://tracing`.
//!
//! Inputs: a kernel's raw pages as `ftrace report --raw-dir` takes them; a recording of
//! `ftrace record` turned into pages (the flight recorder, `record --mount`); and a streamed
//! recording, read where it is as `ftrace report` reads it ([`RecordingReader`]: nothing is
//! written into it). A recording's `<pid>.<n>/` directories also tell which process each
//! thread belongs to. Program trace events (`ftrace/tracepoint.h`) come with their formats
//! (a capture's `events/<system>/<name>/format` files, [`crate::capture_formats`]; a streamed
//! recording's listings).
//!
//! Reading streams ([`Capture::for_each_event`], [`Capture::write_cpu_pages`]): memory holds a
//! page per CPU or a buffered cursor per thread file, and what the format keeps per thread
//! (open calls), never the events; the output is written beside its place and renamed there
//! when complete, so a damaged input (an error naming the file and byte offset) leaves none.
//!
//! Invariant: an exporter never invents events: every event it writes is one decoded from the
//! capture (with the capture's own event ids mapped by name), in timestamp order.

pub mod chrome;
pub mod tracedat;
pub mod uftrace;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

use ftrace_core::EventId;
use ftrace_core::entry::{FtraceEntry, FtraceGraphEntEntry, Pod, TraceEntry};
use ftrace_core::format::TraceEventFormat;
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_ringbuf::page::{DEFAULT_PAGE_SIZE, Page};
use ftrace_tracers::Missed;

use crate::capture::CaptureText;
use crate::recording::{Census, MAX_CPUS, RecordingReader};

/// An export failure, with the file it is about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExportError(pub String);

impl std::fmt::Display for ExportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ExportError {}

fn io_err(path: &Path, e: impl std::fmt::Display) -> ExportError {
    ExportError(format!("{}: {e}", path.display()))
}

fn read_opt(path: &Path) -> Result<Option<Vec<u8>>, ExportError> {
    match std::fs::read(path) {
        Ok(b) => Ok(Some(b)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, e)),
    }
}

/// One `events/ftrace/<name>/format` file of the capture (or of ftrace-core when the capture
/// has none for that event).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FormatFile {
    /// The event name.
    pub name: String,
    /// The id the capture's pages use for it.
    pub id: u16,
    /// The file's text.
    pub text: String,
}

/// A capture opened for export: the files trace-cmd embeds, read whole (their size is the
/// symbols' and tasks', not the events'), and where the events are, read as they are needed
/// ([`Capture::for_each_event`], [`Capture::write_cpu_pages`]).
#[derive(Debug)]
pub struct Capture {
    /// Where it was read from.
    pub dir: PathBuf,
    /// Sub-buffer page size (from `events/header_page`, else 4096).
    pub page_size: usize,
    /// `events/header_page` text.
    pub header_page: String,
    /// `events/header_event` text.
    pub header_event: String,
    /// The ftrace event formats: the capture's own, plus ftrace-core's for `function`,
    /// `funcgraph_entry`, `funcgraph_exit` and `print` when the capture has none of that name.
    pub formats: Vec<FormatFile>,
    /// The trace events of other systems the records may be (a program's, declared with
    /// `ftrace/tracepoint.h`; a kernel capture's `events/<system>/`), with the ids the
    /// records carry.
    pub event_formats: Vec<TraceEventFormat>,
    /// `kallsyms` text.
    pub kallsyms: String,
    /// `saved_cmdlines` text.
    pub cmdlines: String,
    /// `trace_clock` listing (`[local] global ...`).
    pub trace_clock: String,
    /// The tracer that recorded it.
    pub tracer: String,
    /// CPUs: a capture's one more than its highest `per_cpu/cpu<N>`, a recording's the
    /// machine's (its `meta`); [`Capture::cpu_count`] also covers every CPU with events.
    pub nr_cpus: u32,
    /// Thread id to process id, from a recording's `<pid>.<n>/` directories (empty for a
    /// kernel capture: threads then count as their own process).
    pub tgids: HashMap<i32, i32>,
    /// Process id to executable path, from a recording's `meta` files.
    pub exes: HashMap<i32, String>,
    /// For a recording with the `x86-tsc` clock: the TSC to CLOCK_MONOTONIC conversion its
    /// agents' start and exit readings calibrate (what [`Capture::ns`] applies).
    pub tsc: Option<ftrace_agent::clock::TscConversion>,
    events: Events,
    /// Record id to what it is.
    kinds: HashMap<u16, Kind>,
}

/// Where a capture's events are.
enum Events {
    /// A capture's raw pages, `per_cpu/cpu<N>/trace_pipe_raw` (CPUs without a directory
    /// have none).
    Pages { cpus: Vec<u32> },
    /// A recording not turned into pages: its thread files, read where they are (nothing is
    /// written into it).
    Recording {
        reader: Box<RecordingReader>,
        /// Which CPUs each thread file has events on: taken once, when a CPU's pages are
        /// first asked for.
        census: Option<Census>,
    },
}

impl std::fmt::Debug for Events {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Events::Pages { cpus } => write!(f, "Pages({cpus:?})"),
            Events::Recording { .. } => f.write_str("Recording"),
        }
    }
}

/// What a record's id names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// One of ftrace's own events.
    Ftrace(EventId),
    /// [`Capture::event_formats`]`[n]`.
    Event(usize),
}

/// The largest sub-buffer page a capture may say it has (a page is read into one buffer).
const MAX_PAGE_SIZE: usize = 1 << 20;

fn parse_format(text: &str) -> Option<(String, u16)> {
    let name = text.lines().find_map(|l| l.strip_prefix("name: "))?;
    let id = text
        .lines()
        .find_map(|l| l.strip_prefix("ID: "))?
        .trim()
        .parse()
        .ok()?;
    Some((name.trim().to_string(), id))
}

/// An error about `path`, at byte `offset` of it (as `ftrace report` words it).
fn at_err(path: &Path, offset: u64, e: impl std::fmt::Display) -> ExportError {
    ExportError(format!(
        "{}: offset {offset} ({offset:#x}): {e}",
        path.display()
    ))
}

impl Capture {
    /// Opens the capture or recording in `dir`: its text files are read, its events are not.
    pub fn read(dir: &Path) -> Result<Self, ExportError> {
        if !dir.is_dir() {
            return Err(io_err(dir, "not a directory (the capture to export)"));
        }
        if !dir.join("per_cpu").is_dir() && crate::record::is_recording(dir) {
            return Self::read_recording(dir);
        }
        let text = |rel: &str| -> Result<Option<String>, ExportError> {
            Ok(read_opt(&dir.join(rel))?.map(|b| String::from_utf8_lossy(&b).into_owned()))
        };
        let header_page = match text("events/header_page")? {
            Some(t) => t,
            None => default_header_page(),
        };
        let page_size = page_size_from_header(&header_page)
            .filter(|n| (ftrace_ringbuf::page::PAGE_HEADER_SIZE + 8..=MAX_PAGE_SIZE).contains(n))
            .ok_or_else(|| {
                io_err(
                    &dir.join("events/header_page"),
                    format!("no \"data\" field giving a page size up to {MAX_PAGE_SIZE}"),
                )
            })?;
        let header_event = match text("events/header_event")? {
            Some(t) => t,
            None => default_header_event(),
        };
        let mut formats = Vec::new();
        if let Ok(rd) = std::fs::read_dir(dir.join("events/ftrace")) {
            let mut paths: Vec<PathBuf> = rd.flatten().map(|e| e.path().join("format")).collect();
            paths.sort();
            for p in paths {
                let Some(b) = read_opt(&p)? else { continue };
                let t = String::from_utf8_lossy(&b).into_owned();
                let (name, id) =
                    parse_format(&t).ok_or_else(|| io_err(&p, "no \"name:\"/\"ID:\" lines"))?;
                formats.push(FormatFile { name, id, text: t });
            }
        }
        let event_formats = crate::capture_formats::read(dir).map_err(ExportError)?;
        let kallsyms = text("kallsyms")?.ok_or_else(|| io_err(&dir.join("kallsyms"), "missing"))?;
        let cmdlines = text("saved_cmdlines")?.unwrap_or_default();
        let trace_clock = match text("trace_clock")? {
            Some(t) if t.contains('[') => t,
            Some(t) => format!("[{}]\n", t.trim()),
            None => "[local]\n".into(),
        };
        let tracer = text("tracer")?.map_or_else(|| "function".into(), |t| t.trim().to_string());
        let cpus = capture_cpus(dir, page_size)?;
        let nr_cpus = cpus.last().map_or(0, |&c| c + 1);
        let (tgids, exes) = recording_tasks(dir);
        let tsc = if trace_clock.contains("[x86-tsc]") {
            recording_tsc(dir)
        } else {
            None
        };
        Ok(Capture::assemble(Capture {
            dir: dir.to_path_buf(),
            page_size,
            header_page,
            header_event,
            formats,
            event_formats,
            kallsyms,
            cmdlines,
            trace_clock,
            tracer,
            nr_cpus,
            tgids,
            exes,
            tsc,
            events: Events::Pages { cpus },
            kinds: HashMap::new(),
        }))
    }

    /// A recording not turned into pages, read where it is ([`RecordingReader`]): its text
    /// files made as `ftrace report` makes them ([`CaptureText`]).
    fn read_recording(dir: &Path) -> Result<Self, ExportError> {
        let reader = RecordingReader::open(dir).map_err(|e| ExportError(e.to_string()))?;
        if let Some(e) = reader.damaged.first() {
            return Err(ExportError(e.to_string()));
        }
        let text = CaptureText::of(&reader.rec);
        let trace_clock = text.trace_clock;
        let tsc = if trace_clock.contains("[x86-tsc]") {
            recording_tsc(dir)
        } else {
            None
        };
        let (tgids, exes) = recording_tasks(dir);
        Ok(Capture::assemble(Capture {
            dir: dir.to_path_buf(),
            page_size: DEFAULT_PAGE_SIZE,
            header_page: default_header_page(),
            header_event: default_header_event(),
            formats: Vec::new(),
            event_formats: reader.event_formats(),
            kallsyms: text.kallsyms,
            cmdlines: text.saved_cmdlines,
            trace_clock,
            tracer: text.tracer.trim().to_string(),
            nr_cpus: reader.rec.nr_cpus,
            tgids,
            exes,
            tsc,
            events: Events::Recording {
                reader: Box::new(reader),
                census: None,
            },
            kinds: HashMap::new(),
        }))
    }

    /// Adds ftrace-core's formats the capture lacks (every internal event's, as the kernel's
    /// `events/ftrace` holds them: a capture of the live mount may hold any record its
    /// options make, a `trace_marker_raw` write's `raw_data` as a stack trace's
    /// `kernel_stack`), and maps every record id to its kind.
    fn assemble(mut cap: Capture) -> Capture {
        for f in ftrace_core::format::FORMATS {
            let id = f.id;
            if !cap.formats.iter().any(|x| x.name == f.name) {
                let mut t = String::new();
                let _ = f.write_to(&mut t);
                cap.formats.push(FormatFile {
                    name: f.name.to_string(),
                    id: id.as_u16(),
                    text: t,
                });
            }
        }
        let mut kinds: HashMap<u16, Kind> = cap
            .formats
            .iter()
            .filter_map(|f| {
                Some((
                    f.id,
                    Kind::Ftrace(ftrace_core::format::by_name(&f.name)?.id),
                ))
            })
            .collect();
        for (n, f) in cap.event_formats.iter().enumerate() {
            kinds.entry(f.id).or_insert(Kind::Event(n));
        }
        cap.kinds = kinds;
        cap
    }

    /// The selected clock's name (`local`, `x86-tsc`...).
    pub fn clock_name(&self) -> &str {
        let t = self.trace_clock.as_str();
        match (t.find('['), t.find(']')) {
            (Some(a), Some(b)) if a < b => &t[a + 1..b],
            _ => t.trim(),
        }
    }

    /// Whether timestamps are nanoseconds (the clock is not a raw counter).
    pub fn time_in_ns(&self) -> bool {
        !matches!(self.clock_name(), "counter" | "x86-tsc")
    }

    /// A timestamp in nanoseconds: itself for a nanosecond clock, converted for an `x86-tsc`
    /// recording, itself (cycles) when no calibration is known.
    pub fn ns(&self, ts: u64) -> u64 {
        match self.tsc {
            Some(c) => c.to_ns(ts),
            None => ts,
        }
    }

    /// The process a thread belongs to (itself when the capture does not say).
    pub fn tgid(&self, tid: i32) -> i32 {
        self.tgids.get(&tid).copied().unwrap_or(tid)
    }

    /// The saved command names by pid.
    pub fn comms(&self) -> HashMap<i32, String> {
        self.cmdlines
            .lines()
            .filter_map(|l| {
                let (p, c) = l.split_once(' ')?;
                Some((p.trim().parse().ok()?, c.to_string()))
            })
            .collect()
    }

    /// The capture's symbols (names with spaces stay whole: they run to the tab before
    /// `[module]`).
    pub fn symbols(&self) -> Result<SortedSymbols, ExportError> {
        SortedSymbols::from_kallsyms(&self.kallsyms)
            .map_err(|e| io_err(&self.dir.join("kallsyms"), e))
    }

    /// The record `data` (common header first) at `ts` on `cpu`, decoded; an id no format
    /// names is an error.
    fn decode(&self, cpu: u32, ts: u64, data: Vec<u8>, missed: Missed) -> Result<Ev, u16> {
        let raw = TraceEntry::read_from(&data).ok_or(0u16)?;
        let (id, what) = match self.kinds.get(&raw.type_) {
            Some(&Kind::Ftrace(id)) => (id.as_u16(), What::decode(id, &data)),
            Some(&Kind::Event(format)) => (raw.type_, What::Event { format, data }),
            None => return Err(raw.type_),
        };
        Ok(Ev {
            cpu,
            ts,
            pid: raw.pid,
            id,
            what,
            missed,
        })
    }

    /// Calls `f` with every event in timestamp order (CPU order on ties, then each CPU's
    /// order), read as it goes: memory holds a page per CPU (a capture) or a buffered cursor
    /// per thread file (a recording), not the events. Stops at the first error: a damaged
    /// page or thread file (named with the byte offset), an id no format names, or `f`'s.
    pub fn for_each_event(
        &mut self,
        f: &mut dyn FnMut(&Capture, Ev) -> Result<(), ExportError>,
    ) -> Result<(), ExportError> {
        let mut events = std::mem::replace(&mut self.events, Events::Pages { cpus: Vec::new() });
        let result = self.each_event_of(&mut events, f);
        self.events = events;
        result
    }

    fn each_event_of(
        &self,
        events: &mut Events,
        f: &mut dyn FnMut(&Capture, Ev) -> Result<(), ExportError>,
    ) -> Result<(), ExportError> {
        match events {
            Events::Pages { cpus } => {
                let mut cursors = Vec::with_capacity(cpus.len());
                let mut heap = BinaryHeap::with_capacity(cpus.len());
                for &cpu in cpus.iter() {
                    let mut c = PageCursor::open(self, cpu)?;
                    if let Some(ts) = c.peek_ts(self)? {
                        heap.push(Reverse((ts, cpu, cursors.len())));
                    }
                    cursors.push(c);
                }
                while let Some(Reverse((_, _, i))) = heap.pop() {
                    let c: &mut PageCursor = &mut cursors[i];
                    let ev = c
                        .queue
                        .pop_front()
                        .expect("a cursor in the heap has an event");
                    if let Some(ts) = c.peek_ts(self)? {
                        heap.push(Reverse((ts, c.cpu, i)));
                    }
                    f(self, ev)?;
                }
                Ok(())
            }
            Events::Recording { reader, .. } => {
                let dir = self.dir.clone();
                let mut stream = reader.stream().map_err(|e| ExportError(e.to_string()))?;
                while let Some(e) = stream.next().map_err(|e| ExportError(e.to_string()))? {
                    if e.cpu >= MAX_CPUS {
                        return Err(ExportError(format!(
                            "{}: tid {}: CPU {} out of range (the kernel's NR_CPUS is at most \
                             {MAX_CPUS})",
                            dir.display(),
                            e.tid,
                            e.cpu
                        )));
                    }
                    let tid = e.tid;
                    let ev = self
                        .decode(
                            e.cpu,
                            e.ts,
                            e.data,
                            match e.missed {
                                0 => Missed::None,
                                n => Missed::Count(n),
                            },
                        )
                        .map_err(|id| {
                            ExportError(format!(
                                "{}: tid {tid}: event id {id} has no format",
                                dir.display()
                            ))
                        })?;
                    f(self, ev)?;
                }
                Ok(())
            }
        }
    }

    /// The CPUs the pages cover: one more than the highest CPU number with a buffer (a
    /// capture) or with events (a recording, whose thread files are then read once to see
    /// which CPUs each has events on: a damaged one is an error).
    pub fn cpu_count(&mut self) -> Result<u32, ExportError> {
        let nr = self.nr_cpus;
        Ok(match &mut self.events {
            Events::Pages { .. } => nr,
            Events::Recording { reader, census } => {
                let c = take_census(reader, census)?;
                nr.max(c.cpus.len() as u32)
            }
        })
    }

    /// Writes CPU `cpu`'s events as the kernel's raw pages into `out` (a capture's
    /// `trace_pipe_raw` copied as it is, each page checked on the way: a damaged one is an
    /// error naming the file and offset; a recording's events turned into pages as they are
    /// read, [`crate::capture::write_cpu_pages`]); returns the bytes written. A recording
    /// damaged anywhere is an error before anything is written.
    pub fn write_cpu_pages(&mut self, cpu: u32, out: &mut dyn Write) -> Result<u64, ExportError> {
        match &mut self.events {
            Events::Pages { cpus } => {
                if !cpus.contains(&cpu) {
                    return Ok(0);
                }
                PageCursor::open(self, cpu)?.copy_checked(self, out)
            }
            Events::Recording { reader, census } => {
                let census = take_census(reader, census)?;
                if census.cpus.get(cpu as usize).is_none_or(|c| c.events == 0) {
                    return Ok(0);
                }
                let mut counted = CountingWriter { out, n: 0 };
                crate::capture::write_cpu_pages(reader, census, cpu, &mut counted)
                    .map_err(|e| ExportError(format!("{}: {e}", self.dir.display())))?;
                Ok(counted.n)
            }
        }
    }

    /// Every event, collected: [`Capture::for_each_event`] into a vector (memory grows with
    /// the capture: for tests and small captures).
    pub fn events(&mut self) -> Result<Vec<Ev>, ExportError> {
        let mut all = Vec::new();
        self.for_each_event(&mut |_, e| {
            all.push(e);
            Ok(())
        })?;
        Ok(all)
    }
}

/// The recording's census, taken the first time: a damaged thread file is an error.
fn take_census<'c>(
    reader: &RecordingReader,
    census: &'c mut Option<Census>,
) -> Result<&'c Census, ExportError> {
    if census.is_none() {
        let c = reader.census().map_err(|e| ExportError(e.to_string()))?;
        if let Some(e) = c.damaged.first() {
            return Err(ExportError(e.to_string()));
        }
        *census = Some(c);
    }
    Ok(census.as_ref().expect("taken above"))
}

/// A writer that counts what goes through it.
struct CountingWriter<'w> {
    out: &'w mut dyn Write,
    n: u64,
}

impl Write for CountingWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let k = self.out.write(buf)?;
        self.n += k as u64;
        Ok(k)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

fn default_header_page() -> String {
    let mut s = String::new();
    let _ = ftrace_core::format::write_header_page(&mut s, DEFAULT_PAGE_SIZE);
    s
}

fn default_header_event() -> String {
    let mut s = String::new();
    let _ = ftrace_core::format::write_header_event(&mut s);
    s
}

fn cpu_path(dir: &Path, cpu: u32) -> PathBuf {
    dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"))
}

/// The CPUs of a capture (`per_cpu/cpu<N>` directories), checked: numbers below
/// [`MAX_CPUS`], whole pages.
fn capture_cpus(dir: &Path, page_size: usize) -> Result<Vec<u32>, ExportError> {
    let cpus = crate::capture::capture_cpus(dir).map_err(|(path, e)| io_err(&path, e))?;
    for &cpu in &cpus {
        let p = cpu_path(dir, cpu);
        let len = std::fs::metadata(&p).map_err(|e| io_err(&p, e))?.len();
        let tail = len % page_size as u64;
        if tail != 0 {
            return Err(at_err(
                &p,
                len - tail,
                format!("truncated page: {tail} bytes where a {page_size}-byte page starts"),
            ));
        }
    }
    Ok(cpus)
}

/// One CPU's `trace_pipe_raw`, decoded a page at a time.
struct PageCursor {
    cpu: u32,
    path: PathBuf,
    input: std::io::BufReader<std::fs::File>,
    page: Vec<u8>,
    /// Offset of the next page in the file.
    base: u64,
    queue: VecDeque<Ev>,
}

impl PageCursor {
    fn open(cap: &Capture, cpu: u32) -> Result<Self, ExportError> {
        let path = cpu_path(&cap.dir, cpu);
        let f = std::fs::File::open(&path).map_err(|e| io_err(&path, e))?;
        Ok(PageCursor {
            cpu,
            input: std::io::BufReader::with_capacity(64 * 1024, f),
            page: vec![0; cap.page_size],
            base: 0,
            queue: VecDeque::new(),
            path,
        })
    }

    /// Reads the next page into `page`; returns its offset in the file (`None` at the end).
    fn read_page(&mut self) -> Result<Option<u64>, ExportError> {
        use std::io::Read;
        let mut n = 0;
        while n < self.page.len() {
            match self.input.read(&mut self.page[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(at_err(&self.path, self.base, e)),
            }
        }
        if n == 0 {
            return Ok(None);
        }
        if n < self.page.len() {
            return Err(at_err(
                &self.path,
                self.base,
                format!(
                    "truncated page: {n} bytes where a {}-byte page starts",
                    self.page.len()
                ),
            ));
        }
        let base = self.base;
        self.base += n as u64;
        Ok(Some(base))
    }

    /// Decodes the page read at `base` into the queue.
    fn decode_page(&mut self, cap: &Capture, base: u64) -> Result<(), ExportError> {
        let page = Page::new(&self.page).map_err(|e| at_err(&self.path, base, e))?;
        let mut missed = match (page.missed_events(), page.missed_count()) {
            (false, _) => Missed::None,
            (true, Some(n)) => Missed::Count(n),
            (true, None) => Missed::Unknown,
        };
        for ev in page.events() {
            let ev = ev.map_err(|e| at_err(&self.path, base, e))?;
            let at = base + ev.offset as u64;
            let e = cap
                .decode(self.cpu, ev.ts, ev.payload.to_vec(), missed)
                .map_err(|id| match id {
                    0 if ev.payload.len() < 8 => {
                        at_err(&self.path, at, "event shorter than its 8-byte header")
                    }
                    id => at_err(&self.path, at, format!("event id {id} has no format")),
                })?;
            missed = Missed::None;
            self.queue.push_back(e);
        }
        Ok(())
    }

    /// The timestamp of the next event, decoding pages until one has some; `None` at the end.
    fn peek_ts(&mut self, cap: &Capture) -> Result<Option<u64>, ExportError> {
        while self.queue.is_empty() {
            let Some(base) = self.read_page()? else {
                return Ok(None);
            };
            self.decode_page(cap, base)?;
        }
        Ok(self.queue.front().map(|e| e.ts))
    }

    /// Copies the pages into `out` as they are, each checked first (it decodes, its ids have
    /// formats); returns the bytes written.
    fn copy_checked(&mut self, cap: &Capture, out: &mut dyn Write) -> Result<u64, ExportError> {
        let mut n = 0;
        while let Some(base) = self.read_page()? {
            self.decode_page(cap, base)?;
            self.queue.clear();
            out.write_all(&self.page)
                .map_err(|e| ExportError(format!("writing: {e}")))?;
            n += self.page.len() as u64;
        }
        Ok(n)
    }
}

/// One decoded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ev {
    /// The CPU whose buffer held it.
    pub cpu: u32,
    /// Timestamp (trace-clock units).
    pub ts: u64,
    /// `common_pid` (the thread id).
    pub pid: i32,
    /// Its id: ftrace-core's for ftrace's own events, the capture's for the others
    /// ([`Capture::event_formats`]).
    pub id: u16,
    /// What the event says (decoded once: a capture may hold millions).
    pub what: What,
    /// Events lost on this CPU (a recording: in this thread) right before it, as the page
    /// (or the thread file) counts them.
    pub missed: Missed,
}

/// The records an export had no place for (uftrace.data has none for a text marker, Chrome
/// JSON none for a stack trace...), counted by event id: told to the user, never dropped
/// silently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeftOut(BTreeMap<u16, u64>);

impl LeftOut {
    /// Counts one record of event `id` left out.
    pub fn add(&mut self, id: u16) {
        *self.0.entry(id).or_default() += 1;
    }

    /// The line telling the user what `format` left out, if anything.
    pub fn told(&self, format: Format) -> Option<String> {
        if self.0.is_empty() {
            return None;
        }
        let total: u64 = self.0.values().sum();
        let each: Vec<String> = self
            .0
            .iter()
            .map(|(&id, n)| {
                // (The exports take every trace event: what they leave out is ftrace's own.)
                let name = EventId::from_u16(id)
                    .and_then(ftrace_core::format::by_id)
                    .map_or_else(|| format!("id {id}"), |f| f.name.to_string());
                format!("{name} {n}")
            })
            .collect();
        let what = match format {
            Format::TraceDat => "trace.dat",
            Format::Uftrace => "uftrace.data",
            Format::Chrome => "Chrome JSON",
        };
        Some(format!(
            "{what} has no place for {total} record{} of the capture, left out: {}",
            if total == 1 { "" } else { "s" },
            each.join(", ")
        ))
    }
}

/// What a function event says, by kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Call {
    /// `function`: a call of `func` from `parent` (no return recorded).
    Function {
        /// The called function.
        func: u64,
        /// The caller.
        parent: u64,
    },
    /// `funcgraph_entry`.
    Entry {
        /// The called function.
        func: u64,
        /// Nesting depth.
        depth: i32,
    },
    /// `funcgraph_exit`.
    Exit {
        /// The returning function.
        func: u64,
        /// Nesting depth.
        depth: i32,
        /// When it was called.
        calltime: u64,
        /// When it returned.
        rettime: u64,
    },
}

/// The content of an event the exporters use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum What {
    /// A function event.
    Call(Call),
    /// A `print` event (`trace_marker`): its text, without the trailing newline.
    Print(String),
    /// A trace event of another system: its format ([`Capture::event_formats`]`[format]`)
    /// and the record (common header first).
    Event {
        /// Index in [`Capture::event_formats`].
        format: usize,
        /// The record.
        data: Vec<u8>,
    },
    /// Any other event (or a truncated one).
    Other,
}

impl What {
    /// Decodes the payload (common header first) of an ftrace event of kind `id`.
    pub fn decode(id: EventId, payload: &[u8]) -> What {
        let call = match id {
            EventId::Function => FtraceEntry::read_from(payload).map(|e| Call::Function {
                func: e.ip,
                parent: e.parent_ip,
            }),
            EventId::FuncgraphEntry => {
                FtraceGraphEntEntry::read_from(payload).map(|e| Call::Entry {
                    func: e.func,
                    depth: e.depth,
                })
            }
            EventId::FuncgraphExit => {
                // Any exit layout: the format's 40 bytes, 56, or 64 with a return value.
                ftrace_tracers::event::read_graph_ret(payload).map(|e| Call::Exit {
                    func: e.func,
                    depth: e.depth,
                    calltime: e.calltime,
                    rettime: e.rettime,
                })
            }
            EventId::Print => {
                // `ip` (8 bytes) after the common header, then the NUL-terminated text.
                let text = payload.get(16..).unwrap_or_default();
                let end = text.iter().position(|&b| b == 0).unwrap_or(text.len());
                let msg = String::from_utf8_lossy(&text[..end]);
                return What::Print(msg.trim_end_matches('\n').to_string());
            }
            _ => None,
        };
        call.map_or(What::Other, What::Call)
    }
}

impl Ev {
    /// The function event this is, if it is one.
    pub fn call(&self) -> Option<Call> {
        match self.what {
            What::Call(c) => Some(c),
            _ => None,
        }
    }
}

/// The page size `events/header_page` describes (`data` offset + size).
pub(crate) fn page_size_from_header(text: &str) -> Option<usize> {
    let line = text.lines().find(|l| l.contains(" data;"))?;
    let num = |key: &str| -> Option<usize> {
        let at = line.find(key)? + key.len();
        line[at..].split(';').next()?.trim().parse().ok()
    };
    num("offset:")?.checked_add(num("size:")?)
}

/// A recording's `meta` file as `key=value` pairs (separated by any whitespace, as the
/// recording reader takes them).
pub(crate) fn meta_kv(text: &str) -> BTreeMap<&str, &str> {
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect()
}

/// The widest-spaced TSC calibration a recording's `meta` (start) and `meta.exit` (exit)
/// readings give.
fn recording_tsc(dir: &Path) -> Option<ftrace_agent::clock::TscConversion> {
    use ftrace_agent::clock::{TscConversion, TscPair};
    let pair = |text: &str| {
        let kv = meta_kv(text);
        Some(TscPair {
            tsc: kv.get("tsc")?.parse().ok()?,
            mono_ns: kv.get("mono_ns")?.parse().ok()?,
        })
    };
    let mut pairs = Vec::new();
    for sub in std::fs::read_dir(dir).ok()?.flatten().map(|e| e.path()) {
        for f in ["meta", "meta.exit"] {
            if let Some(p) = std::fs::read_to_string(sub.join(f))
                .ok()
                .and_then(|t| pair(&t))
            {
                pairs.push(p);
            }
        }
    }
    let first = *pairs.iter().min_by_key(|p| p.tsc)?;
    let last = *pairs.iter().max_by_key(|p| p.tsc)?;
    // Every event lies between the first start and the last exit, however close.
    TscConversion::over_run(first, last)
}

/// A recording's thread-to-process map and executables (`<pid>.<n>/meta` + `buf-<tid>` or
/// `events-<tid>`).
fn recording_tasks(dir: &Path) -> (HashMap<i32, i32>, HashMap<i32, String>) {
    let (mut tgids, mut exes) = (HashMap::new(), HashMap::new());
    let Ok(rd) = std::fs::read_dir(dir) else {
        return (tgids, exes);
    };
    for sub in rd.flatten().map(|e| e.path()) {
        let Ok(meta) = std::fs::read_to_string(sub.join("meta")) else {
            continue;
        };
        let kv = meta_kv(&meta);
        let Some(pid) = kv.get("pid").and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if let Some(exe) = kv.get("exe") {
            exes.insert(pid, exe.to_string());
        }
        for f in std::fs::read_dir(&sub).into_iter().flatten().flatten() {
            let name = f.file_name();
            if let Some(tid) = name
                .to_str()
                .and_then(|n| {
                    n.strip_prefix("buf-")
                        .or_else(|| n.strip_prefix(crate::stream::FILE_PREFIX))
                })
                .and_then(|t| t.split(['.', '-']).next()?.parse::<i32>().ok())
            {
                tgids.insert(tid, pid);
            }
        }
    }
    (tgids, exes)
}

/// The export formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// trace-cmd's `trace.dat` (version 6; 7 with `--file-version 7`).
    #[value(name = "trace.dat", alias = "tracedat", alias = "trace-cmd")]
    TraceDat,
    /// A `uftrace.data` directory.
    #[value(name = "uftrace")]
    Uftrace,
    /// Chrome trace-event JSON (Perfetto UI).
    #[value(name = "chrome", alias = "json", alias = "perfetto")]
    Chrome,
}

impl Format {
    /// The default output path.
    pub fn default_output(self) -> &'static str {
        match self {
            Format::TraceDat => "trace.dat",
            Format::Uftrace => "uftrace.data",
            Format::Chrome => "trace.json",
        }
    }
}

/// `ftrace export`'s arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ExportArgs {
    /// The format to write.
    #[arg(short = 'f', long = "format", value_name = "FORMAT")]
    pub format: Format,
    /// The capture or recording to export.
    #[arg(
        short = 'i',
        long = "raw-dir",
        value_name = "DIR",
        default_value = "ftrace.data"
    )]
    pub input: PathBuf,
    /// Where to write (default: `trace.dat`, `uftrace.data` or `trace.json`; `-` for standard
    /// output, not for uftrace).
    #[arg(short = 'o', long = "output", value_name = "PATH")]
    pub output: Option<PathBuf>,
    /// trace.dat: the file version (6, or 7: sections).
    #[arg(long = "file-version", value_name = "N", default_value_t = 6,
          value_parser = clap::value_parser!(u32).range(6..=7))]
    pub file_version: u32,
}

/// Exports the capture in `input` as `format` into `output` (`trace_dat_version`: 6 or 7).
/// The output appears whole or not at all: it is written beside its place and renamed there
/// once complete (a damaged capture leaves nothing behind). Returns the records `format` has
/// no place for, left out ([`LeftOut`]: `ftrace export` tells them).
pub fn export(
    input: &Path,
    format: Format,
    output: &Path,
    trace_dat_version: u32,
) -> Result<LeftOut, ExportError> {
    let mut cap = Capture::read(input)?;
    match format {
        Format::Uftrace => uftrace::write(&mut cap, output),
        f => {
            let tmp = partial_path(output);
            let result = (|| {
                let file = std::fs::File::create(&tmp).map_err(|e| io_err(&tmp, e))?;
                let mut w = std::io::BufWriter::with_capacity(256 * 1024, file);
                let left_out = write_single(&mut cap, f, trace_dat_version, &mut w)?;
                w.flush().map_err(|e| io_err(&tmp, e))?;
                std::fs::rename(&tmp, output).map_err(|e| io_err(output, e))?;
                Ok(left_out)
            })();
            if result.is_err() {
                let _ = std::fs::remove_file(&tmp);
            }
            result
        }
    }
}

/// Where an export to `output` is written until it is complete.
pub(crate) fn partial_path(output: &Path) -> PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".partial-{}", std::process::id()));
    output.with_file_name(name)
}

/// Writes a single-file export (`trace.dat` or Chrome JSON) into `out`.
fn write_single<W: Write + std::io::Seek>(
    cap: &mut Capture,
    format: Format,
    trace_dat_version: u32,
    out: &mut W,
) -> Result<LeftOut, ExportError> {
    match format {
        // trace.dat holds the pages as they are: every record.
        Format::TraceDat => {
            tracedat::write(cap, trace_dat_version, out).map(|()| LeftOut::default())
        }
        Format::Chrome => chrome::write(cap, out),
        Format::Uftrace => Err(ExportError(
            "uftrace.data is a directory: give -o DIR".into(),
        )),
    }
}

/// Exports to `out` (standard output): Chrome JSON as it is made; trace.dat, whose CPU table
/// is filled in after the pages, through a temporary file.
fn export_to_stream(args: &ExportArgs, out: &mut dyn Write) -> Result<LeftOut, ExportError> {
    let werr = |e: std::io::Error| ExportError(format!("writing: {e}"));
    let mut cap = Capture::read(&args.input)?;
    match args.format {
        Format::Chrome => {
            let mut w = std::io::BufWriter::with_capacity(256 * 1024, out);
            let left_out = chrome::write(&mut cap, &mut w)?;
            w.flush().map_err(werr)?;
            Ok(left_out)
        }
        Format::TraceDat => {
            let tmp =
                std::env::temp_dir().join(format!("ftrace-export-{}.dat", std::process::id()));
            let result = (|| {
                let mut file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&tmp)
                    .map_err(|e| io_err(&tmp, e))?;
                // Gone from the directory at once: only this file handle holds it.
                let _ = std::fs::remove_file(&tmp);
                {
                    let mut w = std::io::BufWriter::with_capacity(256 * 1024, &mut file);
                    tracedat::write(&mut cap, args.file_version, &mut w)?;
                    w.flush().map_err(|e| io_err(&tmp, e))?;
                }
                std::io::Seek::rewind(&mut file).map_err(|e| io_err(&tmp, e))?;
                std::io::copy(&mut file, out).map_err(werr)?;
                out.flush().map_err(werr)?;
                Ok(LeftOut::default())
            })();
            let _ = std::fs::remove_file(&tmp);
            result
        }
        Format::Uftrace => Err(ExportError(
            "uftrace.data is a directory: give -o DIR".into(),
        )),
    }
}

/// Runs `ftrace export`: returns the exit status (0 or 1, with the error on `err`).
pub fn run_cli(args: &ExportArgs, out: &mut dyn Write, err: &mut dyn Write) -> u8 {
    let output = args
        .output
        .clone()
        .unwrap_or_else(|| PathBuf::from(args.format.default_output()));
    let result = if output.as_os_str() == "-" {
        export_to_stream(args, out)
    } else {
        export(&args.input, args.format, &output, args.file_version)
    };
    match result {
        Ok(left_out) => {
            if let Some(line) = left_out.told(args.format) {
                let _ = writeln!(err, "ftrace: {line}");
            }
            0
        }
        Err(e) => {
            let _ = writeln!(err, "ftrace: {e}");
            1
        }
    }
}

/// Symbol name lookup that prints unknown addresses as hex.
pub(crate) fn sym_name(syms: &SortedSymbols, addr: u64) -> String {
    syms.lookup(addr)
        .map_or_else(|| format!("{addr:#x}"), |s| s.name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_core::entry::FtraceGraphRetEntry;

    #[test]
    fn print_text_and_calls_decode() {
        let mut p = vec![0u8; 16];
        p[..2].copy_from_slice(&EventId::Print.as_u16().to_le_bytes());
        p.extend_from_slice(b"hello\n\0junk");
        assert_eq!(
            What::decode(EventId::Print, &p),
            What::Print("hello".into())
        );
        let f = FtraceEntry {
            ent: TraceEntry {
                type_: EventId::Function.as_u16(),
                flags: 0,
                preempt_count: 0,
                pid: 7,
            },
            ip: 0x1000,
            parent_ip: 0x2000,
        };
        assert_eq!(
            What::decode(EventId::Function, f.as_bytes()),
            What::Call(Call::Function {
                func: 0x1000,
                parent: 0x2000
            })
        );
        assert_eq!(What::decode(EventId::Function, &[0u8; 4]), What::Other);
        // A 40-byte funcgraph_exit (the format file's size) still decodes.
        let r = FtraceGraphRetEntry {
            func: 0x3000,
            depth: 2,
            calltime: 5,
            rettime: 9,
            ..Default::default()
        };
        let bytes = &r.as_bytes()[..40];
        assert!(matches!(
            What::decode(EventId::FuncgraphExit, bytes),
            What::Call(Call::Exit {
                func: 0x3000,
                depth: 2,
                ..
            })
        ));
    }
}
