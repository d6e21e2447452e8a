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
//! Invariant: every error names the file and, for page data, the byte offset in that file.

use std::collections::HashMap;
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
}

impl ReportArgs {
    /// Report `raw_dir` with default options.
    pub fn new(raw_dir: impl Into<PathBuf>) -> Self {
        ReportArgs {
            raw_dir: raw_dir.into(),
            options: Vec::new(),
            cpu: None,
            uts_release: "unknown".into(),
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
    events: std::collections::VecDeque<Decoded>,
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

use crate::recording::MAX_CPUS;

/// The CPUs of a capture (`per_cpu/cpu<N>` directories), checked.
fn capture_cpus(dir: &Path) -> Result<Vec<u32>, ReportError> {
    let pdir = dir.join("per_cpu");
    let rd = std::fs::read_dir(&pdir).map_err(|e| err(&pdir, None, e.to_string()))?;
    let mut cpus: Vec<u32> = rd
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
        .collect();
    cpus.sort_unstable();
    if let Some(&big) = cpus.iter().find(|&&c| c >= MAX_CPUS) {
        return Err(err(
            &pdir.join(format!("cpu{big}")),
            None,
            format!("CPU number out of range (the kernel's NR_CPUS is at most {MAX_CPUS})"),
        ));
    }
    if cpus.is_empty() {
        return Err(err(&pdir, None, "no cpu<N> directories"));
    }
    Ok(cpus)
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
/// does not grow with the capture or recording. A recording's damaged thread files (cut or
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
    let mut cursors: Vec<Option<CpuCursor>> = (0..nr_cpus).map(|_| None).collect();
    for &cpu in &input.cpus {
        if args.cpu.is_none_or(|c| c == cpu) {
            cursors[cpu as usize] = Some(input.open_cpu(cpu)?);
        }
    }
    let mut want = window;
    loop {
        for c in cursors.iter_mut().flatten() {
            c.fill(want, &input)?;
        }
        // Safe to write: what comes before the last buffered event of every CPU that has more
        // to read (a later page cannot hold anything earlier, nor the next event a leaf check
        // looks at).
        let horizon = cursors
            .iter()
            .flatten()
            .filter(|c| !c.eof)
            .filter_map(|c| c.events.back().map(|e| e.0))
            .min();
        let consumed = {
            let mut win = EventLists::new(nr_cpus);
            for (cpu, c) in cursors.iter().enumerate() {
                for (ts, data, missed) in c.iter().flat_map(|c| &c.events) {
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
                if horizon.is_some_and(|h| ev.ts >= h) {
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
        let mut moved = false;
        for (c, n) in cursors.iter_mut().zip(consumed) {
            if let Some(c) = c {
                c.events.drain(..n);
                moved |= n > 0;
            }
        }
        if horizon.is_none() {
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
/// kernel's `graph-time` on: a call's time includes its children's). Read one CPU at a time,
/// a window of events at a time: memory holds one row per function hit. Returns the damage
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
    let mut table = ProfileTable::default();
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
            for (ts, data, missed) in c.events.drain(..) {
                match (EventRef {
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
                }
            }
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
        for (cpu, evs) in per_cpu.iter().enumerate() {
            let d = dir.join(format!("per_cpu/cpu{cpu}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(
                d.join("trace_pipe_raw"),
                crate::capture::cpu_pages(evs).unwrap(),
            )
            .unwrap();
        }
        std::fs::write(
            dir.join("kallsyms"),
            "0000000000001000 t outer\n0000000000002000 t inner\n",
        )
        .unwrap();
        std::fs::write(dir.join("saved_cmdlines"), "10 ten\n11 eleven\n").unwrap();
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

    /// The report written a few events at a time is the report written in one window: leaves
    /// folded across window edges, holes, CPU order on equal timestamps.
    #[test]
    fn windows_do_not_change_the_report() {
        let dir = std::env::temp_dir().join(format!("ftrace-report-win-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        capture(&dir);
        for options in [vec![], vec!["funcgraph-proc".to_string()]] {
            for cpu in [None, Some(1)] {
                let mut args = ReportArgs::new(&dir);
                args.options = options.clone();
                args.cpu = cpu;
                let mut whole = Vec::new();
                report_windowed(&args, &mut whole, 1 << 30).unwrap();
                let text = String::from_utf8_lossy(&whole);
                assert!(text.contains("inner();"), "{text}");
                assert!(text.contains("LOST 5 EVENTS"), "{text}");
                for window in [1, 2, 3, 7, 100] {
                    let mut part = Vec::new();
                    report_windowed(&args, &mut part, window).unwrap();
                    assert!(part == whole, "window {window}, cpu {cpu:?}, {options:?}");
                }
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
