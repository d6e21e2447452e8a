//! The `ftrace` command line: subcommands and their arguments.
//!
//! `ftrace report --raw-dir DIR [-O OPTION]... [--cpu N]` prints what the kernel's `trace` file
//! (or `per_cpu/cpuN/trace`) would have printed for the raw pages in `DIR` (see
//! [`crate::report`]). Invariant: the binary is a thin shell over [`run`], which tests drive
//! with the same argument lists a user types.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::report::{ReportArgs, report};

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
    /// Print a raw capture (a tracefs-like directory of `trace_pipe_raw` pages) as the kernel's
    /// `trace` file would.
    Report {
        /// The capture: per_cpu/cpuN/trace_pipe_raw, kallsyms, saved_cmdlines and optionally
        /// trace_clock, tracer, events/header_page, events/ftrace/*/format.
        #[arg(long = "raw-dir", value_name = "DIR")]
        raw_dir: PathBuf,
        /// A trace option as `trace_options` takes it (`latency-format`, `nocontext-info`,
        /// `funcgraph-proc`...); may be repeated.
        #[arg(short = 'O', value_name = "OPTION")]
        options: Vec<String>,
        /// Print only this CPU's buffer (`per_cpu/cpuN/trace`).
        #[arg(long)]
        cpu: Option<u32>,
        /// The kernel release the latency header names.
        #[arg(
            long = "uts-release",
            value_name = "RELEASE",
            default_value = "unknown"
        )]
        uts_release: String,
    },
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
        Command::Report {
            raw_dir,
            options,
            cpu,
            uts_release,
        } => {
            let args = ReportArgs {
                raw_dir,
                options,
                cpu,
                uts_release,
            };
            match report(&args) {
                Ok(bytes) => match out.write_all(&bytes).and_then(|()| out.flush()) {
                    Ok(()) => 0,
                    Err(e) => {
                        let _ = writeln!(err, "ftrace: writing the report: {e}");
                        1
                    }
                },
                Err(e) => {
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
    let stderr = std::io::stderr();
    ExitCode::from(run(args, &mut stdout.lock(), &mut stderr.lock()))
}
