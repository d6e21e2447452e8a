//! The kernel's own tracefs test suite, `ftracetest` (Linux 6.12's
//! `tools/testing/selftests/ftrace`, from Debian's `linux-source-6.12`), run against the live
//! mount (`ftrace record --mount`) of `tests/programs/kernel_names.c`, a program that defines
//! and keeps calling the functions the tests name (`schedule`, the lock functions, ...).
//!
//! The groups `test.d/00basic` and `test.d/ftrace` run in full but for the two tests that act
//! on the machine's own kernel ([`NOT_RUN`]). Every result is checked against the lists below:
//! a test outside [`KNOWN_FAILURES`] that fails, a test outside [`ABSENT_FEATURES`] that is
//! UNSUPPORTED, or a listed test that now passes fails this test, so the lists only shrink and
//! always say why. Needs root (ftracetest refuses otherwise), gcc, FUSE and
//! `/usr/src/linux-source-6.12.tar.xz` (`cargo xtask test` installs `linux-source-6.12`);
//! nothing is skipped when they are missing: it fails. The suite is extracted once into the
//! target directory.

mod common;

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
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
    (
        "ftrace - function profiler with function graph tracing",
        "`function_profile_enabled`",
    ),
    ("ftrace - function profiling", "`function_profile_enabled`"),
    (
        "ftrace - function profiler with function tracing",
        "`function_profile_enabled`",
    ),
    ("ftrace - Max stack tracer", "`stack_trace`"),
    (
        "ftrace - function graph filters (2)",
        "function_graph in instances (fgraph-multi.tc)",
    ),
    (
        "(instance)  ftrace - function pid notrace filters",
        "the function tracer in instances",
    ),
    (
        "(instance)  ftrace - function pid filters",
        "the function tracer in instances",
    ),
];

/// Tests that fail today, each with the missing piece (the backends/user README lists them
/// too). Each is refused with an errno at the write the test needs, never pretended, or fails
/// for the reason given.
const KNOWN_FAILURES: &[(&str, &str)] = &[
    (
        "ftrace - function pid filters",
        "set_ftrace_pid names the suite's shell, not a thread of the traced program: nothing traced",
    ),
    (
        "ftrace - function graph print function return value",
        "set_ftrace_pid names the suite's shell, as in `function pid filters`: nothing traced; \
         with the program's `proc_writer` thread in its place the test passes ([`RETVAL_VARIANT`])",
    ),
    (
        "ftrace - test for function event triggers",
        "the sched events cannot be enabled: nothing records them (ENODEV)",
    ),
    (
        "ftrace - test for function traceon/off triggers",
        "the sched events cannot be enabled: nothing records them (ENODEV)",
    ),
    (
        "ftrace - test tracing error log support",
        "needs the `signal:signal_generate` event",
    ),
    (
        "(instance)  ftrace - stacktrace filter command",
        "function commands in instances (EINVAL)",
    ),
    (
        "(instance)  ftrace - test for function event triggers",
        "the sched events cannot be enabled: nothing records them (ENODEV)",
    ),
    (
        "(instance)  ftrace - test for function traceon/off triggers",
        "the sched events cannot be enabled: nothing records them (ENODEV)",
    ),
];

/// `fgraph-retval.tc` as the kernel ships it but for one line: the pid it writes into
/// `set_ftrace_pid` is the thread of the traced program that keeps calling `proc_reg_write`
/// (kernel_names.c's `proc_writer`) instead of the suite's own shell. It must PASS: return values are recorded
/// by the agent and printed by the mount in both of the test's forms.
const RETVAL_VARIANT: (&str, &str) = (
    "test.d/ftrace/fgraph-retval.tc",
    "read PID _ < /proc/self/stat",
);

/// The `proc_writer` thread of the program `tool` (an `ftrace record`) runs.
fn proc_writer_thread(tool: u32) -> u32 {
    let ppid_of = |pid: &str| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat.rsplit_once(')')?
            .1
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let prog = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|p| ppid_of(p) == Some(tool))
        .expect("the traced program");
    std::fs::read_dir(format!("/proc/{prog}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .find(|t| {
            std::fs::read_to_string(format!("/proc/{prog}/task/{t}/comm"))
                .is_ok_and(|c| c.trim() == "proc_writer")
        })
        .and_then(|t| t.parse().ok())
        .expect("the program's proc_writer thread")
}

/// Writes [`RETVAL_VARIANT`] for thread `tid` into `dir`.
fn retval_variant(suite: &Path, dir: &Path, tid: u32) -> PathBuf {
    let (file, line) = RETVAL_VARIANT;
    let text = std::fs::read_to_string(suite.join(file)).unwrap();
    assert_eq!(text.matches(line).count(), 1, "{file} changed: {line:?}");
    let out = dir.join("fgraph-retval-worker.tc");
    std::fs::write(&out, text.replace(line, &format!("PID={tid}"))).unwrap();
    out
}

fn target_tmp() -> &'static Path {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
}

/// The suite, extracted from the kernel tarball once (kept in the target directory).
fn suite() -> PathBuf {
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

/// The traced program, built with the kernel-style gcc flags.
fn build_target(dir: &Path) -> PathBuf {
    common::build_kernel_style(dir, "kernel_names")
}

/// A running `ftrace record --mount`, stopped (SIGTERM: it unmounts) when dropped.
struct Mounted {
    tool: Child,
    _stdin: ChildStdin,
    mnt: PathBuf,
}

impl Mounted {
    fn start(dir: &Path, prog: &Path) -> Mounted {
        let mnt = dir.join("tracing");
        std::fs::create_dir_all(&mnt).unwrap();
        // The tool's messages go to a file (a pipe nobody reads could fill and stop it).
        let log = dir.join("ftrace.log");
        let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
            .current_dir(dir)
            .args(["record", "-t", "function", "--mount"])
            .arg(&mnt)
            .arg("-o")
            .arg(dir.join("rec"))
            .arg("--")
            .arg(prog)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let stdin = tool.stdin.take().unwrap();
        let start = Instant::now();
        while !mnt.join("available_tracers").exists() {
            if let Ok(Some(st)) = tool.try_wait() {
                let err = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("ftrace exited ({st}) before mounting: {err}");
            }
            assert!(start.elapsed() < Duration::from_secs(60), "no mount");
            std::thread::sleep(Duration::from_millis(20));
        }
        Mounted {
            tool,
            _stdin: stdin,
            mnt,
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.tool.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.tool.wait();
    }
}

/// The mount points of /proc/mounts lines that mention `tracefs` (ftracetest takes the first).
fn tracefs_mounts() -> Vec<String> {
    std::fs::read_to_string("/proc/mounts")
        .unwrap()
        .lines()
        .filter(|l| l.contains("tracefs"))
        .filter_map(|l| l.split(' ').nth(1).map(String::from))
        .collect()
}

/// Runs ftracetest on `cases` against `mnt` and returns its output. ftracetest finds its
/// tracefs as the first /proc/mounts line naming `tracefs`; if the machine has another one (a
/// real kernel tracefs), the suite runs in a private mount namespace without it.
fn run_ftracetest(suite: &Path, mnt: &Path, cases: &[PathBuf], logs: &Path) -> String {
    let others: Vec<String> = tracefs_mounts()
        .into_iter()
        .filter(|m| Path::new(m) != mnt)
        .collect();
    let mut script = String::new();
    for m in &others {
        script.push_str(&format!("umount -l '{m}' && "));
    }
    script.push_str("exec ./ftracetest -v -l \"$0\" \"$@\"");
    let mut cmd = if others.is_empty() {
        Command::new("sh")
    } else {
        let mut c = Command::new("unshare");
        c.args(["--mount", "--propagation", "private", "sh"]);
        c
    };
    cmd.current_dir(suite)
        .arg("-c")
        .arg(&script)
        .arg(logs)
        .args(cases)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        // To a file: a second pipe read only after the first could fill and stop the suite.
        .stderr(std::fs::File::create(logs.with_extension("stderr")).unwrap());
    let mut child = cmd.spawn().expect("sh");
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let st = child.wait().unwrap();
    let err = std::fs::read_to_string(logs.with_extension("stderr")).unwrap_or_default();
    assert!(
        out.contains("# of passed:"),
        "ftracetest did not finish ({st}): {out}\n{err}"
    );
    out
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

#[test]
fn kernel_ftracetest_passes_on_the_live_mount() {
    // SAFETY: no preconditions.
    assert_eq!(unsafe { libc::geteuid() }, 0, "ftracetest must run as root");
    let suite = suite();
    let dir = target_tmp().join(format!("ftracetest-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prog = build_target(&dir);
    let m = Mounted::start(&dir, &prog);

    let mut report = String::new();
    let mut bad = Vec::new();
    for group in ["00basic", "ftrace"] {
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
        let out = run_ftracetest(&suite, &m.mnt, &cases, &dir.join(format!("logs-{group}")));
        let res = results(&out);
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for (name, r) in &res {
            *counts.entry(r.as_str()).or_default() += 1;
            let ok = match r.as_str() {
                "PASS" => !listed(KNOWN_FAILURES, name) && !listed(ABSENT_FEATURES, name),
                "UNSUPPORTED" => listed(ABSENT_FEATURES, name),
                _ => listed(KNOWN_FAILURES, name),
            };
            if !ok {
                bad.push(format!("{group}: {name}: {r}"));
            }
        }
        report.push_str(&format!("{group}: {counts:?}\n"));
        assert!(!res.is_empty(), "{group}: no results in {out}");
    }
    let variant = retval_variant(&suite, &dir, proc_writer_thread(m.tool.id()));
    let out = run_ftracetest(&suite, &m.mnt, &[variant], &dir.join("logs-retval"));
    let name = "ftrace - function graph print function return value";
    let got = results(&out).get(name).cloned().unwrap_or_default();
    if got != "PASS" {
        bad.push(format!(
            "fgraph-retval.tc with a thread of the program: {got}"
        ));
    }
    drop(m);
    eprintln!("{report}");
    assert!(
        bad.is_empty(),
        "unexpected results (a pass of a listed test: shorten the list):\n{}\n{report}\nlogs in {}",
        bad.join("\n"),
        dir.display()
    );
    // Kept only when something failed.
    let _ = std::fs::remove_dir_all(&dir);
}
