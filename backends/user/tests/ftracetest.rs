//! The kernel's own tracefs test suite, `ftracetest` (Linux 6.12's
//! `tools/testing/selftests/ftrace`, from Debian's `linux-source-6.12`), run against the live
//! mount (`ftrace record --mount`) of `tests/programs/kernel_names.c`, a program that defines
//! and keeps calling the functions the tests name (`schedule`, the lock functions, ...), and of
//! the suite itself: kernel_names runs the suite as its child, with
//! `tests/programs/kernel_names_lib.c` preloaded after the agent, so the suite's own shell is a
//! traced process of the tree whose forks, execs and writes go through functions named like the
//! kernel's (`kernel_clone`, `do_execve`, `ksys_write`, `vfs_write`, `proc_reg_write`): the
//! tests that filter on the shell's own pid (`read PID _ < /proc/self/stat`) run unmodified.
//! The library (which kernel_names links too) defines the kernel's events the suite enables,
//! filters and triggers on (`tests/programs/kernel_events.h`, with `ftrace/tracepoint.h` in
//! Linux 6.12's layouts: the sched formats are checked against the 6.12 goldens) and fires
//! them where the kernel would for each process of the tree: `sched_process_fork` at a fork,
//! `sched_process_exit` and the parent's `signal_generate` (SIGCHLD) at an exit,
//! `sched_switch` / `sched_waking` / `sched_wakeup` around a call that blocks (a wait, a
//! sleep), `signal_generate` at a kill, `kmem:kmalloc` at a malloc, `raw_syscalls:sys_exit`
//! as the system calls it makes return; kernel_names' workers fire the sched ones as they
//! block and `signal_generate` as they signal each other.
//!
//! The groups `test.d/00basic` and `test.d/ftrace` run in full in one test, `test.d/event` and
//! `test.d/trigger` in another (a mount of their own), but for the tests that act on the
//! machine's own kernel ([`NOT_RUN`]). Every result is checked against the lists below
//! ([`KNOWN_FAILURES`] and [`ABSENT_FEATURES`], [`EVENT_KNOWN_FAILURES`] and
//! [`EVENT_ABSENT_FEATURES`]): a test outside the known failures that fails, a test outside
//! the absent features that is UNSUPPORTED, or a listed test that now passes fails the test,
//! so the lists only shrink and always say why. Needs root (ftracetest refuses otherwise), gcc, clang, FUSE and
//! `/usr/src/linux-source-6.12.tar.xz` (`cargo xtask test` installs `linux-source-6.12`);
//! nothing is skipped when they are missing: it fails. The suite is extracted once into the
//! target directory.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The kernel source tarball `linux-source-6.12` installs.
const KERNEL_TARBALL: &str = "/usr/src/linux-source-6.12.tar.xz";

/// The suite's directory inside the tarball.
const SUITE: &str = "tools/testing/selftests/ftrace";

/// Tests not run: (file, why).
const NOT_RUN: &[(&str, &str)] = &[
    (
        "func_hotplug.tc",
        "takes a CPU of the machine running the test offline",
    ),
    (
        "func_mod_trace.tc",
        "loads a module into the machine's kernel (modprobe)",
    ),
    (
        "trace_printk.tc",
        "loads a module into the machine's kernel (modprobe trace-printk)",
    ),
];

/// The kernel's events kernel_names.c declares that have a 6.12 format golden: (system,
/// name, the golden's id). Their format files must equal the goldens but for the id line.
const KERNEL_EVENTS: &[(&str, &str, u32)] = &[
    ("sched", "sched_switch", 310),
    ("sched", "sched_wakeup", 312),
];

/// Tests whose feature the live mount lacks, so the test says UNSUPPORTED: (result line's
/// name, what is missing). ftracetest names the missing file or tracer in its log.
const ABSENT_FEATURES: &[(&str, &str)] = &[
    (
        "Test tracefs GID mount option",
        "mount options (README has no `[gid=<gid>]`)",
    ),
    ("Snapshot and tracing setting", "`snapshot`"),
    ("Snapshot and tracing_cpumask", "`snapshot`"),
    (
        "Test file and directory ownership changes for eventfs",
        "mount options (`[gid=<gid>]`)",
    ),
    ("(instance)  Snapshot and tracing setting", "`snapshot`"),
    ("(instance)  Snapshot and tracing_cpumask", "`snapshot`"),
    (
        "ftrace - function graph filters with stack tracer",
        "`stack_trace`",
    ),
    ("ftrace - Max stack tracer", "`stack_trace`"),
    (
        "ftrace - function graph filters (2)",
        "function_graph in instances (fgraph-multi.tc)",
    ),
    (
        "(instance)  ftrace - function pid notrace filters",
        "the function tracer in instances (no `set_ftrace_notrace_pid` there)",
    ),
    (
        "(instance)  ftrace - function pid filters",
        "the function tracer in instances (no `set_ftrace_pid` there)",
    ),
    (
        "(instance)  ftrace - stacktrace filter command",
        "the function tracer in instances (no `set_ftrace_filter` there)",
    ),
    (
        "(instance)  ftrace - test for function event triggers",
        "the function tracer in instances (no `set_ftrace_filter` there)",
    ),
    (
        "(instance)  ftrace - test for function traceon/off triggers",
        "the function tracer in instances (no `set_ftrace_filter` there)",
    ),
];

/// Tests that fail today, each with the missing piece (the backends/user README lists them
/// too). Each is refused with an errno at the write the test needs, never pretended, or fails
/// for the reason given.
const KNOWN_FAILURES: &[(&str, &str)] = &[];

/// The `event` and `trigger` groups' tests whose feature the live mount lacks (UNSUPPORTED).
const EVENT_ABSENT_FEATURES: &[(&str, &str)] = &[
    (
        "(instance)  event tracing - enable/disable with event level files",
        "events in instances (no `events/sched` there)",
    ),
    (
        "(instance)  event tracing - enable/disable with subsystem level files",
        "events in instances (no `events/sched` there)",
    ),
    (
        "(instance)  event tracing - restricts events based on pid notrace filtering",
        "`set_event_notrace_pid`",
    ),
    (
        "(instance)  event tracing - restricts events based on pid",
        "`set_event_pid`",
    ),
    (
        "event trigger - test snapshot-trigger",
        "`snapshot` (the live mount has no snapshot buffer)",
    ),
    (
        "trace_marker trigger - test histogram trigger",
        "`events/ftrace/print/trigger` (no triggers on the trace_marker event)",
    ),
    (
        "trace_marker trigger - test snapshot trigger",
        "`events/ftrace/print/trigger` (no triggers on the trace_marker event)",
    ),
    (
        "trace_marker trigger - test histogram with synthetic event against kernel event",
        "`events/ftrace/print/trigger` (no triggers on the trace_marker event)",
    ),
    (
        "trace_marker trigger - test histogram with synthetic event",
        "`events/ftrace/print/trigger` (no triggers on the trace_marker event)",
    ),
    (
        "(instance)  event trigger - test event enable/disable trigger",
        "events in instances (no `events/sched` there)",
    ),
    (
        "(instance)  event trigger - test trigger filter",
        "events in instances (no `events/sched` there)",
    ),
    (
        "(instance)  event trigger - test histogram modifiers",
        "events in instances (no `events/sched` there)",
    ),
    (
        "(instance)  event trigger - test histogram trigger",
        "events in instances (no `events/sched` there)",
    ),
    (
        "(instance)  event trigger - test multiple histogram triggers",
        "events in instances (no `events/sched` there)",
    ),
    (
        "(instance)  trace_marker trigger - test histogram trigger",
        "`events/ftrace/print/trigger` (no triggers on the trace_marker event)",
    ),
    (
        "(instance)  trace_marker trigger - test snapshot trigger",
        "`events/ftrace/print/trigger` (no triggers on the trace_marker event)",
    ),
];

/// The `event` and `trigger` groups' tests that fail today, each with the missing piece.
const EVENT_KNOWN_FAILURES: &[(&str, &str)] = &[];

fn target_tmp() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}

/// Held for a whole suite run: the two tests run one after the other. Each suite keeps both
/// cores busy, so side by side they finish no sooner, and each would see the other's load in
/// its timing-sensitive tests. (Side by side they once failed for another reason, now mended:
/// ftracetest takes the first `tracefs` line of /proc/mounts, and both suites could pick the
/// same mount, one's set-up landing in the other's tests; see [`run_suite_in_tree`].)
static SUITE_RUNS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The suite, extracted from the kernel tarball once (kept in the target directory). The
/// tests of this binary run in parallel: one extracts while the others wait for it (they
/// would share the process id the partial directory is named after).
fn suite() -> PathBuf {
    static EXTRACTING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = EXTRACTING.lock().unwrap_or_else(|e| e.into_inner());
    let root = target_tmp().join("ftracetest-linux-6.12");
    let dir = root.join(SUITE);
    if dir.join("ftracetest").exists() {
        return dir;
    }
    assert!(
        Path::new(KERNEL_TARBALL).exists(),
        "{KERNEL_TARBALL} is missing: install Debian's linux-source-6.12 (cargo xtask test does)"
    );
    // Into a fresh directory, renamed into place when complete: a run killed halfway leaves
    // no half-extracted suite behind.
    let part = target_tmp().join(format!("ftracetest-linux-6.12.part{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&part);
    std::fs::create_dir_all(&part).unwrap();
    let st = Command::new("tar")
        .arg("-xJf")
        .arg(KERNEL_TARBALL)
        .arg("-C")
        .arg(&part)
        .arg("--strip-components=1")
        .arg("--wildcards")
        .arg(format!("*/{SUITE}/*"))
        .status()
        .expect("tar");
    assert!(st.success(), "extracting {SUITE} from {KERNEL_TARBALL}");
    if std::fs::rename(&part, &root).is_err() {
        // Another run got there first.
        let _ = std::fs::remove_dir_all(&part);
    }
    assert!(
        dir.join("ftracetest").exists(),
        "no ftracetest in {KERNEL_TARBALL}"
    );
    dir
}

/// The traced program, built with the kernel-style gcc flags, and the library preloaded into
/// the suite's processes (`tests/programs/kernel_names_lib.c`, with call sites).
fn build_target(dir: &Path) -> (PathBuf, PathBuf) {
    (
        common::build_kernel_names(dir),
        common::build_kernel_names_lib(dir),
    )
}

/// Shell quoting of a path.
fn quoted(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

/// How long the whole suite may take.
const SUITE_TIMEOUT: Duration = Duration::from_secs(1500);

/// Runs ftracetest inside the traced tree: `ftrace record --mount MNT -- kernel_names sh
/// run.sh`, where kernel_names keeps calling its functions and runs the script as its child;
/// the script waits for the mount, then runs the suite once per group in `groups` with
/// kernel_names_lib.so preloaded after the agent, so that the suite's own shell is traced.
/// ftracetest finds its tracefs as the first /proc/mounts line naming `tracefs`, so the suite
/// runs in a private mount namespace where every other tracefs (a real kernel tracefs, or
/// another tool's mount, however late it was mounted) is unmounted when the suite starts.
/// Returns each group's output.
fn run_suite_in_tree(suite: &Path, dir: &Path, groups: &[(&str, Vec<PathBuf>)]) -> Vec<String> {
    let (prog, lib) = build_target(dir);
    let mnt = dir.join("tracing");
    std::fs::create_dir_all(&mnt).unwrap();
    // Only this tree's mount is left in the namespace (mount points in /proc/mounts are
    // canonical; this one has no white space to escape).
    let own = mnt.canonicalize().unwrap();
    let mut inner = format!(
        "set -u\nfor m in $(grep tracefs /proc/mounts | cut -d' ' -f2); do\n  \
         [ \"$m\" = {} ] || umount -l \"$m\" || exit 1\ndone\n",
        quoted(&own)
    );
    inner.push_str(&format!(
        "export LD_PRELOAD=\"$LD_PRELOAD {}\"\ncd {}\n",
        lib.display(),
        quoted(suite)
    ));
    for (group, cases) in groups {
        let out = dir.join(format!("out-{group}"));
        inner.push_str(&format!(
            "./ftracetest -v -l {}",
            quoted(&dir.join(format!("logs-{group}")))
        ));
        for c in cases {
            inner.push(' ');
            inner.push_str(&quoted(c));
        }
        inner.push_str(&format!(
            " > {} 2> {}\n",
            quoted(&out),
            quoted(&out.with_extension("stderr"))
        ));
    }
    // The formats of the kernel's events the tree declares (kernel_names_lib.c), for the goldens.
    for (system, name, _) in KERNEL_EVENTS {
        inner.push_str(&format!(
            "cat {} > {}\n",
            quoted(&mnt.join(format!("events/{system}/{name}/format"))),
            quoted(&dir.join(format!("format-{name}")))
        ));
    }
    std::fs::write(dir.join("inner.sh"), inner).unwrap();
    let run = format!(
        "while [ ! -e {}/available_tracers ]; do sleep 0.05; done\n\
         exec unshare --mount --propagation private sh {}\n",
        quoted(&mnt),
        quoted(&dir.join("inner.sh"))
    );
    std::fs::write(dir.join("run.sh"), run).unwrap();
    // The tool's messages go to a file (a pipe nobody reads could fill and stop it).
    let log = dir.join("ftrace.log");
    let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .current_dir(dir)
        .args(["record", "-t", "function", "--mount"])
        .arg(&mnt)
        .arg("-o")
        .arg(dir.join("rec"))
        .arg("--")
        .arg(&prog)
        .arg("sh")
        .arg(dir.join("run.sh"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let st = loop {
        if let Some(st) = tool.try_wait().unwrap() {
            break st;
        }
        if start.elapsed() > SUITE_TIMEOUT {
            // SAFETY: signalling our own child (it unmounts and passes the signal on).
            unsafe { libc::kill(tool.id() as libc::pid_t, libc::SIGTERM) };
            let _ = tool.wait();
            panic!(
                "the suite did not finish within {SUITE_TIMEOUT:?}; logs in {}",
                dir.display()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let tool_log = std::fs::read_to_string(&log).unwrap_or_default();
    groups
        .iter()
        .map(|(group, _)| {
            let out = dir.join(format!("out-{group}"));
            let text = std::fs::read_to_string(&out).unwrap_or_default();
            let err = std::fs::read_to_string(out.with_extension("stderr")).unwrap_or_default();
            assert!(
                text.contains("# of passed:"),
                "ftracetest ({group}) did not finish (ftrace: {st}): {text}\n{err}\n{tool_log}"
            );
            text
        })
        .collect()
}

/// The results of an ftracetest output: test name → result (`PASS`, `FAIL`, ...). A name
/// that two tests share (fgraph-filter.tc and fgraph-multi.tc) gets ` (2)` the second time.
fn results(out: &str) -> BTreeMap<String, String> {
    let mut r: BTreeMap<String, String> = BTreeMap::new();
    for l in out.lines() {
        // "[12] (instance)  trace_pipe and trace_marker\t[PASS]"
        let Some(rest) = l.strip_prefix('[') else {
            continue;
        };
        let Some((num, rest)) = rest.split_once("] ") else {
            continue;
        };
        if num.parse::<u32>().is_err() {
            continue;
        }
        let Some((name, res)) = rest.rsplit_once('\t') else {
            continue;
        };
        let res = res.trim().trim_start_matches('[').trim_end_matches(']');
        let mut name = name.trim_end().to_string();
        let mut k = 1;
        while r.contains_key(&name) {
            k += 1;
            name = format!("{} ({k})", name.trim_end_matches(&format!(" ({})", k - 1)));
        }
        r.insert(name, res.to_string());
    }
    r
}

fn listed(list: &[(&str, &str)], name: &str) -> bool {
    list.iter().any(|(n, _)| *n == name)
}

/// A fresh run directory for one test function.
fn run_dir(name: &str) -> PathBuf {
    let dir = target_tmp().join(format!("ftracetest-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The test files of `groups` (but for [`NOT_RUN`]), sorted, per group.
fn group_cases<'a>(suite: &Path, groups: &[&'a str]) -> Vec<(&'a str, Vec<PathBuf>)> {
    groups
        .iter()
        .map(|&group| {
            let mut cases: Vec<PathBuf> = std::fs::read_dir(suite.join("test.d").join(group))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| p.extension().is_some_and(|e| e == "tc"))
                .filter(|p| {
                    let f = p.file_name().unwrap().to_string_lossy();
                    !NOT_RUN.iter().any(|(n, _)| *n == f)
                })
                .collect();
            cases.sort();
            (group, cases)
        })
        .collect()
}

/// Checks every group's results against the lists: a PASS must be on neither, an
/// UNSUPPORTED on `absent`, anything else on `known`. Panics with every mismatch; removes
/// `dir` when all hold.
fn check_results(
    groups: &[(&str, Vec<PathBuf>)],
    outs: &[String],
    absent: &[(&str, &str)],
    known: &[(&str, &str)],
    dir: &Path,
) {
    let mut report = String::new();
    let mut bad = Vec::new();
    for ((group, _), out) in groups.iter().zip(outs) {
        let res = results(out);
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (name, r) in &res {
            *counts.entry(r.as_str()).or_default() += 1;
            let ok = match r.as_str() {
                "PASS" => !listed(known, name) && !listed(absent, name),
                "UNSUPPORTED" => listed(absent, name),
                _ => listed(known, name),
            };
            if !ok {
                bad.push(format!("{group}: {name}: {r}"));
            }
        }
        report.push_str(&format!("{group}: {counts:?}\n"));
        assert!(!res.is_empty(), "{group}: no results in {out}");
    }
    eprintln!("{report}");
    assert!(
        bad.is_empty(),
        "unexpected results (a pass of a listed test: shorten the list):\n{}\n{report}\nlogs in {}",
        bad.join("\n"),
        dir.display()
    );
    // Kept only when something failed.
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn kernel_ftracetest_passes_on_the_live_mount() {
    // SAFETY: no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "ftracetest must run as root");
    let _one_suite_at_a_time = SUITE_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let suite = suite();
    let dir = run_dir("run");
    let groups = group_cases(&suite, &["00basic", "ftrace"]);
    let outs = run_suite_in_tree(&suite, &dir, &groups);
    for (system, name, golden_id) in KERNEL_EVENTS {
        let golden = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/reference/ftrace-6.12.117/02-files")
            .join(format!("events__{system}__{name}__format.txt"));
        let golden = std::fs::read_to_string(&golden).unwrap();
        let served = std::fs::read_to_string(dir.join(format!("format-{name}"))).unwrap();
        let id = served
            .lines()
            .find_map(|l| l.strip_prefix("ID: "))
            .unwrap_or_else(|| panic!("{system}:{name}: no id in {served:?}"));
        assert_eq!(
            served,
            golden.replace(&format!("ID: {golden_id}\n"), &format!("ID: {id}\n")),
            "{system}:{name}'s format"
        );
    }
    check_results(&groups, &outs, ABSENT_FEATURES, KNOWN_FAILURES, &dir);
}

#[test]
fn kernel_ftracetest_event_and_trigger_groups_on_the_live_mount() {
    // SAFETY: no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "ftracetest must run as root");
    let _one_suite_at_a_time = SUITE_RUNS.lock().unwrap_or_else(|e| e.into_inner());
    let suite = suite();
    let dir = run_dir("events");
    let groups = group_cases(&suite, &["event", "trigger"]);
    let outs = run_suite_in_tree(&suite, &dir, &groups);
    check_results(
        &groups,
        &outs,
        EVENT_ABSENT_FEATURES,
        EVENT_KNOWN_FAILURES,
        &dir,
    );
}
