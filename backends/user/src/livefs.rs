//! The tracefs tree (ftrace-tracefs's [`Tracefs`](ftrace_tracefs::Tracefs)) bound to a running traced program: what
//! `ftrace record --mount` serves.
//!
//! [`UserHost`] and the top-level [`UserBackend`] live in the tool, never in the program. Reads
//! come from the program's buffer files ([`crate::live`]) formatted by ftrace-tracers (the same
//! printers as `ftrace report`); control writes (tracer, the function-filter files,
//! `tracing_on`, `max_graph_depth`) are resolved here (ftrace-core's filter language over the
//! program's call sites) and sent to the agent as one whole wanted state
//! ([`crate::agentctl`]), which it applies with its live patching protocols.
//!
//! `set_ftrace_pid` / `set_ftrace_notrace_pid` (top level) go to the agent with the
//! `function-fork` option: a pid there is a thread id of the program ([`ftrace_agent::pids`]).
//! `set_event_pid` / `set_event_notrace_pid` (top level) go to the agent with `event-fork`
//! and filter the program's trace events only ([`ftrace_agent::event_pids`]).
//! `tracing_cpumask` goes to the agent too ([`ftrace_agent::cpumask`]: the program's events are
//! recorded only on the CPUs of the mask); the markers this tool records are not masked (their
//! CPU is the tool's, not the writer's).
//!
//! `buffer_subbuf_size_kb` (4 to 512 KiB, per instance) is the size of the pages this tree
//! serves (`trace_pipe_raw`, `events/header_page`) and so bounds one `trace_marker` event (a
//! longer write is cut, and the writer writes the rest as the next event, as on Linux); the
//! program's per-thread slot rings have no sub-buffers.
//!
//! `buffer_size_kb` (top level or `per_cpu/cpuN`, whole sub-buffers as the kernel rounds,
//! `X` at the top when the CPUs differ) sizes this tool's per-CPU marker buffers (a full one
//! overwrites its oldest events, counted as missed, or with `overwrite` off refuses the write
//! with `EBADF`, counted in `dropped events`) and, at the top level, the program's
//! per-thread rings: the kernel's per-CPU buffers are per-thread rings here, so every thread
//! moves to a ring of the largest per-CPU size (a thread runs on any CPU) the next time it
//! records through the agent's handlers, its earlier events kept in its old ring
//! ([`ftrace_agent::resize`]).
//!
//! `function_profile_enabled` goes to the agent too ([`ftrace_agent::profile`]: the program
//! counts its calls); `trace_stat/function<cpu>` reads every process's counters and sums them
//! by function name ([`crate::profile`]).
//!
//! `trace_marker` / `trace_marker_raw` events are recorded here (stamped with the trace clock
//! and the writer's pid) and merged with the program's events. Instances (`mkdir
//! instances/x`) get their own buffers of marker events (`events/ftrace/print`, with the
//! instance's own `events/header_page`) and only the `nop` tracer (the agent has one set of
//! call sites and one tracer), and serve none of the function tracer's files
//! (`set_ftrace_filter`, `set_ftrace_notrace`, `set_ftrace_pid`, `set_ftrace_notrace_pid`), as
//! a kernel built without it, rather than files that take a filter and do nothing. Nor do
//! they list the program's or the `sched` events (the program records its events into its own
//! rings, which only the top level reads): an instance's `events/` holds its marker events
//! (`ftrace/`) and the headers, `set_event` matches nothing (`EINVAL`). What the tree asks and this backend cannot do is refused
//! with an errno, never pretended: a function in `set_graph_notrace` (`ENODEV`), enabling a
//! `sched` event (`ENODEV`: see [`register_events`]; the program's own events record,
//! [`crate::progevents`]), and function commands other than `traceon` / `traceoff` /
//! `stacktrace` / `enable_event` / `disable_event` (`EINVAL`). Invariant: a refused write changes
//! nothing, here or in the program.
//!
//! `f:traceon[:N]` / `f:traceoff[:N]` / `f:stacktrace[:N]` and `f:enable_event:SYS:EV[:N]` /
//! `f:disable_event:SYS:EV[:N]` (on the program's own events, which the tree then holds in
//! soft mode) run in the program (the agent's probe ops; `stacktrace` records the thread's
//! stack, walked by the program's unwinder from the traced call, as a `kernel_stack` record;
//! the event commands flip the event's soft-disabled bit, which the event's `enable` file
//! reads back), which owns
//! `tracing_on` and the counts while they run: the tree reads both back from the agent
//! ([`TraceBackend::tracing_on`], the `set_ftrace_filter` read-back) and takes them before
//! sending a new state. A new state never undoes a probe that fired after that read: the agent
//! keeps the live count of a probe it already runs (the count sent is a new probe's start),
//! and only a write of `tracing_on` sets the program's switch (other requests leave it).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ftrace_agent::config::{ClockKind, TracerKind};
use ftrace_agent::control::Wanted;
use ftrace_agent::probe::WantedProbe;
use ftrace_core::Errno;
use ftrace_core::event::{TraceCtx, TraceFlags as CtxFlags};
use ftrace_core::filter::ProbeCommand;
use ftrace_core::platform::{ExecContext, TaskContext};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_patch::PageStats;
use ftrace_tracefs::filter_edit::CommandEnv;
use ftrace_tracefs::filters::{FilterState, FilterStore, FilterWriter};
use ftrace_tracefs::{
    EventState, FilterEdit, FilterFile, FunctionRecords, Host, Param, PidFile, Reader, TextReader,
    TraceBackend, TracerOption, ring_buffer_pages,
};
use ftrace_tracers::clock::ClockUnit;
use ftrace_tracers::function::{
    FunctionTracer, trace_marker_raw_write as marker_raw, trace_marker_write as marker,
};
use ftrace_tracers::function_graph::{FunctionGraphTracer, ReturnValues};
use ftrace_tracers::iter::EventLists;
use ftrace_tracers::nop::NopTracer;
use ftrace_tracers::output::graph::GraphCpuState;
use ftrace_tracers::output::header::{HeaderInfo, LatencyInfo};
use ftrace_tracers::output::trace_file::{Overruns, TraceWriter};
use ftrace_tracers::output::{OutputEnv, TaskNames, TextToBytes};
use ftrace_tracers::profiler::ProfileMode;
use ftrace_tracers::tracer::{EntrySink, Tracer};
use ftrace_tracers::{EventRef, Missed, TraceIter, TraceOptions};

use crate::agentctl::{AgentLink, SiteLine};
use crate::live::{LiveEvent, LiveRecording, MARKER_SYMBOL};
use crate::profile::TreeProfile;
use crate::progevents::ProgramEvents;
use crate::tree::{EventIds, Members, Registration, Selection};

/// The pid of the process whose request the server is handling (set by the FUSE layer under
/// the tree's lock): `trace_marker` events carry it, as the kernel records `current`.
pub static CALLER_PID: AtomicU32 = AtomicU32::new(0);

/// The tracers, in `available_tracers` order.
const TRACERS: [&str; 3] = ["function_graph", "function", "nop"];

/// The clocks `trace_clock` lists (the agent stamps with these three).
const CLOCKS: [&str; 3] = ["local", "mono", "x86-tsc"];

static NOP: NopTracer = NopTracer;
static FUNCTION: FunctionTracer = FunctionTracer::new();
static GRAPH: FunctionGraphTracer =
    FunctionGraphTracer::new().with_return_values(ReturnValues::Recorded);

fn tracer_obj(name: &str) -> &'static dyn Tracer {
    match name {
        "function" => &FUNCTION,
        "function_graph" => &GRAPH,
        _ => &NOP,
    }
}

/// Whether a state request sets the first process's `tracing_on` to the tree's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Switch {
    /// Sets it (the first state, a write of `tracing_on`).
    Set,
    /// Leaves it: the program's function commands own it between writes of `tracing_on`.
    Keep,
}

/// The program side of the top level: the link to the agent, its buffers and call sites.
struct AgentPart {
    /// The first process's link (broken once it exits or execs; its sites stay the tree's
    /// names).
    link: AgentLink,
    /// The tree's other processes ([`crate::tree`]).
    others: Members,
    /// The executable's file name (its functions print without a module).
    exe: String,
    live: LiveRecording,
    sites: Vec<SiteLine>,
    filters: FilterState,
    /// The program's own trace events ([`crate::progevents`]).
    events: ProgramEvents,
}

/// Events recorded by the tool itself (`trace_marker`), in one instance: one buffer per CPU of
/// `capacity[cpu]` data bytes (`buffer_size_kb`), each event taking its ring-buffer record's
/// length ([`ftrace_ringbuf::page::event_length`]; the padding at a sub-buffer's end is not
/// counted). A full CPU buffer overwrites its oldest events in `overwrite` mode (counted as
/// missed before the next event kept, as `overrun` in `per_cpu/cpuN/stats`), else refuses
/// the new one (`dropped events`).
struct Markers {
    next: u64,
    events: VecDeque<LiveEvent>,
    /// Per CPU: the data bytes its buffer holds.
    capacity: Vec<u64>,
    /// Per CPU: events refused because the buffer was full (not `overwrite`).
    dropped: Vec<u64>,
}

/// What [`Markers::push`] does with a full CPU buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WhenFull {
    /// Drop the oldest events of that CPU (the `overwrite` option).
    Overwrite,
    /// Refuse the new event.
    Refuse,
}

/// The bytes a marker event takes in a CPU buffer.
fn record_bytes(e: &LiveEvent) -> u64 {
    ftrace_ringbuf::page::event_length(e.data.len()) as u64
}

impl Markers {
    fn new(nr_cpus: u32, bytes: u64) -> Self {
        let n = nr_cpus.max(1) as usize;
        Markers {
            next: 0,
            events: VecDeque::new(),
            capacity: vec![bytes; n],
            dropped: vec![0; n],
        }
    }

    /// The bytes the events of `cpu` take.
    fn used(&self, cpu: u32) -> u64 {
        self.events
            .iter()
            .filter(|e| e.cpu == cpu)
            .map(record_bytes)
            .sum()
    }

    /// Drops the oldest events of `cpu` until `more` bytes fit; the next event of that CPU
    /// kept (or `next`, when none is) counts them as missed. Returns whether they fit.
    fn make_room(&mut self, cpu: u32, more: u64, next: Option<&mut LiveEvent>) -> bool {
        let cap = self.capacity.get(cpu as usize).copied().unwrap_or(0);
        let mut used = self.used(cpu);
        let mut lost = 0;
        while used + more > cap {
            let Some(i) = self.events.iter().position(|e| e.cpu == cpu) else {
                break;
            };
            let e = self.events.remove(i).expect("found above");
            used -= record_bytes(&e);
            lost += 1 + e.missed;
        }
        if lost > 0 {
            match self.events.iter_mut().find(|e| e.cpu == cpu) {
                Some(e) => e.missed += lost,
                None => {
                    if let Some(n) = next {
                        n.missed += lost;
                    }
                }
            }
        }
        used + more <= cap
    }

    /// Records `e` in its CPU's buffer; `false` when it was refused (full, [`WhenFull::Refuse`],
    /// counted in `dropped`).
    fn push(&mut self, mut e: LiveEvent, full: WhenFull) -> bool {
        let cpu = e.cpu;
        let len = record_bytes(&e);
        let fits = match full {
            WhenFull::Overwrite => self.make_room(cpu, len, Some(&mut e)),
            WhenFull::Refuse => {
                let cap = self.capacity.get(cpu as usize).copied().unwrap_or(0);
                self.used(cpu) + len <= cap
            }
        };
        if !fits {
            if let Some(d) = self.dropped.get_mut(cpu as usize) {
                *d += 1;
            }
            return false;
        }
        e.index = self.next;
        self.next += 1;
        self.events.push_back(e);
        true
    }

    /// Sets the capacity of one CPU's buffer (or all); a smaller buffer loses its oldest
    /// events, counted as missed.
    fn resize(&mut self, cpu: Option<u32>, bytes: u64) {
        let n = self.capacity.len() as u32;
        for c in (0..n).filter(|&c| cpu.is_none_or(|x| x == c)) {
            self.capacity[c as usize] = bytes;
            self.make_room(c, 0, None);
        }
    }
}

/// One instance's state.
struct State {
    /// The program's agent (top level only: an instance records this tool's markers and has
    /// no function tracer or function-filter files).
    agent: Option<AgentPart>,
    tracer: &'static str,
    on: bool,
    depth: u32,
    /// `tracing_thresh` in nanoseconds (top level: sent to the agent).
    thresh_ns: u64,
    /// `function_profile_enabled` (top level: sent to the agent, which counts).
    profile: ProfileSwitch,
    flags: u64,
    /// `set_ftrace_pid`, `set_ftrace_notrace_pid` (top level: sent to the agent).
    pids: [Vec<u32>; 2],
    /// The children `function-fork` added to each pid list (removed when they exit).
    followed: [Vec<u32>; 2],
    /// `set_event_pid`, `set_event_notrace_pid` (top level: sent to the agent, which
    /// filters the program's events with them, and with `event-fork` adds a forked child of
    /// a listed thread in the child's copy).
    event_pids: [Vec<u32>; 2],
    /// The children `event-fork` added to each event pid list (removed when they exit), for
    /// the images they exec.
    event_followed: [Vec<u32>; 2],
    /// `tracing_cpumask` when not all CPUs (top level: sent to the agent).
    cpumask: Option<Vec<u64>>,
    tracer_flags: HashMap<&'static str, u32>,
    markers: Markers,
    comms: HashMap<u32, String>,
    clock: ClockKind,
    nr_cpus: u32,
    /// Each process's ring size (slots, header aside): what `buffer_size_kb` last set.
    buffer_bytes: u64,
    /// The ring size the program started with (what a new image reads from its
    /// environment): a process registering while the tree's differs is resized on arrival.
    start_buffer_bytes: u64,
    /// `buffer_subbuf_size_kb` in bytes: the page size of `trace_pipe_raw` and
    /// `events/header_page`, and what bounds one `trace_marker` event.
    subbuf_bytes: u32,
    read_events: HashMap<u32, u64>,
    marker_syms: SortedSymbols,
}

/// `function_profile_enabled` as the agents get it: the generation of the last profile
/// started (its counters files are the ones `trace_stat` reads, on or off).
#[derive(Clone, Copy, Debug, Default)]
struct ProfileSwitch {
    on: bool,
    generation: u64,
}

impl ProfileSwitch {
    /// On starts a fresh profile (a new generation); off keeps the last one readable.
    fn set(&mut self, on: bool) {
        if on {
            self.generation += 1;
        }
        self.on = on;
    }

    /// The `STATE` field: 0 off, else the generation.
    fn wanted(&self) -> u64 {
        if self.on { self.generation } else { 0 }
    }
}

/// The tasks a trace names: the program's threads and the marker writers.
struct Tasks(HashMap<i32, (String, u32)>);

impl TaskNames for Tasks {
    fn comm(&self, pid: i32) -> Option<&str> {
        self.0.get(&pid).map(|t| t.0.as_str())
    }
    fn tgid(&self, pid: i32) -> Option<u32> {
        self.0.get(&pid).map(|t| t.1)
    }
}

/// The marker writer as ftrace-tracers' task context.
struct Caller;

impl TaskContext for Caller {
    fn current_pid(&self) -> i32 {
        CALLER_PID.load(Ordering::Relaxed) as i32
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx::new(CtxFlags::empty(), 0, 0)
    }
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

/// Collects the one entry a marker write makes.
#[derive(Default)]
struct Collect(std::cell::RefCell<Option<Vec<u8>>>);

impl EntrySink for Collect {
    fn write_entry(&self, len: usize, fill: &mut dyn FnMut(&mut [u8])) -> bool {
        let mut v = vec![0u8; len];
        fill(&mut v);
        *self.0.borrow_mut() = Some(v);
        true
    }
}

fn now_clock(clock: ClockKind) -> u64 {
    match clock {
        ClockKind::X86Tsc => ftrace_agent::clock::rdtsc(),
        _ => ftrace_agent::clock::mono_ns(),
    }
}

/// Whether the `function-fork` trace option is set in the flag word `flags`.
fn function_fork(flags: u64) -> bool {
    TraceOptions::from_bits_retain(flags).contains(TraceOptions::FUNCTION_FORK)
}

/// The trace option whose records the agent does not make (a user stack trace): setting it
/// is refused (`EINVAL`), never taken and ignored; clearing it is taken.
const UNRECORDED_TRACE_OPTIONS: TraceOptions = TraceOptions::USERSTACKTRACE;

/// The trace options the agent acts on besides the tracer's (`function-fork`: the pid lists;
/// `stacktrace`: a stack after each event), sent to it when they change.
const AGENT_TRACE_OPTIONS: TraceOptions =
    TraceOptions::FUNCTION_FORK.union(TraceOptions::STACKTRACE);

/// The function tracer's option the agent does not record (repeated calls folded): as
/// [`UNRECORDED_TRACE_OPTIONS`].
const UNRECORDED_TRACER_OPTIONS: [&str; 1] = ["func-no-repeats"];

/// The tracer options the agent acts on (sent to it when they change).
const AGENT_TRACER_OPTIONS: [&str; 2] = ["funcgraph-retval", "func_stack_trace"];

/// Whether the `event-fork` trace option is set in the flag word `flags`.
fn event_fork(flags: u64) -> bool {
    TraceOptions::from_bits_retain(flags).contains(TraceOptions::EVENT_FORK)
}

/// The pids of `a` and `b`, sorted, each once.
fn sorted_union(a: &[u32], b: &[u32]) -> Vec<u32> {
    let mut v: Vec<u32> = a.iter().chain(b).copied().collect();
    v.sort_unstable();
    v.dedup();
    v
}

fn this_cpu() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::sched_getcpu() }.max(0) as u32
}

impl State {
    fn new(agent: Option<AgentPart>, clock: ClockKind, nr_cpus: u32, buffer_bytes: u64) -> Self {
        let tracer_flags = [&NOP as &dyn Tracer, &FUNCTION, &GRAPH]
            .iter()
            .map(|t| (t.name(), t.default_flags()))
            .collect();
        let mut marker_syms = SortedSymbols::new();
        marker_syms.push(MARKER_SYMBOL.0, MARKER_SYMBOL.1, 16, None);
        marker_syms.finish();
        State {
            agent,
            tracer: "nop",
            on: true,
            depth: 0,
            thresh_ns: 0,
            profile: ProfileSwitch::default(),
            flags: 0,
            pids: [Vec::new(), Vec::new()],
            followed: [Vec::new(), Vec::new()],
            event_pids: [Vec::new(), Vec::new()],
            event_followed: [Vec::new(), Vec::new()],
            cpumask: None,
            tracer_flags,
            markers: Markers::new(nr_cpus, buffer_bytes),
            comms: HashMap::new(),
            clock,
            nr_cpus,
            buffer_bytes,
            start_buffer_bytes: buffer_bytes,
            subbuf_bytes: 4096,
            read_events: HashMap::new(),
            marker_syms,
        }
    }

    /// The function-filter files (the agent's: top level only).
    fn filters(&mut self) -> Option<&mut FilterState> {
        self.agent.as_mut().map(|a| &mut a.filters)
    }

    /// How the other processes of the tree select their own sites
    /// ([`crate::tree::Selection`]): every one but the notrace functions' when
    /// `set_ftrace_filter` is empty, else by the names it selects.
    fn selection(&self) -> Option<Selection> {
        let a = self.agent.as_ref()?;
        if !a.filters.set(FilterFile::Filter).is_empty() {
            return Some(Selection::Named);
        }
        let notrace = a.filters.set(FilterFile::Notrace);
        Some(Selection::AllBut(
            a.sites
                .iter()
                .filter(|s| notrace.contains(s.addr))
                .map(|s| s.name.clone())
                .collect(),
        ))
    }

    /// The state the agent must be in.
    fn wanted(&self) -> Option<Wanted> {
        let a = self.agent.as_ref()?;
        let f = a.filters.set(FilterFile::Filter);
        let n = a.filters.set(FilterFile::Notrace);
        let g = a.filters.set(FilterFile::GraphFunction);
        let event_id = |(system, name): (&str, &str)| {
            a.events
                .formats()
                .iter()
                .find(|f| f.system == system && f.name == name)
                .map(|f| f.id)
        };
        let probes = a
            .filters
            .probes()
            .entries()
            .filter_map(|p| {
                let event = match p.cmd {
                    ProbeCommand::Traceon | ProbeCommand::Traceoff | ProbeCommand::Stacktrace => {
                        None
                    }
                    ProbeCommand::EnableEvent | ProbeCommand::DisableEvent => {
                        Some(event_id(p.event?)?)
                    }
                    _ => return None,
                };
                Some(WantedProbe {
                    addr: p.ip,
                    cmd: p.cmd,
                    count: p.count,
                    event,
                })
            })
            .collect();
        Some(Wanted {
            probes,
            tracer: TracerKind::parse(self.tracer),
            on: Some(self.on),
            depth: self.depth,
            clock: self.clock,
            sel: a
                .sites
                .iter()
                .map(|s| s.addr)
                .filter(|&ip| (f.is_empty() || f.contains(ip)) && !n.contains(ip))
                .collect(),
            roots: g.ips().collect(),
            pids: self.pid_list(0),
            no_pids: self.pid_list(1),
            follow_fork: function_fork(self.flags),
            cpus: self.cpumask.clone(),
            retval: self.tracer_option(&GRAPH, "funcgraph-retval"),
            thresh_ns: self.thresh_ns,
            profile: self.profile.wanted(),
            func_stack: self.tracer_option(&FUNCTION, "func_stack_trace"),
            event_stack: TraceOptions::from_bits_retain(self.flags)
                .contains(TraceOptions::STACKTRACE),
        })
    }

    /// Sends `set_event_pid`, `set_event_notrace_pid` and `event-fork` to every process (no
    /// agent: nothing to send).
    fn push_event_pids(&mut self) -> Result<(), Errno> {
        let fork = event_fork(self.flags);
        let lists = [self.event_pid_list(0), self.event_pid_list(1)];
        let Some(a) = &mut self.agent else {
            return Ok(());
        };
        let first = match a.link.set_event_pids(&lists[0], &lists[1], fork) {
            Err(_) if a.link.is_broken() => Ok(()),
            r => r,
        };
        let others = a
            .others
            .each_with_tree_events(|l| l.set_event_pids(&lists[0], &lists[1], fork));
        first.and(others)
    }

    /// Event pid list `slot` as sent: the tree's, with the children `event-fork` added.
    fn event_pid_list(&self, slot: usize) -> Vec<u32> {
        sorted_union(&self.event_pids[slot], &self.event_followed[slot])
    }

    /// Pid list `slot` as sent: the tree's, with the children `function-fork` added.
    fn pid_list(&self, slot: usize) -> Vec<u32> {
        sorted_union(&self.pids[slot], &self.followed[slot])
    }

    /// A process of the tree registered: `pid`, forked by thread `forked_by` (`None`: a new
    /// image). With `function-fork`, a child of a listed thread joins that list (the kernel's
    /// `ftrace_pid_follow_sched_process_fork`), and listed children that exited leave it.
    fn follow_fork(&mut self, pid: u32, forked_by: Option<u32>) {
        if event_fork(self.flags) {
            for slot in 0..2 {
                self.event_followed[slot].retain(|&p| !crate::tree::has_exited(p));
                if forked_by.is_some_and(|t| self.event_pid_list(slot).binary_search(&t).is_ok()) {
                    self.event_followed[slot].push(pid);
                }
            }
        }
        if !function_fork(self.flags) {
            return;
        }
        for slot in 0..2 {
            self.followed[slot].retain(|&p| !crate::tree::has_exited(p));
            if forked_by.is_some_and(|t| self.pid_list(slot).binary_search(&t).is_ok()) {
                self.followed[slot].push(pid);
            }
        }
    }

    /// Whether tracer `t`'s option `name` is set (`options/<name>`).
    fn tracer_option(&self, t: &dyn Tracer, name: &str) -> bool {
        let flags = self.tracer_flags.get(t.name()).copied().unwrap_or(0);
        t.options()
            .iter()
            .any(|o| o.name == name && flags & o.bit != 0)
    }

    /// Takes what the program's function commands and event triggers changed: `tracing_on`
    /// and the probes' remaining counts (top level only). A process that flipped its switch
    /// flipped the tree's (one switch, as the kernel's): every process is then sent it.
    fn sync(&mut self) -> Result<(), Errno> {
        let Some(a) = &mut self.agent else {
            return Ok(());
        };
        let tree_on = self.on;
        let mut flipped = false;
        let _ = a.others.each(|l| {
            flipped |= l.probes()?.0 != tree_on;
            Ok(())
        });
        if a.link.is_broken() {
            // The first image is gone: its counts went with it.
            if flipped {
                self.on = !tree_on;
                return self.send(Switch::Set);
            }
            return Ok(());
        }
        let (on, counts) = a.link.probes()?;
        flipped |= on != tree_on;
        self.on = tree_on ^ flipped;
        let runner = a.filters.probes().runner();
        for l in counts {
            if let Some(c) = runner
                .at(l.addr)
                .iter()
                .find(|p| p.cmd.name() == l.cmd)
                .and_then(|p| p.count.as_ref())
            {
                c.set(l.count);
            }
        }
        match flipped {
            true => self.send(Switch::Set),
            false => Ok(()),
        }
    }

    /// Takes the program's changes ([`State::sync`]), then sends the wanted state, leaving
    /// the first process's `tracing_on` as it is: a function command of the program may
    /// change it between that read and the request's arrival, and only a write of
    /// `tracing_on` overrides the program's switch.
    fn push(&mut self) -> Result<(), Errno> {
        self.sync()?;
        self.send(Switch::Keep)
    }

    /// Sends the wanted state (top level only).
    fn send(&mut self, switch: Switch) -> Result<(), Errno> {
        let (Some(w), Some(sel)) = (self.wanted(), self.selection()) else {
            return Ok(());
        };
        let a = self.agent.as_mut().expect("wanted() saw it");
        let first = if a.link.is_broken() {
            Ok(())
        } else {
            let w = match switch {
                Switch::Set => w.clone(),
                Switch::Keep => Wanted {
                    on: None,
                    ..w.clone()
                },
            };
            match a.link.set_state(&w) {
                Err(_) if a.link.is_broken() && !a.others.pids().is_empty() => Ok(()),
                r => r.map(|_| ()),
            }
        };
        let others = a.others.send(&w, &sel, &a.sites);
        first.and(others)
    }

    /// The events in the buffers, oldest first (`pipe`: what a consumer may take now).
    fn events(&mut self, cpu: Option<u32>, pipe: bool) -> Vec<LiveEvent> {
        let mut evs = match &mut self.agent {
            Some(a) => a.live.events(cpu, pipe),
            None => Vec::new(),
        };
        evs.extend(
            self.markers
                .events
                .iter()
                .filter(|e| cpu.is_none_or(|c| c == e.cpu))
                .cloned(),
        );
        evs.sort_by_key(|e| (e.ts, e.cpu));
        evs
    }

    fn consume(&mut self, evs: &[LiveEvent]) {
        for e in evs {
            *self.read_events.entry(e.cpu).or_default() += 1;
        }
        if let Some(a) = &mut self.agent {
            a.live.consume(evs);
        }
        self.markers.events.retain(|m| {
            !evs.iter()
                .any(|e| e.buf == usize::MAX && e.index == m.index)
        });
    }

    fn clear(&mut self, cpu: Option<u32>) {
        if let Some(a) = &mut self.agent {
            a.live.clear(cpu);
        }
        self.markers
            .events
            .retain(|m| cpu.is_some_and(|c| c != m.cpu));
    }

    fn tasks(&self) -> Tasks {
        let mut m: HashMap<i32, (String, u32)> = self
            .comms
            .iter()
            .map(|(&p, c)| (p as i32, (c.clone(), p)))
            .collect();
        if let Some(a) = &self.agent {
            for (tid, pid, comm) in a.live.threads() {
                m.insert(tid as i32, (comm, pid));
            }
        }
        Tasks(m)
    }

    /// Formats `evs` as the `trace` file (with `header`) or `trace_pipe` text.
    fn render(
        &self,
        evs: &[LiveEvent],
        header: bool,
        cpu: Option<u32>,
        gstate: &mut [GraphCpuState],
    ) -> Vec<u8> {
        let syms: &SortedSymbols = match &self.agent {
            Some(a) => a.live.symbols(),
            None => &self.marker_syms,
        };
        let tasks = self.tasks();
        let t = tracer_obj(self.tracer);
        let mut env = OutputEnv::new(syms, &tasks, self.nr_cpus);
        env.options = TraceOptions::from_bits_retain(self.flags);
        env.clock_unit = match self.clock {
            ClockKind::X86Tsc => ClockUnit::Ticks,
            _ => ClockUnit::Nanoseconds,
        };
        env.time_start = evs.first().map_or(0, |e| e.ts);
        let mut lists = EventLists::new(self.nr_cpus);
        let mut lost = 0;
        for e in evs {
            let mut r = EventRef::new(e.cpu, e.ts, &e.data);
            if e.missed > 0 {
                r.missed = Missed::Count(e.missed);
                lost += e.missed;
            }
            lists.push(r);
        }
        let info = HeaderInfo {
            tracer: t.name(),
            entries: evs.len() as u64,
            written: evs.len() as u64 + lost,
            online_cpus: self.nr_cpus,
            latency: LatencyInfo::default(),
        };
        let style = t.output_style(self.tracer_flags.get(t.name()).copied().unwrap_or(0));
        let mut w = TraceWriter::new(style, gstate, Overruns::of(lost));
        let mut it = TraceIter::new(&mut lists, cpu);
        let mut out = Vec::new();
        let formats = self.agent.as_ref().map_or(&[][..], |a| a.events.formats());
        if formats.is_empty() {
            let _ = w.write_trace(&mut out, &env, header.then_some(&info), &mut it);
            return out;
        }
        if header {
            let empty = it.is_empty();
            let _ = w.write_header(&mut TextToBytes(&mut out), &env, &info, empty);
        }
        // The program's events through their print formats, the rest as the tracer prints.
        while let Some(ev) = it.next_event() {
            let _ = match ftrace_tracers::trace_event::find(formats, &ev) {
                Some(f) => ftrace_tracers::trace_event::write_event_line(
                    &mut TextToBytes(&mut out),
                    &env,
                    &ev,
                    f,
                ),
                None => w.write_line(&mut out, &env, &mut it, &ev),
            };
        }
        out
    }

    fn add_marker(&mut self, data: Vec<u8>) -> Result<(), Errno> {
        let pid = CALLER_PID.load(Ordering::Relaxed);
        if let std::collections::hash_map::Entry::Vacant(v) = self.comms.entry(pid) {
            if let Ok(c) = std::fs::read_to_string(format!("/proc/{pid}/comm")) {
                v.insert(c.trim_end().to_string());
            }
        }
        let full = if TraceOptions::from_bits_retain(self.flags).contains(TraceOptions::OVERWRITE) {
            WhenFull::Overwrite
        } else {
            WhenFull::Refuse
        };
        let e = LiveEvent {
            buf: usize::MAX,
            index: 0,
            cpu: this_cpu(),
            ts: now_clock(self.clock),
            tid: pid,
            data,
            missed: 0,
            lost_below: 0,
        };
        if self.markers.push(e, full) {
            Ok(())
        } else {
            // A full buffer refuses the write as if not open for writing (Linux).
            Err(Errno::EBADF)
        }
    }
}

type Shared = Arc<Mutex<State>>;

fn lock(s: &Shared) -> MutexGuard<'_, State> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// `trace_pipe`: consumes what is there, keeping the graph printer's state between reads.
struct Pipe {
    state: Shared,
    cpu: Option<u32>,
    gstate: Vec<GraphCpuState>,
}

impl Reader for Pipe {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        let mut st = lock(&self.state);
        let evs = st.events(self.cpu, true);
        if evs.is_empty() {
            return false;
        }
        st.consume(&evs);
        let text = st.render(&evs, false, self.cpu, &mut self.gstate);
        out.extend_from_slice(&text);
        true
    }
}

/// `trace_pipe_raw`: consumes one CPU's events as the kernel's sub-buffer pages.
struct RawPipe {
    state: Shared,
    cpu: u32,
    pages: VecDeque<Vec<u8>>,
}

impl Reader for RawPipe {
    fn next_chunk(&mut self, out: &mut Vec<u8>) -> bool {
        if self.pages.is_empty() {
            let mut st = lock(&self.state);
            let evs = st.events(Some(self.cpu), true);
            if evs.is_empty() {
                return false;
            }
            st.consume(&evs);
            let recs: Vec<crate::recording::Event> = evs
                .iter()
                .map(|e| crate::recording::Event {
                    cpu: e.cpu,
                    ts: e.ts,
                    pid: e.tid,
                    tid: e.tid,
                    data: e.data.clone(),
                    missed: e.missed,
                    seq: e.index,
                    process: 0,
                })
                .collect();
            let page = st.subbuf_bytes as usize;
            let Ok(raw) = crate::capture::cpu_pages_sized(&recs, page) else {
                return false;
            };
            self.pages = raw.chunks(page).map(<[u8]>::to_vec).collect();
        }
        match self.pages.pop_front() {
            Some(p) => {
                out.extend_from_slice(&p);
                true
            }
            None => false,
        }
    }
}

/// The filter files' store: the top-level state, republished to the agent at release.
#[derive(Clone)]
struct Filters(Shared);

impl FilterStore for Filters {
    fn with_state(&self, f: &mut dyn FnMut(&mut FilterState)) {
        let mut st = lock(&self.0);
        // Edits start from the counts the program has now (a dead link fails at publish).
        let _ = st.sync();
        if let Some(filters) = st.filters() {
            f(filters)
        }
    }

    fn publish(&self, _which: FilterFile) -> Result<(), Errno> {
        lock(&self.0).push()
    }
}

/// The filter language's environment here: the program's call sites, its own trace events
/// (`(id, system, name)`: the targets of `enable_event` / `disable_event`), no snapshot
/// buffer, and only the function commands the agent runs (`traceon`, `traceoff`,
/// `stacktrace`, `enable_event`, `disable_event`): any other is refused with `EINVAL`,
/// changing nothing.
struct LiveCommands {
    symbols: Arc<dyn SymbolTable + Send + Sync>,
    events: Vec<(u16, &'static str, &'static str)>,
}

impl LiveCommands {
    /// The id of program event `system:name`.
    fn event_id(&self, system: &str, name: &str) -> Option<u16> {
        self.events
            .iter()
            .find(|(_, s, n)| *s == system && *n == name)
            .map(|e| e.0)
    }
}

impl CommandEnv for LiveCommands {
    fn symbols(&self) -> &dyn SymbolTable {
        &*self.symbols
    }

    fn event_exists(&self, system: &str, event: &str) -> bool {
        self.event_id(system, event).is_some()
    }

    fn has_snapshot(&self) -> bool {
        false
    }

    fn supports(&self, cmd: ProbeCommand) -> bool {
        matches!(
            cmd,
            ProbeCommand::Traceon
                | ProbeCommand::Traceoff
                | ProbeCommand::Stacktrace
                | ProbeCommand::EnableEvent
                | ProbeCommand::DisableEvent
        )
    }
}

/// Registers the trace events the live tree lists: Linux 6.12's `sched` formats
/// (ftrace-core's [`SCHED_EVENTS`](ftrace_core::format::sched::SCHED_EVENTS)), so that
/// `events/`, `available_events` and `set_event` are the kernel's files over real formats,
/// and the program's own events ([`crate::progevents`]), which the agent records. Nothing
/// records the `sched` events: arming one is refused ([`TraceBackend::set_event_state`],
/// `ENODEV`), so they stay off and a write that turns them all off (`echo 0 >
/// events/enable`) succeeds, as on a kernel.
///
/// A program event named like a `sched` one (a program declaring `sched:sched_switch` with the
/// kernel's layout) takes its place; one the tree cannot take (a name of the reserved
/// `ftrace` system, an id already taken) is left out with a warning rather than fail the
/// mount.
pub fn register_events(tree: &mut ftrace_tracefs::Tracefs<UserHost>) -> Result<(), Errno> {
    let program = tree.host().program_event_formats();
    for e in ftrace_core::format::sched::SCHED_EVENTS {
        if !program
            .iter()
            .any(|p| p.system == e.system && p.name == e.name)
        {
            tree.register_event(*e)?;
        }
    }
    for e in program {
        if let Err(err) = tree.register_event(e) {
            eprintln!(
                "ftrace: the program's event {}:{} is not served: {err:?}",
                e.system, e.name
            );
        }
    }
    Ok(())
}

/// The tracing machinery of one instance.
pub struct UserBackend {
    state: Shared,
}

impl TraceBackend for UserBackend {
    fn tracers(&self) -> Vec<&'static str> {
        if lock(&self.state).agent.is_some() {
            TRACERS.to_vec()
        } else {
            vec!["nop"]
        }
    }

    fn current_tracer(&self) -> &'static str {
        lock(&self.state).tracer
    }

    fn set_tracer(&mut self, name: &str) -> Result<(), Errno> {
        let mut st = lock(&self.state);
        let Some(&new) = TRACERS.iter().find(|&&t| t == name) else {
            return Err(Errno::EINVAL);
        };
        if new == st.tracer {
            return Ok(());
        }
        if st.agent.is_none() && new != "nop" {
            return Err(Errno::EINVAL);
        }
        let old = st.tracer;
        st.tracer = new;
        if let Err(e) = st.push() {
            st.tracer = old;
            return Err(e);
        }
        // `tracer_init` starts the new tracer on empty buffers.
        st.clear(None);
        Ok(())
    }

    fn tracer_options(&self) -> Vec<TracerOption> {
        let st = lock(&self.state);
        [&NOP as &dyn Tracer, &FUNCTION, &GRAPH]
            .iter()
            .flat_map(|t| {
                let flags = st.tracer_flags.get(t.name()).copied().unwrap_or(0);
                t.options().iter().map(move |o| TracerOption {
                    name: o.name,
                    tracer: t.name(),
                    value: flags & o.bit != 0,
                })
            })
            .collect()
    }

    fn set_tracer_option(&mut self, name: &str, on: bool) -> Result<(), Errno> {
        if on && UNRECORDED_TRACER_OPTIONS.contains(&name) {
            return Err(Errno::EINVAL);
        }
        let mut st = lock(&self.state);
        for t in [&NOP as &dyn Tracer, &FUNCTION, &GRAPH] {
            if let Some(o) = t.options().iter().find(|o| o.name == name) {
                let cur = st.tracer_flags.get(t.name()).copied().unwrap_or(0);
                t.set_flag(cur, o.bit, on)?;
                let new = if on { cur | o.bit } else { cur & !o.bit };
                st.tracer_flags.insert(t.name(), new);
                // The agent records return values only while `funcgraph-retval` is set, and
                // a stack after each call only while `func_stack_trace` is.
                if AGENT_TRACER_OPTIONS.contains(&name) && new != cur {
                    return st.push().map(|_| ()).inspect_err(|_| {
                        st.tracer_flags.insert(t.name(), cur);
                    });
                }
                return Ok(());
            }
        }
        Err(Errno::EINVAL)
    }

    fn set_param(&mut self, param: Param<'_>) -> Result<(), Errno> {
        let mut st = lock(&self.state);
        match param {
            Param::TracingOn(on) => {
                st.sync()?;
                let old = st.on;
                st.on = on;
                st.send(Switch::Set).inspect_err(|_| st.on = old)
            }
            Param::MaxGraphDepth(d) => {
                let old = st.depth;
                st.depth = d;
                st.push().inspect_err(|_| st.depth = old)
            }
            Param::Flags(f) => {
                let old = st.flags;
                let set = TraceOptions::from_bits_retain(f.bits() & !old);
                if set.intersects(UNRECORDED_TRACE_OPTIONS) {
                    return Err(Errno::EINVAL);
                }
                st.flags = f.bits();
                if event_fork(old) != event_fork(f.bits()) {
                    st.push_event_pids().inspect_err(|_| st.flags = old)?;
                }
                if (old ^ f.bits()) & AGENT_TRACE_OPTIONS.bits() == 0 {
                    return Ok(());
                }
                st.push().inspect_err(|_| st.flags = old)
            }
            Param::Clock(c) => {
                let new = ClockKind::parse(c).ok_or(Errno::EINVAL)?;
                if new == st.clock {
                    return Ok(());
                }
                let old = st.clock;
                st.clock = new;
                st.push().inspect_err(|_| st.clock = old)?;
                // Stamps of two clocks do not mix: the buffers start empty (Linux).
                if let Some(a) = &mut st.agent {
                    a.live.set_clock(new);
                }
                st.clear(None);
                Ok(())
            }
            Param::CpuMask(m) => {
                let nr = st.nr_cpus;
                let all = (0..nr).all(|c| {
                    m.get((c / 64) as usize)
                        .is_some_and(|w| w >> (c % 64) & 1 == 1)
                });
                let new = (!all).then(|| m.to_vec());
                let old = std::mem::replace(&mut st.cpumask, new);
                st.push().inspect_err(|_| st.cpumask = old)
            }
            Param::Pids(_, []) if st.agent.is_none() => Ok(()),
            Param::Pids(which @ (PidFile::Event | PidFile::EventNotrace), list)
                if st.agent.is_some() =>
            {
                let slot = usize::from(which == PidFile::EventNotrace);
                let old = std::mem::replace(&mut st.event_pids[slot], list.to_vec());
                // The list written replaces the children `event-fork` added too.
                let followed = std::mem::take(&mut st.event_followed[slot]);
                st.push_event_pids().inspect_err(|_| {
                    st.event_pids[slot] = old;
                    st.event_followed[slot] = followed;
                })
            }
            Param::Pids(which @ (PidFile::Ftrace | PidFile::FtraceNotrace), list)
                if st.agent.is_some() =>
            {
                let slot = usize::from(which == PidFile::FtraceNotrace);
                let old = std::mem::replace(&mut st.pids[slot], list.to_vec());
                let followed = std::mem::take(&mut st.followed[slot]);
                st.push().inspect_err(|_| {
                    st.pids[slot] = old;
                    st.followed[slot] = followed;
                })
            }
            // Values that change nothing this backend does: the reader wake-up watermark
            // (blocked readers are polled), the latency value (the tree keeps it), how many
            // task names to keep (all are kept).
            Param::BufferPercent(_) | Param::MaxLatency(_) | Param::SavedCmdlines(_) => Ok(()),
            Param::TracingThresh(ns) if st.agent.is_some() => {
                let old = std::mem::replace(&mut st.thresh_ns, ns);
                st.push().inspect_err(|_| st.thresh_ns = old)
            }
            Param::ProfileEnabled(on) if st.agent.is_some() => {
                let old = st.profile;
                st.profile.set(on);
                st.push().inspect_err(|_| st.profile = old)
            }
            Param::TracingThresh(0) | Param::ProfileEnabled(false) => Ok(()),
            _ => Err(Errno::EINVAL),
        }
    }

    /// The top level only: the agent runs one tracer over the program's one set of call
    /// sites, and an instance's buffers are this tool's marker buffers, so an instance serves
    /// no function-filter or pid files (rather than files that take a filter and do nothing).
    fn has_function_tracer(&self) -> bool {
        lock(&self.state).agent.is_some()
    }

    /// The top level only: the program records its events into its own rings, which an
    /// instance does not read, and the `sched` events record nowhere, so an instance's
    /// `events/` holds only its marker events (`ftrace/`) and headers.
    fn has_events(&self) -> bool {
        lock(&self.state).agent.is_some()
    }

    fn tracing_on(&self) -> Option<bool> {
        let mut st = lock(&self.state);
        st.agent.as_ref()?;
        // The program's switch, which its `traceon` / `traceoff` commands change (a dead link
        // shows the last known).
        let _ = st.sync();
        Some(st.on)
    }

    /// Sizes are whole sub-buffers of data, at least two, as the kernel sizes its pages
    /// (`ring_buffer_pages`). An instance's buffers are this tool's per-CPU marker buffers.
    /// At the top level the program's per-thread rings are resized too: every thread moves
    /// to a ring of the largest per-CPU size (a thread runs on any CPU), the events before
    /// the switch kept in its old ring (`ftrace_agent::resize`).
    fn resize(&mut self, cpu: Option<u32>, bytes: u64) -> Result<(), Errno> {
        let mut guard = lock(&self.state);
        let st = &mut *guard;
        if cpu.is_some_and(|c| c as usize >= st.markers.capacity.len()) {
            return Err(Errno::EINVAL);
        }
        let targets = |c: usize| cpu.is_none_or(|x| x as usize == c);
        if (0..st.markers.capacity.len())
            .filter(|&c| targets(c))
            .all(|c| st.markers.capacity[c] == bytes)
        {
            // The size in force (the tree's first-use expansion to `trace_buf_size`).
            return Ok(());
        }
        let data = u64::from(st.subbuf_bytes) - 16;
        let bytes = ring_buffer_pages(bytes, data) * data;
        let mut sizes = st.markers.capacity.clone();
        for (c, s) in sizes.iter_mut().enumerate() {
            if targets(c) {
                *s = bytes;
            }
        }
        let ring = sizes.iter().copied().max().unwrap_or(bytes);
        if let Some(a) = &mut st.agent {
            if ring != st.buffer_bytes {
                let file = ftrace_agent::buffer::HEADER_SIZE as u64 + ring;
                let first = match a.link.resize(file) {
                    Err(_) if a.link.is_broken() => Ok(()),
                    r => r,
                };
                // Every process of the tree, as the kernel's one buffer is resized whole.
                let others = a.others.each(|l| l.resize(file));
                first.and(others)?;
                st.buffer_bytes = ring;
            }
        }
        st.markers.resize(cpu, bytes);
        Ok(())
    }

    fn buffer_bytes(&self, cpu: u32) -> u64 {
        let st = lock(&self.state);
        st.markers.capacity.get(cpu as usize).copied().unwrap_or(0)
    }

    fn subbuf_size(&self) -> u32 {
        lock(&self.state).subbuf_bytes
    }

    /// The tree passes only the sizes Linux takes (4 KiB << 0..=7). The program's per-thread
    /// slot rings have no sub-buffers: the size is the pages this tree serves.
    fn set_subbuf_size(&mut self, bytes: u32) -> Result<(), Errno> {
        if !bytes.is_power_of_two() || !(4096..=4096 << 7).contains(&bytes) {
            return Err(Errno::EINVAL);
        }
        lock(&self.state).subbuf_bytes = bytes;
        Ok(())
    }

    fn clear(&mut self, cpu: Option<u32>) {
        lock(&self.state).clear(cpu);
    }

    fn write_stats(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        let mut st = lock(&self.state);
        let evs = st.events(Some(cpu), false);
        let overrun: u64 = evs.iter().map(|e| e.missed).sum();
        let bytes: usize = evs.iter().map(|e| e.data.len()).sum();
        let in_ns = st.clock != ClockKind::X86Tsc;
        let ts = |w: &mut dyn fmt::Write, t: u64| {
            if in_ns {
                write!(w, "{:5}.{:06}", t / 1_000_000_000, t % 1_000_000_000 / 1000)
            } else {
                write!(w, "{t}")
            }
        };
        writeln!(w, "entries: {}", evs.len())?;
        writeln!(w, "overrun: {overrun}")?;
        writeln!(w, "commit overrun: 0")?;
        writeln!(w, "bytes: {bytes}")?;
        if let Some(first) = evs.first() {
            w.write_str("oldest event ts: ")?;
            ts(w, first.ts)?;
            w.write_str("\n")?;
        }
        w.write_str("now ts: ")?;
        ts(w, now_clock(st.clock))?;
        w.write_str("\n")?;
        let dropped = st.markers.dropped.get(cpu as usize).copied().unwrap_or(0);
        writeln!(w, "dropped events: {dropped}")?;
        let read = *st.read_events.entry(cpu).or_default();
        writeln!(w, "read events: {read}")
    }

    fn open_trace(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        let mut st = lock(&self.state);
        let evs = st.events(cpu, false);
        let mut g = vec![GraphCpuState::INIT; st.nr_cpus.max(1) as usize];
        Box::new(TextReader::new(st.render(&evs, true, cpu, &mut g)))
    }

    fn open_pipe(&mut self, cpu: Option<u32>) -> Box<dyn Reader> {
        let n = lock(&self.state).nr_cpus.max(1) as usize;
        Box::new(Pipe {
            state: self.state.clone(),
            cpu,
            gstate: vec![GraphCpuState::INIT; n],
        })
    }

    fn open_pipe_raw(&mut self, cpu: u32) -> Box<dyn Reader> {
        Box::new(RawPipe {
            state: self.state.clone(),
            cpu,
            pages: VecDeque::new(),
        })
    }

    fn write_marker(&mut self, text: &[u8]) -> Result<(), Errno> {
        let mut st = lock(&self.state);
        // A buffer not recording refuses the write as if not open for writing (Linux).
        if !st.on {
            return Err(Errno::EBADF);
        }
        let sink = Collect::default();
        let opts = TraceOptions::from_bits_retain(st.flags);
        marker(text, MARKER_SYMBOL.1, opts, &Caller, &sink)?;
        match sink.0.into_inner() {
            Some(d) => st.add_marker(d),
            None => Ok(()),
        }
    }

    fn write_marker_raw(&mut self, id: u32, data: &[u8]) -> Result<(), Errno> {
        let mut st = lock(&self.state);
        if !st.on {
            return Err(Errno::EBADF);
        }
        let sink = Collect::default();
        let opts = TraceOptions::from_bits_retain(st.flags);
        let mut all = id.to_ne_bytes().to_vec();
        all.extend_from_slice(data);
        marker_raw(&all, opts, &Caller, &sink)?;
        match sink.0.into_inner() {
            Some(d) => st.add_marker(d),
            None => Ok(()),
        }
    }

    fn set_event_state(
        &mut self,
        event: &ftrace_core::format::TraceEventFormat,
        state: EventState,
    ) -> Result<(), Errno> {
        let mut st = lock(&self.state);
        if let Some(a) = st.agent.as_mut().filter(|a| a.events.has(event.id)) {
            return a
                .events
                .set_state(&mut a.link, &mut a.others, event.id, state);
        }
        // Nothing records the other events (see `register_events`).
        if state.enabled || state.triggers {
            return Err(Errno::ENODEV);
        }
        Ok(())
    }

    fn set_event_filter(
        &mut self,
        event: &ftrace_core::format::TraceEventFormat,
        filter: Option<&ftrace_tracefs::event_filter::EventFilter>,
    ) {
        let mut st = lock(&self.state);
        if let Some(a) = st.agent.as_mut().filter(|a| a.events.has(event.id)) {
            // The tree parsed it against the same format: the agent parses it too.
            let _ = a
                .events
                .set_filter(&mut a.link, &mut a.others, event.id, filter);
        }
    }

    fn set_event_triggers(
        &mut self,
        event: &ftrace_core::format::TraceEventFormat,
        triggers: &[ftrace_tracefs::triggers::Trigger],
    ) -> Result<(), Errno> {
        let mut st = lock(&self.state);
        if let Some(a) = st.agent.as_mut().filter(|a| a.events.has(event.id)) {
            let _ = a
                .events
                .set_triggers(&mut a.link, &mut a.others, event.id, triggers);
        }
        Ok(())
    }

    fn event_soft_disabled(&self, event: &ftrace_core::format::TraceEventFormat) -> Option<bool> {
        let mut st = lock(&self.state);
        let a = st.agent.as_mut().filter(|a| a.events.has(event.id))?;
        a.events
            .current(&mut a.link, &mut a.others, event.id)
            .map(|c| c.0)
    }

    fn probe_event_targets(&self) -> Vec<(String, String)> {
        let mut st = lock(&self.state);
        let Some(a) = st.agent.as_mut() else {
            return Vec::new();
        };
        a.filters
            .probes()
            .entries()
            .filter_map(|p| p.event)
            .map(|(sys, name)| (sys.to_string(), name.to_string()))
            .collect()
    }

    fn write_event_hist(
        &self,
        event: &ftrace_core::format::TraceEventFormat,
        w: &mut dyn fmt::Write,
    ) -> fmt::Result {
        let mut st = lock(&self.state);
        match st.agent.as_mut().filter(|a| a.events.has(event.id)) {
            Some(a) => w.write_str(&a.events.hist(&mut a.link, &mut a.others, event.id)),
            None => Ok(()),
        }
    }

    fn clear_event_hist(
        &mut self,
        event: &ftrace_core::format::TraceEventFormat,
        trigger: &ftrace_tracefs::triggers::Trigger,
    ) {
        let mut st = lock(&self.state);
        if let Some(a) = st.agent.as_mut().filter(|a| a.events.has(event.id)) {
            a.events
                .clear_hist(&mut a.link, &mut a.others, event.id, trigger);
        }
    }

    fn event_trigger_counts(
        &self,
        event: &ftrace_core::format::TraceEventFormat,
    ) -> Option<Vec<i64>> {
        let mut st = lock(&self.state);
        let a = st.agent.as_mut().filter(|a| a.events.has(event.id))?;
        a.events
            .current(&mut a.link, &mut a.others, event.id)
            .map(|c| c.1)
    }

    fn open_filter(
        &mut self,
        which: FilterFile,
        mode: ftrace_tracefs::WriteMode,
    ) -> Result<Box<dyn FilterEdit>, Errno> {
        if lock(&self.state).filters().is_none() {
            return Err(Errno::ENODEV);
        }
        if which == FilterFile::GraphNotrace {
            return Ok(Box::new(NoGraphNotrace));
        }
        Ok(FilterWriter::open(Filters(self.state.clone()), which, mode))
    }

    fn write_filter(&self, which: FilterFile, w: &mut dyn fmt::Write) -> fmt::Result {
        let mut st = lock(&self.state);
        if which == FilterFile::Filter {
            // The counts as the program spent them (a dead link shows the last known).
            let _ = st.sync();
        }
        match st.filters() {
            Some(f) => f.write_filter(which, w),
            None => Ok(()),
        }
    }

    fn write_saved_cmdlines(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let tasks = lock(&self.state).tasks();
        let mut v: Vec<_> = tasks.0.iter().collect();
        v.sort();
        for (pid, (comm, _)) in v {
            writeln!(w, "{pid} {comm}")?;
        }
        Ok(())
    }

    fn write_saved_tgids(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        let tasks = lock(&self.state).tasks();
        let mut v: Vec<_> = tasks.0.iter().collect();
        v.sort();
        for (pid, (_, tgid)) in v {
            writeln!(w, "{pid} {tgid}")?;
        }
        Ok(())
    }
}

/// A write of `set_graph_notrace`, which the agent cannot apply: its set stays empty, so a
/// write that names no function (`echo > set_graph_notrace`, the kernel's way to clear it) is
/// taken, and the first name is refused with `ENODEV`, changing nothing.
struct NoGraphNotrace;

impl FilterEdit for NoGraphNotrace {
    fn write(&mut self, data: &[u8]) -> Result<usize, Errno> {
        // The filter language's separators: blanks and NULs separate tokens.
        if data.iter().all(|&b| b == 0 || b.is_ascii_whitespace()) {
            Ok(data.len())
        } else {
            Err(Errno::ENODEV)
        }
    }

    fn release(self: Box<Self>) -> Result<(), Errno> {
        Ok(())
    }
}

/// The call-site files, from the agent's site list.
pub struct SiteRecords {
    state: Shared,
}

impl SiteRecords {
    fn with_sites(&self, f: &mut dyn FnMut(&[SiteLine], &str) -> fmt::Result) -> fmt::Result {
        let mut st = lock(&self.state);
        let Some(a) = &mut st.agent else {
            return Ok(());
        };
        // The agent's current list (enabled states change): the first process's, or once it
        // is gone another's of the tree; else the one taken at the mount.
        if !a.link.is_broken() {
            if let Ok(s) = a.link.sites() {
                return f(&s, &a.exe);
            }
        }
        match a.others.live_sites() {
            Some(s) => f(&s, &a.exe),
            None => f(&a.sites, &a.exe),
        }
    }
}

fn write_name(w: &mut dyn fmt::Write, s: &SiteLine, main: &str) -> fmt::Result {
    if s.module.is_empty() || s.module == main {
        w.write_str(&s.name)
    } else {
        write!(w, "{} [{}]", s.name, s.module)
    }
}

impl FunctionRecords for SiteRecords {
    fn write_available(&self, w: &mut dyn fmt::Write, addrs: bool) -> fmt::Result {
        self.with_sites(&mut |sites, main| {
            for s in sites {
                if addrs {
                    write!(w, "{:x} ", s.addr)?;
                }
                write_name(w, s, main)?;
                w.write_str("\n")?;
            }
            Ok(())
        })
    }

    fn write_enabled(&self, w: &mut dyn fmt::Write, _touched: bool) -> fmt::Result {
        self.with_sites(&mut |sites, main| {
            for s in sites.iter().filter(|s| s.enabled) {
                write_name(w, s, main)?;
                // `(count)` then the R I D O M columns, all blank: one ops, a plain call.
                w.write_str(" (1)           \n")?;
            }
            Ok(())
        })
    }

    fn write_total_info(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        self.with_sites(&mut |sites, _| {
            let mut p = PageStats::kernel();
            p.add_text(sites.len(), 0);
            p.write_total_info(w)
        })
    }

    fn has_profiler(&self) -> bool {
        true
    }

    fn write_profile(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        let mut st = lock(&self.state);
        let mode = if st.tracer == GRAPH.name() {
            ProfileMode::Graph
        } else {
            ProfileMode::Hits
        };
        let thresh_ns = st.thresh_ns;
        let generation = st.profile.generation;
        let Some(a) = &mut st.agent else {
            return Ok(());
        };
        // Every image's counters file, the gone ones' too (their calls were made).
        a.live.refresh();
        let lines = a
            .live
            .images()
            .flat_map(|(dir, syms)| crate::profile::read_counters(dir, syms, generation))
            .collect::<Vec<_>>();
        TreeProfile::of_cpu(lines, cpu).write_stat(w, mode, thresh_ns)
    }
}

/// What only the server knows, and the top-level backend until the tree takes it.
pub struct UserHost {
    top: Shared,
    taken: bool,
    records: SiteRecords,
    clock: ClockKind,
    nr_cpus: u32,
    buffer_bytes: u64,
}

impl UserHost {
    /// A host over the program the agent behind `link` traces, recording into `live`.
    /// Reads the call sites once (the filter files resolve against them).
    pub fn new(
        mut link: AgentLink,
        mut live: LiveRecording,
        tracer: TracerKind,
        clock: ClockKind,
        buffer_bytes: u64,
    ) -> Result<Self, String> {
        let sites = link
            .sites()
            .map_err(|e| format!("listing the call sites: {e:?}"))?;
        let events =
            ProgramEvents::list(&mut link).map_err(|e| format!("listing the events: {e:?}"))?;
        live.refresh();
        let exe = crate::live::exe_name(&link.dir);
        let mut syms = SortedSymbols::new();
        for s in &sites {
            syms.push(
                &s.name,
                s.addr,
                1,
                Some(s.module.as_str()).filter(|m| *m != exe),
            );
        }
        syms.finish();
        let syms: Arc<dyn SymbolTable + Send + Sync> = Arc::new(syms);
        let event_names = events
            .formats()
            .iter()
            .map(|f| (f.id, f.system, f.name))
            .collect();
        // SAFETY: no preconditions.
        let nr_cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) }.max(1) as u32;
        let mut st = State::new(
            Some(AgentPart {
                link,
                others: Members::default(),
                exe,
                live,
                sites,
                filters: FilterState::new(Arc::new(LiveCommands {
                    symbols: syms,
                    events: event_names,
                })),
                events,
            }),
            clock,
            nr_cpus,
            buffer_bytes,
        );
        st.tracer = tracer.name();
        // The program waits for its first state before its `main` ([`ftrace_agent::control`]).
        st.send(Switch::Set)
            .map_err(|e| format!("sending the first state: {e:?}"))?;
        let top = Arc::new(Mutex::new(st));
        Ok(UserHost {
            records: SiteRecords { state: top.clone() },
            top,
            taken: false,
            clock,
            nr_cpus,
            buffer_bytes,
        })
    }

    /// The formats of the program's own trace events.
    pub fn program_event_formats(&self) -> Vec<ftrace_core::format::TraceEventFormat> {
        lock(&self.top)
            .agent
            .as_ref()
            .map(|a| a.events.formats().to_vec())
            .unwrap_or_default()
    }

    /// A handle on the top level that outlives the tree (the tool writes the capture with it
    /// when the program has exited).
    pub fn handle(&self) -> LiveHandle {
        LiveHandle(self.top.clone())
    }
}

/// The top level's state, held beside the tree.
pub struct LiveHandle(Shared);

impl LiveHandle {
    /// Registers another process of the traced tree ([`crate::tree`]) and sends it the
    /// tree's state (a new image waits for it before its program runs). Its call sites are
    /// listed before the tree's lock is taken (a reader of `trace` may hold it for long).
    /// [`Registration::Gone`] when its link broke first: it exited, or exec'd (the new image
    /// registers by itself).
    pub fn add_process(&self, mut link: AgentLink) -> Registration {
        let sites = link.sites();
        let events = link.events();
        let mut st = lock(&self.0);
        if st.agent.is_none() {
            return Registration::Gone;
        }
        // Followed first: a forked child that has exec'd already (its link gone) still joins
        // the lists, which its new image gets when it registers.
        st.follow_fork(link.pid, link.forked_by);
        let (Ok(sites), Ok(events)) = (sites, events) else {
            return Registration::Gone;
        };
        let w = st.wanted().zip(st.selection());
        let fork = event_fork(st.flags);
        let lists = [st.event_pid_list(0), st.event_pid_list(1)];
        if st.buffer_bytes != st.start_buffer_bytes {
            // A new image starts with the program's first size: the tree's, as every other
            // process has (a refusal leaves it recording at its own size).
            let _ = link.resize(ftrace_agent::buffer::HEADER_SIZE as u64 + st.buffer_bytes);
        }
        let a = st.agent.as_mut().expect("checked above");
        // The tree's event state before the first state, which lets a new image run. A
        // process declaring events under ids of its own gets none (its events stay off; no
        // message here: this runs under the tree's lock, where a write to stderr may wait).
        let ids = a.events.ids_of(&events);
        if ids == EventIds::Tree && !events.is_empty() {
            // A refusal leaves that process's events as they were; it still gets the state.
            let _ = a.events.send_all(&mut link, &events).and_then(|()| {
                match lists.iter().all(Vec::is_empty) && !fork {
                    true => Ok(()),
                    false => link.set_event_pids(&lists[0], &lists[1], fork),
                }
            });
        }
        let w = w.as_ref().map(|(w, sel)| (w, sel));
        a.others.register(link, &sites, ids, w, &a.sites)
    }

    /// The current tracer.
    pub fn current_tracer(&self) -> &'static str {
        lock(&self.0).tracer
    }

    /// Writes what `trace` shows now as a capture ([`crate::capture`]) into `dir`: every
    /// event not cleared or consumed, the symbols, task names and clock, and the current
    /// tracer, so that `ftrace report -i dir` prints the `trace` file as it was.
    pub fn write_capture(&self, dir: &std::path::Path) -> Result<(), String> {
        use crate::recording::{Event, Process, Recording, Thread};
        let mut st = lock(&self.0);
        let evs = st.events(None, false);
        let tasks = st.tasks();
        let symbols = match &st.agent {
            Some(a) => a.live.symbols().clone(),
            None => st.marker_syms.clone(),
        };
        let mut threads: Vec<Thread> = tasks
            .0
            .iter()
            .map(|(&tid, (comm, pid))| Thread {
                pid: *pid,
                tid: tid as u32,
                comm: comm.clone(),
                overrun: 0,
                dropped: 0,
                entries: evs.iter().filter(|e| e.tid == tid as u32).count() as u64,
            })
            .collect();
        threads.sort_by_key(|t| t.tid);
        let mut rec = Recording {
            clock: st.clock,
            processes: vec![Process {
                dir: dir.to_path_buf(),
                pid: threads.first().map_or(0, |t| t.pid),
                exe: String::new(),
                tracer: st.tracer.to_string(),
                symbols,
                threads,
                events: Vec::new(),
            }],
            per_cpu: Default::default(),
            nr_cpus: st.nr_cpus,
            tsc_khz: None,
        };
        for e in evs {
            rec.per_cpu.entry(e.cpu).or_default().push(Event {
                cpu: e.cpu,
                ts: e.ts,
                pid: e.tid,
                tid: e.tid,
                data: e.data,
                missed: e.missed,
                seq: e.index,
                process: 0,
            });
        }
        let formats = st
            .agent
            .as_ref()
            .map(|a| a.events.formats().to_vec())
            .unwrap_or_default();
        let page_size = st.subbuf_bytes as usize;
        drop(st);
        crate::capture::write_capture_sized(&rec, dir, page_size)?;
        // The program's trace events the pages hold, so that the capture prints them.
        crate::capture_formats::write(dir, &formats)
    }
}

impl Host for UserHost {
    fn nr_cpus(&self) -> u32 {
        self.nr_cpus
    }

    fn local_clock_ns(&self) -> u64 {
        ftrace_agent::clock::mono_ns()
    }

    fn trace_clocks(&self) -> &[&'static str] {
        &CLOCKS
    }

    fn default_trace_clock(&self) -> usize {
        CLOCKS
            .iter()
            .position(|c| *c == self.clock.name())
            .unwrap_or(0)
    }

    fn trace_buf_size(&self) -> u64 {
        self.buffer_bytes
    }

    fn create_backend(
        &mut self,
        instance: Option<&str>,
        _bytes_per_cpu: u64,
    ) -> Result<Box<dyn TraceBackend>, Errno> {
        match instance {
            None if !self.taken => {
                self.taken = true;
                Ok(Box::new(UserBackend {
                    state: self.top.clone(),
                }))
            }
            None => Err(Errno::EBUSY),
            Some(_) => Ok(Box::new(UserBackend {
                state: Arc::new(Mutex::new(State::new(
                    None,
                    self.clock,
                    self.nr_cpus,
                    self.buffer_bytes,
                ))),
            })),
        }
    }

    fn functions(&self) -> Option<&dyn FunctionRecords> {
        Some(&self.records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(cpu: u32, len: usize) -> LiveEvent {
        LiveEvent {
            buf: usize::MAX,
            index: 0,
            cpu,
            ts: 0,
            tid: 1,
            data: vec![0; len],
            missed: 0,
            lost_below: 0,
        }
    }

    #[test]
    fn a_full_marker_buffer_overwrites_its_oldest_and_counts_them() {
        // 36-byte records (32 bytes of data + the 4-byte header): three fit in 108 bytes.
        let mut m = Markers::new(2, 108);
        for _ in 0..5 {
            assert!(m.push(ev(0, 32), WhenFull::Overwrite));
        }
        assert!(m.push(ev(1, 32), WhenFull::Overwrite));
        let cpu0: Vec<(u64, u64)> = m
            .events
            .iter()
            .filter(|e| e.cpu == 0)
            .map(|e| (e.index, e.missed))
            .collect();
        assert_eq!(cpu0, [(2, 2), (3, 0), (4, 0)]);
        assert_eq!(m.used(0), 108);
        assert_eq!(m.dropped, [0, 0]);
    }

    #[test]
    fn a_full_marker_buffer_refuses_without_overwrite() {
        let mut m = Markers::new(1, 110);
        for _ in 0..3 {
            assert!(m.push(ev(0, 32), WhenFull::Refuse));
        }
        assert!(!m.push(ev(0, 32), WhenFull::Refuse));
        assert_eq!(m.events.len(), 3);
        assert_eq!(m.dropped, [1]);
    }

    #[test]
    fn shrinking_one_cpu_drops_its_oldest_only() {
        let mut m = Markers::new(2, 1000);
        for i in 0..6 {
            assert!(m.push(ev(i % 2, 32), WhenFull::Overwrite));
        }
        m.resize(Some(0), 40);
        assert_eq!(m.capacity, [40, 1000]);
        let kept: Vec<(u32, u64, u64)> = m
            .events
            .iter()
            .map(|e| (e.cpu, e.index, e.missed))
            .collect();
        assert_eq!(kept, [(1, 1, 0), (1, 3, 0), (0, 4, 2), (1, 5, 0)]);
        m.resize(None, 2000);
        assert_eq!(m.capacity, [2000, 2000]);
        assert_eq!(m.events.len(), 4);
    }
}
