//! Attaching to a running process (`ftrace record -p PID`): `tests/programs/attach_target.c`,
//! started normally (no agent), is attached to twice in a row, once with each tracer, traced
//! for a while and detached (SIGINT to the tool, as Ctrl-C). While attached its text differs
//! from the file (the sites call the agent); after each detach every byte of its mapped text
//! is the file's again; the trace holds both worker threads' calls; and at the end the
//! program's own counters show every call returned the right result.
//!
//! Needs gcc; nothing is skipped when it is missing: it fails.

mod common;

use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scratch(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ftrace-attach")
        .join(test);
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Whether every executable mapping of `exe` in `pid` holds the file's bytes.
fn text_is_the_files(pid: u32, exe: &Path) -> bool {
    let exe = exe.canonicalize().unwrap();
    // The last thread's view: a zombie main thread has no maps.
    let task = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .unwrap();
    let maps = std::fs::read_to_string(format!("/proc/{pid}/task/{task}/maps")).unwrap();
    let file = std::fs::read(&exe).unwrap();
    let mem = std::fs::File::open(format!("/proc/{pid}/task/{task}/mem")).unwrap();
    let mut seen = 0;
    for line in maps.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 6 || !f[1].contains('x') || Path::new(f[5]) != exe {
            continue;
        }
        let (lo, hi) = f[0].split_once('-').unwrap();
        let lo = u64::from_str_radix(lo, 16).unwrap();
        let hi = u64::from_str_radix(hi, 16).unwrap();
        let off = usize::from_str_radix(f[2], 16).unwrap();
        let len = ((hi - lo) as usize).min(file.len() - off);
        let mut got = vec![0u8; len];
        mem.read_exact_at(&mut got, lo).unwrap();
        if let Some(i) = (0..len).find(|&i| got[i] != file[off + i]) {
            eprintln!(
                "text differs at {:#x}: {:02x?} in memory, {:02x?} in the file",
                lo as usize + i,
                &got[i..(i + 8).min(len)],
                &file[off + i..off + (i + 8).min(len)]
            );
            return false;
        }
        seen += 1;
    }
    assert!(seen > 0, "no text mapping of {} in {maps}", exe.display());
    true
}

/// Attaches with `tracer` into `out`, lets it trace for a while, detaches with SIGINT; returns
/// the tool's stderr.
fn attach_for_a_while(pid: u32, exe: &Path, tracer: &str, out: &Path) -> String {
    let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-t", tracer, "-o"])
        .arg(out)
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = tool.stderr.take().unwrap();
    // Attached once the agent's instance directory has a thread's buffer.
    let start = Instant::now();
    let has_buffer = || {
        std::fs::read_dir(out)
            .ok()
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| {
                std::fs::read_dir(d.path())
                    .ok()
                    .into_iter()
                    .flatten()
                    .flatten()
                    .any(|f| f.file_name().to_string_lossy().starts_with("buf-"))
            })
    };
    while !has_buffer() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "no buffer after 20 s"
        );
        assert!(tool.try_wait().unwrap().is_none(), "ftrace ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !text_is_the_files(pid, exe),
        "{tracer}: the sites are not patched while attached"
    );
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tool.id() as libc::pid_t, libc::SIGINT) };
    let status = tool.wait().unwrap();
    let mut text = String::new();
    err.read_to_string(&mut text).unwrap();
    assert!(status.success(), "{tracer}: {status}: {text}");
    assert!(
        text.contains(&format!("detached from process {pid}")),
        "{text}"
    );
    text
}

/// Starts `exe` untraced, as a user would (stdin and stdout piped), and gives its threads
/// time to start: (the child, its pid).
fn start_untraced(exe: &Path) -> (std::process::Child, u32) {
    let prog = Command::new(exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = prog.id();
    std::thread::sleep(Duration::from_millis(200));
    (prog, pid)
}

fn report(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["report", "-i"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn attach_trace_detach_twice() {
    let dir = scratch("twice");
    let exe = common::build_kernel_style(&dir, "attach_target");
    let (mut prog, pid) = start_untraced(&exe);
    assert!(text_is_the_files(pid, &exe));

    let fun = dir.join("function.data");
    attach_for_a_while(pid, &exe, "function", &fun);
    assert!(text_is_the_files(pid, &exe), "function: text not restored");
    let text = report(&fun);
    let tids: std::collections::BTreeSet<&str> = text
        .lines()
        .filter(|l| l.contains("tick_beta <-tick_alpha"))
        .filter_map(|l| l.split_whitespace().next()?.rsplit_once('-').map(|t| t.1))
        .collect();
    assert_eq!(tids.len(), 2, "both workers traced: {tids:?}\n{text}");

    let graph = dir.join("graph.data");
    attach_for_a_while(pid, &exe, "function_graph", &graph);
    assert!(
        text_is_the_files(pid, &exe),
        "function_graph: text not restored"
    );
    let text = report(&graph);
    assert!(text.contains("tick_alpha() {"), "{text}");
    assert!(text.contains("tick_beta();"), "{text}");

    drop(prog.stdin.take());
    let out = prog.wait_with_output().unwrap();
    assert!(out.status.success());
    let line = String::from_utf8(out.stdout).unwrap();
    let n: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    assert_eq!(n.len(), 3, "{line}");
    assert!(n[0] > 0 && n[1] > 0, "{line}");
    assert_eq!(n[2], 0, "wrong results: {line}");
}

#[test]
fn a_missing_process_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-p", "4000000000"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no process 4000000000"), "{err}");
}

#[test]
fn a_program_without_call_sites_is_refused_and_untouched() {
    let mut prog = Command::new("sleep").arg("30").spawn().unwrap();
    let pid = prog.id();
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-o"])
        .arg(scratch("nosites").join("out"))
        .args(["-p", &pid.to_string()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("no call sites"), "{err}");
    assert!(prog.try_wait().unwrap().is_none(), "sleep still runs");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    assert!(!maps.contains("libftrace_agent"), "no agent loaded: {maps}");
    prog.kill().unwrap();
    prog.wait().unwrap();
}

#[test]
fn a_process_that_exits_while_attached_ends_the_recording() {
    let dir = scratch("exits");
    let exe = common::build_kernel_style(&dir, "attach_target");
    let (mut prog, pid) = start_untraced(&exe);
    let out = dir.join("out");
    let tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-t", "function", "-o"])
        .arg(&out)
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !std::fs::read_dir(&out).is_ok_and(|mut d| d.next().is_some()) {
        assert!(start.elapsed() < Duration::from_secs(20), "not attached");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(300));
    drop(prog.stdin.take());
    let line = String::from_utf8(prog.wait_with_output().unwrap().stdout).unwrap();
    assert!(line.ends_with("wrong 0\n"), "{line}");
    let res = tool.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "{err}");
    assert!(
        err.contains(&format!("process {pid} exited while attached")),
        "{err}"
    );
    assert!(report(&out).contains("tick_beta <-tick_alpha"));
}

#[test]
fn a_process_started_under_ftrace_is_refused() {
    let dir = scratch("already");
    let exe = common::build_kernel_style(&dir, "attach_target");
    let mut launched = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-t", "function", "-o"])
        .arg(dir.join("launched"))
        .arg("--")
        .arg(&exe)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The program is the tool's child; wait for its agent to be there.
    let start = Instant::now();
    let pid = loop {
        assert!(start.elapsed() < Duration::from_secs(20), "not started");
        let children =
            std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", launched.id()))
                .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap_or_default();
            if maps.contains("libftrace_agent") {
                break pid.to_string();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-o"])
        .arg(dir.join("attached"))
        .args(["-p", &pid])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("already traced by ftrace"), "{err}");
    drop(launched.stdin.take());
    let res = launched.wait_with_output().unwrap();
    assert!(res.status.success());
    let line = String::from_utf8(res.stdout).unwrap();
    assert!(line.ends_with("wrong 0\n"), "{line}");
}

#[test]
fn live_attaches_and_reports() {
    let dir = scratch("live");
    let exe = common::build_kernel_style(&dir, "attach_target");
    let (mut prog, pid) = start_untraced(&exe);
    let tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["live", "-t", "function_graph", "-p", &pid.to_string()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let maps = || std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();

    while text_is_the_files(pid, &exe) {
        assert!(start.elapsed() < Duration::from_secs(20), "not attached");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(maps().contains("libftrace_agent"));
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tool.id() as libc::pid_t, libc::SIGINT) };
    let res = tool.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&res.stderr);
    assert!(res.status.success(), "{err}");
    assert!(text_is_the_files(pid, &exe));
    let text = String::from_utf8(res.stdout).unwrap();
    assert!(text.starts_with("# tracer: function_graph"), "{text}");
    assert!(text.contains("tick_alpha() {"), "{text}");
    drop(prog.stdin.take());
    let line = String::from_utf8(prog.wait_with_output().unwrap().stdout).unwrap();
    assert!(line.ends_with("wrong 0\n"), "{line}");
}

#[test]
fn a_process_whose_main_thread_exited_is_attached_through_another() {
    let dir = scratch("exit_main");
    let exe = common::build_kernel_style(&dir, "attach_target");
    let mut prog = Command::new(&exe)
        .arg("exit-main")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = prog.id();
    std::thread::sleep(Duration::from_millis(200));
    let stat = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/stat")).unwrap();
    assert!(stat.contains(") Z "), "the main thread is a zombie: {stat}");
    let out = dir.join("out");
    attach_for_a_while(pid, &exe, "function", &out);
    assert!(text_is_the_files(pid, &exe), "text not restored");
    assert!(report(&out).contains("tick_beta <-tick_alpha"));
    drop(prog.stdin.take());
    let line = String::from_utf8(prog.wait_with_output().unwrap().stdout).unwrap();
    assert!(line.ends_with("wrong 0\n"), "{line}");
}

#[test]
fn a_mounted_attach_serves_tracefs_and_nop_restores_the_text() {
    let dir = scratch("mount");
    let exe = common::build_kernel_style(&dir, "attach_target");
    let (mut prog, pid) = start_untraced(&exe);
    let mnt = dir.join("tracing");
    std::fs::create_dir(&mnt).unwrap();
    let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-t", "function", "--mount"])
        .arg(&mnt)
        .arg("-o")
        .arg(dir.join("rec"))
        .args(["-p", &pid.to_string()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !mnt.join("available_tracers").exists() {
        assert!(start.elapsed() < Duration::from_secs(30), "not mounted");
        assert!(tool.try_wait().unwrap().is_none(), "ftrace ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let read = |f: &str| std::fs::read_to_string(mnt.join(f)).unwrap();
    assert_eq!(read("current_tracer"), "function\n");
    assert!(!text_is_the_files(pid, &exe), "patched while tracing");
    std::thread::sleep(Duration::from_millis(200));
    assert!(read("trace").contains("tick_beta <-tick_alpha"));
    std::fs::write(mnt.join("current_tracer"), "nop\n").unwrap();
    assert!(text_is_the_files(pid, &exe), "nop puts every site back");
    std::fs::write(mnt.join("current_tracer"), "function_graph\n").unwrap();
    assert!(!text_is_the_files(pid, &exe), "patched again");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(tool.id() as libc::pid_t, libc::SIGINT) };
    let mut err = String::new();
    tool.stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(tool.wait().unwrap().success(), "{err}");
    assert!(
        err.contains(&format!("detached from process {pid}")),
        "{err}"
    );
    assert!(text_is_the_files(pid, &exe), "detached: text restored");
    drop(prog.stdin.take());
    let line = String::from_utf8(prog.wait_with_output().unwrap().stdout).unwrap();
    assert!(line.ends_with("wrong 0\n"), "{line}");
}
