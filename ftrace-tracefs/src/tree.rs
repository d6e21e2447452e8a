//! The shape of the tree: which directories and files exist where, with which modes.
//!
//! One function, [`entries`], lists a directory; lookup is a search of that listing, so what
//! `ls` shows and what `open` finds can never disagree. The top level and every instance share
//! the per-instance part; the top level adds the top-level-only files.

use alloc::borrow::Cow;
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;

use ftrace_core::format::{FORMATS, TraceEventFormat};

use crate::backend::{FilterFile, PidFile, TracerOption};
use ftrace_tracers::TraceOptions;

/// A directory of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dir {
    /// The root of the top level or of an instance.
    Root,
    /// `options/`.
    Options,
    /// `per_cpu/`.
    PerCpu,
    /// `per_cpu/cpuN/`.
    Cpu(u32),
    /// `events/`.
    Events,
    /// `events/ftrace/`.
    EventsFtrace,
    /// `events/ftrace/<event>/` (index into `ftrace_core::format::FORMATS`).
    Event(usize),
    /// `events/<system>/` of registered events (index into the registry's systems).
    EventSystem(u16),
    /// `events/<system>/<event>/` of a registered event (its id).
    TraceEvent(u16),
    /// `instances/` (top level only).
    Instances,
    /// `trace_stat/` (top level, only with a profiler).
    TraceStat,
}

/// A file of the tree.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum File {
    /// `available_tracers`.
    AvailableTracers,
    /// `current_tracer`.
    CurrentTracer,
    /// `tracing_on`.
    TracingOn,
    /// `trace` or `per_cpu/cpuN/trace`.
    Trace(Option<u32>),
    /// `snapshot` or `per_cpu/cpuN/snapshot` (with a snapshot buffer).
    Snapshot(Option<u32>),
    /// `trace_pipe` or `per_cpu/cpuN/trace_pipe`.
    TracePipe(Option<u32>),
    /// `per_cpu/cpuN/trace_pipe_raw`.
    TracePipeRaw(u32),
    /// `trace_options`.
    TraceOptions,
    /// `options/<global flag>` (one flag of the word).
    Flag(TraceOptions),
    /// `options/<tracer option>`.
    TracerOpt(&'static str),
    /// A function-filter file.
    Filter(FilterFile),
    /// A pid-filter file.
    Pids(PidFile),
    /// `buffer_size_kb` or `per_cpu/cpuN/buffer_size_kb`.
    BufferSizeKb(Option<u32>),
    /// `buffer_total_size_kb`.
    BufferTotalSizeKb,
    /// `buffer_subbuf_size_kb`.
    BufferSubbufSizeKb,
    /// `buffer_percent`.
    BufferPercent,
    /// `free_buffer`.
    FreeBuffer,
    /// `per_cpu/cpuN/stats`.
    Stats(u32),
    /// `trace_clock`.
    TraceClock,
    /// `timestamp_mode`.
    TimestampMode,
    /// `trace_marker`.
    TraceMarker,
    /// `trace_marker_raw`.
    TraceMarkerRaw,
    /// `tracing_cpumask`.
    TracingCpumask,
    /// `tracing_max_latency`.
    TracingMaxLatency,
    /// `error_log`.
    ErrorLog,
    /// `events/header_page`.
    HeaderPage,
    /// `events/header_event`.
    HeaderEvent,
    /// `events/ftrace/<event>/format`.
    EventFormat(usize),
    /// `events/ftrace/<event>/id`.
    EventIdFile(usize),
    /// `available_events` (top level).
    AvailableEvents,
    /// `set_event`.
    SetEvent,
    /// `events/enable`.
    EventsEnable,
    /// `events/<system>/enable`.
    SystemEnable(u16),
    /// `events/<system>/filter`.
    SystemFilter(u16),
    /// `events/<system>/<event>/enable`.
    TraceEventEnable(u16),
    /// `events/<system>/<event>/filter`.
    TraceEventFilter(u16),
    /// `events/<system>/<event>/trigger`.
    TraceEventTrigger(u16),
    /// `events/<system>/<event>/format`.
    TraceEventFormat(u16),
    /// `events/<system>/<event>/hist`: the event's hist triggers' tables.
    TraceEventHist(u16),
    /// `events/<system>/<event>/id`.
    TraceEventId(u16),
    /// `README` (top level).
    Readme,
    /// `saved_cmdlines` (top level).
    SavedCmdlines,
    /// `saved_cmdlines_size` (top level).
    SavedCmdlinesSize,
    /// `saved_tgids` (top level).
    SavedTgids,
    /// `tracing_thresh` (top level).
    TracingThresh,
    /// `max_graph_depth` (top level).
    MaxGraphDepth,
    /// `available_filter_functions` (top level).
    AvailableFilterFunctions,
    /// `available_filter_functions_addrs` (top level).
    AvailableFilterFunctionsAddrs,
    /// `enabled_functions` (top level).
    EnabledFunctions,
    /// `touched_functions` (top level).
    TouchedFunctions,
    /// `dyn_ftrace_total_info` (top level).
    DynFtraceTotalInfo,
    /// `function_profile_enabled` (top level, with a profiler).
    FunctionProfileEnabled,
    /// `trace_stat/function<cpu>` (top level, with a profiler).
    TraceStatFunction(u32),
    /// `kprobe_events` (top level).
    KprobeEvents,
    /// `dynamic_events` (top level).
    DynamicEvents,
}

/// A node: a directory or a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Node {
    /// A directory.
    Dir(Dir),
    /// A file.
    File(File),
}

/// One directory entry as `readdir` returns it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirEntry {
    /// The entry's name.
    pub name: Cow<'static, str>,
    /// What it is.
    pub node: Node,
    /// Permission bits as tracefs shows them (`0o640`, `0o440`, `0o220`...).
    pub mode: u16,
}

/// `TRACE_MODE_WRITE`: `-rw-r-----`.
pub const MODE_RW: u16 = 0o640;
/// `TRACE_MODE_READ`: `-r--r-----`.
pub const MODE_RO: u16 = 0o440;
/// `trace_marker`, `trace_marker_raw`: `--w--w----`.
pub const MODE_MARKER: u16 = 0o220;
/// `free_buffer`: `--w-------`.
pub const MODE_WO: u16 = 0o200;
/// Most directories: `drwxr-x---`.
pub const MODE_DIR: u16 = 0o750;
/// `events/` and below: `drwxr-xr-x`.
pub const MODE_EVENTS_DIR: u16 = 0o755;

/// What a listing depends on besides the directory.
pub struct ListCtx<'a> {
    /// Listing the top level (not an instance).
    pub top_level: bool,
    /// Number of CPUs.
    pub nr_cpus: u32,
    /// Every tracer option of the backend.
    pub tracer_options: &'a [TracerOption],
    /// Instance names (for `instances/`).
    pub instances: &'a [&'a str],
    /// Dynamic ftrace call-site records exist (`available_filter_functions` & co).
    pub functions: bool,
    /// A profiler exists (`function_profile_enabled`, `trace_stat/`).
    pub profiler: bool,
    /// The instance has a snapshot buffer (`snapshot`, `per_cpu/cpuN/snapshot`).
    pub snapshot: bool,
    /// The instance runs the function tracer (`set_ftrace_filter`, `set_ftrace_notrace`,
    /// `set_ftrace_pid`, `set_ftrace_notrace_pid`:
    /// [`TraceBackend::has_function_tracer`](crate::TraceBackend::has_function_tracer)).
    pub function_tracer: bool,
    /// The registered trace events.
    pub events: &'a [TraceEventFormat],
    /// The subsystems of registered events (a subsystem without events is not listed).
    pub systems: &'a [&'static str],
}

fn file(name: &'static str, f: File, mode: u16) -> DirEntry {
    DirEntry {
        name: Cow::Borrowed(name),
        node: Node::File(f),
        mode,
    }
}

fn dir(name: impl Into<Cow<'static, str>>, d: Dir, mode: u16) -> DirEntry {
    DirEntry {
        name: name.into(),
        node: Node::Dir(d),
        mode,
    }
}

/// Lists `d`, sorted by name.
pub fn entries(d: Dir, cx: &ListCtx<'_>) -> Vec<DirEntry> {
    let mut v = Vec::new();
    match d {
        Dir::Root => {
            v.extend([
                file("available_tracers", File::AvailableTracers, MODE_RO),
                file("current_tracer", File::CurrentTracer, MODE_RW),
                file("tracing_on", File::TracingOn, MODE_RW),
                file("trace", File::Trace(None), MODE_RW),
                file("trace_pipe", File::TracePipe(None), MODE_RO),
                file("trace_options", File::TraceOptions, MODE_RW),
                dir("options", Dir::Options, MODE_DIR),
                file("buffer_size_kb", File::BufferSizeKb(None), MODE_RW),
                file("buffer_total_size_kb", File::BufferTotalSizeKb, MODE_RO),
                file("buffer_subbuf_size_kb", File::BufferSubbufSizeKb, MODE_RW),
                file("buffer_percent", File::BufferPercent, MODE_RW),
                file("free_buffer", File::FreeBuffer, MODE_WO),
                dir("per_cpu", Dir::PerCpu, MODE_DIR),
                file("trace_clock", File::TraceClock, MODE_RW),
                file("timestamp_mode", File::TimestampMode, MODE_RO),
                file("trace_marker", File::TraceMarker, MODE_MARKER),
                file("trace_marker_raw", File::TraceMarkerRaw, MODE_MARKER),
                file("tracing_cpumask", File::TracingCpumask, MODE_RW),
                file("tracing_max_latency", File::TracingMaxLatency, MODE_RW),
                file("error_log", File::ErrorLog, MODE_RW),
                dir("events", Dir::Events, MODE_EVENTS_DIR),
                file("set_event", File::SetEvent, MODE_RW),
                file("set_event_pid", File::Pids(PidFile::Event), MODE_RW),
                file(
                    "set_event_notrace_pid",
                    File::Pids(PidFile::EventNotrace),
                    MODE_RW,
                ),
            ]);
            if cx.snapshot {
                v.push(file("snapshot", File::Snapshot(None), MODE_RW));
            }
            if cx.function_tracer {
                v.extend([
                    file(
                        "set_ftrace_filter",
                        File::Filter(FilterFile::Filter),
                        MODE_RW,
                    ),
                    file(
                        "set_ftrace_notrace",
                        File::Filter(FilterFile::Notrace),
                        MODE_RW,
                    ),
                    file("set_ftrace_pid", File::Pids(PidFile::Ftrace), MODE_RW),
                    file(
                        "set_ftrace_notrace_pid",
                        File::Pids(PidFile::FtraceNotrace),
                        MODE_RW,
                    ),
                ]);
            }
            if cx.top_level {
                v.extend([
                    file("README", File::Readme, MODE_RO),
                    file("available_events", File::AvailableEvents, MODE_RO),
                    file("saved_cmdlines", File::SavedCmdlines, MODE_RO),
                    file("saved_cmdlines_size", File::SavedCmdlinesSize, MODE_RW),
                    file("saved_tgids", File::SavedTgids, MODE_RO),
                    file("tracing_thresh", File::TracingThresh, MODE_RW),
                    file("max_graph_depth", File::MaxGraphDepth, MODE_RW),
                    file(
                        "set_graph_function",
                        File::Filter(FilterFile::GraphFunction),
                        MODE_RW,
                    ),
                    file(
                        "set_graph_notrace",
                        File::Filter(FilterFile::GraphNotrace),
                        MODE_RW,
                    ),
                    file("kprobe_events", File::KprobeEvents, MODE_RW),
                    file("dynamic_events", File::DynamicEvents, MODE_RW),
                    dir("instances", Dir::Instances, MODE_DIR),
                ]);
                if cx.functions {
                    v.extend([
                        file(
                            "available_filter_functions",
                            File::AvailableFilterFunctions,
                            MODE_RO,
                        ),
                        file(
                            "available_filter_functions_addrs",
                            File::AvailableFilterFunctionsAddrs,
                            MODE_RO,
                        ),
                        file("enabled_functions", File::EnabledFunctions, MODE_RO),
                        file("touched_functions", File::TouchedFunctions, MODE_RO),
                        file("dyn_ftrace_total_info", File::DynFtraceTotalInfo, MODE_RO),
                    ]);
                }
                if cx.profiler {
                    v.push(file(
                        "function_profile_enabled",
                        File::FunctionProfileEnabled,
                        MODE_RW,
                    ));
                    v.push(dir("trace_stat", Dir::TraceStat, MODE_DIR));
                }
            }
        }
        Dir::Options => {
            for (name, flag) in TraceOptions::NAMES {
                if cx.top_level || !TraceOptions::TOP_LEVEL.contains(flag) {
                    v.push(file(name, File::Flag(flag), MODE_RW));
                }
            }
            for o in cx.tracer_options {
                if !v.iter().any(|e| e.name == o.name) {
                    v.push(file(o.name, File::TracerOpt(o.name), MODE_RW));
                }
            }
        }
        Dir::PerCpu => {
            for cpu in 0..cx.nr_cpus {
                v.push(dir(format!("cpu{cpu}"), Dir::Cpu(cpu), MODE_DIR));
            }
        }
        Dir::Cpu(cpu) => {
            v.extend([
                file("buffer_size_kb", File::BufferSizeKb(Some(cpu)), MODE_RW),
                file("stats", File::Stats(cpu), MODE_RO),
                file("trace", File::Trace(Some(cpu)), MODE_RW),
                file("trace_pipe", File::TracePipe(Some(cpu)), MODE_RO),
                file("trace_pipe_raw", File::TracePipeRaw(cpu), MODE_RO),
            ]);
            if cx.snapshot {
                v.push(file("snapshot", File::Snapshot(Some(cpu)), MODE_RW));
            }
        }
        Dir::Events => {
            v.extend([
                file("header_page", File::HeaderPage, MODE_RO),
                file("header_event", File::HeaderEvent, MODE_RO),
                dir("ftrace", Dir::EventsFtrace, MODE_EVENTS_DIR),
                file("enable", File::EventsEnable, MODE_RW),
            ]);
            for (i, sys) in cx.systems.iter().enumerate() {
                if cx.events.iter().any(|e| e.system == *sys) {
                    v.push(dir(*sys, Dir::EventSystem(i as u16), MODE_EVENTS_DIR));
                }
            }
        }
        Dir::EventSystem(i) => {
            let sys = cx.systems.get(usize::from(i)).copied().unwrap_or("");
            v.extend([
                file("enable", File::SystemEnable(i), MODE_RW),
                file("filter", File::SystemFilter(i), MODE_RW),
            ]);
            for e in cx.events.iter().filter(|e| e.system == sys) {
                v.push(dir(e.name, Dir::TraceEvent(e.id), MODE_EVENTS_DIR));
            }
        }
        Dir::TraceEvent(id) => v.extend([
            file("enable", File::TraceEventEnable(id), MODE_RW),
            file("filter", File::TraceEventFilter(id), MODE_RW),
            file("format", File::TraceEventFormat(id), MODE_RO),
            file("hist", File::TraceEventHist(id), MODE_RO),
            file("id", File::TraceEventId(id), MODE_RO),
            file("trigger", File::TraceEventTrigger(id), MODE_RW),
        ]),
        Dir::EventsFtrace => {
            for (i, f) in FORMATS.iter().enumerate() {
                v.push(dir(f.name, Dir::Event(i), MODE_EVENTS_DIR));
            }
        }
        Dir::Event(i) => v.extend([
            file("format", File::EventFormat(i), MODE_RO),
            file("id", File::EventIdFile(i), MODE_RO),
        ]),
        Dir::Instances => {
            for name in cx.instances {
                v.push(dir(String::from(*name), Dir::Root, MODE_DIR));
            }
        }
        Dir::TraceStat => {
            for cpu in 0..cx.nr_cpus {
                v.push(DirEntry {
                    name: Cow::Owned(format!("function{cpu}")),
                    node: Node::File(File::TraceStatFunction(cpu)),
                    mode: MODE_RO,
                });
            }
        }
    }
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}
