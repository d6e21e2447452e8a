//! The agent's threads take none of the traced program's signals. A signal sent to the process
//! (`kill(getpid(), ...)`) while the program's only thread blocks it must wait for that thread:
//! if the agent's control thread left it unblocked, the program's handler would run there, at
//! once (dash then drops a trap it handles while it vforks: ftracetest's UNSUPPORTED signal was
//! lost that way). `tests/programs/signal_target.c` says where its handler ran.
//!
//! Needs gcc and FUSE (`fusermount3`); nothing is skipped when it is missing: it fails.

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn a_signal_to_the_traced_process_waits_for_the_programs_thread() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-signals");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let prog = common::build_kernel_style(&dir, "signal_target");
    // Untraced first: the program's own answer, so the test checks the agent, not the kernel.
    let plain = Command::new(&prog).output().unwrap();
    let plain = String::from_utf8_lossy(&plain.stdout).into_owned();
    assert_eq!(plain, "while blocked: pending\nafter unblock: main\n");
    // Recorded with the live mount: the agent's control thread runs in the program meanwhile.
    let mnt = dir.join("tracing");
    std::fs::create_dir_all(&mnt).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-t", "function", "--mount"])
        .arg(&mnt)
        .arg("-o")
        .arg(dir.join("rec"))
        .arg("--")
        .arg(&prog)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), plain, "{stderr}");
    // And the program was traced: its `work` calls are in the recording.
    let report = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["report", "-i"])
        .arg(dir.join("rec"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&report.stdout);
    let calls: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split_once(": ")?.1.split(" <-").next())
        .filter(|f| ["work", "on_usr1"].contains(f))
        .collect();
    assert_eq!(calls, ["work", "on_usr1", "work"], "{text}");
}
