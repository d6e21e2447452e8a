//! `ftrace export --format trace.dat` on the kernel's own raw pages (06-raw-function): Debian's
//! `trace-cmd report` reads the file and lists the same events (task, pid, CPU, timestamp,
//! function, parent) as `ftrace report` of the same capture, with the nanosecond timestamps the
//! pages hold. Needs `trace-cmd` (`cargo xtask test` installs it); it fails when missing.

use std::path::{Path, PathBuf};
use std::process::Command;

use ftrace_integration_tests::{Scratch, ftrace, raw_function_capture};

/// The capture directory of 06-raw-function (as `ftrace report --raw-dir` reads it), in
/// `dir/cap`.
fn capture(dir: &Path) -> PathBuf {
    let d = dir.join("cap");
    raw_function_capture(&d);
    d
}

/// Runs trace-cmd and returns its standard output.
///
/// trace-cmd 3.1.6 now and then (about one run in 60, on the very same file) ignores the file's
/// `trace_clock` and prints raw nanosecond stamps with no dot. That is trace-cmd's flake, not a
/// property of the file, so a report showing it is taken again (a few times at most).
fn trace_cmd(args: &[&str]) -> String {
    let mut text = trace_cmd_once(args);
    for _ in 0..4 {
        if !(args.first() == Some(&"report") && forgot_the_clock(&text)) {
            break;
        }
        text = trace_cmd_once(args);
    }
    text
}

/// Whether a report's first event line has a stamp without a dot.
fn forgot_the_clock(report: &str) -> bool {
    report.lines().nth(1).is_some_and(|l| {
        l.find(']')
            .and_then(|i| l[i + 1..].split(':').next())
            .is_some_and(|ts| !ts.contains('.'))
    })
}

fn trace_cmd_once(args: &[&str]) -> String {
    let out = Command::new("trace-cmd")
        .args(args)
        .output()
        .expect("trace-cmd (apt-get install trace-cmd; cargo xtask test installs it)");
    assert!(
        out.status.success(),
        "trace-cmd {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// One event as a text line shows it.
#[derive(Debug, PartialEq, Eq)]
struct Line {
    comm: String,
    pid: u32,
    cpu: u32,
    ts: String,
    /// What the event says, tokens joined by one space: `func <-parent` for a function event
    /// (trace-cmd's function plugin writes `<-- parent`), `tracing_mark_write: text` for print.
    body: String,
}

/// Parses `comm-pid [cpu] ... ts: [event:] body`.
fn parse(line: &str) -> Option<Line> {
    let open = line.find('[')?;
    let close = line.find(']')?;
    let (comm, pid) = line[..open].trim().rsplit_once('-')?;
    let cpu = line[open + 1..close].parse().ok()?;
    let rest = &line[close + 1..];
    let colon = rest.find(": ")?;
    let ts = rest[..colon].split_whitespace().last()?.to_string();
    let mut toks: Vec<&str> = rest[colon + 1..].split_whitespace().collect();
    if matches!(toks.first(), Some(&"function:") | Some(&"print:")) {
        toks.remove(0);
    }
    let body = toks.join(" ").replace(" <-- ", " <-");
    Some(Line {
        comm: comm.to_string(),
        pid: pid.parse().ok()?,
        cpu,
        ts,
        body,
    })
}

fn export(tag: &str) -> (Scratch, PathBuf, PathBuf) {
    let s = Scratch::new(tag);
    let cap = capture(&s.0);
    let dat = export_version(&cap, "6");
    (s, cap, dat)
}

/// Exports `cap` as trace.dat version `v` beside it.
fn export_version(cap: &Path, v: &str) -> PathBuf {
    let dat = cap.with_file_name(format!("trace-v{v}.dat"));
    let (code, _, err) = ftrace(&[
        "export",
        "--format",
        "trace.dat",
        "--file-version",
        v,
        "-i",
        cap.to_str().unwrap(),
        "-o",
        dat.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    dat
}

#[test]
fn trace_cmd_report_lists_the_same_events_as_ftrace_report() {
    let (_s, cap, dat) = export("same");
    let (code, ours, err) = ftrace(&["report", "-i", cap.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let ours: Vec<Line> = String::from_utf8(ours)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| parse(l).unwrap_or_else(|| panic!("ours: {l:?}")))
        .collect();
    let theirs_text = trace_cmd(&["report", "-O", "parent", "-i", dat.to_str().unwrap()]);
    let mut lines = theirs_text.lines();
    assert_eq!(lines.next(), Some("cpus=2"));
    let theirs: Vec<Line> = lines
        .map(|l| parse(l).unwrap_or_else(|| panic!("trace-cmd: {l:?}")))
        .collect();
    assert_eq!(ours.len(), 56, "the capture's 56 events");
    assert!(ours.iter().any(|l| l.body == "vfs_read <-ksys_read"));
    assert!(
        ours.iter()
            .any(|l| l.body.starts_with("tracing_mark_write: "))
    );
    assert_eq!(theirs.len(), ours.len());
    for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
        assert_eq!(a, b, "event {i}");
    }
}

#[test]
fn trace_cmd_reads_the_pages_nanosecond_timestamps() {
    let (_s, cap, dat) = export("ns");
    let mut c = ftrace_user::export::Capture::read(&cap).unwrap();
    let want: Vec<(u32, u64)> = c.events().unwrap().iter().map(|e| (e.cpu, e.ts)).collect();
    let text = trace_cmd(&["report", "-t", "-i", dat.to_str().unwrap()]);
    let got: Vec<(u32, u64)> = text
        .lines()
        .skip(1)
        .map(|l| {
            let cpu = l[l.find('[').unwrap() + 1..l.find(']').unwrap()]
                .parse()
                .unwrap();
            let ts = l[l.find(']').unwrap() + 1..].split(':').next().unwrap();
            let (s, ns) = ts
                .trim()
                .split_once('.')
                .unwrap_or_else(|| panic!("{l:?}\n{text}"));
            assert_eq!(ns.len(), 9, "{l}");
            (
                cpu,
                s.parse::<u64>().unwrap() * 1_000_000_000 + ns.parse::<u64>().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, want);
    // The pages hold both CPUs' events, first at 80.496351514 s (shown as 80.496352).
    assert!(want.iter().any(|e| e.0 == 0) && want.iter().any(|e| e.0 == 1));
    assert_eq!(want[0], (1, 80_496_351_514));
}

#[test]
fn trace_cmd_sees_the_formats_clock_and_cpus() {
    let (_s, _cap, dat) = export("dump");
    let summary = trace_cmd(&["dump", "--summary", "-i", dat.to_str().unwrap()]);
    assert!(summary.contains("[Initial format]"), "{summary}");
    assert!(summary.contains("6\t[Version]"), "{summary}");
    assert!(summary.contains("2 [CPUs with tracing data]"), "{summary}");
    assert!(summary.contains("\t\t[local] global"), "{summary}");
    let events = trace_cmd(&["dump", "--ftrace-events", "-i", dat.to_str().unwrap()]);
    for name in ["function", "funcgraph_entry", "funcgraph_exit", "print"] {
        assert!(
            events.contains(&format!("name: {name}\n")),
            "{name}: {events}"
        );
    }
}

#[test]
fn trace_cmd_reads_version_7_as_version_6() {
    let (_s, cap, v6) = export("v7");
    let v7 = export_version(&cap, "7");
    let summary = trace_cmd(&["dump", "--summary", "-i", v7.to_str().unwrap()]);
    assert!(summary.contains("7\t[Version]"), "{summary}");
    assert!(
        summary.contains("none\t[Compression algorithm]"),
        "{summary}"
    );
    assert!(
        summary.contains(
            "[buffer \"\", \"local\" clock, 4096 page size, 2 cpus, 8192 bytes flyrecord data]"
        ),
        "{summary}"
    );
    for opts in [&["report"][..], &["report", "-O", "parent", "-t"][..]] {
        let a = trace_cmd(&[opts, &["-i", v6.to_str().unwrap()]].concat());
        let b = trace_cmd(&[opts, &["-i", v7.to_str().unwrap()]].concat());
        assert_eq!(a.lines().count(), 57, "{a}");
        assert_eq!(a, b, "{opts:?}");
    }
}

#[test]
fn export_rejects_other_trace_dat_versions() {
    let (code, _, err) = ftrace(&["export", "-f", "trace.dat", "--file-version", "5"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--file-version"), "{err}");
}

#[test]
fn export_of_a_missing_capture_names_it() {
    let s = Scratch::new("missing");
    let (code, _, err) = ftrace(&[
        "export",
        "-f",
        "chrome",
        "-i",
        s.0.join("nope").to_str().unwrap(),
        "-o",
        "-",
    ]);
    assert_eq!(code, 1);
    assert!(
        err.contains("nope") && err.contains("not a directory"),
        "{err}"
    );
}

#[test]
fn chrome_export_of_the_kernel_capture_has_every_event() {
    let s = Scratch::new("chrome");
    let cap = capture(&s.0);
    let (code, json, err) = ftrace(&[
        "export",
        "-f",
        "chrome",
        "-i",
        cap.to_str().unwrap(),
        "-o",
        "-",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
    let (code, ours, err) = ftrace(&["report", "-i", cap.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let want: Vec<(u64, String, String)> = String::from_utf8(ours)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| parse(l).unwrap())
        .map(|l| {
            let ts = l.ts.replace('.', "").parse().unwrap();
            let (name, arg) = match l.body.split_once(" <-") {
                Some((f, p)) => (f.to_string(), p.to_string()),
                None => {
                    let msg = l.body.strip_prefix("tracing_mark_write: ").unwrap();
                    ("print".to_string(), msg.to_string())
                }
            };
            (ts, name, arg)
        })
        .collect();
    let mut got = Vec::new();
    for e in v["traceEvents"].as_array().unwrap() {
        if e["ph"] == "M" {
            continue;
        }
        assert_eq!(e["ph"], "i", "{e}");
        assert_eq!(
            e["pid"], e["tid"],
            "kernel capture: each thread its own process"
        );
        // ts in µs with ns decimals; the text report has µs.
        let us = (e["ts"].as_f64().unwrap()).round() as u64;
        let arg = e["args"]["parent"]
            .as_str()
            .or(e["args"]["msg"].as_str())
            .unwrap();
        got.push((us, e["name"].as_str().unwrap().to_string(), arg.to_string()));
    }
    assert_eq!(got.len(), 56);
    for (a, b) in got.iter().zip(&want) {
        assert_eq!(a.1, b.1);
        assert_eq!(a.2, b.2);
        assert!(a.0.abs_diff(b.0) <= 1, "{a:?} {b:?}");
    }
}

#[test]
fn uftrace_export_refuses_a_kernel_capture() {
    let s = Scratch::new("uft");
    let cap = capture(&s.0);
    let out = s.0.join("uftrace.data");
    let (code, _, err) = ftrace(&[
        "export",
        "-f",
        "uftrace",
        "-i",
        cap.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(code, 1);
    assert!(err.contains("not a recording of `ftrace record`"), "{err}");
}
