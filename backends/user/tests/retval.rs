//! Return values (`funcgraph-retval`) end to end: `tests/programs/retval.c`, whose functions
//! return known values (small, errno in 64 and 32 bits, a large value, zero, and a caller
//! adding its callees'), traced by `ftrace live` / `record` + `report` with function_graph.
//! The trace must print each value as Linux 6.12 does (`/* = 0x3 */`, `/* = -22 */`, the hex
//! forms under `funcgraph-retval-hex`), and the program must compute what it computes
//! untraced (the return trampolines hand `rax` back intact).
//!
//! Needs gcc; nothing is skipped when it is missing: it fails.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory of the test's own (tests run in parallel; each builds its program there).
fn scratch(test: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("ftrace-retval")
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

/// The trace's function lines (after `|`), trimmed.
fn calls(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once("|  ").map(|(_, f)| f.trim()))
        .collect()
}

/// One loop iteration of retval.c's main, as the graph prints it (`hex`: under
/// `funcgraph-retval-hex`).
fn iteration(hex: bool) -> Vec<String> {
    let (einval, eio) = if hex {
        ("0xffffffea", "0xfffffffffffffffb")
    } else {
        ("-22", "-5")
    };
    vec![
        "ret_three(); /* = 0x3 */".into(),
        format!("ret_einval(); /* = {einval} */"),
        format!("ret_eio(); /* = {eio} */"),
        "ret_big(); /* = 0x12345678abcd */".into(),
        "ret_zero(); /* = 0x0 */".into(),
        "outer() {".into(),
        "ret_three(); /* = 0x3 */".into(),
        format!("ret_eio(); /* = {eio} */"),
        "} /* outer = 0xa */".into(),
    ]
}

fn expected(n: usize, hex: bool) -> Vec<String> {
    let mut v = vec!["main() {".to_string()];
    for _ in 0..n {
        v.extend(iteration(hex));
    }
    v.push("} /* main = 0x0 */".into());
    v
}

#[test]
fn live_prints_return_values_as_linux() {
    let dir = scratch("live");
    let exe = common::build_kernel_style(&dir, "retval");
    let untraced = Command::new(&exe).arg("4").output().unwrap();
    assert!(untraced.status.success());
    let untraced = String::from_utf8(untraced.stdout).unwrap();
    assert!(untraced.contains("result ok"), "{untraced}");
    for (opts, hex) in [
        (&["-O", "funcgraph-retval"][..], false),
        (
            &["-O", "funcgraph-retval", "-O", "funcgraph-retval-hex"][..],
            true,
        ),
    ] {
        let mut args = vec!["live", "-t", "function_graph"];
        args.extend_from_slice(opts);
        args.extend(["--", exe.to_str().unwrap(), "4"]);
        let out = ftrace(&args, &dir);
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        // The program's own output first, the same as untraced.
        assert!(text.starts_with(&untraced), "{text}");
        assert_eq!(calls(&text), expected(4, hex), "{text}");
    }
    // Without the option: no values, and the exits are the plain ones.
    let out = ftrace(&["live", "--", exe.to_str().unwrap(), "2"], &dir);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && text.starts_with("sum "), "{text}");
    let plain: Vec<String> = expected(2, false)
        .iter()
        .map(|l| match l.split_once(" /* ") {
            Some((f, _)) if f.starts_with('}') => "}".to_string(),
            Some((f, _)) => f.to_string(),
            None => l.clone(),
        })
        .collect();
    assert_eq!(calls(&text), plain, "{text}");
}

#[test]
fn record_keeps_return_values_for_report() {
    let dir = scratch("record");
    let exe = common::build_kernel_style(&dir, "retval");
    let rec = dir.join("rec");
    let out = ftrace(
        &[
            "record",
            "-O",
            "funcgraph-retval",
            "-o",
            rec.to_str().unwrap(),
            "--",
            exe.to_str().unwrap(),
            "3",
        ],
        &dir,
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{said}");
    // 1 + 3 * 8 calls, an entry and an exit each: the return values are no events of their own.
    assert!(
        said.contains("ftrace: 50 events recorded, 0 lost, "),
        "{said}"
    );
    for hex in [false, true] {
        let mut args = vec![
            "report",
            "-i",
            rec.to_str().unwrap(),
            "-O",
            "funcgraph-retval",
        ];
        if hex {
            args.extend(["-O", "funcgraph-retval-hex"]);
        }
        let rep = ftrace(&args, &dir);
        let text = String::from_utf8_lossy(&rep.stdout);
        assert!(
            rep.status.success(),
            "{}",
            String::from_utf8_lossy(&rep.stderr)
        );
        assert_eq!(calls(&text), expected(3, hex), "{text}");
    }
    // An option `record` does not know is a usage error, before anything runs.
    let bad = ftrace(
        &[
            "record",
            "-O",
            "funcgraph-proc",
            "--",
            exe.to_str().unwrap(),
        ],
        &dir,
    );
    assert_eq!(bad.status.code(), Some(2));
    std::fs::remove_dir_all(&rec).ok();
}
