//! `ftrace report` over damaged recordings: a real streamed recording, mutated at random
//! (events files cut or overwritten, headers, `meta`, `symbols`, directory names such as
//! `per_cpu/cpu4000000000`), is reported without a panic and without allocating more than
//! the input justifies (a counting allocator measures the peak); what the report cannot read
//! it names, and a damaged events file is reported up to its damage; half the cases through a
//! report-time view (`-G`, `-F`, `-N`, `--max-depth`, `--time-range`).

use std::path::{Path, PathBuf};

use ftrace_agent::config::TracerKind;
use ftrace_user::record::RecordOptions;

mod common;

use common::fuzz::{Counting, PEAK_LIMIT, Rng, copy_dir, held_at_most};

#[global_allocator]
static ALLOC: Counting = Counting;

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-report-fuzz");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn recorded() -> PathBuf {
    let opts = RecordOptions {
        tracer: TracerKind::FunctionGraph,
        buffer_kb: 8192,
        retval: true,
        ..Default::default()
    };
    common::record_stream_calls(&scratch(), "base.data", opts, &["2", "3000", "1"]).dir
}

/// The files of the recording's process directories whose names start with `prefix`.
fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|p| p.path().join("meta").is_file())
        .flat_map(|p| std::fs::read_dir(p.path()).unwrap().flatten())
        .map(|f| f.path())
        .filter(|f| f.file_name().unwrap().to_string_lossy().starts_with(prefix))
        .collect();
    v.sort();
    v
}

fn process_dir(dir: &Path) -> PathBuf {
    files(dir, "meta")[0].parent().unwrap().to_path_buf()
}

/// One random damage to the recording in `dir`; says what it did.
fn mutate(dir: &Path, rng: &mut Rng) -> String {
    let events = files(dir, "events-");
    let pick = |rng: &mut Rng| events[rng.below(events.len())].clone();
    match rng.below(9) {
        0 => {
            let f = pick(rng);
            let len = std::fs::metadata(&f).unwrap().len() as usize;
            let at = rng.below(len + 1);
            let b = std::fs::read(&f).unwrap();
            std::fs::write(&f, &b[..at]).unwrap();
            format!("{} cut at {at}", f.display())
        }
        1 | 2 => {
            let f = pick(rng);
            let mut b = std::fs::read(&f).unwrap();
            let n = 1 + rng.below(8);
            // Mostly the body, sometimes the 40-byte header.
            let span = if rng.below(4) == 0 { 40 } else { b.len() };
            let mut at = Vec::new();
            for _ in 0..n {
                let i = rng.below(span.min(b.len()));
                b[i] = rng.next() as u8;
                at.push(i);
            }
            std::fs::write(&f, &b).unwrap();
            format!("{} bytes changed at {at:?}", f.display())
        }
        3 => {
            let f = pick(rng);
            let mut b = std::fs::read(&f).unwrap();
            let start = rng.below(b.len());
            let len = rng.below(64).min(b.len() - start);
            for x in &mut b[start..start + len] {
                *x = rng.next() as u8;
            }
            std::fs::write(&f, &b).unwrap();
            format!("{} {len} random bytes at {start}", f.display())
        }
        4 => {
            let meta = process_dir(dir).join("meta");
            let text =
                String::from_utf8_lossy(&std::fs::read(&meta).unwrap_or_default()).into_owned();
            let bad = [
                "nr_cpus=4000000000",
                "nr_cpus=0",
                "nr_cpus=x",
                "clock=x86-tsc",
                "tsc=1 mono_ns=1",
                "pid=-1",
            ][rng.below(6)];
            let key = bad.split('=').next().unwrap();
            let mut out: Vec<&str> = text.lines().filter(|l| !l.starts_with(key)).collect();
            out.push(bad);
            std::fs::write(&meta, out.join("\n")).unwrap();
            format!("meta: {bad}")
        }
        5 => {
            let p = process_dir(dir);
            let f = p.join(["symbols", "objects", "meta.exit", "meta"][rng.below(4)]);
            let mut b = std::fs::read(&f).unwrap_or_default();
            if b.is_empty() || rng.below(2) == 0 {
                std::fs::write(&f, [0xff, 0xfe, b'\t', b'\n', 0x80]).unwrap();
                format!("{} not UTF-8", f.display())
            } else {
                let at = rng.below(b.len());
                b.truncate(at);
                std::fs::write(&f, &b).unwrap();
                format!("{} cut at {at}", f.display())
            }
        }
        6 => {
            let d = dir.join("per_cpu/cpu4000000000");
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("trace_pipe_raw"), [0u8; 100]).unwrap();
            "per_cpu/cpu4000000000".into()
        }
        7 => {
            let p = process_dir(dir);
            let name = ["4000000000.99999999999999999999", "x.y", ".", "7"][rng.below(4)];
            let to = dir.join(name);
            if name != "." {
                std::fs::rename(&p, &to).unwrap();
            }
            format!("process directory renamed {name}")
        }
        _ => {
            let f = pick(rng);
            let name = ["events-4000000000-0", "events-", "events-x-y-z", "buf-1"][rng.below(4)];
            let to = f.parent().unwrap().join(name);
            std::fs::rename(&f, &to).unwrap();
            format!("{} renamed {name}", f.display())
        }
    }
}

#[test]
fn damaged_recordings_are_reported_as_far_as_they_can_be() {
    let base = recorded();
    let work = scratch().join("case.data");
    let base_bytes: u64 = files(&base, "")
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    assert!(
        base_bytes < 1 << 20,
        "a small recording: {base_bytes} bytes"
    );
    let mut rng = Rng(0x5eed_0017);
    let (mut clean, mut damaged, mut refused) = (0, 0, 0);
    for case in 0..160 {
        copy_dir(&base, &work);
        let what: Vec<String> = (0..1 + rng.below(3))
            .map(|_| mutate(&work, &mut rng))
            .collect();
        let (mut out, mut err) = (Vec::new(), Vec::new());
        // Half the cases through a report-time view, which keeps per-thread state.
        let view: &[&str] = match case % 4 {
            1 => &["-G", "mid", "--max-depth", "3"],
            2 => &["-F", "l*", "-F", "worker", "-N", "mid", "-r", "1us~"],
            _ => &[],
        };
        let (code, peak) = held_at_most(|| {
            ftrace_user::cli::run(
                ["ftrace", "report", "-i", work.to_str().unwrap()]
                    .iter()
                    .chain(view),
                &mut out,
                &mut err,
            )
        });
        let err = String::from_utf8_lossy(&err);
        assert!(
            peak < PEAK_LIMIT,
            "case {case} ({what:?}, {view:?}): the report held {peak} bytes at once"
        );
        match code {
            0 => {
                assert!(err.is_empty(), "case {case} ({what:?}): {err}");
                clean += 1;
            }
            1 => {
                // Every complaint names the recording (and the file in it).
                for line in err.lines() {
                    assert!(
                        line.starts_with("ftrace: ") && line.contains(work.to_str().unwrap()),
                        "case {case} ({what:?}): {line}"
                    );
                }
                if err.contains("ftrace: damaged: ") {
                    // What could be read was printed: the header at least.
                    let text = String::from_utf8_lossy(&out);
                    assert!(
                        text.starts_with("# tracer: function_graph"),
                        "case {case} ({what:?}): {text:.200}"
                    );
                    damaged += 1;
                } else {
                    refused += 1;
                }
            }
            c => panic!("case {case} ({what:?}, {view:?}): exit {c}: {err}"),
        }
    }
    eprintln!("clean {clean}, damaged {damaged}, refused {refused}");
    // The cases reach every outcome: some damage goes unnoticed by design (a changed
    // timestamp or address still decodes), some is reported around, some refused.
    assert!(
        clean > 0 && damaged > 10 && refused > 10,
        "clean {clean}, damaged {damaged}, refused {refused}"
    );
}
