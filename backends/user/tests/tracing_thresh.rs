//! `tracing_thresh` under function_graph, end to end: `tests/programs/thresh.c` (`slow` sleeps
//! 3 ms, `fast` returns at once, `outer` calls both) traced by `ftrace live --thresh` and
//! through `tracing_thresh` on the live mount. As the kernel does, only calls lasting at least
//! the threshold are recorded, each as its exit alone, printed `} /* name */` at its depth
//! (tests/goldens/linux-6.12/graph-retval/thresh), with the return value under
//! `funcgraph-retval` (…/thresh-retval).
//!
//! Needs gcc and FUSE (`fusermount3`); nothing is skipped when they are missing: it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A directory of the test's own (tests run in parallel; each builds its program there).
fn scratch(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ftrace-thresh")
        .join(test);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ftrace(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// The trace's `(duration in us, function column)` lines.
fn lines(text: &str) -> Vec<(f64, String)> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (left, f) = l.split_once('|')?;
            let us = left.split_whitespace().rev().nth(1)?.parse().ok()?;
            Some((us, f.trim_end().to_string()))
        })
        .collect()
}

/// Checks a thresholded trace of `rounds` rounds: `slow` and `outer` of every round and
/// `main`, each an exit at its depth lasting at least `thresh_us`, nothing else.
fn check(text: &str, rounds: usize, thresh_us: f64, retval: bool) {
    assert!(!text.contains("() {") && !text.contains("();"), "{text}");
    let got = lines(text);
    let (slow, outer, main) = if retval {
        (
            "      } /* slow = 0x7 */",
            "    } /* outer = 0x9 */",
            "  } /* main = 0x0 */",
        )
    } else {
        ("      } /* slow */", "    } /* outer */", "  } /* main */")
    };
    let mut want: Vec<&str> = Vec::new();
    for _ in 0..rounds {
        want.extend([slow, outer]);
    }
    want.push(main);
    let funcs: Vec<&str> = got.iter().map(|(_, f)| f.as_str()).collect();
    assert_eq!(funcs, want, "{text}");
    assert!(
        got.iter().all(|&(us, _)| us >= thresh_us),
        "a call shorter than {thresh_us} us: {text}"
    );
}

#[test]
fn live_records_only_calls_over_the_threshold() {
    let dir = scratch("live");
    let exe = common::build_kernel_style(&dir, "thresh");
    let exe = exe.to_str().unwrap();
    let out = ftrace(&["live", "--thresh", "1000", "--", exe, "3"], &dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.starts_with("sum 27\n"),
        "{text}"
    );
    check(&text, 3, 1000.0, false);
    // With return values, and on the mono clock (the threshold in its units).
    let out = ftrace(
        &[
            "live",
            "--thresh",
            "2000",
            "--clock",
            "mono",
            "-O",
            "funcgraph-retval",
            "--",
            exe,
            "2",
        ],
        &dir,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    check(&text, 2, 2000.0, true);
    // A threshold no call reaches records nothing; none records everything.
    let out = ftrace(&["live", "--thresh", "100000000", "--", exe, "1"], &dir);
    assert!(lines(&String::from_utf8_lossy(&out.stdout)).is_empty());
    let out = ftrace(&["live", "--", exe, "1"], &dir);
    let text = String::from_utf8_lossy(&out.stdout);
    // A leaf prints as `f();`, or as `f() {` .. `}` when its thread moved to another CPU
    // between its entry and its exit (a loaded machine).
    let calls_of = |f: &str| {
        text.matches(&format!("{f}();")).count() + text.matches(&format!("{f}() {{")).count()
    };
    assert_eq!(calls_of("fast"), 2, "{text}");
    assert!(
        text.contains("outer() {") && calls_of("slow") >= 1,
        "{text}"
    );
}

/// `ftrace record --mount` of thresh.c running until stopped (SIGTERM when dropped).
struct Mounted {
    tool: Child,
    mnt: PathBuf,
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // SAFETY: signalling our own child.
        unsafe { libc::kill(self.tool.id() as libc::pid_t, libc::SIGTERM) };
        let _ = self.tool.wait();
    }
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn tracing_thresh_is_writable_on_the_mount() {
    let dir = scratch("mount");
    let exe = common::build_kernel_style(&dir, "thresh");
    let mnt = dir.join("tracing");
    std::fs::create_dir_all(&mnt).unwrap();
    let tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(["record", "-t", "function_graph", "--mount"])
        .arg(&mnt)
        .arg("-o")
        .arg(dir.join("rec"))
        .arg("--")
        .arg(&exe)
        .arg("0")
        .current_dir(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let m = Mounted { tool, mnt };
    let file = |name: &str| m.mnt.join(name);
    wait_for("the mount", || file("tracing_thresh").exists());
    assert_eq!(
        std::fs::read_to_string(file("tracing_thresh")).unwrap(),
        "0\n"
    );
    std::fs::write(file("tracing_thresh"), "1000").unwrap();
    assert_eq!(
        std::fs::read_to_string(file("tracing_thresh")).unwrap(),
        "1000\n"
    );
    std::fs::write(file("trace"), "").unwrap();
    wait_for("three slow calls", || {
        std::fs::read_to_string(file("trace"))
            .unwrap()
            .matches("} /* slow */")
            .count()
            >= 3
    });
    let text = std::fs::read_to_string(file("trace")).unwrap();
    assert!(!text.contains("fast") && !text.contains("() {"), "{text}");
    assert!(
        lines(&text).iter().all(|&(us, _)| us >= 1000.0),
        "a call shorter than the threshold: {text}"
    );
    // Back to 0: entries and short calls again.
    std::fs::write(file("tracing_thresh"), "0").unwrap();
    std::fs::write(file("trace"), "").unwrap();
    wait_for("fast calls", || {
        std::fs::read_to_string(file("trace"))
            .unwrap()
            .contains("fast();")
    });
    // A bad value is refused and changes nothing.
    let e = std::fs::write(file("tracing_thresh"), "soon").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    assert_eq!(
        std::fs::read_to_string(file("tracing_thresh")).unwrap(),
        "0\n"
    );
}
