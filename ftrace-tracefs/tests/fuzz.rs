//! Property test: random writes to every writable file never panic, and a rejected write
//! leaves every readable file exactly as it was.

mod common;

use std::collections::BTreeMap;

use common::sim::Sim;
use common::{ModelHost, tracefs_with_sched};
use ftrace_tracefs::array::TraceArray;
use ftrace_tracefs::tree::Node;
use ftrace_tracefs::{Host, OpenFlags, Tracefs, WriteMode};
use proptest::prelude::*;

type Fs = Tracefs<ModelHost>;

fn walk<H: Host>(fs: &Tracefs<H>, mut f: impl FnMut(&str, u16)) {
    let mut dirs = vec![String::new()];
    while let Some(d) = dirs.pop() {
        for e in fs.read_dir(&d).unwrap() {
            let path = if d.is_empty() {
                e.name.to_string()
            } else {
                format!("{d}/{}", e.name)
            };
            match e.node {
                Node::Dir(_) => dirs.push(path),
                Node::File(_) => f(&path, e.mode),
            }
        }
    }
}

fn snapshot<H: Host>(fs: &mut Tracefs<H>) -> BTreeMap<String, Vec<u8>> {
    let mut paths = Vec::new();
    walk(fs, |p, mode| {
        let name = p.rsplit('/').next().unwrap();
        let consuming = ["trace_pipe", "trace_pipe_raw", "error_log"].contains(&name);
        if mode & 0o400 != 0 && !consuming {
            paths.push(p.to_owned());
        }
    });
    paths
        .into_iter()
        .map(|p| {
            let mut v = fs.read_to_end(&p).unwrap_or_else(|e| panic!("{p}: {e:?}"));
            if p.ends_with("stats") {
                // `now ts` is the clock at the read, which moves between any two reads.
                let text = String::from_utf8(v).expect("stats are text");
                let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with("now ts:")).collect();
                v = kept.join("\n").into_bytes();
            }
            (p, v)
        })
        .collect()
}

fn writable<H: Host>(fs: &Tracefs<H>) -> Vec<String> {
    let mut v = Vec::new();
    walk(fs, |p, mode| {
        if mode & 0o200 != 0 {
            v.push(p.to_owned());
        }
    });
    v
}

const WORDS: &[&str] = &[
    "0",
    "1",
    "2",
    "7",
    "100",
    "4096",
    "-1",
    "0x10",
    "nop",
    "function",
    "function_graph",
    "local",
    "mono",
    "x86-tsc",
    "overwrite",
    "nooverwrite",
    "markers",
    "nomarkers",
    "pause-on-trace",
    "funcgraph-cpu",
    "test_nop_accept",
    "test_nop_refuse",
    "vfs_read",
    "vfs_*",
    "*read",
    "!vfs_read",
    "vfs_read:traceoff",
    "p:x vfs_read",
    "p:y nosuch",
    "-:x",
    "ff",
    "3",
    "1,0",
    "sched:sched_switch",
    "!sched:*",
    "sched",
    "*:sched_wakeup",
    "sched:nope",
    "traceon",
    "!traceon",
    "traceoff:3",
    "snapshot if prev_pid == 1",
    "stacktrace:2 if bogus > 1",
    "enable_event:sched:sched_wakeup",
    "!enable_event:sched:sched_wakeup",
    "disable_hist:sched:sched_switch:1",
    "hist:keys=next_pid",
    "!hist:keys=next_pid",
    "hist:keys=bogus_field",
    "hist:keys=prev_pid:vals=next_prio:sort=next_prio.descending",
    "hist:keys=common_pid.execname:vals=prev_prio/0",
    "hist:keys=next_pid:pause",
    "hist:keys=next_pid:cont",
    "prev_pid == 1",
    "next_comm ~ \"s*\"",
    "(prev_pid > 1",
    "bogus == 1",
];

fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..80),
        "[a-z0-9_ !:*,+x\\-\n\t]{0,40}".prop_map(String::into_bytes),
        (
            proptest::sample::select(WORDS),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(w, no, nl)| {
                let mut s = String::new();
                if no {
                    s.push_str("no");
                }
                s.push_str(w);
                if nl {
                    s.push('\n');
                }
                s.into_bytes()
            }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn random_writes_never_panic_and_errors_change_nothing(
        ops in proptest::collection::vec((any::<prop::sample::Index>(), payload(), any::<bool>()), 1..6)
    ) {
        let mut fs = tracefs_with_sched();
        fs.mkdir("instances/fz").unwrap();
        check_writes(&mut fs, ops)?;
    }

    /// The same against the `TraceArray` instance: its state persists across cases, as a
    /// real backend's does across opens of the tree.
    #[test]
    fn random_writes_to_the_instance_never_panic_and_errors_change_nothing(
        ops in proptest::collection::vec((any::<prop::sample::Index>(), payload(), any::<bool>()), 1..6)
    ) {
        static FUZZ: TraceArray<Sim, 2> = TraceArray::new(Sim);
        let mut fs = FUZZ.tracefs().unwrap();
        // Something to lose: a rejected write must not clear it.
        fs.write_all("trace_marker", b"fuzz\n", WriteMode::Truncate).unwrap_or(());
        common::sim::workload(&FUZZ);
        check_writes(&mut fs, ops)?;
    }
}

type WriteOp = (prop::sample::Index, Vec<u8>, bool);

/// Applies `ops` (file, data, append) and checks each answer: a short count or a named
/// errno, and after an error every readable file as it was.
fn check_writes<H: Host>(fs: &mut Tracefs<H>, ops: Vec<WriteOp>) -> Result<(), TestCaseError> {
    let files = writable(fs);
    for (idx, data, append) in ops {
        let path = idx.get(&files);
        let flags = if append {
            OpenFlags::APPEND
        } else {
            OpenFlags::TRUNCATE
        };
        let Ok(fh) = fs.open(path, flags) else {
            continue;
        };
        let before = snapshot(fs);
        let r = fs.write(fh, 0, &data);
        let after = snapshot(fs);
        match r {
            Ok(n) => prop_assert!(n <= data.len()),
            Err(e) => {
                // EDOM (a hist division by zero) is the one errno ftrace-core does not name.
                prop_assert!(e.name().is_some(), "unnamed errno {e:?}");
                for (p, old) in &before {
                    // The kernel's own exception: a tracer switch (or a snapshot command)
                    // expands the boot-minimum buffers before it checks the name (or whether
                    // the command is valid for the file; and ftrace-ringbuf's resize empties
                    // the buffer, so its contents and stats may change too).
                    let buffer_file =
                        p.contains("size_kb") || p.ends_with("stats") || p.ends_with("trace");
                    let expands = ["current_tracer", "set_event", "enable", "snapshot"]
                        .iter()
                        .any(|f| path.ends_with(f));
                    let expansion = expands && buffer_file;
                    // Linux keeps a rejected event filter (with its parse error) in the
                    // filter file it was written to.
                    let kept_filter = p == path && path.ends_with("/filter");
                    if !expansion && !kept_filter {
                        prop_assert_eq!(
                            Some(old),
                            after.get(p),
                            "{} changed by rejected write to {}",
                            p,
                            path
                        );
                    }
                }
            }
        }
        let _ = fs.release(fh);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Opens with any flags and reads at any offsets never panic; every answer is data, end of
    /// file or a named errno.
    #[test]
    fn random_opens_and_reads_never_panic(
        ops in proptest::collection::vec((any::<prop::sample::Index>(), any::<i32>(), any::<u64>(), 0usize..5000), 1..8)
    ) {
        let mut fs = tracefs_with_sched();
        fs.mkdir("instances/fz").unwrap();
        let mut files = Vec::new();
        walk(&fs, |p, _| files.push(p.to_owned()));
        for (idx, oflags, offset, len) in ops {
            let path = idx.get(&files);
            let Ok(fh) = fs.open(path, OpenFlags::from_linux(oflags)) else { continue };
            let mut buf = vec![0u8; len];
            for off in [offset, 0, offset / 2, u64::MAX] {
                match fs.read(fh, off, &mut buf) {
                    Ok(n) => prop_assert!(n <= len),
                    Err(e) => prop_assert!(e.name().is_some()),
                }
            }
            let _ = fs.poll(fh);
            let _ = fs.release(fh);
        }
    }
}

const FIELDS: &[&str] = &[
    "prev_pid",
    "next_pid",
    "prev_comm",
    "next_comm",
    "prev_state",
    "next_prio",
    "common_pid",
    "common_timestamp",
    "cpu",
    "comm",
    "pid",
    "target_cpu",
    "bogus",
    "$x",
    "hitcount",
    "stacktrace",
];
const MODS: &[&str] = &[
    "",
    "",
    "",
    ".hex",
    ".sym",
    ".execname",
    ".log2",
    ".usecs",
    ".buckets=10",
    ".percent",
    ".x",
];
const OPS: &[&str] = &["==", "!=", "<", ">=", "&", "~", "=", ""];
const VALUES: &[&str] = &[
    "1",
    "-1",
    "0x10",
    "\"sh*\"",
    "'x'",
    "abc",
    "",
    "\"unterminated",
];

/// A command for a `trigger` file, built from the kernel's vocabulary.
fn trigger_cmd() -> impl Strategy<Value = String> {
    let field = (
        proptest::sample::select(FIELDS),
        proptest::sample::select(MODS),
    )
        .prop_map(|(f, m)| format!("{f}{m}"));
    let fields = proptest::collection::vec(field, 1..4).prop_map(|v| v.join(","));
    let cond = filter_text();
    prop_oneof![
        (
            fields.clone(),
            proptest::option::of(fields.clone()),
            proptest::option::of(fields),
            any::<bool>(),
            proptest::option::of(cond.clone())
        )
            .prop_map(|(k, v, s, rm, c)| {
                let mut t = format!("{}hist:keys={k}", if rm { "!" } else { "" });
                if let Some(v) = v {
                    t += &format!(":vals={v}");
                }
                if let Some(s) = s {
                    t += &format!(":sort={s}");
                }
                if let Some(c) = c {
                    t += &format!(" if {c}");
                }
                t
            }),
        (
            proptest::sample::select(
                &[
                    "traceon",
                    "traceoff",
                    "snapshot",
                    "stacktrace",
                    "!traceon",
                    "!stacktrace",
                    "enable_event:sched:sched_wakeup",
                    "disable_event:sched:sched_switch",
                    "!enable_event:sched:sched_wakeup",
                    "enable_hist:sched:sched_switch"
                ][..]
            ),
            proptest::option::of(0u32..5),
            proptest::option::of(cond),
        )
            .prop_map(|(c, n, f)| {
                let mut t = c.to_owned();
                if let Some(n) = n {
                    t += &format!(":{n}");
                }
                if let Some(f) = f {
                    t += &format!(" if {f}");
                }
                t
            }),
    ]
}

/// A filter expression from event fields, operators and values.
fn filter_text() -> impl Strategy<Value = String> + Clone {
    let pred = (
        proptest::sample::select(FIELDS),
        proptest::sample::select(OPS),
        proptest::sample::select(VALUES),
    )
        .prop_map(|(f, o, v)| format!("{f} {o} {v}"));
    proptest::collection::vec(
        (
            pred,
            proptest::sample::select(&[" && ", " || ", " && !(", ") || ", " "][..]),
        ),
        1..4,
    )
    .prop_map(|v| {
        v.into_iter()
            .map(|(p, j)| format!("{p}{j}"))
            .collect::<String>()
    })
}

/// The event files and what they take.
fn event_write() -> impl Strategy<Value = (&'static str, String, bool)> {
    const PATHS: &[&str] = &[
        "set_event",
        "events/enable",
        "events/sched/enable",
        "events/sched/filter",
        "events/sched/sched_switch/enable",
        "events/sched/sched_switch/filter",
        "events/sched/sched_switch/trigger",
        "events/sched/sched_wakeup/trigger",
        "events/sched/sched_wakeup/enable",
        "instances/fz/set_event",
        "instances/fz/events/sched/sched_switch/trigger",
    ];
    (
        proptest::sample::select(PATHS),
        prop_oneof![
            trigger_cmd(),
            filter_text(),
            proptest::sample::select(WORDS).prop_map(str::to_owned),
            "[a-z_:!* 01\n]{0,30}",
        ],
        any::<bool>(),
    )
}

/// `set_event` lists exactly the events whose `enable` shows them armed (`1`, `1*`, `0*`).
fn check_event_invariants(fs: &mut Fs, inst: &str) -> Result<(), TestCaseError> {
    let set = String::from_utf8(fs.read_to_end(&format!("{inst}set_event")).unwrap()).unwrap();
    for ev in ["sched_switch", "sched_wakeup"] {
        let en = String::from_utf8(
            fs.read_to_end(&format!("{inst}events/sched/{ev}/enable"))
                .unwrap(),
        )
        .unwrap();
        prop_assert!(
            ["0\n", "1\n", "0*\n", "1*\n"].contains(&en.as_str()),
            "{en:?}"
        );
        let listed = set.lines().any(|l| l == format!("sched:{ev}"));
        prop_assert_eq!(
            listed,
            en != "0\n",
            "{} enable {:?} vs set_event {:?}",
            ev,
            en,
            set
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// Writes shaped like real event commands (set_event tokens, enable values, filters,
    /// trigger commands) to the event files: never a panic, a rejected write changes nothing
    /// beyond Linux's own exceptions, and the files stay consistent with each other.
    #[test]
    fn event_file_writes_keep_the_kernels_rules(
        ops in proptest::collection::vec(event_write(), 1..10)
    ) {
        let mut fs = tracefs_with_sched();
        fs.mkdir("instances/fz").unwrap();
        for (path, text, append) in ops {
            let flags = if append { OpenFlags::APPEND } else { OpenFlags::TRUNCATE };
            let data = format!("{text}\n");
            let Ok(fh) = fs.open(path, flags) else { continue };
            let before = snapshot(&mut fs);
            let r = fs.write(fh, 0, data.as_bytes());
            let after = snapshot(&mut fs);
            match r {
                Ok(n) => prop_assert!(n <= data.len()),
                Err(e) => {
                    prop_assert!(e.name().is_some(), "unnamed errno {e:?}");
                    for (p, old) in &before {
                        let buffer_file = p.contains("size_kb") || p.ends_with("stats") || p.ends_with("trace");
                        let kept_filter = p == path && path.ends_with("/filter");
                        if !buffer_file && !kept_filter {
                            prop_assert_eq!(Some(old), after.get(p), "{} changed by rejected {:?} to {}", p, text, path);
                        }
                    }
                }
            }
            let _ = fs.release(fh);
            check_event_invariants(&mut fs, "")?;
            check_event_invariants(&mut fs, "instances/fz/")?;
        }
    }
}
