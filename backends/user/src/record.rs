//! `ftrace record`: run a program under the agent, recording into a directory.
//!
//! Invariant: the recording directory holds only what this run recorded (a previous recording
//! at the same place is removed first, as `trace-cmd record` replaces `trace.dat`).

use std::path::PathBuf;
use std::process::ExitStatus;

use ftrace_agent::config::{ClockKind, Config, TracerKind};

/// The per-thread ring size (KiB) `ftrace record` takes by default when it drains the rings
/// while the program runs: 65 536 slots. A thread whose drainer falls behind moves to a ring
/// four times larger, up to [`STREAM_MAX_BUFFER_KB`] (the first one offered by the thread
/// itself as it starts, [`crate::drain`]), so the first ring only holds what the drainer lags
/// by while it keeps up; each of its pages costs every recording a fault on the first lap and
/// its freeing (the flight recorder keeps the agent's default, 1024).
pub const STREAM_BUFFER_KB: u64 = 2048;
/// The most a streamed thread's buffer grows to by default (KiB; `--max-buffer-size`): 128 MiB,
/// the fourth step from the first (2, 8, 32, 128 MiB). At 64 MiB the stream-check program's
/// 100 M calls, two writers at full speed on two CPUs, lost events in 5 of 60 recordings
/// (0.2-1.3 M each) against none of 60 at 128, interleaved (one machine, one session; back to
/// back at 128, 5 of 200 lost 13-17.5 M each: a thread left in a smaller ring after a move
/// that failed, which `crate::drain` now offers again). The program's rings then took 265 MB
/// at the most against 134; all the rings and the files offered to them together stay under
/// four times this.
pub const STREAM_MAX_BUFFER_KB: u64 = 131072;

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
    /// `-e`: trace events to record (`set_event` tokens).
    pub events: Vec<String>,
    /// `--max-depth`.
    pub max_depth: u32,
    /// `-O funcgraph-retval`: function_graph exits carry return values.
    pub retval: bool,
    /// `--thresh` (`tracing_thresh`) in nanoseconds; 0: off.
    pub thresh_ns: u64,
    /// `--buffer-size` (KiB per thread).
    pub buffer_kb: u64,
    /// `--max-buffer-size`: the KiB a streamed thread's buffer may grow to when the tool
    /// falls behind it ([`crate::drain::Growth`]); 0 (or `buffer_kb` or less): fixed.
    pub max_buffer_kb: u64,
    /// `--overwrite` (true: a flight recorder of each thread's newest events) or every event
    /// recorded, drained while the program runs ([`crate::drain`]; false, the default).
    pub overwrite: bool,
    /// `--clock`.
    pub clock: ClockKind,
    /// `-o`.
    pub output: PathBuf,
    /// `--mount DIR`: serve the program's tracefs at DIR while it runs ([`crate::fuse`]).
    pub mount: Option<PathBuf>,
    /// `--force`: start a program whose sites or filters fail [`crate::sitecheck`], with a
    /// warning.
    pub force: crate::sitecheck::Force,
    /// Whether a program thread that outruns the tool's drainer yields to it
    /// (`--keep-priority`: never; [`crate::precedence`]).
    pub yielding: crate::precedence::Yield,
}

impl Default for RecordOptions {
    fn default() -> Self {
        RecordOptions {
            tracer: TracerKind::FunctionGraph,
            filter: Vec::new(),
            notrace: Vec::new(),
            graph_functions: Vec::new(),
            events: Vec::new(),
            max_depth: 0,
            retval: false,
            thresh_ns: 0,
            buffer_kb: ftrace_agent::config::DEFAULT_BUFFER_KB,
            max_buffer_kb: 0,
            overwrite: false,
            clock: ClockKind::Local,
            output: PathBuf::from("ftrace.data"),
            mount: None,
            force: crate::sitecheck::Force::Refuse,
            yielding: crate::precedence::Yield::WhenBehind,
        }
    }
}

impl RecordOptions {
    /// How the streamed threads' buffers may grow ([`crate::drain::Growth`]).
    pub fn growth(&self) -> crate::drain::Growth {
        if self.overwrite || self.max_buffer_kb <= self.buffer_kb {
            crate::drain::Growth::Fixed
        } else {
            crate::drain::Growth::UpTo(
                ftrace_agent::buffer::HEADER_SIZE as u64 + self.max_buffer_kb * 1024,
            )
        }
    }

    /// Checks what cannot be honoured exactly before anything runs.
    pub fn check(&self) -> Result<(), String> {
        ftrace_agent::config::check_buffer_kb(self.buffer_kb)?;
        if self.max_buffer_kb != 0 {
            ftrace_agent::config::check_buffer_kb(self.max_buffer_kb)
                .map_err(|e| e.replacen("--buffer-size", "--max-buffer-size", 1))?;
            if self.overwrite {
                return Err(
                    "--max-buffer-size: a flight recorder's buffers keep their size \
                            (--overwrite, --mount)"
                        .into(),
                );
            }
            if self.max_buffer_kb < self.buffer_kb {
                return Err(format!(
                    "--max-buffer-size {}: smaller than the buffer size ({} KiB)",
                    self.max_buffer_kb, self.buffer_kb
                ));
            }
        }
        if self.overwrite && self.mount.is_none() && !self.events.is_empty() {
            return Err(
                "-e: trace events are not recorded with --overwrite yet (the flight \
                        recorder's pages have no room for their formats); record without it"
                    .into(),
            );
        }
        if let Some(t) = self.events.iter().find(|t| t.trim().is_empty()) {
            return Err(format!("-e {t:?}: names no event"));
        }
        Ok(())
    }

    /// Checks the program's call sites and the filters against them
    /// ([`crate::sitecheck::check`]): `Err` when refusing, else the warnings to print.
    pub fn check_program(&self, prog: &str) -> Result<Vec<String>, String> {
        let filters = crate::sitecheck::Filters {
            filter: &self.filter,
            notrace: &self.notrace,
            graph: &self.graph_functions,
        };
        crate::sitecheck::check(prog, &filters, self.force)
    }

    /// The agent configuration these options make.
    pub fn config(&self) -> Config {
        // Absolute: the processes of a traced tree may run anywhere (a shell's `cd`).
        let output = std::path::absolute(&self.output).unwrap_or_else(|_| self.output.clone());
        let mut c = Config::new(output, self.tracer);
        c.filter = self.filter.clone();
        c.notrace = self.notrace.clone();
        c.graph_functions = self.graph_functions.clone();
        // With a mount the tree arms them ([`seed_tree`]'s `set_event`).
        if self.mount.is_none() {
            c.events = self.events.clone();
        }
        c.max_depth = self.max_depth;
        c.retval = self.retval;
        c.thresh_ns = self.thresh_ns;
        c.buffer_kb = self.buffer_kb;
        c.overwrite = self.overwrite;
        c.clock = self.clock;
        c
    }
}

/// What a recording run ended with.
#[derive(Debug)]
pub struct Recorded {
    /// The program's exit status.
    pub status: ExitStatus,
    /// What to tell the user on stderr: events recorded, lost (per thread where any), bytes
    /// written, where.
    pub summary: String,
}

/// The end-of-recording lines: events recorded, events lost (per thread where any), bytes
/// written, where.
pub fn summary(rec: &crate::recording::Recording, dir: &std::path::Path) -> String {
    let threads: Vec<crate::drain::ThreadCount> = rec
        .processes
        .iter()
        .flat_map(|p| &p.threads)
        .map(|t| crate::drain::ThreadCount {
            tid: t.tid,
            events: t.entries,
            lost: t.overrun + t.dropped,
        })
        .collect();
    summary_of(&threads, dir)
}

/// [`summary`] from what each thread recorded.
pub fn summary_of(threads: &[crate::drain::ThreadCount], dir: &std::path::Path) -> String {
    let kept: u64 = threads.iter().map(|t| t.events).sum();
    let lost: u64 = threads.iter().map(|t| t.lost).sum();
    let bytes = dir_bytes(dir);
    let mut s = format!("ftrace: {kept} events recorded, {lost} lost");
    if lost > 0 {
        // A thread that moved to a larger ring has a count per ring: one figure per thread.
        let mut by_tid = std::collections::BTreeMap::<u32, u64>::new();
        for t in threads.iter().filter(|t| t.lost > 0) {
            *by_tid.entry(t.tid).or_default() += t.lost;
        }
        let per = by_tid
            .iter()
            .map(|(tid, lost)| format!("tid {tid}: {lost}"));
        s += &format!(" ({})", first_threads(per.collect()));
    }
    s += &format!(", {} bytes written to {}\n", bytes, dir.display());
    if lost > 0 {
        s += "ftrace: a full buffer loses events (the newest while the tool drains it, the \
              oldest with --overwrite); --buffer-size and --max-buffer-size set its size per \
              thread\n";
    }
    s
}

/// The line saying which threads outran the drainers and yield to them from then on
/// ([`crate::precedence`]): thread ids and new nice values (empty: none did).
fn yielded_line(yielded: &[(u32, i32)]) -> String {
    if yielded.is_empty() {
        return String::new();
    }
    let per = yielded
        .iter()
        .map(|(tid, nice)| format!("tid {tid}: nice {nice}"));
    format!(
        "ftrace: the tool fell behind the program's threads and lowered their priority so \
         that it could keep up ({})\n",
        first_threads(per.collect())
    )
}

/// What is said of each thread, the first eight joined with ", " and then how many more.
fn first_threads(mut per: Vec<String>) -> String {
    if per.len() > 8 {
        let more = per.len() - 8;
        per.truncate(8);
        per.push(format!("{more} more threads"));
    }
    per.join(", ")
}

/// [`summary_of`] a recording drained while the program ran; an error when rings ended
/// early (the recording is not whole): every reason, one a line, then the summary's lines
/// (each line after the first says `ftrace: ` itself, as the first does when told).
pub fn summary_of_drained(
    drained: &crate::drain::Finished,
    dir: &std::path::Path,
) -> Result<String, String> {
    let mut summary = summary_of(&drained.counts, dir);
    summary += &yielded_line(&drained.yielded);
    if drained.errors.is_empty() {
        return Ok(summary);
    }
    Err(format!(
        "{}\n{}",
        drained.errors.join("\nftrace: "),
        summary.trim_end()
    ))
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            Ok(_) => e.metadata().map_or(0, |m| m.len()),
            Err(_) => 0,
        })
        .sum()
}

/// Records `prog args...` into `opts.output`, then writes the capture files `ftrace report`
/// reads ([`crate::capture`]); returns the program's exit status and the summary to print. With `opts.mount`, the
/// program's tracefs is served while it runs and the capture is what its `trace` file shows
/// when the program ends (a tracer switch or `echo > trace` starts it afresh, as in the
/// kernel).
pub fn record(opts: &RecordOptions, prog: &str, args: &[String]) -> Result<Recorded, String> {
    opts.check()?;
    if let Some(dir) = &opts.mount {
        crate::fuse::check_mount_point(dir)?;
    }
    for warning in opts.check_program(prog)? {
        eprintln!("{warning}");
    }
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
    if let Some(dir) = &opts.mount {
        let status = run_mounted(opts, dir, prog, args)?;
        let summary = crate::recording::Recording::read(out)
            .map(|rec| summary(&rec, out))
            .unwrap_or_default();
        return Ok(Recorded { status, summary });
    }
    let cfg = opts.config();
    if opts.overwrite {
        // The flight recorder: the rings are the recording, their size fixed.
        let status = crate::launch::run(&cfg, prog, args)?;
        let rec = crate::recording::Recording::read(out).map_err(|e| e.to_string())?;
        crate::capture::write_capture(&rec, out)?;
        let summary = summary(&rec, out);
        return Ok(Recorded { status, summary });
    }
    // Every event: drained while the program runs, turned into pages when first read
    // ([`crate::capture::ensure_capture`]).
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let rings = crate::drain::RingDir::create(out);
    let growth = rings.growth(opts.growth());
    let cfg = Config {
        ring_dir: Some(rings.path().to_path_buf()),
        // Each thread offers itself the next larger ring with every ring it makes or moves
        // to: the drainer's first pass over a new ring may come after the thread has filled
        // it (`ftrace_agent::handler::offer_itself`).
        grow_max_bytes: growth.max_bytes(),
        ..cfg
    };
    // The program first: the drainers and the first thread's ring are made while it starts
    // (its loading and the agent's scan take a millisecond before its first event; making
    // them first kept it waiting 150 us). The ring is made on another CPU: the thread takes
    // it when it is sized (waiting for it if it comes first); its pages are made until the
    // program has exited ([`crate::drain::RingDir::make_spare`]).
    let mut child = crate::launch::spawn(&cfg, prog, args)?;
    let pages = crate::prefault::PageMaker::new();
    let (status, drained) = std::thread::scope(|s| {
        s.spawn(|| rings.make_spare(cfg.ring_file_bytes(), &pages));
        let drainer = crate::drain::Drainer::start(rings.path(), out, growth, opts.yielding);
        let status = child.wait().map_err(|e| format!("{prog}: {e}"));
        pages.stop();
        (status, drainer.finish())
    });
    let status = status?;
    let mut summary = summary_of_drained(&drained, out)?;
    summary += &unmatched_events(opts, out);
    Ok(Recorded { status, summary })
}

/// A warning line per `-e` token that matched none of the events the recorded images declare
/// (the kernel's `set_event` refuses such a token with `EINVAL`; the program's events are
/// known only once it ran).
fn unmatched_events(opts: &RecordOptions, out: &std::path::Path) -> String {
    if opts.events.is_empty() {
        return String::new();
    }
    let formats = crate::recording::RecordingReader::open(out)
        .map(|r| r.event_formats())
        .unwrap_or_default();
    opts.events
        .iter()
        .filter(|t| {
            !formats
                .iter()
                .any(|f| ftrace_tracefs::events::set_event_matcher(t)(f))
        })
        .map(|t| {
            let names: Vec<String> = formats
                .iter()
                .map(|f| format!("{}:{}", f.system, f.name))
                .collect();
            format!(
                "ftrace: -e {t}: the program declares no such event (it declares: {})\n",
                match names.is_empty() {
                    true => "none".to_string(),
                    false => names.join(" "),
                }
            )
        })
        .collect()
}

/// The signals that end a mounted run: the tool unmounts, then passes them on to the program.
const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Blocks [`STOP_SIGNALS`] in the calling thread (and the threads it starts) until dropped,
/// so that they are taken with `sigtimedwait` instead of killing the tool with a mount up.
struct BlockedSignals {
    set: libc::sigset_t,
    old: libc::sigset_t,
}

impl BlockedSignals {
    fn new() -> Self {
        // SAFETY: plain sigset manipulation on local values.
        unsafe {
            let mut set: libc::sigset_t = core::mem::zeroed();
            let mut old: libc::sigset_t = core::mem::zeroed();
            libc::sigemptyset(&mut set);
            for s in STOP_SIGNALS {
                libc::sigaddset(&mut set, s);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
            BlockedSignals { set, old }
        }
    }

    /// Waits up to `ms` for one of the signals: the signal, and whether the kernel sent it (a
    /// terminal's Ctrl-C or hangup, sent to the whole foreground process group) rather than a
    /// process (`kill`, sent to the tool alone).
    fn wait(&self, ms: i64) -> Option<(libc::c_int, bool)> {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: ms * 1_000_000,
        };
        // SAFETY: valid set, info and timeout.
        unsafe {
            let mut info: libc::siginfo_t = core::mem::zeroed();
            let s = libc::sigtimedwait(&self.set, &mut info, &ts);
            (s > 0).then_some((s, info.si_code == libc::SI_KERNEL))
        }
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        // Take what arrived meanwhile, then restore the mask.
        while self.wait(0).is_some() {}
        // SAFETY: restoring the mask saved at creation.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.old, core::ptr::null_mut()) };
    }
}

/// A child that is killed (and reaped) if the run ends before it does.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Runs the program with its tracefs served at `dir` until it exits (or the tool is asked to
/// stop): the control socket, the live tree, the FUSE mount, then the wait.
fn run_mounted(
    opts: &RecordOptions,
    dir: &std::path::Path,
    prog: &str,
    args: &[String],
) -> Result<ExitStatus, String> {
    use crate::agentctl::AgentLink;
    use crate::fuse::{TracefsFs, check_mount_point, mount};
    use crate::live::LiveRecording;
    use crate::livefs::UserHost;

    check_mount_point(dir)?;
    let agent = crate::launch::find_agent()?;
    std::fs::create_dir_all(&opts.output).map_err(|e| format!("{}: {e}", opts.output.display()))?;
    let signals = BlockedSignals::new();
    // The socket lives in a directory only this user can enter.
    let sock_dir = std::env::temp_dir().join(format!(
        "ftrace-ctl-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&sock_dir)
            .map_err(|e| format!("{}: {e}", sock_dir.display()))?;
    }
    let sock = sock_dir.join("control");
    let listener = std::os::unix::net::UnixListener::bind(&sock).map_err(|e| {
        let _ = std::fs::remove_dir(&sock_dir);
        format!("{}: {e}", sock.display())
    })?;
    let mut cfg = opts.config();
    cfg.control = Some(sock.clone());
    let base = ftrace_agent::clock::TscPair::now();
    let mut cmd = crate::launch::traced_command(&agent, &cfg, prog, args);
    crate::tree::adopt_orphans();
    // SAFETY: only an async-signal-safe mask change between fork and exec.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, || {
            crate::fuse::unblock_all_signals();
            Ok(())
        })
    };
    let child = cmd.spawn().map_err(|e| format!("{prog}: {e}"));
    let remove_sock = || {
        let _ = std::fs::remove_file(&sock);
        let _ = std::fs::remove_dir(&sock_dir);
    };
    let mut child = Reaped(child.inspect_err(|_| remove_sock())?);
    let link = AgentLink::accept(&listener, &mut child.0, std::time::Duration::from_secs(20));
    let link = link.inspect_err(|_| remove_sock())?;
    let live = LiveRecording::new(&cfg.output, cfg.clock, base);
    let host = UserHost::new(link, live, cfg.tracer, cfg.clock, cfg.buffer_kb * 1024)
        .inspect_err(|_| remove_sock())?;
    let handle = host.handle();
    // The program's children and exec'd images register on the same socket
    // ([`crate::tree`]) while it runs.
    let stop_tree = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let tree_handle = host.handle();
    let acceptor =
        crate::tree::accept_members(listener, child.0.id(), stop_tree.clone(), move |link| {
            tree_handle.add_process(link)
        })
        .map_err(|e| {
            remove_sock();
            format!("control socket: {e}")
        })?;
    let mut tree = ftrace_tracefs::Tracefs::new(host).map_err(|e| format!("tracefs: {e:?}"))?;
    crate::livefs::register_events(&mut tree).map_err(|e| format!("tracefs: {e:?}"))?;
    seed_tree(&mut tree, opts);
    let m = mount(TracefsFs::new(tree), dir)?;
    eprintln!(
        "ftrace: tracefs of {prog} (pid {}) mounted at {}",
        child.0.id(),
        dir.display()
    );
    let mut m = Some(m);
    let mut stops = 0;
    let status = loop {
        match child.0.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) => {}
            Err(e) => return Err(format!("{prog}: {e}")),
        }
        if let Some((sig, from_terminal)) = signals.wait(50) {
            // Unmount first (the tool's promise), then let the program decide: it got a
            // terminal's signal itself (same process group); a `kill` of the tool is passed on.
            if let Some(m) = m.take() {
                m.unmount();
            }
            stops += 1;
            if stops > 1 {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(child.0.id() as libc::pid_t, libc::SIGKILL) };
            } else if !from_terminal {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(child.0.id() as libc::pid_t, sig) };
            }
        }
    };
    if let Some(m) = m.take() {
        m.unmount();
    }
    stop_tree.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Ok(c) = acceptor.join() {
        report_registrations(c);
    }
    remove_sock();
    drop(signals);
    handle.write_capture(&opts.output)?;
    Ok(status)
}

/// Says on stderr what became of the processes that connected to the tree's control socket
/// besides the first ([`crate::tree::accept_members`]); nothing when none did.
fn report_registrations(c: crate::tree::AcceptCounts) {
    if c.registered + c.gone > 0 {
        eprintln!(
            "ftrace: {} more processes of the tree registered; {} exited or exec'd before they \
             could (their events are recorded; an exec'd image registers anew)",
            c.registered, c.gone
        );
    }
    if c.refused > 0 {
        eprintln!(
            "ftrace: {} live processes outside the traced tree connected to its control \
             socket: refused (the tree's control writes do not reach them)",
            c.refused
        );
    }
}

/// Writes the command line's `-F`, `-N`, `-G` and `--max-depth` into the tree's files, so that
/// they read back and stay in force when other files change. A glob the filter language
/// refuses (no function matches) is reported, and the run goes on.
pub(crate) fn seed_tree<H: ftrace_tracefs::Host>(
    tree: &mut ftrace_tracefs::Tracefs<H>,
    opts: &RecordOptions,
) {
    let files = [
        ("set_ftrace_filter", &opts.filter),
        ("set_ftrace_notrace", &opts.notrace),
        ("set_graph_function", &opts.graph_functions),
    ];
    for (file, globs) in files {
        for g in globs {
            if let Err(e) = tree.write_all(file, g.as_bytes(), ftrace_tracefs::WriteMode::Append) {
                eprintln!(
                    "ftrace: {file}: {g:?}: {}",
                    e.description().unwrap_or("error")
                );
            }
        }
    }
    for t in &opts.events {
        let file = "set_event";
        if let Err(e) = tree.write_all(file, t.as_bytes(), ftrace_tracefs::WriteMode::Append) {
            eprintln!(
                "ftrace: {file}: {t:?}: {}",
                e.description().unwrap_or("error")
            );
        }
    }
    if opts.max_depth > 0 {
        let v = opts.max_depth.to_string();
        if let Err(e) = tree.write_all(
            "max_graph_depth",
            v.as_bytes(),
            ftrace_tracefs::WriteMode::Truncate,
        ) {
            eprintln!(
                "ftrace: max_graph_depth: {}",
                e.description().unwrap_or("error")
            );
        }
    }
    if opts.thresh_ns > 0 {
        let v = (opts.thresh_ns / 1000).to_string();
        if let Err(e) = tree.write_all(
            "tracing_thresh",
            v.as_bytes(),
            ftrace_tracefs::WriteMode::Truncate,
        ) {
            eprintln!(
                "ftrace: tracing_thresh: {}",
                e.description().unwrap_or("error")
            );
        }
    }
    if opts.retval {
        let file = "options/funcgraph-retval";
        if let Err(e) = tree.write_all(file, b"1", ftrace_tracefs::WriteMode::Truncate) {
            eprintln!("ftrace: {file}: {}", e.description().unwrap_or("error"));
        }
    }
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
    /// The end-of-recording lines ([`summary`]).
    pub summary: String,
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
    let recorded = record(&opts, prog, args);
    let report = recorded.as_ref().ok().map(|_| {
        let mut ra = crate::report::ReportArgs::new(&opts.output);
        ra.options = options.to_vec();
        crate::report::report(&ra).map_err(|e| e.to_string())
    });
    if !keep {
        let _ = std::fs::remove_dir_all(&opts.output);
    }
    let recorded = recorded?;
    Ok(Live {
        status: recorded.status,
        report: report.expect("recorded")?,
        summary: recorded.summary,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The threads made to yield are named with their new nice values, eight at most, and
    /// nothing is said when none was.
    #[test]
    fn the_summary_names_the_threads_that_yielded() {
        assert_eq!(yielded_line(&[]), "");
        assert_eq!(
            yielded_line(&[(7, 5), (9, 19)]),
            "ftrace: the tool fell behind the program's threads and lowered their priority so \
             that it could keep up (tid 7: nice 5, tid 9: nice 19)\n"
        );
        let many: Vec<(u32, i32)> = (1..=10).map(|t| (t, 5)).collect();
        let line = yielded_line(&many);
        assert!(line.ends_with("tid 8: nice 5, 2 more threads)\n"), "{line}");
    }
}
