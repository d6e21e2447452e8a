//! Reading a recording directory: every traced process image, its symbols, and its threads'
//! events as the kernel's trace entries (`ftrace_core::entry` layouts), grouped per CPU and
//! sorted by time, ready for a `trace` formatter.
//!
//! Invariant: timestamps come out in the recording's trace-clock unit: nanoseconds for `local`
//! (TSC converted with a rate calibrated between the agent's start and its exit, the same at
//! every read; the reader's own clock only for a process that left no exit pair, or one less
//! than a millisecond after its start) and `mono`, raw counts for `x86-tsc`.
//! Events lost in a thread's buffer are reported on the first event that follows the hole.
//!
//! A program's trace events (`ftrace record -e`) are spans of slots (a head, then its data
//! slots: [`ftrace_agent::event`]) assembled into one record each; their formats come from
//! each image's listing ([`prog_event::LISTING`]), the same event of several images (a fork, an
//! exec of the same program) given one id ([`RecordingReader::events`]). A span cut short or
//! damaged is one lost event, counted on the event that follows it, never a wrong record.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use ftrace_agent::buffer::{self, KIND_FUNC, KIND_GRAPH_ENT, SlotEvent, depth};
use ftrace_agent::clock::{TscConversion, TscPair};
use ftrace_agent::config::ClockKind;
use ftrace_agent::event::{self as prog_event, EventInfo};
use ftrace_core::EventId;
use ftrace_core::entry::{
    FtraceEntry, FtraceGraphEntEntry, FtraceGraphRetEntry, FtraceGraphRetvalEntry, Pod, TraceEntry,
};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};

/// One recorded event, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// The CPU the thread ran on.
    pub cpu: u32,
    /// Timestamp in trace-clock units.
    pub ts: u64,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// The entry bytes: `struct trace_entry` followed by the event's fields.
    pub data: Vec<u8>,
    /// Events this thread lost just before this one.
    pub missed: u64,
    /// Position in the thread's buffer (recording order within the thread).
    pub seq: u64,
    /// Index of its process image in [`Recording::processes`] (an `exec` keeps the pid).
    pub process: usize,
}

impl Event {
    /// The event id (`common_type`).
    pub fn id(&self) -> Option<EventId> {
        TraceEntry::read_from(&self.data).and_then(|e| EventId::from_u16(e.type_))
    }

    /// The traced function's address (function, funcgraph_entry, funcgraph_exit); `None`
    /// for a record too short to hold one.
    pub fn func(&self) -> Option<u64> {
        let b = self.data.get(8..16)?;
        Some(u64::from_ne_bytes(b.try_into().ok()?))
    }
}

/// One thread's buffer, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thread {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub comm: String,
    /// Events lost to overwriting.
    pub overrun: u64,
    /// Events dropped (buffer full in no-overwrite mode, or unfinished).
    pub dropped: u64,
    /// Events recorded (with [`RecordingReader`]: once the thread's events are read).
    pub entries: u64,
}

fn read_ring(path: &Path) -> Result<buffer::Contents, ReadError> {
    let bytes = std::fs::read(path).map_err(|e| ReadError(format!("{}: {e}", path.display())))?;
    let c = buffer::read(&bytes).map_err(|e| ReadError(format!("{}: {e}", path.display())))?;
    match c
        .events
        .iter()
        .enumerate()
        .find_map(|(n, e)| Some((n, crate::stream::past_the_shadow_stack(e)?)))
    {
        Some((n, what)) => Err(ReadError(format!(
            "{}: event {n} of the ring: {what}",
            path.display()
        ))),
        None => Ok(c),
    }
}

/// One traced process image (`DIR/<pid>.<n>`).
#[derive(Debug)]
pub struct Process {
    /// Its directory.
    pub dir: PathBuf,
    /// Process id.
    pub pid: u32,
    /// The executable.
    pub exe: String,
    /// The tracer that recorded.
    pub tracer: String,
    /// Its function symbols (runtime addresses).
    pub symbols: SortedSymbols,
    /// Its threads.
    pub threads: Vec<Thread>,
    /// The trace events its image declares ([`prog_event::LISTING`]), with the image's ids.
    pub events: Vec<EventInfo>,
}

/// A whole recording.
#[derive(Debug)]
pub struct Recording {
    /// The trace clock.
    pub clock: ClockKind,
    /// The processes, in directory order.
    pub processes: Vec<Process>,
    /// All events, per CPU, each sorted by timestamp.
    pub per_cpu: BTreeMap<u32, Vec<Event>>,
    /// CPUs of the machine (the `#P:` of the header).
    pub nr_cpus: u32,
    /// The TSC rate used (kHz), for TSC clocks.
    pub tsc_khz: Option<u64>,
}

/// A recording that cannot be read (or a damaged part of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadError(pub String);

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ReadError {}

fn parse_meta(text: &str) -> BTreeMap<String, String> {
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn pair(m: &BTreeMap<String, String>) -> Option<TscPair> {
    Some(TscPair {
        tsc: m.get("tsc")?.parse().ok()?,
        mono_ns: m.get("mono_ns")?.parse().ok()?,
    })
}

/// The `symbols` text of the process image directory `dir`, with the names of the objects it
/// lists read from their files ([`ftrace_agent::symbol_files::image_symbols`]); an object
/// whose file is not the one the program loaded is said on stderr, once per file and
/// process (its functions print as addresses).
pub fn image_symbols(dir: &Path) -> String {
    use std::sync::Mutex;
    static TOLD: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());
    let (text, unnamed) = ftrace_agent::symbol_files::image_symbols(dir);
    let mut told = TOLD.lock().unwrap_or_else(|e| e.into_inner());
    for path in unnamed {
        if !told.contains(&path) {
            eprintln!(
                "ftrace: {}: not the file the program loaded (changed or gone since the \
                 recording, in {}): its functions are not named",
                path.display(),
                dir.display()
            );
            told.push(path);
        }
    }
    text
}

/// Parses a `symbols` file (`addr\tsize\tmodule\tname` lines; the names, as the objects spell
/// them, are demangled here).
pub fn parse_symbols(text: &str) -> SortedSymbols {
    let mut t = SortedSymbols::new();
    for line in text.lines() {
        let mut it = line.splitn(4, '\t');
        let (Some(a), Some(s), Some(m), Some(n)) = (it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let (Ok(a), Ok(s)) = (u64::from_str_radix(a, 16), u64::from_str_radix(s, 16)) else {
            continue;
        };
        // The agent writes names as the objects spell them ([`ftrace_agent::elf::SymbolName`]).
        t.push(
            &ftrace_agent::elf::demangle(n),
            a,
            s,
            (!m.is_empty()).then_some(m),
        );
    }
    t.finish();
    t
}

/// The kernel record of slot `s` (`before`: the slot written just before it, which holds a
/// function_graph exit's return value, [`buffer::retval_of`]); `None` for a slot that is no
/// event of its own ([`buffer::KIND_GRAPH_RETVAL`]).
pub(crate) fn entry_bytes(
    s: &SlotEvent,
    before: Option<&SlotEvent>,
    tid: u32,
    conv: &dyn Fn(u64) -> u64,
) -> Option<Vec<u8>> {
    let ent = |id: EventId| TraceEntry {
        type_: id.as_u16(),
        flags: 0,
        preempt_count: 0,
        pid: tid as i32,
    };
    Some(match s.kind() {
        // A stack record (the live mount's `stacktrace` command) is its frame slots and its
        // head, assembled by the reader ([`stack_entry_bytes`]).
        buffer::KIND_GRAPH_RETVAL | buffer::KIND_STACK_MORE | buffer::KIND_STACK => return None,
        KIND_FUNC => FtraceEntry {
            ent: ent(EventId::Function),
            ip: s.ip,
            parent_ip: s.arg,
        }
        .as_bytes()
        .to_vec(),
        KIND_GRAPH_ENT => FtraceGraphEntEntry {
            ent: ent(EventId::FuncgraphEntry),
            func: s.ip,
            depth: depth(s) as i32,
        }
        .as_bytes()
        .to_vec(),
        _ => match buffer::retval_of(s, before) {
            None => FtraceGraphRetEntry {
                ent: ent(EventId::FuncgraphExit),
                func: s.ip,
                depth: depth(s) as i32,
                overrun: 0,
                calltime: conv(s.arg),
                rettime: conv(s.ts),
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
            Some(retval) => FtraceGraphRetvalEntry {
                ent: ent(EventId::FuncgraphExit),
                func: s.ip,
                retval,
                depth: depth(s) as i32,
                overrun: 0,
                calltime: conv(s.arg),
                rettime: conv(s.ts),
                ..Default::default()
            }
            .as_bytes()
            .to_vec(),
        },
    })
}

/// The thread files of a process directory, in name order: every `events-*` file, and every
/// `buf-*` ring file that was not drained into one.
fn thread_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("buf-") || n.starts_with(crate::stream::FILE_PREFIX))
        .collect();
    names.sort();
    let drained: std::collections::HashSet<String> = names
        .iter()
        .filter_map(|n| n.strip_prefix(crate::stream::FILE_PREFIX))
        .map(|n| format!("buf-{}", n.split_once('-').map_or(n, |(a, _)| a)))
        .collect();
    Ok(names
        .into_iter()
        .filter(|n| !drained.contains(n))
        .map(|n| dir.join(n))
        .collect())
}

/// A process image's timestamps turned into trace-clock units.
#[derive(Clone, Copy, Debug)]
pub struct TimeConv {
    clock: ClockKind,
    tsc: Option<TscConversion>,
}

impl TimeConv {
    /// `t` (as the agent read its clock) in trace-clock units.
    pub fn to_trace(&self, t: u64) -> u64 {
        match (self.clock, self.tsc) {
            (ClockKind::Local, Some(c)) => c.to_ns(t),
            _ => t,
        }
    }
}

/// Where one thread's events come from.
enum Source {
    /// A drained events file, read through a buffer.
    Stream(crate::stream::StreamReader<std::io::BufReader<std::fs::File>>),
    /// A ring file (the flight recorder, or a ring nobody drained), decoded whole: its size
    /// is the ring's, fixed by `--buffer-size`.
    Ring(std::vec::IntoIter<SlotEvent>),
}

/// A reader's position in one thread's events.
struct ThreadCursor {
    path: PathBuf,
    conv: TimeConv,
    source: Source,
    process: usize,
    /// Index of the thread in its process's [`Process::threads`].
    thread: usize,
    pid: u32,
    tid: u32,
    seq: u64,
    /// Lost before the next event.
    missed: u64,
    /// The slot read before the current one (a function_graph exit's return value is the
    /// slot just before it, [`buffer::retval_of`]).
    before: Option<SlotEvent>,
    /// The stack record frame slots read since the last event ([`buffer::KIND_STACK_MORE`]:
    /// a stack record's head follows its frames), the last [`MAX_STACK_MORE`] at most.
    stack_more: Vec<SlotEvent>,
    /// Events read so far (return-value slots are none).
    entries: u64,
    /// Events the file says were lost, read so far.
    dropped: u64,
    on_damage: OnDamage,
    /// Where the file is damaged, once read there ([`OnDamage::Stop`]).
    damage: Option<ReadError>,
    /// Events (return values aside) read so far, on every CPU.
    read: u64,
    /// How many events to read at most (the file is damaged after them).
    limit: Option<u64>,
    /// A slot read past the end of a broken trace event record, to be read next.
    pending: Option<(SlotEvent, u64)>,
    /// The image's trace event ids and the recording's ([`RecordingReader::events`]).
    event_ids: std::sync::Arc<[(u16, u16)]>,
}

/// What a reader does where a thread file is damaged (cut inside a record, bytes that are no
/// record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OnDamage {
    /// Fail with the error.
    Fail,
    /// End the file's events there, keeping the error: the events before it are read.
    Stop,
}

/// A cursor's next event, ready to be turned into its kernel record.
#[derive(Clone, Debug)]
struct Head {
    slot: SlotEvent,
    /// The slot just before it in its thread (a return value's, for an exit).
    before: Option<SlotEvent>,
    /// Events lost just before it.
    missed: u64,
    /// A trace event's whole record (its head and data slots assembled, the recording's id).
    record: Option<Vec<u8>>,
}

/// Bytes of read buffer per thread file while streaming.
const STREAM_BUF: usize = 16 * 1024;

impl ThreadCursor {
    /// Where in its file the cursor is (for an events file).
    fn offset(&self) -> Option<u64> {
        match &self.source {
            Source::Stream(r) => Some(r.offset()),
            Source::Ring(_) => None,
        }
    }

    /// The next slot (with what was lost before it); `None` at the end, where the trailing
    /// losses are counted in [`ThreadCursor::dropped`].
    fn next_slot(&mut self) -> Result<Option<(SlotEvent, u64)>, ReadError> {
        if let Some(p) = self.pending.take() {
            return Ok(Some(p));
        }
        let ev = match &mut self.source {
            Source::Ring(it) => it.next().map(|e| (e, 0)),
            Source::Stream(r) => match r.next_record() {
                Ok(crate::stream::Record::Event(e, m)) => {
                    self.dropped = self.dropped.saturating_add(m);
                    Some((e, m))
                }
                Ok(crate::stream::Record::End { trailing_lost, .. }) => {
                    self.dropped = self.dropped.saturating_add(trailing_lost);
                    None
                }
                Err(e) => {
                    let e = ReadError(format!("{}: {e}", self.path.display()));
                    match self.on_damage {
                        OnDamage::Fail => return Err(e),
                        OnDamage::Stop => {
                            self.source = Source::Ring(Vec::new().into_iter());
                            self.damage = Some(e);
                            None
                        }
                    }
                }
            },
        };
        Ok(ev.map(|(e, m)| {
            let m = m.saturating_add(core::mem::take(&mut self.missed));
            if is_event_of_its_own(&e) {
                self.entries += 1;
            }
            (e, m)
        }))
    }

    /// The next event (on `cpu` only, if given): a return value's slot is no event of its
    /// own (its exit, next in this thread, carries it), so what was lost before it is lost
    /// before the exit; an event on another CPU is skipped with what was lost before it
    /// (that CPU's reader counts it).
    fn next_head(&mut self, cpu: Option<u32>) -> Result<Option<Head>, ReadError> {
        loop {
            let Some((slot, missed)) = self.next_slot()? else {
                return Ok(None);
            };
            let before = self.before.replace(slot);
            if slot.kind() == buffer::KIND_STACK_MORE {
                if self.stack_more.len() == MAX_STACK_MORE {
                    self.stack_more.remove(0);
                }
                self.stack_more.push(slot);
            }
            if !is_event_of_its_own(&slot) {
                // A return value, or a trace event's data slot whose head was lost (counted
                // where it was).
                self.missed = self.missed.saturating_add(missed);
                continue;
            }
            let mut missed = missed;
            let record = match slot.kind() {
                buffer::KIND_STACK => {
                    let more = &self.stack_more;
                    let frames = ftrace_agent::stack::frames_of(&slot, &|k| {
                        more.len().checked_sub(k).map(|i| more[i])
                    });
                    Some(stack_entry_bytes(&frames, self.tid))
                }
                prog_event::KIND_EVENT => match self.event_record(&slot)? {
                    Some(r) => Some(r),
                    None => {
                        // Cut or damaged: lost, and what follows is read on its own.
                        self.missed = self.missed.saturating_add(missed).saturating_add(1);
                        self.stack_more.clear();
                        continue;
                    }
                },
                _ => None,
            };
            // The frame slots belong to the record just read, if any (kept, not freed: the
            // next stack record reuses them).
            self.stack_more.clear();
            missed = missed.saturating_add(core::mem::take(&mut self.missed));
            if self.limit.is_some_and(|l| self.read >= l) {
                return Ok(None);
            }
            self.read += 1;
            if cpu.is_some_and(|c| c != slot.cpu) {
                continue;
            }
            return Ok(Some(Head {
                slot,
                before,
                missed,
                record,
            }));
        }
    }

    /// The record of the trace event whose head is `head`: its data slots read after it and
    /// assembled, the id made the recording's. `None` when they are not all there (a slot
    /// that is not the next data slot is kept for the next read).
    fn event_record(&mut self, head: &SlotEvent) -> Result<Option<Vec<u8>>, ReadError> {
        let n = prog_event::data_slots(head);
        let mut tail = Vec::with_capacity(n);
        while tail.len() < n {
            let Some((s, m)) = self.next_slot()? else {
                return Ok(None);
            };
            if m > 0
                || s.kind() != prog_event::KIND_EVENT_DATA
                || (s.kind >> 8) as usize != tail.len() + 1
            {
                self.pending = Some((s, m));
                return Ok(None);
            }
            tail.push(s);
        }
        let Some(mut rec) = prog_event::assemble(head, &tail, self.tid) else {
            return Ok(None);
        };
        let local = u16::from_ne_bytes([rec[0], rec[1]]);
        let Some(&(_, id)) = self.event_ids.iter().find(|(l, _)| *l == local) else {
            return Ok(None);
        };
        rec[..2].copy_from_slice(&id.to_ne_bytes());
        Ok(Some(rec))
    }
}

/// Whether slot `s` is an event of its own: not a return value (its exit's), a trace event's
/// data slot (its head's), nor a stack record's frame slot (its head's).
pub(crate) fn is_event_of_its_own(s: &SlotEvent) -> bool {
    !buffer::continues_a_record(s.kind())
}

/// The `kernel_stack` record (`struct stack_entry`: the common header, `size`, then the
/// return addresses, innermost first) of thread `tid` for `frames`.
pub(crate) fn stack_entry_bytes(frames: &[u64], tid: u32) -> Vec<u8> {
    use ftrace_core::entry::Pod as _;
    let ent = TraceEntry {
        type_: EventId::KernelStack.as_u16(),
        flags: 0,
        preempt_count: 0,
        pid: tid as i32,
    };
    let mut v = ent.as_bytes().to_vec();
    v.extend_from_slice(&(frames.len() as i32).to_le_bytes());
    v.extend_from_slice(&[0; 4]);
    for f in frames {
        v.extend_from_slice(&f.to_le_bytes());
    }
    v
}

/// The most frame slots a stack record has before its head (its head holds two frames, each
/// frame slot two more).
const MAX_STACK_MORE: usize = ftrace_agent::stack::MAX_FRAMES / 2;

/// A recording's events in timestamp order, read thread file by thread file as they are
/// needed (a k-way merge): memory holds one buffered cursor per thread, not the recording.
/// [`RecordingReader::stream`] gives all CPUs' events; [`RecordingReader::stream_cpu`] one
/// CPU's.
pub struct EventStream<'r> {
    /// Where the threads' counts go when a cursor ends (`None` for one CPU's stream: its
    /// counts are not the threads').
    rec: Option<&'r mut Recording>,
    cpu: Option<u32>,
    cursors: Vec<ThreadCursor>,
    /// (timestamp, cpu, cursor) of each cursor's next event, smallest first.
    heap: std::collections::BinaryHeap<core::cmp::Reverse<(u64, u32, usize)>>,
    heads: Vec<Option<Head>>,
}

impl EventStream<'_> {
    fn refill(&mut self, i: usize) -> Result<(), ReadError> {
        let c = &mut self.cursors[i];
        let next = c.next_head(self.cpu)?;
        match &next {
            Some(h) => {
                let ts = c.conv.to_trace(h.slot.ts);
                self.heap.push(core::cmp::Reverse((ts, h.slot.cpu, i)));
            }
            None => {
                if let Some(rec) = self.rec.as_deref_mut() {
                    let t = &mut rec.processes[c.process].threads[c.thread];
                    t.entries = t.entries.saturating_add(core::mem::take(&mut c.entries));
                    t.dropped = t.dropped.saturating_add(core::mem::take(&mut c.dropped));
                }
            }
        }
        self.heads[i] = next;
        Ok(())
    }

    /// The next event (smallest timestamp; lowest CPU on ties, then thread file order).
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Event>, ReadError> {
        let Some(core::cmp::Reverse((ts, _, i))) = self.heap.pop() else {
            return Ok(None);
        };
        let h = self.heads[i]
            .take()
            .expect("a cursor in the heap has an event");
        let c = &mut self.cursors[i];
        let conv = c.conv;
        let data = match h.record {
            Some(r) => r,
            None => entry_bytes(&h.slot, h.before.as_ref(), c.tid, &|t| conv.to_trace(t))
                .expect("a head is an event of its own"),
        };
        let ev = Event {
            cpu: h.slot.cpu,
            ts,
            pid: c.pid,
            tid: c.tid,
            data,
            missed: h.missed,
            seq: c.seq,
            process: c.process,
        };
        c.seq += 1;
        self.refill(i)?;
        Ok(Some(ev))
    }
}

/// The largest CPU number a recording may name (the kernel's `CONFIG_NR_CPUS` maximum): the
/// per-CPU tables of a reader are sized from it.
pub const MAX_CPUS: u32 = 8192;

/// What one CPU of a recording holds ([`RecordingReader::census`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuCensus {
    /// Events.
    pub events: u64,
    /// Events lost just before some of them (the counts a kernel page would store).
    pub lost: u64,
    /// The earliest timestamp, in trace-clock units.
    pub first_ts: Option<u64>,
}

/// What each CPU of a recording holds, and which CPUs each thread file has events on: read
/// in one pass over the thread files, so that one CPU's events can be streamed from only the
/// files that hold some ([`RecordingReader::stream_cpu`]).
#[derive(Clone, Debug, Default)]
pub struct Census {
    /// Per CPU number (up to the highest with an event).
    pub cpus: Vec<CpuCensus>,
    /// Per thread file, the CPUs it has events on.
    file_cpus: Vec<std::collections::BTreeSet<u32>>,
    /// Per thread file, how many of its events are read when it is damaged after them.
    limits: Vec<Option<u64>>,
    /// Where the recording is damaged: each thread file is read up to there.
    pub damaged: Vec<ReadError>,
}

/// One thread file of a recording.
#[derive(Clone, Debug)]
struct ThreadFile {
    path: PathBuf,
    process: usize,
    thread: usize,
    conv: TimeConv,
    /// Drops a ring file counts itself (the rest is counted as the events are read).
    ring_dropped: u64,
    /// Its image's trace event ids and the recording's.
    event_ids: std::sync::Arc<[(u16, u16)]>,
}

/// A recording opened for streaming: what it says about its processes and threads, and where
/// their events are ([`RecordingReader::stream`]).
#[derive(Debug)]
pub struct RecordingReader {
    /// The processes and threads ([`Recording::per_cpu`] is empty: the events are streamed).
    pub rec: Recording,
    files: Vec<ThreadFile>,
    /// Thread files that could not be opened (no valid header): left out of the recording.
    pub damaged: Vec<ReadError>,
    /// The trace events the recorded images declare, each (system, name and layout) once,
    /// with the ids the records read carry: [`prog_event::FIRST_ID`] on.
    pub events: Vec<EventInfo>,
}

impl Recording {
    /// Reads `dir` whole: every event in [`Recording::per_cpu`] ([`RecordingReader`] reads a
    /// recording of any size).
    pub fn read(dir: &Path) -> Result<Self, ReadError> {
        let mut r = RecordingReader::open(dir)?;
        let mut per_cpu: BTreeMap<u32, Vec<Event>> = BTreeMap::new();
        let mut s = r.stream()?;
        while let Some(e) = s.next()? {
            per_cpu.entry(e.cpu).or_default().push(e);
        }
        r.rec.per_cpu = per_cpu;
        Ok(r.rec)
    }
}

impl RecordingReader {
    /// Opens the cursor of thread file `f`.
    fn cursor(&self, f: &ThreadFile, on_damage: OnDamage) -> Result<ThreadCursor, ReadError> {
        let t = &self.rec.processes[f.process].threads[f.thread];
        let name = f.path.file_name().unwrap_or_default().to_string_lossy();
        let (source, missed) = if name.starts_with(crate::stream::FILE_PREFIX) {
            let r = crate::stream::open(&f.path, STREAM_BUF).map_err(ReadError)?;
            (Source::Stream(r), 0)
        } else {
            let c = read_ring(&f.path)?;
            (Source::Ring(c.events.into_iter()), c.overrun + c.dropped)
        };
        Ok(ThreadCursor {
            path: f.path.clone(),
            conv: f.conv,
            source,
            process: f.process,
            thread: f.thread,
            pid: t.pid,
            tid: t.tid,
            seq: 0,
            missed,
            before: None,
            stack_more: Vec::new(),
            entries: 0,
            dropped: 0,
            on_damage,
            damage: None,
            read: 0,
            limit: None,
            pending: None,
            event_ids: f.event_ids.clone(),
        })
    }

    fn merge(
        cursors: Vec<ThreadCursor>,
        rec: Option<&mut Recording>,
        cpu: Option<u32>,
    ) -> Result<EventStream<'_>, ReadError> {
        let n = cursors.len();
        let mut s = EventStream {
            rec,
            cpu,
            cursors,
            heap: std::collections::BinaryHeap::with_capacity(n),
            heads: vec![None; n],
        };
        for i in 0..n {
            s.refill(i)?;
        }
        Ok(s)
    }

    /// Streams the events: the threads' counts ([`Thread::entries`], [`Thread::dropped`])
    /// are complete once the stream has ended.
    pub fn stream(&mut self) -> Result<EventStream<'_>, ReadError> {
        for f in &self.files {
            let t = &mut self.rec.processes[f.process].threads[f.thread];
            t.entries = 0;
            t.dropped = f.ring_dropped;
        }
        if let Some(e) = self.damaged.first() {
            return Err(e.clone());
        }
        let cursors = self
            .files
            .iter()
            .map(|f| self.cursor(f, OnDamage::Fail))
            .collect::<Result<Vec<_>, _>>()?;
        Self::merge(cursors, Some(&mut self.rec), None)
    }

    /// Streams the events of one CPU, in the order [`RecordingReader::stream`] gives them
    /// (the recording's `per_cpu/cpuN` as a kernel reader sees it), reading only the thread
    /// files `census` says have events on `cpu`, each up to where it is damaged
    /// ([`Census::damaged`]). The threads' counts are left as they are.
    pub fn stream_cpu(&self, cpu: u32, census: &Census) -> Result<EventStream<'static>, ReadError> {
        let cursors = self
            .files
            .iter()
            .zip(census.file_cpus.iter().zip(&census.limits))
            .filter(|(_, (cpus, _))| cpus.contains(&cpu))
            .map(|(f, (_, limit))| {
                let mut c = self.cursor(f, OnDamage::Stop)?;
                c.limit = *limit;
                Ok(c)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Self::merge(cursors, None, Some(cpu))
    }

    /// Reads every thread file once, in turn (no merge): what each CPU holds
    /// ([`Census`]). A thread file is read up to where it is damaged (a record that does not
    /// decode, or an event on a CPU numbered [`MAX_CPUS`] or more), and the damage kept in
    /// [`Census::damaged`] with the files [`RecordingReader::open`] could not read at all.
    pub fn census(&self) -> Result<Census, ReadError> {
        let mut census = Census {
            cpus: Vec::new(),
            file_cpus: Vec::with_capacity(self.files.len()),
            limits: Vec::with_capacity(self.files.len()),
            damaged: self.damaged.clone(),
        };
        for f in &self.files {
            let mut c = self.cursor(f, OnDamage::Stop)?;
            let mut cpus = std::collections::BTreeSet::new();
            let mut read = 0u64;
            let mut limit = None;
            loop {
                let at = c.offset();
                let Some(h) = c.next_head(None)? else { break };
                let cpu = h.slot.cpu;
                if cpu >= MAX_CPUS {
                    census.damaged.push(ReadError(format!(
                        "{}{}: CPU {cpu} out of range (the kernel's NR_CPUS is at most {MAX_CPUS})",
                        f.path.display(),
                        at.map_or(String::new(), |o| format!(": offset {o} ({o:#x})")),
                    )));
                    limit = Some(read);
                    break;
                }
                read += 1;
                if census.cpus.len() <= cpu as usize {
                    census.cpus.resize(cpu as usize + 1, CpuCensus::default());
                }
                let ts = c.conv.to_trace(h.slot.ts);
                let e = &mut census.cpus[cpu as usize];
                e.events += 1;
                e.lost = e.lost.saturating_add(h.missed);
                e.first_ts = Some(e.first_ts.map_or(ts, |t| t.min(ts)));
                cpus.insert(cpu);
            }
            census.damaged.extend(c.damage.take());
            census.file_cpus.push(cpus);
            census.limits.push(limit);
        }
        Ok(census)
    }

    /// Reads what `dir` says about its processes and threads (names, clocks, symbols, the
    /// thread files), not the events: [`RecordingReader::stream`] reads those.
    pub fn open(dir: &Path) -> Result<Self, ReadError> {
        let err = |what: &str, e: &dyn std::fmt::Display| ReadError(format!("{what}: {e}"));
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|e| err(&dir.display().to_string(), &e))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.join("meta").is_file())
            .collect();
        subdirs.sort_by_key(|p| {
            let name = p
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            let (a, b) = name.split_once('.').unwrap_or((&name, "0"));
            (a.parse::<u64>().unwrap_or(0), b.parse::<u64>().unwrap_or(0))
        });
        if subdirs.is_empty() {
            return Err(ReadError(format!("{}: no recorded process", dir.display())));
        }
        let now = TscPair::now();
        let mut rec = Recording {
            clock: ClockKind::Local,
            processes: Vec::new(),
            per_cpu: BTreeMap::new(),
            nr_cpus: 1,
            tsc_khz: None,
        };
        let mut files = Vec::new();
        let mut damaged = Vec::new();
        let mut events: Vec<EventInfo> = Vec::new();
        for sub in subdirs {
            let meta_text = std::fs::read_to_string(sub.join("meta"))
                .map_err(|e| err(&sub.display().to_string(), &e))?;
            let meta = parse_meta(&meta_text);
            let exit = std::fs::read_to_string(sub.join("meta.exit"))
                .map(|t| parse_meta(&t))
                .unwrap_or_default();
            let clock = meta
                .get("clock")
                .and_then(|c| ClockKind::parse(c))
                .unwrap_or_default();
            rec.clock = clock;
            if let Some(n) = meta.get("nr_cpus") {
                match n.parse::<u32>() {
                    Ok(n) if (1..=MAX_CPUS).contains(&n) => rec.nr_cpus = rec.nr_cpus.max(n),
                    _ => {
                        return Err(ReadError(format!(
                            "{}: nr_cpus={n}: not a CPU count (1 to {MAX_CPUS})",
                            sub.join("meta").display()
                        )));
                    }
                }
            }
            // The agent's exit pair when it has one (so that every read of the recording
            // gives the same times, however short the run), else the reader's clock.
            let start = pair(&meta);
            let end = pair(&exit);
            let mut tsc = start.and_then(|s| {
                end.and_then(|e| TscConversion::over_run(s, e))
                    .or_else(|| TscConversion::calibrate(s, now))
            });
            if tsc.is_none() {
                // A process that started within the last millisecond (a short-lived fork
                // child read right after it exited): widen the span to calibrate over.
                if let Some(s) = start {
                    std::thread::sleep(std::time::Duration::from_millis(2));
                    tsc = TscConversion::calibrate(s, TscPair::now());
                }
            }
            if clock == ClockKind::Local && tsc.is_none() {
                return Err(ReadError(format!(
                    "{}: cannot calibrate the TSC",
                    sub.display()
                )));
            }
            rec.tsc_khz = tsc.map(|t| t.khz());
            let symbols = parse_symbols(&image_symbols(&sub));
            let listing =
                std::fs::read_to_string(sub.join(prog_event::LISTING)).unwrap_or_default();
            let mut declared = Vec::new();
            for (n, line) in listing.lines().enumerate() {
                match EventInfo::parse_line(line) {
                    Some(e) => declared.push(e),
                    None => damaged.push(ReadError(format!(
                        "{}: line {}: not an event listing",
                        sub.join(prog_event::LISTING).display(),
                        n + 1
                    ))),
                }
            }
            let event_ids: std::sync::Arc<[(u16, u16)]> = declared
                .iter()
                .map(|e| (e.id, global_event_id(&mut events, e)))
                .collect();
            let mut proc_ = Process {
                events: declared,
                pid: meta.get("pid").and_then(|p| p.parse().ok()).unwrap_or(0),
                exe: meta.get("exe").cloned().unwrap_or_default(),
                tracer: meta.get("tracer").cloned().unwrap_or_default(),
                dir: sub.clone(),
                symbols,
                threads: Vec::new(),
            };
            let conv = TimeConv { clock, tsc };
            for path in thread_files(&sub).map_err(|e| err(&sub.display().to_string(), &e))? {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                let t = if name.starts_with(crate::stream::FILE_PREFIX) {
                    let r = match crate::stream::open(&path, crate::stream::HEADER_SIZE) {
                        Ok(r) => r,
                        Err(e) => {
                            damaged.push(ReadError(e));
                            continue;
                        }
                    };
                    let h = r.header();
                    Thread {
                        pid: h.pid,
                        tid: h.tid,
                        comm: h.comm.clone(),
                        overrun: 0,
                        dropped: 0,
                        entries: 0,
                    }
                } else {
                    let c = match read_ring(&path) {
                        Ok(c) => c,
                        Err(e) => {
                            damaged.push(e);
                            continue;
                        }
                    };
                    Thread {
                        pid: c.pid,
                        tid: c.tid,
                        comm: c.comm,
                        overrun: c.overrun,
                        dropped: c.dropped,
                        entries: c.events.iter().filter(|e| is_event_of_its_own(e)).count() as u64,
                    }
                };
                files.push(ThreadFile {
                    process: rec.processes.len(),
                    thread: proc_.threads.len(),
                    ring_dropped: t.dropped,
                    path: path.clone(),
                    conv,
                    event_ids: event_ids.clone(),
                });
                proc_.threads.push(t);
            }
            rec.processes.push(proc_);
        }
        Ok(RecordingReader {
            rec,
            files,
            damaged,
            events,
        })
    }

    /// The formats of [`RecordingReader::events`], for a formatter.
    pub fn event_formats(&self) -> Vec<ftrace_core::format::TraceEventFormat> {
        self.events.iter().map(EventInfo::format).collect()
    }
}

/// The recording's id of image event `e`: the id of the same event (system, name, layout)
/// already in `all`, or the next one, `e` added with it.
fn global_event_id(all: &mut Vec<EventInfo>, e: &EventInfo) -> u16 {
    let same = |g: &EventInfo| {
        g.system == e.system
            && g.name == e.name
            && g.fields == e.fields
            && g.print_fmt == e.print_fmt
            && g.rec_size == e.rec_size
    };
    if let Some(g) = all.iter().find(|g| same(g)) {
        return g.id;
    }
    let id = prog_event::FIRST_ID.saturating_add(all.len() as u16);
    all.push(EventInfo { id, ..e.clone() });
    id
}

impl Recording {
    /// All events of all CPUs, merged by timestamp (lowest CPU first on ties).
    pub fn merged(&self) -> Vec<&Event> {
        let mut all: Vec<&Event> = self.per_cpu.values().flatten().collect();
        all.sort_by_key(|e| (e.ts, e.cpu));
        all
    }

    /// The name of the function `e` is about (in its own process image's address space).
    pub fn event_symbol(&self, e: &Event) -> Option<&str> {
        let p = self.processes.get(e.process)?;
        p.symbols.lookup(e.func()?).map(|s| s.name)
    }

    /// The name of the function at `addr` in process `pid`'s address space.
    pub fn symbol(&self, pid: u32, addr: u64) -> Option<&str> {
        let p = self
            .processes
            .iter()
            .rev()
            .find(|p| p.pid == pid && p.symbols.lookup(addr).is_some())
            .or_else(|| {
                self.processes
                    .iter()
                    .find(|p| p.symbols.lookup(addr).is_some())
            })?;
        p.symbols.lookup(addr).map(|s| s.name)
    }

    /// The name of thread `tid` (`<...>` if unknown, as the kernel prints it).
    pub fn comm(&self, tid: u32) -> &str {
        self.processes
            .iter()
            .flat_map(|p| &p.threads)
            .rev()
            .find(|t| t.tid == tid)
            .map_or("<...>", |t| t.comm.as_str())
    }

    /// Events lost in total (overwritten, dropped, unfinished).
    pub fn lost(&self) -> u64 {
        self.processes
            .iter()
            .flat_map(|p| &p.threads)
            .map(|t| t.overrun + t.dropped)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_agent::buffer::KIND_GRAPH_RET;
    use ftrace_agent::handler::SHADOW_FRAMES;

    #[test]
    fn symbols_file_round_trip() {
        let t = parse_symbols(
            "1000\t20\tprog\tmain\n1020\t0\tprog\tns::f(int, char)\n2000\t10\tlibc.so.6\tgetpid\n",
        );
        assert_eq!(t.lookup(0x1004).unwrap().name, "main");
        assert_eq!(t.lookup(0x1030).unwrap().name, "ns::f(int, char)");
        assert_eq!(t.lookup(0x2000).unwrap().module, Some("libc.so.6"));
        assert!(t.lookup(0x3000).is_none());
    }

    #[test]
    fn symbols_file_names_are_demangled_when_read() {
        let t = parse_symbols(
            "1000\t20\trg\t_ZN13grep_searcher8searcher8Searcher11search_path17h0123456789abcdefE\n\
             2000\t10\tlibfoo.so\t_ZN3foo3barEv\n",
        );
        assert_eq!(
            t.lookup(0x1004).unwrap().name,
            "grep_searcher::searcher::Searcher::search_path"
        );
        assert_eq!(t.lookup(0x2000).unwrap().name, "foo::bar()");
    }

    /// The bytes of a ring file (pid 42, tid 43, flight recorder, 16 slots) holding what
    /// `fill` writes through the ring's writer (which describes the ring's memory).
    fn ring_bytes(fill: impl FnOnce(&buffer::Writer)) -> Vec<u8> {
        let len = buffer::HEADER_SIZE + 16 * buffer::SLOT_SIZE;
        let mut mem = vec![0u64; len / 8];
        // SAFETY: zeroed, aligned, `len` bytes.
        let w = unsafe {
            buffer::init(
                mem.as_mut_ptr().cast(),
                len,
                buffer::SlotMode::Overwrite,
                42,
                43,
                b"x",
            )
        };
        fill(&w);
        mem.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }

    /// A recording directory of one process (pid 42, `/bin/x`, `tracer`, the mono clock,
    /// `nr_cpus`) under the temporary directory (`tag` its name): the directory and the
    /// process's.
    fn recording_dir(tag: &str, tracer: &str, nr_cpus: u32) -> (PathBuf, PathBuf) {
        let dir = std::env::temp_dir().join(format!("ftrace-rec-{tag}-{}", std::process::id()));
        let sub = dir.join("42.0");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(
            sub.join("meta"),
            format!("pid=42\nexe=/bin/x\ntracer={tracer}\nclock=mono\nnr_cpus={nr_cpus}\n"),
        )
        .unwrap();
        (dir, sub)
    }

    /// A ring file holding one call's entry at depth 0 and an exit at `exit_depth`, on CPU 3:
    /// f at 0x1000, called at 100 from 0x5, back at 250.
    fn call_ring(exit_depth: u32) -> Vec<u8> {
        ring_bytes(|w| {
            // SAFETY: `w` describes the ring's memory.
            unsafe {
                w.write(100, 0x1000, 0x5, KIND_GRAPH_ENT, 0, 3);
                w.write(250, 0x1000, 100, KIND_GRAPH_RET, exit_depth, 3);
            }
        })
    }

    #[test]
    fn reads_a_hand_made_recording() {
        let (dir, sub) = recording_dir("test", "function_graph", 4);
        std::fs::write(sub.join("symbols"), "1000\t10\tx\tf\n").unwrap();
        std::fs::write(sub.join("buf-43"), call_ring(0)).unwrap();
        let rec = Recording::read(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(rec.clock, ClockKind::Mono);
        assert_eq!(rec.nr_cpus, 4);
        let evs = rec.merged();
        assert_eq!(evs.len(), 2);
        assert_eq!(evs[0].id(), Some(EventId::FuncgraphEntry));
        assert_eq!(evs[1].id(), Some(EventId::FuncgraphExit));
        let ret = FtraceGraphRetEntry::read_from(&evs[1].data).unwrap();
        assert_eq!((ret.calltime, ret.rettime), (100, 250));
        assert_eq!(evs[1].cpu, 3);
        assert_eq!(rec.symbol(42, evs[0].func().unwrap()), Some("f"));
        let short = Event {
            data: vec![0; 12],
            ..evs[0].clone()
        };
        assert_eq!(
            short.func(),
            None,
            "a short record has no function, and no panic"
        );
        assert_eq!(rec.comm(43), "x");
    }

    /// A run shorter than a millisecond (its `meta` and `meta.exit` pairs 0.6 ms apart) is
    /// converted from its own pairs: two reads a few milliseconds apart give the same
    /// times (they fell back to the reader's clock, a nanosecond or so apart: trace-cmd's
    /// report of a trace.dat then differed from `ftrace report` of the same recording).
    #[test]
    fn a_short_runs_times_are_the_same_at_every_read() {
        let dir = std::env::temp_dir().join(format!("ftrace-rec-short-{}", std::process::id()));
        let sub = dir.join("42.0");
        std::fs::create_dir_all(&sub).unwrap();
        // 2.5 GHz: 600 us is 1.5 M ticks; the events lie between.
        std::fs::write(
            sub.join("meta"),
            "pid=42\nexe=/bin/x\ntracer=function_graph\nclock=local\n\
             tsc=1000000000 mono_ns=5000000000\nnr_cpus=4\n",
        )
        .unwrap();
        std::fs::write(sub.join("meta.exit"), "tsc=1001500000 mono_ns=5000600000\n").unwrap();
        let ring = ring_bytes(|w| {
            // SAFETY: `w` describes the ring's memory.
            unsafe {
                w.write(1_000_250_001, 0x1000, 0x5, KIND_GRAPH_ENT, 0, 3);
                w.write(1_000_750_003, 0x1000, 1_000_250_001, KIND_GRAPH_RET, 0, 3);
            }
        });
        std::fs::write(sub.join("buf-43"), ring).unwrap();
        let times = || -> Vec<u64> {
            let rec = Recording::read(&dir).unwrap();
            rec.merged().iter().map(|e| e.ts).collect()
        };
        let first = times();
        std::thread::sleep(std::time::Duration::from_millis(3));
        let second = times();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(first, second);
        // 250 001 and 750 003 ticks after the start: 100 000 and 300 001 ns.
        assert_eq!(first, [5_000_100_000, 5_000_300_001]);
    }

    /// A ring file whose function_graph event is deeper than the agent's shadow stack is
    /// damaged, as the same event in an events file is: an error naming the file and the
    /// event, never a report line indented by megabytes.
    #[test]
    fn a_ring_with_a_depth_past_the_shadow_stack_is_damaged() {
        let dir = std::env::temp_dir().join(format!("ftrace-rec-deep-{}", std::process::id()));
        for (depth, damaged) in [
            (SHADOW_FRAMES as u32 - 1, false),
            (SHADOW_FRAMES as u32, true),
        ] {
            let bytes = call_ring(depth);
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("buf-43");
            std::fs::write(&path, bytes).unwrap();
            let r = read_ring(&path);
            std::fs::remove_dir_all(&dir).unwrap();
            match (r, damaged) {
                (Ok(c), false) => assert_eq!(c.events.len(), 2),
                (Err(ReadError(e)), true) => assert!(
                    e.contains("buf-43: event 1 of the ring: function_graph depth 4096 past"),
                    "{e}"
                ),
                (r, _) => panic!("depth {depth}: {r:?}"),
            }
        }
    }

    /// A stack record (the live mount's `stacktrace` command: frame slots, then its head) is
    /// carried into the recording as the kernel's `kernel_stack` record, counted as one
    /// event; one whose frame slots were lost keeps the frames its head holds.
    #[test]
    fn stack_records_are_carried_as_kernel_stack_records() {
        use ftrace_agent::buffer::{KIND_STACK, KIND_STACK_MORE};
        let (dir, sub) = recording_dir("stack", "function", 1);
        let bytes = ring_bytes(|w| {
            // SAFETY: `w` describes the ring's memory.
            unsafe {
                w.write(100, 0x1000, 0x2000, KIND_FUNC, 0, 0);
                // Five frames: two frame slots (the last one's second word past the end),
                // then the head with the first two.
                w.write(100, 0x13, 0x14, KIND_STACK_MORE, 1, 0);
                w.write(100, 0x15, 0, KIND_STACK_MORE, 2, 0);
                w.write(100, 0x11, 0x12, KIND_STACK, 5, 0);
                // Another of four frames whose frame slot is from another record (lost): its
                // head's two frames only.
                w.write(150, 0x23, 0x24, KIND_STACK_MORE, 1, 0);
                w.write(200, 0x21, 0x22, KIND_STACK, 4, 0);
            }
        });
        std::fs::write(sub.join("buf-43"), bytes).unwrap();
        let rec = Recording::read(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let evs = rec.merged();
        let ids: Vec<_> = evs.iter().map(|e| e.id()).collect();
        assert_eq!(
            ids,
            [
                Some(EventId::Function),
                Some(EventId::KernelStack),
                Some(EventId::KernelStack)
            ]
        );
        let frames = |e: &&Event| -> Vec<u64> {
            let n = i32::from_le_bytes(e.data[8..12].try_into().unwrap()) as usize;
            assert_eq!(e.data.len(), 16 + 8 * n);
            e.data[16..]
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .collect()
        };
        assert_eq!(frames(&evs[1]), [0x11, 0x12, 0x13, 0x14, 0x15]);
        assert_eq!(evs[1].tid, 43);
        assert_eq!(frames(&evs[2]), [0x21, 0x22]);
        assert_eq!(rec.processes[0].threads[0].entries, 3);
    }

    #[test]
    fn trace_event_spans_are_assembled_and_a_cut_one_is_counted_lost() {
        use ftrace_agent::event::{EventInfo, FieldInfo, encode};
        let (dir, sub) = recording_dir("ev", "function", 1);
        let info = EventInfo {
            id: 1030,
            system: "demo".into(),
            name: "demo_value".into(),
            print_fmt: "\"value=%lu\", REC->value".into(),
            fields: vec![FieldInfo {
                c_type: "unsigned long".into(),
                name: "value".into(),
                offset: 8,
                size: 8,
                signed: false,
                array_len: 0,
            }],
            rec_size: 40,
        };
        std::fs::write(sub.join(prog_event::LISTING), info.to_line() + "\n").unwrap();
        let payload: Vec<u8> = (0u8..32).collect();
        let mut tail = [SlotEvent::default(); 2];
        let (head, n) = encode(200, 0, 1030, &payload, &mut tail).unwrap();
        assert_eq!(n, 1);
        let bytes = ring_bytes(|w| {
            let put = |s: &SlotEvent| {
                // SAFETY: `w` describes the ring's memory.
                unsafe { w.write(s.ts, s.ip, s.arg, s.kind & 0xff, s.kind >> 8, s.cpu) }
            };
            // SAFETY: as above.
            unsafe { w.write(100, 0x1000, 0x2000, KIND_FUNC, 0, 0) };
            put(&head);
            put(&tail[0]);
            // A head whose data slot never came: lost, and the function event after it is
            // kept.
            put(&head);
            // SAFETY: as above.
            unsafe { w.write(300, 0x1000, 0x2000, KIND_FUNC, 0, 0) };
        });
        std::fs::write(sub.join("buf-43"), bytes).unwrap();
        let r = RecordingReader::open(&dir).unwrap();
        assert_eq!(r.events.len(), 1);
        assert_eq!(r.events[0].id, prog_event::FIRST_ID, "the recording's id");
        let rec = Recording::read(&dir).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        let evs = rec.merged();
        assert_eq!(evs.len(), 3, "{evs:?}");
        assert_eq!(evs[1].ts, 200);
        let mut want = prog_event::FIRST_ID.to_ne_bytes().to_vec();
        want.extend_from_slice(&[0, 0]);
        want.extend_from_slice(&43u32.to_ne_bytes());
        want.extend_from_slice(&payload);
        assert_eq!(evs[1].data, want);
        assert_eq!((evs[0].missed, evs[1].missed, evs[2].missed), (0, 0, 1));
        assert_eq!(evs[2].ts, 300);
        assert_eq!(rec.processes[0].events, vec![info]);
    }
}
