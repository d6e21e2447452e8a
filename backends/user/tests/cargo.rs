//! `ftrace record --cargo`: a Rust crate built with the instrumentation flags in a target
//! directory of its own and traced, with no flags set by hand.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A crate of its own (not a member of this workspace) with one binary, or two.
fn make_crate(name: &str, second_bin: bool) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cargo-{name}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("src/bin")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"{name}\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
             [workspace]\n"
        ),
    )
    .unwrap();
    std::fs::write(
        dir.join("src/main.rs"),
        "#[inline(never)]\n\
         fn fib(n: u32) -> u64 {\n    if n < 2 { n as u64 } else { fib(n - 1) + fib(n - 2) }\n}\n\
         #[inline(never)]\n\
         fn leaf(i: u32) -> u32 {\n    std::hint::black_box(i) ^ 1\n}\n\
         fn main() {\n    let n: u32 = std::env::args().nth(1).unwrap().parse().unwrap();\n    \
         let mut s = 0;\n    for i in 0..n {\n        s += leaf(i);\n    }\n    \
         println!(\"fib({n}) = {} {s}\", fib(std::hint::black_box(n)));\n}\n",
    )
    .unwrap();
    if second_bin {
        std::fs::write(dir.join("src/bin/other.rs"), "fn main() {}\n").unwrap();
    }
    dir
}

fn ftrace(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .current_dir(dir)
        .args(args)
        .output()
        .unwrap()
}

/// fib(n)'s number of calls.
fn calls(n: u32) -> usize {
    if n < 2 {
        1
    } else {
        1 + calls(n - 1) + calls(n - 2)
    }
}

#[test]
fn a_crate_is_built_instrumented_and_traced() {
    let dir = make_crate("fibby", false);
    let out = ftrace(
        &dir,
        &[
            "record", "--cargo", "-t", "function", "-o", "rec", "--", "12",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fib(12) = 144 66\n");
    assert!(err.contains(", 0 lost"), "{err}");
    // Built in a target directory of its own, with the flag; the crate's own is untouched.
    assert!(dir.join("target/ftrace/debug/fibby").exists());
    assert!(!dir.join("target/debug/fibby").exists());
    let report = ftrace(&dir, &["report", "-i", "rec"]);
    assert!(report.status.success());
    let text = String::from_utf8_lossy(&report.stdout);
    let fib = text
        .lines()
        .filter(|l| l.contains(": fibby::fib <-"))
        .count();
    assert_eq!(fib, calls(12), "{text}");
    let leaf = text
        .lines()
        .filter(|l| l.contains(": fibby::leaf <-"))
        .count();
    assert_eq!(leaf, 12, "{text}");

    // cargo's own options go through; a release build is its own artifact (where the
    // optimiser turns part of fib's recursion into a loop: the leaf calls are counted).
    let out = ftrace(
        &dir,
        &[
            "live",
            "--cargo=--release",
            "-t",
            "function_graph",
            "--",
            "5",
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dir.join("target/ftrace/release/fibby").exists());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("fib(5) = 5 11\n"), "{text}");
    let entries = text
        .lines()
        .filter(|l| l.contains("fibby::leaf();"))
        .count();
    assert_eq!(entries, 5, "{text}");
}

#[test]
fn a_build_that_names_no_one_binary_is_refused() {
    let dir = make_crate("twobins", true);
    let out = ftrace(&dir, &["record", "--cargo", "-o", "rec", "--", "3"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("cargo build made 2 executables (other, twobins)")
            || err.contains("cargo build made 2 executables (twobins, other)"),
        "{err}"
    );
    assert!(err.contains("--cargo='--bin NAME'"), "{err}");
    assert!(!dir.join("rec").exists());
    // With --bin it runs.
    let out = ftrace(
        &dir,
        &["record", "--cargo=--bin twobins", "-o", "rec", "--", "3"],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "fib(3) = 2 4\n");
    // A failing build is the tool's error, and nothing runs.
    std::fs::write(dir.join("src/main.rs"), "fn main() { nope }\n").unwrap();
    let out = ftrace(&dir, &["record", "--cargo", "-o", "rec2", "--", "3"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("ftrace: cargo build failed"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.join("rec2").exists());
}
