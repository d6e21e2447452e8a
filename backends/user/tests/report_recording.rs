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
