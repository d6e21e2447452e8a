//! hist triggers against a real Linux 6.12 (`CONFIG_HIST_TRIGGERS`), byte for byte.
//!
//! `tests/goldens/linux-6.12/hist/` (captured by `scripts/goldens/capture-6.12.sh hist`) holds,
//! per event, the hist commands the guest wrote, the event's `format`, and the kernel's
//! `trigger` and `hist` files after a workload; beside them the raw ring-buffer pages of the
//! same events (`cpuN.raw`). The test parses each command with our trigger parser, replays the
//! kernel's own records through our aggregation (each trigger's `if` filter applied, pausing,
//! continuing and clearing where the guest's `hist-update` markers say it did), and compares
//! our `trigger` lines and `hist` text with the kernel's.

use std::collections::HashMap;

use ftrace_core::EventId;
use ftrace_core::format::{Field, FieldArray, TraceEventFormat};
use ftrace_core::symbols::SortedSymbols;
use ftrace_ringbuf::page::Page;
use ftrace_tracefs::event_filter::{self, EventFilter, RecordCtx};
use ftrace_tracefs::hist::{Comm, HistDef, HistMap, HistNames, write_hist};
use ftrace_tracefs::triggers::{Trigger, TriggerCmd, TriggerCtx, TriggerKind, parse};

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/goldens/linux-6.12/hist"
);

fn text(rel: &str) -> String {
    let p = format!("{DIR}/{rel}");
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{p}: {e}"))
}

fn leak(s: &str) -> &'static str {
    Box::leak(s.to_owned().into_boxed_str())
}

/// A `format` file back into the field table it was printed from.
fn parse_format(system: &str, text: &str) -> TraceEventFormat {
    let mut name = "";
    let mut id = 0;
    let mut fields = Vec::new();
    let mut print_fmt = "";
    let mut common_done = false;
    for line in text.lines() {
        if let Some(n) = line.strip_prefix("name: ") {
            name = leak(n);
        } else if let Some(i) = line.strip_prefix("ID: ") {
            id = i.parse().unwrap();
        } else if let Some(p) = line.strip_prefix("print fmt: ") {
            print_fmt = leak(p);
        } else if line.is_empty() {
            common_done = true;
        } else if let Some(f) = line.trim_start().strip_prefix("field:") {
            if !common_done {
                continue;
            }
            let parts: Vec<&str> = f.split(";\t").collect();
            let decl = parts[0];
            let num = |key: &str| -> u32 {
                parts
                    .iter()
                    .find_map(|p| p.strip_prefix(key))
                    .unwrap()
                    .trim_end_matches(';')
                    .parse()
                    .unwrap()
            };
            let (c_type, fname) = decl.rsplit_once(' ').unwrap();
            let (fname, array) = match fname.split_once('[') {
                Some((n, rest)) => {
                    let len = rest.trim_end_matches(']');
                    if len.is_empty() {
                        (n, FieldArray::Dynamic)
                    } else {
                        (n, FieldArray::Fixed(len.parse().unwrap()))
                    }
                }
                None => (fname, FieldArray::Scalar),
            };
            fields.push(Field {
                c_type: leak(c_type),
                name: leak(fname),
                array,
                offset: num("offset:"),
                size: num("size:"),
                signed: num("signed:") == 1,
            });
        }
    }
    TraceEventFormat {
        system: leak(system),
        name,
        id,
        fields: Box::leak(fields.into_boxed_slice()),
        print_fmt,
    }
}

/// `kallsyms` as the capture script keeps it: "address size name".
fn symbols() -> SortedSymbols {
    let mut s = SortedSymbols::new();
    for line in text("kallsyms").lines() {
        let mut f = line.split_whitespace();
        let addr = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
        let size = u64::from_str_radix(f.next().unwrap(), 16).unwrap();
        s.push(f.next().unwrap(), addr, size, None);
    }
    s.finish();
    s
}

struct Ev {
    cpu: u32,
    ts: u64,
    data: Vec<u8>,
}

impl Ev {
    fn type_(&self) -> u16 {
        u16::from_le_bytes([self.data[0], self.data[1]])
    }
    fn i32_at(&self, f: &Field) -> i32 {
        let o = f.offset as usize;
        i32::from_le_bytes(self.data[o..o + 4].try_into().unwrap())
    }
    fn comm_at(&self, f: &Field) -> Comm {
        let o = f.offset as usize;
        self.data[o..o + 16].try_into().unwrap()
    }
}

/// Every CPU's events, merged in timestamp order.
fn events() -> Vec<Ev> {
    let mut evs = Vec::new();
    let mut cpu = 0;
    while let Ok(raw) = std::fs::read(format!("{DIR}/cpu{cpu}.raw")) {
        let stats = text(&format!("cpu{cpu}.stats"));
        assert!(stats.contains("overrun: 0\n"), "cpu{cpu} lost events");
        for chunk in raw.chunks(4096) {
            let page = Page::new(chunk).unwrap();
            assert!(!page.missed_events(), "cpu{cpu}: the capture lost events");
            for e in page.events() {
                let e = e.unwrap();
                evs.push(Ev {
                    cpu,
                    ts: e.ts,
                    data: e.payload.to_vec(),
                });
            }
        }
        cpu += 1;
    }
    assert!(cpu > 0, "no raw pages");
    evs.sort_by_key(|e| e.ts);
    evs
}

/// A task's name at a time: from its fork and rename records, else `saved_cmdlines`.
struct Comms {
    /// Per pid: (ts, name before, name after), in time order.
    changes: HashMap<i32, Vec<(u64, Option<Comm>, Comm)>>,
    saved: HashMap<i32, Comm>,
}

fn comm_bytes(s: &str) -> Comm {
    let mut c = [0; 16];
    c[..s.len().min(15)].copy_from_slice(&s.as_bytes()[..s.len().min(15)]);
    c
}

impl Comms {
    fn new(evs: &[Ev], fork: &TraceEventFormat, rename: &TraceEventFormat) -> Comms {
        let mut changes: HashMap<i32, Vec<_>> = HashMap::new();
        for e in evs {
            if e.type_() == fork.id {
                let pid = e.i32_at(fork.field("child_pid").unwrap());
                let c = e.comm_at(fork.field("child_comm").unwrap());
                changes.entry(pid).or_default().push((e.ts, None, c));
            } else if e.type_() == rename.id {
                let pid = e.i32_at(rename.field("pid").unwrap());
                let old = e.comm_at(rename.field("oldcomm").unwrap());
                let new = e.comm_at(rename.field("newcomm").unwrap());
                changes.entry(pid).or_default().push((e.ts, Some(old), new));
            }
        }
        let saved = text("saved_cmdlines")
            .lines()
            .map(|l| {
                let (pid, comm) = l.split_once(' ').unwrap();
                (pid.parse().unwrap(), comm_bytes(comm))
            })
            .collect();
        Comms { changes, saved }
    }

    /// `save_comm(current)` for the task `pid` at `ts`.
    fn at(&self, pid: i32, ts: u64) -> Comm {
        if pid == 0 {
            return comm_bytes("<idle>");
        }
        if let Some(ch) = self.changes.get(&pid) {
            if let Some(last) = ch.iter().rev().find(|c| c.0 <= ts) {
                return last.2;
            }
            if let Some(old) = ch.iter().find_map(|c| c.1) {
                return old;
            }
        }
        self.saved.get(&pid).copied().unwrap_or(comm_bytes("<...>"))
    }
}

/// One event's hist triggers: in the order the commands were written, each with its `if`
/// filter compiled.
struct EventHists {
    format: TraceEventFormat,
    hists: Vec<(Trigger, HistDef, HistMap)>,
    filters: Vec<Option<EventFilter>>,
}

fn load(system: &str, event: &str) -> EventHists {
    let format = parse_format(system, &text(&format!("events/{system}/{event}/format")));
    let mut hists: Vec<(Trigger, HistDef, HistMap)> = Vec::new();
    let mut filters = Vec::new();
    for cmd in text(&format!("events/{system}/{event}/commands")).lines() {
        let existing: Vec<Trigger> = hists.iter().map(|h| h.0.clone()).collect();
        let cx = TriggerCtx {
            event: &format,
            find_event: &|_, _| None,
            existing: &existing,
            var_defined: &|_| false,
            clocks: &["local", "global"],
        };
        let r = parse(cmd.as_bytes(), &cx, &mut |_, m, _, _| panic!("{cmd}: {m}"));
        let Ok(TriggerCmd::Add(t)) = r else {
            panic!("{cmd}: {r:?}")
        };
        let TriggerKind::Hist(spec) = &t.kind else {
            panic!("{cmd}: not a hist trigger")
        };
        let def = HistDef::compile(spec, &format).unwrap_or_else(|e| panic!("{cmd}: {e}"));
        let map = HistMap::new(&def);
        filters.push(
            t.filter
                .as_ref()
                .map(|f| event_filter::parse(&format, f).unwrap()),
        );
        hists.push((t, def, map));
    }
    EventHists {
        format,
        hists,
        filters,
    }
}

#[test]
fn kernel_records_aggregate_to_the_kernels_hist_files() {
    let mut events_dirs: Vec<(String, String)> = Vec::new();
    for sys in std::fs::read_dir(format!("{DIR}/events")).unwrap() {
        let sys = sys.unwrap();
        for ev in std::fs::read_dir(sys.path()).unwrap() {
            let ev = ev.unwrap();
            events_dirs.push((
                sys.file_name().into_string().unwrap(),
                ev.file_name().into_string().unwrap(),
            ));
        }
    }
    events_dirs.sort();
    let mut all: Vec<EventHists> = events_dirs.iter().map(|(s, e)| load(s, e)).collect();
    let n_defs: usize = all.iter().map(|e| e.hists.len()).sum();
    assert!(n_defs >= 10, "{n_defs} hist definitions");

    let evs = events();
    let fork = all
        .iter()
        .find(|e| e.format.name == "sched_process_fork")
        .unwrap()
        .format;
    let rename = parse_format("task", &text("task_rename.format"));
    let comms = Comms::new(&evs, &fork, &rename);
    let print_id = EventId::Print.as_u16();
    let mut updates = 0;
    for e in &evs {
        if e.type_() == print_id {
            // `hist-update <sys>/<event> <index> <op>` from the guest's trace_marker.
            let buf = String::from_utf8_lossy(&e.data[16..]);
            let buf = buf.trim_end_matches('\0').trim_end();
            let Some(rest) = buf.strip_prefix("hist-update ") else {
                continue;
            };
            let w: Vec<&str> = rest.split(' ').collect();
            let eh = all
                .iter_mut()
                .find(|h| format!("{}/{}", h.format.system, h.format.name) == w[0])
                .unwrap_or_else(|| panic!("marker for {}", w[0]));
            let (t, _, map) = &mut eh.hists[w[1].parse::<usize>().unwrap()];
            match w[2] {
                "pause" => t.paused = true,
                "cont" => t.paused = false,
                "clear" => map.clear(),
                op => panic!("marker op {op}"),
            }
            updates += 1;
            continue;
        }
        let Some(eh) = all.iter_mut().find(|h| h.format.id == e.type_()) else {
            continue;
        };
        let pid = e.i32_at(eh.format.field("common_pid").unwrap());
        let comm = comms.at(pid, e.ts);
        let cx = RecordCtx {
            cpu: e.cpu,
            comm: &comm[..comm.iter().position(|&c| c == 0).unwrap_or(16)],
        };
        for ((t, def, map), filter) in eh.hists.iter_mut().zip(&eh.filters) {
            let passes = filter.as_ref().is_none_or(|f| f.matches(&e.data, &cx));
            if !t.paused && passes {
                map.update(def, &e.data, e.cpu, &|| comm);
            }
        }
    }
    // Every trigger's `cont` and final `pause`, and the fork triggers' pause, clear and cont.
    assert_eq!(updates, 2 * n_defs + 3, "the update markers");

    let syms = symbols();
    let syscalls: HashMap<u64, String> = text("syscalls")
        .lines()
        .map(|l| {
            let (nr, name) = l.split_once(' ').unwrap();
            (nr.parse().unwrap(), name.to_string())
        })
        .collect();
    let syscall = |nr: u64| syscalls.get(&nr).map(String::as_str);
    let names = HistNames {
        symbols: &syms,
        syscall: &syscall,
    };
    for eh in &all {
        let dir = format!("events/{}/{}", eh.format.system, eh.format.name);
        // The kernel lists the triggers in its own order; each line must be one of ours.
        let kernel_triggers = text(&format!("{dir}/trigger"));
        let mut order = Vec::new();
        for line in kernel_triggers.lines() {
            let i = eh
                .hists
                .iter()
                .position(|h| h.0.to_string() == format!("{line}\n"))
                .unwrap_or_else(|| panic!("{dir}: no trigger of ours prints {line:?}"));
            order.push(i);
        }
        assert_eq!(order.len(), eh.hists.len(), "{dir}: trigger count");
        let mut got = String::new();
        for (n, &i) in order.iter().enumerate() {
            let (t, def, map) = &eh.hists[i];
            write_hist(&mut got, n, t, def, map, &names).unwrap();
        }
        let want = text(&format!("{dir}/hist"));
        if got != want {
            for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
                assert_eq!(g, w, "{dir}/hist: first difference at line {}", i + 1);
            }
            panic!(
                "{dir}/hist: got {} lines, want {}",
                got.lines().count(),
                want.lines().count()
            );
        }
    }
}
