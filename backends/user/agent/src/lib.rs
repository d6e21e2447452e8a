//! The in-process ftrace-rs agent: preloaded into a traced program (`LD_PRELOAD`), it discovers
//! the call sites of every loaded object, patches them to call its trampolines, and records into
//! per-thread buffers that the `ftrace` tool reads.
//!
//! - [`config`]: what the tool asks for, carried by environment variables; [`attach`]: the
//!   entry points for a process the tool attached to (configuration from a file).
//! - [`elf`]: loaded objects, `__mcount_loc` / `__patchable_function_entries`, symbols.
//! - [`tramp`]: the assembly trampolines and the stub pages near each object.
//! - [`handler`]: the function / function_graph handlers and per-thread state;
//!   [`dispatch`]: the ftrace-core dispatcher and the function tracer's ops.
//! - [`patch`], [`text`]: the site forms, the breakpoint and stop-the-world protocols, and the
//!   platform primitives under them (W^X text writes, membarrier, thread stop).
//! - [`profile`]: the function profiler's counters (`function_profile_enabled`).
//! - [`buffer`]: the per-thread buffer files; [`clock`]: TSC and CLOCK_MONOTONIC.
//! - [`event`]: trace events C programs declare (`ftrace/tracepoint.h`); [`event_record`]:
//!   their filters and triggers, run when they fire, and the record.
//! - [`resize`]: threads moving to rings of a new size while the program runs.
//! - [`sigmask`]: `SIGTRAP` and the stop signal kept deliverable (the mask calls, interposed
//!   through [`interpose`]).
//!
//! The agent itself is never instrumented (it is built without instrumentation flags; the
//! per-thread recursion guard is the second line of defence). It arms itself only when loaded
//! as a shared object into a process whose environment carries [`config::ENV_OUTPUT`]; linked
//! into an executable (the `ftrace` tool, tests) it stays inert.
//!
//! Recording directory layout (`DIR`): one sub-directory per traced process image,
//! `DIR/<pid>.<n>/`, holding `meta` (key=value lines), `symbols` and `objects` (the function
//! names of the objects with sites, and the objects whose names the reader reads from their
//! files: [`symbol_files`]) and one
//! `buf-<tid>` file per thread ([`buffer`]); with a ring directory ([`config::ENV_RING_DIR`])
//! the `buf-<tid>` files go to `RING_DIR/<pid>.<n>/` instead.

pub mod attach;
pub mod buffer;
pub mod clock;
pub mod config;
pub mod control;
pub mod cpumask;
pub mod dispatch;
pub mod elf;
pub mod event;
pub mod event_pids;
pub mod event_record;
pub mod got;
pub mod grow;
pub mod handler;
pub mod hist_symbols;
pub mod interpose;
pub mod mcount;
pub mod own_thread;
pub mod patch;
pub mod pids;
pub mod probe;
pub mod profile;
pub mod resize;
pub mod sigmask;
pub mod signal_line;
pub mod stack;
pub mod symbol_files;
pub mod text;
pub mod thresh;
pub mod tramp;
pub mod unwind;
pub mod unwinder;

use core::sync::atomic::Ordering;
use std::ffi::{CString, c_void};
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use config::{Config, TracerKind};
use elf::LoadedObject;
use patch::Patcher;

/// Per-site information the agent keeps beside the patcher.
#[derive(Clone, Debug)]
pub struct SiteInfo {
    /// Site address.
    pub addr: u64,
    /// The function's name (mangled as its object spells it; demangled when a filter or a
    /// listing reads it).
    pub name: elf::SymbolName,
    /// Whether the filters select it.
    pub selected: bool,
    /// Whether it is a function_graph root (`set_graph_function`): its call goes to the root
    /// stub.
    pub root: bool,
    /// The object it lies in (`module` of the symbols file).
    pub module: String,
    /// The stubs its calls go to.
    pub stubs: tramp::Stubs,
}

/// The agent's state (control paths only; the hot path reads the statics in [`handler`]).
pub struct Agent {
    /// The configuration.
    pub config: Config,
    /// The instance directory.
    pub dir: PathBuf,
    /// Objects scanned so far (by load bias and name).
    pub objects: Vec<LoadedObject>,
    /// The patcher.
    pub patcher: Patcher,
    /// Site names and selection, sorted by address.
    pub sites: Vec<SiteInfo>,
    /// Whether the selected sites are enabled (a tracer traces, or function commands probe).
    pub on: bool,
}

static AGENT: Mutex<Option<Agent>> = Mutex::new(None);

fn agent() -> std::sync::MutexGuard<'static, Option<Agent>> {
    AGENT.lock().unwrap_or_else(|e| e.into_inner())
}

fn warn(msg: &str) {
    let _ = writeln!(std::io::stderr(), "ftrace-agent: {msg}");
}

/// Whether this code runs from a shared object (preloaded), not linked into the executable.
fn loaded_as_shared_object() -> bool {
    let me = agent_init as *const () as u64;
    elf::loaded_objects()
        .iter()
        .find(|o| o.is_exec(me))
        .is_some_and(|o| !o.name.is_empty())
}

/// The agent's own load bias.
fn own_object_bias() -> Option<usize> {
    let me = agent_init as *const () as u64;
    elf::loaded_objects()
        .into_iter()
        .find(|o| o.is_exec(me))
        .map(|o| o.bias as usize)
}

/// Whether `addr` is in the agent's own text.
pub(crate) fn in_own_text(addr: u64) -> bool {
    own_object_range().is_some_and(|(lo, hi)| (lo..hi).contains(&addr))
}

fn own_object_range() -> Option<(u64, u64)> {
    let me = agent_init as *const () as u64;
    elf::loaded_objects()
        .into_iter()
        .find(|o| o.is_exec(me))
        .map(|o| o.text_span())
}

fn create_instance_dir(out: &Path) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(out)?;
    let pid = std::process::id();
    for n in 0.. {
        let d = out.join(format!("{pid}.{n}"));
        match std::fs::create_dir(&d) {
            Ok(()) => return Ok(d),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
    unreachable!()
}

fn rseq_offset() -> Option<isize> {
    // SAFETY: looking up glibc's exported rseq variables; they are plain data.
    unsafe {
        let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr());
        let off = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr());
        if size.is_null() || off.is_null() || *size.cast::<u32>() == 0 {
            return None;
        }
        Some(*off.cast::<isize>())
    }
}

/// Where the instance of `dir` puts its ring files: `dir` itself, or (with
/// [`Config::ring_dir`]) a directory of the same name there, created here.
fn instance_ring_dir(cfg: &Config, dir: &Path) -> std::io::Result<PathBuf> {
    match (&cfg.ring_dir, dir.file_name()) {
        (Some(root), Some(name)) => {
            let d = root.join(name);
            std::fs::create_dir_all(&d)?;
            Ok(d)
        }
        _ => Ok(dir.to_path_buf()),
    }
}

fn install_instance(cfg: &Config, dir: &Path) -> std::io::Result<()> {
    let ring_dir = instance_ring_dir(cfg, dir)?;
    let cstr = |p: &Path| CString::new(p.as_os_str().as_encoded_bytes()).unwrap_or_default();
    let inst = handler::Instance {
        ring_dir: cstr(&ring_dir),
        spare: match (&cfg.ring_dir, cfg.overwrite) {
            (Some(root), false) => Some(cstr(&root.join(buffer::SPARE_FILE))),
            _ => None,
        },
        buffer_bytes: cfg.ring_file_bytes(),
        overwrite: cfg.overwrite,
        rseq_offset: rseq_offset(),
        grow_max: cfg.grow_max_bytes,
    };
    handler::INSTANCE.store(Box::into_raw(Box::new(inst)), Ordering::Release);
    Ok(())
}

fn write_meta(dir: &Path, cfg: &Config) -> std::io::Result<()> {
    let pair = clock::TscPair::now();
    let exe = std::fs::read_link("/proc/thread-self/exe").unwrap_or_default();
    let mut m = String::new();
    let _ = writeln!(m, "pid={}", std::process::id());
    let _ = writeln!(m, "exe={}", exe.display());
    let _ = writeln!(m, "tracer={}", cfg.tracer.name());
    let _ = writeln!(m, "clock={}", cfg.clock.name());
    let _ = writeln!(m, "tsc={} mono_ns={}", pair.tsc, pair.mono_ns);
    // SAFETY: no preconditions.
    let ncpu = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_CONF) };
    let _ = writeln!(m, "nr_cpus={ncpu}");
    std::fs::write(dir.join("meta"), m)
}

/// Scans objects not seen yet, records their symbols, and adds their sites (disabled).
fn scan_new_objects(a: &mut Agent) {
    let own = own_object_range();
    let mut sym_text = String::new();
    let mut objects_text = String::new();
    let mut new_sites = Vec::new();
    for obj in elf::loaded_objects() {
        if a.objects
            .iter()
            .any(|o| o.bias == obj.bias && o.name == obj.name)
        {
            continue;
        }
        let is_self = own.is_some_and(|(lo, _)| obj.is_exec(lo));
        let readable = obj.name.is_empty() || obj.name.starts_with('/');
        if is_self || !readable || obj.exec.is_empty() {
            a.objects.push(obj);
            continue;
        }
        let Ok(file) = elf::MappedFile::open(&obj.path) else {
            a.objects.push(obj);
            continue;
        };
        // A library without sites is listed, its names read by the reader from its file; the
        // executable's are read now, whatever it has: a program is rebuilt between a
        // recording and its report more often than libc is upgraded.
        let symbols = match obj.name.is_empty() {
            true => elf::Symbols::All,
            false => elf::Symbols::IfSites,
        };
        let mut scanned = elf::scan(&obj, &file, elf::read_own_memory, symbols);
        event::discover(&obj, &file, elf::read_own_memory);
        let module = obj.module();
        if symbols == elf::Symbols::IfSites
            && scanned.sites.is_empty()
            && !symbol_files::push_object_line(&mut objects_text, &obj, &file)
        {
            // A path the list cannot hold: read now after all.
            scanned = elf::scan(&obj, &file, elf::read_own_memory, elf::Symbols::All);
        }
        symbol_files::push_symbol_lines(&mut sym_text, &scanned.funcs, 0, &module);
        if !scanned.sites.is_empty() {
            let (lo, hi) = obj.text_span();
            let Some(stubs) = tramp::stubs_near(lo, hi) else {
                warn(&format!(
                    "{}: no stub page within reach",
                    obj.path.display()
                ));
                a.objects.push(obj);
                continue;
            };
            for &(addr, _) in &scanned.sites {
                let name = elf::SymbolName::new(
                    scanned
                        .func_at(addr)
                        .map(|f| f.name.clone())
                        .unwrap_or_else(|| format!("0x{addr:x}")),
                );
                let init = match patch::classify(addr) {
                    Ok(init) => init,
                    Err(bytes) => {
                        warn(&format!(
                            "site {addr:#x} ({}): unexpected bytes {bytes}",
                            name.demangled()
                        ));
                        continue;
                    }
                };
                let addr = init.ip;
                let cfg = &a.config;
                // Globs match demangled names; without globs no name is demangled.
                let matches = |globs: &[String]| {
                    !globs.is_empty() && config::glob_matches_any(globs, name.demangled())
                };
                let selected =
                    (cfg.filter.is_empty() || matches(&cfg.filter)) && !matches(&cfg.notrace);
                let root = cfg.tracer == TracerKind::FunctionGraph && matches(&cfg.graph_functions);
                let target = call_target(cfg.tracer, root, stubs);
                let Ok(call) = tramp::site_bytes(&stubs, init.form, addr, target) else {
                    warn(&format!(
                        "site {addr:#x} ({}): stub out of reach",
                        name.demangled()
                    ));
                    continue;
                };
                new_sites.push((init, call));
                let i = a.sites.partition_point(|s| s.addr < addr);
                a.sites.insert(
                    i,
                    SiteInfo {
                        addr,
                        name,
                        selected,
                        root,
                        module: module.to_string(),
                        stubs,
                    },
                );
            }
        }
        a.objects.push(obj);
    }
    if let Err(e) = a.patcher.add(new_sites) {
        warn(&format!("cannot prepare sites: {e}"));
    }
    for (name, text) in [("symbols", sym_text), (symbol_files::OBJECTS, objects_text)] {
        if let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(a.dir.join(name))
        {
            let _ = f.write_all(text.as_bytes());
        }
    }
    // `-e`: the events the new objects declare, armed as they are found, and listed.
    event_record::arm_matching(&a.config.events);
    let _ = event::write_listing(&a.dir);
}

/// Where a site calls under `tracer` (a `-G` root calls the root stub).
pub fn call_target(tracer: TracerKind, root: bool, stubs: tramp::Stubs) -> u64 {
    match (tracer, root) {
        (TracerKind::Function, _) => stubs.func(),
        (TracerKind::FunctionGraph, true) => stubs.root(),
        (TracerKind::FunctionGraph, false) => stubs.graph(),
    }
}

fn apply(a: &mut Agent) -> std::io::Result<usize> {
    let on = a.on;
    let sites = &a.sites;
    let n = a.patcher.set(on, |s| {
        sites
            .binary_search_by_key(&s.addr, |i| i.addr)
            .is_ok_and(|i| sites[i].selected)
    })?;
    for (addr, bytes) in &a.patcher.bugs {
        warn(&format!(
            "site {addr:#x}: bytes {bytes:02x?} not what was expected; left alone"
        ));
    }
    a.patcher.bugs.clear();
    Ok(n)
}

#[used]
#[unsafe(link_section = ".init_array")]
static INIT: extern "C" fn() = agent_init;

#[used]
#[unsafe(link_section = ".fini_array")]
static FINI: extern "C" fn() = agent_fini;

extern "C" fn agent_init() {
    let cfg = match Config::from_env() {
        Ok(Some(c)) => c,
        Ok(None) => return,
        Err(e) => {
            warn(&e.to_string());
            return;
        }
    };
    if !loaded_as_shared_object() {
        return;
    }
    PRELOAD_STARTING.store(true, Ordering::SeqCst);
    if let Err(e) = start(cfg, Arrival::Preloaded) {
        warn(&format!("not tracing: {e}"));
    }
    PRELOAD_STARTING.store(false, Ordering::SeqCst);
}

/// Set while the preloaded agent starts (its constructor, before [`agent`] holds it): an
/// attach that arrives then (the tool saw the agent in the process's maps) is refused as
/// for a running agent, instead of starting a second time.
static PRELOAD_STARTING: core::sync::atomic::AtomicBool =
    core::sync::atomic::AtomicBool::new(false);

/// Whether the preloaded agent is starting ([`PRELOAD_STARTING`]).
pub(crate) fn preload_starting() -> bool {
    PRELOAD_STARTING.load(Ordering::SeqCst)
}

/// How the agent came into the process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Arrival {
    /// Preloaded at start-up (`LD_PRELOAD`): the configuration is in the environment, and no
    /// other thread runs yet.
    Preloaded,
    /// Loaded into a running process by the tool ([`attach`]).
    Attached,
}

fn start(cfg: Config, arrival: Arrival) -> std::io::Result<()> {
    let dir = create_instance_dir(&cfg.output)?;
    write_meta(&dir, &cfg)?;
    install_instance(&cfg, &dir)?;
    text::install_stop_handler()?;
    sigmask::resolve_now();
    patch::install_trap_handler()?;
    sigmask::unblock_on_this_thread();
    text::register_sync_core();
    handler::CLOCK_TSC.store(cfg.clock.is_tsc(), Ordering::Relaxed);
    handler::MAX_DEPTH.store(cfg.max_depth, Ordering::Relaxed);
    handler::RETVAL.store(cfg.retval, Ordering::Relaxed);
    thresh::set(cfg.thresh_ns, cfg.clock);
    handler::GRAPH_FILTERED.store(
        cfg.tracer == TracerKind::FunctionGraph && !cfg.graph_functions.is_empty(),
        Ordering::Relaxed,
    );
    if cfg.tracer == TracerKind::Function {
        dispatch::DISPATCHER
            .register(&dispatch::FUNCTION_OPS)
            .map_err(|e| std::io::Error::other(format!("registering the function ops: {e:?}")))?;
    }
    handler::TRACER.store(
        match cfg.tracer {
            TracerKind::Function => 1,
            TracerKind::FunctionGraph => 2,
        },
        Ordering::Relaxed,
    );
    // Once per process: a re-attached agent starts again (see [`attach`]).
    static ATFORK: std::sync::Once = std::sync::Once::new();
    // SAFETY: registering plain functions with no preconditions.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(
            Some(before_fork),
            Some(after_fork_parent),
            Some(after_fork_child),
        );
    });
    let mut a = Agent {
        on: cfg.tracing_on,
        config: cfg,
        dir,
        objects: Vec::new(),
        patcher: Patcher::default(),
        sites: Vec::new(),
    };
    scan_new_objects(&mut a);
    // A fresh image of a tree the tool controls takes the tool's state before its program
    // runs: it starts with every site a NOP (the start-up configuration is the fallback).
    let wait_for_tool = arrival == Arrival::Preloaded && a.config.control.is_some();
    let start_on = a.on;
    if wait_for_tool {
        a.on = false;
    }
    handler::TRACING_ON.store(a.on, Ordering::Relaxed);
    handler::update_fast_path();
    apply(&mut a)?;
    let mut list = String::new();
    for s in &a.sites {
        let _ = writeln!(
            list,
            "{:x} {} {}",
            s.addr,
            u8::from(s.selected),
            s.name.raw()
        );
    }
    let _ = std::fs::write(a.dir.join("sites"), list);
    let control = a.config.control.clone();
    let dir = a.dir.clone();
    *agent() = Some(a);
    if let Some(path) = control {
        // Every process of the tree registers: an exec'd image inherits the variable, a
        // forked child reconnects from [`after_fork_child`].
        let first = match arrival {
            Arrival::Preloaded => control::FirstState::Wait,
            Arrival::Attached => control::FirstState::DontWait,
        };
        match control::start(&path, &dir, control::Origin::Image, first) {
            Ok(control::Started::Ready) => {}
            // Connected, but the tool sent nothing: the image stays quiet (every site a NOP)
            // rather than trace what the tree did not ask for; a later state still applies.
            Ok(control::Started::TimedOut) => warn(&format!(
                "live control {}: no state from the tool within {:?}; not tracing until it \
                 sends one",
                path.display(),
                control::FIRST_STATE_TIMEOUT
            )),
            Ok(control::Started::Closed) => warn(&format!(
                "live control {}: the tool closed the link before sending a state (this \
                 process is not of its tree, or it is stopping); not tracing",
                path.display()
            )),
            // No tool to ask: the start-up configuration.
            Err(e) => {
                warn(&format!(
                    "live control {}: {e}; tracing with the start-up configuration",
                    path.display()
                ));
                if wait_for_tool {
                    ftrace_agent_set_tracing(libc::c_int::from(start_on));
                }
            }
        }
    }
    Ok(())
}

extern "C" fn agent_fini() {
    if let Some(a) = agent().as_ref() {
        let pair = clock::TscPair::now();
        let _ = std::fs::write(
            a.dir.join("meta.exit"),
            format!(
                "tsc={} mono_ns={}\nfailed_threads={}\nshadow_overruns={}\n",
                pair.tsc,
                pair.mono_ns,
                handler::FAILED_THREADS.load(Ordering::Relaxed),
                handler::SHADOW_OVERRUNS.load(Ordering::Relaxed)
            ),
        );
    }
}

std::thread_local! {
    /// The thread id of the thread calling `fork`, taken in [`before_fork`]: the child's only
    /// thread is a copy of it, so the child reads its parent thread's id here.
    static FORKING_TID: core::cell::Cell<u32> = const { core::cell::Cell::new(0) };
    /// The agent's lock, held across `fork` by the forking thread ([`before_fork`]): no other
    /// thread (the control thread applying a state) holds it when the child is made, so the
    /// child's copy is consistent; released by [`after_fork_parent`] and, in the child, by
    /// [`after_fork_child`] (its copy of this thread's storage holds the guard of its copy
    /// of the lock).
    static FORK_GUARD: core::cell::RefCell<Option<std::sync::MutexGuard<'static, Option<Agent>>>> =
        const { core::cell::RefCell::new(None) };
    /// The resize threads' lock, held across `fork` after the agent's
    /// ([`resize::lock_for_fork`]).
    static FORK_THREADS_GUARD: core::cell::RefCell<Option<resize::ThreadsGuard>> =
        const { core::cell::RefCell::new(None) };
}

extern "C" fn before_fork() {
    // SAFETY: no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    FORKING_TID.with(|t| t.set(tid));
    let g = agent();
    FORK_GUARD.with(|f| *f.borrow_mut() = Some(g));
    let t = resize::lock_for_fork();
    FORK_THREADS_GUARD.with(|f| *f.borrow_mut() = Some(t));
}

extern "C" fn after_fork_parent() {
    FORK_THREADS_GUARD.with(|f| drop(f.borrow_mut().take()));
    FORK_GUARD.with(|f| drop(f.borrow_mut().take()));
}

extern "C" fn after_fork_child() {
    // Until the child has counters of its own, nothing it runs (the agent's own writes of
    // its instance files go through the program's interposers) counts into its parent's.
    let profiling = profile::suspend();
    FORK_THREADS_GUARD.with(|f| drop(f.borrow_mut().take()));
    let parent_tid = FORKING_TID.with(|t| t.get());
    if parent_tid != 0 {
        pids::follow_fork(parent_tid);
        event_pids::follow_fork(parent_tid);
    }
    handler::reset_current_thread();
    text::register_sync_core();
    let Some(mut g) = FORK_GUARD.with(|f| f.borrow_mut().take()) else {
        return;
    };
    let Some(a) = g.as_mut() else { return };
    let installed = create_instance_dir(&a.config.output).and_then(|dir| {
        let _ = write_meta(&dir, &a.config);
        let _ = std::fs::copy(a.dir.join("symbols"), dir.join("symbols"));
        let objects = symbol_files::OBJECTS;
        let _ = std::fs::copy(a.dir.join(objects), dir.join(objects));
        let _ = std::fs::copy(a.dir.join(event::LISTING), dir.join(event::LISTING));
        install_instance(&a.config, &dir)?;
        a.dir = dir;
        Ok(())
    });
    if installed.is_err() {
        handler::INSTANCE.store(core::ptr::null_mut(), Ordering::Release);
    }
    profile::after_fork(installed.is_ok().then_some(a.dir.as_path()), profiling);
    // A tree the tool controls: the child registers as a process of its own (its parent's
    // control thread did not survive the fork).
    if let Some(path) = a.config.control.clone() {
        let dir = a.dir.clone();
        drop(g);
        if let Err(e) = control::reconnect_after_fork(&path, &dir, parent_tid) {
            warn(&format!(
                "live control {} in forked child: {e}; tracing with the parent's state",
                path.display()
            ));
        }
    }
}

/// Turns tracing on or off: enables or disables every selected site with the live protocols.
/// Returns the number of sites changed, or -1 if the agent is not active.
#[unsafe(no_mangle)]
pub extern "C" fn ftrace_agent_set_tracing(on: libc::c_int) -> libc::c_long {
    let mut g = agent();
    let Some(a) = g.as_mut() else { return -1 };
    a.on = on != 0;
    if a.on {
        handler::TRACING_ON.store(true, Ordering::Relaxed);
        handler::update_fast_path();
    }
    let r = apply(a);
    if !a.on {
        handler::TRACING_ON.store(false, Ordering::Relaxed);
        handler::update_fast_path();
    }
    match r {
        Ok(n) => n as libc::c_long,
        Err(e) => {
            warn(&format!("patching failed: {e}"));
            -1
        }
    }
}

/// `ftrace_agent_set_tracing(1)`.
#[unsafe(no_mangle)]
pub extern "C" fn ftrace_agent_tracing_on() -> libc::c_long {
    ftrace_agent_set_tracing(1)
}

/// `ftrace_agent_set_tracing(0)`.
#[unsafe(no_mangle)]
pub extern "C" fn ftrace_agent_tracing_off() -> libc::c_long {
    ftrace_agent_set_tracing(0)
}

/// The number of call sites found, or -1 if the agent is not active.
#[unsafe(no_mangle)]
pub extern "C" fn ftrace_agent_site_count() -> libc::c_long {
    agent()
        .as_ref()
        .map_or(-1, |a| a.sites.len() as libc::c_long)
}

/// `vfork`, interposed: a `fork` (POSIX lets `vfork` be one). A vfork child borrows its
/// parent's memory and thread until it execs, so its calls would be recorded into the
/// parent's rings as the parent's thread; as a fork it gets rings of its own and registers
/// with the tool like any forked child (a shell such as dash starts its commands with vfork).
#[unsafe(no_mangle)]
pub extern "C" fn vfork() -> libc::pid_t {
    // SAFETY: fork has no preconditions; the child runs the caller's code, which a vfork
    // caller limits to what is safe after a fork too (exec or _exit).
    unsafe { libc::fork() }
}

pub(crate) type DlopenFn = unsafe extern "C" fn(*const libc::c_char, libc::c_int) -> *mut c_void;
type DlcloseFn = unsafe extern "C" fn(*mut c_void) -> libc::c_int;

/// `dlopen`, interposed: after the real one, new objects' sites are found and patched.
///
/// # Safety
/// As `dlopen(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlopen(file: *const libc::c_char, mode: libc::c_int) -> *mut c_void {
    // SAFETY: looking up the next definition of dlopen (libc's).
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlopen".as_ptr()) };
    if real.is_null() {
        return core::ptr::null_mut();
    }
    // SAFETY: `real` is libc's dlopen.
    let real: DlopenFn = unsafe { core::mem::transmute(real) };
    let mut g = agent();
    // SAFETY: forwarding the caller's arguments.
    let h = unsafe { real(file, mode) };
    if let Some(a) = g.as_mut() {
        if !h.is_null() {
            scan_new_objects(a);
            if let Err(e) = apply(a) {
                warn(&format!("patching failed: {e}"));
            }
        }
    }
    h
}

/// `dlclose`, interposed: sites of objects that went away are forgotten before anything else
/// can be patched.
///
/// # Safety
/// As `dlclose(3)`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dlclose(handle: *mut c_void) -> libc::c_int {
    // SAFETY: looking up the next definition of dlclose (libc's).
    let real = unsafe { libc::dlsym(libc::RTLD_NEXT, c"dlclose".as_ptr()) };
    if real.is_null() {
        return -1;
    }
    // SAFETY: `real` is libc's dlclose.
    let real: DlcloseFn = unsafe { core::mem::transmute(real) };
    let mut g = agent();
    // SAFETY: forwarding the caller's argument.
    let r = unsafe { real(handle) };
    if let Some(a) = g.as_mut() {
        let live = elf::loaded_objects();
        let gone: Vec<LoadedObject> = a
            .objects
            .iter()
            .filter(|o| !live.iter().any(|l| l.bias == o.bias && l.name == o.name))
            .cloned()
            .collect();
        for o in &gone {
            for &(lo, hi) in &o.exec {
                a.patcher.remove_range(lo, hi);
                a.sites.retain(|s| s.addr < lo || s.addr >= hi);
            }
        }
        a.objects.retain(|o| !gone.contains(o));
    }
    r
}
