//! `ftrace record -e SYSTEM:EVENT`: the trace events a C program declares with
//! `ftrace/tracepoint.h`, armed in the agent at start, streamed with the function events and
//! printed by a later `ftrace report` through the print formats stored in the recording,
//! interleaved with the function entries in timestamp order. Events not armed are absent.
//!
//! Needs gcc (installed by `cargo xtask test`); nothing here is skipped when it is missing.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn scratch(tag: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ftrace-record-events-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn events_prog(dir: &Path) -> PathBuf {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let inc = format!("-I{}", include.display());
    common::build_kernel_style_with(dir, "events", &[&inc])
}

/// Records `prog` with `args` (before `--`), feeding it `rounds` lines; returns the report.
fn record_and_report(dir: &Path, prog: &Path, args: &[&str], rounds: usize) -> String {
    let rec = dir.join("rec");
    let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .current_dir(dir)
        .args(["record", "-t", "function"])
        .args(args)
        .arg("-o")
        .arg(&rec)
        .arg("--")
        .arg(prog)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = tool.stdin.take().unwrap();
    for _ in 0..rounds {
        stdin.write_all(b"round\n").unwrap();
    }
    drop(stdin);
    let out = tool.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "record failed: {stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("rounds {rounds}\n")
    );
    assert!(stderr.contains(", 0 lost"), "{stderr}");
    let report = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["report", "-i"])
        .arg(&rec)
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "report failed: {}",
        String::from_utf8_lossy(&report.stderr)
    );
    String::from_utf8(report.stdout).unwrap()
}

/// The body of each event line after its context (`comm-pid [cpu] flags ts: `), and whether
/// the context names the traced program's thread.
fn bodies(report: &str, pid_comm: &str) -> Vec<String> {
    report
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            assert!(l.trim_start().starts_with(pid_comm), "{l:?}");
            // `... 1234.567890: body`: the body follows the timestamp's colon.
            let (_, body) = l.split_once("]").unwrap();
            let (_, body) = body.split_once(": ").unwrap();
            body.to_string()
        })
        .collect()
}

#[test]
fn recorded_events_print_with_their_formats_among_the_function_entries() {
    let dir = scratch("armed");
    let prog = events_prog(&dir);
    let report = record_and_report(&dir, &prog, &["-e", "demo:demo_value", "-e", "sched:*"], 2);
    let lines = bodies(&report, "events-");
    let pid = lines
        .iter()
        .find_map(|l| l.strip_prefix("sched_wakeup: comm=events pid="))
        .and_then(|r| r.split_once(' '))
        .map(|(p, _)| p.to_string())
        .unwrap_or_else(|| panic!("no sched_wakeup line:\n{report}"));
    let mut want = Vec::new();
    for _ in 0..2 {
        want.push("fire_values <-main".to_string());
        for v in 1..=20 {
            want.push(format!("demo_value: value={v} delta={} label=v{v}", v - 10));
        }
        want.push(format!(
            "sched_wakeup: comm=events pid={pid} prio=120 target_cpu=000"
        ));
        want.push("round_done <-main".to_string());
    }
    // main's entry comes first; demo_round (not armed) is absent.
    assert!(lines[0].starts_with("main <-"), "{report}");
    assert_eq!(lines[1..], want[..], "{report}");
    // The formats are in the recording: the program is not needed to print them again.
    std::fs::remove_file(&prog).unwrap();
    let again = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["report", "-i"])
        .arg(dir.join("rec"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8(again.stdout).unwrap(), report);
}

#[test]
fn events_not_armed_are_absent() {
    let dir = scratch("unarmed");
    let prog = events_prog(&dir);
    let report = record_and_report(&dir, &prog, &["-e", "demo_round"], 3);
    let lines = bodies(&report, "events-");
    let events: Vec<&String> = lines.iter().filter(|l| !l.contains(" <-")).collect();
    assert_eq!(
        events,
        [
            "demo_round: round=1",
            "demo_round: round=2",
            "demo_round: round=3"
        ],
        "{report}"
    );
    // A token naming no event is told (the program's events are known once it ran).
    let dir = scratch("unknown");
    let prog = events_prog(&dir);
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .current_dir(&dir)
        .args([
            "record",
            "-t",
            "function",
            "-e",
            "demo:nope",
            "-o",
            "rec",
            "--",
        ])
        .arg(&prog)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains(
            "ftrace: -e demo:nope: the program declares no such event (it declares: \
             calls:demo_call sched:sched_wakeup demo:demo_round demo:demo_value)\n"
        ),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Without -e: function entries only.
    let dir = scratch("none");
    let prog = events_prog(&dir);
    let report = record_and_report(&dir, &prog, &[], 1);
    assert!(
        bodies(&report, "events-").iter().all(|l| l.contains(" <-")),
        "{report}"
    );
}

#[test]
fn events_with_the_flight_recorder_are_refused_before_the_program_runs() {
    let dir = scratch("overwrite");
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .current_dir(&dir)
        .args([
            "record",
            "--overwrite",
            "-e",
            "demo:*",
            "-o",
            "rec",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("ftrace: -e: trace events are not"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.join("rec").exists(), "nothing recorded");
}
