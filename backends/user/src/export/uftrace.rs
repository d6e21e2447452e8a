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
//!
//! Symbols and modules come from a recording's per-process `symbols` files, so the input must
//! be a recording made by `ftrace record` (a kernel capture is refused with an error: its
//! addresses do not fit uftrace's 48-bit user address field).
//! `funcgraph_entry`/`funcgraph_exit` become ENTRY/EXIT records; a `function` event (the
//! function tracer records no returns) becomes an ENTRY and an EXIT at the same time.
//!
//! Invariant: every thread's records nest: an exit whose entry is not in the trace is left out,
//! and an exit that skips unfinished calls (lost events) first closes them at its own time,
//! so `uftrace replay` shows exactly the call tree the trace holds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::Path;

use ftrace_core::symbols::{SortedSymbols, SymbolTable};

use super::{Call, Capture, ExportError, io_err};

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
        let text = std::fs::read_to_string(d.join("symbols")).map_err(|e| io_err(&d, e))?;
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

/// Writes `cap` as a `uftrace.data` directory at `out` (replacing files of the same names).
pub fn write(cap: &Capture, out: &Path) -> Result<(), ExportError> {
    std::fs::create_dir_all(out).map_err(|e| io_err(out, e))?;
    let put = |name: &str, bytes: &[u8]| -> Result<(), ExportError> {
        let p = out.join(name);
        std::fs::write(&p, bytes).map_err(|e| io_err(&p, e))
    };
    // uftrace times are nanoseconds: an x86-tsc recording's cycles are converted.
    let mut events = cap.events()?;
    for e in &mut events {
        e.ts = cap.ns(e.ts);
    }

    // Threads and their first timestamps; the process of each.
    let mut first: BTreeMap<i32, u64> = BTreeMap::new();
    for e in &events {
        first.entry(e.pid).or_insert(e.ts);
    }
    let sess = sessions(cap)?;

    // The session (process image) an event of `tid` at `ts` belongs to: the latest of its
    // process started at or before `ts`.
    let image = |tid: i32, ts: u64| -> Option<usize> {
        let pid = cap.tgid(tid);
        sess.iter()
            .enumerate()
            .filter(|(_, s)| s.pid == pid && s.start.is_none_or(|st| st <= ts))
            .max_by_key(|(_, s)| s.start)
            .map(|(i, _)| i)
    };
    // Per-thread records; per thread and image, the first timestamp (for TASK lines).
    let mut recs: BTreeMap<i32, (Vec<u8>, Vec<u64>)> = BTreeMap::new();
    let mut images: BTreeMap<i32, Option<usize>> = BTreeMap::new();
    let mut task_starts: BTreeMap<(i32, Option<usize>), u64> = BTreeMap::new();
    let push = |buf: &mut Vec<u8>, ts: u64, word: u64| {
        buf.extend_from_slice(&ts.to_ne_bytes());
        buf.extend_from_slice(&word.to_ne_bytes());
    };
    for e in &events {
        let (buf, stack) = recs.entry(e.pid).or_default();
        // A new image (exec): the old image's calls never return; the new one starts at depth 0.
        let img = image(e.pid, e.ts);
        if images.insert(e.pid, img) != Some(img) {
            stack.clear();
            task_starts.entry((e.pid, img)).or_insert(e.ts);
        }
        match e.call() {
            Some(Call::Entry { func, .. }) => {
                push(buf, e.ts, record_word(REC_ENTRY, stack.len() as u32, func));
                stack.push(func);
            }
            Some(Call::Exit { func, .. }) => {
                let Some(pos) = stack.iter().rposition(|&f| f == func) else {
                    continue;
                };
                while stack.len() > pos {
                    let f = stack.pop().expect("non-empty");
                    push(buf, e.ts, record_word(REC_EXIT, stack.len() as u32, f));
                }
            }
            Some(Call::Function { func, .. }) => {
                push(buf, e.ts, record_word(REC_ENTRY, 0, func));
                push(buf, e.ts, record_word(REC_EXIT, 0, func));
            }
            None => {}
        }
    }
    recs.retain(|_, (b, _)| !b.is_empty());
    if recs.is_empty() {
        return Err(ExportError(format!(
            "{}: no function events to export",
            cap.dir.display()
        )));
    }
    for (tid, (buf, _)) in &recs {
        put(&format!("{tid}.dat"), buf)?;
    }

    // Sessions: maps and symbol files; task.txt (SESS and TASK lines in time order).
    let mut task: Vec<(u64, u8, String)> = Vec::new();
    let mut written_syms = BTreeSet::new();
    for (i, s) in sess.iter().enumerate() {
        let tids: Vec<i32> = recs
            .keys()
            .copied()
            .filter(|&t| cap.tgid(t) == s.pid)
            .collect();
        let Some(first_ts) = tids.iter().filter_map(|t| first.get(t)).min().copied() else {
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
        if recs.contains_key(&tid) {
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
    info.extend_from_slice(&(FEAT_TASK_SESSION | FEAT_SYM_REL_ADDR).to_ne_bytes());
    info.extend_from_slice(
        &(INFO_EXE_NAME | INFO_CMDLINE | INFO_CPUINFO | INFO_TASKINFO).to_ne_bytes(),
    );
    info.extend_from_slice(&[0u8; 8]);
    let tids: Vec<String> = recs.keys().map(|t| t.to_string()).collect();
    let mut text = String::new();
    let _ = writeln!(text, "exename:{exe}");
    let _ = writeln!(
        text,
        "cmdline:ftrace export --format uftrace -i {}",
        cap.dir.display()
    );
    let nr = cap.cpus.len();
    let _ = writeln!(text, "cpuinfo:lines=2");
    let _ = writeln!(text, "cpuinfo:nr_cpus={nr} / {nr} (online/possible)");
    let _ = writeln!(text, "cpuinfo:desc=ftrace-rs capture ({})", cap.tracer);
    let _ = writeln!(text, "taskinfo:lines=2");
    let _ = writeln!(text, "taskinfo:nr_tid={}", tids.len());
    let _ = writeln!(text, "taskinfo:tids={}", tids.join(","));
    info.extend_from_slice(text.as_bytes());
    put("info", &info)?;
    Ok(())
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
