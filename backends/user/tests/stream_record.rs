//! Streamed recordings (`ftrace record` without `--overwrite`): the tool drains the agent's
//! rings while the program runs into compact per-thread events files; every call is there,
//! counted against the program's own counters, or counted as lost.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use ftrace_agent::config::TracerKind;
use ftrace_core::EventId;
use ftrace_user::record::RecordOptions;
use ftrace_user::recording::Recording;

mod common;

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-stream");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn build() -> PathBuf {
    common::build_stream_calls(&scratch())
}

/// What the program says it did: (threads, leaf calls, mid calls).
fn own_counts(exe: &Path, args: &[&str]) -> (u64, u64, u64) {
    let out = Command::new(exe).args(args).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let threads = text.lines().filter(|l| l.starts_with("thread ")).count() as u64;
    let total = text.lines().last().unwrap();
    let w: Vec<&str> = total.split_whitespace().collect();
    (threads, w[2].parse().unwrap(), w[4].parse().unwrap())
}

fn run(tag: &str, tracer: TracerKind, buffer_kb: u64, args: &[&str]) -> common::Streamed {
    let opts = RecordOptions {
        tracer,
        buffer_kb,
        ..Default::default()
    };
    common::record_stream_calls(&scratch(), tag, opts, args)
}

/// Files of `dir`'s process directories whose names start with `prefix`.
fn files(dir: &Path, prefix: &str) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|p| p.path().join("meta").is_file())
        .flat_map(|p| std::fs::read_dir(p.path()).unwrap().flatten())
        .filter(|f| f.file_name().to_string_lossy().starts_with(prefix))
        .count()
}

/// Function name -> events of `kind`, and the total of every kind.
fn counts(rec: &Recording, kind: EventId) -> (HashMap<String, u64>, u64) {
    let mut m = HashMap::new();
    let mut all = 0;
    for e in rec.merged() {
        all += 1;
        if e.id() == Some(kind) {
            let name = rec.event_symbol(e).unwrap_or("?").to_string();
            *m.entry(name).or_insert(0) += 1;
        }
    }
    (m, all)
}

#[test]
fn streamed_recording_has_every_call_and_reports() {
    let args = ["2", "80000", "1"];
    let (threads, leaf, mid) = own_counts(&build(), &args);
    let r = run("graph", TracerKind::FunctionGraph, 8192, &args);
    assert!(r.summary.contains(" 0 lost, "), "{}", r.summary);
    assert_eq!(files(&r.dir, "buf-"), 0, "drained rings are removed");
    assert_eq!(files(&r.dir, "events-"), 3);
    assert!(!r.dir.join("per_cpu").exists(), "pages are made when read");
    let rec = Recording::read(&r.dir).unwrap();
    let (fns, all) = counts(&rec, EventId::FuncgraphEntry);
    assert_eq!(fns.get("leaf"), Some(&leaf));
    assert_eq!(fns.get("mid"), Some(&mid));
    assert_eq!(fns.get("worker"), Some(&threads));
    assert_eq!(
        all,
        2 * (leaf + mid + threads + 1),
        "entry and exit of every call, main's too"
    );
    assert_eq!(rec.lost(), 0);
    // Every event's time order holds within its thread.
    let mut last: HashMap<u32, u64> = HashMap::new();
    for e in rec.merged() {
        let prev = last.insert(e.tid, e.ts).unwrap_or(0);
        assert!(e.ts >= prev, "tid {} goes back in time", e.tid);
    }
    let text = ftrace_user::report::report(&ftrace_user::report::ReportArgs::new(&r.dir)).unwrap();
    let text = String::from_utf8(text).unwrap();
    assert!(
        !r.dir.join("per_cpu").exists(),
        "the report reads the events files"
    );
    // One line per call of leaf: `leaf();`, or `leaf() {` where another thread's event on
    // the same CPU comes between its entry and exit (then the kernel does not fold them).
    let leaf_lines = text
        .lines()
        .filter(|l| l.ends_with("leaf();") || l.ends_with("leaf() {"))
        .count() as u64;
    assert_eq!(leaf_lines, leaf);
    assert!(!text.contains("LOST"));
}

#[test]
fn rings_are_drained_while_the_program_runs() {
    // 300 batches of 480 events, 2 ms apart: 144 000 events through a 1 MiB ring of 32 768
    // slots, which holds 68 batches (136 ms): only a drain while the program runs keeps them.
    let args = ["1", "96000", "1", "2000"];
    let (threads, leaf, mid) = own_counts(&build(), &args);
    let r = run("paced", TracerKind::Function, 1024, &args);
    assert!(r.summary.contains(" 0 lost, "), "{}", r.summary);
    let rec = Recording::read(&r.dir).unwrap();
    let (fns, all) = counts(&rec, EventId::Function);
    assert_eq!(fns.get("leaf"), Some(&leaf));
    assert_eq!(all, leaf + mid + threads + 1);
    assert!(all > 4 * 32768);
}

#[test]
fn short_lived_threads_are_drained() {
    let args = ["40", "2000", "20"];
    let (threads, leaf, mid) = own_counts(&build(), &args);
    let r = run("threads", TracerKind::Function, 1024, &args);
    assert!(r.summary.contains(" 0 lost, "), "{}", r.summary);
    assert_eq!(files(&r.dir, "buf-"), 0);
    assert_eq!(files(&r.dir, "events-") as u64, threads + 1);
    let rec = Recording::read(&r.dir).unwrap();
    let (fns, all) = counts(&rec, EventId::Function);
    assert_eq!(fns.get("leaf"), Some(&leaf));
    assert_eq!(fns.get("mid"), Some(&mid));
    assert_eq!(all, leaf + mid + threads + 1);
    let tids: std::collections::HashSet<u32> = rec.merged().iter().map(|e| e.tid).collect();
    assert_eq!(tids.len() as u64, threads + 1);
}

#[test]
fn a_full_ring_drops_and_counts_every_lost_event() {
    let args = ["1", "300000", "1"];
    let (threads, leaf, mid) = own_counts(&build(), &args);
    // 4 KiB: 128 slots, far less than the drain can keep up with.
    let r = run("full", TracerKind::Function, 4, &args);
    let rec = Recording::read(&r.dir).unwrap();
    let (_, kept) = counts(&rec, EventId::Function);
    let lost = rec.lost();
    assert_eq!(
        kept + lost,
        leaf + mid + threads + 1,
        "recorded + lost = called"
    );
    assert!(
        r.summary
            .starts_with(&format!("ftrace: {kept} events recorded, {lost} lost")),
        "{}",
        r.summary
    );
    if lost > 0 {
        let worker = rec.processes[0]
            .threads
            .iter()
            .find(|t| t.dropped > 0)
            .unwrap();
        assert!(
            r.summary.contains(&format!("tid {}: ", worker.tid)),
            "{}",
            r.summary
        );
        // The report says where: a LOST line before the events that follow a hole, and none
        // for the events lost after a thread's last (as the kernel's trace, which has no
        // event to print it before; the summary counts them). Which of the two a run gives
        // depends on whether the drainer read the ring while the worker ran (the fresh-check
        // of 2026-12-04, its tests sharing two CPUs, once found every drop after the last).
        let census = ftrace_user::recording::RecordingReader::open(&r.dir)
            .unwrap()
            .census()
            .unwrap();
        let before_events: u64 = census.cpus.iter().map(|c| c.lost).sum();
        let text =
            ftrace_user::report::report(&ftrace_user::report::ReportArgs::new(&r.dir)).unwrap();
        assert_eq!(
            String::from_utf8(text).unwrap().contains(" EVENTS]"),
            before_events > 0,
            "{before_events} events lost before others, of {lost}"
        );
    }
}

/// A thread that writes faster than the tool drains its ring moves to larger rings
/// (`--max-buffer-size`): its events are in a file per ring, read back as one thread's, every
/// call there or counted lost, and nothing of the rings is left in the recording.
#[test]
fn a_thread_outrunning_the_drain_moves_to_larger_rings() {
    // 4.5 M calls, some 50 ms of a call-dense thread: time for the six moves.
    let args = ["1", "3000000", "1"];
    let (threads, leaf, mid) = own_counts(&build(), &args);
    // 4 KiB (128 slots) to start with, up to 16 MiB: the first ring is full at once.
    let opts = RecordOptions {
        tracer: TracerKind::Function,
        buffer_kb: 4,
        max_buffer_kb: 16384,
        ..Default::default()
    };
    let r = common::record_stream_calls(&scratch(), "grow", opts, &args);
    let rec = Recording::read(&r.dir).unwrap();
    let (fns, kept) = counts(&rec, EventId::Function);
    let lost = rec.lost();
    let called = leaf + mid + threads + 1;
    assert_eq!(kept + lost, called, "recorded + lost = called");
    assert!(
        r.summary
            .starts_with(&format!("ftrace: {kept} events recorded, {lost} lost")),
        "{}",
        r.summary
    );
    // How many the larger rings keep depends on the CPU the drainer gets (with the other
    // tests of this binary running beside it, less than half in some runs): not checked.
    assert!(fns.get("leaf").is_some_and(|&n| n + lost >= leaf));
    assert!(
        files(&r.dir, "events-") >= 3,
        "main's file and the worker's, one per ring"
    );
    for left in ["buf-", "gone-", "grow-"] {
        assert_eq!(files(&r.dir, left), 0, "{left}");
    }
    let tids: std::collections::HashSet<u32> = rec.merged().iter().map(|e| e.tid).collect();
    assert_eq!(tids.len() as u64, threads + 1);
    let mut last: HashMap<u32, u64> = HashMap::new();
    for e in rec.merged() {
        let prev = last.insert(e.tid, e.ts).unwrap_or(0);
        assert!(e.ts >= prev, "tid {} goes back in time", e.tid);
    }
}
