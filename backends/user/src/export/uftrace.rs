//! A `uftrace.data` directory (uftrace's file version 4), read by `uftrace replay`, `report`,
//! `info` and `dump --chrome`.
//!
//! Files written:
//!
//! | file | content |
//! |---|---|
//! | `info` | the 40-byte header (`"Ftrace!\0"`, version 4, features `TASK_SESSION \| SYM_REL_ADDR`) and the `exename`, `cmdline`, `cpuinfo` and `taskinfo` sections |
//! | `task.txt` | a `SESS` line per process image (an exec starts a new one, at its agent's start time), a `TASK` line per thread and image |
//! | `sid-<SID>.map` | per process, one line per module: the span of its symbols |
//! | `<module>.sym` | `addr type name` lines, addresses relative to the module's map start |
//! | `<tid>.dat` | 16-byte records: `u64 time`, then `type:2 more:1 magic:3 depth:10 addr:48` |
//! | `events.txt` | `EVENT: <id> <system>:<name>` per trace event the records name |
//!
//! Symbols and modules come from a recording's per-process `symbols` files, so the input must
//! be a recording made by `ftrace record` (a kernel capture is refused with an error: its
//! addresses do not fit uftrace's 48-bit user address field).
//! `funcgraph_entry`/`funcgraph_exit` become ENTRY/EXIT records; a `function` event (the
//! function tracer records no returns) becomes an ENTRY and an EXIT at the same time.
//! A trace event of a program (`ftrace/tracepoint.h`) becomes uftrace's form for a user event
//! (an SDT probe of `uftrace record -E`): an EVENT record whose address is the event's id
//! (from `EVENT_ID_USER` on, named in `events.txt`), at the depth of the calls open around it.
//! Its fields are not carried: uftrace's user events have no argument data (its `replay`
//! prints their name only). With the function tracer no call is open around an event, and
//! `uftrace replay` shows events outside functions only with `--event-full`.
//!
//! Events lost before an event become uftrace's LOST record (the count in its address field),
//! which `uftrace replay` prints as `/* LOST N records!! */`.
//!
//! Invariant: every thread's records nest: an exit whose entry is not in the trace is left out,
//! and an exit that skips unfinished calls (lost events) first closes them at its own time,
//! so `uftrace replay` shows exactly the call tree the trace holds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use ftrace_core::symbols::{SortedSymbols, SymbolTable};

use std::io::Write as _;

use ftrace_tracers::Missed;

use super::{Call, Capture, ExportError, LeftOut, What, io_err};

/// `"Ftrace!\0"`.
pub const MAGIC: &[u8; 8] = b"Ftrace!\0";
/// uftrace's data file version.
pub const FILE_VERSION: u32 = 4;
/// Feature bit: `task.txt` has sessions.
pub const FEAT_TASK_SESSION: u64 = 1 << 1;
/// Feature bit: symbol addresses are relative to their module's map.
pub const FEAT_SYM_REL_ADDR: u64 = 1 << 5;
/// Info bit: `exename:`.
pub const INFO_EXE_NAME: u64 = 1 << 0;
/// Info bit: `cmdline:`.
pub const INFO_CMDLINE: u64 = 1 << 3;
/// Info bit: `cpuinfo:`.
pub const INFO_CPUINFO: u64 = 1 << 4;
/// Info bit: `taskinfo:`.
pub const INFO_TASKINFO: u64 = 1 << 7;
/// The record magic (`RECORD_MAGIC_V4`).
pub const RECORD_MAGIC: u64 = 5;
/// Record type: function entry.
pub const REC_ENTRY: u64 = 0;
/// Record type: function exit.
pub const REC_EXIT: u64 = 1;
/// Record type: lost records (the address field holds how many; 0: unknown).
pub const REC_LOST: u64 = 2;
/// Record type: an event (`UFTRACE_EVENT`; the address field holds the event id).
pub const REC_EVENT: u64 = 3;
/// Feature bit: `events.txt` names the event records' ids (`EVENT`).
pub const FEAT_EVENT: u64 = 1 << 7;
/// The first id of user-defined events (uftrace's `EVENT_ID_USER`, its SDT events).
pub const EVENT_ID_USER: u64 = 1_000_000;

/// The second word of a record.
pub fn record_word(kind: u64, depth: u32, addr: u64) -> u64 {
    let depth = u64::from(depth.min(1023));
    kind | (RECORD_MAGIC << 3) | (depth << 6) | ((addr & ((1 << 48) - 1)) << 16)
}

/// One module of a process: where its symbols are and what they are.
struct Module {
    /// The map's path (its basename names the `.sym` file).
    path: String,
    start: u64,
    end: u64,
    /// (address, name), sorted.
    syms: Vec<(u64, String)>,
}

fn modules(syms: &SortedSymbols, main: &str) -> Vec<Module> {
    let mut by: BTreeMap<String, Module> = BTreeMap::new();
    syms.for_each(&mut |s| {
        let path = s.module.unwrap_or(main).to_string();
        let m = by.entry(path.clone()).or_insert(Module {
            path,
            start: u64::MAX,
            end: 0,
            syms: Vec::new(),
        });
        m.start = m.start.min(s.addr & !0xfff);
        m.end = m.end.max(s.addr.saturating_add(s.size.max(1)));
        m.syms.push((s.addr, s.name.to_string()));
    });
    let mut v: Vec<Module> = by.into_values().collect();
    v.sort_by_key(|m| m.start);
    // Spans must not overlap: end each at the next one's start.
    for i in 1..v.len() {
        let next = v[i].start;
        if v[i - 1].end > next {
            v[i - 1].end = next;
        }
    }
    v
}

fn basename(p: &str) -> &str {
    p.rsplit('/').next().unwrap_or(p)
}

fn ts_text(ts: u64) -> String {
    format!("{}.{:09}", ts / 1_000_000_000, ts % 1_000_000_000)
}

/// One process image of the recording (`<pid>.<n>/`): a uftrace session.
struct Session {
    pid: i32,
    exe: String,
    syms: SortedSymbols,
    /// When its agent started, in the capture's time (an exec'd image starts a new session of
    /// the same pid: uftrace picks, for each record, the latest session started before it).
    start: Option<u64>,
}

fn sessions(cap: &Capture) -> Result<Vec<Session>, ExportError> {
    let mut out = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(&cap.dir)
        .map_err(|e| io_err(&cap.dir, e))?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("meta").is_file() && p.join("symbols").is_file())
        .collect();
    dirs.sort();
    for d in dirs {
        let meta = std::fs::read_to_string(d.join("meta")).map_err(|e| io_err(&d, e))?;
        let kv = super::meta_kv(&meta);
        let Some(pid) = kv.get("pid").and_then(|p| p.parse().ok()) else {
            continue;
        };
        let start_key = if cap.time_in_ns() || cap.tsc.is_some() {
            "mono_ns"
        } else {
            "tsc"
        };
        let start = kv.get(start_key).and_then(|v| v.parse().ok());
        // Checked readable (the agent's own names), then joined to the objects' names.
        std::fs::metadata(d.join("symbols")).map_err(|e| io_err(&d, e))?;
        let text = crate::recording::image_symbols(&d);
        out.push(Session {
            pid,
            exe: kv.get("exe").map_or_else(String::new, |s| s.to_string()),
            syms: crate::recording::parse_symbols(&text),
            start,
        });
    }
    if out.is_empty() {
        return Err(ExportError(format!(
            "{}: not a recording of `ftrace record` (no <pid>.<n>/meta and symbols): uftrace.data \
             holds userspace calls; export a kernel capture as trace.dat or chrome",
            cap.dir.display()
        )));
    }
    Ok(out)
}

/// The most `<tid>.dat` files kept open at once while writing (more threads: files are
/// closed and reopened to append).
const MAX_OPEN_FILES: usize = 128;

/// One thread's `<tid>.dat` being written, and its open calls.
#[derive(Default)]
struct ThreadOut {
    file: Option<std::io::BufWriter<std::fs::File>>,
    /// Whether the file exists (written before, maybe closed since).
    created: bool,
    /// Open calls (function addresses), outermost first.
    stack: Vec<u64>,
    /// Its current process image (an index of the sessions).
    image: Option<Option<usize>>,
    /// Its first timestamp.
    first: u64,
}

/// The threads' record files.
struct ThreadFiles<'d> {
    dir: &'d Path,
    threads: BTreeMap<i32, ThreadOut>,
    open: usize,
}

impl ThreadFiles<'_> {
    /// Appends one 16-byte record to `tid`'s file.
    fn push(&mut self, tid: i32, ts: u64, word: u64) -> Result<(), ExportError> {
        if self.threads.get(&tid).is_none_or(|t| t.file.is_none()) {
            if self.open >= MAX_OPEN_FILES {
                for t in self.threads.values_mut() {
                    if let Some(mut f) = t.file.take() {
                        f.flush().map_err(|e| io_err(self.dir, e))?;
                    }
                }
                self.open = 0;
            }
            let p = self.dir.join(format!("{tid}.dat"));
            let t = self.threads.entry(tid).or_default();
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(t.created)
                .write(true)
                .truncate(!t.created)
                .open(&p)
                .map_err(|e| io_err(&p, e))?;
            t.file = Some(std::io::BufWriter::with_capacity(16 * 1024, f));
            t.created = true;
            self.open += 1;
        }
        let t = self.threads.get_mut(&tid).expect("opened above");
        let f = t.file.as_mut().expect("opened above");
        let mut rec = [0u8; 16];
        rec[..8].copy_from_slice(&ts.to_ne_bytes());
        rec[8..].copy_from_slice(&word.to_ne_bytes());
        f.write_all(&rec)
            .map_err(|e| io_err(&self.dir.join(format!("{tid}.dat")), e))
    }

    fn finish(&mut self) -> Result<(), ExportError> {
        for (tid, t) in &mut self.threads {
            if let Some(mut f) = t.file.take() {
                f.flush()
                    .map_err(|e| io_err(&self.dir.join(format!("{tid}.dat")), e))?;
            }
        }
        Ok(())
    }
}

/// Writes `cap` as a `uftrace.data` directory at `out` (replacing files of the same names),
/// reading its events as it goes: memory holds each thread's open calls, not the events. The
/// files are written into a directory beside `out` and moved into it once all are complete.
/// Returns the records uftrace.data has no place for (text markers, stack traces...), left
/// out.
pub fn write(cap: &mut Capture, out: &Path) -> Result<LeftOut, ExportError> {
    let sess = sessions(cap)?;
    let tmp = super::partial_path(out);
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| io_err(&tmp, e))?;
    let result = write_into(cap, &sess, &tmp).and_then(|(names, left_out)| {
        std::fs::create_dir_all(out).map_err(|e| io_err(out, e))?;
        for name in names {
            let to = out.join(&name);
            std::fs::rename(tmp.join(&name), &to).map_err(|e| io_err(&to, e))?;
        }
        Ok(left_out)
    });
    let _ = std::fs::remove_dir_all(&tmp);
    result
}

/// Writes the files into `dir`; returns their names, and what had no place in them.
fn write_into(
    cap: &mut Capture,
    sess: &[Session],
    dir: &Path,
) -> Result<(Vec<String>, LeftOut), ExportError> {
    let mut names = Vec::new();
    // The session (process image) an event of `tid` at `ts` belongs to: the latest of its
    // process started at or before `ts`.
    let image = |cap: &Capture, tid: i32, ts: u64| -> Option<usize> {
        let pid = cap.tgid(tid);
        sess.iter()
            .enumerate()
            .filter(|(_, s)| s.pid == pid && s.start.is_none_or(|st| st <= ts))
            .max_by_key(|(_, s)| s.start)
            .map(|(i, _)| i)
    };
    let mut files = ThreadFiles {
        dir,
        threads: BTreeMap::new(),
        open: 0,
    };
    // Per thread and image, the first timestamp (for TASK lines); the trace events seen, in
    // the order of their uftrace ids.
    let mut task_starts: BTreeMap<(i32, Option<usize>), u64> = BTreeMap::new();
    let mut event_ids: BTreeMap<usize, u64> = BTreeMap::new();
    let mut left_out = LeftOut::default();
    cap.for_each_event(&mut |cap, e| {
        // uftrace times are nanoseconds: an x86-tsc recording's cycles are converted.
        let ts = cap.ns(e.ts);
        let t = files.threads.entry(e.pid).or_default();
        if t.image.is_none() {
            t.first = ts;
        }
        // A new image (exec): the old image's calls never return; the new one starts at depth 0.
        let img = image(cap, e.pid, ts);
        if t.image.replace(img) != Some(img) {
            t.stack.clear();
            task_starts.entry((e.pid, img)).or_insert(ts);
        }
        let depth = t.stack.len() as u32;
        if e.missed != Missed::None {
            // uftrace's own form for a hole: a LOST record holding the count (0: unknown).
            let n = match e.missed {
                Missed::Count(n) => n,
                _ => 0,
            };
            files.push(e.pid, ts, record_word(REC_LOST, depth, n))?;
        }
        let t = files.threads.get_mut(&e.pid).expect("entered above");
        match e.what {
            What::Call(Call::Entry { func, .. }) => {
                t.stack.push(func);
                files.push(e.pid, ts, record_word(REC_ENTRY, depth, func))
            }
            What::Call(Call::Exit { func, .. }) => {
                let Some(pos) = t.stack.iter().rposition(|&f| f == func) else {
                    return Ok(());
                };
                let closed: Vec<u64> = t.stack.drain(pos..).rev().collect();
                for (i, f) in closed.into_iter().enumerate() {
                    let d = depth - 1 - i as u32;
                    files.push(e.pid, ts, record_word(REC_EXIT, d, f))?;
                }
                Ok(())
            }
            What::Call(Call::Function { func, .. }) => {
                files.push(e.pid, ts, record_word(REC_ENTRY, 0, func))?;
                files.push(e.pid, ts, record_word(REC_EXIT, 0, func))
            }
            What::Event { format, .. } => {
                let next = EVENT_ID_USER + event_ids.len() as u64;
                let id = *event_ids.entry(format).or_insert(next);
                files.push(e.pid, ts, record_word(REC_EVENT, depth, id))
            }
            What::Print(_) | What::Other => {
                left_out.add(e.id);
                Ok(())
            }
        }
    })?;
    files.finish()?;
    files.threads.retain(|_, t| t.created);
    if files.threads.is_empty() {
        return Err(ExportError(format!(
            "{}: no function events to export",
            cap.dir.display()
        )));
    }
    let threads = std::mem::take(&mut files.threads);
    for tid in threads.keys() {
        names.push(format!("{tid}.dat"));
    }
    let mut put = |name: &str, bytes: &[u8]| -> Result<(), ExportError> {
        let p = dir.join(name);
        std::fs::write(&p, bytes).map_err(|e| io_err(&p, e))?;
        names.push(name.to_string());
        Ok(())
    };

    // Sessions: maps and symbol files; task.txt (SESS and TASK lines in time order).
    let mut task: Vec<(u64, u8, String)> = Vec::new();
    let mut written_syms = BTreeSet::new();
    for (i, s) in sess.iter().enumerate() {
        let Some(first_ts) = threads
            .iter()
            .filter(|(t, _)| cap.tgid(**t) == s.pid)
            .map(|(_, t)| t.first)
            .min()
        else {
            continue;
        };
        let start = s.start.unwrap_or(first_ts);
        let sid = format!("{:016x}", 0x0f7a_ce00_0000_0000_u64 | i as u64);
        let main = if s.exe.is_empty() {
            format!("pid-{}", s.pid)
        } else {
            basename(&s.exe).to_string()
        };
        let mods = modules(&s.syms, &main);
        let mut map = String::new();
        for m in &mods {
            let path = if m.path == main && !s.exe.is_empty() {
                s.exe.clone()
            } else {
                m.path.clone()
            };
            let _ = writeln!(
                map,
                "{:x}-{:x} r-xp 00000000 00:00 {:<26} {path}",
                m.start,
                m.end.next_multiple_of(4096),
                0
            );
            if written_syms.insert(basename(&path).to_string()) {
                let mut sym = format!("# symbols: {}\n# path name: {path}\n", m.syms.len() + 1);
                for (a, n) in &m.syms {
                    let _ = writeln!(sym, "{:016x} T {n}", a - m.start);
                }
                let _ = writeln!(sym, "{:016x} ? __sym_end", m.end - m.start);
                put(&format!("{}.sym", basename(&path)), sym.as_bytes())?;
            }
        }
        let _ = writeln!(
            map,
            "7ffffffde000-7ffffffff000 rw-p 00000000 00:00 {:<26} [stack]",
            0
        );
        put(&format!("sid-{sid}.map"), map.as_bytes())?;
        let exe = if s.exe.is_empty() { &main } else { &s.exe };
        task.push((
            start,
            0,
            format!(
                "SESS timestamp={} pid={} sid={sid} exename=\"{exe}\"",
                ts_text(start),
                s.pid
            ),
        ));
    }
    // A TASK line per thread and image (uftrace writes one after each exec's SESS).
    for (&(tid, _), ts) in &task_starts {
        if threads.contains_key(&tid) {
            task.push((
                *ts,
                1,
                format!(
                    "TASK timestamp={} tid={tid} pid={}",
                    ts_text(*ts),
                    cap.tgid(tid)
                ),
            ));
        }
    }
    task.sort();
    let task: String = task.into_iter().map(|(_, _, l)| l + "\n").collect();
    put("task.txt", task.as_bytes())?;

    // events.txt: the trace events the records name (`EVENT: <id> <system>:<name>`).
    let mut features = FEAT_TASK_SESSION | FEAT_SYM_REL_ADDR;
    if !event_ids.is_empty() {
        let mut text = String::new();
        let mut by_id: Vec<(u64, usize)> = event_ids.iter().map(|(&f, &id)| (id, f)).collect();
        by_id.sort_unstable();
        for (id, f) in by_id {
            let f = &cap.event_formats[f];
            let _ = writeln!(text, "EVENT: {id} {}:{}", f.system, f.name);
        }
        put("events.txt", text.as_bytes())?;
        features |= FEAT_EVENT;
    }

    // info: header + sections in bit order.
    let exe = sess
        .first()
        .map_or_else(|| "unknown".to_string(), |s| s.exe.clone());
    let mut info = Vec::with_capacity(256);
    info.extend_from_slice(MAGIC);
    info.extend_from_slice(&FILE_VERSION.to_ne_bytes());
    info.extend_from_slice(&40u16.to_ne_bytes());
    info.push(if cfg!(target_endian = "little") { 1 } else { 2 });
    info.push(2); // 64-bit
    info.extend_from_slice(&features.to_ne_bytes());
    info.extend_from_slice(
        &(INFO_EXE_NAME | INFO_CMDLINE | INFO_CPUINFO | INFO_TASKINFO).to_ne_bytes(),
    );
    info.extend_from_slice(&[0u8; 8]);
    let tids: Vec<String> = threads.keys().map(|t| t.to_string()).collect();
    let mut text = String::new();
    let _ = writeln!(text, "exename:{exe}");
    let _ = writeln!(
        text,
        "cmdline:ftrace export --format uftrace -i {}",
        cap.dir.display()
    );
    let nr = cap.nr_cpus;
    let _ = writeln!(text, "cpuinfo:lines=2");
    let _ = writeln!(text, "cpuinfo:nr_cpus={nr} / {nr} (online/possible)");
    let _ = writeln!(text, "cpuinfo:desc=ftrace-rs capture ({})", cap.tracer);
    let _ = writeln!(text, "taskinfo:lines=2");
    let _ = writeln!(text, "taskinfo:nr_tid={}", tids.len());
    let _ = writeln!(text, "taskinfo:tids={}", tids.join(","));
    info.extend_from_slice(text.as_bytes());
    put("info", &info)?;
    Ok((names, left_out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_word_matches_libmcount() {
        // ENTRY, depth 0, addr 0x401136 (peers.md §1.3's worked example).
        assert_eq!(record_word(REC_ENTRY, 0, 0x401136), 0x0000_0040_1136_0028);
        let w = record_word(REC_EXIT, 3, 0x55f3_16a9_70c7);
        assert_eq!(w & 3, REC_EXIT);
        assert_eq!((w >> 3) & 7, RECORD_MAGIC);
        assert_eq!((w >> 6) & 0x3ff, 3);
        assert_eq!(w >> 16, 0x55f3_16a9_70c7);
    }

    #[test]
    fn modules_group_symbols_and_do_not_overlap() {
        let mut t = SortedSymbols::new();
        t.push("main", 0x5000_1100, 0x40, None);
        t.push("f", 0x5000_1200, 0x10, None);
        t.push("getpid", 0x7f00_2000, 0x20, Some("libc.so.6"));
        t.finish();
        let m = modules(&t, "prog");
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].path.as_str(), m[0].start), ("prog", 0x5000_1000));
        assert_eq!(m[0].syms.len(), 2);
        assert_eq!((m[1].path.as_str(), m[1].start), ("libc.so.6", 0x7f00_2000));
        assert!(m[0].end <= m[1].start);
    }
}
