//! Attaching to a running process: `ftrace record -p PID`, `ftrace live -p PID`,
//! `ftrace record --mount DIR -p PID`.
//!
//! The tool stops one thread of the process with ptrace (`PTRACE_SEIZE`, `PTRACE_INTERRUPT`),
//! saves its registers and makes it call functions of the process on the tool's behalf
//! ([`Tracee::call`]): libc's `dlopen` loads the agent, then the agent's
//! `ftrace_agent_attach` starts tracing with a configuration file the tool wrote
//! ([`ftrace_agent::attach`]). The thread returns to address 0, whose fault gives control back;
//! its registers are restored and ptrace lets it go. The process then runs untraced by ptrace
//! while the agent records, as in a launched program; every thread it has records from its
//! next traced call. Detaching calls `ftrace_agent_detach` the same way: every site back as its
//! NOP, every thread's buffer retired (the agent stays loaded, inert; a later attach reuses
//! it).
//!
//! Function addresses come from `/proc/PID/maps` (where each object is loaded) and the objects'
//! ELF dynamic symbols. Limits: x86_64 only; the stopped thread must not hold a lock `dlopen`
//! takes (the loader's, malloc's) — a thread sleeping, waiting or computing is fine; objects
//! the program `dlopen`s after the attach are not traced (the program's `dlopen` is not the
//! agent's).
//!
//! Invariant: whatever happens after the thread is stopped, its registers are restored before
//! ptrace lets it go (an error in a call leaves the process as it was, except a loaded, inert
//! agent).

use std::ffi::OsStr;
use std::fs::File;
use std::os::unix::ffi::OsStrExt as _;
use std::os::unix::fs::FileExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use ftrace_agent::config::Config;

/// Why the tool may not ptrace `pid`, in words naming the cause; `None` when nothing stands in
/// the way that the tool can see (ptrace itself decides).
pub fn ptrace_obstacle(pid: u32) -> Option<String> {
    let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
        return Some(format!("no process {pid}"));
    };
    // SAFETY: no preconditions.
    let me = unsafe { libc::geteuid() };
    owner_obstacle(pid, &status, me)
}

/// The other-user refusal for process `pid` whose `/proc/PID/status` is `status`, seen by a
/// tool running as user `me` (root may trace anyone).
fn owner_obstacle(pid: u32, status: &str, me: u32) -> Option<String> {
    let uid: u32 = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())?;
    (me != 0 && uid != me).then(|| {
        format!(
            "process {pid} belongs to another user (uid {uid}, ftrace runs as uid {me}): ptrace \
             attaches only to processes of the same user (or as root)"
        )
    })
}

/// Explains a refused `PTRACE_SEIZE` (`EPERM`) by `kernel.yama.ptrace_scope`.
fn explain_eperm(pid: u32) -> String {
    if let Some(o) = ptrace_obstacle(pid) {
        return o;
    }
    let scope = std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok());
    match scope {
        Some(1) => format!(
            "ptrace of process {pid} not permitted: kernel.yama.ptrace_scope is 1 (only a \
             parent may trace its descendants); run as root, give ftrace CAP_SYS_PTRACE, or \
             `sysctl kernel.yama.ptrace_scope=0`"
        ),
        Some(2) => format!(
            "ptrace of process {pid} not permitted: kernel.yama.ptrace_scope is 2 (only \
             CAP_SYS_PTRACE may trace); run as root"
        ),
        Some(3) => format!(
            "ptrace of process {pid} not permitted: kernel.yama.ptrace_scope is 3 (ptrace is \
             disabled until reboot)"
        ),
        _ => format!(
            "ptrace of process {pid} not permitted (EPERM): another tracer (a debugger, strace) \
             may hold it, or it is not dumpable"
        ),
    }
}

fn ptrace(req: libc::c_uint, tid: u32, addr: usize, data: usize) -> std::io::Result<libc::c_long> {
    // SAFETY: the requests used here read or write only `data`'s buffer when it is a pointer
    // (GETREGS/SETREGS pass a `user_regs_struct` owned by the caller).
    let r = unsafe { libc::ptrace(req, tid as libc::pid_t, addr, data) };
    if r == -1 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// What a wait on the stopped thread saw.
enum Stop {
    /// A ptrace stop with this signal (SIGTRAP | event << 8 for event stops).
    Stopped { sig: i32, event: i32 },
    /// The process is gone.
    Gone,
}

fn wait(tid: u32) -> Result<Stop, String> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(tid as libc::pid_t, &mut status, libc::__WALL) };
        if r >= 0 {
            break;
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINTR) {
            return Err(format!("waitpid {tid}: {e}"));
        }
    }
    if libc::WIFSTOPPED(status) {
        Ok(Stop::Stopped {
            sig: libc::WSTOPSIG(status),
            event: status >> 16,
        })
    } else {
        Ok(Stop::Gone)
    }
}

/// One thread of a process, stopped under ptrace with its registers saved.
pub struct Tracee {
    pid: u32,
    tid: u32,
    saved: libc::user_regs_struct,
    mem: File,
    released: bool,
}

impl Tracee {
    /// Seizes and stops a thread of `pid` ([`running_thread`]).
    pub fn stop(pid: u32) -> Result<Tracee, String> {
        let tid = running_thread(pid)?;
        if let Err(e) = ptrace(libc::PTRACE_SEIZE, tid, 0, 0) {
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) => explain_eperm(pid),
                Some(libc::ESRCH) => format!("no process {pid}"),
                _ => format!("ptrace(PTRACE_SEIZE, {pid}): {e}"),
            });
        }
        let detach = |msg: String| {
            let _ = ptrace(libc::PTRACE_DETACH, tid, 0, 0);
            msg
        };
        ptrace(libc::PTRACE_INTERRUPT, tid, 0, 0)
            .map_err(|e| detach(format!("ptrace(PTRACE_INTERRUPT, {pid}): {e}")))?;
        loop {
            match wait(tid).map_err(detach)? {
                Stop::Gone => return Err(format!("process {pid} exited while attaching")),
                Stop::Stopped { event, .. } if event == libc::PTRACE_EVENT_STOP => break,
                // A signal arrived before the interrupt: deliver it, the interrupt stays.
                Stop::Stopped { sig, .. } => {
                    ptrace(libc::PTRACE_CONT, tid, 0, sig as usize)
                        .map_err(|e| detach(format!("ptrace(PTRACE_CONT, {pid}): {e}")))?;
                }
            }
        }
        let mem = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(format!("/proc/{pid}/task/{tid}/mem"))
            .map_err(|e| detach(format!("/proc/{pid}/task/{tid}/mem: {e}")))?;
        let mut t = Tracee {
            pid,
            tid,
            // SAFETY: a zeroed register set is valid; GETREGS fills it below.
            saved: unsafe { core::mem::zeroed() },
            mem,
            released: false,
        };
        t.saved = t.regs().map_err(detach)?;
        Ok(t)
    }

    fn regs(&self) -> Result<libc::user_regs_struct, String> {
        // SAFETY: a zeroed register set is valid; GETREGS fills it.
        let mut r: libc::user_regs_struct = unsafe { core::mem::zeroed() };
        ptrace(libc::PTRACE_GETREGS, self.tid, 0, (&raw mut r) as usize)
            .map_err(|e| format!("ptrace(PTRACE_GETREGS, {}): {e}", self.tid))?;
        Ok(r)
    }

    fn set_regs(&self, r: &libc::user_regs_struct) -> Result<(), String> {
        ptrace(libc::PTRACE_SETREGS, self.tid, 0, (&raw const *r) as usize)
            .map(|_| ())
            .map_err(|e| format!("ptrace(PTRACE_SETREGS, {}): {e}", self.tid))
    }

    /// Calls `func(args...)` (at most 6 integer arguments) on the stopped thread and returns
    /// its `rax`. `data` is copied below the thread's stack pointer (past the red zone) first;
    /// an argument equal to [`Tracee::DATA`] is replaced by its address.
    pub fn call(&mut self, func: u64, args: &[u64], data: &[u8]) -> Result<u64, String> {
        assert!(args.len() <= 6, "at most 6 register arguments");
        let red_zone = 128;
        let data_at = (self.saved.rsp - red_zone - data.len() as u64) & !15;
        let sp = data_at - 8; // the return address 0: at entry, rsp + 8 is 16-byte aligned
        let mut frame = 0u64.to_ne_bytes().to_vec();
        frame.extend_from_slice(data);
        self.mem
            .write_all_at(&frame, sp)
            .map_err(|e| format!("writing process {}'s stack: {e}", self.pid))?;
        let mut r = self.saved;
        r.rip = func;
        r.rsp = sp;
        r.rax = 0;
        // No system call to restart at this stop: the call starts clean.
        r.orig_rax = u64::MAX;
        r.eflags &= !(1 << 10); // DF clear, as the ABI requires at a call
        let regs = [
            &mut r.rdi, &mut r.rsi, &mut r.rdx, &mut r.rcx, &mut r.r8, &mut r.r9,
        ];
        for (reg, &a) in regs.into_iter().zip(args) {
            *reg = if a == Self::DATA { data_at } else { a };
        }
        self.set_regs(&r)?;
        let mut sig = 0;
        loop {
            ptrace(libc::PTRACE_CONT, self.tid, 0, sig as usize)
                .map_err(|e| format!("ptrace(PTRACE_CONT, {}): {e}", self.tid))?;
            sig = 0;
            match wait(self.tid)? {
                Stop::Gone => {
                    self.released = true;
                    return Err(format!("process {} exited while attached", self.pid));
                }
                Stop::Stopped { sig: s, event } => {
                    if event != 0 {
                        continue; // a group stop or an interrupt: carry on
                    }
                    if s == libc::SIGSEGV {
                        let now = self.regs()?;
                        if now.rip == 0 && now.rsp == sp + 8 {
                            return Ok(now.rax);
                        }
                    }
                    sig = s; // the program's own signal: delivered
                }
            }
        }
    }

    /// The placeholder argument that [`Tracee::call`] replaces by the address of its data.
    pub const DATA: u64 = u64::MAX;

    /// Reads a NUL-terminated string of the process (at most `max` bytes).
    pub fn read_c_string(&self, addr: u64, max: usize) -> String {
        let mut buf = vec![0u8; max];
        let n = self.mem.read_at(&mut buf, addr).unwrap_or(0);
        buf.truncate(n);
        if let Some(end) = buf.iter().position(|&b| b == 0) {
            buf.truncate(end);
        }
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Restores the thread's registers and lets it go.
    pub fn release(mut self) -> Result<(), String> {
        self.release_inner()
    }

    fn release_inner(&mut self) -> Result<(), String> {
        if self.released {
            return Ok(());
        }
        self.released = true;
        let r = self.set_regs(&self.saved);
        let d = ptrace(libc::PTRACE_DETACH, self.tid, 0, 0)
            .map(|_| ())
            .map_err(|e| format!("ptrace(PTRACE_DETACH, {}): {e}", self.tid));
        r.and(d)
    }
}

impl Drop for Tracee {
    fn drop(&mut self) {
        let _ = self.release_inner();
    }
}

/// A thread of `pid` that can run a call: the main thread, or the first other one when the
/// main thread has exited (`pthread_exit` in `main` leaves it a zombie, which never stops).
pub fn running_thread(pid: u32) -> Result<u32, String> {
    let state = |tid: &str| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
        let (_, rest) = stat.rsplit_once(')')?;
        rest.split_whitespace().next().map(str::to_string)
    };
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .map_err(|_| format!("no process {pid}"))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_by_key(|&t| (t != pid, t));
    tids.into_iter()
        .find(|t| state(&t.to_string()).is_some_and(|s| s != "Z" && s != "X"))
        .ok_or_else(|| format!("process {pid} has no running thread"))
}

/// Where `object` (a loaded file, matched by `matches` on its path) is loaded in `pid`, and
/// its path: the load bias that its symbols' values are added to.
fn loaded_object(
    pid: u32,
    matches: impl Fn(&Path) -> bool,
) -> Result<Option<(u64, PathBuf)>, String> {
    // A zombie main thread has no maps: a running thread's are the process's.
    let maps_path = format!("/proc/{pid}/task/{}/maps", running_thread(pid)?);
    let maps = std::fs::read_to_string(&maps_path).map_err(|e| format!("{maps_path}: {e}"))?;
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(_perms), Some(offset)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let path = f.nth(2).map(Path::new);
        let Some(path) = path.filter(|p| p.is_absolute() && matches(p)) else {
            continue;
        };
        if u64::from_str_radix(offset, 16) != Ok(0) {
            continue;
        }
        let start = range
            .split('-')
            .next()
            .and_then(|s| u64::from_str_radix(s, 16).ok())
            .ok_or_else(|| format!("{maps_path}: bad line {line:?}"))?;
        return Ok(Some((start, path.to_path_buf())));
    }
    Ok(None)
}

/// The address of the dynamic symbol `name` of the object at `path` loaded at `start` (the
/// address of its first mapping).
fn symbol_address(path: &Path, start: u64, name: &str) -> Result<u64, String> {
    use object::{Object as _, ObjectSegment as _, ObjectSymbol as _};
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = object::File::parse(&*bytes).map_err(|e| format!("{}: {e}", path.display()))?;
    let first_vaddr = file.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff;
    let bias = start.wrapping_sub(first_vaddr);
    file.dynamic_symbols()
        .find(|s| s.name_bytes() == Ok(name.as_bytes()) && !s.is_undefined() && s.address() != 0)
        .map(|s| bias.wrapping_add(s.address()))
        .ok_or_else(|| format!("{}: no symbol {name}", path.display()))
}

fn is_libc(p: &Path) -> bool {
    p.file_name()
        .and_then(OsStr::to_str)
        .is_some_and(|n| n.starts_with("libc.so") || (n.starts_with("libc-") && n.ends_with(".so")))
}

/// `RTLD_NOW`.
const RTLD_NOW: u64 = 2;

/// Loads the agent at `agent` into `pid` (a no-op when it is already there) and starts it with
/// `config`; returns the number of call sites the agent found.
pub fn attach(pid: u32, agent: &Path, config: &Config) -> Result<usize, String> {
    let agent = agent
        .canonicalize()
        .map_err(|e| format!("{}: {e}", agent.display()))?;
    let (libc_at, libc_path) = loaded_object(pid, is_libc)?
        .ok_or_else(|| format!("process {pid} has no libc loaded: cannot load the agent"))?;
    let dlopen = symbol_address(&libc_path, libc_at, "dlopen")?;
    let dlerror = symbol_address(&libc_path, libc_at, "dlerror")?;
    let conf_path =
        std::env::temp_dir().join(format!("ftrace-attach-{}-{pid}", std::process::id()));
    write_private(&conf_path, &ftrace_agent::attach::format_config(config))?;
    let err_path = ftrace_agent::attach::error_path(&conf_path);
    let result = (|| {
        let mut t = Tracee::stop(pid)?;
        let handle = t.call(dlopen, &[Tracee::DATA, RTLD_NOW], &c_string(&agent))?;
        if handle == 0 {
            let msg = t.call(dlerror, &[], &[])?;
            let why = if msg == 0 {
                String::from("unknown error")
            } else {
                t.read_c_string(msg, 4096)
            };
            return Err(format!("process {pid}: loading the agent failed: {why}"));
        }
        let (agent_at, _) = loaded_object(pid, |p| p == agent)?
            .ok_or_else(|| format!("process {pid}: the agent is not in its maps after dlopen"))?;
        let start = symbol_address(&agent, agent_at, "ftrace_agent_attach")?;
        let n = t.call(start, &[Tracee::DATA], &c_string(&conf_path))? as i64;
        t.release()?;
        if n < 0 {
            let why = std::fs::read_to_string(&err_path).unwrap_or_default();
            return Err(format!("process {pid}: the agent did not start: {why}"));
        }
        Ok(n as usize)
    })();
    let _ = std::fs::remove_file(&conf_path);
    let _ = std::fs::remove_file(&err_path);
    result
}

/// Stops the agent attached to `pid` ([`attach`]): every site back as its NOP. Returns the
/// number of sites it restored.
pub fn detach(pid: u32, agent: &Path) -> Result<usize, String> {
    let agent = agent
        .canonicalize()
        .map_err(|e| format!("{}: {e}", agent.display()))?;
    let (agent_at, _) = loaded_object(pid, |p| p == agent)?
        .ok_or_else(|| format!("process {pid} has no agent loaded"))?;
    let stop = symbol_address(&agent, agent_at, "ftrace_agent_detach")?;
    let mut t = Tracee::stop(pid)?;
    let n = t.call(stop, &[], &[])? as i64;
    t.release()?;
    if n < 0 {
        return Err(format!(
            "process {pid}: the agent could not detach (see the process's stderr)"
        ));
    }
    Ok(n as usize)
}

/// What ended an attached recording.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// The tool got this signal (SIGINT, SIGTERM or SIGHUP): it detached.
    Signal(libc::c_int),
    /// The process exited while attached.
    Exited,
}

const STOP_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Blocks [`STOP_SIGNALS`] in the calling thread for the rest of its life (the tool's end
/// follows the recording): a Ctrl-C while a thread of the process runs a call for the tool
/// must not end the tool before the thread's registers are back.
fn block_stop_signals() -> libc::sigset_t {
    // SAFETY: plain sigset manipulation on local values.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in STOP_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, core::ptr::null_mut());
        set
    }
}

/// Waits until the tool gets one of the signals in `set` (blocked) or process `pid` ends
/// (exits, or is a zombie).
fn wait_for_end(pid: u32, set: &libc::sigset_t) -> End {
    loop {
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 50_000_000,
        };
        // SAFETY: `set` and `ts` are valid; no siginfo wanted.
        let s = unsafe { libc::sigtimedwait(set, core::ptr::null_mut(), &ts) };
        if s > 0 {
            return End::Signal(s);
        }
        // Alive while a thread runs (a zombie main thread does not end it).
        let alive = running_thread(pid).is_ok();
        if !alive {
            return End::Exited;
        }
    }
}

/// `ftrace record -p PID`: attaches to `pid`, records until the tool gets SIGINT, SIGTERM or
/// SIGHUP (then detaches) or the process exits, and writes the capture as
/// [`crate::record::record`] does.
pub fn record(
    opts: &crate::record::RecordOptions,
    pid: u32,
) -> Result<crate::record::Recorded, String> {
    use std::os::unix::process::ExitStatusExt as _;
    opts.check()?;
    if let Some(dir) = &opts.mount {
        crate::fuse::check_mount_point(dir)?;
    }
    if let Some(o) = ptrace_obstacle(pid) {
        return Err(o);
    }
    let exe_path = format!("/proc/{pid}/task/{}/exe", running_thread(pid)?);
    let exe = std::fs::read_link(&exe_path).map_err(|e| format!("{exe_path}: {e}"))?;
    for warning in opts.check_program(&exe.to_string_lossy())? {
        eprintln!("{warning}");
    }
    let out = &opts.output;
    if out.exists() {
        if crate::record::is_recording(out) {
            std::fs::remove_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
        } else if std::fs::read_dir(out).is_ok_and(|mut d| d.next().is_some()) {
            return Err(format!(
                "{}: exists and is not a recording; not overwriting",
                out.display()
            ));
        }
    }
    std::fs::create_dir_all(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let mut config = opts.config();
    // The process resolves the path from its own working directory.
    config.output = out
        .canonicalize()
        .map_err(|e| format!("{}: {e}", out.display()))?;
    let agent = crate::launch::find_agent()?;
    let signals = block_stop_signals();
    if let Some(dir) = &opts.mount {
        let notes = record_mounted(opts, config, &agent, pid, dir, &signals)?;
        let summary = crate::recording::Recording::read(out)
            .map(|rec| crate::record::summary(&rec, out))
            .unwrap_or_default();
        return Ok(crate::record::Recorded {
            status: std::process::ExitStatus::from_raw(0),
            summary: notes + &summary,
        });
    }
    // Without --overwrite every event is drained while attached, as `record` does
    // ([`crate::drain`]); with it the rings are the recording. An attached agent's rings stay
    // in the recording directory (its configuration names no ring directory).
    let drainer = (!opts.overwrite).then(|| {
        crate::drain::Drainer::start(out, out, crate::drain::Growth::Fixed, opts.yielding)
    });
    let traced = attach(pid, &agent, &config).and_then(|sites| {
        if sites == 0 {
            let _ = detach(pid, &agent);
            return Err(format!(
                "process {pid} ({}) has no call sites: build it with -pg -mnop-mcount \
                 -mrecord-mcount or -fpatchable-function-entry=5",
                exe.display()
            ));
        }
        eprintln!("ftrace: attached to process {pid} ({sites} call sites); Ctrl-C detaches");
        end_attached(pid, &agent, wait_for_end(pid, &signals))
    });
    let summary = match drainer {
        Some(d) => {
            let drained = d.finish();
            traced? + &crate::record::summary_of_drained(&drained, out)?
        }
        None => {
            let notes = traced?;
            let rec = crate::recording::Recording::read(out).map_err(|e| e.to_string())?;
            crate::capture::write_capture(&rec, out)?;
            notes + &crate::record::summary(&rec, out)
        }
    };
    Ok(crate::record::Recorded {
        status: std::process::ExitStatus::from_raw(0),
        summary,
    })
}

/// Detaches after `end` (unless the process exited); the lines telling the user how it ended.
fn end_attached(pid: u32, agent: &Path, end: End) -> Result<String, String> {
    Ok(match end {
        End::Signal(_) => match detach(pid, agent) {
            Ok(_) => format!("ftrace: detached from process {pid}\n"),
            Err(e) if running_thread(pid).is_err() => {
                format!("ftrace: process {pid} exited while attached ({e})\n")
            }
            Err(e) => return Err(e),
        },
        End::Exited => format!("ftrace: process {pid} exited while attached\n"),
    })
}

/// `ftrace record --mount DIR -p PID`: attaches with a live control channel, serves the
/// process's tracefs at `dir` until the end ([`wait_for_end`]), unmounts, writes the capture
/// and detaches. `echo nop > DIR/current_tracer` puts every site back as its NOP meanwhile
/// (the agent's usual `STATE` request); the detach does it for good.
fn record_mounted(
    opts: &crate::record::RecordOptions,
    mut config: Config,
    agent: &Path,
    pid: u32,
    dir: &Path,
    signals: &libc::sigset_t,
) -> Result<String, String> {
    use crate::agentctl::AgentLink;
    use crate::fuse::{TracefsFs, mount};
    use crate::live::LiveRecording;
    use crate::livefs::UserHost;
    use std::os::unix::fs::DirBuilderExt as _;

    // The socket lives in a directory only this user can enter.
    let sock_dir =
        std::env::temp_dir().join(format!("ftrace-ctl-{}-attach-{pid}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&sock_dir)
        .map_err(|e| format!("{}: {e}", sock_dir.display()))?;
    let sock = sock_dir.join("control");
    let listener = std::os::unix::net::UnixListener::bind(&sock);
    let base = ftrace_agent::clock::TscPair::now();
    config.control = Some(sock.clone());
    let link = listener
        .map_err(|e| format!("{}: {e}", sock.display()))
        .and_then(|listener| {
            let sites = attach(pid, agent, &config)?;
            if sites == 0 {
                return Err(format!("process {pid} has no call sites"));
            }
            AgentLink::accept_from(&listener, pid, std::time::Duration::from_secs(20), || {
                running_thread(pid)
                    .is_err()
                    .then(|| format!("process {pid} exited while attaching"))
            })
        });
    let _ = std::fs::remove_file(&sock);
    let _ = std::fs::remove_dir(&sock_dir);
    let served = link.and_then(|link| {
        let live = LiveRecording::new(&config.output, config.clock, base);
        let host = UserHost::new(
            link,
            live,
            config.tracer,
            config.clock,
            config.buffer_kb * 1024,
        )?;
        let handle = host.handle();
        let mut tree = ftrace_tracefs::Tracefs::new(host).map_err(|e| format!("tracefs: {e:?}"))?;
        crate::livefs::register_events(&mut tree).map_err(|e| format!("tracefs: {e:?}"))?;
        crate::record::seed_tree(&mut tree, opts);
        let m = mount(TracefsFs::new(tree), dir)?;
        eprintln!(
            "ftrace: tracefs of process {pid} mounted at {}; Ctrl-C detaches",
            dir.display()
        );
        let end = wait_for_end(pid, signals);
        m.unmount();
        Ok((end, handle))
    });
    match served {
        Ok((end, handle)) => {
            let notes = end_attached(pid, agent, end)?;
            handle.write_capture(&opts.output)?;
            Ok(notes)
        }
        Err(e) => {
            // Whatever was set up in the process goes back (nothing if the attach failed).
            let _ = detach(pid, agent);
            Err(e)
        }
    }
}

/// `ftrace live -p PID`: [`record`]s `pid` (into `opts.output`, or a temporary directory
/// removed afterwards when `keep` is false), then reports it with the `-O` `options`, as
/// [`crate::record::live`] does for a program it starts.
pub fn live(
    opts: &crate::record::RecordOptions,
    keep: bool,
    options: &[String],
    pid: u32,
) -> Result<crate::record::Live, String> {
    let mut opts = opts.clone();
    if !keep {
        opts.output =
            std::env::temp_dir().join(format!("ftrace-live-{}-attach-{pid}", std::process::id()));
    }
    let recorded = record(&opts, pid);
    let report = recorded.as_ref().ok().map(|_| {
        let mut ra = crate::report::ReportArgs::new(&opts.output);
        ra.options = options.to_vec();
        crate::report::report(&ra).map_err(|e| e.to_string())
    });
    if !keep {
        let _ = std::fs::remove_dir_all(&opts.output);
    }
    let recorded = recorded?;
    Ok(crate::record::Live {
        status: recorded.status,
        report: report.expect("recorded")?,
        summary: recorded.summary,
    })
}

fn c_string(p: &Path) -> Vec<u8> {
    let mut v = p.as_os_str().as_bytes().to_vec();
    v.push(0);
    v
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write as _;
    let _ = std::fs::remove_file(path);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_our_own_dlopen() {
        let pid = std::process::id();
        let (at, path) = loaded_object(pid, is_libc)
            .unwrap()
            .expect("libc is loaded");
        let addr = symbol_address(&path, at, "dlopen").unwrap();
        // SAFETY: looking up libc's symbol by name (the agent linked into the tests
        // interposes its own `dlopen` before it).
        let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) } as u64;
        assert_eq!(addr, real);
    }

    #[test]
    fn another_users_process_is_refused_by_name() {
        let status = "Name:\tx\nUid:\t1001\t1001\t1001\t1001\n";
        let e = owner_obstacle(7, status, 1000).unwrap();
        assert!(e.contains("belongs to another user (uid 1001"), "{e}");
        assert_eq!(owner_obstacle(7, status, 1001), None);
        assert_eq!(owner_obstacle(7, status, 0), None);
    }

    #[test]
    fn the_main_thread_runs_calls() {
        let pid = std::process::id();
        assert_eq!(running_thread(pid).unwrap(), pid);
    }

    #[test]
    fn a_missing_process_is_named() {
        assert_eq!(
            ptrace_obstacle(u32::MAX).unwrap(),
            format!("no process {}", u32::MAX)
        );
    }
}
