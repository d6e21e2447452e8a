//! The live control channel: how the `ftrace` tool (serving the program's tracefs through
//! FUSE) changes tracer, filters and `tracing_on` while the program runs.
//!
//! When [`crate::config::ENV_CONTROL`] names a unix socket, the agent connects to it at start
//! (before the program's `main`), says `HELLO <pid> <parent tid> <instance dir>`, and one
//! control thread serves line requests on it. Every process of a traced tree does: the
//! variable is inherited, so an exec'd image connects at its start (and waits for its first
//! `STATE` before the program runs: it starts with every site a NOP), and a forked child
//! connects from the agent's fork handler, naming the thread that forked it (`0` for an
//! image that started the agent itself). Requests:
//!
//! | request | answer |
//! | --- | --- |
//! | `SITES` | one `addr\tenabled\tmodule\tname` line per call site (hex address), then `.` |
//! | `STATE <tracer> <on> <depth> <clock> <sel> <roots> <probes> <pids> <no pids> <fork> <cpus> <retval> <thresh> <profile> <func stack> <event stack>` | `OK <sites changed>` or `ERR <errno> <text>` |
//! | `EVENTS` | one [`EventInfo::to_line`](crate::event::EventInfo::to_line) line per trace event the program declares, then `.` |
//! | `EVENT_SET <id>\t<state>` | `OK 0` once the event has that [`EventConfig::to_args`](crate::event_record::EventConfig::to_args) state (armed, soft-disabled, filter, triggers), `ERR 19 ...` for no such event, `ERR 22 ...` for a bad filter |
//! | `EVENT_PIDS <pids>\t<no pids>\t<fork>` | `OK 0` once `set_event_pid`, `set_event_notrace_pid` and `event-fork` are those ([`crate::event_pids::to_args`]'s form), `ERR 22 ...` for a malformed request |
//! | `EVENT_HIST <id>` | the event's hist tables as aggregated in the program ([`HistDump::to_lines`](crate::event_record::HistDump::to_lines) each), then `.`; `ERR 19 ...` for an event not armed |
//! | `EVENT_HIST_CLEAR <id> <n>` | `OK 0` once hist table `n` of the event is empty, `ERR 19 ...` for no such table |
//! | `EVENT_GET <id>` | `OK <soft-disabled> <counts>` (the triggers' remaining counts, comma-separated, `-` for none) of an armed event, else `ERR 19 ...` |
//! | `PROBES` | `ON <tracing_on>`, one `addr\tcommand\tcount` line per counted probe, then `.` |
//!
//! `STATE` carries the whole wanted state: the tracer (`nop`, `function`, `function_graph`),
//! `tracing_on` (0/1; `-` leaves the program's own, which its function commands change), `max_graph_depth`, the trace clock (`local`, `mono`, `x86-tsc`), and
//! comma-separated hex site addresses (`-` for none):
//! the sites to enable (the filter files resolved by the tool) and the function_graph roots
//! (`set_graph_function`); then the function commands (`-`, or comma-separated
//! `addr:traceon|traceoff|stacktrace:count`, or `addr:enable_event|disable_event=<event
//! id>:count`, `u` for no count), run in the program ([`crate::probe`]),
//! which `PROBES` reads back with the `tracing_on` they may have changed; then the pid filters
//! ([`crate::pids`]): `set_ftrace_pid` and `set_ftrace_notrace_pid` as comma-separated decimal
//! thread ids (`-` for none) and `function-fork` (0/1); last `tracing_cpumask`
//! ([`crate::cpumask`]): `-` for all CPUs, else comma-separated hex 64-bit words, CPU 0 in bit
//! 0 of the first; then `funcgraph-retval` (0/1: function_graph exits carry return values) and
//! `tracing_thresh` in nanoseconds ([`crate::thresh`]; 0: off), and `function_profile_enabled`
//! (0: off, else the profile's generation: the selected sites are counted whatever the
//! tracer, into the instance directory's counters file, [`crate::profile`]; a new number
//! starts a fresh profile), `func_stack_trace` (0/1: the function tracer records each
//! call's stack after its event, [`handler::FUNC_STACK`]) and the `stacktrace` option (0/1:
//! each trace event is followed by its firing function's stack,
//! [`crate::event_record::EVENT_STACK`]).
//! The agent patches with its usual protocols ([`crate::patch`]):
//! sites whose call must change are disabled first, retargeted, then the wanted ones enabled.
//! Invariant: the hot paths see only their usual statics change (tracer, `tracing_on`, depth,
//! fast-path switches), and a site is only retargeted while disabled. The thread never runs
//! instrumented code and exits when the tool closes the socket (the program keeps its last
//! state).

use core::sync::atomic::Ordering;
use std::collections::HashSet;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;

use crate::config::{ClockKind, TracerKind};
use crate::probe::WantedProbe;
use crate::{Agent, agent, apply, call_target, dispatch, handler};

/// The state the tool asks for.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wanted {
    /// The tracer; `None` is `nop` (every site disabled).
    pub tracer: Option<TracerKind>,
    /// `tracing_on`: events are recorded; `None` leaves the program's switch as it is (its
    /// `traceon` / `traceoff` commands own it between the tree's writes of `tracing_on`).
    pub on: Option<bool>,
    /// `max_graph_depth` (0: unlimited).
    pub depth: u32,
    /// The trace clock.
    pub clock: ClockKind,
    /// The sites to enable.
    pub sel: HashSet<u64>,
    /// The function_graph roots (`set_graph_function`).
    pub roots: HashSet<u64>,
    /// The function commands (`f:traceoff:N`): their sites are enabled whatever the tracer,
    /// calling the full-save path, where [`crate::probe`] runs them.
    pub probes: Vec<WantedProbe>,
    /// `set_ftrace_pid`: trace only these threads (empty: no list).
    pub pids: Vec<u32>,
    /// `set_ftrace_notrace_pid`: never trace these threads (empty: no list).
    pub no_pids: Vec<u32>,
    /// `function-fork`: forked children of listed threads join the lists.
    pub follow_fork: bool,
    /// `tracing_cpumask` as 64-bit words (bit n = CPU n); `None`: all CPUs.
    pub cpus: Option<Vec<u64>>,
    /// `funcgraph-retval`: function_graph exits carry the function's return value.
    pub retval: bool,
    /// `tracing_thresh` in nanoseconds (0: off).
    pub thresh_ns: u64,
    /// `function_profile_enabled`: 0 off, else the profile's generation (a new number starts
    /// a fresh profile): the selected sites are counted ([`crate::profile`]), whatever the
    /// tracer and `tracing_on`.
    pub profile: u64,
    /// `func_stack_trace`: the function tracer records each call's stack after its event.
    pub func_stack: bool,
    /// The `stacktrace` option: each trace event is followed by its firing function's stack.
    pub event_stack: bool,
}

fn parse_pids(s: &str) -> Option<Vec<u32>> {
    if s == "-" {
        return Some(Vec::new());
    }
    let mut v: Vec<u32> = s
        .split(',')
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    v.sort_unstable();
    v.dedup();
    Some(v)
}

fn fmt_pids(pids: &[u32]) -> String {
    if pids.is_empty() {
        return "-".into();
    }
    let v: Vec<String> = pids.iter().map(u32::to_string).collect();
    v.join(",")
}

fn parse_addrs(s: &str) -> Option<HashSet<u64>> {
    if s == "-" {
        return Some(HashSet::new());
    }
    s.split(',')
        .map(|a| u64::from_str_radix(a, 16).ok())
        .collect()
}

fn fmt_addrs(set: &HashSet<u64>) -> String {
    if set.is_empty() {
        return "-".into();
    }
    let mut v: Vec<u64> = set.iter().copied().collect();
    v.sort_unstable();
    let mut s = String::new();
    for (i, a) in v.iter().enumerate() {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, "{a:x}");
    }
    s
}

fn fmt_probes(probes: &[WantedProbe]) -> String {
    if probes.is_empty() {
        return "-".into();
    }
    let v: Vec<String> = probes.iter().map(WantedProbe::to_field).collect();
    v.join(",")
}

impl Wanted {
    /// The `STATE` request line (without the newline).
    pub fn to_request(&self) -> String {
        format!(
            "STATE {} {} {} {} {} {} {} {} {} {} {} {} {} {} {} {}",
            self.tracer.map_or("nop", TracerKind::name),
            self.on.map_or("-", |on| if on { "1" } else { "0" }),
            self.depth,
            self.clock.name(),
            fmt_addrs(&self.sel),
            fmt_addrs(&self.roots),
            fmt_probes(&self.probes),
            fmt_pids(&self.pids),
            fmt_pids(&self.no_pids),
            u8::from(self.follow_fork),
            self.cpus.as_ref().map_or("-".into(), |w| {
                let v: Vec<String> = w.iter().map(|x| format!("{x:x}")).collect();
                v.join(",")
            }),
            u8::from(self.retval),
            self.thresh_ns,
            self.profile,
            u8::from(self.func_stack),
            u8::from(self.event_stack),
        )
    }

    /// Parses a `STATE` request line.
    pub fn parse(line: &str) -> Option<Wanted> {
        let mut it = line.split_ascii_whitespace();
        if it.next()? != "STATE" {
            return None;
        }
        let tracer = match it.next()? {
            "nop" => None,
            t => Some(TracerKind::parse(t)?),
        };
        let on = match it.next()? {
            "-" => None,
            "0" => Some(false),
            "1" => Some(true),
            _ => return None,
        };
        let depth = it.next()?.parse().ok()?;
        let clock = ClockKind::parse(it.next()?)?;
        let sel = parse_addrs(it.next()?)?;
        let roots = parse_addrs(it.next()?)?;
        let probes = match it.next()? {
            "-" => Vec::new(),
            p => p
                .split(',')
                .map(WantedProbe::parse)
                .collect::<Option<_>>()?,
        };
        let pids = parse_pids(it.next()?)?;
        let no_pids = parse_pids(it.next()?)?;
        let follow_fork = match it.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let cpus = match it.next()? {
            "-" => None,
            w => Some(
                w.split(',')
                    .map(|x| u64::from_str_radix(x, 16).ok())
                    .collect::<Option<Vec<u64>>>()?,
            ),
        };
        let retval = match it.next()? {
            "0" => false,
            "1" => true,
            _ => return None,
        };
        let thresh_ns = it.next()?.parse().ok()?;
        let profile = it.next()?.parse().ok()?;
        let mut flag = || match it.next()? {
            "0" => Some(false),
            "1" => Some(true),
            _ => None,
        };
        let func_stack = flag()?;
        let event_stack = flag()?;
        if it.next().is_some() {
            return None;
        }
        Some(Wanted {
            tracer,
            on,
            depth,
            clock,
            sel,
            roots,
            probes,
            pids,
            no_pids,
            follow_fork,
            cpus,
            retval,
            thresh_ns,
            profile,
            func_stack,
            event_stack,
        })
    }
}

/// Who connects: a fresh process image, or a child forked by a traced process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A process image that started the agent itself (preloaded at start, after an `exec`,
    /// or attached).
    Image,
    /// A child forked by the thread with this id; it carries its parent's state (and, with
    /// `function-fork`, has joined the pid lists naming that thread, [`crate::pids`]).
    ForkedBy(u32),
}

/// Whether the connecting agent waits for its first `STATE` before going on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FirstState {
    /// Wait (at most [`FIRST_STATE_TIMEOUT`]): a fresh image of a traced process tree takes
    /// the tree's state before its program runs.
    Wait,
    /// Go on with the state the agent has.
    DontWait,
}

/// How long a fresh image waits for its first `STATE`.
pub const FIRST_STATE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// The socket of this process's control thread (-1: none): a forked child closes its copy
/// before it connects on its own ([`reconnect_after_fork`]).
static CONTROL_FD: core::sync::atomic::AtomicI32 = core::sync::atomic::AtomicI32::new(-1);

/// How far this process's link is: what [`FirstState::Wait`] waits on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum LinkState {
    /// Connected, no `STATE` yet.
    Waiting,
    /// A `STATE` was answered.
    StateSeen,
    /// The tool closed the link before any `STATE`.
    Closed,
}

/// Set by the control thread when it has answered a `STATE`, or when the tool closed the
/// link before one.
static LINK_STATE: (std::sync::Mutex<LinkState>, std::sync::Condvar) = (
    std::sync::Mutex::new(LinkState::Waiting),
    std::sync::Condvar::new(),
);

fn set_link_state(to: LinkState, only_from: Option<LinkState>) {
    let (m, cv) = &LINK_STATE;
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    if only_from.is_none_or(|f| *g == f) {
        *g = to;
    }
    cv.notify_all();
}

/// How [`start`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Started {
    /// Registered: the first `STATE` was applied (or not waited for,
    /// [`FirstState::DontWait`]).
    Ready,
    /// No `STATE` came within [`FIRST_STATE_TIMEOUT`] (a later one still applies).
    TimedOut,
    /// The tool closed the link before sending a `STATE`: it refused this process (not of
    /// its tree) or was stopping. Nothing will come.
    Closed,
}

/// Connects to the tool's socket, says `HELLO <pid> <parent tid or 0> <dir>` and starts the
/// control thread. With [`FirstState::Wait`], returns once the first `STATE` was applied,
/// the tool closed the link, or [`FIRST_STATE_TIMEOUT`] passed.
pub fn start(
    path: &Path,
    dir: &Path,
    origin: Origin,
    first: FirstState,
) -> std::io::Result<Started> {
    use std::os::fd::AsRawFd;
    let mut sock = UnixStream::connect(path)?;
    let parent = match origin {
        Origin::Image => 0,
        Origin::ForkedBy(tid) => tid,
    };
    writeln!(
        sock,
        "HELLO {} {parent} {}",
        std::process::id(),
        dir.display()
    )?;
    let reader = sock.try_clone()?;
    CONTROL_FD.store(sock.as_raw_fd(), Ordering::Relaxed);
    set_link_state(LinkState::Waiting, None);
    crate::own_thread::spawn("ftrace-control", move || {
        serve(BufReader::new(reader), sock);
        set_link_state(LinkState::Closed, Some(LinkState::Waiting));
    })?;
    if first == FirstState::DontWait {
        return Ok(Started::Ready);
    }
    let (m, cv) = &LINK_STATE;
    let g = m.lock().unwrap_or_else(|e| e.into_inner());
    let (g, _) = cv
        .wait_timeout_while(g, FIRST_STATE_TIMEOUT, |s| *s == LinkState::Waiting)
        .unwrap_or_else(|e| e.into_inner());
    Ok(match *g {
        LinkState::Waiting => Started::TimedOut,
        LinkState::StateSeen => Started::Ready,
        LinkState::Closed => Started::Closed,
    })
}

/// In a forked child: closes the parent's control socket (its thread did not survive the
/// fork) and registers with the tool as a process of its own, forked by `parent_tid`.
pub fn reconnect_after_fork(path: &Path, dir: &Path, parent_tid: u32) -> std::io::Result<()> {
    let old = CONTROL_FD.swap(-1, Ordering::Relaxed);
    if old >= 0 {
        // SAFETY: the descriptor of the parent's control socket, copied by fork; nothing in
        // this process uses it any more (the thread that did is gone).
        unsafe { libc::close(old) };
    }
    start(
        path,
        dir,
        Origin::ForkedBy(parent_tid),
        FirstState::DontWait,
    )
    .map(|_| ())
}

fn serve(mut r: BufReader<UnixStream>, mut w: UnixStream) {
    let mut line = String::new();
    loop {
        line.clear();
        match r.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let answer = answer(line.trim_end());
        if w.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

fn answer(req: &str) -> String {
    let mut g = agent();
    let Some(a) = g.as_mut() else {
        return "ERR 19 agent not active\n".into();
    };
    if req == "SITES" {
        let mut out = String::new();
        let enabled: HashSet<u64> = a
            .patcher
            .sites()
            .iter()
            .filter(|s| s.enabled)
            .map(|s| s.addr)
            .collect();
        for s in &a.sites {
            let on = u8::from(enabled.contains(&s.addr));
            let name = s.name.demangled();
            let _ = writeln!(out, "{:x}\t{on}\t{}\t{name}", s.addr, s.module);
        }
        out.push_str(".\n");
        return out;
    }
    if req == "EVENTS" {
        let mut out = String::new();
        for e in crate::event::list() {
            let _ = writeln!(out, "{}", e.to_line());
        }
        out.push_str(".\n");
        return out;
    }
    if let Some(rest) = req.strip_prefix("EVENT_SET ") {
        let parsed = rest.split_once('\t').and_then(|(id, c)| {
            Some((
                id.parse::<u16>().ok()?,
                crate::event_record::EventConfig::parse_args(c)?,
            ))
        });
        return match parsed {
            None => format!("ERR {} bad event state\n", libc::EINVAL),
            Some((id, c)) => match crate::event_record::set(id, c) {
                Ok(()) => "OK 0\n".into(),
                Err(e @ "no such event") => format!("ERR {} {e}\n", libc::ENODEV),
                Err(e) => format!("ERR {} {e}\n", libc::EINVAL),
            },
        };
    }
    if let Some(id) = req.strip_prefix("EVENT_HIST ") {
        return match id.parse().ok().and_then(crate::event_record::hist) {
            None => format!("ERR {} event not armed\n", libc::ENODEV),
            Some(tables) => {
                let mut out: String = tables.iter().map(|t| t.to_lines()).collect();
                out.push_str(".\n");
                out
            }
        };
    }
    if let Some(rest) = req.strip_prefix("EVENT_HIST_CLEAR ") {
        let cleared = rest
            .split_once(' ')
            .and_then(|(id, n)| Some((id.parse().ok()?, n.parse().ok()?)))
            .map(|(id, n)| crate::event_record::clear_hist(id, n));
        return match cleared {
            Some(Ok(())) => "OK 0\n".into(),
            Some(Err(e)) => format!("ERR {} {e}\n", libc::ENODEV),
            None => format!("ERR {} bad request\n", libc::EINVAL),
        };
    }
    if let Some(rest) = req.strip_prefix("EVENT_PIDS ") {
        return match crate::event_pids::parse_args(rest) {
            None => format!("ERR {} bad event pid lists\n", libc::EINVAL),
            Some((pids, no_pids, fork)) => {
                crate::event_pids::set_lists(&pids, &no_pids, fork);
                "OK 0\n".into()
            }
        };
    }
    if let Some(id) = req.strip_prefix("EVENT_GET ") {
        return match id.parse().ok().and_then(crate::event_record::get) {
            None => format!("ERR {} event not armed\n", libc::ENODEV),
            Some((soft, counts)) => {
                let c: Vec<String> = counts.iter().map(i64::to_string).collect();
                let c = if c.is_empty() {
                    "-".to_string()
                } else {
                    c.join(",")
                };
                format!("OK {} {c}\n", u8::from(soft))
            }
        };
    }
    if req == "PROBES" {
        let on = handler::TRACING_ON.load(Ordering::SeqCst);
        let mut out = format!("ON {}\n", u8::from(on));
        for (p, c) in crate::probe::counts() {
            if let Some(c) = c {
                let _ = writeln!(out, "{:x}\t{}\t{c}", p.addr, p.cmd.name());
            }
        }
        out.push_str(".\n");
        return out;
    }
    if let Some(bytes) = req.strip_prefix("RESIZE ") {
        return answer_resize(bytes);
    }
    match Wanted::parse(req) {
        Some(w) => match apply_wanted(a, &w) {
            Ok(n) => {
                set_link_state(LinkState::StateSeen, None);
                format!("OK {n}\n")
            }
            Err(e) => format!("ERR {} {e}\n", e.raw_os_error().unwrap_or(libc::EIO)),
        },
        None => format!("ERR {} bad request\n", libc::EINVAL),
    }
}

/// `RESIZE <bytes>`: every thread moves to a ring file of `bytes` bytes ([`crate::resize`]);
/// a thread started from here on gets one too. A settling thread turns the fast paths back
/// on once every live thread has switched.
fn answer_resize(bytes: &str) -> String {
    let Ok(bytes) = bytes.parse::<usize>() else {
        return format!("ERR {} bad request\n", libc::EINVAL);
    };
    match crate::resize::request(bytes) {
        Ok(()) => {
            let _ = crate::own_thread::spawn("ftrace-resize", || {
                while crate::resize::settle() {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
            });
            "OK 0\n".into()
        }
        Err(crate::resize::Refused::TooSmall) => format!("ERR {} too small\n", libc::EINVAL),
        Err(crate::resize::Refused::NoInstance) => format!("ERR {} not recording\n", libc::ENODEV),
    }
}

/// Brings the agent to `w`: returns the number of site writes (disables and enables).
pub fn apply_wanted(a: &mut Agent, w: &Wanted) -> std::io::Result<usize> {
    let old = (handler::TRACER.load(Ordering::Relaxed), a.on);
    let old_tracer = match old {
        (1, true) => Some(TracerKind::Function),
        (2, true) => Some(TracerKind::FunctionGraph),
        _ => None,
    };
    let probed: HashSet<u64> = w.probes.iter().map(|p| p.addr).collect();
    // The call each site needs under the new state: a probed site calls the full-save path
    // (where the probes run), whatever the tracer, and so does a profiled one under `nop`;
    // the others only under tracers that trace.
    let profiled = |addr: u64| w.profile != 0 && w.sel.contains(&addr);
    let want_call = |addr: u64, stubs: crate::tramp::Stubs, form: ftrace_patch::SiteForm| {
        let root = w.tracer == Some(TracerKind::FunctionGraph) && w.roots.contains(&addr);
        let target = if probed.contains(&addr) || (w.tracer.is_none() && profiled(addr)) {
            if root { stubs.root() } else { stubs.entry() }
        } else {
            call_target(w.tracer?, root, stubs)
        };
        crate::tramp::site_bytes(&stubs, form, addr, target).ok()
    };
    let traced = |addr: u64| w.tracer.is_some() && w.sel.contains(&addr);
    let wanted_on = |addr: u64| traced(addr) || probed.contains(&addr) || profiled(addr);
    let info: std::collections::HashMap<u64, crate::tramp::Stubs> =
        a.sites.iter().map(|s| (s.addr, s.stubs)).collect();
    // 1. Disable what must go off or change its call.
    let mut changed = a.patcher.set(false, |s| {
        !wanted_on(s.addr)
            || info
                .get(&s.addr)
                .and_then(|&st| want_call(s.addr, st, s.form))
                .is_some_and(|c| c != s.call)
    })?;
    // 2. The handlers' statics.
    if old_tracer == Some(TracerKind::Function) && w.tracer != Some(TracerKind::Function) {
        let _ = dispatch::DISPATCHER.unregister(&dispatch::FUNCTION_OPS);
    }
    if w.tracer == Some(TracerKind::Function) && old_tracer != Some(TracerKind::Function) {
        // The ops may be registered while off (`tracing_on` 0 under the function tracer: a
        // fresh image waiting for its first state): registered once, whatever came before.
        let _ = dispatch::DISPATCHER.unregister(&dispatch::FUNCTION_OPS);
        dispatch::DISPATCHER
            .register(&dispatch::FUNCTION_OPS)
            .map_err(|e| std::io::Error::other(format!("registering the function ops: {e:?}")))?;
    }
    handler::TRACER.store(
        match w.tracer {
            None => 0,
            Some(TracerKind::Function) => 1,
            Some(TracerKind::FunctionGraph) => 2,
        },
        Ordering::Relaxed,
    );
    handler::MAX_DEPTH.store(w.depth, Ordering::Relaxed);
    handler::RETVAL.store(w.retval, Ordering::Relaxed);
    a.config.retval = w.retval;
    let walks = w.func_stack
        || w.event_stack
        || w.probes
            .iter()
            .any(|p| p.cmd == ftrace_core::filter::ProbeCommand::Stacktrace);
    if walks {
        // The stack walks find the unwinder (loading libgcc_s into a C program) here, not on
        // the event path.
        crate::stack::prepare_caller_walk();
    }
    handler::FUNC_STACK.store(w.func_stack, Ordering::Relaxed);
    crate::event_record::EVENT_STACK.store(w.event_stack, Ordering::Relaxed);
    crate::thresh::set(w.thresh_ns, w.clock);
    a.config.thresh_ns = w.thresh_ns;
    handler::GRAPH_FILTERED.store(
        w.tracer == Some(TracerKind::FunctionGraph) && !w.roots.is_empty(),
        Ordering::Relaxed,
    );
    if let Some(on) = w.on {
        handler::TRACING_ON.store(on, Ordering::Relaxed);
    }
    handler::CLOCK_TSC.store(w.clock.is_tsc(), Ordering::Relaxed);
    crate::pids::FOLLOW_FORK.store(w.follow_fork, Ordering::Relaxed);
    crate::pids::set_lists(&w.pids, &w.no_pids);
    crate::cpumask::set_mask(w.cpus.as_deref());
    a.config.clock = w.clock;
    let all: Vec<u64> = a.sites.iter().map(|s| s.addr).collect();
    crate::profile::set(
        w.profile,
        Some(&a.dir),
        &all,
        |ip| w.sel.contains(&ip),
        w.clock.is_tsc(),
    );
    handler::update_fast_path();
    crate::probe::publish(&w.probes, &traced);
    // 3. Retarget (disabled sites only) and record the selection.
    a.patcher.retarget(|s| {
        info.get(&s.addr)
            .and_then(|&st| want_call(s.addr, st, s.form))
    });
    for s in &mut a.sites {
        s.selected = wanted_on(s.addr);
        s.root = w.tracer == Some(TracerKind::FunctionGraph) && w.roots.contains(&s.addr);
    }
    if let Some(t) = w.tracer {
        a.config.tracer = t;
    }
    a.on = w.tracer.is_some() || !probed.is_empty() || w.profile != 0;
    // 4. Enable the wanted sites.
    changed += apply(a)?;
    Ok(changed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_request_round_trip() {
        let w = Wanted {
            tracer: Some(TracerKind::FunctionGraph),
            on: Some(true),
            depth: 3,
            clock: ClockKind::Mono,
            sel: [0x401000u64, 0x401100].into_iter().collect(),
            roots: [0x401100u64].into_iter().collect(),
            probes: vec![
                WantedProbe {
                    addr: 0x401000,
                    cmd: ftrace_core::filter::ProbeCommand::Traceoff,
                    count: Some(1),
                    event: None,
                },
                WantedProbe {
                    addr: 0x401100,
                    cmd: ftrace_core::filter::ProbeCommand::Traceon,
                    count: None,
                    event: None,
                },
            ],
            pids: vec![7, 12],
            no_pids: vec![],
            follow_fork: true,
            cpus: Some(vec![0x2, 0x1]),
            retval: true,
            thresh_ns: 20_000,
            profile: 3,
            func_stack: true,
            event_stack: true,
        };
        let line = w.to_request();
        assert_eq!(
            line,
            "STATE function_graph 1 3 mono 401000,401100 401100 401000:traceoff:1,401100:traceon:u 7,12 - 1 2,1 1 20000 3 1 1"
        );
        assert_eq!(Wanted::parse(&line), Some(w));
        let nop = Wanted::default();
        assert_eq!(
            nop.to_request(),
            "STATE nop - 0 local - - - - - 0 - 0 0 0 0 0"
        );
        assert_eq!(
            Wanted::parse("STATE nop 2 0 local - - - - - 0 - 0 0 0 0 0"),
            None
        );
        assert_eq!(Wanted::parse(&nop.to_request()), Some(nop));
        assert_eq!(
            Wanted::parse("STATE bogus 1 0 local - - - - - 0 - 0 0 0 0 0"),
            None
        );
        assert_eq!(
            Wanted::parse("STATE nop 1 0 perf - - - - - 0 - 0 0 0 0 0"),
            None
        );
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local zz - - - - 0 - 0 0 0 0 0"),
            None
        );
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local - - 10:snapshot:u - - 0 - 0 0 0 0 0"),
            None
        );
        assert_eq!(Wanted::parse("STATE nop 1 0 local - -"), None);
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local - - - x - 0 - 0 0 0 0 0"),
            None
        );
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local - - - - - 2 - 0 0 0 0 0"),
            None
        );
        assert_eq!(Wanted::parse("STATE nop 1 0 local - - - - - 0 g 0 0"), None);
        assert_eq!(Wanted::parse("STATE nop 1 0 local - - - - - 0"), None);
        assert_eq!(Wanted::parse("STATE nop 1 0 local - - - - - 0 -"), None);
        assert_eq!(Wanted::parse("STATE nop 1 0 local - - - - - 0 - 0"), None);
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local - - - - - 0 - 0 -1"),
            None
        );
        assert_eq!(Wanted::parse("STATE nop 1 0 local - - - - - 0 - 2 0"), None);
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local - - - - - 0 - 0 0 x 0 0"),
            None
        );
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local - - - - - 0 - 0 0 0 2 0"),
            None
        );
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local - - - - - 0 - 0 0 0 0 2"),
            None
        );
        assert_eq!(
            Wanted::parse("STATE nop 1 0 local - - - - - 0 - 0 0 0 0 0 0"),
            None
        );
    }
}
