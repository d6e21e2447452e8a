//! `ftrace record`: run a program under the agent, recording into a directory.
//!
//! Invariant: the recording directory holds only what this run recorded (a previous recording
//! at the same place is removed first, as `trace-cmd record` replaces `trace.dat`).

use std::path::PathBuf;
use std::process::ExitStatus;

use ftrace_agent::config::{ClockKind, Config, TracerKind};

/// The options `ftrace record` and `ftrace live` take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordOptions {
    /// `-t`: the tracer.
    pub tracer: TracerKind,
    /// `-F`: functions to trace (globs).
    pub filter: Vec<String>,
    /// `-N`: functions never to trace (globs).
    pub notrace: Vec<String>,
    /// `-G`: function_graph roots (globs).
    pub graph_functions: Vec<String>,
    /// `--max-depth`.
    pub max_depth: u32,
    /// `--buffer-size` (KiB per thread).
    pub buffer_kb: u64,
    /// `--no-overwrite` (false) or overwrite (true).
    pub overwrite: bool,
    /// `--clock`.
    pub clock: ClockKind,
    /// `-o`.
    pub output: PathBuf,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            tracer: TracerKind::FunctionGraph,
            filter: Vec::new(),
            notrace: Vec::new(),
            graph_functions: Vec::new(),
            max_depth: 0,
            buffer_kb: ftrace_agent::config::DEFAULT_BUFFER_KB,
            overwrite: true,
            clock: ClockKind::Local,
            output: PathBuf::from("ftrace.data"),
        }
    }
}

impl RecordOptions {
    /// The agent configuration these options make.
    pub fn config(&self) -> Config {
        let mut c = Config::new(&self.output, self.tracer);
        c.filter = self.filter.clone();
        c.notrace = self.notrace.clone();
        c.graph_functions = self.graph_functions.clone();
        c.max_depth = self.max_depth;
        c.buffer_kb = self.buffer_kb;
        c.overwrite = self.overwrite;
        c.clock = self.clock;
        c
    }
}

/// Records `prog args...` into `opts.output`, then writes the capture files `ftrace report`
/// reads ([`crate::capture`]); returns the program's exit status.
pub fn record(opts: &RecordOptions, prog: &str, args: &[String]) -> Result<ExitStatus, String> {
    let out = &opts.output;
    if out.exists() {
        if is_recording(out) {
            std::fs::remove_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        } else if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
            return Err(format!(
                "{}: exists and is not a recording; not overwriting",
                out.display()
            ));
        }
    }
    let status = crate::launch::run(&opts.config(), prog, args)?;
    let rec = crate::recording::Recording::read(out).map_err(|e| e.to_string())?;
    crate::capture::write_capture(&rec, out)?;
    Ok(status)
}

/// Whether `dir` holds a recording (some `<pid>.<n>/meta`).
pub fn is_recording(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.filter_map(|e| e.ok())
            .any(|e| e.path().join("meta").is_file())
    })
}

/// What `ftrace live` did: the program's status and the report text.
#[derive(Debug)]
pub struct Live {
    /// The traced program's exit status.
    pub status: ExitStatus,
    /// The `trace` text.
    pub report: Vec<u8>,
}

/// `ftrace live`: records `prog args...` (into `opts.output`, or a temporary directory removed
/// afterwards when `keep` is false) and reports it with the `-O` `options`.
pub fn live(
    opts: &RecordOptions,
    keep: bool,
    options: &[String],
    prog: &str,
    args: &[String],
) -> Result<Live, String> {
    let mut opts = opts.clone();
    if !keep {
        opts.output = std::env::temp_dir().join(format!(
            "ftrace-live-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
    }
    let status = record(&opts, prog, args);
    let report = status.as_ref().ok().map(|_| {
        let mut ra = crate::report::ReportArgs::new(&opts.output);
        ra.options = options.to_vec();
        crate::report::report(&ra).map_err(|e| e.to_string())
    });
    if !keep {
        let _ = std::fs::remove_dir_all(&opts.output);
    }
    Ok(Live {
        status: status?,
        report: report.expect("recorded")?,
    })
}

/// The exit code a shell would report for `status` (128 + signal for a killed program).
pub fn exit_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 1,
    }
}
