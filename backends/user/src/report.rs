//! `ftrace report`: an offline reader of raw kernel captures.
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
use ftrace_tracers::function_graph::FunctionGraphTracer;
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::nop::NopTracer;
use ftrace_tracers::output::graph::GraphCpuState;
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames};
use ftrace_tracers::tracer::Tracer;
use ftrace_tracers::{ClockId, EventRef, Missed, Options, TraceIter, TraceOptions};

use crate::export::page_size_from_header;

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

struct Decoded {
    /// Per CPU: (ts, entry bytes with our ids, missed before it).
    cpus: Vec<Vec<(u64, Vec<u8>, Missed)>>,
    lost_known: u64,
    lost_any: bool,
}

fn decode_cpu(
    path: &Path,
    bytes: &[u8],
    page_size: usize,
    ids: &HashMap<u16, u16>,
    out: &mut Vec<(u64, Vec<u8>, Missed)>,
    lost_known: &mut u64,
    lost_any: &mut bool,
) -> Result<(), ReportError> {
    if bytes.len() % page_size != 0 {
        let start = bytes.len() - bytes.len() % page_size;
        return Err(err(
            path,
            Some(start as u64),
            format!(
                "truncated page: {} bytes where a {page_size}-byte page starts",
                bytes.len() - start
            ),
        ));
    }
    for (n, chunk) in bytes.chunks(page_size).enumerate() {
        let base = (n * page_size) as u64;
        let page = Page::new(chunk).map_err(|e| page_error(path, base, &e))?;
        let mut missed = if page.missed_events() {
            *lost_any = true;
            match page.missed_count() {
                Some(c) => {
                    *lost_known += c;
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
            if EventId::from_u16(id).is_none() {
                return Err(err(path, Some(at), format!("unknown event id {kid}")));
            }
            let mut data = ev.payload.to_vec();
            data[..2].copy_from_slice(&id.to_le_bytes());
            out.push((ev.ts, data, missed));
            missed = Missed::None;
        }
    }
    Ok(())
}

fn page_error(path: &Path, base: u64, e: &PageError) -> ReportError {
    let off = match *e {
        PageError::TooShort { .. } => 0,
        PageError::CommitTooLarge { .. } => 8,
        PageError::Truncated { offset, .. } | PageError::Corrupt { offset, .. } => offset,
    };
    err(path, Some(base + off as u64), e.to_string())
}

/// The largest CPU count a capture may name (the kernel's `CONFIG_NR_CPUS` maximum): the
/// per-CPU tables are sized from `per_cpu/cpuN` names.
const MAX_CPUS: u32 = 8192;

fn decode_dir(dir: &Path, page_size: usize) -> Result<Decoded, ReportError> {
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
    let ids = id_map(dir)?;
    let nr = *cpus.last().unwrap() as usize + 1;
    let mut d = Decoded {
        cpus: (0..nr).map(|_| Vec::new()).collect(),
        lost_known: 0,
        lost_any: false,
    };
    for cpu in cpus {
        let path = pdir.join(format!("cpu{cpu}/trace_pipe_raw"));
        let bytes = std::fs::read(&path).map_err(|e| err(&path, None, e.to_string()))?;
        decode_cpu(
            &path,
            &bytes,
            page_size,
            &ids,
            &mut d.cpus[cpu as usize],
            &mut d.lost_known,
            &mut d.lost_any,
        )?;
    }
    Ok(d)
}

/// Runs the report: the bytes the kernel's `trace` (or `per_cpu/cpuN/trace`) file would hold.
pub fn report(args: &ReportArgs) -> Result<Vec<u8>, ReportError> {
    let dir = args.raw_dir.as_path();
    if !dir.is_dir() {
        return Err(err(dir, None, "not a directory (the capture to report)"));
    }
    let kpath = dir.join("kallsyms");
    let syms = SortedSymbols::from_kallsyms(&read_text(&kpath)?)
        .map_err(|e| err(&kpath, None, e.to_string()))?;
    let cpath = dir.join("saved_cmdlines");
    let cmdlines = match read_optional(&cpath)? {
        Some(t) => SavedCmdlines::parse(&t)
            .map_err(|(line, why)| err(&cpath, None, format!("line {line}: {why}")))?,
        None => SavedCmdlines::default(),
    };
    let clk_path = dir.join("trace_clock");
    let clock = match read_optional(&clk_path)? {
        Some(t) => ClockId::parse_listing(&t)
            .ok_or_else(|| err(&clk_path, None, format!("unknown clock {:?}", t.trim())))?,
        None => ClockId::Local,
    };
    let tracer = read_optional(&dir.join("tracer"))?
        .map(|t| t.trim().to_string())
        .unwrap_or_else(|| "function".into());
    let (nop, function, graph) = (NopTracer, FunctionTracer::new(), FunctionGraphTracer::new());
    let current: &dyn Tracer = match tracer.as_str() {
        "function_graph" => &graph,
        "function" => &function,
        "nop" => &nop,
        other => {
            return Err(err(
                &dir.join("tracer"),
                None,
                format!("unsupported tracer {other:?} (function, function_graph, nop)"),
            ));
        }
    };
    let hp = dir.join("events/header_page");
    let page_size = match read_optional(&hp)? {
        Some(t) => page_size_from_header(&t)
            .ok_or_else(|| err(&hp, None, "no \"data\" field with offset and size"))?,
        None => ftrace_ringbuf::page::DEFAULT_PAGE_SIZE,
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

    let decoded = decode_dir(dir, page_size)?;
    let nr_cpus = decoded.cpus.len() as u32;
    if let Some(cpu) = args.cpu {
        if cpu >= nr_cpus || !dir.join(format!("per_cpu/cpu{cpu}")).is_dir() {
            return Err(err(
                &dir.join(format!("per_cpu/cpu{cpu}")),
                None,
                "no such CPU in the capture",
            ));
        }
    }
    let mut lists = EventLists::new(nr_cpus);
    for (cpu, evs) in decoded.cpus.iter().enumerate() {
        for (ts, data, missed) in evs {
            let mut ev = EventRef::new(cpu as u32, *ts, data);
            ev.missed = *missed;
            lists.push(ev);
        }
    }
    let entries = lists.len() as u64;
    let time_start = decoded
        .cpus
        .iter()
        .filter_map(|v| v.first().map(|e| e.0))
        .min()
        .unwrap_or(0);
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
        time_start,
        nr_cpu_ids: nr_cpus,
        irq_text,
    };
    let info = HeaderInfo {
        tracer: &tracer,
        entries,
        written: entries + decoded.lost_known,
        online_cpus: nr_cpus,
        latency: LatencyInfo {
            uts_release: &args.uts_release,
            ..LatencyInfo::default()
        },
    };
    let style = current.output_style(opts.tracer);
    let mut state = vec![GraphCpuState::INIT; nr_cpus as usize];
    let lost = if decoded.lost_any {
        Overruns::Lost
    } else {
        Overruns::None
    };
    let mut w = TraceWriter::new(style, &mut state, lost);
    let mut it = TraceIter::new(&mut lists, args.cpu);
    let mut out = Vec::new();
    w.write_trace(&mut out, &env, Some(&info), &mut it)
        .map_err(|_| err(dir, None, "formatting failed"))?;
    Ok(out)
}
