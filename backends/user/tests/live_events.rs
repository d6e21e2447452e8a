//! Trace events a C program declares with `ftrace/tracepoint.h`, on the live mount
//! (`ftrace record --mount`): listed in `available_events` with the kernel's `format` file,
//! enabled and disabled through `events/<sys>/<ev>/enable`, filtered (`echo 'value > 15' >
//! filter`), triggered (`traceoff:1 if value == 18`, run in the program when the event fires),
//! and printed in `trace` through their print formats.
//!
//! Needs gcc, `/dev/fuse` and `fusermount3` (installed by `cargo xtask test`); nothing here is
//! skipped when they are missing. The program fires one round of events per line written to
//! its stdin, so the test decides when events happen; every wait is bounded.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

struct Mounted {
    /// The traced program's file.
    prog: PathBuf,
    tool: Child,
    stdin: Option<ChildStdin>,
    mnt: PathBuf,
}

impl Mounted {
    /// Mounts the program in a directory of the test's own (`name`).
    fn start(name: &str) -> Mounted {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("ftrace-live-events-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
        let inc = format!("-I{}", include.display());
        let prog = common::build_kernel_style_with(&dir, "events", &[&inc]);
        let mnt = dir.join("tracing");
        std::fs::create_dir(&mnt).unwrap();
        let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
            .current_dir(&dir)
            .args(["record", "-t", "function", "--mount"])
            .arg(&mnt)
            .arg("-o")
            .arg(dir.join("rec"))
            .arg("--")
            .arg(&prog)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = tool.stdin.take();
        let m = Mounted {
            prog,
            tool,
            stdin,
            mnt,
        };
        wait_for("the tracefs mount", || {
            m.mnt.join("available_events").exists().then_some(())
        });
        m
    }

    fn read(&self, f: &str) -> String {
        std::fs::read_to_string(self.mnt.join(f)).unwrap_or_else(|e| panic!("reading {f}: {e}"))
    }

    fn write(&self, f: &str, text: &str) {
        std::fs::write(self.mnt.join(f), text).unwrap_or_else(|e| panic!("writing {f}: {e}"));
    }

    /// The traced program's pid (the tool's only child).
    fn tool_child_pid(&self) -> u32 {
        let children = std::fs::read_to_string(format!(
            "/proc/{}/task/{}/children",
            self.tool.id(),
            self.tool.id()
        ))
        .unwrap();
        children.split_whitespace().next().unwrap().parse().unwrap()
    }

    /// One round of events in the program.
    fn round(&mut self) {
        let s = self.stdin.as_mut().unwrap();
        s.write_all(b"go\n").unwrap();
        s.flush().unwrap();
    }

    /// Appends `text` to `f` (`>>`: no truncating open, which clears a trigger file).
    fn append(&self, f: &str, text: &str) {
        std::fs::OpenOptions::new()
            .append(true)
            .open(self.mnt.join(f))
            .and_then(|mut w| w.write_all(text.as_bytes()))
            .unwrap_or_else(|e| panic!("appending to {f}: {e}"));
    }

    /// Runs round `n` and waits until it is over (its `round_done` entry is in `trace`).
    fn finish_round(&mut self, n: usize) {
        self.round();
        wait_for("the round to end", || {
            (self.read("trace").matches(" round_done <-main").count() >= n).then_some(())
        });
    }

    /// The event lines of `trace`, as (event name, body).
    fn lines(&self) -> Vec<(String, String)> {
        self.read("trace")
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (_, rest) = l.split_once("]  ").or_else(|| l.split_once("] "))?;
                let (_, ev) = rest.split_once(": ")?;
                let (name, body) = ev.split_once(": ")?;
                Some((name.to_string(), body.to_string()))
            })
            .collect()
    }
}

impl Mounted {
    /// Ends the program (its input closed: it leaves its loop) and waits for the tool:
    /// `ftrace report` of the recording then, and where the recording is.
    fn end(self) -> (String, PathBuf) {
        let rec = self.mnt.parent().unwrap().join("rec");
        drop(self);
        let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
            .args(["report", "-i"])
            .arg(&rec)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        (String::from_utf8(out.stdout).unwrap(), rec)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.tool.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.tool.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.tool.wait();
    }
}

#[test]
fn program_events_enable_filter_and_print() {
    let mut m = Mounted::start("print");
    let avail = m.read("available_events");
    assert!(avail.lines().any(|l| l == "demo:demo_value"), "{avail}");
    assert!(avail.lines().any(|l| l == "demo:demo_round"), "{avail}");
    let format = m.read("events/demo/demo_value/format");
    let id: u16 = m.read("events/demo/demo_value/id").trim().parse().unwrap();
    assert_eq!(
        format,
        format!(
            "name: demo_value\nID: {id}\nformat:\n\
             \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
             \tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
             \tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
             \tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
             \tfield:unsigned long value;\toffset:8;\tsize:8;\tsigned:0;\n\
             \tfield:int delta;\toffset:16;\tsize:4;\tsigned:1;\n\
             \tfield:char label[16];\toffset:20;\tsize:16;\tsigned:0;\n\n\
             print fmt: \"value=%lu delta=%d label=%s\", REC->value, REC->delta, REC->label\n"
        )
    );

    // Off: a round records nothing (its function entries, traced, say when it ran). Then
    // demo_value filtered, and demo_round, on.
    m.round();
    wait_for("the first round", || {
        m.read("trace")
            .contains(" fire_values <-main")
            .then_some(())
    });
    assert!(m.lines().is_empty(), "{:?}", m.lines());
    m.write("events/demo/demo_value/filter", "value > 15\n");
    m.write("events/demo/demo_value/enable", "1\n");
    m.write("events/demo/demo_round/enable", "1\n");
    assert_eq!(m.read("events/demo/enable"), "1\n");
    m.round();
    let lines = wait_for("the first round's events", || {
        let l = m.lines();
        l.iter().any(|(n, _)| n == "demo_round").then_some(l)
    });
    let want: Vec<(String, String)> = (16..=20)
        .map(|v| {
            (
                "demo_value".to_string(),
                format!("value={v} delta={} label=v{v}", v - 10),
            )
        })
        .chain([("demo_round".to_string(), "round=2".to_string())])
        .collect();
    assert_eq!(lines, want, "the right lines only, in order");

    // demo_value off: the next round adds only its demo_round line.
    m.write("events/demo/demo_value/enable", "0\n");
    m.round();
    let lines = wait_for("the second round's events", || {
        let l = m.lines();
        (l.iter().filter(|(n, _)| n == "demo_round").count() == 2).then_some(l)
    });
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert_eq!(lines[6], ("demo_round".to_string(), "round=3".to_string()));

    // A trigger runs in the program when the event fires: `traceoff:1 if value == 18` on the
    // (hard-disabled, so soft-enabled) demo_value stops tracing in round 4 before its
    // demo_round; after `echo 1 > tracing_on`, round 5's demo_round is recorded again.
    m.write(
        "events/demo/demo_value/trigger",
        "traceoff:1 if value == 18\n",
    );
    assert_eq!(m.read("events/demo/demo_value/enable"), "0*\n");
    m.round();
    wait_for("traceoff to fire", || {
        (m.read("tracing_on") == "0\n").then_some(())
    });
    assert_eq!(
        m.read("events/demo/demo_value/trigger"),
        "traceoff:count=0 if value == 18\n"
    );
    m.write("tracing_on", "1\n");
    m.round();
    let lines = wait_for("round 5's event", || {
        let l = m.lines();
        (l.iter().filter(|(n, _)| n == "demo_round").count() == 3).then_some(l)
    });
    assert_eq!(lines.len(), 8, "{lines:?}");
    assert_eq!(lines[7], ("demo_round".to_string(), "round=5".to_string()));

    // A program event named like a kernel one, with the kernel's layout, takes the place of
    // the listed `sched` format: the same format file as Linux 6.12's but for its id.
    let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/reference/ftrace-6.12.117/02-files")
        .join("events__sched__sched_wakeup__format.txt");
    let golden = std::fs::read_to_string(&golden).unwrap();
    let id: u16 = m
        .read("events/sched/sched_wakeup/id")
        .trim()
        .parse()
        .unwrap();
    assert!(id >= 1024, "the program's event, not the listed one ({id})");
    assert_eq!(
        m.read("events/sched/sched_wakeup/format"),
        golden.replace("ID: 312\n", &format!("ID: {id}\n"))
    );
    m.write("events/sched/sched_wakeup/enable", "1\n");
    m.round();
    let lines = wait_for("round 6's events", || {
        let l = m.lines();
        (l.iter().filter(|(n, _)| n == "demo_round").count() == 4).then_some(l)
    });
    let pid = m.tool_child_pid();
    assert_eq!(
        lines[8..],
        [
            (
                "sched_wakeup".to_string(),
                format!("comm=events pid={pid} prio=120 target_cpu=000")
            ),
            ("demo_round".to_string(), "round=6".to_string())
        ]
    );
}

#[test]
fn set_event_pid_records_only_the_listed_threads_events() {
    let mut m = Mounted::start("pid");
    let pid = m.tool_child_pid();
    // The main thread's id is the pid; 1 is a thread that never fires an event here.
    assert_eq!(m.read("set_event_pid"), "");
    m.write("events/demo/demo_round/enable", "1\n");
    m.write("set_event_pid", "1\n");
    m.finish_round(1);
    assert!(m.lines().is_empty(), "{:?}", m.lines());

    // Listed: recorded. The list reads back as written.
    std::fs::OpenOptions::new()
        .append(true)
        .open(m.mnt.join("set_event_pid"))
        .and_then(|mut f| f.write_all(format!("{pid}\n").as_bytes()))
        .unwrap();
    let mut want = [1, pid];
    want.sort_unstable();
    assert_eq!(
        m.read("set_event_pid"),
        format!("{}\n{}\n", want[0], want[1])
    );
    m.finish_round(2);
    assert_eq!(
        m.lines(),
        [("demo_round".to_string(), "round=2".to_string())]
    );

    // In set_event_notrace_pid too: left out. Both cleared: recorded again.
    m.write("set_event_notrace_pid", &format!("{pid}\n"));
    m.finish_round(3);
    // Only set_event_notrace_pid: still left out.
    m.write("set_event_pid", "\n");
    m.finish_round(4);
    assert_eq!(m.lines().len(), 1, "{:?}", m.lines());
    m.write("set_event_notrace_pid", "\n");
    m.finish_round(5);
    assert_eq!(
        m.lines()[1..],
        [("demo_round".to_string(), "round=5".to_string())]
    );
}

#[test]
fn hist_trigger_aggregates_program_events_into_the_hist_file() {
    let mut m = Mounted::start("hist");
    let hist = "events/demo/demo_value/hist";
    assert_eq!(m.read(hist), "");
    // On a disabled event the trigger arms it in soft mode: nothing in `trace`, every
    // record aggregated (sorted by value: equal hitcounts would print in the kernel's
    // heapsort order).
    m.write(
        "events/demo/demo_value/trigger",
        "hist:keys=value:vals=hitcount,delta:sort=value if value > 17\n",
    );
    assert_eq!(m.read("events/demo/demo_value/enable"), "0*\n");
    m.finish_round(1);
    m.finish_round(2);
    let table = |state: &str, hits: u32| {
        let row = |v: i32| {
            format!(
                "{{ value: {v:>10} }} hitcount: {hits:>10}  delta: {:>10}\n",
                i64::from(hits) * i64::from(v - 10)
            )
        };
        format!(
            "# event histogram\n#\n# trigger info: \
             hist:keys=value:vals=hitcount,delta:sort=value:size=2048 if value > 17 \
             [{state}]\n#\n\n{}{}{}\nTotals:\n    Hits: {}\n    Entries: 3\n    Dropped: 0\n",
            row(18),
            row(19),
            row(20),
            3 * hits
        )
    };
    assert_eq!(m.read(hist), table("active", 2));
    assert!(m.lines().is_empty(), "{:?}", m.lines());

    // Paused: round 3 is not counted; continued: round 4 is; cleared: empty (appended, as
    // on Linux: `>` would remove the trigger and its table first).
    m.append(
        "events/demo/demo_value/trigger",
        "hist:keys=value:vals=hitcount,delta:sort=value:pause if value > 17\n",
    );
    m.finish_round(3);
    assert_eq!(m.read(hist), table("paused", 2));
    m.append(
        "events/demo/demo_value/trigger",
        "hist:keys=value:vals=hitcount,delta:sort=value:cont if value > 17\n",
    );
    m.finish_round(4);
    assert_eq!(m.read(hist), table("active", 3));
    m.append(
        "events/demo/demo_value/trigger",
        "hist:keys=value:vals=hitcount,delta:sort=value:clear if value > 17\n",
    );
    let cleared = m.read(hist);
    assert!(
        cleared.ends_with("#\n\n\nTotals:\n    Hits: 0\n    Entries: 0\n    Dropped: 0\n"),
        "{cleared}"
    );
}

/// `nm -S`: the address and size of function `name` of the program at `prog`.
fn nm_function(prog: &Path, name: &str) -> (u64, u64) {
    let out = Command::new("nm").arg("-S").arg(prog).output().expect("nm");
    assert!(out.status.success(), "nm failed");
    let text = String::from_utf8(out.stdout).unwrap();
    text.lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            match f[..] {
                [addr, size, "T" | "t", n] if n == name => Some((
                    u64::from_str_radix(addr, 16).unwrap(),
                    u64::from_str_radix(size, 16).unwrap(),
                )),
                _ => None,
            }
        })
        .unwrap_or_else(|| panic!("no {name} in nm's listing:\n{text}"))
}

#[test]
fn hist_sym_keys_print_the_programs_function_names() {
    let mut m = Mounted::start("hist-sym");
    let trigger = "events/calls/demo_call/trigger";
    m.write(trigger, "hist:keys=fn.sym\n");
    m.append(trigger, "hist:keys=fn.sym-offset\n");
    m.finish_round(1);
    m.finish_round(2);
    // The oracle is binutils' reading of the program's symbol table (the program's own
    // functions are not dynamic symbols: the agent reads its file's `.symtab`).
    let (addr, size) = nm_function(&m.prog, "round_done");
    let hist = m.read("events/calls/demo_call/hist");
    let sym = format!(
        "{{ fn: [{addr:x}] {:<45} }} hitcount:          2\n",
        "round_done"
    );
    let sym_offset = format!(
        "{{ fn: [{addr:x}] {:<55} }} hitcount:          2\n",
        format!("round_done+0x0/{size:#x}")
    );
    assert!(hist.contains(&sym), "{hist}");
    assert!(hist.contains(&sym_offset), "{hist}");
}

/// `ftrace export -f FORMAT` of the recording `rec`, beside it (`rec.FORMAT`), which must
/// succeed: what it said on stderr.
fn export(rec: &Path, format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["export", "-f", format, "-i"])
        .arg(rec)
        .arg("-o")
        .arg(rec.with_extension(format))
        .output()
        .unwrap();
    assert!(out.status.success(), "{format}: {out:?}");
    String::from_utf8(out.stderr).unwrap()
}

/// `trace-cmd report` of the trace.dat `dat`, which must succeed.
fn trace_cmd_report(dat: &Path) -> String {
    let out = Command::new("trace-cmd")
        .args(["report", "-i"])
        .arg(dat)
        .output()
        .expect("trace-cmd (installed by .ci/run)");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout).unwrap()
}

/// The `<stack trace>` blocks of `trace`: each block's previous line and its frame names
/// (` => NAME`).
fn stack_traces(text: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut open = false;
    let mut prev = "";
    for l in text.lines() {
        if l.ends_with(": <stack trace>") {
            out.push((prev.to_string(), Vec::new()));
            open = true;
        } else if let (true, Some(f)) = (open, l.strip_prefix(" => ")) {
            out.last_mut().unwrap().1.push(f.to_string());
        } else {
            open = false;
            prev = l;
        }
    }
    out
}

#[test]
fn stacktrace_trigger_records_the_stack_after_the_event() {
    let mut m = Mounted::start("stacktrace");
    let trigger = "events/demo/demo_value/trigger";
    m.append(trigger, "stacktrace:2 if value == 5\n");
    m.write("events/demo/demo_value/enable", "1\n");
    m.finish_round(1);
    let text = m.read("trace");
    let st = stack_traces(&text);
    // One per round (value 5 fires once), right after its event: the function that holds
    // the call site first, then its callers into libc.
    assert_eq!(st.len(), 1, "{text}");
    let (event, frames) = &st[0];
    assert!(
        event.ends_with(" demo_value: value=5 delta=-5 label=v5"),
        "{event}\n{text}"
    );
    assert_eq!(frames[..2], ["fire_values", "main"], "{text}");
    assert!(
        frames.iter().any(|f| f == "__libc_start_main [libc.so.6]"),
        "{frames:?}"
    );
    assert_eq!(frames.last().unwrap(), "_start", "{frames:?}");
    m.finish_round(2);
    assert_eq!(stack_traces(&m.read("trace")).len(), 2);
    // The count is spent: a third round records its events and no stack.
    m.finish_round(3);
    let text = m.read("trace");
    assert_eq!(stack_traces(&text).len(), 2, "{text}");
    assert_eq!(text.matches(" demo_value: ").count(), 60, "{text}");
    let shown = m.read(trigger);
    assert!(
        shown.contains("stacktrace:count=0 if value == 5"),
        "{shown}"
    );

    // Under function_graph the traced frames' return addresses are the return trampoline:
    // the walk still names the real callers.
    m.write("current_tracer", "function_graph\n");
    m.append(trigger, "!stacktrace:0 if value == 5\n");
    m.append(trigger, "stacktrace:1 if value == 7\n");
    m.write("events/demo/demo_round/enable", "1\n");
    m.round();
    let text = wait_for("a stack trace under function_graph", || {
        let text = m.read("trace");
        text.contains("demo_round: round=4").then_some(text)
    });
    let st = stack_traces(&text);
    let (event, frames) = st.last().unwrap();
    assert!(event.contains("demo_value: value=7 "), "{event}\n{text}");
    assert_eq!(frames[..2], ["fire_values", "main"], "{text}");
    assert_eq!(frames.last().unwrap(), "_start", "{frames:?}");

    // The recording (what the buffers held at the end, as `trace` shows it) has it too,
    // after its event, with the same frames.
    let (report, rec) = m.end();
    let recorded = stack_traces(&report);
    assert_eq!(recorded.len(), 1, "{report}");
    let (event, recorded) = &recorded[0];
    assert!(
        event.ends_with(" demo_value: value=7 delta=-3 label=v7"),
        "{event}\n{report}"
    );
    // (A return address outside every symbol the program's files have, libc's static
    // `__libc_start_call_main`, is a number on the mount and its preceding dynamic symbol in
    // the report, whose names come from a kallsyms-style listing: the frames that name a
    // function are the same.)
    assert_eq!(recorded.len(), frames.len(), "{text}\n{report}");
    for (r, f) in recorded.iter().zip(frames) {
        if !f.starts_with("0x") {
            assert_eq!(r, f, "{text}\n{report}");
        }
    }

    // Every export takes it (a `kernel_stack` record has a format: the exports once
    // refused the whole capture), and trace-cmd reads it back from trace.dat with the
    // report's names (`=> NAME (ADDR)`).
    for format in ["trace.dat", "uftrace", "chrome"] {
        export(&rec, format);
    }
    let text = trace_cmd_report(&rec.with_extension("trace.dat"));
    let named: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("=> "))
        .map(|l| l.rsplit_once(" (").map_or(l, |(name, _)| name))
        .collect();
    let in_report: Vec<&str> = recorded
        .iter()
        .map(|f| f.split(" [").next().unwrap())
        .collect();
    assert_eq!(named, in_report, "{text}");
}

/// A `trace_marker_raw` write is a `raw_data` record in the mount's capture: every export
/// takes the capture (they once refused it whole for an id without a built-in format), says
/// what it had no place for, and trace-cmd prints it from trace.dat as the kernel's
/// `raw_data` (the id, then the bytes, padded as the kernel pads them).
#[test]
fn a_raw_marker_exports() {
    let mut m = Mounted::start("raw-marker");
    let mut raw = 7u32.to_ne_bytes().to_vec();
    raw.extend_from_slice(b"hello");
    std::fs::write(m.mnt.join("trace_marker_raw"), &raw).unwrap();
    std::fs::write(m.mnt.join("trace_marker"), "a text marker\n").unwrap();
    m.finish_round(1);
    let (_, rec) = m.end();
    for (format, told) in [
        ("trace.dat", ""),
        (
            "uftrace",
            "ftrace: uftrace.data has no place for 2 records of the capture, left out: \
             print 1, raw_data 1\n",
        ),
        (
            "chrome",
            "ftrace: Chrome JSON has no place for 1 record of the capture, left out: \
             raw_data 1\n",
        ),
    ] {
        assert_eq!(export(&rec, format), told, "{format}");
    }
    let text = trace_cmd_report(&rec.with_extension("trace.dat"));
    let line = text
        .lines()
        .find(|l| l.contains(" raw_data: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.ends_with("# 7 68 65 6c 6c 6f 00 00 00 00 00 00 00 00 00 00 00"),
        "{line}"
    );
}

/// With option `option` set, a round records one stack, right after the one record of the
/// round that ends with `record` (fire_values, then main, up to _start); cleared, the next
/// round's record comes alone.
fn stack_after_one_record_per_round(m: &mut Mounted, option: &str, record: &str) {
    let file = format!("options/{option}");
    m.write(&file, "1\n");
    assert_eq!(m.read(&file), "1\n");
    m.round();
    let text = wait_for("the round's stack", || {
        let text = m.read("trace");
        text.contains("<stack trace>").then_some(text)
    });
    let st = stack_traces(&text);
    assert_eq!(st.len(), 1, "{text}");
    let (event, frames) = &st[0];
    assert!(event.ends_with(record), "{event}\n{text}");
    // The function that holds the call site first, as the `stacktrace` command and trigger
    // record it, then its callers.
    assert_eq!(frames[..2], ["fire_values", "main"], "{text}");
    assert_eq!(frames.last().unwrap(), "_start", "{frames:?}");
    m.write(&file, "0\n");
    m.round();
    let text = wait_for("the second round's record", || {
        let text = m.read("trace");
        (text.lines().filter(|l| l.ends_with(record)).count() == 2).then_some(text)
    });
    assert_eq!(stack_traces(&text).len(), 1, "{text}");
}

/// `func_stack_trace` (the function tracer's option): each traced call's event is followed by
/// its stack, as the kernel's function tracer records it; cleared, calls are recorded alone.
#[test]
fn func_stack_trace_records_each_calls_stack() {
    let mut m = Mounted::start("func-stack");
    m.write("set_ftrace_filter", "fire_values\n");
    stack_after_one_record_per_round(&mut m, "func_stack_trace", " fire_values <-main");
}

/// The `stacktrace` trace option: each recorded trace event is followed by the stack of the
/// function that fired it (the same frames the `stacktrace` trigger records); the function
/// tracer's own events get none (the kernel's option is for events), and cleared, events are
/// recorded alone.
#[test]
fn the_stacktrace_option_records_each_events_stack() {
    let mut m = Mounted::start("stack-option");
    m.write("set_ftrace_filter", "fire_values\n");
    m.write("events/demo/demo_value/filter", "value == 5\n");
    m.write("events/demo/demo_value/enable", "1\n");
    stack_after_one_record_per_round(
        &mut m,
        "stacktrace",
        " demo_value: value=5 delta=-5 label=v5",
    );
}
