//! Unwinding through traced frames under function_graph (the agent's `unwind` module): a C++
//! program (built by g++ and by clang++) and a Rust program throw / panic through three
//! traced frames (one of them running a destructor on the way) and catch. Traced, each must
//! behave exactly as untraced (same stdout, same stderr, same exit status; a Rust panic's
//! backtrace names the same frames), every entry must be paired with an exit, and the frames
//! the unwinder skipped must be closed at the catch, before the catch block runs.
//!
//! Needs g++, clang++ and rustc (`RUSTC_BOOTSTRAP=1` for `-Zpatchable-function-entry`);
//! nothing is skipped when one is missing: it fails.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory of the test's own (tests run in parallel; each builds its program there).
fn scratch(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ftrace-unwind")
        .join(test);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn program(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}"))
}

fn build(cmd: &mut Command) {
    let out = cmd.output().expect("compiler");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `text` without the thread ids Rust prints in a panic message (`thread 'main' (1234)`).
fn without_tids(text: &str) -> String {
    text.lines()
        .map(|l| match (l.find("' ("), l.find(") panicked")) {
            (Some(a), Some(b)) if a < b => format!("{}' (TID{}", &l[..a], &l[b..]),
            _ => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `exe args` untraced and under `ftrace live ftrace_args`; checks that the program
/// behaved the same and returns the trace.
fn traced_as_untraced(
    dir: &Path,
    exe: &Path,
    args: &[&str],
    ftrace_args: &[&str],
    env: &[(&str, &str)],
) -> String {
    let untraced = Command::new(exe)
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let mut a = vec!["live", "-t", "function_graph"];
    a.extend_from_slice(ftrace_args);
    a.push("--");
    a.push(exe.to_str().unwrap());
    a.extend_from_slice(args);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ftrace"));
    cmd.args(&a).envs(env.iter().copied()).current_dir(dir);
    // On one CPU: the graph printer then finds every exit in its entry's CPU buffer (an exit
    // that migrated prints as `} /* name */`, as in the kernel, which `balanced` would take
    // for an exit without its entry).
    // SAFETY: no preconditions.
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
    // SAFETY: only sched_setaffinity (async-signal-safe) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let traced: Output = cmd.output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&traced.stdout),
        String::from_utf8_lossy(&traced.stderr),
    );
    assert_eq!(traced.status.code(), untraced.status.code(), "{out}{err}");
    assert!(untraced.status.success(), "{untraced:?}");
    let own = String::from_utf8_lossy(&untraced.stdout);
    assert!(
        out.starts_with(&*own),
        "stdout differs:\n{out}\nuntraced:\n{own}"
    );
    // The tool's own lines end stderr; the program's come first and match.
    let prog_err: String = err
        .lines()
        .filter(|l| !l.starts_with("ftrace: "))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(
        without_tids(&prog_err),
        without_tids(&String::from_utf8_lossy(&untraced.stderr)),
        "stderr differs"
    );
    out[own.len()..].to_string()
}

/// The duration a trace line prints, in microseconds.
fn us(line: &str) -> f64 {
    let left = line.split('|').next().unwrap();
    let v: Vec<&str> = left.split_whitespace().collect();
    assert_eq!(v.last(), Some(&"us"), "no duration: {line}");
    v[v.len() - 2].parse().unwrap()
}

/// The trace's function column, trimmed.
fn calls(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once("|  ").map(|(_, f)| f.trim().to_string()))
        .collect()
}

/// Every entry has its exit: opening lines and closing lines balance, and no exit prints
/// without its entry (`} /* name */`).
fn balanced(calls: &[String]) {
    let mut open = 0i64;
    for c in calls {
        if c.ends_with('{') {
            open += 1;
        } else if c.starts_with('}') {
            assert!(
                !c.contains("/*"),
                "an exit without its entry: {c}\n{calls:#?}"
            );
            open -= 1;
            assert!(open >= 0, "{calls:#?}");
        }
    }
    assert_eq!(open, 0, "entries without exits: {calls:#?}");
}

/// One round of catcher(): the skipped frames (`thrower`, `level3` at the destructor, `level2`
/// and `level1` at the catch) closed before `after_catch` runs.
fn round(name: impl Fn(&str) -> String) -> Vec<String> {
    vec![
        format!("{} {{", name("catcher")),
        format!("{} {{", name("level1")),
        format!("{} {{", name("level2")),
        format!("{} {{", name("level3")),
        format!("{};", name("thrower")),
        "}".into(),
        format!("{};", name("dtor_work")),
        "}".into(),
        "}".into(),
        format!("{};", name("after_catch")),
        "}".into(),
    ]
}

fn expected(rounds: usize, main: &str, name: impl Fn(&str) -> String) -> Vec<String> {
    let mut v = vec![format!("{main} {{")];
    for _ in 0..rounds {
        v.extend(round(&name));
    }
    v.push("}".into());
    v
}

#[test]
fn cpp_exceptions_through_traced_frames() {
    let dir = scratch("cpp");
    let src = program("throw.cpp");
    let builds: [(&str, &str, &[&str]); 2] = [
        (
            "g++",
            "throw-gcc",
            &[
                "-pg",
                "-mfentry",
                "-mrecord-mcount",
                "-mnop-mcount",
                "-fno-pie",
                "-no-pie",
            ],
        ),
        ("clang++", "throw-clang", &["-fpatchable-function-entry=5"]),
    ];
    for (cxx, name, flags) in builds {
        let exe = dir.join(name);
        build(
            Command::new(cxx)
                .args(["-O2", "-g"])
                .args(flags)
                .arg("-o")
                .arg(&exe)
                .arg(&src),
        );
        let rounds = 3;
        let trace = traced_as_untraced(&dir, &exe, &[&rounds.to_string()], &[], &[]);
        let got = calls(&trace);
        balanced(&got);
        let want = expected(rounds, "main()", |f| {
            let arg = if f == "dtor_work" { "" } else { "long" };
            format!("{f}({arg})()")
        });
        assert_eq!(got, want, "{cxx}:\n{trace}");
        closed_at_the_catch(&trace, rounds);
    }
}

/// The skipped frames were closed at the catch, before the catch block's 100 ms sleep:
/// `catcher` lasted at least 100 ms more than `level1` (the exit just before `after_catch`;
/// a Rust panic's message and backtrace are printed while `thrower` runs, so `level1` alone
/// may last longer than the sleep); `rounds` times.
fn closed_at_the_catch(trace: &str, rounds: usize) {
    let lines: Vec<&str> = trace.lines().filter(|l| l.contains(" |  ")).collect();
    let mut seen = 0;
    for (i, l) in lines.iter().enumerate() {
        if l.contains("after_catch") {
            let (level1, catcher) = (us(lines[i - 1]), us(lines[i + 1]));
            assert!(
                catcher - level1 >= 100_000.0,
                "level1 {level1} us, catcher {catcher} us:\n{trace}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, rounds, "{trace}");
}

#[test]
fn rust_panics_through_traced_frames() {
    let dir = scratch("rust");
    let exe = dir.join("panic");
    build(
        Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .env("RUSTC_BOOTSTRAP", "1")
            .args([
                "-O",
                "--edition",
                "2021",
                "-Zpatchable-function-entry=5",
                "-o",
            ])
            .arg(&exe)
            .arg(program("panic.rs")),
    );
    // Only the program's own functions: the exact graph.
    for backtrace in ["0", "1"] {
        let env = [("RUST_BACKTRACE", backtrace)];
        let trace = traced_as_untraced(&dir, &exe, &["2"], &["-F", "panic::*"], &env);
        let got = calls(&trace);
        balanced(&got);
        let want = expected(2, "panic::main()", |f| format!("panic::{f}()"));
        assert_eq!(got, want, "RUST_BACKTRACE={backtrace}:\n{trace}");
        closed_at_the_catch(&trace, 2);
    }
    // Everything the build instruments (std's generic code, the allocator shims): every
    // entry still has its exit.
    let env = [("RUST_BACKTRACE", "0")];
    let trace = traced_as_untraced(&dir, &exe, &["2"], &[], &env);
    let got = calls(&trace);
    balanced(&got);
    assert_eq!(
        got.iter().filter(|c| *c == "panic::after_catch();").count(),
        2,
        "{trace}"
    );
}

#[test]
fn glibc_backtrace_sees_the_real_frames() {
    let dir = scratch("backtrace");
    let exe = dir.join("backtrace");
    build(
        Command::new("gcc")
            .args(["-O2", "-rdynamic", "-pg", "-mfentry", "-mrecord-mcount"])
            .args(["-mnop-mcount", "-fno-pie", "-no-pie", "-o"])
            .arg(&exe)
            .arg(program("backtrace.c")),
    );
    // The program's own frames (libc's addresses move with ASLR): `inner`, `mid`, `main`,
    // `_start`, and the frame count.
    let own = |out: &[u8]| -> Vec<String> {
        String::from_utf8_lossy(out)
            .lines()
            .take_while(|l| !l.starts_with('#'))
            .filter(|l| l.contains("/backtrace(") || l.starts_with("n="))
            .map(String::from)
            .collect()
    };
    let untraced = Command::new(&exe).output().unwrap();
    let traced = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["live", "-t", "function_graph", "--"])
        .arg(&exe)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(traced.status.success());
    let want = own(&untraced.stdout);
    assert_eq!(want.len(), 5, "{want:?}");
    assert_eq!(own(&traced.stdout), want);
}

/// The `<stack trace>` blocks of a `trace` text: each block's frame names (` => NAME`).
fn stack_traces(text: &str) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::new();
    let mut open = false;
    for l in text.lines() {
        if l.ends_with("<stack trace>") {
            out.push(Vec::new());
            open = true;
        } else if let (true, Some(f)) = (open, l.strip_prefix(" => ")) {
            out.last_mut().unwrap().push(f.to_string());
        } else {
            open = false;
        }
    }
    out
}

/// Waits up to 20 s for `f` to give something.
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            std::time::Instant::now() < end,
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

#[test]
fn stacktrace_command_records_the_program_stack() {
    use std::process::Stdio;
    let dir = scratch("stacktrace");
    let exe = dir.join("stack");
    build(
        Command::new("gcc")
            .args(["-O2", "-pg", "-mfentry", "-mrecord-mcount"])
            .args(["-mnop-mcount", "-fno-pie", "-no-pie", "-o"])
            .arg(&exe)
            .arg(program("stack.c")),
    );
    let mnt = dir.join("tracing");
    let _ = std::fs::remove_dir_all(dir.join("rec"));
    std::fs::create_dir_all(&mnt).unwrap();
    let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-t", "function", "--mount"])
        .arg(&mnt)
        .arg("-o")
        .arg(dir.join("rec"))
        .arg("--")
        .arg(&exe)
        .current_dir(&dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    struct Stop(std::process::Child);
    impl Drop for Stop {
        fn drop(&mut self) {
            if let Ok(None) = self.0.try_wait() {
                // SAFETY: signalling our own child.
                unsafe { libc::kill(self.0.id() as libc::pid_t, libc::SIGTERM) };
                let _ = self.0.wait();
            }
        }
    }
    let stdin = tool.stdin.take();
    let mut tool = Stop(tool);
    let file = |f: &str| mnt.join(f);
    wait_for("the mount", || {
        file("available_tracers").exists().then_some(())
    });
    let append = |text: &str, f: &str| {
        use std::io::Write;
        let mut h = std::fs::OpenOptions::new()
            .append(true)
            .open(file(f))
            .unwrap();
        h.write_all(text.as_bytes()).unwrap();
    };
    let trace = || std::fs::read_to_string(file("trace")).unwrap();

    // Under nop: two hits of `leaf`, each its whole stack, innermost first.
    std::fs::write(file("current_tracer"), "nop\n").unwrap();
    append("leaf:stacktrace:2\n", "set_ftrace_filter");
    let filter = std::fs::read_to_string(file("set_ftrace_filter")).unwrap();
    assert!(filter.contains("leaf:stacktrace:count="), "{filter}");
    let st = wait_for("two stack traces", || {
        let st = stack_traces(&trace());
        (st.len() >= 2).then_some(st)
    });
    std::thread::sleep(std::time::Duration::from_millis(100));
    let again = trace();
    assert_eq!(stack_traces(&again).len(), 2, "a count of 2:\n{again}");
    for s in &st {
        assert_eq!(s[..4], ["leaf", "mid", "top", "main"], "{again}");
        assert!(
            s.iter().any(|f| f.starts_with("__libc_start_main")),
            "{s:?}"
        );
    }

    // Under function_graph, every traced frame's return address is the return trampoline:
    // the walk still names the real callers, past `main` into libc.
    std::fs::write(file("current_tracer"), "function_graph\n").unwrap();
    append("mid:stacktrace:1\n", "set_ftrace_filter");
    let st = wait_for("a stack trace under function_graph", || {
        stack_traces(&trace()).into_iter().next()
    });
    assert_eq!(st[..3], ["mid", "top", "main"], "{st:?}");
    assert!(
        st.iter().any(|f| f.starts_with("__libc_start_main")),
        "{st:?}"
    );

    drop(stdin);
    let out = wait_for("the tool to exit", || tool.0.try_wait().unwrap());
    assert!(out.success());
}

#[test]
fn cpp_exceptions_in_an_attached_process() {
    use std::process::Stdio;
    let dir = scratch("attached");
    let exe = dir.join("throw_loop");
    build(
        Command::new("g++")
            .args(["-O2", "-pg", "-mfentry", "-mrecord-mcount"])
            .args(["-mnop-mcount", "-fno-pie", "-no-pie", "-o"])
            .arg(&exe)
            .arg(program("throw_loop.cpp")),
    );
    // On one CPU, as in `traced_as_untraced`.
    // SAFETY: no preconditions.
    let cpu = unsafe { libc::sched_getcpu() }.max(0) as usize;
    let mut cmd = Command::new(&exe);
    cmd.stdin(Stdio::piped()).stdout(Stdio::piped());
    // SAFETY: only sched_setaffinity (async-signal-safe) between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let mut prog = cmd.spawn().unwrap();
    let rec = dir.join("rec");
    let _ = std::fs::remove_dir_all(&rec);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-t", "function_graph", "-o"])
        .arg(&rec)
        .args(["-p", &prog.id().to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Traced for a while (a few hundred throws), then detached (Ctrl-C).
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = tool.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = String::new();
        for l in std::io::BufRead::lines(std::io::BufReader::new(stderr)) {
            let l = l.unwrap();
            let _ = tx.send(l.clone());
            all.push_str(&l);
            all.push('\n');
        }
        all
    });
    wait_for("the attach", || {
        rx.try_iter()
            .any(|l| l.contains("attached to process"))
            .then_some(())
    });
    std::thread::sleep(std::time::Duration::from_millis(800));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tool.id() as libc::pid_t, libc::SIGINT) };
    let status = tool.wait().unwrap();
    let err = reader.join().unwrap();
    assert!(status.success(), "{err}");
    assert!(err.contains("detached"), "{err}");
    // Detached, it keeps throwing and catching.
    std::thread::sleep(std::time::Duration::from_millis(100));
    drop(prog.stdin.take());
    let out = prog.wait_with_output().unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let v: Vec<&str> = text.split_whitespace().collect();
    assert!(
        v.len() == 4 && v[0] == "caught" && v[1] == v[3] && v[2] == "of",
        "{text}"
    );
    // The recording: every throw's frames closed at the catch.
    let report = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["report", "-i"])
        .arg(&rec)
        .output()
        .unwrap();
    let trace = String::from_utf8_lossy(&report.stdout);
    let got = calls(&trace);
    balanced(&got);
    let throws = got.iter().filter(|c| *c == "thrower(long)();").count();
    assert!(throws > 10, "{throws} throws:\n{err}\n{trace}");
}

/// Neither the tool nor the agent links libgcc_s (`ftrace_agent::unwinder`): its CPU probe
/// costs every process start 0.1 ms on a VM. A C program traced does not have it loaded (its
/// own maps, printed under the agent); the tests above have it loaded by the program, and
/// `live_events`' stack tests by the agent when a stack is first asked for.
#[test]
fn neither_the_tool_nor_the_agent_links_libgcc_s() {
    let tool = Path::new(env!("CARGO_BIN_EXE_ftrace"));
    // The agent the tool would load (the newest beside this test binary, in `deps/`, or
    // beside it).
    let agent = ftrace_user::launch::find_agent().unwrap();
    for f in [tool, agent.as_path()] {
        let bytes = std::fs::read(f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let scan = ftrace_agent::elf::scan_file(f, &bytes).expect("an ELF file");
        assert!(
            scan.needed.iter().any(|n| n.starts_with("libc.so")),
            "{}: {:?}",
            f.display(),
            scan.needed
        );
        assert!(
            !scan.needed.iter().any(|n| n.starts_with("libgcc_s")),
            "{}: {:?}",
            f.display(),
            scan.needed
        );
    }
    let dir = scratch("no_libgcc_s");
    let out = Command::new(tool)
        .args(["record", "--force", "-t", "function_graph", "-o"])
        .arg(dir.join("rec"))
        .args(["--", "/bin/cat", "/proc/self/maps"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let maps = String::from_utf8_lossy(&out.stdout);
    assert!(maps.contains("libftrace_agent.so"), "{maps}");
    assert!(!maps.contains("libgcc_s"), "{maps}");
}
