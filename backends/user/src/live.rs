//! Reading a recording while the program runs: the per-thread buffer files mapped read-only,
//! decoded in place, with the reader-side state a live tracefs needs (what `echo > trace`
//! cleared, what `trace_pipe` consumed).
//!
//! The agent's buffers are never written by the reader: clearing and consuming are marks kept
//! here, per buffer (`below`: every index under it is gone; `extra`: indices consumed out of
//! order by a per-CPU reader). Invariant: a slot is returned only when its lap bit says it was
//! committed in the lap being read and the ring's head, read again after the copy, shows no
//! writer can have overwritten it meanwhile; events the writer lapped before they were read are
//! counted as missed on the next event of that thread.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use ftrace_agent::buffer::{self, SlotMode};
use ftrace_agent::clock::{TscConversion, TscPair};
use ftrace_agent::config::ClockKind;
use ftrace_agent::event;
use ftrace_core::symbols::SortedSymbols;
use ftrace_ringbuf::slot::SlotRead;

use crate::recording::{entry_bytes, parse_symbols, stack_entry_bytes};
use crate::ringmap::{Access, RingMapping};

/// One thread's buffer.
struct Buf {
    path: PathBuf,
    map: Option<RingMapping>,
    pid: u32,
    tid: u32,
    comm: String,
    below: u64,
    extra: BTreeSet<u64>,
}

/// One traced process image (`<pid>.<n>`).
struct Proc {
    dir: PathBuf,
    sym_len: u64,
    /// Its `symbols` file as last read (a forked child's is a copy of its parent's).
    sym_text: std::sync::Arc<str>,
    /// Whether it has a thread buffer: only then can an event need its symbols.
    has_bufs: bool,
}

/// One event as read now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveEvent {
    /// Index into the recording's buffers (`usize::MAX`: not from a thread buffer).
    pub buf: usize,
    /// Its index in that ring.
    pub index: u64,
    /// The CPU.
    pub cpu: u32,
    /// Timestamp in trace-clock units (ns, or raw counts for `x86-tsc`).
    pub ts: u64,
    /// The thread.
    pub tid: u32,
    /// The entry bytes (`struct trace_entry` first).
    pub data: Vec<u8>,
    /// Events this thread lost just before this one.
    pub missed: u64,
    /// Every index of this event's ring under this one was lost or taken when it was read.
    pub lost_below: u64,
}

/// A recording directory being written by a running program.
pub struct LiveRecording {
    root: PathBuf,
    clock: ClockKind,
    procs: Vec<Proc>,
    bufs: Vec<Buf>,
    symbols: SortedSymbols,
    sym_dirty: bool,
    base: TscPair,
    conv: Option<TscConversion>,
    frozen: bool,
}

/// The file name of the executable a process image (`DIR/<pid>.<n>`) runs, from its `meta`.
pub fn exe_name(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("meta"))
        .ok()
        .and_then(|m| {
            m.lines().find_map(|l| l.strip_prefix("exe=")).map(|e| {
                Path::new(e)
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
        })
        .unwrap_or_default()
}

/// The name and address `trace_marker` events are attributed to.
pub const MARKER_SYMBOL: (&str, u64) = ("tracing_mark_write", 0xffff_ffff_ffff_f000);

impl LiveRecording {
    /// Watches `root` (events are stamped with `clock`); `base` is a clock pair taken before
    /// the program started.
    pub fn new(root: &Path, clock: ClockKind, base: TscPair) -> Self {
        LiveRecording {
            root: root.to_path_buf(),
            clock,
            procs: Vec::new(),
            bufs: Vec::new(),
            symbols: SortedSymbols::new(),
            sym_dirty: true,
            base,
            conv: None,
            frozen: false,
        }
    }

    /// Picks up new process images, thread buffers and symbols.
    pub fn refresh(&mut self) {
        let mut dirs: Vec<PathBuf> = std::fs::read_dir(&self.root)
            .map(|d| {
                d.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.join("meta").is_file())
                    .collect()
            })
            .unwrap_or_default();
        dirs.sort();
        for d in dirs {
            if !self.procs.iter().any(|p| p.dir == d) {
                self.procs.push(Proc {
                    dir: d,
                    sym_len: 0,
                    sym_text: std::sync::Arc::from(""),
                    has_bufs: false,
                });
            }
        }
        for p in &mut self.procs {
            // The agent's names and its list of objects named from their files.
            let len = ["symbols", ftrace_agent::symbol_files::OBJECTS]
                .iter()
                .map(|f| std::fs::metadata(p.dir.join(f)).map_or(0, |m| m.len()))
                .sum();
            if len != p.sym_len {
                p.sym_len = len;
                p.sym_text = crate::recording::image_symbols(&p.dir).into();
                self.sym_dirty |= p.has_bufs;
            }
            let Ok(rd) = std::fs::read_dir(&p.dir) else {
                continue;
            };
            for e in rd.flatten() {
                let path = e.path();
                let is_buf = path
                    .file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with("buf-"));
                if is_buf && !p.has_bufs {
                    p.has_bufs = true;
                    self.sym_dirty = true;
                }
                if is_buf && !self.bufs.iter().any(|b| b.path == path) {
                    self.bufs.push(Buf {
                        path,
                        map: None,
                        pid: 0,
                        tid: 0,
                        comm: String::new(),
                        below: 0,
                        extra: BTreeSet::new(),
                    });
                }
            }
        }
        for b in &mut self.bufs {
            if b.map.is_none() {
                if let Some(m) = RingMapping::open(&b.path, Access::ReadOnly) {
                    if let Some(v) = m.view() {
                        (b.pid, b.tid, b.comm) = (v.pid(), v.tid(), v.comm());
                        b.map = Some(m);
                    }
                }
            }
        }
        if self.sym_dirty {
            self.sym_dirty = false;
            let mut all = SortedSymbols::new();
            // Only the images with events; a symbols file seen already (a forked child's
            // copy: same addresses) is not pushed twice.
            let mut seen: std::collections::HashSet<std::sync::Arc<str>> = Default::default();
            for p in self.procs.iter().filter(|p| p.has_bufs) {
                if !seen.insert(p.sym_text.clone()) {
                    continue;
                }
                let t = parse_symbols(&p.sym_text);
                let exe = exe_name(&p.dir);
                use ftrace_core::symbols::SymbolTable;
                // The executable's own functions print bare, as the kernel's own do.
                t.for_each(&mut |s| {
                    all.push(s.name, s.addr, s.size, s.module.filter(|m| *m != exe))
                });
            }
            all.push(MARKER_SYMBOL.0, MARKER_SYMBOL.1, 16, None);
            all.finish();
            self.symbols = all;
        }
        if self.clock == ClockKind::Local && !self.frozen {
            let now = TscPair::now();
            if let Some(c) = TscConversion::calibrate(self.base, now) {
                self.conv = Some(c);
                // After two seconds the rate is good to a few ppm: keep it, so that a time
                // stamp reads the same in every read.
                self.frozen = now.mono_ns.saturating_sub(self.base.mono_ns) > 2_000_000_000;
            }
        }
    }

    /// Every process image seen so far (running or gone): its directory and its `symbols`
    /// text.
    pub fn images(&self) -> impl Iterator<Item = (&Path, &str)> {
        self.procs.iter().map(|p| (p.dir.as_path(), &*p.sym_text))
    }

    /// Events are stamped with `clock` from now on (the caller clears what came before).
    pub fn set_clock(&mut self, clock: ClockKind) {
        self.clock = clock;
    }

    /// Every function symbol of the program (and the marker's).
    pub fn symbols(&self) -> &SortedSymbols {
        &self.symbols
    }

    /// `(tid, pid, comm)` of every thread seen.
    pub fn threads(&self) -> Vec<(u32, u32, String)> {
        self.bufs
            .iter()
            .filter(|b| b.map.is_some())
            .map(|b| (b.tid, b.pid, b.comm.clone()))
            .collect()
    }

    /// The events still in the buffers (not cleared, not consumed), of one CPU or all, sorted
    /// by time. `pipe`: stop each thread at its first unfinished slot (a consumer must not
    /// skip an event being written).
    pub fn events(&mut self, cpu: Option<u32>, pipe: bool) -> Vec<LiveEvent> {
        self.refresh();
        let mut out = Vec::new();
        for (bi, b) in self.bufs.iter_mut().enumerate() {
            let Some(m) = &b.map else { continue };
            let Some(view) = m.view() else { continue };
            let ring = view.ring();
            let cap = ring.capacity();
            let overwrite = ring.mode() == SlotMode::Overwrite;
            let lo = if overwrite {
                b.below.max(ring.head().saturating_sub(cap))
            } else {
                b.below
            };
            // At most one ring's worth, whatever the header says.
            let head = ring.head().min(lo.saturating_add(cap));
            let mut got = Vec::new();
            for i in lo..head {
                if b.extra.contains(&i) {
                    continue;
                }
                match ring.read(i) {
                    // A return value is read with its exit (the next slot), a stack
                    // record's frames with its head, an event's data slots with its head; a
                    // consumer passes over them as over padding.
                    SlotRead::Event(s) if buffer::continues_a_record(s.kind()) => {
                        if pipe {
                            b.extra.insert(i);
                        }
                    }
                    SlotRead::Event(s) => got.push((i, s)),
                    SlotRead::Pad if pipe => {
                        b.extra.insert(i);
                    }
                    SlotRead::Pad => {}
                    SlotRead::Uncommitted | SlotRead::Overwritten if pipe => break,
                    SlotRead::Uncommitted | SlotRead::Overwritten => {}
                }
            }
            // Slots the writer may have reused while they were copied are not trusted.
            let safe = if overwrite {
                ring.head().saturating_sub(cap)
            } else {
                0
            };
            let first_ok = lo.max(safe);
            let mut missed = first_ok - b.below.min(first_ok);
            for (i, s) in got {
                if i < first_ok {
                    continue;
                }
                // A function_graph event deeper than the agent's shadow stack was never
                // written by it (the program wrote over its ring): damage, lost, and never
                // printed (indented by its depth, a line would be megabytes).
                if crate::stream::past_the_shadow_stack(&s).is_some() {
                    missed += 1;
                    if pipe {
                        b.extra.insert(i);
                    }
                    continue;
                }
                if cpu.is_some_and(|c| c != s.cpu) {
                    continue;
                }
                let (clock, conv) = (self.clock, self.conv);
                let cv = move |t: u64| match (clock, conv) {
                    (ClockKind::Local, Some(c)) => c.to_ns(t),
                    _ => t,
                };
                let before = match i.checked_sub(1).map(|j| ring.read(j)) {
                    Some(SlotRead::Event(p)) => Some(p),
                    _ => None,
                };
                let data = match s.kind() {
                    // A trace event's record: its head and the data slots after it.
                    event::KIND_EVENT => {
                        let tail: Vec<_> = (1..=event::data_slots(&s) as u64)
                            .map_while(|k| match ring.read(i + k) {
                                SlotRead::Event(d) => Some(d),
                                _ => None,
                            })
                            .collect();
                        event::assemble(&s, &tail, b.tid)
                    }
                    // A stack record: its frames in the slots before its head.
                    buffer::KIND_STACK => {
                        let frames = ftrace_agent::stack::frames_of(&s, &|k| match i
                            .checked_sub(k as u64)
                            .map(|j| ring.read(j))
                        {
                            Some(SlotRead::Event(p)) => Some(p),
                            _ => None,
                        });
                        Some(stack_entry_bytes(&frames, b.tid))
                    }
                    _ => entry_bytes(&s, before.as_ref(), b.tid, &cv),
                };
                let Some(data) = data else {
                    continue;
                };
                out.push(LiveEvent {
                    buf: bi,
                    index: i,
                    cpu: s.cpu,
                    ts: cv(s.ts),
                    tid: b.tid,
                    data,
                    missed,
                    lost_below: first_ok,
                });
                missed = 0;
            }
        }
        out.sort_by_key(|e| (e.ts, e.cpu));
        out
    }

    /// Marks `evs` consumed (`trace_pipe` read them).
    pub fn consume(&mut self, evs: &[LiveEvent]) {
        for e in evs {
            let Some(b) = self.bufs.get_mut(e.buf) else {
                continue;
            };
            // the lost ones before it are gone too
            if e.lost_below > b.below {
                b.below = e.lost_below;
            }
            if e.index == b.below {
                b.below += 1;
            } else if e.index > b.below {
                b.extra.insert(e.index);
            }
            // Passed-over slots (padding, return values) below it count as read.
            while b.extra.remove(&b.below) {
                b.below += 1;
            }
            // Indices a jump of `below` passed over are forgotten: only the smallest is
            // looked at per event (a `retain` here made each read of a long run slower).
            while b.extra.first().is_some_and(|&i| i < b.below) {
                b.extra.pop_first();
            }
        }
    }

    /// `echo > trace`: forgets every event recorded so far (of one CPU, or all).
    pub fn clear(&mut self, cpu: Option<u32>) {
        match cpu {
            None => {
                self.refresh();
                for b in &mut self.bufs {
                    if let Some(m) = &b.map {
                        b.below = m.view().map_or(0, |v| v.ring().head());
                        b.extra.clear();
                    }
                }
            }
            Some(_) => {
                let evs = self.events(cpu, false);
                self.consume(&evs);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ftrace_agent::buffer::{HEADER_SIZE, KIND_FUNC};

    fn make_buf(dir: &Path, tid: u32, slots: usize) -> (Vec<u8>, PathBuf) {
        let len = HEADER_SIZE + slots * buffer::SLOT_SIZE;
        let path = dir.join(format!("buf-{tid}"));
        std::fs::write(&path, vec![0u8; len]).unwrap();
        (Vec::new(), path)
    }

    /// Writes events into a buffer file through a shared mapping, as the agent does.
    fn writer(path: &Path, tid: u32) -> (buffer::Writer, *mut libc::c_void, usize) {
        use std::os::fd::AsRawFd;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)
            .unwrap();
        let len = f.metadata().unwrap().len() as usize;
        // SAFETY: a fresh shared mapping of our own file.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f.as_raw_fd(),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: zero-filled, page-aligned, `len` bytes.
        let w = unsafe { buffer::init(p.cast(), len, SlotMode::Overwrite, 7, tid, b"prog") };
        (w, p, len)
    }

    /// A live directory (`tag` its name) of process 7 (mono clock, f at 0x1000) with thread
    /// 8's buffer of 8 slots: the directory, the buffer's writer and its mapping (address,
    /// length).
    fn live_ring(tag: &str) -> (PathBuf, buffer::Writer, *mut libc::c_void, usize) {
        let root = std::env::temp_dir().join(format!("ftrace-live-{tag}-{}", std::process::id()));
        let sub = root.join("7.0");
        std::fs::create_dir_all(&sub).unwrap();
        std::fs::write(sub.join("meta"), "pid=7\nclock=mono\n").unwrap();
        std::fs::write(sub.join("symbols"), "1000\t10\tprog\tf\n").unwrap();
        let (_, path) = make_buf(&sub, 8, 8);
        let (w, p, len) = writer(&path, 8);
        (root, w, p, len)
    }

    #[test]
    fn clear_consume_and_overrun() {
        let (root, w, p, len) = live_ring("test");
        let mut live = LiveRecording::new(&root, ClockKind::Mono, TscPair::now());
        for i in 0..3u64 {
            // SAFETY: `w` describes the live mapping `p`.
            unsafe { w.write(100 + i, 0x1000, 0, KIND_FUNC, 0, (i % 2) as u32) };
        }
        let evs = live.events(None, false);
        assert_eq!(
            evs.iter().map(|e| e.ts).collect::<Vec<_>>(),
            [100, 101, 102]
        );
        assert_eq!(live.threads(), vec![(8, 7, "prog".to_string())]);
        // a per-CPU consumer takes CPU 1's event only
        let c1 = live.events(Some(1), true);
        assert_eq!(c1.len(), 1);
        live.consume(&c1);
        let rest = live.events(None, false);
        assert_eq!(rest.iter().map(|e| e.ts).collect::<Vec<_>>(), [100, 102]);
        live.clear(None);
        assert!(live.events(None, false).is_empty());
        // 10 more into 8 slots: 2 overwritten, reported as missed on the first one kept
        for i in 0..10u64 {
            // SAFETY: as above.
            unsafe { w.write(200 + i, 0x1000, 0, KIND_FUNC, 0, 0) };
        }
        let evs = live.events(None, true);
        assert_eq!(evs.len(), 8);
        assert_eq!((evs[0].ts, evs[0].missed), (202, 2));
        live.consume(&evs[..3]);
        let evs = live.events(None, true);
        assert_eq!((evs.len(), evs[0].ts, evs[0].missed), (5, 205, 0));
        // SAFETY: our mapping.
        unsafe { libc::munmap(p, len) };
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// The program shares its ring with the mount and may write anything there: a
    /// function_graph event deeper than the agent's shadow stack is damage, counted lost
    /// before the next event (once consumed, no more), never printed.
    #[test]
    fn a_depth_past_the_shadow_stack_is_lost_not_printed() {
        use ftrace_agent::buffer::{KIND_GRAPH_ENT, KIND_GRAPH_RET};
        use ftrace_agent::handler::SHADOW_FRAMES;
        let (root, w, p, len) = live_ring("deep");
        let mut live = LiveRecording::new(&root, ClockKind::Mono, TscPair::now());
        let deep = SHADOW_FRAMES as u32;
        // SAFETY: `w` describes the live mapping `p`.
        unsafe {
            w.write(100, 0x1000, 0x5, KIND_GRAPH_ENT, deep - 1, 0);
            w.write(110, 0x1000, 0x5, KIND_GRAPH_ENT, deep, 0);
            w.write(120, 0x1000, 100, KIND_GRAPH_RET, deep - 1, 0);
        }
        let seen = |evs: &[LiveEvent]| -> Vec<(u64, u64)> {
            evs.iter().map(|e| (e.ts, e.missed)).collect()
        };
        let evs = live.events(None, false);
        assert_eq!(seen(&evs), [(100, 0), (120, 1)]);
        let evs = live.events(None, true);
        assert_eq!(seen(&evs), [(100, 0), (120, 1)]);
        live.consume(&evs);
        assert!(live.events(None, true).is_empty());
        // SAFETY: our mapping.
        unsafe { libc::munmap(p, len) };
        std::fs::remove_dir_all(&root).unwrap();
    }
}
