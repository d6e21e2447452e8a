//! What the tree needs from the tracing machinery and from the platform that serves it.
//!
//! The tree owns the file interface (names, modes, parsing, read-back text of its own values,
//! errno, `error_log`, instances, per-open state). Everything else is asked through these traits:
//! [`TraceBackend`] (one per instance: tracers, ring buffer, readers, function filters; bound to
//! ftrace-tracers, ftrace-ringbuf and the ftrace-core dispatcher) and [`Host`] (what only the
//! server knows: CPU count, clocks, memory, the call-site records of ftrace-patch).
//! Invariant: a backend method that returns `Err` has changed nothing, so the tree can promise
//! that a rejected write leaves all state as it was.

use alloc::boxed::Box;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use ftrace_core::Errno;
use ftrace_core::format::TraceEventFormat;
use ftrace_core::symbols::SymbolTable;

use crate::event_filter::EventFilter;
use crate::triggers::Trigger;

use ftrace_tracers::TraceOptions;

/// A function-filter file (`set_ftrace_filter` & co, Linux `ftrace_regex_open` users).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FilterFile {
    /// `set_ftrace_filter`: trace only these (and function commands such as `:traceoff`).
    Filter,
    /// `set_ftrace_notrace`: never trace these.
    Notrace,
    /// `set_graph_function`: function_graph starts at these.
    GraphFunction,
    /// `set_graph_notrace`: function_graph skips these and their callees.
    GraphNotrace,
}

impl FilterFile {
    /// The file's name in tracefs.
    pub const fn name(self) -> &'static str {
        match self {
            FilterFile::Filter => "set_ftrace_filter",
            FilterFile::Notrace => "set_ftrace_notrace",
            FilterFile::GraphFunction => "set_graph_function",
            FilterFile::GraphNotrace => "set_graph_notrace",
        }
    }

    /// What an empty file reads as.
    pub const fn empty_text(self) -> &'static str {
        match self {
            FilterFile::Filter | FilterFile::GraphFunction => "#### all functions enabled ####\n",
            FilterFile::Notrace | FilterFile::GraphNotrace => "#### no functions disabled ####\n",
        }
    }

    /// Whether it is one of function_graph's files.
    pub(crate) fn is_graph(self) -> bool {
        matches!(self, FilterFile::GraphFunction | FilterFile::GraphNotrace)
    }
}

/// A pid-filter file.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PidFile {
    /// `set_ftrace_pid`: trace only these tasks.
    Ftrace,
    /// `set_ftrace_notrace_pid`: never trace these tasks.
    FtraceNotrace,
    /// `set_event_pid`: record events of these tasks only.
    Event,
    /// `set_event_notrace_pid`: never record events of these tasks.
    EventNotrace,
}

/// A value the tree parsed and validated and now hands to the backend.
///
/// The backend may still refuse it (the tracer vetoes a flag, a clock is unusable): the tree
/// then keeps its old value and returns the error.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param<'a> {
    /// `tracing_on`: record into the ring buffer or not.
    TracingOn(bool),
    /// `trace_options` / `options/*`: the whole new global flag word.
    Flags(TraceOptions),
    /// `buffer_percent`: reader wake-up watermark, 0..=100.
    BufferPercent(u32),
    /// `tracing_cpumask`: the CPUs to trace (64-bit words, bit n = CPU n).
    CpuMask(&'a [u64]),
    /// `trace_clock`: the clock to stamp events with (the buffers are cleared).
    Clock(&'a str),
    /// `set_ftrace_pid` / `set_ftrace_notrace_pid` / `set_event_pid` /
    /// `set_event_notrace_pid`: the whole new sorted list.
    Pids(PidFile, &'a [u32]),
    /// `tracing_max_latency`, in ns.
    MaxLatency(u64),
    /// `tracing_thresh` (top level), in ns; 0 = off.
    TracingThresh(u64),
    /// `max_graph_depth` (top level); 0 = unlimited.
    MaxGraphDepth(u32),
    /// `saved_cmdlines_size` (top level): the number of pid→comm slots to keep.
    SavedCmdlines(u32),
    /// `function_profile_enabled` (top level).
    ProfileEnabled(bool),
}

/// One tracer-specific option (`options/funcgraph-cpu`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TracerOption {
    /// The option's name.
    pub name: &'static str,
    /// The tracer that owns it.
    pub tracer: &'static str,
    /// Its current value.
    pub value: bool,
}

/// What a write to `snapshot` (or `per_cpu/cpuN/snapshot`) asks, by the number written
/// (`CONFIG_TRACER_SNAPSHOT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotCommand {
    /// `0`: clear and free the snapshot buffer (all CPUs only: `EINVAL` per CPU).
    Free,
    /// `1`: allocate the snapshot buffer (the main buffer's size) if needed and swap it with
    /// the main buffer; tracing continues in the other one.
    Take,
    /// Any other number: empty the snapshot buffer, neither allocating nor freeing it.
    Clear,
}

impl SnapshotCommand {
    /// The command a written number asks.
    pub const fn from_value(v: u64) -> Self {
        match v {
            0 => SnapshotCommand::Free,
            1 => SnapshotCommand::Take,
            _ => SnapshotCommand::Clear,
        }
    }
}

/// A source of text (or raw pages) that a file's reads are served from.
///
/// For `trace` it is a snapshot iterator (`false` = the end); for `trace_pipe` and
/// `trace_pipe_raw` it consumes (`false` = nothing available *now*: a blocking reader waits).
pub trait Reader: Send {
    /// Appends the next piece (one event's text, the header, one sub-buffer page) to `out`.
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool;
}

/// A [`Reader`] that hands out one prepared text as a single chunk, then ends: a `trace`
/// snapshot a backend renders whole at open.
#[derive(Debug)]
pub struct TextReader(Option<Vec<u8>>);

impl TextReader {
    /// A reader of `text`.
    pub fn new(text: Vec<u8>) -> Self {
        TextReader(Some(text))
    }

    /// A reader that ends at once (no data, not even an empty chunk).
    pub fn empty() -> Self {
        TextReader(None)
    }
}

impl Reader for TextReader {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        match self.0.take() {
            Some(t) => {
                out.extend_from_slice(&t);
                true
            }
            None => false,
        }
    }
}

/// An open function-filter file being written (the dispatcher's `ftrace_regex` session).
pub trait FilterEdit: Send {
    /// Parses and applies the start of `data` to the pending filter and returns how many bytes
    /// it took (like `ftrace_regex_write`, it may take one token per call: the writer writes
    /// the rest again). A bad token is rejected with its errno and leaves the pending filter
    /// as it was.
    fn write(&mut self, data: &[u8]) -> Result<usize, Errno>;
    /// Publishes the pending filter (called once, at `close`).
    fn release(self: Box<Self>) -> Result<(), Errno>;
}

/// The tracing machinery of one instance (top level or `instances/<name>`).
///
/// `Send` (as are [`Reader`] and [`FilterEdit`]) so that a multi-threaded server can move the
/// whole tree behind one lock.
pub trait TraceBackend: Send {
    /// Tracers usable in this instance, in the order `available_tracers` lists them.
    fn tracers(&self) -> Vec<&'static str>;
    /// The current tracer's name.
    fn current_tracer(&self) -> &'static str;
    /// Switches tracer (the old one is reset, the new one's `init` error is returned). A real
    /// switch starts the new tracer on empty buffers, as Linux's `tracer_init` does
    /// (`tracing_reset_online_cpus`); the same name is a no-op.
    fn set_tracer(&mut self, name: &str) -> Result<(), Errno>;
    /// Every registered tracer's options (the `options/` directory lists them all).
    fn tracer_options(&self) -> Vec<TracerOption>;
    /// Sets a tracer option by name; `EINVAL` if unknown or refused.
    fn set_tracer_option(&mut self, name: &str, on: bool) -> Result<(), Errno>;
    /// Applies a validated parameter.
    fn set_param(&mut self, param: Param<'_>) -> Result<(), Errno>;

    /// Whether this instance runs the function tracer, whose files it then serves:
    /// `set_ftrace_filter`, `set_ftrace_notrace` (Linux creates them with an instance's
    /// function files, `ftrace_create_function_files`), `set_ftrace_pid` and
    /// `set_ftrace_notrace_pid` (`ftrace_init_tracefs`). A backend whose instance has no
    /// function tracer answers `false` and the files are absent, as on a kernel without it,
    /// rather than present and filtering nothing. The default: it has.
    fn has_function_tracer(&self) -> bool {
        true
    }

    /// Whether the registered trace events can be enabled in this instance. A backend that
    /// cannot record them there answers `false`: the instance's `events/` then holds only
    /// what it has (the headers, the `ftrace/` formats, an `enable` with nothing to switch),
    /// so that `events/<system>/` is absent rather than present with an `enable` every write
    /// of 1 to which fails, and `set_event` matches nothing (`EINVAL`). The default: they can.
    fn has_events(&self) -> bool {
        true
    }

    /// Whether the ring buffer records now (`tracer_tracing_is_on()`), for a backend whose
    /// recording can change behind the tree: a `traceoff` function probe or event trigger
    /// turns it off without a write of `tracing_on`, and the file must read what the buffer
    /// does. `None` (the default): the backend has no such state, the tree's own copy (set
    /// through [`Param::TracingOn`]) is the truth. A backend that answers `Some` still gets
    /// every change through [`TraceBackend::set_param`].
    fn tracing_on(&self) -> Option<bool> {
        None
    }

    /// Resizes one CPU's buffer (or all) to hold `bytes` of data (`ENOMEM` when impossible).
    fn resize(&mut self, cpu: Option<u32>, bytes: u64) -> Result<(), Errno>;
    /// The data bytes a CPU's buffer holds now (`ring_buffer_size()`).
    fn buffer_bytes(&self, cpu: u32) -> u64;
    /// The sub-buffer size in bytes, header included (4096 by default).
    fn subbuf_size(&self) -> u32;
    /// Changes the sub-buffer size (a power-of-two number of pages); discards the data.
    fn set_subbuf_size(&mut self, bytes: u32) -> Result<(), Errno>;
    /// Discards the data of one CPU (or all).
    fn clear(&mut self, cpu: Option<u32>);
    /// Writes `per_cpu/cpuN/stats`.
    fn write_stats(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result;

    /// Opens the non-consuming `trace` text of one CPU (or all, merged by timestamp).
    fn open_trace(&mut self, cpu: Option<u32>) -> Box<dyn Reader>;
    /// Whether the backend has a snapshot buffer (`snapshot`, `per_cpu/cpuN/snapshot`).
    fn has_snapshot(&self) -> bool {
        false
    }
    /// A write to `snapshot` (`cpu`: `per_cpu/cpuN/snapshot`); an error changes nothing.
    fn snapshot(&mut self, _cpu: Option<u32>, _cmd: SnapshotCommand) -> Result<(), Errno> {
        Err(Errno::ENODEV)
    }
    /// Opens the `snapshot` text of one CPU (or all): the snapshot buffer as `trace` prints
    /// the main one, or the snapshot help when it holds nothing.
    fn open_snapshot(&mut self, _cpu: Option<u32>) -> Box<dyn Reader> {
        Box::new(TextReader::empty())
    }
    /// Opens a consuming `trace_pipe` text reader.
    fn open_pipe(&mut self, cpu: Option<u32>) -> Box<dyn Reader>;
    /// Opens a consuming `trace_pipe_raw` reader (whole sub-buffer pages).
    fn open_pipe_raw(&mut self, cpu: u32) -> Box<dyn Reader>;

    /// `trace_marker`: records a print event with `text` as written (at most what one event
    /// holds, [`marker_text_max`](crate::marker_text_max); ftrace-tracers'
    /// `trace_marker_write` adds the `\n` when the text lacks one, as Linux does).
    fn write_marker(&mut self, text: &[u8]) -> Result<(), Errno>;
    /// `trace_marker_raw`: records a raw-data event (`id` then `data`).
    fn write_marker_raw(&mut self, id: u32, data: &[u8]) -> Result<(), Errno>;

    /// Starts writing a filter file; [`WriteMode::Truncate`](crate::WriteMode::Truncate)
    /// (`O_TRUNC`) starts from an empty filter.
    fn open_filter(
        &mut self,
        which: FilterFile,
        mode: crate::WriteMode,
    ) -> Result<Box<dyn FilterEdit>, Errno>;
    /// Writes a filter file's read-back text.
    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result;

    /// `saved_cmdlines` (top level): `"%d %s\n"` per remembered pid.
    fn write_saved_cmdlines(&self, w: &mut dyn fmt::Write) -> fmt::Result;
    /// `saved_tgids` (top level): `"%d %d\n"` pid, tgid.
    fn write_saved_tgids(&self, w: &mut dyn fmt::Write) -> fmt::Result;

    /// A registered trace event's state changed in this instance (`enable`, `set_event`,
    /// a trigger's soft mode). The backend arms or disarms the event's tracepoint
    /// (`enabled`), discards its records while `soft_disabled`, and runs its triggers while
    /// `triggers`. An `Err` refuses the change: the tree keeps the old state and returns it.
    /// The default accepts everything (a backend without trace events).
    fn set_event_state(
        &mut self,
        _event: &TraceEventFormat,
        _state: EventState,
    ) -> Result<(), Errno> {
        Ok(())
    }

    /// The event's filter changed (`None`: no filter in force).
    fn set_event_filter(&mut self, _event: &TraceEventFormat, _filter: Option<&EventFilter>) {}

    /// The event's triggers changed (the whole new list, in `trigger` file order). A backend
    /// that runs them builds a [`TriggerRunner`](crate::trigger_run::TriggerRunner) from it.
    /// An error (`ENOMEM` for a `snapshot` trigger's buffer) refuses the write: the tree
    /// gives the backend the old list back.
    fn set_event_triggers(
        &mut self,
        _event: &TraceEventFormat,
        _triggers: &[Trigger],
    ) -> Result<(), Errno> {
        Ok(())
    }

    /// Whether the event is soft-disabled now, for a backend whose triggers (or function
    /// commands) flip that bit (`enable_event` / `disable_event`): the event's `enable` file
    /// reads it (`1*` once an `enable_event` trigger fired) and the next edit of the events
    /// starts from it. `None` (the default): only the tree changes it.
    fn event_soft_disabled(&self, _event: &TraceEventFormat) -> Option<bool> {
        None
    }

    /// The events (`(system, name)`) the instance's `enable_event` / `disable_event`
    /// function commands act on, for a backend that runs them: the tree holds each in soft
    /// mode while a command names it. The default: none.
    fn probe_event_targets(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// The remaining counts of the event's triggers, in the order of the last
    /// [`TraceBackend::set_event_triggers`] list, for a backend that runs them
    /// ([`TriggerRunner::counts`](crate::trigger_run::TriggerRunner::counts)): the `trigger`
    /// file reads them (`traceoff:count=0` after it fired) and the next edit starts from
    /// them. `None` (the default): the counts never change behind the tree.
    fn event_trigger_counts(&self, _event: &TraceEventFormat) -> Option<Vec<i64>> {
        None
    }

    /// The event's `hist` file: each hist trigger's table as
    /// [`write_hist`](crate::hist::write_hist) prints it, for a backend that aggregates them
    /// (the instance). The default, a backend that does not, prints nothing.
    fn write_event_hist(&self, _event: &TraceEventFormat, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }

    /// `hist:...:clear`: empties the table of the event's hist trigger that
    /// [`Trigger::same_as`] `trigger` (the default: a backend without tables has nothing to do).
    fn clear_event_hist(&mut self, _event: &TraceEventFormat, _trigger: &Trigger) {}
}

/// What a backend is told about a trace event in one instance (the kernel's
/// `trace_event_file` flags that matter to whoever records the event).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventState {
    /// The tracepoint is armed (`EVENT_FILE_FL_ENABLED`).
    pub enabled: bool,
    /// Armed but not recording: a trigger holds it for `enable_event`
    /// (`EVENT_FILE_FL_SOFT_DISABLED`).
    pub soft_disabled: bool,
    /// The event has triggers to run (`EVENT_FILE_FL_TRIGGER_MODE`).
    pub triggers: bool,
}

/// The dynamic-ftrace call-site records (ftrace-patch) and the function profiler: top level.
pub trait FunctionRecords {
    /// `available_filter_functions` (`addrs`: `available_filter_functions_addrs`).
    fn write_available(&self, w: &mut dyn fmt::Write, addrs: bool) -> fmt::Result;
    /// `enabled_functions` (`touched`: `touched_functions`).
    fn write_enabled(&self, w: &mut dyn fmt::Write, touched: bool) -> fmt::Result;
    /// `dyn_ftrace_total_info`.
    fn write_total_info(&self, w: &mut dyn fmt::Write) -> fmt::Result;
    /// Whether a function profiler exists (`function_profile_enabled`, `trace_stat/`).
    fn has_profiler(&self) -> bool {
        false
    }
    /// `trace_stat/function<cpu>`.
    fn write_profile(&self, _cpu: u32, _w: &mut dyn fmt::Write) -> fmt::Result {
        Ok(())
    }
}

/// The number of sub-buffers a ring buffer of `bytes` needs (`ring_buffer_resize()`): whole
/// sub-buffers of `subbuf_data` data bytes each (4080 for 4 KiB pages), at least two.
///
/// This is how a backend turns a `buffer_size_kb` write into pages; `buffer_size_kb` then
/// reads back `pages * subbuf_data >> 10` (`1408` asked, `1410` read).
pub const fn ring_buffer_pages(bytes: u64, subbuf_data: u64) -> u64 {
    let pages = bytes.div_ceil(subbuf_data);
    if pages < 2 { 2 } else { pages }
}

/// The default `trace_buf_size`: 1441792 bytes per CPU (`TRACE_BUF_SIZE_DEFAULT`).
pub const TRACE_BUF_SIZE_DEFAULT: u64 = 1_441_792;

/// What only the server knows.
pub trait Host {
    /// Number of possible CPUs (`nr_cpu_ids`).
    fn nr_cpus(&self) -> u32;
    /// The local clock in ns, for `error_log` time stamps.
    fn local_clock_ns(&self) -> u64;
    /// The trace clocks available, in `trace_clock` order.
    fn trace_clocks(&self) -> &[&'static str];
    /// Index of the boot-time clock in [`Host::trace_clocks`].
    fn default_trace_clock(&self) -> usize {
        0
    }
    /// The expanded per-CPU buffer size (`trace_buf_size=`), in bytes.
    fn trace_buf_size(&self) -> u64 {
        TRACE_BUF_SIZE_DEFAULT
    }
    /// Creates the tracing machinery of the top level (`None`, buffers at their minimum until
    /// first use) or of a new instance (buffers of `bytes_per_cpu`).
    fn create_backend(
        &mut self,
        instance: Option<&str>,
        bytes_per_cpu: u64,
    ) -> Result<Box<dyn TraceBackend>, Errno>;
    /// The symbol table (for `kprobe_events` symbol checks), if the server has one.
    fn symbols(&self) -> Option<&dyn SymbolTable> {
        None
    }
    /// The call-site records, if dynamic ftrace exists on this platform.
    fn functions(&self) -> Option<&dyn FunctionRecords> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_reader_yields_its_text_once_then_ends() {
        let mut r = TextReader::new(b"# tracer: nop\n".to_vec());
        let mut out = b"before:".to_vec();
        assert!(r.next_chunk(&mut out));
        assert_eq!(out, b"before:# tracer: nop\n");
        assert!(!r.next_chunk(&mut out));
        assert!(!r.next_chunk(&mut out));
        assert_eq!(out, b"before:# tracer: nop\n");
        let mut empty = TextReader::new(Vec::new());
        assert!(empty.next_chunk(&mut out));
        assert!(!empty.next_chunk(&mut out));
    }
}
