//! `ftrace export` over damaged input: a real streamed recording, and the same recording
//! turned into pages, mutated at random (events files and pages cut or overwritten, format
//! files, `meta`, `symbols`), exported in every format without a panic and without allocating
//! more than the input justifies (a counting allocator measures the peak). An export either
//! succeeds or fails with one error naming the file (and, for damaged event data, the byte
//! offset in it) and leaves no output behind.
//!
//! Memory does not grow with the input: the same program recorded ten times longer is
//! exported, in every format, holding no more at once (the outputs grow tenfold).
//!
//! Needs gcc (installed by `cargo xtask test`); nothing is skipped when it is missing.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ftrace_agent::config::TracerKind;
use ftrace_user::record::RecordOptions;

mod common;

use common::fuzz::{Counting, PEAK_LIMIT, Rng, copy_dir, held_at_most};

#[global_allocator]
static ALLOC: Counting = Counting;

/// One test at a time: the counters are the process's.
static SERIAL: Mutex<()> = Mutex::new(());

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-export-fuzz");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small function_graph recording of `stream_calls` (two threads).
fn recorded() -> PathBuf {
    let opts = RecordOptions {
        tracer: TracerKind::FunctionGraph,
        buffer_kb: 8192,
        retval: true,
        ..Default::default()
    };
    common::record_stream_calls(&scratch(), "base.data", opts, &["2", "2000", "1"]).dir
}

/// Every file under `dir` whose name starts with `prefix`, sorted.
fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            if e.file_type().unwrap().is_dir() {
                todo.push(e.path());
            } else if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}

/// One random damage to a file of `targets`; says what it did.
fn mutate(targets: &[PathBuf], rng: &mut Rng) -> String {
    let f = &targets[rng.below(targets.len())];
    let mut b = std::fs::read(f).unwrap();
    match rng.below(4) {
        0 => {
            let at = rng.below(b.len() + 1);
            b.truncate(at);
            std::fs::write(f, &b).unwrap();
            format!("{} cut at {at}", f.display())
        }
        1 | 2 if !b.is_empty() => {
            // Mostly anywhere, sometimes the first 128 bytes (headers).
            let span = if rng.below(4) == 0 { 128 } else { b.len() };
            let mut at = Vec::new();
            for _ in 0..1 + rng.below(8) {
                let i = rng.below(span.min(b.len()));
                b[i] = rng.next() as u8;
                at.push(i);
            }
            std::fs::write(f, &b).unwrap();
            format!("{} bytes changed at {at:?}", f.display())
        }
        _ if !b.is_empty() => {
            let start = rng.below(b.len());
            let len = rng.below(64).min(b.len() - start);
            for x in &mut b[start..start + len] {
                *x = rng.next() as u8;
            }
            std::fs::write(f, &b).unwrap();
            format!("{} {len} random bytes at {start}", f.display())
        }
        _ => format!("{} left empty", f.display()),
    }
}

/// `ftrace export -f FORMAT -i INPUT -o OUT`, in this process; its exit code.
fn export(input: &Path, format: &str, out: &Path, stdout: &mut Vec<u8>, err: &mut Vec<u8>) -> u8 {
    ftrace_user::cli::run(
        [
            "ftrace",
            "export",
            "-f",
            format,
            "-i",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        stdout,
        err,
    )
}

/// Exports `input` as `format` to `out`; checks the outcome. Returns whether it succeeded.
fn check_export(input: &Path, format: &str, out: &Path, what: &str) -> bool {
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_file(out);
    let (mut stdout, mut err) = (Vec::new(), Vec::new());
    let (code, peak) = held_at_most(|| export(input, format, out, &mut stdout, &mut err));
    let err = String::from_utf8_lossy(&err);
    assert!(
        peak < PEAK_LIMIT,
        "{format} ({what}): the export held {peak} bytes at once"
    );
    let leftovers: Vec<PathBuf> = std::fs::read_dir(out.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().contains(".partial-"))
        .collect();
    assert!(leftovers.is_empty(), "{format} ({what}): {leftovers:?}");
    match code {
        0 => {
            assert!(err.is_empty(), "{format} ({what}): {err}");
            assert!(out.exists(), "{format} ({what}): no output");
            true
        }
        1 => {
            assert!(
                !out.exists(),
                "{format} ({what}): output left behind: {err}"
            );
            let line = err.trim_end();
            assert!(
                !line.contains('\n') && line.starts_with("ftrace: "),
                "{format} ({what}): {err}"
            );
            // The error names the input (the file in it, where one is at fault).
            assert!(
                line.contains(input.to_str().unwrap()),
                "{format} ({what}): {line}"
            );
            // Damaged event data is placed: the file and the byte offset.
            if line.contains("/events-") || line.contains("trace_pipe_raw") {
                assert!(line.contains(": offset "), "{format} ({what}): {line}");
            }
            false
        }
        c => panic!("{format} ({what}): exit {c}: {err}"),
    }
}

#[test]
fn damaged_input_is_refused_by_every_exporter_with_the_file_and_offset() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = recorded();
    let base_bytes: u64 = files(&base, "")
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert!(
        base_bytes < 1 << 20,
        "a small recording: {base_bytes} bytes"
    );
    // The same recording as pages: the capture path of the exporters.
    let paged = scratch().join("paged.data");
    copy_dir(&base, &paged);
    ftrace_user::capture::write_capture_streamed(&paged).unwrap();
    let work = scratch().join("case.data");
    let out_dir = scratch().join("out");
    std::fs::create_dir_all(&out_dir).unwrap();
    let mut rng = Rng(0x5eed_0018);
    let (mut ok, mut refused) = (0, 0);
    for case in 0..60 {
        let pages = case % 2 == 1;
        copy_dir(if pages { &paged } else { &base }, &work);
        let mut targets = if pages {
            files(&work, "trace_pipe_raw")
        } else {
            files(&work, "events-")
        };
        // Now and then the text files beside the events.
        if rng.below(4) == 0 {
            targets.extend(files(&work, "meta"));
            targets.extend(files(&work, "symbols"));
            targets.extend(files(&work, "objects"));
            targets.extend(files(&work, "kallsyms"));
        }
        let what: Vec<String> = (0..1 + rng.below(3))
            .map(|_| mutate(&targets, &mut rng))
            .collect();
        let what = format!("case {case}: {what:?}");
        for (format, name) in [
            ("trace.dat", "trace.dat"),
            ("chrome", "trace.json"),
            ("uftrace", "uftrace.data"),
        ] {
            if check_export(&work, format, &out_dir.join(name), &what) {
                ok += 1;
            } else {
                refused += 1;
            }
        }
        // Reading is all an exporter does to its input.
        assert!(
            !work.join("per_cpu").exists() || pages,
            "{what}: pages written"
        );
    }
    eprintln!("exported {ok}, refused {refused}");
    // The cases reach both outcomes: some damage goes unnoticed by design (a changed
    // timestamp or address still decodes), the rest is refused.
    assert!(ok > 10 && refused > 10, "exported {ok}, refused {refused}");
}

/// Bytes of the files under `p` (or of `p`).
fn size_of(p: &Path) -> u64 {
    if p.is_dir() {
        files(p, "")
            .iter()
            .map(|f| std::fs::metadata(f).unwrap().len())
            .sum()
    } else {
        std::fs::metadata(p).unwrap().len()
    }
}

#[test]
fn export_memory_does_not_grow_with_the_recording() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut runs = Vec::new();
    for calls in ["10000", "100000"] {
        let opts = RecordOptions {
            tracer: TracerKind::Function,
            buffer_kb: 8192,
            ..Default::default()
        };
        let tag = format!("size-{calls}.data");
        let dir = common::record_stream_calls(&scratch(), &tag, opts, &["2", calls, "1"]).dir;
        let mut run = Vec::new();
        for (format, name) in [
            ("trace.dat", "trace.dat"),
            ("chrome", "trace.json"),
            ("uftrace", "uftrace.data"),
        ] {
            let out = scratch().join(format!("size-{calls}-{name}"));
            let _ = std::fs::remove_dir_all(&out);
            let (mut stdout, mut err) = (Vec::new(), Vec::new());
            let (code, peak) = held_at_most(|| export(&dir, format, &out, &mut stdout, &mut err));
            assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
            run.push((format, peak, size_of(&out)));
            let _ = std::fs::remove_dir_all(&out);
            let _ = std::fs::remove_file(&out);
        }
        runs.push(run);
        std::fs::remove_dir_all(&dir).unwrap();
    }
    for (small, large) in runs[0].iter().zip(&runs[1]) {
        let (format, peak, bytes) = *small;
        eprintln!(
            "{format}: {bytes} -> {} bytes written, {peak} -> {} bytes held at most",
            large.2, large.1
        );
        assert!(large.2 > 8 * bytes, "{format}: {small:?} {large:?}");
        assert!(
            large.1 < peak + (512 << 10),
            "{format}: memory grew with the recording: {small:?} {large:?}"
        );
    }
}
