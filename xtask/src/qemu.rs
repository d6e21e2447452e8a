//! `cargo xtask qemu-test`: build the bare-metal test kernel, boot it in QEMU (TCG) and drive
//! a tracefs session over its serial port.
//!
//! The kernel (`backends/baremetal/kernel`) is built freestanding with the host target and
//! `-Zpatchable-function-entry=5` (stable rustc with `RUSTC_BOOTSTRAP=1`) for its own crate
//! only. Its symbol table goes in as QEMU's `-initrd` (kallsyms text from `nm`). The session is
//! interactive: each command is sent after the previous prompt, and its output is checked here
//! (format against the Linux 6.12 captures in `shared/reference`, and the exact calls the
//! workload makes). The session ends with `poweroff pass N` (N = the commands expected to fail)
//! or `poweroff fail`, and the kernel leaves QEMU through `isa-debug-exit`.
//!
//! A run passes only with QEMU's status exactly 33, a `RESULT: PASS` line, and every check
//! met: a triple fault exits 0, a kernel-detected failure 35, a hang is killed by the timeout.
//! The task also proves its checks can fail: the same session with one wrong expectation must
//! fail (`--expect-wrong` runs only that one, and then this command fails), and a deliberate
//! write to read-only text must end in the kernel's page-fault report and status 35.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use crate::{root, status};

mod events;
mod snapshot;

/// QEMU's status for a pass (`isa-debug-exit` value 0x10).
const EXIT_PASS: i32 = 33;
/// QEMU's status for a kernel-detected failure (value 0x11).
const EXIT_FAIL: i32 = 35;

/// The shell's prompt.
const PROMPT: &str = "tracefs# ";
/// CPUs the kernel is booted with (`-smp`).
const CPUS: u32 = 2;
/// Rounds of the workload the session runs.
const ROUNDS: u64 = 3;
/// Longest wait for one command (or the boot) before the run is declared hung.
const STEP_TIMEOUT: Duration = Duration::from_secs(60);

pub fn qemu_test(args: &[String]) -> Result<(), String> {
    let mut expect_wrong_only = false;
    for a in args {
        match a.as_str() {
            "--expect-wrong" => expect_wrong_only = true,
            other => return Err(format!("qemu-test: unknown argument {other}")),
        }
    }
    let qemu = find_qemu()?;
    let kernel = build_kernel()?;
    let kallsyms = write_kallsyms(&kernel)?;
    let boot = Boot {
        qemu: &qemu,
        kernel: &kernel,
        initrd: &kallsyms,
    };

    if expect_wrong_only {
        return match run_session(&boot, Expectation::Wrong) {
            Ok(()) => Err("the session with a wrong expectation passed".into()),
            Err(e) => Err(format!("failed, as it must: {e}")),
        };
    }

    let t = Instant::now();
    run_session(&boot, Expectation::Right).map_err(|e| format!("tracefs session: {e}"))?;
    println!(
        "qemu-test: tracefs session passed ({:.2} s)",
        t.elapsed().as_secs_f64()
    );

    let t = Instant::now();
    match run_session(&boot, Expectation::Wrong) {
        Ok(()) => return Err("the session with a deliberately wrong expectation passed".into()),
        Err(e) if e.contains(WRONG_MARK) && e.contains(&format!("status {EXIT_FAIL}")) => println!(
            "qemu-test: a wrong expectation fails the session, as it must ({:.2} s): {}",
            t.elapsed().as_secs_f64(),
            e.lines().next().unwrap_or("")
        ),
        Err(e) => {
            return Err(format!(
                "the wrong-expectation session failed for another reason: {e}"
            ));
        }
    }

    let t = Instant::now();
    run_fault(&boot)?;
    println!(
        "qemu-test: a write to read-only text ends in a page-fault report and status {EXIT_FAIL} ({:.2} s)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// `qemu-system-x86_64`, or how to get it.
fn find_qemu() -> Result<PathBuf, String> {
    let found = std::env::var_os("PATH").and_then(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("qemu-system-x86_64"))
            .find(|c| c.is_file())
    });
    if let Some(q) = found {
        return Ok(q);
    }
    crate::install_packages()?;
    Ok(PathBuf::from("qemu-system-x86_64"))
}

fn kernel_dir() -> PathBuf {
    root().join("backends/baremetal/kernel")
}

/// Builds the kernel; returns the ELF's path.
fn build_kernel() -> Result<PathBuf, String> {
    let target_dir = root().join("target/baremetal-kernel");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let t = Instant::now();
    status(
        Command::new(cargo)
            // cargo reads the kernel's .cargo/config.toml from the current directory.
            .current_dir(kernel_dir())
            .args([
                "rustc",
                "--release",
                "--bin",
                "ftrace-bm-kernel",
                "--target-dir",
            ])
            .arg(&target_dir)
            .args(["--", "-Zpatchable-function-entry=5"])
            // Stable rustc accepts -Z flags with this (see the feasibility study).
            .env("RUSTC_BOOTSTRAP", "1")
            // The kernel's flags live in its config; an outer RUSTFLAGS would replace them.
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_BUILD_RUSTFLAGS")
            .env_remove("CARGO_TARGET_DIR"),
    )?;
    println!(
        "qemu-test: kernel built ({:.1} s)",
        t.elapsed().as_secs_f64()
    );
    Ok(target_dir.join("x86_64-unknown-linux-gnu/release/ftrace-bm-kernel"))
}

/// Writes the kernel's function symbols as `/proc/kallsyms` text (demangled by `nm`; the
/// blanks of names like `<A as B>::f` become `_`, as kallsyms names have none).
fn write_kallsyms(kernel: &Path) -> Result<PathBuf, String> {
    let out = Command::new("nm")
        .args(["--defined-only", "--demangle"])
        .arg(kernel)
        .output()
        .map_err(|e| {
            format!("nm: {e} (binutils comes with the C toolchain that links the kernel)")
        })?;
    if !out.status.success() {
        return Err(format!(
            "nm {}: {}",
            kernel.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let mut text = String::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let mut it = line.splitn(3, ' ');
        let (Some(addr), Some(kind), Some(name)) = (it.next(), it.next(), it.next()) else {
            continue;
        };
        if matches!(kind, "t" | "T" | "w" | "W") {
            text.push_str(&format!("{addr} {kind} {}\n", name.replace(' ', "_")));
        }
    }
    let path = kernel.with_extension("kallsyms");
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(path)
}

struct Boot<'a> {
    qemu: &'a Path,
    kernel: &'a Path,
    initrd: &'a Path,
}

/// A running QEMU with its serial console on stdin/stdout.
struct Vm {
    child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<Vec<u8>>,
    /// Everything the console printed so far.
    log: String,
    /// How much of `log` the session has consumed.
    seen: usize,
    eof: bool,
}

impl Vm {
    fn start(boot: &Boot<'_>) -> Result<Vm, String> {
        let mut child = Command::new(boot.qemu)
            .args(["-accel", "tcg", "-cpu", "qemu64", "-m", "128M"])
            .args(["-smp", &CPUS.to_string(), "-no-reboot"])
            .args(["-display", "none", "-monitor", "none", "-serial", "stdio"])
            .args(["-device", "isa-debug-exit,iobase=0xf4,iosize=0x04"])
            .arg("-kernel")
            .arg(boot.kernel)
            .arg("-initrd")
            .arg(boot.initrd)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(|e| format!("{}: {e}", boot.qemu.display()))?;
        let mut stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Ok(Vm {
            stdin: child.stdin.take(),
            child,
            rx,
            log: String::new(),
            seen: 0,
            eof: false,
        })
    }

    /// Waits until the unconsumed output contains `marker`; returns the text before it and
    /// consumes through it.
    fn expect(&mut self, marker: &str) -> Result<String, String> {
        let deadline = Instant::now() + STEP_TIMEOUT;
        loop {
            if let Some(i) = self.log[self.seen..].find(marker) {
                let text = self.log[self.seen..self.seen + i].to_string();
                self.seen += i + marker.len();
                return Ok(text);
            }
            if self.eof {
                return Err(format!("the kernel stopped before printing {marker:?}"));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(bytes) => self
                    .log
                    .push_str(&String::from_utf8_lossy(&bytes).replace('\r', "")),
                Err(RecvTimeoutError::Disconnected) => self.eof = true,
                Err(RecvTimeoutError::Timeout) => {
                    return Err(format!(
                        "timed out after {STEP_TIMEOUT:?} waiting for {marker:?}"
                    ));
                }
            }
        }
    }

    /// Sends a command line and returns its output (without the echoed line and prompt).
    fn command(&mut self, line: &str) -> Result<String, String> {
        let stdin = self.stdin.as_mut().ok_or("stdin closed")?;
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("sending {line:?}: {e}"))?;
        self.expect(line)?;
        // What follows the echoed line: "\n", the output (each line "\n"-terminated), prompt.
        let rest = self.expect(PROMPT)?;
        rest.strip_prefix('\n')
            .map(str::to_string)
            .ok_or_else(|| format!("no newline after the echo of {line:?}: {rest:?}"))
    }

    /// Closes stdin, waits for QEMU to exit and returns its status and the rest of the log.
    fn finish(mut self) -> (Option<i32>, String) {
        drop(self.stdin.take());
        let deadline = Instant::now() + STEP_TIMEOUT;
        let code = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s.code(),
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                _ => {
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break None;
                }
            }
        };
        while let Ok(bytes) = self.rx.recv_timeout(Duration::from_millis(500)) {
            self.log
                .push_str(&String::from_utf8_lossy(&bytes).replace('\r', ""));
        }
        (code, std::mem::take(&mut self.log))
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        // Never leave a QEMU behind (it is ours: spawned above).
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Expectation {
    Right,
    /// One deliberately wrong expectation: `bm_leaf` called from `bm_outer`.
    Wrong,
}

/// Appears in the error a wrong expectation produces.
const WRONG_MARK: &str = "does not match the expected calls";

/// Boots the kernel, runs the scripted session, and checks both the output and the exit.
fn run_session(boot: &Boot<'_>, expectation: Expectation) -> Result<(), String> {
    let mut vm = Vm::start(boot)?;
    let checked = script(&mut vm, expectation);
    // Tell the kernel the verdict: it exits 33 only if told "pass" and every command that
    // failed was expected to.
    let poweroff = match &checked {
        Ok(expected_failures) => format!("poweroff pass {expected_failures}"),
        Err(_) => "poweroff fail".into(),
    };
    if let Some(stdin) = vm.stdin.as_mut() {
        let _ = stdin.write_all(format!("{poweroff}\n").as_bytes());
        let _ = stdin.flush();
    }
    let (code, log) = vm.finish();
    // Kept for reading after a run (the pass path prints none of it).
    let kept = boot.kernel.with_extension(match expectation {
        Expectation::Right => "session.log",
        Expectation::Wrong => "session-wrong.log",
    });
    let _ = std::fs::write(&kept, &log);
    let result = log
        .lines()
        .find(|l| l.starts_with("RESULT: "))
        .unwrap_or("(no RESULT line)");
    let exit = match code {
        Some(c) => format!("QEMU exit status {c}, {result}"),
        None => format!("QEMU killed or hung, {result}"),
    };
    match checked {
        Ok(_) if code == Some(EXIT_PASS) && result.starts_with("RESULT: PASS") => Ok(()),
        Ok(_) => Err(format!(
            "the checks passed but the kernel did not: {exit}\n{log}"
        )),
        Err(e) => Err(format!("{e}\n({exit})\n--- console log ---\n{log}")),
    }
}

/// The reference captures (Linux 6.12.117), beside the repository.
fn reference(file: &str) -> Result<String, String> {
    let p = root()
        .join("../shared/reference/ftrace-6.12.117")
        .join(file);
    std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()))
}

fn check(cond: bool, what: impl FnOnce() -> String) -> Result<(), String> {
    if cond { Ok(()) } else { Err(what()) }
}

/// The session. Returns how many commands were meant to fail.
fn script(vm: &mut Vm, expectation: Expectation) -> Result<u32, String> {
    let boot_log = vm.expect(PROMPT)?;
    for want in [
        "selftest: tracer code uninstrumented, workload sites present: ok",
        "selftest: int3 breakpoint protocol (4 traps emulated): ok",
        "calibrated against the PIT",
        &format!("smp: {CPUS} CPU(s) online"),
    ] {
        check(boot_log.contains(want), || {
            format!("boot log lacks {want:?}")
        })?;
    }
    // The breakpoint protocol across CPUs: CPU 1 ran through the site while it was flipped.
    let cross = boot_log
        .lines()
        .find(|l| l.starts_with("selftest: cross-CPU patching"))
        .ok_or("boot log lacks the cross-CPU patching self-test")?;
    check(cross.ends_with(" 0 wrong results): ok"), || {
        format!("cross-CPU patching: {cross}")
    })?;
    println!("qemu-test: {cross}");

    let ls = vm.command("ls")?;
    for f in [
        "available_tracers",
        "current_tracer",
        "set_ftrace_filter",
        "trace",
        "tracing_on",
    ] {
        check(ls.lines().any(|l| l == f), || {
            format!("ls lacks {f}: {ls:?}")
        })?;
    }
    let tracers = vm.command("cat available_tracers")?;
    check(tracers == "function_graph function nop\n", || {
        format!("available_tracers: {tracers:?}")
    })?;
    let current = vm.command("cat current_tracer")?;
    check(current == "nop\n", || {
        format!("current_tracer at boot: {current:?}")
    })?;
    let on = vm.command("cat tracing_on")?;
    check(on == "1\n", || format!("tracing_on: {on:?}"))?;

    // The call-site records: one per patchable entry found at boot, in address order, named
    // after the functions holding them; none enabled yet.
    let nsites: usize = boot_log
        .lines()
        .find_map(|l| l.strip_prefix("sites: ")?.split(' ').next()?.parse().ok())
        .ok_or("boot log lacks the site count")?;
    let sites = Sites::read(vm, nsites)?;
    let total = vm.command("cat dyn_ftrace_total_info")?;
    // 16-byte records, 256 to a 4 KiB page: one page in one group for up to 256 sites
    check(
        nsites <= 256 && total == format!("{nsites} pages:1 groups: 1\n"),
        || format!("dyn_ftrace_total_info: {total:?} for {nsites} sites"),
    )?;
    sites.expect_enabled(vm, "enabled_functions", &[], 0)?;

    // A filter naming no function is refused, as Linux does, and changes nothing.
    let bad = vm.command("echo no_such_function > set_ftrace_filter")?;
    check(bad == "sh: write error: Invalid argument\n", || {
        format!("bad filter: {bad:?}")
    })?;
    let all = vm.command("cat set_ftrace_filter")?;
    check(all == "#### all functions enabled ####\n", || {
        format!("empty filter: {all:?}")
    })?;

    let set = vm.command("echo 'bm_*' > set_ftrace_filter")?;
    check(set.is_empty(), || format!("setting the filter: {set:?}"))?;
    let filter = vm.command("cat set_ftrace_filter")?;
    let mut names: Vec<&str> = filter.lines().collect();
    names.sort_unstable();
    check(
        names == ["bm_leaf", "bm_middle", "bm_outer", "bm_workload"],
        || format!("set_ftrace_filter: {filter:?}"),
    )?;

    // function: the workload runs with interrupts enabled, then disabled (the `d` flag)
    let set = vm.command("echo function > current_tracer")?;
    check(set.is_empty(), || format!("setting function: {set:?}"))?;
    // exactly the filtered functions are patched, each used by one ops
    sites.expect_enabled(vm, "enabled_functions", &BM_FUNCS, 1)?;
    let clock = vm.command("cat trace_clock")?;
    check(clock == "[local] counter\n", || {
        format!("trace_clock: {clock:?}")
    })?;
    run_workload(vm, ROUNDS, "")?;
    let trace = vm.command("cat trace")?;
    let on_cpu0 = |flags, rounds| Segment {
        cpu: 0,
        flags,
        rounds,
        calls: BM,
    };
    check_function_trace(&trace, &[on_cpu0(".....", ROUNDS)], expectation)?;
    let clear = vm.command("echo > trace")?;
    check(clear.is_empty(), || format!("clearing trace: {clear:?}"))?;
    run_workload(vm, 1, " irqsoff")?;
    let trace = vm.command("cat trace")?;
    check_function_trace(&trace, &[on_cpu0("d....", 1)], Expectation::Right)?;
    // per-CPU buffers: CPU 1 runs the workload, then CPU 0; `trace` merges them by time
    let clear = vm.command("echo > trace")?;
    check(clear.is_empty(), || format!("clearing trace: {clear:?}"))?;
    run_workload(vm, 1, " cpu=1")?;
    run_workload(vm, 1, "")?;
    let trace = vm.command("cat trace")?;
    let on_cpu1 = Segment {
        cpu: 1,
        flags: ".....",
        rounds: 1,
        calls: BM,
    };
    check_function_trace(&trace, &[on_cpu1, on_cpu0(".....", 1)], Expectation::Right)?;
    // tracing_on=0 leaves the buffer as it is
    let off = vm.command("echo 0 > tracing_on")?;
    check(off.is_empty(), || format!("tracing_on=0: {off:?}"))?;
    run_workload(vm, 2, "")?;
    let again = vm.command("cat trace")?;
    check(again == trace, || {
        format!("tracing_on=0 still recorded:\n{again}")
    })?;
    let on = vm.command("echo 1 > tracing_on")?;
    check(on.is_empty(), || format!("tracing_on=1: {on:?}"))?;

    // set_ftrace_notrace: bm_leaf's site goes back to its NOP and its calls leave the trace
    echo_ok(vm, "echo bm_leaf > set_ftrace_notrace")?;
    let notrace = vm.command("cat set_ftrace_notrace")?;
    check(notrace == "bm_leaf\n", || {
        format!("set_ftrace_notrace: {notrace:?}")
    })?;
    sites.expect_enabled(
        vm,
        "enabled_functions",
        &["bm_workload", "bm_outer", "bm_middle"],
        1,
    )?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 1, "")?;
    let trace = vm.command("cat trace")?;
    let no_leaf = Traced {
        leaf: false,
        other_work: false,
    };
    check_function_trace(
        &trace,
        &[Segment {
            calls: no_leaf,
            ..on_cpu0(".....", 1)
        }],
        Expectation::Right,
    )?;
    echo_ok(vm, "echo > set_ftrace_notrace")?;
    let notrace = vm.command("cat set_ftrace_notrace")?;
    check(notrace == "#### no functions disabled ####\n", || {
        format!("cleared set_ftrace_notrace: {notrace:?}")
    })?;

    // a suffix glob appended to the filter: `*_work` adds other_work (and nothing else)
    echo_ok(vm, "echo '*_work' >> set_ftrace_filter")?;
    let filter = vm.command("cat set_ftrace_filter")?;
    let mut names: Vec<&str> = filter.lines().collect();
    names.sort_unstable();
    check(
        names
            == [
                "bm_leaf",
                "bm_middle",
                "bm_outer",
                "bm_workload",
                "other_work",
            ],
        || format!("set_ftrace_filter after >> '*_work': {filter:?}"),
    )?;
    sites.expect_enabled(vm, "enabled_functions", &ALL_FUNCS, 1)?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 1, "")?;
    let trace = vm.command("cat trace")?;
    let with_other = Traced {
        leaf: true,
        other_work: true,
    };
    check_function_trace(
        &trace,
        &[Segment {
            calls: with_other,
            ..on_cpu0(".....", 1)
        }],
        Expectation::Right,
    )?;
    echo_ok(vm, "echo 'bm_*' > set_ftrace_filter")?;
    sites.expect_enabled(vm, "enabled_functions", &BM_FUNCS, 1)?;

    // function_graph, on the same filter
    echo_ok(vm, "echo function_graph > current_tracer")?;
    sites.expect_enabled(vm, "enabled_functions", &BM_FUNCS, 1)?;
    run_workload(vm, ROUNDS, "")?;
    let trace = vm.command("cat trace")?;
    check_graph_trace(&trace, &full_graph())?;

    // set_graph_function: only bm_middle's subtrees (the patched sites stay the filter's);
    // an appended name matching nothing is refused and changes nothing
    echo_ok(vm, "echo bm_middle > set_graph_function")?;
    let bad = vm.command("echo no_such_function >> set_graph_function")?;
    check(bad == "sh: write error: Invalid argument\n", || {
        format!("bad graph filter: {bad:?}")
    })?;
    let graph = vm.command("cat set_graph_function")?;
    check(graph == "bm_middle\n", || {
        format!("set_graph_function: {graph:?}")
    })?;
    sites.expect_enabled(vm, "enabled_functions", &BM_FUNCS, 1)?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, ROUNDS, "")?;
    let trace = vm.command("cat trace")?;
    let middles = |n: u64, body: &[&str]| -> Vec<String> {
        (0..n)
            .flat_map(|_| body.iter().map(|l| l.to_string()))
            .collect()
    };
    check_graph_trace(
        &trace,
        &middles(2 * ROUNDS, &["bm_middle() {", "  bm_leaf();", "}"]),
    )?;
    // set_graph_notrace: bm_leaf is cut out of the graph, bm_middle becomes a leaf
    echo_ok(vm, "echo bm_leaf > set_graph_notrace")?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, ROUNDS, "")?;
    let trace = vm.command("cat trace")?;
    check_graph_trace(&trace, &middles(2 * ROUNDS, &["bm_middle();"]))?;
    echo_ok(vm, "echo > set_graph_function")?;
    echo_ok(vm, "echo > set_graph_notrace")?;

    // back to nop: sites restored, buffer empty, a new workload leaves nothing
    echo_ok(vm, "echo nop > current_tracer")?;
    let current = vm.command("cat current_tracer")?;
    check(current == "nop\n", || {
        format!("current_tracer: {current:?}")
    })?;
    sites.expect_enabled(vm, "enabled_functions", &[], 0)?;
    // every site that was ever patched, none in use
    sites.expect_enabled(vm, "touched_functions", &ALL_FUNCS, 0)?;
    run_workload(vm, ROUNDS, "")?;
    let trace = vm.command("cat trace")?;
    let (entries, events) = function_header(&trace, "nop")?;
    check(entries == (0, 0) && events.is_empty(), || {
        format!("nop trace not empty:\n{trace}")
    })?;

    // trace_marker and trace_marker_raw write print / raw_data entries (the shell runs with
    // interrupts off: `d`); the raw entry's bytes are those of Linux's capture for the same
    // 8-byte payload (09-marker: `# 1 buf: 41 42 43 44 45 46 47 48 00 00 00 00 00 00 00 00`)
    echo_ok(vm, "echo hello from the shell > trace_marker")?;
    echo_ok(vm, "echo -n abcdABCDEFGH > trace_marker_raw")?;
    let trace = vm.command("cat trace")?;
    let (entries, events) = function_header(&trace, "nop")?;
    let linux_raw = reference("09-marker/trace_pipe.txt")?;
    let raw_tail = linux_raw
        .lines()
        .find_map(|l| l.split_once(": # 1 buf: ").map(|(_, t)| t))
        .ok_or("09-marker/trace_pipe.txt has no raw marker line")?;
    let line = |i: usize, what: &str| -> Option<bool> {
        let rest = events
            .get(i)?
            .strip_prefix("          <idle>-0       [000] d.... ")?;
        let (ts, text) = rest.split_once(": ")?;
        Some(ts.trim_start().len() >= 8 && text == what)
    };
    check(
        entries == (2, 2)
            && events.len() == 2
            && line(0, "tracing_mark_write: hello from the shell") == Some(true)
            // the id is the first four bytes ("abcd", native endian), then the payload
            && line(1, &format!("# 64636261 buf: {raw_tail}")) == Some(true),
        || format!("marker entries:\n{trace}"),
    )?;
    // with recording off the ring buffer refuses the entry: EBADF, as Linux
    echo_ok(vm, "echo 0 > tracing_on")?;
    let off = vm.command("echo lost > trace_marker")?;
    check(off == "sh: write error: Bad file descriptor\n", || {
        format!("trace_marker with tracing_on=0: {off:?}")
    })?;
    echo_ok(vm, "echo 1 > tracing_on")?;

    // function commands run from the probe ops: `bm_leaf:traceoff:1` stops the ring buffer at
    // the first bm_leaf call, `tracing_on` (the backend's record switch) reads 0, the command
    // reads back spent as Linux prints it (`ftrace_probe_print`: `count=0`)
    echo_ok(vm, "echo function > current_tracer")?;
    echo_ok(vm, "echo 'bm_*' > set_ftrace_filter")?;
    // a command this backend cannot run is refused and changes nothing
    let refused = vm.command("echo 'bm_leaf:stacktrace' >> set_ftrace_filter")?;
    check(refused == "sh: write error: Invalid argument\n", || {
        format!("bm_leaf:stacktrace: {refused:?}")
    })?;
    echo_ok(vm, "echo 'bm_leaf:traceoff:1' >> set_ftrace_filter")?;
    let filter = vm.command("cat set_ftrace_filter")?;
    let mut lines: Vec<&str> = filter.lines().collect();
    let last = lines.pop();
    lines.sort_unstable();
    check(
        lines == ["bm_leaf", "bm_middle", "bm_outer", "bm_workload"]
            && last == Some("bm_leaf:traceoff:count=1"),
        || format!("set_ftrace_filter with a command: {filter:?}"),
    )?;
    // bm_leaf's site serves two ops now (the tracer's and the probe ops)
    let enabled = vm.command("cat enabled_functions")?;
    check(
        enabled.lines().any(|l| l.starts_with("bm_leaf (2)"))
            && enabled.lines().any(|l| l.starts_with("bm_middle (1)")),
        || format!("enabled_functions with a probe: {enabled:?}"),
    )?;
    let on = vm.command("cat tracing_on")?;
    check(on == "1\n", || {
        format!("tracing_on before the probe: {on:?}")
    })?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, ROUNDS, "")?;
    let on = vm.command("cat tracing_on")?;
    check(on == "0\n", || {
        format!("tracing_on after bm_leaf:traceoff:1: {on:?}")
    })?;
    let filter = vm.command("cat set_ftrace_filter")?;
    check(filter.ends_with("\nbm_leaf:traceoff:count=0\n"), || {
        format!("set_ftrace_filter after the probe ran: {filter:?}")
    })?;
    let stopped = vm.command("cat trace")?;
    let (_, events) = function_header(&stopped, "function")?;
    let names: Vec<&str> = events
        .iter()
        .filter_map(|l| l.split_once("]").map(|(_, r)| r))
        .filter_map(|r| r.split_once(": ").map(|(_, f)| f))
        .filter_map(|f| f.split_whitespace().next())
        .collect();
    // the trace ends at the first bm_leaf call (recorded or not, by ops order)
    check(
        names.len() == events.len()
            && names.starts_with(&["bm_workload", "bm_outer", "bm_middle"])
            && (names.len() == 3 || names[3..] == ["bm_leaf"]),
        || format!("trace after bm_leaf:traceoff:1:\n{stopped}"),
    )?;
    // spent: another run leaves the buffer as it is, tracing stays off
    run_workload(vm, ROUNDS, "")?;
    let again = vm.command("cat trace")?;
    check(again == stopped, || {
        format!("the buffer recorded after traceoff:\n{again}")
    })?;
    let on = vm.command("cat tracing_on")?;
    check(on == "0\n", || {
        format!("tracing_on after a spent probe: {on:?}")
    })?;
    // `echo 1 > tracing_on` turns it back on for good
    echo_ok(vm, "echo 1 > tracing_on")?;
    run_workload(vm, 1, "")?;
    let on = vm.command("cat tracing_on")?;
    check(on == "1\n", || format!("tracing_on after echo 1: {on:?}"))?;
    let resumed = vm.command("cat trace")?;
    let (_, more) = function_header(&resumed, "function")?;
    check(more.len() > events.len(), || {
        format!("tracing did not resume:\n{resumed}")
    })?;
    // removing the command removes the probe ops from bm_leaf
    echo_ok(vm, "echo '!bm_leaf:traceoff:0' >> set_ftrace_filter")?;
    sites.expect_enabled(vm, "enabled_functions", &BM_FUNCS, 1)?;
    echo_ok(vm, "echo nop > current_tracer")?;
    sites.expect_enabled(vm, "enabled_functions", &[], 0)?;
    let refused = instance_files(vm, &sites)?;
    let refused_events = events::event_files(vm)?;
    let refused_snapshot = snapshot::snapshot_files(vm)?;
    heap_reuse(vm)?;
    // four writes were meant to fail: the two unknown names, the marker with tracing off and
    // the stacktrace command; and those of `instance_files`, `event_files` and
    // `snapshot_files`
    Ok(4 + refused + refused_events + refused_snapshot)
}

/// What the shared tracing instance brings to bare metal: `buffer_size_kb` (whole and per CPU,
/// resized while tracing), an options file (`print-parent`, and `trace_options`),
/// `trace_pipe` (a consuming read), `trace_pipe_raw` (kernel pages, consumed, decoded here),
/// `instances/` and the function profiler.
/// Starts and ends under `nop` with the `bm_*` filter; returns the writes meant to fail.
fn instance_files(vm: &mut Vm, sites: &Sites) -> Result<u32, String> {
    let one_round = |cpu, flags| Segment {
        cpu,
        flags,
        rounds: 1,
        calls: BM,
    };
    // 32 sub-buffers of 4080 data bytes a CPU at boot
    let kb = vm.command("cat buffer_size_kb")?;
    check(kb == "127\n", || format!("buffer_size_kb at boot: {kb:?}"))?;
    echo_ok(vm, "echo function > current_tracer")?;
    run_workload(vm, 1, "")?;
    // resized while tracing: a new, empty ring of ceil(64 KiB / 4080) = 17 sub-buffers a CPU
    echo_ok(vm, "echo 64 > buffer_size_kb")?;
    for f in [
        "buffer_size_kb",
        "per_cpu/cpu0/buffer_size_kb",
        "per_cpu/cpu1/buffer_size_kb",
    ] {
        let kb = vm.command(&format!("cat {f}"))?;
        check(kb == "67\n", || format!("{f} after echo 64: {kb:?}"))?;
    }
    let trace = vm.command("cat trace")?;
    let (counts, _) = function_header(&trace, "function")?;
    check(counts == (0, 0), || {
        format!("trace after the resize:\n{trace}")
    })?;
    run_workload(vm, 1, "")?;
    let trace = vm.command("cat trace")?;
    check_function_trace(&trace, &[one_round(0, ".....")], Expectation::Right)?;
    // one CPU's buffer alone; a size that is not a number is refused and changes nothing
    echo_ok(vm, "echo 12 > per_cpu/cpu1/buffer_size_kb")?;
    let kb = vm.command("cat per_cpu/cpu1/buffer_size_kb")?;
    check(kb == "15\n", || format!("cpu1 after echo 12: {kb:?}"))?;
    let total = vm.command("cat buffer_size_kb")?;
    check(total == "X\n", || {
        format!("buffer_size_kb with two sizes: {total:?}")
    })?;
    let bad = vm.command("echo lots > buffer_size_kb")?;
    check(bad == "sh: write error: Invalid argument\n", || {
        format!("echo lots > buffer_size_kb: {bad:?}")
    })?;
    let kb = vm.command("cat per_cpu/cpu0/buffer_size_kb")?;
    check(kb == "67\n", || {
        format!("cpu0 after the refused write: {kb:?}")
    })?;

    // an options file: print-parent off drops the ` <-parent` column, trace_options says so
    let opt = vm.command("cat options/print-parent")?;
    check(opt == "1\n", || format!("options/print-parent: {opt:?}"))?;
    echo_ok(vm, "echo 0 > options/print-parent")?;
    let opts = vm.command("cat trace_options")?;
    check(opts.lines().any(|l| l == "noprint-parent"), || {
        format!("trace_options with print-parent off:\n{opts}")
    })?;
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 1, "")?;
    let trace = vm.command("cat trace")?;
    let (_, events) = function_header(&trace, "function")?;
    let want = expected_calls(1, BM, Expectation::Right);
    check(
        events.len() == want.len()
            && events
                .iter()
                .zip(&want)
                .all(|(l, (f, _))| !l.contains(" <-") && l.ends_with(&format!(": {f}"))),
        || format!("trace with print-parent off:\n{trace}"),
    )?;
    echo_ok(vm, "echo 1 > options/print-parent")?;

    // trace_pipe: the events without a header, consumed by the read
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 1, "")?;
    let pipe = vm.command("cat trace_pipe")?;
    let lines: Vec<&str> = pipe.lines().collect();
    check(
        lines.len() == want.len()
            && lines
                .iter()
                .zip(&want)
                .all(|(l, (f, parent))| match parent {
                    Some(p) => l.ends_with(&format!(": {f} <-{p}")),
                    None => l.contains(&format!(": {f} <-")),
                }),
        || format!("trace_pipe:\n{pipe}"),
    )?;
    let again = vm.command("cat trace_pipe")?;
    check(again.is_empty(), || {
        format!("trace_pipe read twice:\n{again}")
    })?;
    let trace = vm.command("cat trace")?;
    let (counts, events) = function_header(&trace, "function")?;
    check(counts.0 == 0 && events.is_empty(), || {
        format!("trace after trace_pipe consumed it:\n{trace}")
    })?;

    // trace_pipe_raw: CPU 0's pages as the kernel's ring buffer lays them out, consumed
    echo_ok(vm, "echo > trace")?;
    run_workload(vm, 1, "")?;
    let hex = vm.command("xxd per_cpu/cpu0/trace_pipe_raw")?;
    let names = decode_function_pages(&hex, sites)?;
    let want_names: Vec<&str> = want.iter().map(|(f, _)| *f).collect();
    check(names == want_names, || {
        format!("trace_pipe_raw decoded: {names:?}, want {want_names:?}")
    })?;
    let again = vm.command("xxd per_cpu/cpu0/trace_pipe_raw")?;
    check(again.is_empty(), || {
        format!("trace_pipe_raw read twice:\n{again}")
    })?;
    echo_ok(vm, "echo nop > current_tracer")?;

    // instances: one with its own tracer, filter and buffer, reached through the top level's
    // call sites (only its function patched), refusing function_graph, then removed
    echo_ok(vm, "mkdir instances/foo")?;
    let tracers = vm.command("cat instances/foo/available_tracers")?;
    check(tracers == "function nop\n", || {
        format!("instances/foo/available_tracers: {tracers:?}")
    })?;
    echo_ok(vm, "echo bm_leaf > instances/foo/set_ftrace_filter")?;
    echo_ok(vm, "echo function > instances/foo/current_tracer")?;
    sites.expect_enabled(vm, "enabled_functions", &["bm_leaf"], 1)?;
    let graph = vm.command("echo function_graph > instances/foo/current_tracer")?;
    check(graph == "sh: write error: Invalid argument\n", || {
        format!("function_graph in an instance: {graph:?}")
    })?;
    run_workload(vm, 1, "")?;
    let inst = vm.command("cat instances/foo/trace")?;
    let (counts, events) = function_header(&inst, "function")?;
    check(
        counts == (2, 2) && events.iter().all(|l| l.ends_with(": bm_leaf <-bm_middle")),
        || format!("instances/foo/trace:\n{inst}"),
    )?;
    let top = vm.command("cat trace")?;
    let (counts, _) = function_header(&top, "nop")?;
    check(counts == (0, 0), || {
        format!("the top level under nop:\n{top}")
    })?;
    echo_ok(vm, "rmdir instances/foo")?;
    sites.expect_enabled(vm, "enabled_functions", &[], 0)?;
    let ls = vm.command("ls instances")?;
    check(ls.is_empty(), || format!("instances after rmdir: {ls:?}"))?;

    // the function profiler: every site patched for its ops under nop, one CPU's hits
    echo_ok(vm, "echo 1 > function_profile_enabled")?;
    sites.expect_enabled(vm, "enabled_functions", &sites.names(), 1)?;
    run_workload(vm, 1, "")?;
    let stat = vm.command("cat trace_stat/function0")?;
    let hits = |f: &str| {
        stat.lines().find_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(f)).then(|| w.next()?.parse::<u64>().ok())?
        })
    };
    check(
        stat.starts_with("  Function                               Hit\n")
            && [
                ("bm_workload", 1),
                ("bm_outer", 1),
                ("bm_middle", 2),
                ("bm_leaf", 2),
            ]
            .iter()
            .all(|&(f, n)| hits(f) == Some(n)),
        || format!("trace_stat/function0:\n{stat}"),
    )?;
    echo_ok(vm, "echo 0 > function_profile_enabled")?;
    sites.expect_enabled(vm, "enabled_functions", &[], 0)?;
    // the refused writes: `echo lots > buffer_size_kb`, function_graph in the instance
    Ok(2)
}

/// Decodes `xxd` output of `trace_pipe_raw` (4 KiB kernel sub-buffers) into the functions of
/// its `function` entries (`TRACE_FN`, type 1: `trace_entry` then `ip`, `parent_ip`), named
/// by the call-site records.
fn decode_function_pages(hex: &str, sites: &Sites) -> Result<Vec<String>, String> {
    let digits: String = hex.split_whitespace().collect();
    let bytes = (0..digits.len() / 2)
        .map(|i| u8::from_str_radix(&digits[2 * i..2 * i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|e| format!("trace_pipe_raw hex: {e}"))?;
    check(!bytes.is_empty() && bytes.len() % 4096 == 0, || {
        format!(
            "trace_pipe_raw: {} bytes, not whole 4 KiB pages",
            bytes.len()
        )
    })?;
    let mut names = Vec::new();
    for chunk in bytes.chunks(4096) {
        let page = ftrace_ringbuf::page::Page::new(chunk).map_err(|e| format!("page: {e}"))?;
        for ev in page.events() {
            let ev = ev.map_err(|e| format!("page event: {e}"))?;
            let p = ev.payload;
            check(
                p.len() >= 24 && u16::from_le_bytes([p[0], p[1]]) == 1,
                || format!("not a function entry: {p:02x?}"),
            )?;
            let ip = u64::from_le_bytes(p[8..16].try_into().expect("8 bytes"));
            let name = sites
                .sites
                .iter()
                .find(|(a, _)| *a == ip)
                .map(|(_, n)| n.clone())
                .ok_or_else(|| format!("trace_pipe_raw: no call site at {ip:#x}"))?;
            names.push(name);
        }
    }
    Ok(names)
}

/// Rounds of the read-only batch the heap-reuse check runs.
const REUSE_ROUNDS: usize = 100;
/// The heap-reuse check's batch: read-only commands, each allocating while it runs.
const REUSE_BATCH: [&str; 5] = [
    "cat trace",
    "cat enabled_functions",
    "cat set_ftrace_filter",
    "cat available_tracers",
    "ls",
];
/// How much the heap in use may grow over the rounds (the allocator's rounding and free-list
/// fragmentation); a heap that never reuses freed blocks grows by kilobytes per command.
const REUSE_SLACK: u64 = 16 * 1024;

/// The kernel's `heap` line: (bytes in use, allocations made in trace hooks or interrupts).
fn heap_used(vm: &mut Vm) -> Result<(u64, u64), String> {
    let out = vm.command("heap")?;
    let parsed = out
        .strip_prefix("heap: ")
        .and_then(|r| r.strip_suffix(" allocations in trace hooks or interrupts\n"))
        .and_then(|r| {
            let (used, rest) = r.split_once(" of ")?;
            let (_, irq_off) = rest.split_once(" bytes used, ")?;
            Some((used.parse().ok()?, irq_off.parse().ok()?))
        });
    parsed.ok_or_else(|| format!("heap: {out:?}"))
}

/// Freed memory is reused: the same read-only batch, run [`REUSE_ROUNDS`] times (each output
/// as the first round's), leaves the heap in use within [`REUSE_SLACK`] of where it was; and
/// no trace hook or interrupt handler allocated, in the whole session so far.
fn heap_reuse(vm: &mut Vm) -> Result<(), String> {
    let t = Instant::now();
    // The first round may set up what stays (caches, a snapshot buffer): it is not counted.
    let mut want = Vec::new();
    for cmd in REUSE_BATCH {
        want.push(vm.command(cmd)?);
    }
    let (before, _) = heap_used(vm)?;
    for round in 0..REUSE_ROUNDS {
        for (cmd, want) in REUSE_BATCH.iter().zip(&want) {
            let out = vm.command(cmd)?;
            check(out == *want, || {
                format!("heap reuse, round {round}: {cmd} changed:\n{out}\nwas:\n{want}")
            })?;
        }
    }
    let (after, in_hooks) = heap_used(vm)?;
    let n = REUSE_ROUNDS * REUSE_BATCH.len();
    check(after <= before + REUSE_SLACK, || {
        format!(
            "heap in use grew from {before} to {after} bytes over {n} read-only commands: \
             freed blocks are not reused"
        )
    })?;
    check(in_hooks == 0, || {
        format!("{in_hooks} allocations were made in trace hooks or interrupt handlers")
    })?;
    println!(
        "qemu-test: heap in use {before} -> {after} bytes over {n} read-only commands ({:.2} s)",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The workload functions `bm_*` selects.
const BM_FUNCS: [&str; 4] = ["bm_workload", "bm_outer", "bm_middle", "bm_leaf"];
/// Every workload function.
const ALL_FUNCS: [&str; 5] = [
    "bm_workload",
    "bm_outer",
    "bm_middle",
    "bm_leaf",
    "other_work",
];

/// Sends a command that must print nothing (a write that succeeds).
fn echo_ok(vm: &mut Vm, line: &str) -> Result<(), String> {
    let out = vm.command(line)?;
    check(out.is_empty(), || format!("{line}: {out:?}"))
}

/// The kernel's call-site records as `available_filter_functions_addrs` lists them.
struct Sites {
    /// (address, name), ascending.
    sites: Vec<(u64, String)>,
}

impl Sites {
    /// Reads the records and checks them against `available_filter_functions` and the number
    /// of sites the boot found.
    fn read(vm: &mut Vm, nsites: usize) -> Result<Sites, String> {
        let text = vm.command("cat available_filter_functions_addrs")?;
        let mut sites = Vec::new();
        for line in text.lines() {
            let parsed = line
                .split_once(' ')
                .and_then(|(a, n)| Some((u64::from_str_radix(a, 16).ok()?, n.to_string())));
            sites
                .push(parsed.ok_or_else(|| format!("available_filter_functions_addrs: {line:?}"))?);
        }
        check(
            sites.len() == nsites && sites.windows(2).all(|w| w[0].0 < w[1].0),
            || format!("{nsites} sites, but available_filter_functions_addrs is:\n{text}"),
        )?;
        let names = vm.command("cat available_filter_functions")?;
        let want: String = sites.iter().map(|(_, n)| format!("{n}\n")).collect();
        check(names == want, || {
            format!("available_filter_functions:\n{names}\nwant:\n{want}")
        })?;
        for f in ALL_FUNCS {
            check(sites.iter().any(|(_, n)| n == f), || {
                format!("no call site for {f}")
            })?;
        }
        Ok(Sites { sites })
    }

    /// Every site's function name.
    fn names(&self) -> Vec<&str> {
        self.sites.iter().map(|(_, n)| n.as_str()).collect()
    }

    /// Requires `file` (`enabled_functions` or `touched_functions`) to list exactly `names`,
    /// in address order, each with reference count `count` and no flags (Linux 6.12's
    /// `"%ps (%ld)%s%s%s%s%s"` columns for a record no ops needs registers or a trampoline
    /// for).
    fn expect_enabled(
        &self,
        vm: &mut Vm,
        file: &str,
        names: &[&str],
        count: u32,
    ) -> Result<(), String> {
        let got = vm.command(&format!("cat {file}"))?;
        let want: String = self
            .sites
            .iter()
            .filter(|(_, n)| names.contains(&n.as_str()))
            .map(|(_, n)| format!("{n} ({count})           \n"))
            .collect();
        check(got == want, || format!("{file}:\n{got}want:\n{want}"))
    }
}

/// Runs `workload ROUNDS MODE` and checks its result.
fn run_workload(vm: &mut Vm, rounds: u64, mode: &str) -> Result<(), String> {
    let out = vm.command(&format!("workload {rounds}{mode}"))?;
    let want = format!(
        "workload: bm_workload({rounds}) = {}\n",
        expected_checksum(rounds)
    );
    check(out == want, || format!("workload: {out:?}, want {want:?}"))
}

/// The workload's checksum (the kernel's `workload::expected_checksum`).
fn expected_checksum(rounds: u64) -> u64 {
    let middle = |x: u64| (x ^ 0x5a).wrapping_mul(3);
    (0..rounds).fold(0u64, |acc, i| {
        let outer = middle(i)
            .wrapping_add(middle(i + 1))
            .wrapping_add(i.wrapping_add(7));
        acc.wrapping_mul(31).wrapping_add(outer)
    })
}

/// Which of the workload's functions the filters let through: always `bm_workload`,
/// `bm_outer` and `bm_middle`; `bm_leaf` unless `set_ftrace_notrace` holds it; `other_work`
/// when `set_ftrace_filter` holds it.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Traced {
    leaf: bool,
    other_work: bool,
}

/// `bm_*`.
const BM: Traced = Traced {
    leaf: true,
    other_work: false,
};

/// The calls the workload makes that `traced` admits, as (function, parent) pairs; `None`
/// for the builtin that calls `bm_workload`.
fn expected_calls(
    rounds: u64,
    traced: Traced,
    expectation: Expectation,
) -> Vec<(&'static str, Option<&'static str>)> {
    let mut v = vec![("bm_workload", None)];
    for _ in 0..rounds {
        v.push(("bm_outer", Some("bm_workload")));
        for _ in 0..2 {
            v.push(("bm_middle", Some("bm_outer")));
            if traced.leaf {
                v.push(("bm_leaf", Some("bm_middle")));
            }
        }
        if traced.other_work {
            v.push(("other_work", Some("bm_outer")));
        }
    }
    if expectation == Expectation::Wrong {
        v[3].1 = Some("bm_outer");
    }
    v
}

/// Checks the latency-format header against Linux's and returns (entries, written) and the
/// event lines.
fn function_header<'a>(trace: &'a str, tracer: &str) -> Result<((u64, u64), Vec<&'a str>), String> {
    let reference = reference("02-files/trace.txt")?;
    let want_tail: Vec<&str> = reference.lines().skip(3).collect();
    let lines: Vec<&str> = trace.lines().collect();
    check(lines.len() >= 12, || format!("trace too short:\n{trace}"))?;
    check(
        lines[0] == format!("# tracer: {tracer}") && lines[1] == "#",
        || format!("trace header: {:?}", &lines[..2]),
    )?;
    let counts = lines[2]
        .strip_prefix("# entries-in-buffer/entries-written: ")
        .and_then(|s| s.strip_suffix(&format!("   #P:{CPUS}")))
        .and_then(|s| s.split_once('/'))
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| format!("entries line: {:?}", lines[2]))?;
    check(lines[3..12] == want_tail[..], || {
        format!(
            "header differs from Linux's:\n{}\nwant:\n{}",
            lines[3..12].join("\n"),
            want_tail.join("\n")
        )
    })?;
    Ok((counts, lines[12..].to_vec()))
}

/// Checks a function trace of `workload ROUNDS`: the header, the context columns (`flags` is
/// the irqs-off...migrate-disable column), ordered timestamps, and exactly the expected calls.
/// One stretch of a function trace: `workload ROUNDS` run on `cpu` with `flags` in the
/// irqs-off...migrate-disable column.
struct Segment {
    cpu: u32,
    flags: &'static str,
    rounds: u64,
    calls: Traced,
}

/// Checks a function trace: the header, the context columns of each segment's events in
/// order, non-decreasing timestamps, and exactly the expected calls.
fn check_function_trace(
    trace: &str,
    segments: &[Segment],
    expectation: Expectation,
) -> Result<(), String> {
    let (counts, events) = function_header(trace, "function")?;
    let mut want = Vec::new();
    let mut prefixes = Vec::new();
    for seg in segments {
        let calls = expected_calls(seg.rounds, seg.calls, expectation);
        let prefix = format!("          <idle>-0       [{:03}] {} ", seg.cpu, seg.flags);
        prefixes.extend(std::iter::repeat_n(prefix, calls.len()));
        want.extend(calls);
    }
    let n = want.len() as u64;
    check(counts == (n, n), || {
        format!("entries {counts:?}, want ({n}, {n})")
    })?;
    let mut got = Vec::new();
    let mut last_ts = 0.0f64;
    for (i, line) in events.iter().enumerate() {
        // "          <idle>-0       [000] d....     0.022266: bm_outer <-bm_workload"
        let bad = || format!("malformed function line {line:?}");
        let prefix = prefixes
            .get(i)
            .ok_or_else(|| format!("extra line {line:?}"))?;
        let rest = line
            .strip_prefix(prefix.as_str())
            .ok_or_else(|| format!("line {line:?} does not start with {prefix:?}"))?;
        let (ts, call) = rest.split_once(": ").ok_or_else(bad)?;
        let (secs, micros) = ts.trim_start().split_once('.').ok_or_else(bad)?;
        check(ts.len() >= 12 && micros.len() == 6, bad)?;
        let ts: f64 = format!("{secs}.{micros}").parse().map_err(|_| bad())?;
        check(ts >= last_ts, || {
            format!("timestamps go backwards at {line:?}")
        })?;
        last_ts = ts;
        let (func, parent) = call.split_once(" <-").ok_or_else(bad)?;
        got.push((func.to_string(), parent.to_string()));
    }
    let matches = got.len() == want.len()
        && got
            .iter()
            .zip(&want)
            .all(|((f, p), (wf, wp))| f == wf && wp.is_none_or(|wp| p == wp));
    check(matches, || {
        let got: Vec<String> = got.iter().map(|(f, p)| format!("{f} <-{p}")).collect();
        let want: Vec<String> = want
            .iter()
            .map(|(f, p)| format!("{f} <-{}", p.unwrap_or("*")))
            .collect();
        format!(
            "the function trace {WRONG_MARK}:\ngot:\n  {}\nwant:\n  {}",
            got.join("\n  "),
            want.join("\n  ")
        )
    })
}

/// The function_graph tree of `workload ROUNDS` under `bm_*`, as Linux prints it (leaves
/// fold into `f();`).
fn full_graph() -> Vec<String> {
    let mut want = vec!["bm_workload() {".to_string()];
    for _ in 0..ROUNDS {
        want.push("  bm_outer() {".into());
        for _ in 0..2 {
            want.extend([
                "    bm_middle() {".into(),
                "      bm_leaf();".into(),
                "    }".into(),
            ]);
        }
        want.push("  }".into());
    }
    want.push("}".into());
    want
}

/// Checks a function_graph trace: Linux's header, the line format, and exactly the `want`
/// call lines.
fn check_graph_trace(trace: &str, want: &[String]) -> Result<(), String> {
    let reference = reference("05-function-graph/trace.txt")?;
    let want_head: Vec<&str> = reference.lines().take(4).collect();
    let lines: Vec<&str> = trace.lines().collect();
    check(lines.len() > 4 && lines[..4] == want_head[..], || {
        format!("function_graph header differs from Linux's:\n{trace}")
    })?;
    let mut got = Vec::new();
    for line in &lines[4..] {
        // " 0)   0.212 us    |        bm_leaf();"  /  " 0)               |  bm_outer() {"
        let bad = || format!("malformed function_graph line {line:?}");
        let rest = line.strip_prefix(" 0) ").ok_or_else(bad)?;
        let (duration, body) = rest.split_once("|  ").ok_or_else(bad)?;
        check(duration.len() == 14, bad)?;
        let opens = body.ends_with("() {");
        if opens {
            check(duration.trim().is_empty(), bad)?;
        } else {
            let mark = duration.as_bytes()[0];
            check(
                b" +!#*@$".contains(&mark) && duration.as_bytes()[1] == b' ',
                bad,
            )?;
            let (num, unit) = duration[2..].split_once(' ').ok_or_else(bad)?;
            let (us, ns) = num.split_once('.').ok_or_else(bad)?;
            check(
                us.bytes().all(|b| b.is_ascii_digit()) && ns.len() == 3 && unit.starts_with("us"),
                bad,
            )?;
        }
        got.push(body.to_string());
    }
    check(got == want, || {
        format!(
            "the function_graph trace {WRONG_MARK}:\ngot:\n{}\nwant:\n{}",
            got.join("\n"),
            want.join("\n")
        )
    })
}

/// Boots, sends `fault` (a plain store into read-only text), and requires the page-fault
/// report, `RESULT: FAIL` and status 35.
fn run_fault(boot: &Boot<'_>) -> Result<(), String> {
    let mut vm = Vm::start(boot)?;
    vm.expect(PROMPT)?;
    if let Some(stdin) = vm.stdin.as_mut() {
        let _ = stdin.write_all(b"fault\n");
        let _ = stdin.flush();
    }
    let (code, log) = vm.finish();
    let ok = code == Some(EXIT_FAIL)
        && log.contains("EXCEPTION: #PF page fault (vector 14) on CPU 0")
        && log.contains("data write of a present, protected page")
        && log.contains("RESULT: FAIL (fatal exception)")
        && !log.contains("RESULT: PASS");
    check(ok, || {
        format!("the fault run did not report as it must (status {code:?}):\n{log}")
    })
}
