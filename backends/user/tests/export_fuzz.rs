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

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use ftrace_agent::config::TracerKind;
use ftrace_user::record::{RecordOptions, record};

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded to `System` unchanged; the counters only observe.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            let now = LIVE.fetch_add(layout.size(), Ordering::Relaxed) + layout.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// One test at a time: the counters are the process's.
static SERIAL: Mutex<()> = Mutex::new(());

/// The most an export may hold at once beyond what was held before it started, for an input
/// of well under a megabyte: its buffers, page readers and symbol tables.
const PEAK_LIMIT: usize = 32 << 20;

/// splitmix64: a small deterministic generator (the same cases on every run).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-export-fuzz");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// A small function_graph recording of `stream_calls` (two threads).
fn recorded() -> PathBuf {
    let exe = stream_calls();
    let dir = scratch().join("base.data");
    let opts = RecordOptions {
        tracer: TracerKind::FunctionGraph,
        output: dir.clone(),
        buffer_kb: 8192,
        retval: true,
        ..Default::default()
    };
    let args: Vec<String> = ["2", "2000", "1"].iter().map(|s| s.to_string()).collect();
    let r = record(&opts, exe.to_str().unwrap(), &args).unwrap();
    assert!(r.status.success());
    dir
}

/// `tests/programs/stream_calls.c`, built once per test.
fn stream_calls() -> PathBuf {
    let exe = scratch().join("stream_calls");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/stream_calls.c");
    let st = Command::new("gcc")
        .args(["-O2", "-pthread", "-fno-pie", "-no-pie"])
        .args(["-fpatchable-function-entry=5", "-o"])
        .arg(&exe)
        .arg(src)
        .output()
        .expect("gcc");
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    exe
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap().flatten() {
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), t).unwrap();
        }
    }
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

/// Exports `input` as `format` to `out`; checks the outcome. Returns whether it succeeded.
fn check_export(input: &Path, format: &str, out: &Path, what: &str) -> bool {
    let _ = std::fs::remove_dir_all(out);
    let _ = std::fs::remove_file(out);
    let (mut stdout, mut err) = (Vec::new(), Vec::new());
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let code = ftrace_user::cli::run(
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
        &mut stdout,
        &mut err,
    );
    let peak = PEAK.load(Ordering::Relaxed) - before;
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
    let exe = stream_calls();
    let mut runs = Vec::new();
    for calls in ["10000", "100000"] {
        let dir = scratch().join(format!("size-{calls}.data"));
        let opts = RecordOptions {
            tracer: TracerKind::Function,
            output: dir.clone(),
            buffer_kb: 8192,
            ..Default::default()
        };
        let args: Vec<String> = ["2", calls, "1"].iter().map(|s| s.to_string()).collect();
        let r = record(&opts, exe.to_str().unwrap(), &args).unwrap();
        assert!(r.status.success());
        let mut run = Vec::new();
        for (format, name) in [
            ("trace.dat", "trace.dat"),
            ("chrome", "trace.json"),
            ("uftrace", "uftrace.data"),
        ] {
            let out = scratch().join(format!("size-{calls}-{name}"));
            let _ = std::fs::remove_dir_all(&out);
            let (mut stdout, mut err) = (Vec::new(), Vec::new());
            let before = LIVE.load(Ordering::Relaxed);
            PEAK.store(before, Ordering::Relaxed);
            let code = ftrace_user::cli::run(
                [
                    "ftrace",
                    "export",
                    "-f",
                    format,
                    "-i",
                    dir.to_str().unwrap(),
                    "-o",
                    out.to_str().unwrap(),
                ],
                &mut stdout,
                &mut err,
            );
            let peak = PEAK.load(Ordering::Relaxed) - before;
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
