//! The `ftrace` command line: subcommands and their arguments.
//!
//! `ftrace report [-i DIR] [-O OPTION]... [--cpu N] [--stat]` prints what the kernel's
//! `trace` file (or `per_cpu/cpuN/trace`, or with `--stat` `trace_stat/functionN`) would have
//! printed for the raw pages or the recording in `DIR` (see
//! [`crate::report`]), through a view chosen when reading (`-F`, `-N`, `-G`, `--max-depth`,
//! `--tid`, `--cpu C,C`, `--time-range`: see [`crate::view`]). `ftrace record [OPTIONS] -- PROG [ARGS]...` runs a program under the
//! agent and records into a directory (default `ftrace.data`, see [`crate::record`]), with the
//! program's trace events `-e SYSTEM:EVENT` names (armed at start); `ftrace
//! live` records and prints the report when the program exits. Invariant: the binary is a thin shell over [`run`], which tests drive
//! with the same argument lists a user types.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::report::ReportArgs;

/// The `ftrace` tool.
#[derive(Debug, Parser)]
#[command(name = "ftrace", version, about = "ftrace-rs command-line tool")]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print a raw capture (a tracefs-like directory of `trace_pipe_raw` pages) or a recording
    /// as the kernel's `trace` file would.
    Report {
        /// The capture (per_cpu/cpuN/trace_pipe_raw, kallsyms, saved_cmdlines and optionally
        /// trace_clock, tracer, events/header_page, events/ftrace/*/format) or the recording
        /// (`ftrace record -o DIR`, read where it is).
        #[arg(
            short = 'i',
            long = "raw-dir",
            value_name = "DIR",
            default_value = "ftrace.data"
        )]
        raw_dir: PathBuf,
        /// A trace option as `trace_options` takes it (`latency-format`, `nocontext-info`,
        /// `funcgraph-proc`...); may be repeated.
        #[arg(short = 'O', value_name = "OPTION")]
        options: Vec<String>,
        /// Print only this CPU's buffer (`per_cpu/cpuN/trace`), or with several (`0,2`) those
        /// CPUs' events merged.
        #[arg(long, value_name = "CPU[,CPU]", value_delimiter = ',')]
        cpu: Vec<u32>,
        /// Print the function profiler's table instead of the trace (`trace_stat/functionN`
        /// summed over the CPUs, or `--cpu`'s): hits per function and, for function_graph,
        /// the total, average and s^2 of its durations; of the events the view shows.
        #[arg(long)]
        stat: bool,
        /// Show only functions matching this glob (`set_ftrace_filter`; under function_graph
        /// their children that match still print); may be repeated.
        #[arg(short = 'F', value_name = "GLOB")]
        filter: Vec<String>,
        /// Never show functions matching this glob (`set_ftrace_notrace`); may be repeated.
        #[arg(short = 'N', value_name = "GLOB")]
        notrace: Vec<String>,
        /// function_graph: show only these functions and what they call
        /// (`set_graph_function`); may be repeated.
        #[arg(short = 'G', value_name = "GLOB")]
        graph: Vec<String>,
        /// function_graph: show only calls less deep than this (`max_graph_depth`; 0: all).
        #[arg(long = "max-depth", value_name = "N", default_value_t = 0)]
        max_depth: u32,
        /// Show only these threads.
        #[arg(long, value_name = "TID[,TID]", value_delimiter = ',')]
        tid: Vec<i32>,
        /// Show only this time: `START~END`, either left out; seconds as the trace prints
        /// them (`1234.567890`) or the time since the first event with a unit (`100us`,
        /// `2ms`, `1s`, `50ns`), as uftrace's `--time-range`.
        #[arg(short = 'r', long = "time-range", value_name = "START~END",
              value_parser = crate::view::TimeRange::parse)]
        time_range: Option<crate::view::TimeRange>,
        /// The kernel release the latency header names.
        #[arg(
            long = "uts-release",
            value_name = "RELEASE",
            default_value = "unknown"
        )]
        uts_release: String,
    },
    /// Run a program with the agent preloaded and record its function calls into a directory.
    Record {
        /// What to record.
        #[command(flatten)]
        rec: RecordArgs,
        /// A trace option that changes what is recorded: `funcgraph-retval` (function_graph
        /// exits carry the return value; `report -O funcgraph-retval` prints it).
        #[arg(short = 'O', value_name = "OPTION", value_parser = ["funcgraph-retval"])]
        options: Vec<String>,
    },
    /// Record a program, then print the trace when it exits.
    Live {
        /// What to record.
        #[command(flatten)]
        rec: RecordArgs,
        /// A trace option for the report (as `report -O`); may be repeated. `funcgraph-retval`
        /// also records the return values it prints.
        #[arg(short = 'O', value_name = "OPTION")]
        options: Vec<String>,
    },
    /// Write a capture or recording as trace.dat, uftrace.data or Chrome JSON.
    Export(crate::export::ExportArgs),
}

/// The options of `record` and `live`.
#[derive(Debug, clap::Args)]
pub struct RecordArgs {
    /// The tracer.
    #[arg(short = 't', value_name = "TRACER", default_value = "function_graph",
          value_parser = ["function", "function_graph"])]
    pub tracer: String,
    /// Trace only functions matching this glob (`set_ftrace_filter`); may be repeated.
    #[arg(short = 'F', value_name = "GLOB")]
    pub filter: Vec<String>,
    /// Never trace functions matching this glob (`set_ftrace_notrace`); may be repeated.
    #[arg(short = 'N', value_name = "GLOB")]
    pub notrace: Vec<String>,
    /// Record this trace event the program declares (`ftrace/tracepoint.h`), named as
    /// `set_event` takes it: `SYSTEM:EVENT`, `SYSTEM:*`, `*:*`, or a bare event or system name;
    /// may be repeated. `report` prints the events through their print formats.
    #[arg(short = 'e', value_name = "SYSTEM:EVENT")]
    pub events: Vec<String>,
    /// function_graph: trace only these functions and what they call (`set_graph_function`).
    #[arg(short = 'G', value_name = "GLOB")]
    pub graph: Vec<String>,
    /// function_graph: the deepest nesting recorded (`max_graph_depth`; 0: unlimited).
    #[arg(long = "max-depth", value_name = "N", default_value_t = 0)]
    pub max_depth: u32,
    /// function_graph: record only calls lasting at least this many microseconds, as their
    /// exits (`tracing_thresh`; 0: every call).
    #[arg(long = "thresh", value_name = "USECS", default_value_t = 0)]
    pub thresh_us: u64,
    /// Per-thread buffer size in KiB (`buffer_size_kb`; default 2048 while the tool drains
    /// the buffers, 1024 with `--overwrite` or `--mount`).
    #[arg(long = "buffer-size", value_name = "KB")]
    pub buffer_kb: Option<u64>,
    /// The most a thread's buffer may grow to, in KiB, when the tool drains it slower than
    /// the thread writes (default 131072 with the default buffer size; else the buffer keeps
    /// the size given).
    #[arg(long = "max-buffer-size", value_name = "KB")]
    pub max_buffer_kb: Option<u64>,
    /// Record as a flight recorder: keep only the newest events of each thread, a full
    /// buffer overwriting its oldest (the kernel's `overwrite` option). Without it every event
    /// is recorded: the tool drains the buffers while the program runs, and a full buffer
    /// drops and counts new events (the default, except with `--mount`).
    #[arg(long = "overwrite", conflicts_with = "no_overwrite")]
    pub overwrite: bool,
    /// Record every event (the default; with `--mount`, where overwriting is the default:
    /// a full buffer drops new events and counts them).
    #[arg(long = "no-overwrite")]
    pub no_overwrite: bool,
    /// The trace clock.
    #[arg(long, value_name = "CLOCK", default_value = "local",
          value_parser = ["local", "mono", "x86-tsc"])]
    pub clock: String,
    /// The recording directory (`live`: kept only when given).
    #[arg(short = 'o', value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Serve the program's tracefs at this directory (FUSE, type `fuse.tracefs`) while it
    /// runs: `cat DIR/trace`, `echo function > DIR/current_tracer`... Unmounted when the
    /// program exits or the tool gets SIGINT/SIGTERM/SIGHUP.
    #[arg(long = "mount", value_name = "DIR")]
    pub mount: Option<PathBuf>,
    /// Start the program even when it has no call sites or a -F/-N/-G glob matches none of
    /// them (the refusal becomes a warning).
    #[arg(long)]
    pub force: bool,
    /// Never lower the priority of a program thread that makes events faster than the tool
    /// records them (by default its nice value goes up by 5, once, and the summary says so;
    /// with this the events the tool cannot keep up with are lost, and counted).
    #[arg(long = "keep-priority")]
    pub keep_priority: bool,
    /// Attach to this running process (same user) instead of starting a program: trace until
    /// Ctrl-C (SIGINT, SIGTERM, SIGHUP) or its exit, then detach, leaving every site as its
    /// NOP (`live`: then print the report).
    #[arg(
        short = 'p',
        long = "pid",
        value_name = "PID",
        conflicts_with = "command"
    )]
    pub pid: Option<u32>,
    /// Build the Rust crate in the current directory with `cargo build [ARGS]` and the
    /// instrumentation flags (`-Zpatchable-function-entry=5`, in a target directory of its
    /// own) and trace the binary it makes; what follows `--` is then the program's
    /// arguments. `--cargo='--release --bin NAME'` passes cargo its options.
    #[arg(
        long = "cargo",
        value_name = "ARGS",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "",
        conflicts_with = "pid"
    )]
    pub cargo: Option<String>,
    /// The program and its arguments (after `--`; with `--cargo`, the arguments only).
    #[arg(
        last = true,
        required_unless_present_any = ["pid", "cargo"],
        value_name = "PROG"
    )]
    pub command: Vec<String>,
}

impl RecordArgs {
    /// The recording options these arguments ask for.
    pub fn options(&self) -> crate::record::RecordOptions {
        use ftrace_agent::config::{ClockKind, TracerKind};
        crate::record::RecordOptions {
            tracer: TracerKind::parse(&self.tracer).unwrap_or_default(),
            filter: self.filter.clone(),
            notrace: self.notrace.clone(),
            graph_functions: self.graph.clone(),
            events: self.events.clone(),
            max_depth: self.max_depth,
            retval: false,
            thresh_ns: self.thresh_us.saturating_mul(1000),
            buffer_kb: self.buffer_kb.unwrap_or(
                if self.overwrite || (self.mount.is_some() && !self.no_overwrite) {
                    ftrace_agent::config::DEFAULT_BUFFER_KB
                } else {
                    crate::record::STREAM_BUFFER_KB
                },
            ),
            max_buffer_kb: match (self.max_buffer_kb, self.buffer_kb) {
                (Some(kb), _) => kb,
                (None, None) if !self.overwrite && self.mount.is_none() => {
                    crate::record::STREAM_MAX_BUFFER_KB
                }
                (None, _) => 0,
            },
            overwrite: self.overwrite || (self.mount.is_some() && !self.no_overwrite),
            clock: ClockKind::parse(&self.clock).unwrap_or_default(),
            output: self
                .output
                .clone()
                .unwrap_or_else(|| PathBuf::from("ftrace.data")),
            mount: self.mount.clone(),
            force: if self.force {
                crate::sitecheck::Force::Warn
            } else {
                crate::sitecheck::Force::Refuse
            },
            yielding: if self.keep_priority {
                crate::precedence::Yield::Never
            } else {
                crate::precedence::Yield::WhenBehind
            },
        }
    }
}

fn run_record(
    rec: &RecordArgs,
    trace_options: &[String],
    live: Option<&[String]>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let mut opts = rec.options();
    opts.retval = trace_options.iter().any(|o| o == "funcgraph-retval");
    // The program and its arguments: as given, or the binary `--cargo` builds.
    let command = match &rec.cargo {
        Some(cargo_args) => {
            let built = std::env::current_dir()
                .map_err(|e| format!("the current directory: {e}"))
                .and_then(|dir| crate::cargo_build::build(&dir, cargo_args));
            match built {
                Ok(exe) => std::iter::once(exe.display().to_string())
                    .chain(rec.command.iter().cloned())
                    .collect(),
                Err(e) => {
                    let _ = writeln!(err, "ftrace: {e}");
                    return 1;
                }
            }
        }
        None => rec.command.clone(),
    };
    let result = match (rec.pid, live) {
        (Some(pid), None) => crate::attach::record(&opts, pid).map(|r| (r.status, r.summary, None)),
        (Some(pid), Some(o)) => crate::attach::live(&opts, rec.output.is_some(), o, pid)
            .map(|l| (l.status, l.summary, Some(l.report))),
        (None, None) => {
            let (prog, args) = command.split_first().expect("clap requires PROG");
            crate::record::record(&opts, prog, args).map(|r| (r.status, r.summary, None))
        }
        (None, Some(o)) => {
            let (prog, args) = command.split_first().expect("clap requires PROG");
            crate::record::live(&opts, rec.output.is_some(), o, prog, args)
                .map(|l| (l.status, l.summary, Some(l.report)))
        }
    };
    match result {
        Ok((status, summary, report)) => {
            let _ = err.write_all(summary.as_bytes());
            if let Some(r) = report {
                if let Some(code) = write_report(&r, out, err) {
                    return code;
                }
            }
            crate::record::exit_code(status)
        }
        Err(e) => {
            let _ = writeln!(err, "ftrace: {e}");
            1
        }
    }
}

/// Writes a report to `out`: `None` when done, or the exit code of a failed write. A reader
/// that went away (`ftrace report | head`) ends the report quietly, as it would a `cat`.
fn write_report(bytes: &[u8], out: &mut dyn Write, err: &mut dyn Write) -> Option<u8> {
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => None,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Some(0),
        Err(e) => {
            let _ = writeln!(err, "ftrace: writing the report: {e}");
            Some(1)
        }
    }
}

/// Parses `args` (program name first) and runs the command, writing the result to `out` and
/// diagnostics to `err`. Returns the process exit status (0 success, 1 error, 2 usage).
pub fn run(
    args: impl IntoIterator<Item = impl Into<OsString> + Clone>,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> u8 {
    let cli = match Cli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = if e.use_stderr() {
                write!(err, "{e}")
            } else {
                write!(out, "{e}")
            };
            return code;
        }
    };
    match cli.command {
        Command::Export(a) => crate::export::run_cli(&a, out, err),
        Command::Record { rec, options } => run_record(&rec, &options, None, out, err),
        Command::Live { rec, options } => run_record(&rec, &options, Some(&options), out, err),
        Command::Report {
            raw_dir,
            options,
            cpu,
            stat,
            uts_release,
            filter,
            notrace,
            graph,
            max_depth,
            tid,
            time_range,
        } => {
            // One CPU is that CPU's file; several are a view of the merged one.
            let (cpu, cpus) = match cpu.as_slice() {
                [one] => (Some(*one), Vec::new()),
                _ => (None, cpu),
            };
            let args = ReportArgs {
                raw_dir,
                options,
                cpu,
                uts_release,
                view: crate::view::ViewArgs {
                    filter,
                    notrace,
                    graph,
                    max_depth,
                    tids: tid,
                    cpus,
                    time_range,
                },
            };
            // Streamed as it is formatted; a reader that went away (`ftrace report | head`)
            // ends it quietly, as it would a `cat`.
            let report = if stat {
                crate::report::report_stat_to
            } else {
                crate::report::report_to
            };
            match report(&args, out) {
                Ok(damaged) if damaged.is_empty() => 0,
                Ok(damaged) => {
                    for e in &damaged {
                        let _ = writeln!(err, "ftrace: damaged: {e} (reported up to there)");
                    }
                    1
                }
                Err(crate::report::ReportFailure::Write(e))
                    if e.kind() == std::io::ErrorKind::BrokenPipe =>
                {
                    0
                }
                Err(crate::report::ReportFailure::Write(e)) => {
                    let _ = writeln!(err, "ftrace: writing the report: {e}");
                    1
                }
                Err(crate::report::ReportFailure::Report(e)) => {
                    let _ = writeln!(err, "ftrace: {e}");
                    1
                }
            }
        }
    }
}

/// The binary's entry point.
pub fn main(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args: Vec<OsString> = args.into_iter().collect();
    let stdout = std::io::stdout();
    // Not locked for the whole run (stdout is): the tool's other threads (the tree's
    // acceptor, the FUSE server, the drain) write to stderr too, and would wait for good.
    ExitCode::from(run(args, &mut stdout.lock(), &mut std::io::stderr()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The record options of `ftrace <args>`.
    fn record_options(args: &[&str]) -> crate::record::RecordOptions {
        let cli =
            Cli::try_parse_from(std::iter::once("ftrace").chain(args.iter().copied())).unwrap();
        match cli.command {
            Command::Record { rec, .. } => rec.options(),
            other => panic!("not a record command: {other:?}"),
        }
    }

    /// A thread that outruns the drainer yields to it unless `--keep-priority` says never.
    #[test]
    fn keep_priority_keeps_the_program_s_priority() {
        use crate::precedence::Yield;
        let yielding = |args: &[&str]| record_options(args).yielding;
        assert_eq!(yielding(&["record", "--", "true"]), Yield::WhenBehind);
        assert_eq!(
            yielding(&["record", "--keep-priority", "--", "true"]),
            Yield::Never
        );
    }
}
