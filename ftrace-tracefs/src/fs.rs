//! [`Tracefs`]: the file tree object a server (FUSE, a serial shell, debugfs) drives.
//!
//! Paths are relative to the mount point (`"instances/foo/trace"`). Every operation is a method
//! on `&mut Tracefs`, so a concurrent server wraps it in one lock, as the kernel serialises
//! tracefs control writes under `trace_types_lock`. Invariant: a method that returns `Err`
//! changed no state, with the kernel's own exception kept on purpose: a write to
//! `current_tracer` or `buffer_size_kb` first expands the boot-minimum buffers, even when it
//! then fails (Linux reads `1410` after `echo bogus > current_tracer`).

use alloc::borrow::ToOwned;
use alloc::boxed::Box;
use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::Write as _;

use ftrace_core::Errno;
use ftrace_core::event::EventId;
use ftrace_core::format::{FORMATS, TraceEventFormat, write_header_event, write_header_page};

use crate::backend::{FilterEdit, Host, Param, PidFile, Reader, SnapshotCommand, TraceBackend};
use crate::dynevent;
use crate::error_log::ErrorLog;
use crate::event_filter;
use crate::events::{
    DEFAULT_SYS_FILTER_MESSAGE, EnableMode, EventFile, EventSet, FilterSlot, enable_summary,
    set_event_matcher,
};
use crate::parse::{is_space, kstrtoul_from_user, parse_cpumask, short_name, write_cpumask};
use crate::readme::{CallSiteFiles, SnapshotFiles, write_readme};
use crate::tree::{self, Dir, DirEntry, File, ListCtx, Node};
use crate::triggers::{self, Trigger, TriggerCmd, TriggerCtx, TriggerKind, TriggerType};
use ftrace_tracers::TraceOptions;

/// `MAX_TRACER_SIZE`: a `current_tracer` write is cut to this many bytes.
pub const MAX_TRACER_SIZE: usize = 100;
/// `TRACE_MARKER_MAX_SIZE`: a `trace_marker` write is cut to this many bytes.
pub const TRACE_MARKER_MAX_SIZE: usize = 4096;
/// The most text one `trace_marker` event holds in sub-buffers of `subbuf_size` bytes:
/// `ring_buffer_max_event_size()` (the sub-buffer's data less two `u32` of event header) less
/// the print entry's header (common fields and `ip`, 16 bytes) and the `\n\0` Linux adds.
pub fn marker_text_max(subbuf_size: u32) -> usize {
    const PRINT_ENTRY_HEADER: usize = 16;
    (subbuf_size as usize)
        .saturating_sub(ftrace_core::format::BUF_PAGE_HDR_SIZE + 2 * 4)
        .saturating_sub(PRINT_ENTRY_HEADER + 2)
}

/// `RAW_DATA_MAX_SIZE` (6.12): the largest `trace_marker_raw` write, tag included.
pub const RAW_DATA_MAX_SIZE: usize = 3 * 1024;
/// `PID_BUF_SIZE`: the longest token a pid file accepts.
pub const PID_BUF_SIZE: usize = 127;
/// `MAX_PID` of the kernel's sparse pid list (`kernel/trace/pid_list.h`): 30 bits.
pub const PID_LIST_MAX: u32 = 1 << 30;
/// `PID_MAX_DEFAULT`: the largest `saved_cmdlines_size`.
pub const PID_MAX_DEFAULT: u64 = 32768;
/// `SAVED_CMDLINES_DEFAULT`: the `saved_cmdlines_size` asked for at boot.
pub const SAVED_CMDLINES_DEFAULT: u32 = 128;
/// `EVENT_BUF_SIZE`: the longest `set_event` token.
pub const EVENT_BUF_SIZE: usize = 127;

/// How a file is opened (the `open(2)` flags that matter to tracefs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpenFlags {
    /// Open for reading.
    pub read: bool,
    /// Open for writing.
    pub write: bool,
    /// `O_TRUNC`: `echo > file` (clears `trace`, filters, pid lists, `error_log`).
    pub truncate: bool,
    /// `O_APPEND`: `echo >> file` (adds to a filter instead of replacing it).
    pub append: bool,
    /// `O_NONBLOCK`: an empty `trace_pipe` answers `EAGAIN` instead of "would block".
    pub nonblock: bool,
    /// `O_CREAT`: tracefs creates nothing, so a missing name answers `EACCES`.
    pub create: bool,
}

/// How a write opens its file: the shell's two redirections.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteMode {
    /// `echo x > file` (`O_TRUNC`): replaces the content; clears `trace`, filters, pid lists,
    /// `error_log`.
    Truncate,
    /// `echo x >> file` (`O_APPEND`): adds to a filter or pid list instead of replacing it.
    Append,
}

impl WriteMode {
    /// The `open(2)` flags of this redirection: [`OpenFlags::TRUNCATE`] or
    /// [`OpenFlags::APPEND`].
    pub const fn open_flags(self) -> OpenFlags {
        match self {
            WriteMode::Truncate => OpenFlags::TRUNCATE,
            WriteMode::Append => OpenFlags::APPEND,
        }
    }
}

impl OpenFlags {
    /// `cat file`.
    pub const READ: OpenFlags = OpenFlags {
        read: true,
        write: false,
        truncate: false,
        append: false,
        nonblock: false,
        create: false,
    };
    /// `echo x > file`: `O_WRONLY|O_CREAT|O_TRUNC`.
    pub const TRUNCATE: OpenFlags = OpenFlags {
        read: false,
        write: true,
        truncate: true,
        append: false,
        nonblock: false,
        create: true,
    };
    /// `echo x >> file`: `O_WRONLY|O_CREAT|O_APPEND`.
    pub const APPEND: OpenFlags = OpenFlags {
        read: false,
        write: true,
        truncate: false,
        append: true,
        nonblock: false,
        create: true,
    };

    /// What a write through this open does: [`WriteMode::Truncate`] for `O_TRUNC` without
    /// `O_APPEND`, [`WriteMode::Append`] otherwise (an open without `O_TRUNC` keeps the
    /// content).
    pub const fn write_mode(self) -> WriteMode {
        if self.truncate && !self.append {
            WriteMode::Truncate
        } else {
            WriteMode::Append
        }
    }

    /// Decodes Linux `open(2)` flags (x86_64/generic values).
    pub const fn from_linux(flags: i32) -> OpenFlags {
        let acc = flags & 3;
        OpenFlags {
            read: acc == 0 || acc == 2,
            write: acc == 1 || acc == 2,
            truncate: flags & 0o1000 != 0,
            append: flags & 0o2000 != 0,
            nonblock: flags & 0o4000 != 0,
            create: flags & 0o100 != 0,
        }
    }
}

/// An open-file handle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Fh(pub u64);

/// What `stat` tells about a path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// Directory or file.
    pub node: Node,
    /// Permission bits.
    pub mode: u16,
}

/// What a blocked consuming reader waits for: new data in one instance's buffers.
///
/// Blocking is the server's job: when [`Tracefs::read`] answers `EAGAIN` on a handle opened
/// without `O_NONBLOCK`, the server parks the read, hooks the ring buffer's wake-up for this
/// key (the backend wakes readers at the `buffer_percent` watermark), and reads again when
/// woken or when [`Tracefs::poll`] says the handle is ready.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WaitKey {
    /// The instance (`None` = top level).
    pub instance: Option<String>,
    /// The CPU of a per-CPU reader, or `None` for any CPU.
    pub cpu: Option<u32>,
}

/// The tree-owned state of one instance.
struct Instance {
    backend: Box<dyn TraceBackend>,
    tracing_on: bool,
    expanded: bool,
    buffer_percent: u32,
    clock: usize,
    cpumask: Vec<u64>,
    flags: TraceOptions,
    pids: [Vec<u32>; 4],
    max_latency_ns: u64,
    error_log: ErrorLog,
    /// Open files (`tr->ref - 1`): an instance with open files cannot be removed.
    open_files: u32,
    /// Open consuming readers (`tr->trace_ref`): the tracer cannot change meanwhile.
    pipe_readers: u32,
    /// The state of every registered trace event in this instance.
    events: EventSet,
    /// The events this instance's `enable_event` / `disable_event` function commands hold in
    /// soft mode (sorted ids).
    probe_targets: Vec<u16>,
}

impl Instance {
    /// `tracer_tracing_is_on()`: the backend's recording state when it owns one (a probe or
    /// trigger may have switched it), else the tree's copy.
    fn is_on(&self) -> bool {
        self.backend.tracing_on().unwrap_or(self.tracing_on)
    }
}

/// Top-level-only values.
struct Globals {
    tracing_thresh_ns: u64,
    max_graph_depth: u32,
    saved_cmdlines: u32,
    profile_enabled: bool,
}

enum OpenState {
    /// Nothing kept between calls.
    Plain,
    /// A generated text, regenerated by a read at offset 0.
    Text(Option<Vec<u8>>),
    /// The `trace` snapshot iterator: `buf` holds the text from byte offset `base`.
    Snapshot {
        reader: Box<dyn Reader>,
        buf: Vec<u8>,
        base: u64,
        done: bool,
    },
    /// A consuming reader and the part of a chunk not yet returned.
    Pipe {
        reader: Box<dyn Reader>,
        pending: Vec<u8>,
        read_any: bool,
    },
    /// A function-filter write session (applied at release).
    Filter(Option<Box<dyn FilterEdit>>),
}

struct OpenFile {
    inst: Option<String>,
    file: File,
    flags: OpenFlags,
    state: OpenState,
}

/// The tracefs tree.
pub struct Tracefs<H: Host> {
    host: H,
    top: Instance,
    instances: BTreeMap<String, Instance>,
    globals: Globals,
    files: BTreeMap<u64, OpenFile>,
    next_fh: u64,
    /// The registered trace events, in registration order (`available_events` order).
    events: Vec<TraceEventFormat>,
    /// Their subsystems, in order of first registration (never removed, so indices are
    /// stable for open files).
    systems: Vec<&'static str>,
}

/// Rounds a `saved_cmdlines_size` request the way `allocate_cmdlines_buffer()` does on x86_64:
/// the buffer is a power-of-two number of pages after a 131096-byte header, each slot 20 bytes.
pub fn saved_cmdlines_capacity(val: u32) -> u32 {
    const HEADER: u64 = 131_096;
    const SLOT: u64 = 16 + 4;
    let need = HEADER + u64::from(val) * SLOT;
    let mut size = 4096u64;
    while size < need {
        size *= 2;
    }
    ((size - HEADER) / SLOT) as u32
}

fn all_cpus_mask(nr: u32) -> Vec<u64> {
    let mut m = vec![0u64; (nr as usize).div_ceil(64).max(1)];
    for cpu in 0..nr {
        m[(cpu / 64) as usize] |= 1 << (cpu % 64);
    }
    m
}

impl Instance {
    fn new(
        backend: Box<dyn TraceBackend>,
        flags: TraceOptions,
        clock: usize,
        nr_cpus: u32,
        expanded: bool,
    ) -> Self {
        Instance {
            backend,
            tracing_on: true,
            expanded,
            buffer_percent: 50,
            clock,
            cpumask: all_cpus_mask(nr_cpus),
            flags,
            pids: [const { Vec::new() }; 4],
            max_latency_ns: 0,
            error_log: ErrorLog::default(),
            open_files: 0,
            pipe_readers: 0,
            events: EventSet::default(),
            probe_targets: Vec::new(),
        }
    }

    fn pid_slot(which: PidFile) -> usize {
        match which {
            PidFile::Ftrace => 0,
            PidFile::FtraceNotrace => 1,
            PidFile::Event => 2,
            PidFile::EventNotrace => 3,
        }
    }
}

fn split_path(path: &str) -> Vec<&str> {
    path.split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect()
}

impl<H: Host> Tracefs<H> {
    /// Builds the tree: the top-level backend at its boot-minimum size, every value at the
    /// kernel's boot default.
    pub fn new(mut host: H) -> Result<Self, Errno> {
        let backend = host.create_backend(None, 0)?;
        let nr = host.nr_cpus();
        let clock = host.default_trace_clock();
        let mut top = Instance::new(backend, TraceOptions::DEFAULT, clock, nr, false);
        // The backend learns the boot flags as it learns every later change.
        top.backend.set_param(Param::Flags(top.flags))?;
        Ok(Tracefs {
            host,
            top,
            instances: BTreeMap::new(),
            globals: Globals {
                tracing_thresh_ns: 0,
                max_graph_depth: 0,
                saved_cmdlines: saved_cmdlines_capacity(SAVED_CMDLINES_DEFAULT),
                profile_enabled: false,
            },
            files: BTreeMap::new(),
            next_fh: 1,
            events: Vec::new(),
            systems: Vec::new(),
        })
    }

    /// Registers a trace event (`trace_add_event_call`): every instance gets its
    /// `events/<system>/<name>/` directory, `available_events` and `set_event` list it.
    /// `EINVAL` for a name tracefs cannot serve (empty, with `/`, `:` or blanks), the reserved
    /// `ftrace` subsystem or an id in the internal range; `EEXIST` if the name or id is taken.
    pub fn register_event(&mut self, event: TraceEventFormat) -> Result<(), Errno> {
        let bad = |s: &str| {
            s.is_empty()
                || s == "."
                || s == ".."
                || s.bytes()
                    .any(|b| b == b'/' || b == b':' || b == 0 || is_space(b))
        };
        if bad(event.system) || bad(event.name) || event.system == "ftrace" {
            return Err(Errno::EINVAL);
        }
        if event.id <= EventId::LAST_INTERNAL {
            return Err(Errno::EINVAL);
        }
        if self
            .events
            .iter()
            .any(|e| e.id == event.id || (e.system == event.system && e.name == event.name))
        {
            return Err(Errno::EEXIST);
        }
        if !self.systems.contains(&event.system) {
            self.systems.push(event.system);
        }
        self.events.push(event);
        for inst in core::iter::once(&mut self.top).chain(self.instances.values_mut()) {
            if inst.backend.has_events() {
                inst.events.files.insert(event.id, EventFile::default());
            }
        }
        Ok(())
    }

    /// Removes a registered event (`trace_remove_event_call`): `ENOENT` if unknown, `EBUSY`
    /// while it is enabled, soft-enabled or has triggers in any instance, or one of its files
    /// is open.
    pub fn unregister_event(&mut self, system: &str, name: &str) -> Result<(), Errno> {
        let pos = self
            .events
            .iter()
            .position(|e| e.system == system && e.name == name)
            .ok_or(Errno::ENOENT)?;
        let id = self.events[pos].id;
        let busy = core::iter::once(&self.top)
            .chain(self.instances.values())
            .filter_map(|i| i.events.files.get(&id))
            .any(|f| f.flags != Default::default() || !f.triggers.is_empty());
        let open = self.files.values().any(|of| {
            matches!(of.file,
                File::TraceEventEnable(x) | File::TraceEventFilter(x) | File::TraceEventTrigger(x)
                | File::TraceEventFormat(x) | File::TraceEventHist(x) | File::TraceEventId(x)
                if x == id)
        });
        if busy || open {
            return Err(Errno::EBUSY);
        }
        self.events.remove(pos);
        for inst in core::iter::once(&mut self.top).chain(self.instances.values_mut()) {
            inst.events.files.remove(&id);
        }
        Ok(())
    }

    /// The registered trace events, in registration order.
    pub fn trace_events(&self) -> &[TraceEventFormat] {
        &self.events
    }

    /// An event's state (flags, filter, triggers) in an instance (`None` = top level).
    pub fn event_file(&self, instance: Option<&str>, id: u16) -> Option<&EventFile> {
        let i = match instance {
            None => &self.top,
            Some(n) => self.instances.get(n)?,
        };
        i.events.files.get(&id)
    }

    fn event(&self, id: u16) -> Result<&TraceEventFormat, Errno> {
        self.events.iter().find(|e| e.id == id).ok_or(Errno::ENODEV)
    }

    /// The host.
    pub fn host(&self) -> &H {
        &self.host
    }

    /// The host, mutably (a test host records events through it).
    pub fn host_mut(&mut self) -> &mut H {
        &mut self.host
    }

    /// The backend of an instance (`None` = top level).
    pub fn backend_mut(
        &mut self,
        instance: Option<&str>,
    ) -> Option<&mut (dyn TraceBackend + 'static)> {
        match instance {
            None => Some(&mut *self.top.backend),
            Some(n) => self.instances.get_mut(n).map(|i| &mut *i.backend),
        }
    }

    fn inst(&self, name: &Option<String>) -> Option<&Instance> {
        match name {
            None => Some(&self.top),
            Some(n) => self.instances.get(n),
        }
    }

    fn inst_mut(&mut self, name: &Option<String>) -> Result<&mut Instance, Errno> {
        match name {
            None => Ok(&mut self.top),
            Some(n) => self.instances.get_mut(n).ok_or(Errno::ENODEV),
        }
    }

    fn list_ctx_entries(&self, inst: &Option<String>, d: Dir) -> Result<Vec<DirEntry>, Errno> {
        let i = self.inst(inst).ok_or(Errno::ENOENT)?;
        // Only the directories that show them pay for tracer options and instance names.
        let opts = if d == Dir::Options {
            i.backend.tracer_options()
        } else {
            Vec::new()
        };
        let names: Vec<&str> = if d == Dir::Instances {
            self.instances.keys().map(|s| s.as_str()).collect()
        } else {
            Vec::new()
        };
        let functions = self.host.functions();
        let profiler = functions.is_some_and(|f| f.has_profiler());
        let cx = ListCtx {
            top_level: inst.is_none(),
            nr_cpus: self.host.nr_cpus(),
            tracer_options: &opts,
            instances: &names,
            functions: functions.is_some(),
            profiler,
            snapshot: i.backend.has_snapshot(),
            function_tracer: i.backend.has_function_tracer(),
            events: if i.backend.has_events() {
                &self.events
            } else {
                &[]
            },
            systems: &self.systems,
        };
        Ok(tree::entries(d, &cx))
    }

    /// Resolves a path to (instance, node, mode).
    fn resolve(&self, path: &str) -> Result<(Option<String>, Node, u16), Errno> {
        let comps = split_path(path);
        let mut inst: Option<String> = None;
        let mut node = Node::Dir(Dir::Root);
        let mut mode = 0o700;
        let mut i = 0;
        while i < comps.len() {
            let Node::Dir(d) = node else {
                return Err(Errno::ENOTDIR);
            };
            if d == Dir::Instances {
                let name = comps[i];
                if !self.instances.contains_key(name) {
                    return Err(Errno::ENOENT);
                }
                inst = Some(name.to_owned());
                node = Node::Dir(Dir::Root);
                mode = tree::MODE_DIR;
                i += 1;
                continue;
            }
            let e = self
                .list_ctx_entries(&inst, d)?
                .into_iter()
                .find(|e| e.name == comps[i])
                .ok_or(Errno::ENOENT)?;
            node = e.node;
            mode = e.mode;
            i += 1;
        }
        Ok((inst, node, mode))
    }

    /// `stat(path)`.
    pub fn stat(&self, path: &str) -> Result<Stat, Errno> {
        let (_, node, mode) = self.resolve(path)?;
        Ok(Stat { node, mode })
    }

    /// `readdir(path)`, sorted by name.
    pub fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, Errno> {
        match self.resolve(path)? {
            (inst, Node::Dir(d), _) => self.list_ctx_entries(&inst, d),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// `mkdir(path)`: only `instances/<name>` can be created.
    pub fn mkdir(&mut self, path: &str) -> Result<(), Errno> {
        let comps = split_path(path);
        let Some((name, parent)) = comps.split_last() else {
            return Err(Errno::EEXIST);
        };
        let parent_path = parent.join("/");
        let (pinst, pnode, _) = self.resolve(&parent_path)?;
        if self.resolve(path).is_ok() {
            return Err(Errno::EEXIST);
        }
        if pinst.is_some() || pnode != Node::Dir(Dir::Instances) {
            return Err(if matches!(pnode, Node::Dir(_)) {
                Errno::EPERM
            } else {
                Errno::ENOTDIR
            });
        }
        let size = self.host.trace_buf_size();
        let backend = self.host.create_backend(Some(name), size)?;
        let nr = self.host.nr_cpus();
        let flags = self.top.flags.for_new_instance();
        let clock = self.host.default_trace_clock();
        let mut inst = Instance::new(backend, flags, clock, nr, true);
        inst.backend.set_param(Param::Flags(flags))?;
        if inst.backend.has_events() {
            for e in &self.events {
                inst.events.files.insert(e.id, EventFile::default());
            }
        }
        self.instances.insert((*name).to_owned(), inst);
        Ok(())
    }

    /// `rmdir(path)`: removes an instance; `EBUSY` while any of its files is open.
    pub fn rmdir(&mut self, path: &str) -> Result<(), Errno> {
        let (inst, node, _) = self.resolve(path)?;
        let comps = split_path(path);
        match (inst, node) {
            (Some(name), Node::Dir(Dir::Root)) if comps.len() == 2 => {
                let i = self.instances.get(&name).ok_or(Errno::ENODEV)?;
                if i.open_files > 0 || i.pipe_readers > 0 {
                    return Err(Errno::EBUSY);
                }
                self.instances.remove(&name);
                Ok(())
            }
            (_, Node::Dir(_)) => Err(Errno::EPERM),
            _ => Err(Errno::ENOTDIR),
        }
    }

    /// `truncate(path, 0)` outside `open`: tracefs files ignore it (the `O_TRUNC` effects
    /// happen at open; a FUSE server must pass `O_TRUNC` through, e.g. with atomic_o_trunc).
    pub fn truncate(&mut self, path: &str) -> Result<(), Errno> {
        match self.resolve(path)? {
            (_, Node::File(_), _) => Ok(()),
            _ => Err(Errno::EISDIR),
        }
    }

    /// `open(path, flags)`.
    pub fn open(&mut self, path: &str, flags: OpenFlags) -> Result<Fh, Errno> {
        let (inst, node, _) = match self.resolve(path) {
            Ok(r) => r,
            Err(Errno::ENOENT) if flags.create => return Err(Errno::EACCES),
            Err(e) => return Err(e),
        };
        let Node::File(file) = node else {
            return Err(Errno::EISDIR);
        };
        let nr = self.host.nr_cpus();
        let state = {
            let i = match &inst {
                None => &mut self.top,
                Some(n) => self.instances.get_mut(n).ok_or(Errno::ENODEV)?,
            };
            match file {
                File::Trace(cpu) => {
                    if flags.write && flags.truncate {
                        i.backend.clear(cpu);
                    }
                    if flags.read {
                        if i.flags.contains(TraceOptions::PAUSE_ON_TRACE) {
                            i.tracing_on = i.is_on();
                            i.backend.set_param(Param::TracingOn(false))?;
                        }
                        OpenState::Snapshot {
                            reader: i.backend.open_trace(cpu),
                            buf: Vec::new(),
                            base: 0,
                            done: false,
                        }
                    } else {
                        OpenState::Plain
                    }
                }
                File::Snapshot(cpu) if flags.read => OpenState::Snapshot {
                    reader: i.backend.open_snapshot(cpu),
                    buf: Vec::new(),
                    base: 0,
                    done: false,
                },
                File::Snapshot(_) => OpenState::Plain,
                File::TracePipe(cpu) => {
                    i.pipe_readers += 1;
                    OpenState::Pipe {
                        reader: i.backend.open_pipe(cpu),
                        pending: Vec::new(),
                        read_any: false,
                    }
                }
                File::TracePipeRaw(cpu) => {
                    if cpu >= nr {
                        return Err(Errno::ENODEV);
                    }
                    i.pipe_readers += 1;
                    OpenState::Pipe {
                        reader: i.backend.open_pipe_raw(cpu),
                        pending: Vec::new(),
                        read_any: false,
                    }
                }
                File::Filter(which) => {
                    if flags.write {
                        let edit = i.backend.open_filter(which, flags.write_mode())?;
                        OpenState::Filter(Some(edit))
                    } else {
                        OpenState::Text(None)
                    }
                }
                File::Pids(which) => {
                    if flags.write && flags.truncate && !flags.append {
                        i.backend.set_param(Param::Pids(which, &[]))?;
                        i.pids[Instance::pid_slot(which)].clear();
                    }
                    OpenState::Text(None)
                }
                File::ErrorLog => {
                    if flags.write && flags.truncate {
                        i.error_log.clear();
                    }
                    OpenState::Text(None)
                }
                File::SetEvent => {
                    if flags.write && flags.truncate && !flags.append {
                        // `ftrace_clear_events()`.
                        let mut set = i.events.clone();
                        for f in set.files.values_mut() {
                            f.enable_disable(false, EnableMode::Hard);
                        }
                        commit_events(i, &self.events, set)?;
                    }
                    OpenState::Text(None)
                }
                File::TraceEventTrigger(id) => {
                    if flags.write && flags.truncate {
                        // The commands with `unreg_all`: `hist`, `enable_hist`, `disable_hist`.
                        let mut set = i.events.clone();
                        let f = set.files.get_mut(&id).ok_or(Errno::ENODEV)?;
                        let (gone, kept): (Vec<Trigger>, Vec<Trigger>) =
                            f.triggers.drain(..).partition(|t| {
                                matches!(
                                    t.trigger_type(),
                                    TriggerType::Hist | TriggerType::HistEnable
                                )
                            });
                        f.triggers = kept;
                        for t in &gone {
                            detach_trigger(&mut set, id, t);
                        }
                        commit_events(i, &self.events, set)?;
                    }
                    OpenState::Text(None)
                }
                _ => OpenState::Text(None),
            }
        };
        let i = self.inst_mut(&inst)?;
        i.open_files += 1;
        let fh = self.next_fh;
        self.next_fh += 1;
        self.files.insert(
            fh,
            OpenFile {
                inst,
                file,
                flags,
                state,
            },
        );
        Ok(Fh(fh))
    }

    /// `close(fh)`: publishes a filter being written, frees `free_buffer`, drops readers.
    pub fn release(&mut self, fh: Fh) -> Result<(), Errno> {
        let of = self.files.remove(&fh.0).ok_or(Errno::EBADF)?;
        let i = match &of.inst {
            None => &mut self.top,
            Some(n) => match self.instances.get_mut(n) {
                Some(i) => i,
                None => return Ok(()),
            },
        };
        i.open_files = i.open_files.saturating_sub(1);
        match (of.file, of.state) {
            (File::TracePipe(_) | File::TracePipeRaw(_), _) => {
                i.pipe_readers = i.pipe_readers.saturating_sub(1);
                Ok(())
            }
            (File::Trace(_), OpenState::Snapshot { .. }) => {
                if i.flags.contains(TraceOptions::PAUSE_ON_TRACE) {
                    i.backend.set_param(Param::TracingOn(i.tracing_on))?;
                }
                Ok(())
            }
            (File::Filter(which), OpenState::Filter(Some(edit))) => {
                let r = edit.release();
                if which == crate::FilterFile::Filter {
                    // The function commands may have changed even if the write failed.
                    sync_soft_disabled(i, &self.events);
                    hold_probe_targets(i, &self.events).and(r)
                } else {
                    r
                }
            }
            (File::FreeBuffer, _) if of.flags.write => {
                if i.flags.contains(TraceOptions::DISABLE_ON_FREE) && i.is_on() {
                    i.backend.set_param(Param::TracingOn(false))?;
                    i.tracing_on = false;
                }
                i.backend.resize(None, 0)?;
                Ok(())
            }
            _ => Ok(()),
        }
    }

    /// For a consuming reader (`trace_pipe`, `trace_pipe_raw`): what its blocked reads wait for.
    /// `None` for every other file (their reads never block).
    pub fn wait_key(&self, fh: Fh) -> Option<WaitKey> {
        let of = self.files.get(&fh.0)?;
        let cpu = match of.file {
            File::TracePipe(cpu) => cpu,
            File::TracePipeRaw(cpu) => Some(cpu),
            _ => return None,
        };
        Some(WaitKey {
            instance: of.inst.clone(),
            cpu,
        })
    }

    /// Whether the open was `O_NONBLOCK` (an `EAGAIN` from [`Tracefs::read`] is then final).
    pub fn is_nonblocking(&self, fh: Fh) -> Option<bool> {
        self.files.get(&fh.0).map(|of| of.flags.nonblock)
    }

    /// Whether a read on `fh` would return data (or EOF) now rather than wait.
    pub fn poll(&mut self, fh: Fh) -> Result<bool, Errno> {
        let of = self.files.get_mut(&fh.0).ok_or(Errno::EBADF)?;
        Ok(match &mut of.state {
            OpenState::Pipe {
                reader, pending, ..
            } => !pending.is_empty() || reader.next_chunk(pending),
            _ => true,
        })
    }

    /// `read(fh, offset, buf)`.
    ///
    /// A consuming file with nothing to read answers `EAGAIN`: for an `O_NONBLOCK` handle that
    /// is the answer; for a blocking one the server waits for the ring buffer's wake-up (its
    /// `buffer_percent` watermark) and reads again. After something was read and `tracing_on`
    /// is 0, an empty `trace_pipe` answers end of file (0), as Linux does.
    pub fn read(&mut self, fh: Fh, offset: u64, buf: &mut [u8]) -> Result<usize, Errno> {
        let mut of = self.files.remove(&fh.0).ok_or(Errno::EBADF)?;
        let r = self.read_inner(&mut of, offset, buf);
        self.files.insert(fh.0, of);
        r
    }

    fn read_inner(
        &mut self,
        of: &mut OpenFile,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, Errno> {
        if !of.flags.read {
            return Err(Errno::EBADF);
        }
        match &mut of.state {
            OpenState::Snapshot {
                reader,
                buf: text,
                base,
                done,
            } => {
                if offset < *base {
                    let i = self.inst_mut(&of.inst)?;
                    *reader = match of.file {
                        File::Snapshot(cpu) => i.backend.open_snapshot(cpu),
                        File::Trace(cpu) => i.backend.open_trace(cpu),
                        _ => unreachable!("only trace and snapshot keep an iterator"),
                    };
                    text.clear();
                    *base = 0;
                    *done = false;
                }
                let want_end = offset.saturating_add(buf.len() as u64);
                while !*done && *base + (text.len() as u64) < want_end {
                    *done = !reader.next_chunk(text);
                }
                let start = (offset - *base) as usize;
                let n = text.len().saturating_sub(start).min(buf.len());
                if n > 0 {
                    buf[..n].copy_from_slice(&text[start..start + n]);
                }
                // Keep only what a sequential reader may still ask for.
                let keep_from = (start + n).min(text.len());
                text.drain(..keep_from);
                *base += keep_from as u64;
                Ok(n)
            }
            OpenState::Pipe {
                reader,
                pending,
                read_any,
            } => {
                let mut n = 0;
                while n < buf.len() {
                    if pending.is_empty() && !reader.next_chunk(pending) {
                        break;
                    }
                    let k = pending.len().min(buf.len() - n);
                    buf[n..n + k].copy_from_slice(&pending[..k]);
                    pending.drain(..k);
                    n += k;
                }
                if n > 0 {
                    *read_any = true;
                    return Ok(n);
                }
                if buf.is_empty() {
                    return Ok(0);
                }
                let on = self.inst(&of.inst).is_some_and(Instance::is_on);
                if *read_any && !on {
                    return Ok(0);
                }
                Err(Errno::EAGAIN)
            }
            OpenState::Text(cache) => {
                if offset == 0 || cache.is_none() {
                    *cache = Some(self.generate(&of.inst, of.file)?);
                }
                let text = cache.as_deref().unwrap_or(&[]);
                let start = (offset.min(text.len() as u64)) as usize;
                let n = (text.len() - start).min(buf.len());
                buf[..n].copy_from_slice(&text[start..start + n]);
                Ok(n)
            }
            OpenState::Plain | OpenState::Filter(_) => match of.file {
                File::Filter(which) => {
                    let mut s = String::new();
                    let i = self.inst(&of.inst).ok_or(Errno::ENODEV)?;
                    let _ = i.backend.write_filter(which, &mut s);
                    let start = (offset.min(s.len() as u64)) as usize;
                    let n = (s.len() - start).min(buf.len());
                    buf[..n].copy_from_slice(&s.as_bytes()[start..start + n]);
                    Ok(n)
                }
                _ => Err(Errno::EINVAL),
            },
        }
    }

    /// Generates the whole text of a readable file; `EINVAL` for files without a read side.
    fn generate(&self, inst: &Option<String>, file: File) -> Result<Vec<u8>, Errno> {
        let i = self.inst(inst).ok_or(Errno::ENODEV)?;
        let nr = self.host.nr_cpus();
        let mut s = String::new();
        let w = &mut s;
        // Writing into a String cannot fail.
        let _ = match file {
            File::AvailableTracers => {
                let t = i.backend.tracers();
                writeln!(w, "{}", t.join(" "))
            }
            File::CurrentTracer => writeln!(w, "{}", i.backend.current_tracer()),
            File::TracingOn => writeln!(w, "{}", u8::from(i.is_on())),
            File::TraceOptions => {
                for (name, flag) in TraceOptions::NAMES {
                    let no = if i.flags.contains(flag) { "" } else { "no" };
                    let _ = writeln!(w, "{no}{name}");
                }
                let cur = i.backend.current_tracer();
                for o in i.backend.tracer_options() {
                    if o.tracer == cur {
                        let _ = writeln!(w, "{}{}", if o.value { "" } else { "no" }, o.name);
                    }
                }
                Ok(())
            }
            File::Flag(flag) => writeln!(w, "{}", u8::from(i.flags.contains(flag))),
            File::TracerOpt(name) => {
                let v = i
                    .backend
                    .tracer_options()
                    .into_iter()
                    .find(|o| o.name == name);
                writeln!(w, "{}", u8::from(v.is_some_and(|o| o.value)))
            }
            File::Filter(which) => i.backend.write_filter(which, w),
            File::Pids(which) => {
                let l = &i.pids[Instance::pid_slot(which)];
                // `ftrace_pid_show` says so; the event pid files show an empty list empty.
                if l.is_empty() && matches!(which, PidFile::Ftrace | PidFile::FtraceNotrace) {
                    w.write_str("no pid\n")
                } else {
                    for p in l {
                        let _ = writeln!(w, "{p}");
                    }
                    Ok(())
                }
            }
            File::BufferSizeKb(Some(cpu)) => writeln!(w, "{}", i.backend.buffer_bytes(cpu) >> 10),
            File::BufferSizeKb(None) => {
                let first = i.backend.buffer_bytes(0);
                if (1..nr).any(|c| i.backend.buffer_bytes(c) != first) {
                    w.write_str("X\n")
                } else if !i.expanded {
                    writeln!(
                        w,
                        "{} (expanded: {})",
                        first >> 10,
                        self.host.trace_buf_size() >> 10
                    )
                } else {
                    writeln!(w, "{}", first >> 10)
                }
            }
            File::BufferTotalSizeKb => {
                let total: u64 = (0..nr).map(|c| i.backend.buffer_bytes(c) >> 10).sum();
                if i.expanded {
                    writeln!(w, "{total}")
                } else {
                    let exp = (self.host.trace_buf_size() >> 10) * u64::from(nr);
                    writeln!(w, "{total} (expanded: {exp})")
                }
            }
            File::BufferSubbufSizeKb => writeln!(w, "{}", i.backend.subbuf_size() / 1024),
            File::BufferPercent => writeln!(w, "{}", i.buffer_percent),
            File::Stats(cpu) => i.backend.write_stats(cpu, w),
            File::TraceClock => {
                for (n, c) in self.host.trace_clocks().iter().enumerate() {
                    let sp = if n > 0 { " " } else { "" };
                    let _ = if n == i.clock {
                        write!(w, "{sp}[{c}]")
                    } else {
                        write!(w, "{sp}{c}")
                    };
                }
                w.write_str("\n")
            }
            File::TimestampMode => w.write_str("[delta] absolute\n"),
            File::TracingCpumask => {
                let _ = write_cpumask(w, &i.cpumask, nr);
                w.write_str("\n")
            }
            File::TracingMaxLatency => write_usecs(w, i.max_latency_ns),
            File::ErrorLog => i.error_log.write_to(w),
            File::HeaderPage => write_header_page(w, i.backend.subbuf_size() as usize),
            File::HeaderEvent => write_header_event(w),
            File::EventFormat(n) => FORMATS[n].write_to(w),
            File::EventIdFile(n) => writeln!(w, "{}", FORMATS[n].id.as_u16()),
            File::AvailableEvents => {
                for e in &self.events {
                    let _ = writeln!(w, "{}:{}", e.system, e.name);
                }
                Ok(())
            }
            File::SetEvent => {
                for e in &self.events {
                    if i.events.files.get(&e.id).is_some_and(|f| f.flags.enabled) {
                        let _ = writeln!(w, "{}:{}", e.system, e.name);
                    }
                }
                Ok(())
            }
            File::EventsEnable => {
                writeln!(w, "{}", enable_summary(i.events.files.values()))
            }
            File::SystemEnable(sys) => {
                let name = self.systems.get(usize::from(sys)).copied().unwrap_or("");
                let files = self
                    .events
                    .iter()
                    .filter(|e| e.system == name)
                    .filter_map(|e| i.events.files.get(&e.id));
                writeln!(w, "{}", enable_summary(files))
            }
            File::SystemFilter(sys) => match i.events.system_filters.get(&sys) {
                Some(t) => writeln!(w, "{t}"),
                None => w.write_str(DEFAULT_SYS_FILTER_MESSAGE),
            },
            File::TraceEventEnable(id) => {
                let f = event_file(i, id)?;
                match self
                    .event(id)
                    .ok()
                    .and_then(|e| i.backend.event_soft_disabled(e))
                {
                    Some(d) if f.flags.soft_mode && d != f.flags.soft_disabled => {
                        let mut live = f.clone();
                        live.flags.soft_disabled = d;
                        live.write_enable(w)
                    }
                    _ => f.write_enable(w),
                }
            }
            File::TraceEventFilter(id) => event_file(i, id)?.write_filter(w),
            File::TraceEventTrigger(id) => {
                let f = event_file(i, id)?;
                let snapshot = snapshot_files(&*i.backend);
                match self.event(id).ok().and_then(|e| live_triggers(i, e, f)) {
                    Some(live) => live.write_triggers(w, snapshot),
                    None => f.write_triggers(w, snapshot),
                }
            }
            File::TraceEventFormat(id) => self.event(id)?.write_to(w),
            File::TraceEventHist(id) => {
                event_file(i, id)?;
                i.backend.write_event_hist(self.event(id)?, w)
            }
            File::TraceEventId(id) => writeln!(w, "{}", self.event(id)?.id),
            File::Readme => write_readme(
                w,
                match self.host.functions() {
                    Some(_) => CallSiteFiles::Present,
                    None => CallSiteFiles::Absent,
                },
                snapshot_files(&*self.top.backend),
            ),
            File::SavedCmdlines => self.top.backend.write_saved_cmdlines(w),
            File::SavedTgids => self.top.backend.write_saved_tgids(w),
            File::SavedCmdlinesSize => writeln!(w, "{}", self.globals.saved_cmdlines),
            File::TracingThresh => write_usecs(w, self.globals.tracing_thresh_ns),
            File::MaxGraphDepth => writeln!(w, "{}", self.globals.max_graph_depth as i32),
            File::AvailableFilterFunctions
            | File::AvailableFilterFunctionsAddrs
            | File::EnabledFunctions
            | File::TouchedFunctions
            | File::DynFtraceTotalInfo
            | File::TraceStatFunction(_) => {
                let Some(f) = self.host.functions() else {
                    return Ok(Vec::new());
                };
                match file {
                    File::AvailableFilterFunctions => f.write_available(w, false),
                    File::AvailableFilterFunctionsAddrs => f.write_available(w, true),
                    File::EnabledFunctions => f.write_enabled(w, false),
                    File::TouchedFunctions => f.write_enabled(w, true),
                    File::TraceStatFunction(cpu) => f.write_profile(cpu, w),
                    _ => f.write_total_info(w),
                }
            }
            File::FunctionProfileEnabled => {
                writeln!(w, "{}", u8::from(self.globals.profile_enabled))
            }
            File::KprobeEvents | File::DynamicEvents => Ok(()),
            File::TraceMarker
            | File::TraceMarkerRaw
            | File::FreeBuffer
            | File::Trace(_)
            | File::Snapshot(_)
            | File::TracePipe(_)
            | File::TracePipeRaw(_) => return Err(Errno::EINVAL),
        };
        Ok(s.into_bytes())
    }

    /// `write(fh, offset, data)`: the kernel's parsing and errno for each file. The offset is
    /// ignored, as every tracefs control file parses each write on its own.
    pub fn write(&mut self, fh: Fh, _offset: u64, data: &[u8]) -> Result<usize, Errno> {
        let mut of = self.files.remove(&fh.0).ok_or(Errno::EBADF)?;
        let r = if of.flags.write {
            self.write_inner(&mut of, data)
        } else {
            Err(Errno::EBADF)
        };
        self.files.insert(fh.0, of);
        r
    }

    fn write_inner(&mut self, of: &mut OpenFile, data: &[u8]) -> Result<usize, Errno> {
        let cnt = data.len();
        let nr = self.host.nr_cpus();
        let now = self.host.local_clock_ns();
        if let OpenState::Filter(Some(edit)) = &mut of.state {
            return edit.write(data);
        }
        let top_level = of.inst.is_none();
        let trace_buf_size = self.host.trace_buf_size();
        let clocks = self.host.trace_clocks();
        let i = match &of.inst {
            None => &mut self.top,
            Some(n) => self.instances.get_mut(n).ok_or(Errno::ENODEV)?,
        };
        // Edits start from the soft-disabled bits the backend's triggers left.
        sync_soft_disabled(i, &self.events);
        match of.file {
            File::CurrentTracer => {
                let cnt = cnt.min(MAX_TRACER_SIZE);
                let name = crate::parse::strstrip(crate::parse::c_str(&data[..cnt]));
                if !i.expanded {
                    i.expanded = true;
                    i.backend.resize(None, trace_buf_size)?;
                }
                let name = core::str::from_utf8(name).map_err(|_| Errno::EINVAL)?;
                if !i.backend.tracers().contains(&name) {
                    return Err(Errno::EINVAL);
                }
                if name == i.backend.current_tracer() {
                    return Ok(cnt);
                }
                if i.pipe_readers > 0 {
                    return Err(Errno::EBUSY);
                }
                i.backend.set_tracer(name)?;
                Ok(cnt)
            }
            File::TracingOn => {
                let on = kstrtoul_from_user(data, 10)? != 0;
                if on != i.is_on() {
                    i.backend.set_param(Param::TracingOn(on))?;
                    i.tracing_on = on;
                }
                Ok(cnt)
            }
            File::Trace(_) => Ok(cnt),
            File::Snapshot(cpu) => {
                // `tracing_snapshot_write` expands the boot-minimum buffers before anything
                // else; here a number that does not parse (base 10) is refused first, so that
                // it changes nothing.
                let cmd = SnapshotCommand::from_value(kstrtoul_from_user(data, 10)?);
                if !i.expanded {
                    i.expanded = true;
                    i.backend.resize(None, trace_buf_size)?;
                }
                i.backend.snapshot(cpu, cmd)?;
                Ok(cnt)
            }
            File::TraceOptions => {
                let opt = short_name(data, 64)?;
                let (neg, name) = match opt.strip_prefix(b"no") {
                    Some(rest) => (true, rest),
                    None => (false, opt),
                };
                if let Some(flag) = TraceOptions::by_name_bytes(name) {
                    set_flag(i, flag, !neg)?;
                    return Ok(cnt);
                }
                let name = core::str::from_utf8(name).map_err(|_| Errno::EINVAL)?;
                let cur = i.backend.current_tracer();
                let opts = i.backend.tracer_options();
                if !opts.iter().any(|o| o.tracer == cur && o.name == name) {
                    return Err(Errno::EINVAL);
                }
                // Unlike `options/<name>`, `trace_options` asks the tracer even when the value
                // does not change (Linux `set_tracer_option()`), so a refusing tracer refuses.
                i.backend.set_tracer_option(name, !neg)?;
                Ok(cnt)
            }
            File::Flag(flag) => {
                let v = kstrtoul_from_user(data, 10)?;
                if v > 1 {
                    return Err(Errno::EINVAL);
                }
                set_flag(i, flag, v == 1)?;
                Ok(cnt)
            }
            File::TracerOpt(name) => {
                let v = kstrtoul_from_user(data, 10)?;
                if v > 1 {
                    return Err(Errno::EINVAL);
                }
                let cur = i
                    .backend
                    .tracer_options()
                    .into_iter()
                    .find(|o| o.name == name);
                if cur.is_some_and(|o| o.value != (v == 1)) {
                    i.backend.set_tracer_option(name, v == 1)?;
                }
                Ok(cnt)
            }
            File::Pids(which) => {
                let slot = Instance::pid_slot(which);
                let mut list = i.pids[slot].clone();
                for tok in data
                    .split(|&b| is_space(b) || b == 0)
                    .filter(|t| !t.is_empty())
                {
                    // `trace_get_user()` holds a token in PID_BUF_SIZE (127) bytes.
                    if tok.len() > PID_BUF_SIZE {
                        return Err(Errno::EINVAL);
                    }
                    let val = crate::parse::kstrtoull(tok, 0).map_err(|_| Errno::EINVAL)?;
                    // `pid = (pid_t)val`, then the pid list refuses anything at or above
                    // its MAX_PID, and `trace_pid_write()` returns -1: EPERM.
                    let pid = val as u32;
                    if pid >= PID_LIST_MAX {
                        return Err(Errno::EPERM);
                    }
                    list.push(pid);
                }
                list.sort_unstable();
                list.dedup();
                i.backend.set_param(Param::Pids(which, &list))?;
                i.pids[slot] = list;
                Ok(cnt)
            }
            File::BufferSizeKb(cpu) => {
                let kb = kstrtoul_from_user(data, 10)?;
                if kb == 0 {
                    return Err(Errno::EINVAL);
                }
                if cpu.is_some_and(|c| c >= nr) {
                    return Err(Errno::ENODEV);
                }
                i.expanded = true;
                i.backend.resize(cpu, kb << 10)?;
                Ok(cnt)
            }
            File::BufferSubbufSizeKb => {
                let kb = kstrtoul_from_user(data, 10)?;
                // Linux: `val *= 1024; pages = DIV_ROUND_UP(val, PAGE_SIZE)` into an `int`,
                // `order = fls(pages - 1)`, 0..=7 allowed. The wrap-arounds are Linux's too.
                let bytes = kb.wrapping_mul(1024);
                let pages = (bytes.wrapping_add(4095) / 4096) as u32;
                let order = 32 - pages.wrapping_sub(1).leading_zeros();
                if order > 7 {
                    return Err(Errno::EINVAL);
                }
                let bytes = 4096u32 << order;
                if bytes != i.backend.subbuf_size() {
                    i.backend.set_subbuf_size(bytes)?;
                }
                Ok(cnt)
            }
            File::BufferPercent => {
                let v = kstrtoul_from_user(data, 10)?;
                if v > 100 {
                    return Err(Errno::EINVAL);
                }
                i.backend.set_param(Param::BufferPercent(v as u32))?;
                i.buffer_percent = v as u32;
                Ok(cnt)
            }
            File::FreeBuffer => Ok(cnt),
            File::TraceClock => {
                let name = short_name(data, 64)?;
                let idx = clocks
                    .iter()
                    .position(|c| c.as_bytes() == name)
                    .ok_or(Errno::EINVAL)?;
                i.backend.set_param(Param::Clock(clocks[idx]))?;
                i.clock = idx;
                Ok(cnt)
            }
            File::TraceMarker => {
                if !i.flags.contains(TraceOptions::MARKERS) {
                    return Err(Errno::EINVAL);
                }
                // Linux cuts the write to what one event of the ring buffer holds and returns
                // the short count (the writer writes the rest as the next event).
                let cnt = cnt
                    .min(TRACE_MARKER_MAX_SIZE)
                    .min(marker_text_max(i.backend.subbuf_size()));
                if cnt == 0 {
                    return Ok(0);
                }
                // As written: the tracer adds the newline when the text lacks one, in the
                // two bytes of room the size above keeps for it and the NUL.
                i.backend.write_marker(&data[..cnt])?;
                Ok(cnt)
            }
            File::TraceMarkerRaw => {
                if !i.flags.contains(TraceOptions::MARKERS)
                    || !(4..=RAW_DATA_MAX_SIZE).contains(&cnt)
                {
                    return Err(Errno::EINVAL);
                }
                let id = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]);
                i.backend.write_marker_raw(id, &data[4..])?;
                Ok(cnt)
            }
            File::TracingCpumask => {
                let mask = parse_cpumask(data, nr)?;
                i.backend.set_param(Param::CpuMask(&mask))?;
                i.cpumask = mask;
                Ok(cnt)
            }
            File::TracingMaxLatency => {
                let ns = kstrtoul_from_user(data, 10)?.wrapping_mul(1000);
                i.backend.set_param(Param::MaxLatency(ns))?;
                i.max_latency_ns = ns;
                Ok(cnt)
            }
            File::ErrorLog => Ok(cnt),
            File::TracingThresh if top_level => {
                let ns = kstrtoul_from_user(data, 10)?.wrapping_mul(1000);
                i.backend.set_param(Param::TracingThresh(ns))?;
                self.globals.tracing_thresh_ns = ns;
                Ok(cnt)
            }
            File::MaxGraphDepth if top_level => {
                let v = kstrtoul_from_user(data, 10)? as u32;
                i.backend.set_param(Param::MaxGraphDepth(v))?;
                self.globals.max_graph_depth = v;
                Ok(cnt)
            }
            File::SavedCmdlinesSize if top_level => {
                let v = kstrtoul_from_user(data, 10)?;
                if v == 0 || v > PID_MAX_DEFAULT {
                    return Err(Errno::EINVAL);
                }
                let cap = saved_cmdlines_capacity(v as u32);
                i.backend.set_param(Param::SavedCmdlines(cap))?;
                self.globals.saved_cmdlines = cap;
                Ok(cnt)
            }
            File::FunctionProfileEnabled if top_level => {
                let on = kstrtoul_from_user(data, 10)? != 0;
                if on != self.globals.profile_enabled {
                    i.backend.set_param(Param::ProfileEnabled(on))?;
                    self.globals.profile_enabled = on;
                }
                Ok(cnt)
            }
            File::SetEvent => {
                if cnt == 0 {
                    return Ok(0);
                }
                expand(i, trace_buf_size)?;
                let (read, tok) = crate::parse::trace_get_user(data, EVENT_BUF_SIZE + 1)?;
                if tok.is_empty() {
                    return Ok(read);
                }
                let tok = core::str::from_utf8(tok).map_err(|_| Errno::EINVAL)?;
                let (set, name) = match tok.strip_prefix('!') {
                    Some(rest) => (false, rest),
                    None => (true, tok),
                };
                set_clr_event(i, &self.events, set_event_matcher(name), set)?;
                Ok(read)
            }
            File::EventsEnable | File::SystemEnable(_) => {
                let v = kstrtoul_from_user(data, 10)?;
                expand(i, trace_buf_size)?;
                if v > 1 {
                    return Err(Errno::EINVAL);
                }
                let sys = match of.file {
                    File::SystemEnable(s) => {
                        Some(self.systems.get(usize::from(s)).copied().unwrap_or(""))
                    }
                    _ => None,
                };
                if sys.is_none() && !i.backend.has_events() {
                    // No event to switch: `events/enable` holds nothing (what it reads, too).
                    return Ok(cnt);
                }
                set_clr_event(
                    i,
                    &self.events,
                    |e| sys.is_none_or(|s| s == e.system),
                    v == 1,
                )?;
                Ok(cnt)
            }
            File::TraceEventEnable(id) => {
                let v = kstrtoul_from_user(data, 10)?;
                if v > 1 {
                    return Err(Errno::EINVAL);
                }
                expand(i, trace_buf_size)?;
                let mut set = i.events.clone();
                set.files
                    .get_mut(&id)
                    .ok_or(Errno::ENODEV)?
                    .enable_disable(v == 1, EnableMode::Hard);
                commit_events(i, &self.events, set)?;
                Ok(cnt)
            }
            File::TraceEventFilter(id) => {
                let ev = *self
                    .events
                    .iter()
                    .find(|e| e.id == id)
                    .ok_or(Errno::ENODEV)?;
                let text = filter_text(data)?;
                let mut set = i.events.clone();
                let f = set.files.get_mut(&id).ok_or(Errno::ENODEV)?;
                let r = apply_filter(f, &ev, &text, &mut |m, pos| {
                    i.error_log
                        .log(now, event_filter::ERROR_LOCATION, m, &text, pos as u16)
                });
                commit_events(i, &self.events, set)?;
                r.map(|()| cnt)
            }
            File::SystemFilter(sys) => {
                let name = self.systems.get(usize::from(sys)).copied().unwrap_or("");
                let text = filter_text(data)?;
                let mut set = i.events.clone();
                let mut logs: Vec<(&'static str, usize)> = Vec::new();
                let evs: Vec<TraceEventFormat> = self
                    .events
                    .iter()
                    .filter(|e| e.system == name)
                    .copied()
                    .collect();
                if evs.is_empty() {
                    return Err(Errno::ENODEV);
                }
                if text.trim_end() == "0" {
                    for e in &evs {
                        if let Some(f) = set.files.get_mut(&e.id) {
                            f.filter = None;
                        }
                    }
                    set.system_filters.remove(&sys);
                } else {
                    for e in &evs {
                        let Some(f) = set.files.get_mut(&e.id) else {
                            continue;
                        };
                        f.filter = Some(match event_filter::parse(e, &text) {
                            Ok(flt) => FilterSlot::Active(flt),
                            Err(_) => {
                                let err = event_filter::FilterError {
                                    errno: Errno::EINVAL,
                                    msg: Some(event_filter::msg::BAD_SUBSYS_FILTER),
                                    pos: 0,
                                };
                                logs.push(err.log_entry());
                                FilterSlot::Failed(err.annotate(&text))
                            }
                        });
                    }
                    set.system_filters.remove(&sys);
                }
                commit_events(i, &self.events, set)?;
                for (m, pos) in logs {
                    i.error_log
                        .log(now, event_filter::ERROR_LOCATION, m, &text, pos as u16);
                }
                Ok(cnt)
            }
            File::TraceEventTrigger(id) => {
                let ev = *self
                    .events
                    .iter()
                    .find(|e| e.id == id)
                    .ok_or(Errno::ENODEV)?;
                if cnt == 0 {
                    return Ok(0);
                }
                // The counts the backend spent are the ones the edit starts from.
                if let Some(live) = i
                    .events
                    .files
                    .get(&id)
                    .and_then(|f| live_triggers(i, &ev, f))
                {
                    i.events.files.insert(id, live);
                }
                let registry = &self.events;
                let find = |sys: &str, name: &str| {
                    registry
                        .iter()
                        .find(|e| e.system == sys && e.name == name)
                        .copied()
                };
                let existing = i
                    .events
                    .files
                    .get(&id)
                    .map(|f| f.triggers.clone())
                    .unwrap_or_default();
                let all = &i.events;
                let var_defined = |name: &str| {
                    all.files
                        .values()
                        .flat_map(|f| &f.triggers)
                        .any(|t| match &t.kind {
                            TriggerKind::Hist(h) => h.var_names.iter().any(|n| n == name),
                            _ => false,
                        })
                };
                let tcx = TriggerCtx {
                    event: &ev,
                    find_event: &find,
                    existing: &existing,
                    var_defined: &var_defined,
                    clocks,
                };
                // Without a snapshot buffer there is no `snapshot` command (the kernel
                // registers it only with `CONFIG_TRACER_SNAPSHOT`): EINVAL, nothing logged.
                if snapshot_files(&*i.backend) == SnapshotFiles::Absent
                    && triggers::command_name(data) == Some("snapshot")
                {
                    return Err(Errno::EINVAL);
                }
                let mut logs = Vec::new();
                let cmd = triggers::parse(data, &tcx, &mut |loc: &str, m, cmd: &str, pos| {
                    logs.push((String::from(loc), m, String::from(cmd), pos));
                });
                for (loc, m, c, pos) in &logs {
                    i.error_log.log(now, loc, m, c, *pos);
                }
                let cmd = cmd?;
                let mut set = i.events.clone();
                let mut clock = None;
                match cmd {
                    TriggerCmd::Add(t) => {
                        let f = set.files.get_mut(&id).ok_or(Errno::ENODEV)?;
                        if t.trigger_type() != TriggerType::Hist
                            && f.triggers.iter().any(|x| x.same_as(&t))
                        {
                            return Err(Errno::EEXIST);
                        }
                        if let TriggerKind::Hist(h) = &t.kind {
                            clock = h.clock.clone();
                        }
                        attach_trigger(&mut set, id, t);
                    }
                    TriggerCmd::Remove(t) => {
                        let f = set.files.get_mut(&id).ok_or(Errno::ENODEV)?;
                        if let Some(pos) = f.triggers.iter().position(|x| x.same_as(&t)) {
                            let old = f.triggers.remove(pos);
                            detach_trigger(&mut set, id, &old);
                        }
                    }
                    TriggerCmd::Update(t, paused) => {
                        let f = set.files.get_mut(&id).ok_or(Errno::ENODEV)?;
                        if let (Some(p), Some(x)) =
                            (paused, f.triggers.iter_mut().find(|x| x.same_as(&t)))
                        {
                            x.paused = p;
                        }
                        if paused.is_none()
                            && let Some(e) = self.events.iter().find(|e| e.id == id)
                        {
                            i.backend.clear_event_hist(e, &t);
                        }
                    }
                }
                if let Some(c) = clock {
                    // A hist trigger on `common_timestamp` sets the instance's clock
                    // (`tracing_set_clock()`, which resets the buffers even for the same clock).
                    let idx = clocks.iter().position(|x| *x == c).ok_or(Errno::EINVAL)?;
                    i.backend.set_param(Param::Clock(clocks[idx]))?;
                    i.clock = idx;
                }
                commit_events(i, &self.events, set)?;
                Ok(cnt)
            }
            File::KprobeEvents | File::DynamicEvents => {
                let kprobe_only = of.file == File::KprobeEvents;
                let syms = self.host.symbols();
                dynevent::write(data, kprobe_only, syms, &mut |loc, msg, cmd, pos| {
                    self.top.error_log.log(now, loc, msg, cmd, pos)
                })?;
                Ok(cnt)
            }
            _ => Err(Errno::EINVAL),
        }
    }

    // ---- conveniences: what a shell does ----

    /// `cat path`: open, read to the end (or until a consuming file is empty), close.
    pub fn read_to_end(&mut self, path: &str) -> Result<Vec<u8>, Errno> {
        let flags = OpenFlags {
            nonblock: true,
            ..OpenFlags::READ
        };
        let fh = self.open(path, flags)?;
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        let r = loop {
            match self.read(fh, out.len() as u64, &mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(Errno::EAGAIN) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let rel = self.release(fh);
        r.and(rel).map(|()| out)
    }

    /// `echo -n data > path` (or `>>`, as `mode` says): open, write until every byte is taken
    /// (as `full_write` does: a filter file takes one token per `write`), close; the first
    /// error wins.
    pub fn write_all(&mut self, path: &str, data: &[u8], mode: WriteMode) -> Result<(), Errno> {
        let fh = self.open(path, mode.open_flags())?;
        let mut done = 0;
        let r = loop {
            match self.write(fh, done as u64, &data[done..]) {
                Ok(n) if n > 0 && done + n < data.len() => done += n,
                Ok(_) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        let rel = self.release(fh);
        r?;
        rel
    }
}

fn write_usecs(w: &mut String, ns: u64) -> core::fmt::Result {
    if ns == u64::MAX {
        w.write_str("-1\n")
    } else {
        writeln!(w, "{}", ns / 1000)
    }
}

fn set_flag(i: &mut Instance, flag: TraceOptions, on: bool) -> Result<(), Errno> {
    if i.flags.contains(flag) == on {
        return Ok(());
    }
    let mut new = i.flags;
    new.set(flag, on);
    i.backend.set_param(Param::Flags(new))?;
    i.flags = new;
    Ok(())
}

/// Takes over the soft-disabled bits an `enable_event` / `disable_event` trigger or function
/// command flipped in the backend (only events in soft mode can be flipped).
fn sync_soft_disabled(i: &mut Instance, registry: &[TraceEventFormat]) {
    for e in registry {
        let Some(d) = i.backend.event_soft_disabled(e) else {
            continue;
        };
        if let Some(f) = i.events.files.get_mut(&e.id) {
            if f.flags.soft_mode {
                f.flags.soft_disabled = d;
            }
        }
    }
}

/// The event's file with its triggers' counts as the backend spent them, if it runs them
/// (`None`: the tree's counts hold).
fn live_triggers(i: &Instance, e: &TraceEventFormat, f: &EventFile) -> Option<EventFile> {
    let counts = i.backend.event_trigger_counts(e)?;
    if counts.len() != f.triggers.len() {
        return None;
    }
    let mut live = f.clone();
    for (t, c) in live.triggers.iter_mut().zip(counts) {
        t.count = c;
    }
    Some(live)
}

fn event_file(i: &Instance, id: u16) -> Result<&EventFile, Errno> {
    i.events.files.get(&id).ok_or(Errno::ENODEV)
}

/// Whether `backend` has a snapshot buffer, as the files that depend on it ask.
fn snapshot_files(backend: &dyn TraceBackend) -> SnapshotFiles {
    match backend.has_snapshot() {
        true => SnapshotFiles::Present,
        false => SnapshotFiles::Absent,
    }
}

/// `tracing_update_buffers()`: the first use of an event expands the boot-minimum buffers.
fn expand(i: &mut Instance, trace_buf_size: u64) -> Result<(), Errno> {
    if !i.expanded {
        i.expanded = true;
        i.backend.resize(None, trace_buf_size)?;
    }
    Ok(())
}

/// Makes `new` the instance's event state, telling the backend what changed; if the backend
/// refuses a change, the changes already told are undone and nothing changes.
fn commit_events(
    i: &mut Instance,
    registry: &[TraceEventFormat],
    new: EventSet,
) -> Result<(), Errno> {
    let mut told: Vec<&TraceEventFormat> = Vec::new();
    for e in registry {
        let (Some(old), Some(nf)) = (i.events.files.get(&e.id), new.files.get(&e.id)) else {
            continue;
        };
        if old.state() != nf.state() {
            if let Err(err) = i.backend.set_event_state(e, nf.state()) {
                for e in told.into_iter().rev() {
                    if let Some(of) = i.events.files.get(&e.id) {
                        let _ = i.backend.set_event_state(e, of.state());
                    }
                }
                return Err(err);
            }
            told.push(e);
        }
    }
    let mut triggers_told: Vec<&TraceEventFormat> = Vec::new();
    for e in registry {
        let (Some(old), Some(nf)) = (i.events.files.get(&e.id), new.files.get(&e.id)) else {
            continue;
        };
        if old.triggers != nf.triggers {
            if let Err(err) = i.backend.set_event_triggers(e, &nf.triggers) {
                for e in triggers_told.into_iter().rev() {
                    if let Some(of) = i.events.files.get(&e.id) {
                        let _ = i.backend.set_event_triggers(e, &of.triggers);
                    }
                }
                for e in told.into_iter().rev() {
                    if let Some(of) = i.events.files.get(&e.id) {
                        let _ = i.backend.set_event_state(e, of.state());
                    }
                }
                return Err(err);
            }
            triggers_told.push(e);
        }
    }
    for e in registry {
        let (Some(old), Some(nf)) = (i.events.files.get(&e.id), new.files.get(&e.id)) else {
            continue;
        };
        if old.active_filter() != nf.active_filter() {
            i.backend.set_event_filter(e, nf.active_filter());
        }
    }
    i.events = new;
    Ok(())
}

/// `__ftrace_set_clr_event()`: (un)sets every event `matches` selects; `EINVAL` if none.
fn set_clr_event(
    i: &mut Instance,
    registry: &[TraceEventFormat],
    matches: impl Fn(&TraceEventFormat) -> bool,
    on: bool,
) -> Result<(), Errno> {
    let mut set = i.events.clone();
    let mut any = false;
    for e in registry.iter().filter(|e| matches(e)) {
        if let Some(f) = set.files.get_mut(&e.id) {
            f.enable_disable(on, EnableMode::Hard);
            any = true;
        }
    }
    if !any {
        return Err(Errno::EINVAL);
    }
    commit_events(i, registry, set)
}

/// The text of a `filter` write: at most a page, up to a NUL, trailing blanks stripped (the
/// kernel's `strstrip` cuts the end in place and keeps the leading blanks).
fn filter_text(data: &[u8]) -> Result<String, Errno> {
    if data.len() >= 4096 {
        return Err(Errno::EINVAL);
    }
    let text = core::str::from_utf8(crate::parse::c_str(data)).map_err(|_| Errno::EINVAL)?;
    Ok(String::from(text.trim_end_matches(|c: char| {
        c.is_ascii() && is_space(c as u8)
    })))
}

/// `apply_event_filter()`: `0` clears; otherwise the new filter replaces the old one even
/// when it is rejected (the file then shows the error and filtering is off), as in Linux.
fn apply_filter(
    f: &mut EventFile,
    ev: &TraceEventFormat,
    text: &str,
    log: &mut dyn FnMut(&'static str, usize),
) -> Result<(), Errno> {
    if text.trim_start_matches(|c: char| c.is_ascii() && is_space(c as u8)) == "0" {
        f.filter = None;
        return Ok(());
    }
    match event_filter::parse(ev, text) {
        Ok(flt) => {
            f.filter = Some(FilterSlot::Active(flt));
            Ok(())
        }
        Err(e) => {
            let (m, pos) = e.log_entry();
            log(m, pos);
            f.filter = Some(FilterSlot::Failed(e.annotate(text)));
            Err(e.errno)
        }
    }
}

/// `enable_event` / `disable_event` function commands hold their target events in soft mode
/// (`event_enable_func`'s `__ftrace_event_enable_disable(file, 1, 1)`) while any of them
/// names the event, and let go when the last one is removed (`event_enable_free`): the
/// backend's function commands ([`TraceBackend::probe_event_targets`]) are compared with the
/// targets this instance holds.
fn hold_probe_targets(i: &mut Instance, registry: &[TraceEventFormat]) -> Result<(), Errno> {
    let mut want: Vec<u16> = i
        .backend
        .probe_event_targets()
        .iter()
        .filter_map(|(sys, name)| {
            registry
                .iter()
                .find(|e| e.system == sys && e.name == name)
                .map(|e| e.id)
        })
        .collect();
    want.sort_unstable();
    want.dedup();
    if want == i.probe_targets {
        return Ok(());
    }
    let mut set = i.events.clone();
    for id in want.iter().filter(|id| !i.probe_targets.contains(id)) {
        if let Some(f) = set.files.get_mut(id) {
            f.enable_disable(true, EnableMode::Soft);
        }
    }
    for id in i.probe_targets.iter().filter(|id| !want.contains(id)) {
        if let Some(f) = set.files.get_mut(id) {
            f.enable_disable(false, EnableMode::Soft);
        }
    }
    commit_events(i, registry, set)?;
    i.probe_targets = want;
    Ok(())
}

/// Registers a trigger on event `id`: an enable trigger puts its target in soft mode, the
/// event enters trigger mode; `hist` triggers go last, the others first (`list_add_tail_rcu`
/// vs `list_add_rcu`).
fn attach_trigger(set: &mut EventSet, id: u16, t: Trigger) {
    if let Some(target) = t.target() {
        if let Some(tf) = set.files.get_mut(&target) {
            tf.enable_disable(true, EnableMode::Soft);
        }
    }
    if let Some(f) = set.files.get_mut(&id) {
        if t.trigger_type() == TriggerType::Hist {
            f.triggers.push(t);
        } else {
            f.triggers.insert(0, t);
        }
        f.trigger_enable_disable(true);
    }
}

/// Undoes [`attach_trigger`] for a trigger already taken off the list.
fn detach_trigger(set: &mut EventSet, id: u16, t: &Trigger) {
    if let Some(f) = set.files.get_mut(&id) {
        f.trigger_enable_disable(false);
    }
    if let Some(target) = t.target() {
        if let Some(tf) = set.files.get_mut(&target) {
            tf.enable_disable(false, EnableMode::Soft);
        }
    }
}
