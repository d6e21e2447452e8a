//! The top-level `README`: a mini-HOWTO of the files this tree serves.
//!
//! It follows the kernel README's layout and keeps the phrases tools grep for (selftests look
//! for e.g. `accepts: func_full_name or glob-matching-pattern`), but describes only files that
//! exist here. Invariant: every file named below exists in the tree (tested).

/// The text of `README` (see [`write_readme`]).
pub const README: &str = "tracing mini-HOWTO:

# echo 0 > tracing_on : quick way to disable tracing
# echo 1 > tracing_on : quick way to re-enable tracing

 Important files:
  trace\t\t\t- The static contents of the buffer
\t\t\t  To clear the buffer write into this file: echo > trace
  trace_pipe\t\t- A consuming read to see the contents of the buffer
  current_tracer\t- function and latency tracers
  available_tracers\t- list of configured tracers for current_tracer
  error_log\t- error log for failed commands (that support it)
  buffer_size_kb\t- view and modify size of per cpu buffer
  buffer_total_size_kb  - view total size of all cpu buffers
  buffer_subbuf_size_kb\t- view and modify size of sub-buffers
  buffer_percent\t- percentage of the buffer that must fill before trace_pipe_raw readers wake
  free_buffer\t\t- shrink the buffer to its minimum when this file is closed
  trace_clock\t\t- change the clock used to order events
       local:   Per cpu clock but may not be synced across CPUs
      global:   Synced across CPUs but slows tracing down.
     counter:   Not a clock, but just an increment
      uptime:   Jiffy counter from time of boot
        perf:   Same clock that perf events use
        mono:   Monotonic clock
    mono_raw:   Monotonic clock without NTP adjustment
        boot:   Monotonic clock including time spent suspended
         tai:   International Atomic Time
     x86-tsc:   TSC cycle counter
  (the clocks listed in trace_clock are the ones this platform provides)
  timestamp_mode\t- view the mode used to timestamp events
       delta:   Delta difference against a buffer-wide timestamp
    absolute:   Absolute (standalone) timestamp
  trace_marker\t\t- Writes into this file writes into the kernel buffer
  trace_marker_raw\t\t- Writes into this file writes binary data into the kernel buffer
  tracing_cpumask\t- Limit which CPUs to trace
  instances\t\t- Make sub-buffers with: mkdir instances/foo
\t\t\t  Remove sub-buffer with rmdir
  trace_options\t\t- Set format or modify how tracing happens
\t\t\t  Disable an option by prefixing 'no' to the
\t\t\t  option name
  saved_cmdlines_size\t- echo command number in here to store comm-pid list
  saved_cmdlines\t- the remembered pid-comm pairs
  saved_tgids\t\t- the remembered pid-tgid pairs
  tracing_thresh\t- latency threshold in usecs (0 = off)
  tracing_max_latency\t- the maximum latency seen by a latency tracer, in usecs
  per_cpu/cpuN/\t\t- trace, trace_pipe, trace_pipe_raw, stats and buffer_size_kb of one CPU

  set_ftrace_filter\t- echo function name in here to only trace these
\t\t\t  functions
\t     accepts: func_full_name or glob-matching-pattern
\t     modules: Can select a group via module
\t      Format: :mod:<module-name>
\t     example: echo :mod:ext3 > set_ftrace_filter
\t    triggers: a command to perform when function is hit
\t      Format: <function>:<trigger>[:count]
\t     trigger: traceon, traceoff
\t\t      enable_event:<system>:<event>
\t\t      disable_event:<system>:<event>
\t\t      stacktrace
\t\t      dump
\t\t      cpudump
\t     example: echo do_fault:traceoff > set_ftrace_filter
\t              echo do_trap:traceoff:3 > set_ftrace_filter
\t     The first one will disable tracing every time do_fault is hit
\t     The second will disable tracing at most 3 times when do_trap is hit
\t       The first time do trap is hit and it disables tracing, the
\t       counter will decrement to 2. If tracing is already disabled,
\t       the counter will not decrement. It only decrements when the
\t       trigger did work
\t     To remove trigger without count:
\t       echo '!<function>:<trigger> > set_ftrace_filter
\t     To remove trigger with a count:
\t       echo '!<function>:<trigger>:0 > set_ftrace_filter
  set_ftrace_notrace\t- echo function name in here to never trace.
\t    accepts: func_full_name, *func_end, func_begin*, *func_middle*
\t    modules: Can select a group via module command :mod:
\t    Does not accept triggers
  set_ftrace_pid\t- Write pid(s) to only function trace those pids
\t\t    (function)
  set_ftrace_notrace_pid\t- Write pid(s) to not function trace those pids
\t\t    (function)
  set_graph_function\t- Trace the nested calls of a function (function_graph)
  set_graph_notrace\t- Do not trace the nested calls of a function (function_graph)
  max_graph_depth\t- Trace a limited depth of nested calls (0 is unlimited)

  available_events\t- list of events that can be enabled (the host registers them)
  set_event\t\t- Enables events by name written into it
\t\t\t  Format: [<system>:][<event>|*] ; prefix '!' to disable
  events/\t\t- Directory containing all trace event subsystems:
      enable\t\t- Write 0/1 to enable/disable tracing of all events
      ftrace/\t\t- The internal events of the tracers (format and id of each)
      header_page\t- The layout of a ring-buffer sub-buffer header
      header_event\t- The layout of a ring-buffer event header
  events/<system>/\t- Directory containing all trace events for <system>:
      enable\t\t- Write 0/1 to enable/disable tracing of all <system>
\t\t\t  events
      filter\t\t- If set, only events passing filter are traced
  events/<system>/<event>/\t- Directory containing control files for
\t\t\t  <event>: enable, filter, format, id and
      trigger\t\t- If set, a command to perform when event is hit
\t    Format: <trigger>[:count][if <filter>]
\t   trigger: traceon, traceoff, snapshot, stacktrace
\t            enable_event:<system>:<event>
\t            disable_event:<system>:<event>
\t            enable_hist:<system>:<event>
\t            disable_hist:<system>:<event>
\t\t    hist:keys=<field1[,field2,...]>[:values=<field1[,field2,...]>]
\t\t      [:sort=<field1[,field2,...]>][:size=#entries][:name=histname1]
\t\t      [:<var1>=<field|var_ref|numeric_literal>][,<var2>=...]
\t\t      [:clock=<clock>][:pause][:continue][:clear][:nohitcount]
\t\t      [if <filter>]
\t   To remove a trigger: echo '!<trigger>' > <system>/<event>/trigger
\t   Triggers are checked and listed as Linux does; which of them run is
\t   up to the platform that records the events.

  kprobe_events\t\t- Present for tools; ftrace-rs has no kprobes: commands are
\t\t\t  checked and rejected as Linux rejects them
  dynamic_events\t- Present for tools; no dynamic events can be created
";

/// The lines describing the dynamic-ftrace call-site files, present only when the platform has
/// call-site records.
pub const README_FUNCTIONS: &str =
    "  available_filter_functions - list of functions that can be filtered on
  available_filter_functions_addrs - the same with the address of each call site
  enabled_functions\t- functions with a callback attached, and how many
  touched_functions\t- functions that ever had a callback attached
  dyn_ftrace_total_info\t- number of call sites and pages of records
";

/// The `snapshot` lines, as Linux 6.12 prints them, present only when the top level has a
/// snapshot buffer.
pub const README_SNAPSHOT: &str = "  snapshot\t\t- Like 'trace' but shows the content of the static
\t\t\t  snapshot buffer. Read the contents for more
\t\t\t  information
";

/// Whether the top level has the `snapshot` file (a snapshot buffer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SnapshotFiles {
    /// No snapshot buffer: `README` omits [`README_SNAPSHOT`].
    Absent,
    /// A snapshot buffer: `README` describes `snapshot` where Linux does.
    Present,
}

/// Whether a tree has the dynamic-ftrace call-site files (the platform has call-site records).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallSiteFiles {
    /// No call-site records: `README` omits [`README_FUNCTIONS`].
    Absent,
    /// Call-site records: `README` describes their files.
    Present,
}

/// Writes `README` for a tree that has (or lacks) the call-site files and the snapshot file.
pub fn write_readme(
    w: &mut dyn core::fmt::Write,
    files: CallSiteFiles,
    snapshot: SnapshotFiles,
) -> core::fmt::Result {
    let split = README.find("  set_ftrace_filter\t").unwrap_or(README.len());
    // Linux prints `snapshot` in the paragraph after `max_graph_depth`.
    let snap = README
        .find("  available_events\t")
        .unwrap_or(README.len())
        .max(split);
    w.write_str(&README[..split])?;
    if files == CallSiteFiles::Present {
        w.write_str(README_FUNCTIONS)?;
    }
    w.write_str(&README[split..snap])?;
    if snapshot == SnapshotFiles::Present {
        w.write_str(README_SNAPSHOT)?;
    }
    w.write_str(&README[snap..])
}
