//! The agent's configuration, passed from the `ftrace` tool to the preloaded agent through the
//! environment.
//!
//! Invariant: [`Config::to_env`] and [`Config::from_env_vars`] are inverse: whatever the tool
//! asks for is exactly what the agent runs with. An agent that finds no [`ENV_OUTPUT`] variable
//! stays inert (the program runs untraced).

use std::fmt;
use std::path::PathBuf;

/// Where the agent records (a directory; created if missing). Its presence arms the agent.
pub const ENV_OUTPUT: &str = "FTRACE_AGENT_OUTPUT";
/// `function` or `function_graph`.
pub const ENV_TRACER: &str = "FTRACE_AGENT_TRACER";
/// `set_ftrace_filter` globs, one per line.
pub const ENV_FILTER: &str = "FTRACE_AGENT_FILTER";
/// `set_ftrace_notrace` globs, one per line.
pub const ENV_NOTRACE: &str = "FTRACE_AGENT_NOTRACE";
/// `set_graph_function` globs, one per line.
pub const ENV_GRAPH: &str = "FTRACE_AGENT_GRAPH";
/// `max_graph_depth` (0: unlimited).
pub const ENV_MAX_DEPTH: &str = "FTRACE_AGENT_MAX_DEPTH";
/// `1`: function_graph records return values (`funcgraph-retval`); `0` (default): not.
pub const ENV_RETVAL: &str = "FTRACE_AGENT_RETVAL";
/// `tracing_thresh` in nanoseconds: function_graph records only calls lasting at least this
/// long, as their exits (0, the default: every call).
pub const ENV_THRESH_NS: &str = "FTRACE_AGENT_THRESH_NS";
/// `buffer_size_kb`: per-thread buffer size.
pub const ENV_BUFFER_KB: &str = "FTRACE_AGENT_BUFFER_KB";
/// `1`: overwrite the oldest events when full (flight recorder, the kernel's default);
/// `0`: drop new events when full.
pub const ENV_OVERWRITE: &str = "FTRACE_AGENT_OVERWRITE";
/// Where the per-thread ring files live (a directory; unset or empty: the recording
/// directory). The tool points it at tmpfs for a streamed recording, whose rings are drained
/// into the recording directory while the program runs: ring pages then never go to disk.
pub const ENV_RING_DIR: &str = "FTRACE_AGENT_RING_DIR";
/// Trace events armed at start, one `set_event` token per line (`sys:event`, `sys:*`, `*:*`,
/// a bare event or subsystem name: [`ftrace_tracefs::events::set_event_matcher`]).
pub const ENV_EVENTS: &str = "FTRACE_AGENT_EVENTS";
/// `local`, `mono` or `x86-tsc`.
pub const ENV_CLOCK: &str = "FTRACE_AGENT_CLOCK";
/// The largest ring file (bytes) a streamed recording's thread offers itself: every ring it
/// makes, takes or moves to comes with a ring file four times larger (at most this) made by
/// the thread beside it and offered as the tool offers one ([`crate::grow`]); unset or 0:
/// only the tool offers, at its first pass over a ring.
pub const ENV_GROW_MAX_BYTES: &str = "FTRACE_AGENT_GROW_MAX_BYTES";
/// `1` (default): sites are enabled at start; `0`: the program turns tracing on itself
/// (`ftrace_agent_tracing_on`).
pub const ENV_TRACING_ON: &str = "FTRACE_AGENT_TRACING_ON";
/// A unix socket the `ftrace` tool listens on: the agent connects at start and serves live
/// control requests on it (tracer, filters, `tracing_on`) from one control thread
/// ([`crate::control`]). Unset or empty: no control channel.
pub const ENV_CONTROL: &str = "FTRACE_AGENT_CONTROL";

/// Which tracer records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TracerKind {
    /// `function`: one event per traced call.
    #[default]
    Function,
    /// `function_graph`: an entry and an exit event per traced call, with durations.
    FunctionGraph,
}

impl TracerKind {
    /// The name `current_tracer` uses.
    pub fn name(self) -> &'static str {
        match self {
            TracerKind::Function => "function",
            TracerKind::FunctionGraph => "function_graph",
        }
    }

    /// Parses a tracer name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "function" => Some(TracerKind::Function),
            "function_graph" => Some(TracerKind::FunctionGraph),
            _ => None,
        }
    }
}

/// Which clock stamps events (`trace_clock`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum ClockKind {
    /// `local`: the TSC, converted to nanoseconds with a calibrated rate.
    #[default]
    Local,
    /// `mono`: CLOCK_MONOTONIC in nanoseconds.
    Mono,
    /// `x86-tsc`: the raw TSC count.
    X86Tsc,
}

impl ClockKind {
    /// The name `trace_clock` uses.
    pub fn name(self) -> &'static str {
        match self {
            ClockKind::Local => "local",
            ClockKind::Mono => "mono",
            ClockKind::X86Tsc => "x86-tsc",
        }
    }

    /// Parses a clock name.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "local" => Some(ClockKind::Local),
            "mono" => Some(ClockKind::Mono),
            "x86-tsc" => Some(ClockKind::X86Tsc),
            _ => None,
        }
    }

    /// Whether events store raw TSC counts (converted by the reader).
    pub fn is_tsc(self) -> bool {
        !matches!(self, ClockKind::Mono)
    }
}

/// Everything the agent needs to know.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    /// The recording directory.
    pub output: PathBuf,
    /// The tracer.
    pub tracer: TracerKind,
    /// Only functions matching one of these globs are traced (empty: all).
    pub filter: Vec<String>,
    /// Functions matching one of these globs are never traced.
    pub notrace: Vec<String>,
    /// function_graph only: trace only these functions and what they call (empty: all).
    pub graph_functions: Vec<String>,
    /// function_graph only: the deepest nesting recorded (0: unlimited).
    pub max_depth: u32,
    /// function_graph only: exits carry the function's return value (`funcgraph-retval`).
    pub retval: bool,
    /// function_graph only: `tracing_thresh` in nanoseconds (0: off).
    pub thresh_ns: u64,
    /// Per-thread buffer size in KiB.
    pub buffer_kb: u64,
    /// Overwrite the oldest events when a buffer is full (else drop new ones).
    pub overwrite: bool,
    /// Where the ring files live ([`ENV_RING_DIR`]; `None`: in the recording directory).
    pub ring_dir: Option<PathBuf>,
    /// The trace clock.
    pub clock: ClockKind,
    /// Trace events armed at start ([`ENV_EVENTS`]).
    pub events: Vec<String>,
    /// Enable the sites at start.
    pub tracing_on: bool,
    /// The live control socket ([`ENV_CONTROL`]), if the tool serves one.
    pub control: Option<PathBuf>,
    /// The largest ring file a streamed thread offers itself ([`ENV_GROW_MAX_BYTES`]; 0:
    /// none).
    pub grow_max_bytes: u64,
}

/// The default per-thread buffer size in KiB: 32768 slots of 32 bytes. (The kernel's default
/// per-CPU `buffer_size_kb` is 1408, but a slot ring holds a power-of-two count of slots, and
/// a size is honoured exactly or refused: see [`check_buffer_kb`].)
pub const DEFAULT_BUFFER_KB: u64 = 1024;

/// Whether `name` matches any of `patterns`, each a glob as the kernel's `set_ftrace_filter`
/// reads it (ftrace-core's [`Glob`](ftrace_core::filter::Glob): `*`, `?`, `[...]` with `!`
/// negation, `\` quoting). An index pattern (`3`) selects by position, so matches no name.
pub fn glob_matches_any(patterns: &[String], name: &str) -> bool {
    patterns
        .iter()
        .any(|p| ftrace_core::filter::Glob::parse(p).matches(name))
}

/// The largest per-thread buffer in KiB (16 GiB).
pub const MAX_BUFFER_KB: u64 = 1 << 24;

/// Checks a per-thread buffer size in KiB: a power of two, at least 4 (what a slot ring of
/// 32-byte slots holds exactly).
pub fn check_buffer_kb(kb: u64) -> Result<(), String> {
    if kb > MAX_BUFFER_KB {
        return Err(format!(
            "--buffer-size {kb}: at most {MAX_BUFFER_KB} KiB per thread"
        ));
    }
    if kb >= 4 && kb.is_power_of_two() {
        return Ok(());
    }
    let lower = if kb < 4 {
        4
    } else {
        1u64 << (63 - kb.leading_zeros())
    };
    let upper = kb.max(4).next_power_of_two();
    Err(if upper != lower {
        format!(
            "--buffer-size {kb}: a thread's buffer holds a power-of-two number of 32-byte \
             slots; use {lower} or {upper} (KiB)"
        )
    } else {
        format!(
            "--buffer-size {kb}: a thread's buffer is at least 4 KiB (a power of two); use \
             {lower}"
        )
    })
}

impl Config {
    /// Bytes of each thread's buffer file: the header page, then `buffer_kb` of slots.
    pub fn ring_file_bytes(&self) -> usize {
        crate::buffer::HEADER_SIZE + (self.buffer_kb * 1024).max(4096) as usize
    }

    /// A configuration recording `tracer` into `output` with every other knob at its default.
    pub fn new(output: impl Into<PathBuf>, tracer: TracerKind) -> Self {
        Config {
            output: output.into(),
            tracer,
            filter: Vec::new(),
            notrace: Vec::new(),
            graph_functions: Vec::new(),
            max_depth: 0,
            retval: false,
            thresh_ns: 0,
            buffer_kb: DEFAULT_BUFFER_KB,
            overwrite: true,
            ring_dir: None,
            clock: ClockKind::Local,
            events: Vec::new(),
            tracing_on: true,
            control: None,
            grow_max_bytes: 0,
        }
    }

    /// The environment variables that carry this configuration to the agent.
    pub fn to_env(&self) -> Vec<(&'static str, String)> {
        vec![
            (ENV_OUTPUT, self.output.to_string_lossy().into_owned()),
            (ENV_TRACER, self.tracer.name().to_string()),
            (ENV_FILTER, self.filter.join("\n")),
            (ENV_NOTRACE, self.notrace.join("\n")),
            (ENV_GRAPH, self.graph_functions.join("\n")),
            (ENV_MAX_DEPTH, self.max_depth.to_string()),
            (ENV_RETVAL, u8::from(self.retval).to_string()),
            (ENV_THRESH_NS, self.thresh_ns.to_string()),
            (ENV_BUFFER_KB, self.buffer_kb.to_string()),
            (ENV_OVERWRITE, u8::from(self.overwrite).to_string()),
            (
                ENV_RING_DIR,
                self.ring_dir
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            (ENV_CLOCK, self.clock.name().to_string()),
            (ENV_EVENTS, self.events.join("\n")),
            (ENV_TRACING_ON, u8::from(self.tracing_on).to_string()),
            (
                ENV_CONTROL,
                self.control
                    .as_ref()
                    .map(|p| p.to_string_lossy().into_owned())
                    .unwrap_or_default(),
            ),
            (ENV_GROW_MAX_BYTES, self.grow_max_bytes.to_string()),
        ]
    }

    /// Reads the configuration from the process environment; `Ok(None)` when the agent is not
    /// armed ([`ENV_OUTPUT`] unset).
    pub fn from_env() -> Result<Option<Self>, ConfigError> {
        Self::from_env_vars(|k| std::env::var(k).ok())
    }

    /// Reads the configuration through `get` (a variable lookup).
    pub fn from_env_vars(
        get: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, ConfigError> {
        let Some(output) = get(ENV_OUTPUT).filter(|s| !s.is_empty()) else {
            return Ok(None);
        };
        let mut c = Config::new(output, TracerKind::Function);
        if let Some(t) = get(ENV_TRACER) {
            c.tracer = TracerKind::parse(&t).ok_or(ConfigError(ENV_TRACER, t))?;
        }
        let globs = |k: &str| -> Vec<String> {
            get(k)
                .map(|s| {
                    s.lines()
                        .map(str::trim)
                        .filter(|l| !l.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default()
        };
        c.filter = globs(ENV_FILTER);
        c.notrace = globs(ENV_NOTRACE);
        c.graph_functions = globs(ENV_GRAPH);
        c.events = globs(ENV_EVENTS);
        let num = |k: &'static str, dflt: u64| -> Result<u64, ConfigError> {
            match get(k) {
                None => Ok(dflt),
                Some(s) => s.trim().parse().map_err(|_| ConfigError(k, s)),
            }
        };
        c.max_depth = u32::try_from(num(ENV_MAX_DEPTH, 0)?)
            .map_err(|_| ConfigError(ENV_MAX_DEPTH, "too large".into()))?;
        c.retval = num(ENV_RETVAL, 0)? != 0;
        c.thresh_ns = num(ENV_THRESH_NS, 0)?;
        c.buffer_kb = num(ENV_BUFFER_KB, DEFAULT_BUFFER_KB)?.max(4);
        c.overwrite = num(ENV_OVERWRITE, 1)? != 0;
        c.tracing_on = num(ENV_TRACING_ON, 1)? != 0;
        c.grow_max_bytes = num(ENV_GROW_MAX_BYTES, 0)?;
        c.ring_dir = get(ENV_RING_DIR)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        c.control = get(ENV_CONTROL)
            .filter(|s| !s.is_empty())
            .map(PathBuf::from);
        if let Some(s) = get(ENV_CLOCK) {
            c.clock = ClockKind::parse(&s).ok_or(ConfigError(ENV_CLOCK, s))?;
        }
        Ok(Some(c))
    }
}

/// An environment variable with a value the agent does not understand.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError(pub &'static str, pub String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}={:?}", self.0, self.1)
    }
}

impl std::error::Error for ConfigError {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn env_round_trip() {
        let mut c = Config::new("/tmp/x", TracerKind::FunctionGraph);
        c.filter = vec!["fib*".into(), "ns::f<a, b>".into()];
        c.notrace = vec!["main".into()];
        c.graph_functions = vec!["work".into()];
        c.max_depth = 3;
        c.retval = true;
        c.thresh_ns = 20_000;
        c.buffer_kb = 64;
        c.overwrite = false;
        c.ring_dir = Some("/dev/shm/rings".into());
        c.clock = ClockKind::Mono;
        c.events = vec!["sched:*".into(), "demo_value".into()];
        c.tracing_on = false;
        c.control = Some("/tmp/ctl.sock".into());
        c.grow_max_bytes = 4096 + (64 << 20);
        let env: HashMap<&str, String> = c.to_env().into_iter().collect();
        let back = Config::from_env_vars(|k| env.get(k).cloned())
            .unwrap()
            .unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn unarmed_without_output() {
        assert_eq!(Config::from_env_vars(|_| None).unwrap(), None);
    }

    #[test]
    fn globs_are_the_kernels() {
        let pats = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(glob_matches_any(&pats(&["fib*"]), "fibonacci"));
        assert!(glob_matches_any(&pats(&["x", "*::f"]), "calls::f"));
        assert!(glob_matches_any(&pats(&["[!a]b"]), "cb"));
        // The kernel's glob_match() has no `^` negation: `[^a]` is a class of `^` and `a`.
        assert!(!glob_matches_any(&pats(&["[^a]b"]), "cb"));
        assert!(glob_matches_any(&pats(&["[^a]b"]), "^b"));
        assert!(!glob_matches_any(&[], "f"));
    }

    #[test]
    fn buffer_sizes_are_exact_or_refused() {
        assert_eq!(check_buffer_kb(DEFAULT_BUFFER_KB), Ok(()));
        assert_eq!(check_buffer_kb(4), Ok(()));
        let e = check_buffer_kb(1408).unwrap_err();
        assert!(e.contains("use 1024 or 2048"), "{e}");
        assert!(check_buffer_kb(2).unwrap_err().ends_with("use 4"));
        assert!(check_buffer_kb(0).is_err());
        assert!(
            check_buffer_kb(u64::MAX)
                .unwrap_err()
                .contains("at most 16777216")
        );
        assert_eq!(check_buffer_kb(MAX_BUFFER_KB), Ok(()));
    }

    #[test]
    fn rejects_bad_values() {
        let get = |k: &str| match k {
            ENV_OUTPUT => Some("/tmp/x".to_string()),
            ENV_CLOCK => Some("perf".to_string()),
            _ => None,
        };
        assert_eq!(
            Config::from_env_vars(get).unwrap_err(),
            ConfigError(ENV_CLOCK, "perf".into())
        );
    }
}
