//! `ftrace report` of a streamed recording reads its events files where they are: the text is
//! byte for byte what the same recording turned into kernel pages reports, and the recording
//! does not change (no pages, no second copy).

use std::path::{Path, PathBuf};

use ftrace_agent::config::TracerKind;
use ftrace_user::record::RecordOptions;
use ftrace_user::recording::RecordingReader;
use ftrace_user::report::{ReportArgs, report};

mod common;

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-report-recording");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Every file under `dir` with its size, in name order.
fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let m = e.metadata().unwrap();
            if m.is_dir() {
                todo.push(e.path());
            } else {
                out.push((e.path(), m.len()));
            }
        }
    }
    out.sort();
    out
}

fn record_streamed(tag: &str, tracer: TracerKind, args: &[&str]) -> PathBuf {
    let opts = RecordOptions {
        tracer,
        buffer_kb: 8192,
        retval: tracer == TracerKind::FunctionGraph,
        ..Default::default()
    };
    common::record_stream_calls(&scratch(), tag, opts, args).dir
}

/// The report views compared: options and CPU files.
fn views(tracer: TracerKind, nr_cpus: u32) -> Vec<(Vec<&'static str>, Option<u32>)> {
    let mut v = vec![
        (vec![], None),
        (vec!["latency-format"], None),
        (vec!["sym-offset"], None),
    ];
    v.extend((0..nr_cpus.min(4)).map(|c| (vec![], Some(c))));
    if tracer == TracerKind::FunctionGraph {
        v.push((vec!["funcgraph-proc", "funcgraph-abstime"], None));
        v.push((vec!["funcgraph-retval"], None));
    }
    v
}

fn report_view(dir: &Path, options: &[&str], cpu: Option<u32>) -> String {
    let mut a = ReportArgs::new(dir);
    a.options = options.iter().map(|s| s.to_string()).collect();
    a.cpu = cpu;
    String::from_utf8(report(&a).unwrap()).unwrap()
}

#[test]
fn report_reads_events_files_in_place_and_matches_the_pages() {
    for (tag, tracer) in [
        ("graph", TracerKind::FunctionGraph),
        ("function", TracerKind::Function),
    ] {
        // Three threads (two at a time) on this machine's CPUs: migrations, leaves folded
        // or not, equal timestamps across threads.
        let dir = record_streamed(tag, tracer, &["3", "20000", "2"]);
        let nr_cpus = RecordingReader::open(&dir).unwrap().rec.nr_cpus;
        let before = listing(&dir);
        let direct: Vec<String> = views(tracer, nr_cpus)
            .iter()
            .map(|(o, c)| report_view(&dir, o, *c))
            .collect();
        assert_eq!(listing(&dir), before, "{tag}: the report wrote nothing");
        assert!(direct[0].contains("leaf"), "{}", direct[0]);
        // The same recording turned into kernel pages (what the first report used to write),
        // reported from the pages.
        ftrace_user::capture::ensure_capture(&dir).unwrap();
        assert!(dir.join("per_cpu/cpu0/trace_pipe_raw").is_file());
        // Each CPU's pages, streamed from the events files, are the pages written.
        let reader = RecordingReader::open(&dir).unwrap();
        let census = reader.census().unwrap();
        for cpu in 0..nr_cpus {
            let pages =
                ftrace_user::capture::write_cpu_pages(&reader, &census, cpu, Vec::new()).unwrap();
            let file = std::fs::read(dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"))).unwrap();
            assert!(pages == file, "{tag}: cpu {cpu}'s pages");
        }
        for ((o, c), text) in views(tracer, nr_cpus).iter().zip(&direct) {
            let pages = report_view(&dir, o, *c);
            assert!(
                pages == *text,
                "{tag} {o:?} cpu {c:?}: the report of the events files differs from the pages'"
            );
        }
    }
}

#[test]
fn a_cut_events_file_is_reported_up_to_the_cut() {
    let dir = record_streamed("cut", TracerKind::Function, &["2", "5000", "1"]);
    let whole = report_view(&dir, &[], None);
    let lines = |t: &str| t.lines().filter(|l| !l.starts_with('#')).count();
    // The largest events file (a worker's), cut inside a record near its middle.
    let mut files: Vec<(PathBuf, u64)> = listing(&dir)
        .into_iter()
        .filter(|(p, _)| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("events-")
        })
        .collect();
    files.sort_by_key(|(_, n)| *n);
    let (victim, len) = files.last().unwrap().clone();
    let bytes = std::fs::read(&victim).unwrap();
    let cut = (len / 2) as usize;
    // A record ends where the next tag starts: cut one byte into the record at `cut`.
    std::fs::write(&victim, &bytes[..cut]).unwrap();
    let mut out = Vec::new();
    let damaged = ftrace_user::report::report_to(&ReportArgs::new(&dir), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    if damaged.is_empty() {
        // The cut fell between two records: the file then just ends early (as when the
        // tool is killed while recording), and fewer events are reported.
        assert!(lines(&text) < lines(&whole));
        return;
    }
    assert_eq!(damaged.len(), 1, "{damaged:?}");
    let msg = damaged[0].to_string();
    assert!(
        msg.contains(&victim.display().to_string()) && msg.contains("offset"),
        "{msg}"
    );
    assert!(lines(&text) > 0 && lines(&text) < lines(&whole));
    assert!(
        report(&ReportArgs::new(&dir)).is_err(),
        "report() refuses it"
    );
    let (mut o, mut e) = (Vec::new(), Vec::new());
    let code = ftrace_user::cli::run(
        ["ftrace", "report", "-i", dir.to_str().unwrap()],
        &mut o,
        &mut e,
    );
    assert_eq!(code, 1);
    assert_eq!(o, text.as_bytes(), "the CLI prints the same");
    let e = String::from_utf8(e).unwrap();
    assert!(e.starts_with("ftrace: damaged: "), "{e}");
}

/// `report --stat`'s rows: name -> (hits, the Time column in µs if any).
fn stat_rows(text: &str) -> std::collections::HashMap<String, (u64, Option<f64>)> {
    text.lines()
        .skip(2)
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (
                w[0].to_string(),
                (w[1].parse().unwrap(), w.get(2).map(|t| t.parse().unwrap())),
            )
        })
        .collect()
}

#[test]
fn report_stat_counts_every_call_and_sums_the_durations() {
    use ftrace_core::EventId;
    for (tag, tracer) in [
        ("stat-graph", TracerKind::FunctionGraph),
        ("stat-function", TracerKind::Function),
    ] {
        let dir = record_streamed(tag, tracer, &["2", "4000", "1"]);
        let before = listing(&dir);
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = ftrace_user::cli::run(
            ["ftrace", "report", "--stat", "-i", dir.to_str().unwrap()],
            &mut out,
            &mut err,
        );
        assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
        assert_eq!(listing(&dir), before, "--stat wrote nothing");
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("  Function "), "{text}");
        let rows = stat_rows(&text);
        // The program's own counts: 2 threads of 4000 leaf calls, every other through mid.
        assert_eq!(rows["leaf"].0, 8000, "{text}");
        assert_eq!(rows["mid"].0, 4000, "{text}");
        assert_eq!(rows["worker"].0, 2, "{text}");
        if tracer == TracerKind::FunctionGraph {
            // leaf's total time is the sum of its exits' durations, as the whole recording
            // read into memory has them (to the 0.1 µs the column prints).
            let rec = ftrace_user::recording::Recording::read(&dir).unwrap();
            let ns: u64 = rec
                .merged()
                .into_iter()
                .filter(|e| e.id() == Some(EventId::FuncgraphExit))
                .filter(|e| rec.event_symbol(e) == Some("leaf"))
                .map(
                    |e| match ftrace_tracers::EventRef::new(e.cpu, e.ts, &e.data).entry() {
                        // Exits carry return values here (the retval layout).
                        ftrace_tracers::Entry::GraphReturn(r) => r.ret.rettime - r.ret.calltime,
                        other => panic!("an exit that is {other:?}"),
                    },
                )
                .sum();
            let us = rows["leaf"].1.unwrap();
            assert!((us - ns as f64 / 1000.0).abs() < 0.2, "{us} us, {ns} ns");
        } else {
            assert!(text.lines().next().unwrap().trim_end().ends_with("Hit"));
        }
    }
}

/// Runs `fn` with this thread (and so the programs it starts) on the CPU it is on, then
/// restores its CPUs: a recording whose every event is on one CPU, so that a leaf's entry and
/// exit are always next to each other.
fn on_one_cpu<T>(f: impl FnOnce(u32) -> T) -> T {
    let size = std::mem::size_of::<libc::cpu_set_t>();
    // SAFETY: cpu_set_t is plain data, all zeros is the empty set.
    let mut old: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `old` is a valid cpu_set_t of `size` bytes; 0 is this thread.
    assert_eq!(unsafe { libc::sched_getaffinity(0, size, &mut old) }, 0);
    // SAFETY: no arguments; returns the CPU this thread runs on.
    let cpu = unsafe { libc::sched_getcpu() };
    assert!(cpu >= 0);
    // SAFETY: as above.
    let mut one: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (a CPU number the kernel gave).
    unsafe { libc::CPU_SET(cpu as usize, &mut one) };
    // SAFETY: `one` is a valid cpu_set_t of `size` bytes.
    assert_eq!(unsafe { libc::sched_setaffinity(0, size, &one) }, 0);
    let r = f(cpu as u32);
    // SAFETY: `old` as read above.
    assert_eq!(unsafe { libc::sched_setaffinity(0, size, &old) }, 0);
    r
}

/// `stream_calls 1 4 1` recorded on one CPU: (the recording, the CPU, the worker's tid).
/// Its worker calls leaf, mid (which calls leaf), leaf, mid.
fn record_known(tag: &str, tracer: TracerKind) -> (PathBuf, u32, u32) {
    record_known_with(tag, tracer, |_| {})
}

/// [`record_known`] with record-time options set by `set`.
fn record_known_with(
    tag: &str,
    tracer: TracerKind,
    set: impl FnOnce(&mut RecordOptions),
) -> (PathBuf, u32, u32) {
    let mut opts = RecordOptions {
        tracer,
        buffer_kb: 8192,
        ..Default::default()
    };
    set(&mut opts);
    let (dir, cpu) = on_one_cpu(|cpu| {
        let r = common::record_stream_calls(&scratch(), tag, opts, &["1", "4", "1"]);
        (r.dir, cpu)
    });
    let rec = RecordingReader::open(&dir).unwrap().rec;
    let p = &rec.processes[0];
    let workers: Vec<u32> = p
        .threads
        .iter()
        .map(|t| t.tid)
        .filter(|&t| t != p.pid)
        .collect();
    assert_eq!(workers.len(), 1, "{:?}", p.threads);
    (dir, cpu, workers[0])
}

/// `ftrace report -i DIR ARGS...` through the CLI: (exit code, stdout, stderr).
fn cli_report(dir: &Path, args: &[&str]) -> (u8, String, String) {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = ftrace_user::cli::run(
        ["ftrace", "report", "-i", dir.to_str().unwrap()]
            .iter()
            .chain(args),
        &mut out,
        &mut err,
    );
    (
        code,
        String::from_utf8(out).unwrap(),
        String::from_utf8(err).unwrap(),
    )
}

/// The lines of a report below its header.
fn body(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

/// The function_graph text without the CPU and duration columns: the call tree alone.
const TREE_ONLY: [&str; 4] = ["-O", "nofuncgraph-duration", "-O", "nofuncgraph-cpu"];

#[test]
fn report_views_of_a_function_graph_recording() {
    let (dir, cpu, worker) = record_known("views-graph", TracerKind::FunctionGraph);
    let tid = worker.to_string();
    let view = |args: &[&str]| {
        let all: Vec<&str> = TREE_ONLY
            .iter()
            .copied()
            .chain(args.iter().copied())
            .collect();
        let (code, out, err) = cli_report(&dir, &all);
        assert_eq!(code, 0, "{args:?}: {err}");
        body(&out).iter().map(|l| l.to_string()).collect::<Vec<_>>()
    };
    let whole = [
        "worker() {",
        "  leaf();",
        "  mid() {",
        "    leaf();",
        "  }",
        "  leaf();",
        "  mid() {",
        "    leaf();",
        "  }",
        "}",
    ];
    assert_eq!(view(&["--tid", &tid]), whole);
    let cpus = format!("{cpu},{cpu}");
    assert_eq!(view(&["--tid", &tid, "--cpu", &cpus]), whole, "--cpu C,C");
    // One CPU is that CPU's file, through a view as well (every CPU is still read for -F).
    let one = cpu.to_string();
    assert_eq!(view(&["--tid", &tid, "--cpu", &one]), whole, "--cpu C");
    assert_eq!(
        view(&["--cpu", &one, "-G", "mid"]),
        ["mid() {", "  leaf();", "}", "mid() {", "  leaf();", "}"]
    );
    // -F: only leaf; mid's leaf is at depth 0 too (the kernel counts traced calls only).
    assert_eq!(view(&["--tid", &tid, "-F", "leaf"]), ["leaf();"; 4]);
    // A glob and a second -F: worker's only shown child is leaf, four times.
    assert_eq!(
        view(&["--tid", &tid, "-F", "l?a*", "-F", "worker"]),
        [
            "worker() {",
            "  leaf();",
            "  leaf();",
            "  leaf();",
            "  leaf();",
            "}"
        ]
    );
    // -N mid: mid hidden, its leaf one level up.
    assert_eq!(
        view(&["--tid", &tid, "-N", "mid"]),
        [
            "worker() {",
            "  leaf();",
            "  leaf();",
            "  leaf();",
            "  leaf();",
            "}"
        ]
    );
    // -G mid: the two subtrees under mid, at depth 0, and nothing of main's thread.
    assert_eq!(
        view(&["-G", "mid"]),
        ["mid() {", "  leaf();", "}", "mid() {", "  leaf();", "}"]
    );
    // --max-depth 2: mid's children cut, mid folded into a leaf with its whole duration.
    assert_eq!(
        view(&["--tid", &tid, "--max-depth", "2"]),
        [
            "worker() {",
            "  leaf();",
            "  mid();",
            "  leaf();",
            "  mid();",
            "}"
        ]
    );
    // All combined.
    assert_eq!(
        view(&[
            "-G",
            "worker",
            "-N",
            "leaf",
            "--max-depth",
            "2",
            "--tid",
            &tid
        ]),
        ["worker() {", "  mid();", "  mid();", "}"]
    );
    // A time range that ends before the worker starts: main's entry alone, its exit after
    // the range (a call shown prints its exit).
    let (_, out, _) = cli_report(&dir, &["-r", "~0ns"]);
    let lines = body(&out);
    assert_eq!(lines.len(), 1, "{out}");
    assert!(lines[0].ends_with("|  main();"), "{out}");
    // --stat of a view counts what it shows.
    let (code, out, err) = cli_report(&dir, &["--stat", "--tid", &tid]);
    assert_eq!(code, 0, "{err}");
    let rows = stat_rows(&out);
    assert_eq!(rows.len(), 3, "{out}");
    assert_eq!((rows["worker"].0, rows["mid"].0, rows["leaf"].0), (1, 2, 4));
    let (_, out, _) = cli_report(&dir, &["--stat", "-G", "mid"]);
    let rows = stat_rows(&out);
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!((rows["mid"].0, rows["leaf"].0), (2, 2));
}

#[test]
fn report_views_of_a_function_recording() {
    use ftrace_user::recording::Recording;
    let (dir, _, worker) = record_known("views-function", TracerKind::Function);
    let (code, whole, err) = cli_report(&dir, &[]);
    assert_eq!(code, 0, "{err}");
    let whole = body(&whole);
    assert_eq!(whole.len(), 8, "main, worker, 4 leaf, 2 mid");
    let view = |args: &[&str]| {
        let (code, out, err) = cli_report(&dir, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    let is = |name: &'static str| move |l: &&str| l.contains(&format!(": {name} <-"));
    let leafs: Vec<&str> = whole.iter().copied().filter(is("leaf")).collect();
    assert_eq!(leafs.len(), 4);
    assert_eq!(body(&view(&["-F", "leaf"])), leafs);
    let others: Vec<&str> = whole.iter().copied().filter(|l| !is("leaf")(l)).collect();
    assert_eq!(body(&view(&["-N", "leaf"])), others);
    let workers: Vec<&str> = whole
        .iter()
        .copied()
        .filter(|l| l.contains(&format!("-{worker} ")))
        .collect();
    assert_eq!(workers.len(), 7);
    assert_eq!(body(&view(&["--tid", &worker.to_string()])), workers);
    // A time range in nanoseconds since the first event: the third to the sixth event, and
    // any event at the same time as either end (an AMD TSC counts in steps of 10 ns: two
    // calls in a row can have one time).
    let rec = Recording::read(&dir).unwrap();
    let ts: Vec<u64> = rec.merged().iter().map(|e| e.ts).collect();
    assert_eq!(ts.len(), 8);
    let range = format!("{}ns~{}ns", ts[2] - ts[0], ts[5] - ts[0]);
    let within: Vec<&str> = whole
        .iter()
        .zip(&ts)
        .filter(|(_, t)| (ts[2]..=ts[5]).contains(*t))
        .map(|(l, _)| *l)
        .collect();
    assert!(within.len() >= 4, "{within:?}");
    assert_eq!(body(&view(&["--time-range", &range])), within);
    // From a timestamp as the trace prints it (to the microsecond): every line from it on.
    let stamp = |l: &str| {
        l.split_whitespace()
            .find_map(|w| w.strip_suffix(':'))
            .unwrap()
            .to_string()
    };
    let from = stamp(whole[3]);
    let expected: Vec<&str> = whole
        .iter()
        .copied()
        .filter(|l| stamp(l).parse::<f64>().unwrap() >= from.parse::<f64>().unwrap())
        .collect();
    assert!(expected.len() >= 5, "{expected:?}");
    assert_eq!(body(&view(&["-r", &format!("{from}~")])), expected);
    // Nesting views need function_graph.
    let (code, out, err) = cli_report(&dir, &["-G", "mid"]);
    assert_eq!((code, out.as_str()), (1, ""));
    assert!(
        err.contains("-G 'mid': set_graph_function: Invalid argument"),
        "{err}"
    );
}

#[test]
fn bad_views_are_refused_before_anything_is_printed() {
    let (dir, _, _) = record_known("views-bad", TracerKind::FunctionGraph);
    for (args, code, says) in [
        (
            &["-F", "["][..],
            1,
            "-F '[': set_ftrace_filter: Invalid argument: no function",
        ),
        (
            &["-F", "nosuch"],
            1,
            "-F 'nosuch': set_ftrace_filter: Invalid argument",
        ),
        (
            &["-N", "nosuch*"],
            1,
            "-N 'nosuch*': set_ftrace_notrace: Invalid argument",
        ),
        (
            &["-G", "no?such"],
            1,
            "-G 'no?such': set_graph_function: Invalid argument",
        ),
        (
            &["-r", "3s~1s"],
            2,
            "--time-range '3s~1s': Invalid argument: START is after END",
        ),
        (&["-r", "5"], 2, "Invalid argument: expected START~END"),
        (&["-r", "1x~"], 2, "Invalid argument"),
        (&["--max-depth", "two"], 2, "invalid value 'two'"),
        (
            &["--tid", "1"],
            1,
            "--tid 1: no such thread in the recording",
        ),
        (&["--tid", "x"], 2, "invalid value 'x'"),
        (&["--cpu", "0,9999"], 1, "no such CPU"),
    ] {
        let (got, out, err) = cli_report(&dir, args);
        assert_eq!(got, code, "{args:?}: {err}");
        assert_eq!(out, "", "{args:?}: nothing printed");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

/// A view of a complete recording is what a recording made with the same filters holds:
/// the agent's record-time filters (`set_ftrace_filter`... in the program) are the oracle.
#[test]
fn report_views_equal_recordings_made_with_the_same_filters() {
    let (whole, _, worker) = record_known("views-whole", TracerKind::FunctionGraph);
    type Set = fn(&mut RecordOptions);
    let cases: [(&str, &[&str], Set); 5] = [
        ("views-rec-f", &["-F", "leaf"], |o| {
            o.filter = vec!["leaf".into()]
        }),
        ("views-rec-fw", &["-F", "l?a*", "-F", "worker"], |o| {
            o.filter = vec!["l?a*".into(), "worker".into()]
        }),
        ("views-rec-n", &["-N", "mid"], |o| {
            o.notrace = vec!["mid".into()]
        }),
        ("views-rec-g", &["-G", "mid"], |o| {
            o.graph_functions = vec!["mid".into()]
        }),
        (
            "views-rec-d",
            &["-G", "worker", "-N", "leaf", "--max-depth", "2"],
            |o| {
                o.graph_functions = vec!["worker".into()];
                o.notrace = vec!["leaf".into()];
                o.max_depth = 2;
            },
        ),
    ];
    for (tag, view, set) in cases {
        let (dir, _, tid) = record_known_with(tag, TracerKind::FunctionGraph, set);
        let tree = |dir: &Path, tid: u32, more: &[&str]| {
            let tid = tid.to_string();
            let args: Vec<&str> = TREE_ONLY
                .iter()
                .copied()
                .chain(["--tid", tid.as_str()])
                .chain(more.iter().copied())
                .collect();
            let (code, out, err) = cli_report(dir, &args);
            assert_eq!(code, 0, "{view:?}: {err}");
            body(&out).iter().map(|l| l.to_string()).collect::<Vec<_>>()
        };
        let recorded = tree(&dir, tid, &[]);
        assert!(!recorded.is_empty(), "{view:?}");
        assert_eq!(tree(&whole, worker, view), recorded, "{view:?}");
    }
}
