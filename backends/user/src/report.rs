//! `ftrace report`: an offline reader of raw kernel captures and of `ftrace record`'s
//! recordings.
//!
//! A recording not turned into pages (a streamed one: per-thread `events-*` files, see
//! [`crate::recording`]) is read where it is: each CPU's events are merged from the thread
//! files that have events on it ([`RecordingReader::stream_cpu`]), the text files below are
//! made in memory ([`CaptureText`]), and nothing is written into the recording. Its report is
//! byte for byte the report of the same events as pages, except that a hole's count is always
//! known (a page may lack the room to store it).
//!
//! The capture directory mirrors tracefs:
//!
//! | path | content | required |
//! |---|---|---|
//! | `per_cpu/cpu<N>/trace_pipe_raw` | raw sub-buffer pages, as read from the kernel | yes |
//! | `kallsyms` | `/proc/kallsyms` text | yes |
//! | `saved_cmdlines` | `pid comm` lines | no (names print as `<...>`) |
//! | `trace_clock` | the clock listing or name | no (`local`) |
//! | `tracer` | the tracer that recorded it | no (`function`) |
//! | `events/header_page` | the page layout | no (4096-byte pages) |
//! | `events/ftrace/*/format` | event ids of the recording kernel | no (Linux 6.12 ids) |
//!
//! Choices the kernel makes from live state, and what the reader does instead:
//! - `entries-in-buffer` is the number of events decoded from all CPUs' pages;
//!   `entries-written` adds the events the pages say were lost (`RB_MISSED_STORED` counts); as
//!   in the kernel, `per_cpu/cpuN/trace` (`--cpu N`) repeats these global totals;
//! - `#P:` is the number of `per_cpu/cpu<N>` directories;
//! - the latency format's relative times count from the earliest event (the kernel counts from
//!   the last buffer reset, which a capture does not record), and its header names CPU 0;
//! - a page whose header flags lost events prints `CPU:N [LOST M EVENTS]` (or `[LOST EVENTS]`)
//!   before its first event, as `trace_pipe` does, and turns on the `annotate` notices.
//!
//! A view ([`crate::view`]: `-F`, `-N`, `-G`, `--max-depth`, `--tid`, `--cpu C,C`,
//! `--time-range`) is applied as the events are read, in merged time order, between the
//! per-CPU cursors and the formatter: it holds no events of its own beyond the window.
//!
//! Invariant: every error names the file and, for page data, the byte offset in that file.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::path::{Path, PathBuf};

use ftrace_core::EventId;
use ftrace_core::symbols::SortedSymbols;
use ftrace_ringbuf::page::{Page, PageError};
use ftrace_tracers::function::FunctionTracer;
use ftrace_tracers::function_graph::{FunctionGraphTracer, ReturnValues};
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::nop::NopTracer;
use ftrace_tracers::output::graph::GraphCpuState;
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::tracer::Tracer;
use ftrace_tracers::{ClockId, EventRef, Missed, Options, TraceIter, TraceOptions};

use crate::capture::CaptureText;
use crate::export::page_size_from_header;
use crate::recording::{Census, CpuCensus, EventStream, RecordingReader};
use crate::view::{View, ViewArgs};

/// What `ftrace report` was asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportArgs {
    /// The capture directory.
    pub raw_dir: PathBuf,
    /// `-O` options, in order.
    pub options: Vec<String>,
    /// `--cpu`: one CPU's file instead of the merged one.
    pub cpu: Option<u32>,
    /// The release the latency header names.
    pub uts_release: String,
    /// Which events are shown ([`crate::view`]).
    pub view: ViewArgs,
}

impl ReportArgs {
    /// Report `raw_dir` with default options.
    pub fn new(raw_dir: impl Into<PathBuf>) -> Self {
        ReportArgs {
            raw_dir: raw_dir.into(),
            options: Vec::new(),
            cpu: None,
            uts_release: "unknown".into(),
            view: ViewArgs::default(),
        }
    }
}

/// A report failure: which file, where in it, and what.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportError {
    /// The file (or directory) at fault.
    pub path: PathBuf,
    /// Byte offset in the file, for page data.
    pub offset: Option<u64>,
    /// What went wrong.
    pub message: String,
}

impl fmt::Display for ReportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.path.display())?;
        if let Some(off) = self.offset {
            write!(f, ": offset {off} ({off:#x})")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for ReportError {}

fn err(path: &Path, offset: Option<u64>, message: impl Into<String>) -> ReportError {
    ReportError {
        path: path.to_path_buf(),
        offset,
        message: message.into(),
    }
}

fn read_text(path: &Path) -> Result<String, ReportError> {
    std::fs::read_to_string(path).map_err(|e| err(path, None, e.to_string()))
}

fn read_optional(path: &Path) -> Result<Option<String>, ReportError> {
    match std::fs::read_to_string(path) {
        Ok(s) => Ok(Some(s)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(path, None, e.to_string())),
    }
}

/// `saved_cmdlines`: pid to command name.
#[derive(Clone, Debug, Default)]
pub struct SavedCmdlines(HashMap<i32, String>);

impl SavedCmdlines {
    /// Parses `pid comm` lines (the comm may contain spaces).
    pub fn parse(text: &str) -> Result<Self, (usize, &'static str)> {
        let mut m = HashMap::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let (pid, comm) = line
                .split_once(' ')
                .ok_or((i + 1, "expected \"pid comm\""))?;
            let pid: i32 = pid.trim().parse().map_err(|_| (i + 1, "bad pid"))?;
            m.insert(pid, comm.to_string());
        }
        Ok(SavedCmdlines(m))
    }
}

impl TaskNames for SavedCmdlines {
    fn comm(&self, pid: i32) -> Option<&str> {
        self.0.get(&pid).map(String::as_str)
    }
}

/// Maps the recording kernel's event ids (from its format files) to ours, by event name.
fn id_map(dir: &Path) -> Result<HashMap<u16, u16>, ReportError> {
    let mut map = HashMap::new();
    let fdir = dir.join("events/ftrace");
    let Ok(entries) = std::fs::read_dir(&fdir) else {
        return Ok(map);
    };
    for e in entries.flatten() {
        let path = e.path().join("format");
        let Some(text) = read_optional(&path)? else {
            continue;
        };
        let name = text
            .lines()
            .find_map(|l| l.strip_prefix("name: "))
            .ok_or_else(|| err(&path, None, "no \"name:\" line"))?;
        let id: u16 = text
            .lines()
            .find_map(|l| l.strip_prefix("ID: "))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| err(&path, None, "no valid \"ID:\" line"))?;
        if let Some(f) = ftrace_core::format::by_name(name.trim()) {
            map.insert(id, f.id.as_u16());
        }
    }
    Ok(map)
}

/// The capture's trace events of other systems ([`crate::capture_formats`]), and `ids` with
/// their ids added as they are (their records print through these formats). Without
/// `events/ftrace` formats the ftrace events' ids are ours, added too.
fn program_formats(
    dir: &Path,
    ids: &mut HashMap<u16, u16>,
) -> Result<Vec<ftrace_core::format::TraceEventFormat>, ReportError> {
    let formats = crate::capture_formats::read(dir).map_err(|e| err(dir, None, e))?;
    if !formats.is_empty() && ids.is_empty() {
        for f in ftrace_core::format::FORMATS {
            ids.insert(f.id.as_u16(), f.id.as_u16());
        }
    }
    for f in &formats {
        ids.insert(f.id, f.id);
    }
    Ok(formats)
}

/// What the pages say was lost.
#[derive(Clone, Copy, Debug, Default)]
struct Lost {
    /// Events the pages count (`RB_MISSED_STORED`).
    known: u64,
    /// Some page flags lost events (counted or not).
    any: bool,
}

/// One decoded event: timestamp, entry bytes with our ids, what was missed before it.
type Decoded = (u64, Vec<u8>, Missed);

/// Decodes one page at `base` of `path` into `out`.
fn decode_page(
    path: &Path,
    base: u64,
    chunk: &[u8],
    ids: &HashMap<u16, u16>,
    lost: &mut Lost,
    out: &mut dyn FnMut(Decoded),
) -> Result<(), ReportError> {
    let page = Page::new(chunk).map_err(|e| page_error(path, base, &e))?;
    let mut missed = if page.missed_events() {
        lost.any = true;
        match page.missed_count() {
            Some(c) => {
                lost.known = lost.known.saturating_add(c);
                Missed::Count(c)
            }
            None => Missed::Unknown,
        }
    } else {
        Missed::None
    };
    for ev in page.events() {
        let ev = ev.map_err(|e| page_error(path, base, &e))?;
        let at = base + ev.offset as u64;
        if ev.payload.len() < 8 {
            return Err(err(path, Some(at), "event shorter than its 8-byte header"));
        }
        let kid = u16::from_le_bytes([ev.payload[0], ev.payload[1]]);
        let id = if ids.is_empty() {
            kid
        } else {
            *ids.get(&kid).ok_or_else(|| {
                err(
                    path,
                    Some(at),
                    format!("unknown event id {kid} (no format file names it)"),
                )
            })?
        };
        // (With format files, the map says which ids are known.)
        if ids.is_empty() && EventId::from_u16(id).is_none() {
            return Err(err(path, Some(at), format!("unknown event id {kid}")));
        }
        let mut data = ev.payload.to_vec();
        data[..2].copy_from_slice(&id.to_le_bytes());
        out((ev.ts, data, missed));
        missed = Missed::None;
    }
    Ok(())
}

/// A CPU's `trace_pipe_raw`, read one page at a time.
struct PageReader {
    path: PathBuf,
    input: std::io::BufReader<std::fs::File>,
    page: Vec<u8>,
    base: u64,
}

impl PageReader {
    fn open(path: PathBuf, page_size: usize) -> Result<Self, ReportError> {
        let f = std::fs::File::open(&path).map_err(|e| err(&path, None, e.to_string()))?;
        Ok(PageReader {
            input: std::io::BufReader::with_capacity(64 * 1024, f),
            page: vec![0; page_size],
            base: 0,
            path,
        })
    }

    /// The next page and its offset in the file; `None` at the end.
    fn next_page(&mut self) -> Result<Option<(u64, &[u8])>, ReportError> {
        use std::io::Read;
        let mut n = 0;
        while n < self.page.len() {
            match self.input.read(&mut self.page[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(err(&self.path, Some(self.base), e.to_string())),
            }
        }
        if n == 0 {
            return Ok(None);
        }
        let base = self.base;
        if n < self.page.len() {
            return Err(err(
                &self.path,
                Some(base),
                format!(
                    "truncated page: {n} bytes where a {}-byte page starts",
                    self.page.len()
                ),
            ));
        }
        self.base += n as u64;
        Ok(Some((base, &self.page)))
    }
}

/// Where one CPU's events come from.
enum CpuEvents {
    /// A capture's `trace_pipe_raw`, decoded a page at a time.
    Pages(PageReader),
    /// A recording's events files, merged for this CPU as they are read.
    Recording(Box<EventStream<'static>>),
}

/// One CPU's events, decoded as the report needs them.
struct CpuCursor {
    source: CpuEvents,
    events: VecDeque<Decoded>,
    eof: bool,
}

impl CpuCursor {
    fn new(source: CpuEvents) -> Self {
        CpuCursor {
            source,
            events: Default::default(),
            eof: false,
        }
    }

    /// Decodes events until `want` are buffered or the CPU has no more.
    fn fill(&mut self, want: usize, input: &Input) -> Result<(), ReportError> {
        let mut lost = Lost::default();
        while self.events.len() < want && !self.eof {
            match &mut self.source {
                CpuEvents::Pages(pages) => {
                    let path = pages.path.clone();
                    match pages.next_page()? {
                        Some((base, chunk)) => {
                            let evs = &mut self.events;
                            decode_page(&path, base, chunk, &input.ids, &mut lost, &mut |d| {
                                evs.push_back(d)
                            })?
                        }
                        None => self.eof = true,
                    }
                }
                CpuEvents::Recording(stream) => match stream.next() {
                    Ok(Some(e)) => {
                        let missed = match e.missed {
                            0 => Missed::None,
                            n => Missed::Count(n),
                        };
                        self.events.push_back((e.ts, e.data, missed));
                    }
                    Ok(None) => self.eof = true,
                    Err(e) => return Err(err(&input.dir, None, e.to_string())),
                },
            }
        }
        Ok(())
    }
}

/// Events decoded per CPU ahead of the writer (the window; doubled when one CPU's events
/// all share a timestamp, so that the report always moves on).
const WINDOW: usize = 4096;

/// The most shown events held back for the leaf check of a CPU whose next shown event is
/// not read yet (see [`report_to`]).
const SHOWN_HELD_MAX: usize = 16 * WINDOW;

impl CpuCursor {
    /// Whether every event of this CPU has been taken.
    fn finished(&self) -> bool {
        self.eof && self.events.is_empty()
    }
}

/// The cursors a report reads: every CPU's, or `args.cpu`'s alone (every CPU's still when a
/// function filter needs each thread's calls in order).
fn open_cursors(input: &Input, args: &ReportArgs) -> Result<Vec<Option<CpuCursor>>, ReportError> {
    let mut cursors: Vec<Option<CpuCursor>> = (0..input.nr_cpus).map(|_| None).collect();
    let every = args.cpu.is_none() || args.view.filters_functions();
    for &cpu in &input.cpus {
        if every || args.cpu == Some(cpu) {
            cursors[cpu as usize] = Some(input.open_cpu(cpu)?);
        }
    }
    Ok(cursors)
}

/// The view a report applies: `args.view`, restricted to `args.cpu`'s events when given.
fn view_args(args: &ReportArgs) -> ViewArgs {
    let mut v = args.view.clone();
    if let Some(cpu) = args.cpu {
        v.cpus = vec![cpu];
    }
    v
}

/// The time before which every CPU's events are read: the earliest of the last buffered
/// events of the CPUs with more to read (`None`: every CPU is read to its end).
fn horizon(cursors: &[Option<CpuCursor>]) -> Option<u64> {
    cursors
        .iter()
        .flatten()
        .filter(|c| !c.eof)
        .filter_map(|c| c.events.back().map(|e| e.0))
        .min()
}

/// Takes the buffered events before `until` (all, for `None`) in merged order (timestamp,
/// then the lower CPU, as [`TraceIter`] merges), passes each through `view`, and hands the
/// shown ones to `shown`. Returns whether any event was taken.
fn admit_until(
    cursors: &mut [Option<CpuCursor>],
    until: Option<u64>,
    view: &mut View<'_>,
    shown: &mut dyn FnMut(u32, Decoded),
) -> bool {
    let mut taken = false;
    loop {
        let mut best: Option<(usize, u64)> = None;
        for (cpu, c) in cursors.iter().enumerate() {
            if let Some(ts) = c.as_ref().and_then(|c| c.events.front()).map(|e| e.0) {
                if until.is_none_or(|h| ts < h) && best.is_none_or(|(_, b)| ts < b) {
                    best = Some((cpu, ts));
                }
            }
        }
        let Some((cpu, _)) = best else {
            return taken;
        };
        let c = cursors[cpu].as_mut().expect("picked a cursor");
        let (ts, mut data, mut missed) = c.events.pop_front().expect("picked an event");
        taken = true;
        if view.admit(cpu as u32, ts, &mut data, &mut missed) {
            shown(cpu as u32, (ts, data, missed));
        }
    }
}

/// A [`ByteSink`](ftrace_tracers::output::ByteSink) over an [`std::io::Write`], keeping the
/// first error.
struct IoSink<'w> {
    out: &'w mut dyn std::io::Write,
    error: Option<std::io::Error>,
}

impl ftrace_tracers::output::ByteSink for IoSink<'_> {
    fn put(&mut self, bytes: &[u8]) -> fmt::Result {
        match self.out.write_all(bytes) {
            Ok(()) => Ok(()),
            Err(e) => {
                self.error.get_or_insert(e);
                Err(fmt::Error)
            }
        }
    }
}

fn page_error(path: &Path, base: u64, e: &PageError) -> ReportError {
    let off = match *e {
        PageError::TooShort { .. } => 0,
        PageError::CommitTooLarge { .. } => 8,
        PageError::Truncated { offset, .. } | PageError::Corrupt { offset, .. } => offset,
    };
    err(path, Some(base + off as u64), e.to_string())
}

/// The CPUs of a capture (`per_cpu/cpu<N>` directories), checked.
fn capture_cpus(dir: &Path) -> Result<Vec<u32>, ReportError> {
    crate::capture::capture_cpus(dir).map_err(|(path, e)| err(&path, None, e))
}

/// Checks a report's view before anything is printed: its globs against the symbols, its
/// threads against a recording's (`threads`: its `saved_cmdlines`, which names every thread;
/// a kernel's is a cache, not checked), its CPUs against the capture's.
fn check_view(
    input: &Input,
    args: &ReportArgs,
    syms: &SortedSymbols,
    threads: Option<&SavedCmdlines>,
    graph: bool,
) -> Result<(), ReportError> {
    let dir = input.dir.as_path();
    crate::view::check(&args.view, syms, graph).map_err(|e| err(dir, None, e))?;
    if let Some(cmdlines) = threads {
        if let Some(t) = args.view.tids.iter().find(|t| !cmdlines.0.contains_key(t)) {
            let mut known: Vec<i32> = cmdlines.0.keys().copied().collect();
            known.sort_unstable();
            let known: Vec<String> = known.iter().map(i32::to_string).collect();
            return Err(err(
                dir,
                None,
                format!(
                    "--tid {t}: no such thread in the recording (its threads: {})",
                    known.join(", ")
                ),
            ));
        }
    }
    if let Some(c) = args.view.cpus.iter().find(|c| !input.cpus.contains(c)) {
        return Err(err(
            &dir.join(format!("per_cpu/cpu{c}")),
            None,
            "no such CPU in the capture",
        ));
    }
    Ok(())
}

/// The first pass over the pages: every page checked, events counted, losses summed, the
/// earliest timestamp; one page in memory.
struct Scan {
    entries: u64,
    lost: Lost,
    time_start: Option<u64>,
}

fn scan(
    dir: &Path,
    cpus: &[u32],
    page_size: usize,
    ids: &HashMap<u16, u16>,
) -> Result<Scan, ReportError> {
    let mut s = Scan {
        entries: 0,
        lost: Lost::default(),
        time_start: None,
    };
    for &cpu in cpus {
        let path = dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
        let mut pages = PageReader::open(path.clone(), page_size)?;
        let mut first = None;
        while let Some((base, chunk)) = pages.next_page()? {
            let mut n = 0u64;
            decode_page(&path, base, chunk, ids, &mut s.lost, &mut |d| {
                n += 1;
                first.get_or_insert(d.0);
            })?;
            s.entries += n;
        }
        if let Some(t) = first {
            s.time_start = Some(s.time_start.map_or(t, |m: u64| m.min(t)));
        }
    }
    Ok(s)
}

/// Runs the report: the bytes the kernel's `trace` (or `per_cpu/cpuN/trace`) file would hold.
/// (All in memory: [`report_to`] streams them.)
/// A damaged recording is an error here (the first damage; [`report_to`] prints what it can).
pub fn report(args: &ReportArgs) -> Result<Vec<u8>, ReportError> {
    let mut out = Vec::new();
    let damaged = report_to(args, &mut out).map_err(|e| match e {
        ReportFailure::Report(e) => e,
        ReportFailure::Write(e) => err(&args.raw_dir, None, e.to_string()),
    })?;
    match damaged.into_iter().next() {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Why [`report_to`] stopped.
#[derive(Debug)]
pub enum ReportFailure {
    /// The capture could not be read.
    Report(ReportError),
    /// Writing the output failed (a closed pipe: the reader went away).
    Write(std::io::Error),
}

impl From<ReportError> for ReportFailure {
    fn from(e: ReportError) -> Self {
        ReportFailure::Report(e)
    }
}

/// Runs the report into `out` as it goes: the events are read twice (counted and checked for
/// the header, then formatted), a window of 4096 events per CPU at a time, so memory
/// does not grow with the capture or recording. The view (`args.view`, [`crate::view`]) is
/// checked first (a bad one is an error before anything is written), then applied to the
/// events in merged time order before they are formatted; the header's counts stay the
/// recording's, as `per_cpu/cpuN/trace` repeats the global ones. A shown function_graph
/// call whose next shown event on its CPU is more than 65 536 shown events away prints as
/// `f() {` ... `}` rather than waiting for it to fold into `f();`. A recording's damaged thread files (cut or
/// mutated inside a record, or with no valid header) are reported up to the damage, which is
/// returned: the caller says what was damaged.
pub fn report_to(
    args: &ReportArgs,
    out: &mut dyn std::io::Write,
) -> Result<Vec<ReportError>, ReportFailure> {
    report_windowed(args, out, WINDOW)
}

/// The text files a report reads beside the events.
struct Texts {
    /// Where they come from (a recording's are made in memory from its metadata).
    origin: TextOrigin,
    kallsyms: Option<String>,
    saved_cmdlines: Option<String>,
    trace_clock: Option<String>,
    tracer: Option<String>,
    header_page: Option<String>,
}

/// Where a report's text files come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TextOrigin {
    /// The capture directory's files.
    Files,
    /// A recording's `<pid>.<n>/` directories ([`CaptureText`]).
    Recording,
}

impl Texts {
    fn read(dir: &Path) -> Result<Self, ReportError> {
        let opt = |name: &str| read_optional(&dir.join(name));
        Ok(Texts {
            origin: TextOrigin::Files,
            kallsyms: Some(read_text(&dir.join("kallsyms"))?),
            saved_cmdlines: opt("saved_cmdlines")?,
            trace_clock: opt("trace_clock")?,
            tracer: opt("tracer")?,
            header_page: opt("events/header_page")?,
        })
    }

    fn of_recording(rec: &crate::recording::Recording) -> Self {
        let t = CaptureText::of(rec);
        Texts {
            origin: TextOrigin::Recording,
            kallsyms: Some(t.kallsyms),
            saved_cmdlines: Some(t.saved_cmdlines),
            trace_clock: Some(t.trace_clock),
            tracer: Some(t.tracer),
            header_page: None,
        }
    }

    /// The path an error about text file `name` names.
    fn path(&self, dir: &Path, name: &str) -> PathBuf {
        match self.origin {
            TextOrigin::Files => dir.join(name),
            TextOrigin::Recording => dir.to_path_buf(),
        }
    }
}

/// The largest sub-buffer page a capture may say it has (the page is read into one buffer).
const MAX_PAGE_SIZE: usize = 1 << 20;

/// Where a report's events are.
enum Events {
    /// A capture's raw pages, `per_cpu/cpu<N>/trace_pipe_raw`.
    Pages,
    /// A recording's events files (and ring files), read where they are: nothing is written.
    Recording {
        reader: Box<RecordingReader>,
        census: Census,
    },
}

/// What a report reads: its directory, the CPUs, and how to open each CPU's events.
struct Input {
    dir: PathBuf,
    events: Events,
    /// The capture's event ids mapped to ours (empty: ours).
    ids: HashMap<u16, u16>,
    /// A capture's trace events of other systems (a recording's are its reader's).
    formats: Vec<ftrace_core::format::TraceEventFormat>,
    page_size: usize,
    /// The CPUs that have a stream, ascending.
    cpus: Vec<u32>,
    /// `#P:`.
    nr_cpus: u32,
    /// Damaged parts of a recording: each of its thread files is read up to its damage.
    damaged: Vec<ReportError>,
}

impl Input {
    fn open_cpu(&self, cpu: u32) -> Result<CpuCursor, ReportError> {
        Ok(CpuCursor::new(match &self.events {
            Events::Pages => CpuEvents::Pages(PageReader::open(
                self.dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw")),
                self.page_size,
            )?),
            Events::Recording { reader, census } => CpuEvents::Recording(Box::new(
                reader
                    .stream_cpu(cpu, census)
                    .map_err(|e| err(&self.dir, None, e.to_string()))?,
            )),
        }))
    }

    /// The first pass: events counted, losses summed, the earliest timestamp.
    fn scan(&self) -> Result<Scan, ReportError> {
        match &self.events {
            Events::Pages => scan(&self.dir, &self.cpus, self.page_size, &self.ids),
            Events::Recording { census, .. } => {
                let sum = |f: fn(&CpuCensus) -> u64| census.cpus.iter().map(f).sum::<u64>();
                let lost = sum(|c| c.lost);
                Ok(Scan {
                    entries: sum(|c| c.events),
                    lost: Lost {
                        known: lost,
                        any: lost > 0,
                    },
                    time_start: census.cpus.iter().filter_map(|c| c.first_ts).min(),
                })
            }
        }
    }

    /// The formats of the program trace events a recording holds (none for a capture).
    fn event_formats(&self) -> Vec<ftrace_core::format::TraceEventFormat> {
        match &self.events {
            Events::Pages => self.formats.clone(),
            Events::Recording { reader, .. } => reader.event_formats(),
        }
    }

    /// Whether `cpu` has no event.
    fn cpu_empty(&self, cpu: u32) -> Result<bool, ReportError> {
        match &self.events {
            Events::Pages => {
                let mut c = self.open_cpu(cpu)?;
                c.fill(1, self)?;
                Ok(c.events.is_empty())
            }
            Events::Recording { census, .. } => {
                Ok(census.cpus.get(cpu as usize).is_none_or(|c| c.events == 0))
            }
        }
    }
}

/// Opens what `dir` holds: a capture (raw pages) or a recording not turned into pages (its
/// events files are read where they are), with its text files.
fn open_input(dir: &Path) -> Result<(Input, Texts), ReportError> {
    if !dir.join("per_cpu").is_dir() && crate::record::is_recording(dir) {
        let rerr = |e: crate::recording::ReadError| err(dir, None, e.to_string());
        let reader = RecordingReader::open(dir).map_err(rerr)?;
        let census = reader.census().map_err(rerr)?;
        let texts = Texts::of_recording(&reader.rec);
        let nr_cpus = reader.rec.nr_cpus.max(census.cpus.len() as u32);
        let input = Input {
            damaged: census
                .damaged
                .iter()
                .map(|e| err(dir, None, e.to_string()))
                .collect(),
            dir: dir.to_path_buf(),
            cpus: (0..nr_cpus).collect(),
            nr_cpus,
            events: Events::Recording {
                reader: Box::new(reader),
                census,
            },
            ids: HashMap::new(),
            formats: Vec::new(),
            page_size: ftrace_ringbuf::page::DEFAULT_PAGE_SIZE,
        };
        return Ok((input, texts));
    }
    let texts = Texts::read(dir)?;
    let page_size = match &texts.header_page {
        Some(t) => page_size_from_header(t).ok_or_else(|| {
            err(
                &dir.join("events/header_page"),
                None,
                "no \"data\" field with offset and size",
            )
        })?,
        None => ftrace_ringbuf::page::DEFAULT_PAGE_SIZE,
    };
    if !(ftrace_ringbuf::page::PAGE_HEADER_SIZE + 8..=MAX_PAGE_SIZE).contains(&page_size) {
        return Err(err(
            &dir.join("events/header_page"),
            None,
            format!("page size {page_size} out of range (at most {MAX_PAGE_SIZE})"),
        ));
    }
    let cpus = capture_cpus(dir)?;
    let nr_cpus = *cpus.last().expect("capture_cpus has one") + 1;
    let mut ids = id_map(dir)?;
    let formats = program_formats(dir, &mut ids)?;
    let input = Input {
        damaged: Vec::new(),
        dir: dir.to_path_buf(),
        events: Events::Pages,
        ids,
        formats,
        page_size,
        cpus,
        nr_cpus,
    };
    Ok((input, texts))
}

fn report_windowed(
    args: &ReportArgs,
    out: &mut dyn std::io::Write,
    window: usize,
) -> Result<Vec<ReportError>, ReportFailure> {
    let dir = args.raw_dir.as_path();
    if !dir.is_dir() {
        return Err(err(dir, None, "not a directory (the capture to report)").into());
    }
    let (input, texts) = open_input(dir)?;
    let kpath = texts.path(dir, "kallsyms");
    let syms = SortedSymbols::from_kallsyms(texts.kallsyms.as_deref().unwrap_or_default())
        .map_err(|e| err(&kpath, None, e.to_string()))?;
    let cpath = texts.path(dir, "saved_cmdlines");
    let cmdlines = match &texts.saved_cmdlines {
        Some(t) => SavedCmdlines::parse(t)
            .map_err(|(line, why)| err(&cpath, None, format!("line {line}: {why}")))?,
        None => SavedCmdlines::default(),
    };
    let clock = match &texts.trace_clock {
        Some(t) => ClockId::parse_listing(t).ok_or_else(|| {
            err(
                &texts.path(dir, "trace_clock"),
                None,
                format!("unknown clock {:?}", t.trim()),
            )
        })?,
        None => ClockId::Local,
    };
    let tracer = texts
        .tracer
        .as_deref()
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|| "function".into());
    let (nop, function, graph) = (
        NopTracer,
        FunctionTracer::new(),
        FunctionGraphTracer::new().with_return_values(ReturnValues::Recorded),
    );
    let current: &dyn Tracer = match tracer.as_str() {
        "function_graph" => &graph,
        "function" => &function,
        "nop" => &nop,
        other => {
            return Err(err(
                &texts.path(dir, "tracer"),
                None,
                format!("unsupported tracer {other:?} (function, function_graph, nop)"),
            )
            .into());
        }
    };
    let mut opts = Options {
        trace: TraceOptions::DEFAULT,
        tracer: current.default_flags(),
    };
    for o in &args.options {
        opts.apply_for(o, current).map_err(|_| {
            err(
                dir,
                None,
                format!("unknown trace option {o:?} (see trace_options)"),
            )
        })?;
    }

    let nr_cpus = input.nr_cpus;
    if let Some(cpu) = args.cpu {
        if cpu >= nr_cpus || !input.cpus.contains(&cpu) {
            return Err(err(
                &dir.join(format!("per_cpu/cpu{cpu}")),
                None,
                "no such CPU in the capture",
            )
            .into());
        }
    }
    let threads = (texts.origin == TextOrigin::Recording).then_some(&cmdlines);
    check_view(&input, args, &syms, threads, tracer == "function_graph")?;
    let scanned = input.scan()?;
    let formats = input.event_formats();
    let irq_text = match (
        syms.by_name("__irqentry_text_start"),
        syms.by_name("__irqentry_text_end"),
    ) {
        (Some(s), Some(e)) => Some((s.addr, e.addr)),
        _ => None,
    };
    let env = OutputEnv {
        symbols: &syms,
        tasks: &cmdlines,
        options: opts.trace,
        clock_unit: clock.unit(),
        time_start: scanned.time_start.unwrap_or(0),
        nr_cpu_ids: nr_cpus,
        irq_text,
    };
    let info = HeaderInfo {
        tracer: &tracer,
        entries: scanned.entries,
        written: scanned.entries + scanned.lost.known,
        online_cpus: nr_cpus,
        latency: LatencyInfo {
            uts_release: &args.uts_release,
            ..LatencyInfo::default()
        },
    };
    let style = current.output_style(opts.tracer);
    let mut state = vec![GraphCpuState::INIT; nr_cpus as usize];
    let lost = if scanned.lost.any {
        Overruns::Lost
    } else {
        Overruns::None
    };
    let mut w = TraceWriter::new(style, &mut state, lost);
    // Lines are written one by one: buffered here, so that a line-buffered stdout does not
    // make each a system call.
    let mut buffered = std::io::BufWriter::with_capacity(64 * 1024, out);
    let mut sink = IoSink {
        out: &mut buffered,
        error: None,
    };
    let failed = |sink: &mut IoSink<'_>| match sink.error.take() {
        Some(e) => ReportFailure::Write(e),
        None => err(dir, None, "formatting failed").into(),
    };
    let empty = match args.cpu {
        // `per_cpu/cpuN/trace` of a CPU without events says so in its header.
        Some(cpu) => input.cpu_empty(cpu)?,
        None => scanned.entries == 0,
    };
    w.write_header(
        &mut ftrace_tracers::output::TextToBytes(&mut sink),
        &env,
        &info,
        empty,
    )
    .map_err(|_| failed(&mut sink))?;
    let mut cursors = open_cursors(&input, args)?;
    let passthrough = args.view.is_everything();
    let mut view = View::new(&view_args(args), &syms, scanned.time_start.unwrap_or(0));
    // The events shown, per CPU, in the order the view admitted them.
    let mut shown: Vec<VecDeque<Decoded>> = (0..nr_cpus).map(|_| VecDeque::new()).collect();
    let mut want = window;
    loop {
        for c in cursors.iter_mut().flatten() {
            c.fill(want, &input)?;
        }
        // Read to: what comes before the last buffered event of every CPU that has more to
        // read (a later page cannot hold anything earlier).
        let read_to = horizon(&cursors);
        let (admitted, write_to) = if passthrough {
            // No view: the cursors' events are the ones shown, read to the same time (the
            // next event a leaf check looks at is then buffered).
            (false, read_to)
        } else {
            let admitted = admit_until(&mut cursors, read_to, &mut view, &mut |cpu, d| {
                shown[cpu as usize].push_back(d)
            });
            // Safe to write: what comes before that, and before the last shown event of
            // every CPU with more to read (the next shown event a leaf check looks at is
            // then known). A CPU whose next shown event is far away (a call whose children
            // the view hides all) is not waited for beyond a bound: its call then prints as
            // trace_pipe prints one whose exit is not yet in the buffer, `f() {` ... `}`.
            let held: usize = shown.iter().map(VecDeque::len).sum();
            let write_to = read_to.map(|h| {
                if held > SHOWN_HELD_MAX {
                    return h;
                }
                cursors
                    .iter()
                    .zip(&shown)
                    .filter(|(c, _)| c.as_ref().is_some_and(|c| !c.finished()))
                    .filter_map(|(_, s)| s.back().map(|e| e.0))
                    .fold(h, u64::min)
            });
            (admitted, write_to)
        };
        let consumed = {
            let mut win = EventLists::new(nr_cpus);
            for cpu in 0..nr_cpus as usize {
                let queue = if passthrough {
                    cursors[cpu].as_ref().map(|c| &c.events)
                } else {
                    Some(&shown[cpu])
                };
                for (ts, data, missed) in queue.into_iter().flatten() {
                    win.push(EventRef {
                        cpu: cpu as u32,
                        ts: *ts,
                        data,
                        missed: *missed,
                    });
                }
            }
            let mut it = TraceIter::new(&mut win, args.cpu);
            while let Some(ev) = it.peek_next() {
                if write_to.is_some_and(|h| ev.ts >= h) {
                    break;
                }
                it.next_event();
                // A program's trace event through its print format, the rest as the tracer
                // prints.
                match ftrace_tracers::trace_event::find(&formats, &ev) {
                    Some(f) => ftrace_tracers::trace_event::write_event_line(
                        &mut ftrace_tracers::output::TextToBytes(&mut sink),
                        &env,
                        &ev,
                        f,
                    ),
                    None => w.write_line(&mut sink, &env, &mut it, &ev),
                }
                .map_err(|_| failed(&mut sink))?;
            }
            (0..nr_cpus)
                .map(|cpu| win.consumed(cpu))
                .collect::<Vec<_>>()
        };
        let mut moved = admitted;
        for (cpu, n) in consumed.into_iter().enumerate() {
            let queue = if passthrough {
                match cursors[cpu].as_mut() {
                    Some(c) => &mut c.events,
                    None => continue,
                }
            } else {
                &mut shown[cpu]
            };
            queue.drain(..n);
            moved |= n > 0;
        }
        if read_to.is_none() {
            break;
        }
        want = if moved {
            WINDOW
        } else {
            want.saturating_mul(2)
        };
    }
    drop(sink);
    std::io::Write::flush(&mut buffered).map_err(ReportFailure::Write)?;
    Ok(input.damaged)
}

/// `ftrace report --stat`: the function profiler's table (`trace_stat/function<cpu>`) of
/// the capture or recording, every CPU's counts summed (or one CPU's, `args.cpu`): hits per
/// function, and for function_graph the total, average and `s^2` of its durations (the
/// kernel's `graph-time` on: a call's time includes its children's), of the events the view
/// (`args.view`) shows. Read one CPU at a time without a view, every CPU merged with one, a
/// window of events at a time: memory holds one row per function hit. Returns the damage
/// read around, as [`report_to`] does.
pub fn report_stat_to(
    args: &ReportArgs,
    out: &mut dyn std::io::Write,
) -> Result<Vec<ReportError>, ReportFailure> {
    use ftrace_tracers::Entry;
    use ftrace_tracers::profiler::{ProfileMode, ProfileTable};
    let dir = args.raw_dir.as_path();
    if !dir.is_dir() {
        return Err(err(dir, None, "not a directory (the capture to report)").into());
    }
    let (input, texts) = open_input(dir)?;
    let kpath = texts.path(dir, "kallsyms");
    let syms = SortedSymbols::from_kallsyms(texts.kallsyms.as_deref().unwrap_or_default())
        .map_err(|e| err(&kpath, None, e.to_string()))?;
    let mode = match texts.tracer.as_deref().map(str::trim) {
        Some("function_graph") => ProfileMode::Graph,
        _ => ProfileMode::Hits,
    };
    if let Some(cpu) = args.cpu {
        if !input.cpus.contains(&cpu) {
            return Err(err(
                &dir.join(format!("per_cpu/cpu{cpu}")),
                None,
                "no such CPU in the capture",
            )
            .into());
        }
    }
    let cpath = texts.path(dir, "saved_cmdlines");
    let cmdlines = match &texts.saved_cmdlines {
        Some(t) => SavedCmdlines::parse(t)
            .map_err(|(line, why)| err(&cpath, None, format!("line {line}: {why}")))?,
        None => SavedCmdlines::default(),
    };
    let threads = (texts.origin == TextOrigin::Recording).then_some(&cmdlines);
    check_view(&input, args, &syms, threads, mode == ProfileMode::Graph)?;
    let mut table = ProfileTable::default();
    let mut count = |cpu: u32, (ts, data, missed): Decoded| match (EventRef {
        cpu,
        ts,
        data: &data,
        missed,
    })
    .entry()
    {
        Entry::Function(f) => table.hit(f.ip),
        Entry::GraphEntry(e) => table.hit(e.func),
        Entry::GraphReturn(r) => {
            table.add_time(r.ret.func, r.ret.rettime.wrapping_sub(r.ret.calltime))
        }
        _ => {}
    };
    if args.view.is_everything() {
        // No view: one CPU at a time, in any order.
        for &cpu in &input.cpus {
            if args.cpu.is_some_and(|c| c != cpu) {
                continue;
            }
            let mut c = input.open_cpu(cpu)?;
            loop {
                c.fill(WINDOW, &input)?;
                if c.events.is_empty() {
                    break;
                }
                for d in c.events.drain(..) {
                    count(cpu, d);
                }
            }
        }
    } else {
        // A view takes each thread's events in order: every CPU at once, merged.
        let first = input.scan()?.time_start.unwrap_or(0);
        let mut view = View::new(&view_args(args), &syms, first);
        let mut cursors = open_cursors(&input, args)?;
        let mut want = WINDOW;
        loop {
            for c in cursors.iter_mut().flatten() {
                c.fill(want, &input)?;
            }
            let read_to = horizon(&cursors);
            let taken = admit_until(&mut cursors, read_to, &mut view, &mut count);
            if read_to.is_none() {
                break;
            }
            want = if taken {
                WINDOW
            } else {
                want.saturating_mul(2)
            };
        }
    }
    let mut text = String::new();
    table
        .write_stat(&mut text, &syms, mode, 0)
        .map_err(|_| err(dir, None, "formatting failed"))?;
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(ReportFailure::Write)?;
    Ok(input.damaged)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recording::Event;
    use ftrace_core::entry::{FtraceGraphEntEntry, FtraceGraphRetEntry, Pod, TraceEntry};

    fn ent(id: EventId, tid: u32) -> TraceEntry {
        TraceEntry {
            type_: id.as_u16(),
            flags: 0,
            preempt_count: 0,
            pid: tid as i32,
        }
    }

    /// A function_graph capture on two CPUs: nested calls, leaves, equal timestamps across
    /// CPUs, a hole; written as pages.
    fn capture(dir: &Path) {
        let mut per_cpu: Vec<Vec<Event>> = vec![Vec::new(), Vec::new()];
        let mut x = 0x1234_5678u64;
        for cpu in 0..2u32 {
            let mut ts = 1_000_000u64;
            let tid = 10 + cpu;
            for i in 0..700u64 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let calls: &[(u64, i32)] = if i % 3 == 0 {
                    &[(0x1000, 0), (0x2000, 1)]
                } else {
                    &[(0x2000, 0)]
                };
                let mut stack = Vec::new();
                for &(f, depth) in calls {
                    ts += 1 + x % 3;
                    let e = FtraceGraphEntEntry {
                        ent: ent(EventId::FuncgraphEntry, tid),
                        func: f,
                        depth,
                    };
                    per_cpu[cpu as usize].push(ev(cpu, ts, tid, e.as_bytes(), i == 400));
                    stack.push((f, depth, ts));
                }
                while let Some((f, depth, t0)) = stack.pop() {
                    ts += 2 + x % 5;
                    let r = FtraceGraphRetEntry {
                        ent: ent(EventId::FuncgraphExit, tid),
                        func: f,
                        depth,
                        calltime: t0,
                        rettime: ts,
                        ..Default::default()
                    };
                    per_cpu[cpu as usize].push(ev(cpu, ts, tid, r.as_bytes(), false));
                }
            }
        }
        write_graph_capture(
            dir,
            &per_cpu,
            "0000000000001000 t outer\n0000000000002000 t inner\n",
        );
        std::fs::write(dir.join("saved_cmdlines"), "10 ten\n11 eleven\n").unwrap();
    }

    /// Writes a function_graph capture into `dir`: each CPU's events as its
    /// `per_cpu/cpuN/trace_pipe_raw` pages, `kallsyms` and `tracer`.
    fn write_graph_capture(dir: &Path, per_cpu: &[Vec<Event>], kallsyms: &str) {
        for (cpu, evs) in per_cpu.iter().enumerate() {
            let d = dir.join(format!("per_cpu/cpu{cpu}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("trace_pipe_raw"),
                crate::capture::cpu_pages(evs).unwrap(),
            )
            .unwrap();
        }
        std::fs::write(dir.join("kallsyms"), kallsyms).unwrap();
        std::fs::write(dir.join("tracer"), "function_graph\n").unwrap();
    }

    fn ev(cpu: u32, ts: u64, tid: u32, data: &[u8], hole: bool) -> Event {
        Event {
            cpu,
            ts,
            pid: tid,
            tid,
            data: data.to_vec(),
            missed: if hole { 5 } else { 0 },
            seq: 0,
            process: 0,
        }
    }

    /// A view that hides every child of a call while another CPU shows many calls: the call
    /// folds into a leaf while the other CPU's shown events fit the bound, and prints open
    /// and closed beyond it (memory does not grow with the other CPU's events).
    #[test]
    fn a_call_whose_children_are_hidden_is_not_waited_for_beyond_the_bound() {
        let dir = std::env::temp_dir().join(format!("ftrace-report-held-{}", std::process::id()));
        for (calls, folded) in [(1000u64, true), (SHOWN_HELD_MAX as u64, false)] {
            let _ = std::fs::remove_dir_all(&dir);
            let graph = |cpu: u32, tid: u32, ts: u64, func: u64, depth: i32, exit: Option<u64>| {
                let data = match exit {
                    None => FtraceGraphEntEntry {
                        ent: ent(EventId::FuncgraphEntry, tid),
                        func,
                        depth,
                    }
                    .as_bytes()
                    .to_vec(),
                    Some(t0) => FtraceGraphRetEntry {
                        ent: ent(EventId::FuncgraphExit, tid),
                        func,
                        depth,
                        calltime: t0,
                        rettime: ts,
                        ..Default::default()
                    }
                    .as_bytes()
                    .to_vec(),
                };
                ev(cpu, ts, tid, &data, false)
            };
            // CPU 0: outer calling inner `calls` times; CPU 1: `calls` calls of other.
            let mut cpu0 = vec![graph(0, 10, 1, 0x1000, 0, None)];
            let mut cpu1 = Vec::new();
            for i in 0..calls {
                let t = 10 + 4 * i;
                cpu0.push(graph(0, 10, t, 0x2000, 1, None));
                cpu0.push(graph(0, 10, t + 1, 0x2000, 1, Some(t)));
                cpu1.push(graph(1, 11, t, 0x3000, 0, None));
                cpu1.push(graph(1, 11, t + 1, 0x3000, 0, Some(t)));
            }
            let end = 10 + 4 * calls;
            cpu0.push(graph(0, 10, end, 0x1000, 0, Some(1)));
            write_graph_capture(
                &dir,
                &[cpu0, cpu1],
                "0000000000001000 t outer\n0000000000002000 t inner\n0000000000003000 t other\n",
            );
            let mut args = ReportArgs::new(&dir);
            args.view.filter = vec!["outer".into(), "other".into()];
            let text = String::from_utf8(report(&args).unwrap()).unwrap();
            let others = text.lines().filter(|l| l.ends_with("|  other();")).count();
            assert_eq!(others as u64, calls, "{calls}");
            assert!(!text.contains("inner"));
            if folded {
                assert_eq!(text.matches("|  outer();").count(), 1, "{text}");
            } else {
                assert_eq!(text.matches("|  outer() {").count(), 1, "{calls}");
                assert!(text.trim_end().ends_with("|  }"), "{calls}");
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The report written a few events at a time is the report written in one window: leaves
    /// folded across window edges, holes, CPU order on equal timestamps.
    #[test]
    fn windows_do_not_change_the_report() {
        let dir = std::env::temp_dir().join(format!("ftrace-report-win-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        capture(&dir);
        let views = [
            ViewArgs::default(),
            ViewArgs {
                filter: vec!["inner".into()],
                ..Default::default()
            },
            ViewArgs {
                graph: vec!["out*".into()],
                max_depth: 1,
                ..Default::default()
            },
            ViewArgs {
                tids: vec![11],
                ..Default::default()
            },
        ];
        for (options, view) in [vec![], vec!["funcgraph-proc".to_string()]]
            .into_iter()
            .flat_map(|o| views.iter().map(move |v| (o.clone(), v.clone())))
        {
            for cpu in [None, Some(1)] {
                let mut args = ReportArgs::new(&dir);
                args.options = options.clone();
                args.cpu = cpu;
                args.view = view.clone();
                let mut whole = Vec::new();
                report_windowed(&args, &mut whole, 1 << 30).unwrap();
                let text = String::from_utf8_lossy(&whole);
                let shown = |name: &str| text.contains(&format!("{name}();"));
                assert!(text.contains("LOST 5 EVENTS"), "{view:?} {text}");
                // What each view shows: inner as a leaf (but under outer at depth 1), outer
                // folded into leaves at depth 0.
                match (view.filter.is_empty(), view.graph.is_empty()) {
                    (false, _) => assert!(shown("  inner") && !text.contains("outer"), "{text}"),
                    (_, false) => assert!(shown("outer") && !text.contains("inner"), "{text}"),
                    _ => assert!(shown("inner") && text.contains("outer() {"), "{text}"),
                }
                if !view.tids.is_empty() {
                    assert!(!text.contains(" 0) "), "{text}");
                }
                for window in [1, 2, 3, 7, 100] {
                    let mut part = Vec::new();
                    report_windowed(&args, &mut part, window).unwrap();
                    assert!(
                        part == whole,
                        "window {window}, cpu {cpu:?}, {options:?}, {view:?}"
                    );
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
