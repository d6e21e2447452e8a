//! gcc's plain `-pg` builds (`call mcount` in every prologue, no site list), traced through the
//! agent's `mcount` (agent/src/mcount.rs) by `ftrace record` with the function and
//! function_graph tracers: every call of `examples/c/calls.c` (threads, recursion, a
//! misaligned stack, float arguments) is counted against the program's own counters, and the
//! program computes what it computes untraced.
//!
//! Needs gcc; nothing is skipped when it is missing: it fails.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;

use ftrace_core::EventId;
use ftrace_user::recording::Recording;

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-mcount");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The program's own `calls <name> <n>` lines.
fn own_counts(stdout: &str) -> BTreeMap<String, u64> {
    stdout
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "calls").then_some(())?;
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

/// Events of `kind` per function name.
fn traced_counts(rec: &Recording, kind: EventId) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for e in rec.merged() {
        if e.id() == Some(kind) {
            if let Some(name) = rec.event_symbol(e) {
                *m.entry(name.to_string()).or_insert(0) += 1;
            }
        }
    }
    m
}

#[test]
fn plain_pg_programs_are_traced_through_mcount() {
    let dir = scratch();
    let exe = dir.join("calls-pg");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/c/calls.c");
    let st = Command::new("gcc")
        .args(["-O2", "-g", "-pthread", "-pg", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-ldl")
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let untraced = Command::new(&exe)
        .args(["3", "12"])
        .current_dir(&dir)
        .output()
        .unwrap();
    let untraced = String::from_utf8(untraced.stdout).unwrap();
    assert!(untraced.contains("result ok"), "{untraced}");
    for (tracer, kinds) in [
        ("function", &[EventId::Function][..]),
        (
            "function_graph",
            &[EventId::FuncgraphEntry, EventId::FuncgraphExit][..],
        ),
    ] {
        let rec_dir = dir.join(format!("rec-{tracer}"));
        let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
            .args([
                "record",
                "-t",
                tracer,
                "--no-overwrite",
                "--buffer-size",
                "16384",
            ])
            .arg("-o")
            .arg(&rec_dir)
            .arg("--")
            .arg(&exe)
            .args(["3", "12"])
            .current_dir(&dir)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(stdout, untraced, "{tracer}: the program's output");
        let rec = Recording::read(&rec_dir).unwrap();
        assert_eq!(rec.lost(), 0, "{tracer}: events lost");
        let own = own_counts(&stdout);
        assert!(own.len() >= 4, "{own:?}");
        for &kind in kinds {
            let traced = traced_counts(&rec, kind);
            for (name, n) in &own {
                assert_eq!(
                    traced.get(name).copied().unwrap_or(0),
                    *n,
                    "{tracer}: {kind:?} of {name}: traced vs counted by the program"
                );
            }
        }
        std::fs::remove_dir_all(&rec_dir).ok();
    }
}
