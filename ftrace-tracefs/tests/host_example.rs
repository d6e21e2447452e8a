//! The host example (`examples/host.rs`) is a complete backend in at most 40 lines (the
//! simulated trampoline and workload aside), and what it prints is the kernel's text: the
//! `trace` headers byte for byte as Linux 6.12 prints them, every line in the kernel's
//! column layout, the bad write's errno.

use std::process::Command;

mod common;
use common::golden;

/// The example itself, compiled into this test (its `main` is an ordinary function here).
#[path = "../examples/host.rs"]
#[allow(dead_code)]
mod host;

const EXAMPLE: &str = include_str!("../examples/host.rs");

/// Set in the child this test starts to run the example's `main` on its own stdout.
const RUN_MAIN: &str = "FTRACE_TRACEFS_RUN_HOST_EXAMPLE";

/// Runs the example's `main` when this test binary is started by [`run_example`] (a fresh
/// process: the example's `static` instance starts at boot, its output is the process's).
#[test]
fn child_runs_the_example() {
    if std::env::var_os(RUN_MAIN).is_some() {
        host::main().expect("the example's session");
    }
}

/// What the example prints, from a child process running its `main`.
fn run_example() -> String {
    let out = Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "--exact",
            "child_runs_the_example",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(RUN_MAIN, "1")
        .output()
        .expect("the test binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let all = String::from_utf8(out.stdout).expect("utf8");
    // The harness's own lines come before and after the example's.
    let start = all
        .find("# tracer: function\n")
        .expect("the example's output");
    let end = all
        .find("(Invalid argument)\n")
        .expect("the bad write's line")
        + 19;
    all[start..end].to_owned()
}

/// The code lines of the example, without comments, blank lines and the two functions that
/// simulate the trampoline (`traced`) and the traced program (`workload`).
fn counted_lines(src: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut skipping = false;
    for line in src.lines() {
        let t = line.trim();
        if line.starts_with("fn traced(") || line.starts_with("fn workload(") {
            skipping = true;
        }
        if !skipping && !t.is_empty() && !t.starts_with("//") {
            out.push(line);
        }
        if skipping && line == "}" {
            skipping = false;
        }
    }
    out
}

#[test]
fn the_example_is_at_most_40_lines_besides_its_simulated_trampoline() {
    let lines = counted_lines(EXAMPLE);
    assert!(
        lines.len() <= 40,
        "{} lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
    // What is counted is the platform, the static instance and the session.
    for needle in [
        "unsafe impl Platform for Host",
        "static TRACE",
        "pub fn main()",
    ] {
        assert!(lines.iter().any(|l| l.contains(needle)), "{needle}");
    }
}

/// A `function` tracer line in the kernel's layout (`print_trace_fmt` with the default
/// options): comm right-aligned in 16, `-pid` left-aligned in 7, ` [cpu]`, the five latency
/// flags, the time stamp as `%5lu.%06lu`, then `func <-parent`. Returns (comm, pid, cpu, func,
/// parent).
fn parse_function_line(l: &str) -> Option<(&str, u32, u32, &str, &str)> {
    let (task, rest) = (l.get(..24)?, l.get(24..)?);
    let dash = task.rfind('-')?;
    let comm = task[..dash].trim_start();
    let pid = task[dash + 1..].trim_end().parse().ok()?;
    if dash != 16 {
        return None;
    }
    let rest = rest.strip_prefix(" [")?;
    let cpu = rest.get(..3)?.parse().ok()?;
    let rest = rest.get(3..)?.strip_prefix("] ")?;
    let (flags, rest) = (rest.get(..5)?, rest.get(5..)?.strip_prefix(' ')?);
    if !flags
        .bytes()
        .all(|b| b".NnhHsdb0123456789".contains(&b) || b.is_ascii_alphanumeric())
    {
        return None;
    }
    let (ts, call) = rest.split_once(": ")?;
    let (secs, usecs) = ts.trim_start().split_once('.')?;
    if ts.len() < 12 || usecs.len() != 6 || secs.parse::<u64>().is_err() {
        return None;
    }
    let (func, parent) = call.split_once(" <-")?;
    Some((comm, pid, cpu, func, parent))
}

/// A `function_graph` line (`print_graph_*` with the default options): ` N) `, the
/// duration column of 13, `|  `, then two spaces of indent per depth and the call.
fn parse_graph_line(l: &str) -> Option<(u32, &str, usize, &str)> {
    let (cpu, rest) = l.strip_prefix(' ')?.split_once(") ")?;
    let cpu = cpu.trim_start().parse().ok()?;
    let (duration, call) = rest.split_once("|  ")?;
    if duration.len() != 14 {
        return None;
    }
    let indent = call.len() - call.trim_start().len();
    Some((cpu, duration.trim(), indent / 2, call.trim_start()))
}

fn split_traces(out: &str) -> (&str, &str, &str) {
    let graph = out.find("# tracer: function_graph\n").expect("graph trace");
    let bad = out.find("echo bogus").expect("bad write");
    (&out[..graph], &out[graph..bad], &out[bad..])
}

#[test]
fn the_example_prints_the_kernels_trace_format() {
    let out = run_example();
    let (function, graph, bad) = split_traces(&out);

    // function: the header as Linux prints it (only the counts and #P differ).
    let reference = golden("04-function/trace.txt");
    let ours: Vec<&str> = function.lines().collect();
    let theirs: Vec<&str> = reference.lines().collect();
    assert_eq!(ours[..2], theirs[..2]);
    assert_eq!(ours[2], "# entries-in-buffer/entries-written: 6/6   #P:2");
    assert_eq!(ours[3..12], theirs[3..12]);
    // The parser accepts the kernel's own lines, then ours.
    for l in &theirs[12..] {
        assert!(parse_function_line(l).is_some(), "kernel line: {l:?}");
    }
    let entries: Vec<_> = ours[12..]
        .iter()
        .map(|l| parse_function_line(l).unwrap_or_else(|| panic!("{l:?}")))
        .collect();
    for cpu in 0..2 {
        // The example names no tasks: the kernel's `<...>`.
        let comm = "<...>";
        let calls: Vec<_> = entries.iter().filter(|e| e.2 == cpu).collect();
        let want = [
            ("schedule", "0x00009000"),
            ("do_work", "schedule"),
            ("do_work", "schedule"),
        ];
        assert_eq!(calls.len(), 3, "{function}");
        for (e, (func, parent)) in calls.iter().zip(want) {
            assert_eq!((e.0, e.1, e.3, e.4), (comm, 100 + cpu, func, parent));
        }
    }

    // function_graph: the header byte for byte, then each CPU's calls nested.
    let reference = golden("05-function-graph/trace.txt");
    let ours: Vec<&str> = graph.lines().collect();
    let theirs: Vec<&str> = reference.lines().collect();
    assert_eq!(ours[..4], theirs[..4]);
    for l in theirs[4..]
        .iter()
        .filter(|l| !l.is_empty() && !l.contains("=>") && !l.starts_with(" ---"))
    {
        assert!(parse_graph_line(l).is_some(), "kernel line: {l:?}");
    }
    for cpu in 0..2 {
        let calls: Vec<_> = ours[4..]
            .iter()
            .map(|l| parse_graph_line(l).unwrap_or_else(|| panic!("{l:?}")))
            .filter(|c| c.0 == cpu)
            .map(|c| (c.1.is_empty(), c.2, c.3))
            .collect();
        let want = [
            (true, 0, "schedule() {"),
            (false, 1, "do_work();"),
            (false, 1, "do_work();"),
            (false, 0, "}"),
        ];
        assert_eq!(calls, want, "{graph}");
    }

    // The bad write: the kernel's errno (`sh: write error: Invalid argument`).
    assert!(golden("07-errors/01.txt").contains("Invalid argument"));
    assert_eq!(
        bad,
        "echo bogus > current_tracer: EINVAL (Invalid argument)\n"
    );
}
