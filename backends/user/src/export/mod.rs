//! Exporters: a capture (the tracefs-like directory `ftrace report` reads, see
//! [`crate::report`]) written in other tools' formats.
//!
//! - [`tracedat`]: trace-cmd's `trace.dat` (version 6), read by `trace-cmd report` and
//!   KernelShark; the raw pages go in as they are;
//! - [`uftrace`]: a `uftrace.data` directory, read by `uftrace replay`/`report`/`dump`;
//! - [`chrome`]: Chrome trace-event JSON, loaded by Perfetto UI and `chrome://tracing`.
//!
//! Both kinds of input are captures: a kernel's raw pages as `ftrace report --raw-dir` takes
//! them, and a recording made by `ftrace record` (which writes the same capture files beside its
//! per-thread buffers, and whose `<pid>.<n>/` directories also tell which process each thread
//! belongs to). Invariant: an exporter never invents events: every event it writes is one
//! decoded from the capture's pages (with the capture's own event ids mapped by name), in
//! timestamp order per CPU.

pub mod chrome;
pub mod tracedat;
pub mod uftrace;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};

use ftrace_core::EventId;
use ftrace_core::entry::{FtraceEntry, FtraceGraphEntEntry, Pod, TraceEntry};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_ringbuf::page::{DEFAULT_PAGE_SIZE, Page};

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

/// A capture directory loaded in memory: the files trace-cmd embeds, and the raw pages.
#[derive(Clone, Debug)]
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
    /// `kallsyms` text.
    pub kallsyms: String,
    /// `saved_cmdlines` text.
    pub cmdlines: String,
    /// `trace_clock` listing (`[local] global ...`).
    pub trace_clock: String,
    /// The tracer that recorded it.
    pub tracer: String,
    /// Raw pages per CPU (index = CPU number; a CPU without a directory has none).
    pub cpus: Vec<Vec<u8>>,
    /// Thread id to process id, from a recording's `<pid>.<n>/` directories (empty for a
    /// kernel capture: threads then count as their own process).
    pub tgids: HashMap<i32, i32>,
    /// Process id to executable path, from a recording's `meta` files.
    pub exes: HashMap<i32, String>,
    /// For a recording with the `x86-tsc` clock: the TSC to CLOCK_MONOTONIC conversion its
    /// agents' start and exit readings calibrate (what [`Capture::ns`] applies).
    pub tsc: Option<ftrace_agent::clock::TscConversion>,
}

/// The events `ftrace-core` supplies formats for when a capture has none.
const BUILTIN_FORMATS: [EventId; 4] = [
    EventId::Function,
    EventId::FuncgraphEntry,
    EventId::FuncgraphExit,
    EventId::Print,
];

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

impl Capture {
    /// Reads the capture in `dir`.
    pub fn read(dir: &Path) -> Result<Self, ExportError> {
        if !dir.is_dir() {
            return Err(io_err(dir, "not a directory (the capture to export)"));
        }
        crate::capture::ensure_capture(dir).map_err(ExportError)?;
        let text = |rel: &str| -> Result<Option<String>, ExportError> {
            Ok(read_opt(&dir.join(rel))?.map(|b| String::from_utf8_lossy(&b).into_owned()))
        };
        let header_page = match text("events/header_page")? {
            Some(t) => t,
            None => {
                let mut s = String::new();
                let _ = ftrace_core::format::write_header_page(&mut s, DEFAULT_PAGE_SIZE);
                s
            }
        };
        let page_size = page_size_from_header(&header_page)
            .ok_or_else(|| io_err(&dir.join("events/header_page"), "no \"data\" field"))?;
        let header_event = match text("events/header_event")? {
            Some(t) => t,
            None => {
                let mut s = String::new();
                let _ = ftrace_core::format::write_header_event(&mut s);
                s
            }
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
        for id in BUILTIN_FORMATS {
            let f = ftrace_core::format::by_id(id).expect("built-in format");
            if !formats.iter().any(|x| x.name == f.name) {
                let mut t = String::new();
                let _ = f.write_to(&mut t);
                formats.push(FormatFile {
                    name: f.name.to_string(),
                    id: id.as_u16(),
                    text: t,
                });
            }
        }
        let kallsyms = text("kallsyms")?.ok_or_else(|| io_err(&dir.join("kallsyms"), "missing"))?;
        let cmdlines = text("saved_cmdlines")?.unwrap_or_default();
        let trace_clock = match text("trace_clock")? {
            Some(t) if t.contains('[') => t,
            Some(t) => format!("[{}]\n", t.trim()),
            None => "[local]\n".into(),
        };
        let tracer = text("tracer")?.map_or_else(|| "function".into(), |t| t.trim().to_string());
        let pdir = dir.join("per_cpu");
        let rd = std::fs::read_dir(&pdir).map_err(|e| io_err(&pdir, e))?;
        let mut nums: Vec<usize> = rd
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.strip_prefix("cpu")?.parse().ok())
            .collect();
        nums.sort_unstable();
        let Some(&last) = nums.last() else {
            return Err(io_err(&pdir, "no cpu<N> directories"));
        };
        let mut cpus = vec![Vec::new(); last + 1];
        for n in nums {
            let p = pdir.join(format!("cpu{n}/trace_pipe_raw"));
            let b = std::fs::read(&p).map_err(|e| io_err(&p, e))?;
            if b.len() % page_size != 0 {
                return Err(io_err(
                    &p,
                    format!("{} bytes: not whole {page_size}-byte pages", b.len()),
                ));
            }
            cpus[n] = b;
        }
        let (tgids, exes) = recording_tasks(dir);
        let tsc = if trace_clock.contains("[x86-tsc]") {
            recording_tsc(dir)
        } else {
            None
        };
        Ok(Capture {
            dir: dir.to_path_buf(),
            page_size,
            header_page,
            header_event,
            formats,
            kallsyms,
            cmdlines,
            trace_clock,
            tracer,
            cpus,
            tgids,
            exes,
            tsc,
        })
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

    /// Decodes every CPU's pages into events (ids mapped to ftrace-core's by name), sorted by
    /// timestamp, CPU order on ties.
    pub fn events(&self) -> Result<Vec<Ev>, ExportError> {
        let ids: HashMap<u16, EventId> = self
            .formats
            .iter()
            .filter_map(|f| Some((f.id, ftrace_core::format::by_name(&f.name)?.id)))
            .collect();
        let mut out = Vec::new();
        for (cpu, bytes) in self.cpus.iter().enumerate() {
            let path = self.dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"));
            for (n, chunk) in bytes.chunks(self.page_size).enumerate() {
                let base = n * self.page_size;
                let page = Page::new(chunk)
                    .map_err(|e| io_err(&path, format!("page at offset {base}: {e}")))?;
                let mut missed = page.missed_events();
                for ev in page.events() {
                    let ev = ev.map_err(|e| io_err(&path, format!("page at {base}: {e}")))?;
                    let Some(ent) = TraceEntry::read_from(ev.payload) else {
                        continue;
                    };
                    let Some(&id) = ids.get(&ent.type_) else {
                        return Err(io_err(
                            &path,
                            format!(
                                "offset {}: event id {} has no format",
                                base + ev.offset,
                                ent.type_
                            ),
                        ));
                    };
                    out.push(Ev {
                        cpu: cpu as u32,
                        ts: ev.ts,
                        pid: ent.pid,
                        id,
                        what: What::decode(id, ev.payload),
                        missed_before: std::mem::take(&mut missed),
                    });
                }
            }
        }
        out.sort_by_key(|e| (e.ts, e.cpu));
        Ok(out)
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
    /// What it is.
    pub id: EventId,
    /// What the event says (decoded once: a capture may hold millions).
    pub what: What,
    /// Events were lost on this CPU right before it.
    pub missed_before: bool,
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
    /// Any other event (or a truncated one).
    Other,
}

impl What {
    /// Decodes the payload (common header first) of an event of kind `id`.
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
    TscConversion::calibrate(first, last)
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
pub fn export(
    input: &Path,
    format: Format,
    output: &Path,
    trace_dat_version: u32,
) -> Result<(), ExportError> {
    let cap = Capture::read(input)?;
    match format {
        Format::Uftrace => uftrace::write(&cap, output),
        f => {
            let bytes = bytes(&cap, f, trace_dat_version)?;
            std::fs::write(output, bytes).map_err(|e| io_err(output, e))
        }
    }
}

/// The bytes of a single-file export (`trace.dat` or Chrome JSON).
fn bytes(cap: &Capture, format: Format, trace_dat_version: u32) -> Result<Vec<u8>, ExportError> {
    match format {
        Format::TraceDat if trace_dat_version == 7 => tracedat::write_v7(cap),
        Format::TraceDat => tracedat::write(cap),
        Format::Chrome => chrome::write(cap),
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
        Capture::read(&args.input)
            .and_then(|c| bytes(&c, args.format, args.file_version))
            .and_then(|b| {
                out.write_all(&b)
                    .and_then(|()| out.flush())
                    .map_err(|e| ExportError(format!("writing: {e}")))
            })
    } else {
        export(&args.input, args.format, &output, args.file_version)
    };
    match result {
        Ok(()) => 0,
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
