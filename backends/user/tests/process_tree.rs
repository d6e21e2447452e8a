//! Tracing a process tree: `ftrace record -- sh -c '...'` records every process the shell
//! starts (the agent is inherited through `LD_PRELOAD`; a forked child gets rings of its own,
//! an exec'd image its own recording directory), and `ftrace report` names each one's threads
//! (`comm-pid`). The counts are checked against each program's own counters.
//!
//! The live mount over a tree: every control write applies to every process of the tree
//! (call sites resolved by name in each), `trace` merges them, and `set_ftrace_pid` with
//! `options/function-fork` follows forks as the kernel does.
//!
//! Needs gcc, clang, FUSE and `sh`; nothing is skipped when they are missing: it fails.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use ftrace_core::EventId;
use ftrace_user::recording::Recording;

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("process-tree-{name}"));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `examples/c/calls.c` with NOP call sites (`-fpatchable-function-entry=5`).
fn build_calls(dir: &Path) -> PathBuf {
    let out = dir.join("calls");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/calls.c");
    let st = Command::new("gcc")
        .args([
            "-O2",
            "-g",
            "-pthread",
            "-fpatchable-function-entry=5",
            "-o",
        ])
        .arg(&out)
        .arg(src)
        .arg("-ldl")
        .output()
        .expect("gcc");
    assert!(
        st.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

/// A program's own counters: its `calls <function> <n>` lines.
fn own_counts(text: &str) -> BTreeMap<String, u64> {
    assert!(text.contains("result ok"), "{text}");
    text.lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "calls").then_some(())?;
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

/// The function events of process `pid`, per function name.
fn traced_counts(rec: &Recording, pid: u32) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for e in rec.merged() {
        if e.pid != pid || e.id() != Some(EventId::Function) {
            continue;
        }
        if let Some(name) = rec.event_symbol(e) {
            *m.entry(name.to_string()).or_insert(0) += 1;
        }
    }
    m
}

fn read_pid(path: &Path) -> u32 {
    std::fs::read_to_string(path)
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_shell_and_the_programs_it_starts_are_recorded_apart() {
    let dir = scratch("sh");
    build_calls(&dir);
    let rec_dir = dir.join("rec");
    // Two programs in the background (the shell forks, the child execs) and one in the
    // foreground; each writes its counters and the shell writes the pids it started.
    let script = "./calls 2 100 > a.out & echo $! > a.pid; \
                  ./calls 1 70 > b.out & echo $! > b.pid; \
                  ./calls 1 30 > c.out; echo $$ > sh.pid; wait";
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .current_dir(&dir)
        .args(["record", "-t", "function", "-o"])
        .arg(&rec_dir)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // A shell has no call sites of its own, but it starts programs: not refused.
    assert!(!stderr.contains("no call sites"), "{stderr}");
    assert!(stderr.contains(", 0 lost,"), "{stderr}");

    let rec = Recording::read(&rec_dir).unwrap();
    assert_eq!(rec.lost(), 0);
    let shell = read_pid(&dir.join("sh.pid"));
    let (a, b) = (read_pid(&dir.join("a.pid")), read_pid(&dir.join("b.pid")));
    let with_events: BTreeSet<u32> = rec.merged().iter().map(|e| e.pid).collect();
    assert!(!with_events.contains(&shell), "the shell has no sites");
    assert!(with_events.contains(&a) && with_events.contains(&b));
    let others: Vec<u32> = with_events
        .iter()
        .copied()
        .filter(|p| ![a, b].contains(p))
        .collect();
    assert_eq!(others.len(), 1, "the foreground program: {with_events:?}");
    let c = others[0];
    // The shell's own image is recorded (with no events) as well as the children's.
    let pids: BTreeSet<u32> = rec.processes.iter().map(|p| p.pid).collect();
    for p in [shell, a, b, c] {
        assert!(pids.contains(&p), "{p} not in {pids:?}");
    }

    for (pid, file) in [(a, "a.out"), (b, "b.out"), (c, "c.out")] {
        let own = own_counts(&std::fs::read_to_string(dir.join(file)).unwrap());
        let traced = traced_counts(&rec, pid);
        assert!(own.len() >= 5, "{own:?}");
        for (name, n) in &own {
            assert_eq!(
                traced.get(name).copied().unwrap_or(0),
                *n,
                "{file} (pid {pid}): calls of {name}, traced vs counted by the program"
            );
        }
        // Nothing else but `main` (not counted by the program).
        let extra: Vec<&String> = traced
            .keys()
            .filter(|k| !own.contains_key(*k) && *k != "main")
            .collect();
        assert!(extra.is_empty(), "{file}: {extra:?}");
    }

    // `ftrace report` names every thread of every program (`comm-tid`, the kernel's
    // TASK-PID column), and only those.
    let report = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["report", "-i"])
        .arg(&rec_dir)
        .output()
        .unwrap();
    assert!(report.status.success());
    let text = String::from_utf8_lossy(&report.stdout);
    let tasks: BTreeSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    let want: BTreeSet<String> = rec
        .merged()
        .iter()
        .map(|e| format!("calls-{}", e.tid))
        .collect();
    let want: BTreeSet<&str> = want.iter().map(String::as_str).collect();
    assert_eq!(tasks, want);
    // calls 2 ...: a main thread and two workers; the others one worker each.
    assert_eq!(want.len(), 3 + 2 + 2, "{want:?}");
}

/// The live mount of `kernel_names sh script.sh`, the script's shell traced with
/// kernel_names_lib.so preloaded: it writes the control files and leaves what it read in
/// `dir`. Returns the tool's stderr.
fn run_script_in_tree(dir: &Path, script: &str) -> String {
    let prog = common::build_kernel_names(dir);
    let lib = common::build_kernel_names_lib(dir);
    let mnt = dir.join("tracing");
    std::fs::create_dir_all(&mnt).unwrap();
    let run = format!(
        "while [ ! -e '{m}/available_tracers' ]; do sleep 0.05; done\n\
         export LD_PRELOAD=\"$LD_PRELOAD {lib}\"\n\
         cd '{m}' && exec sh '{d}/script.sh'\n",
        m = mnt.display(),
        d = dir.display(),
        lib = lib.display()
    );
    std::fs::write(dir.join("run.sh"), run).unwrap();
    std::fs::write(
        dir.join("script.sh"),
        script.replace("$OUT", &dir.display().to_string()),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .current_dir(dir)
        .args(["record", "-t", "function", "--mount"])
        .arg(&mnt)
        .arg("-o")
        .arg(dir.join("rec"))
        .arg("--")
        .arg(&prog)
        .arg("sh")
        .arg(dir.join("run.sh"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    stderr
}

/// The `comm-pid` of each line of a `trace` text.
fn tasks_of(trace: &str) -> Vec<String> {
    trace
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

#[test]
fn the_live_mount_applies_to_every_process_and_follows_forks() {
    let dir = scratch("mount");
    // `yield` as ftracetest's: a child that execs.
    let script = r#"
read PID _ < /proc/self/stat
echo $PID > $OUT/pid
echo 0 > tracing_on
echo 'kernel_clone do_execve* ksys_write' > set_ftrace_filter
echo function > current_tracer
echo > trace
# No pid filter: the shell and the child it starts are traced.
echo 1 > tracing_on
sh -c 'echo child $$ > '$OUT'/child1'
echo 0 > tracing_on
cat trace > $OUT/all
echo > trace
# The shell only: its child is not traced.
echo $PID > set_ftrace_pid
echo nofunction-fork > trace_options
echo 1 > tracing_on
sh -c 'echo child $$ > '$OUT'/child2'
echo 0 > tracing_on
cat trace > $OUT/nofork
echo > trace
# With function-fork: the child joins the list, and leaves it when it exits.
echo function-fork > trace_options
echo 1 > tracing_on
sh -c 'echo child $$ > '$OUT'/child3'
echo 0 > tracing_on
cat trace > $OUT/fork
echo nofunction-fork > trace_options
# Bad pids: the kernel's errno, nothing changed.
# (dash says "I/O error" for any failed write of its builtin echo: /bin/echo names the errno)
/bin/echo abc >> set_ftrace_pid 2> $OUT/bad || true
cat set_ftrace_pid > $OUT/pids
echo > set_ftrace_pid
echo nop > current_tracer
"#;
    let stderr = run_script_in_tree(&dir, script);
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
    let pid = read("pid").trim().to_string();
    let child = |f: &str| {
        read(f)
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_string()
    };
    let me = format!("sh-{pid}");

    let all = read("all");
    let tasks = tasks_of(&all);
    let c1 = format!("sh-{}", child("child1"));
    assert!(tasks.contains(&me), "the shell: {all}\n{stderr}");
    assert!(tasks.contains(&c1), "its child {c1}: {all}");
    // The shell's fork, the child's write and exec, through the library's functions.
    for f in ["kernel_clone", "ksys_write", "do_execve"] {
        assert!(all.contains(f), "{f}: {all}");
    }

    let nofork = read("nofork");
    let tasks = tasks_of(&nofork);
    assert!(tasks.contains(&me), "{nofork}");
    assert!(tasks.iter().all(|t| *t == me), "only the shell: {nofork}");
    assert!(nofork.contains("kernel_clone"), "{nofork}");

    let fork = read("fork");
    let tasks = tasks_of(&fork);
    let c3 = format!("sh-{}", child("child3"));
    assert!(tasks.contains(&me), "{fork}");
    assert!(tasks.contains(&c3), "the child {c3} followed: {fork}");
    assert!(
        tasks.iter().all(|t| *t == me || *t == c3),
        "the shell and its child only: {fork}"
    );

    assert!(read("bad").contains("Invalid argument"), "{}", read("bad"));
    assert_eq!(read("pids").trim(), pid, "a bad write changes nothing");
}

/// The function profiler over a tree: every process counts its own calls (an exec'd image
/// from its start, a forked child from zero, not from its parent's counts), and
/// `trace_stat/function<cpu>` sums them by name. Each `echo` of dash is one `write`, one
/// `ksys_write` call through kernel_names_lib.
#[test]
fn the_function_profiler_counts_every_process_of_the_tree() {
    let dir = scratch("profile");
    let script = r#"
echo nop > current_tracer
echo ksys_write > set_ftrace_filter
echo 1 > function_profile_enabled
echo one > /dev/null
sh -c 'echo two; echo three; echo four' > /dev/null
( echo five; echo six ) > /dev/null
echo 0 > function_profile_enabled
cat trace_stat/function* > $OUT/stat
echo 1 > function_profile_enabled
echo 0 > function_profile_enabled
cat trace_stat/function* > $OUT/stat2
echo > set_ftrace_filter
"#;
    let stderr = run_script_in_tree(&dir, script);
    let hits = |f: &str| -> u64 {
        let text = std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        text.lines()
            .filter_map(|l| {
                let mut it = l.split_whitespace();
                (it.next()? == "ksys_write").then_some(())?;
                it.next()?.parse::<u64>().ok()
            })
            .sum()
    };
    // one (the shell), two to four (an exec'd image), five and six (a forked subshell, whose
    // copy of the shell's count of one is not counted again), and the write of the `0` itself.
    assert_eq!(hits("stat"), 1 + 3 + 2 + 1, "{stderr}");
    // On again: a fresh profile (the write of the `0` alone).
    assert_eq!(hits("stat2"), 1, "{stderr}");
}
