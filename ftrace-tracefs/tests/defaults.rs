//! Every file of `02-files` at boot defaults, and the listings of `01-ls`, against Linux 6.12.
//!
//! Machine-dependent values are configured like the capture: 2 CPUs, buffers not yet expanded.

mod common;

use common::{cat, golden, tracefs};
use ftrace_tracefs::Errno;
use ftrace_tracefs::tree::Node;

/// Files whose default text the tree (or ftrace-core's format tables) produces.
const TREE_OWNED: &[&str] = &[
    "buffer_percent",
    "buffer_size_kb",
    "buffer_subbuf_size_kb",
    "buffer_total_size_kb",
    "current_tracer",
    "dynamic_events",
    "error_log",
    "events/header_event",
    "events/header_page",
    "kprobe_events",
    "max_graph_depth",
    "per_cpu/cpu0/buffer_size_kb",
    "per_cpu/cpu1/buffer_size_kb",
    "saved_cmdlines_size",
    "set_event",
    "set_event_pid",
    "set_ftrace_pid",
    "timestamp_mode",
    "trace_clock",
    "trace_options",
    "tracing_cpumask",
    "tracing_on",
    "tracing_thresh",
];

/// Files whose text comes from the backend: the filter read-back of ftrace-core's filter language
/// (`ftrace_tracefs::filters`), empty at boot.
const BACKEND_OWNED: &[&str] = &[
    "set_ftrace_filter",
    "set_ftrace_notrace",
    "set_graph_function",
    "set_graph_notrace",
];

/// `02-files` entries for files ftrace-rs does not have (stack tracer,
/// probes other than the rejecting `kprobe_events`/`dynamic_events`), and the `sched` events,
/// which exist only once a host registers them.
const ABSENT: &[&str] = &[
    "events/ftrace/enable",
    "stack_max_size",
    "stack_trace",
    "synthetic_events",
    "uprobe_events",
    "events/sched/sched_switch/format",
    "events/sched/sched_wakeup/format",
];

fn golden_file(path: &str) -> String {
    golden(&format!("02-files/{}.txt", path.replace('/', "__")))
}

#[test]
fn tree_owned_files_match_linux_byte_for_byte() {
    let mut fs = tracefs();
    for path in TREE_OWNED.iter().chain(BACKEND_OWNED) {
        assert_eq!(cat(&mut fs, path).unwrap(), golden_file(path), "{path}");
    }
}

#[test]
fn every_ftrace_event_format_and_id_matches() {
    let mut fs = tracefs();
    let listing = golden("01-ls/events_ftrace.txt");
    let ours: Vec<String> = fs
        .read_dir("events/ftrace")
        .unwrap()
        .into_iter()
        .map(|e| e.name.into_owned())
        .collect();
    assert_eq!(ours, listing.lines().collect::<Vec<_>>());
    for name in listing.lines() {
        let path = format!("events/ftrace/{name}/format");
        let text = cat(&mut fs, &path).unwrap();
        assert_eq!(text, golden_file(&path), "{path}");
        let id_line = text.lines().find_map(|l| l.strip_prefix("ID: ")).unwrap();
        assert_eq!(
            cat(&mut fs, &format!("events/ftrace/{name}/id")).unwrap(),
            format!("{id_line}\n")
        );
    }
}

#[test]
fn trace_marker_cannot_be_read() {
    let mut fs = tracefs();
    let err = fs.read_to_end("trace_marker").unwrap_err();
    assert_eq!(err, Errno::EINVAL);
    assert_eq!(
        golden_file("trace_marker"),
        format!("cat: read error: {err}\n")
    );
}

#[test]
fn absent_files_are_absent() {
    let mut fs = tracefs();
    for path in ABSENT {
        assert_eq!(fs.read_to_end(path).unwrap_err(), Errno::ENOENT, "{path}");
    }
    // The capture shows the kernel has no events/ftrace/enable either.
    assert!(golden_file("events/ftrace/enable").contains("No such file or directory"));
}

fn names(fs: &ftrace_tracefs::Tracefs<common::ModelHost>, dir: &str) -> Vec<String> {
    fs.read_dir(dir)
        .unwrap()
        .into_iter()
        .map(|e| e.name.into_owned())
        .collect()
}

/// Linux's listing minus `missing` equals ours.
fn assert_listing(ours: Vec<String>, golden_listing: &str, missing: &[&str]) {
    let expected: Vec<&str> = golden_listing
        .lines()
        .filter(|n| !missing.contains(n))
        .collect();
    assert_eq!(ours, expected);
    for m in missing {
        assert!(
            golden_listing.lines().any(|l| l == *m),
            "{m} is not in the golden listing"
        );
    }
}

#[test]
fn root_listing_is_linux_minus_the_features_we_lack() {
    let fs = tracefs();
    assert_listing(
        names(&fs, ""),
        &golden("01-ls/root_ls.txt"),
        &[
            "kprobe_profile",
            "printk_formats",
            "snapshot",
            "stack_max_size",
            "stack_trace",
            "stack_trace_filter",
            "synthetic_events",
            "uprobe_events",
            "uprobe_profile",
        ],
    );
}

#[test]
fn modes_match_ls_la() {
    let fs = tracefs();
    for (dir, file) in [
        ("", "root_ls-la"),
        ("options", "options_ls-la"),
        ("per_cpu/cpu0", "per_cpu_cpu0_ls-la"),
    ] {
        let text = golden(&format!("01-ls/{file}.txt"));
        let mut checked = 0;
        for line in text
            .lines()
            .filter(|l| l.starts_with('-') || l.starts_with('d'))
        {
            let perms = &line[..10];
            let name = line.rsplit(' ').next().unwrap();
            if name == "." || name == ".." {
                continue;
            }
            let Ok(st) = fs.stat(&format!("{dir}/{name}")) else {
                continue;
            };
            let mut mode = 0u16;
            for (i, c) in perms[1..].chars().enumerate() {
                if c != '-' {
                    mode |= 1 << (8 - i);
                }
            }
            assert_eq!(st.mode, mode, "{dir}/{name}");
            assert_eq!(
                matches!(st.node, Node::Dir(_)),
                perms.starts_with('d'),
                "{dir}/{name}"
            );
            checked += 1;
        }
        // Every entry we list was found in Linux's `ls -la` and checked.
        assert_eq!(checked, fs.read_dir(dir).unwrap().len(), "{file}");
    }
}

#[test]
fn options_listing_and_values() {
    let mut fs = tracefs();
    let blk = ["blk_cgname", "blk_cgroup", "blk_classic"];
    assert_listing(names(&fs, "options"), &golden("01-ls/options.txt"), &blk);
    for line in golden("01-ls/options_values.txt").lines() {
        let (name, value) = line.split_once(' ').unwrap();
        if blk.contains(&name) {
            continue;
        }
        assert_eq!(
            cat(&mut fs, &format!("options/{name}")).unwrap(),
            format!("{value}\n"),
            "{name}"
        );
    }
}

#[test]
fn per_cpu_and_instances_listings() {
    let fs = tracefs();
    assert_eq!(
        names(&fs, "per_cpu"),
        golden("01-ls/per_cpu.txt").lines().collect::<Vec<_>>()
    );
    let missing = ["snapshot", "snapshot_raw"];
    assert_listing(
        names(&fs, "per_cpu/cpu0"),
        &golden("01-ls/per_cpu_cpu0.txt"),
        &missing,
    );
    assert_listing(
        names(&fs, "per_cpu/cpu1"),
        &golden("01-ls/per_cpu_cpu1.txt"),
        &missing,
    );
    assert!(names(&fs, "instances").is_empty());
    assert_eq!(fs.read_dir("trace_stat").unwrap_err(), Errno::ENOENT);
    assert!(golden("01-ls/trace_stat.txt").contains("No such file or directory"));
}

#[test]
fn call_site_files_exist_only_with_call_site_records() {
    let mut fs = tracefs();
    let avail = cat(&mut fs, "available_filter_functions").unwrap();
    assert!(avail.lines().any(|l| l == "vfs_read"));
    assert!(
        cat(&mut fs, "README")
            .unwrap()
            .contains("available_filter_functions -")
    );
    let mut host = common::ModelHost::new(2);
    host.functions = None;
    let mut bare = ftrace_tracefs::Tracefs::new(host).unwrap();
    for f in [
        "available_filter_functions",
        "available_filter_functions_addrs",
        "enabled_functions",
        "touched_functions",
        "dyn_ftrace_total_info",
    ] {
        assert!(fs.stat(f).is_ok());
        assert_eq!(bare.stat(f).unwrap_err(), Errno::ENOENT, "{f}");
    }
    let readme = cat(&mut bare, "README").unwrap();
    assert!(!readme.contains("available_filter_functions"));
    assert!(readme.contains("accepts: func_full_name or glob-matching-pattern"));
}

#[test]
fn readme_names_only_files_that_exist() {
    let mut fs = tracefs();
    let readme = cat(&mut fs, "README").unwrap();
    assert!(readme.starts_with("tracing mini-HOWTO:\n"));
    assert!(readme.contains("accepts: func_full_name or glob-matching-pattern"));
    for line in readme.lines() {
        let Some(first) = line.strip_prefix("  ") else {
            continue;
        };
        let word = first.split(['\t', ' ']).next().unwrap();
        if word.is_empty()
            || !word
                .chars()
                .all(|c| c.is_ascii_lowercase() || c == '_' || c == '/')
        {
            continue;
        }
        let path = word.trim_end_matches('/');
        let path = if path == "per_cpu/cpuN" {
            "per_cpu/cpu0"
        } else {
            path
        };
        assert!(
            fs.stat(path).is_ok(),
            "README names {word}, which does not exist"
        );
    }
}

/// `per_cpu/cpuN/stats` through the tree with real ftrace-ringbuf buffers, the clock set to
/// the capture's `now ts`.
#[test]
fn per_cpu_stats_with_real_ring_buffers() {
    let mut fs = tracefs();
    for (cpu, now) in [(0, 13_853_691_000), (1, 13_962_006_000)] {
        fs.host().state(None).borrow_mut().stats_now_ns = now;
        let path = format!("per_cpu/cpu{cpu}/stats");
        assert_eq!(cat(&mut fs, &path).unwrap(), golden_file(&path), "{path}");
    }
}

/// `trace` and `per_cpu/cpu0/trace` at boot, through the tree, the real ring buffers and the
/// real ftrace-tracers formatter; `available_tracers` from the real tracer registry.
#[test]
fn trace_files_and_tracers_at_boot() {
    let mut fs = tracefs();
    for path in ["trace", "per_cpu/cpu0/trace"] {
        assert_eq!(cat(&mut fs, path).unwrap(), golden_file(path), "{path}");
    }
    // Linux 6.12 also has blk and mmiotrace, which ftrace-rs does not build.
    let linux = golden_file("available_tracers");
    let expected: Vec<&str> = linux
        .split_whitespace()
        .filter(|t| !["blk", "mmiotrace"].contains(t))
        .collect();
    assert_eq!(
        cat(&mut fs, "available_tracers").unwrap(),
        format!("{}\n", expected.join(" "))
    );
}

/// With the `sched` events registered (as a Linux-like host does), their `format` and `id`
/// files are the kernel's byte for byte, and the event files have the kernel's modes.
#[test]
fn registered_sched_events_match_linux() {
    let mut fs = common::tracefs_with_sched();
    for ev in ["sched_switch", "sched_wakeup"] {
        let path = format!("events/sched/{ev}/format");
        let text = cat(&mut fs, &path).unwrap();
        assert_eq!(text, golden_file(&path), "{path}");
        let id = text.lines().find_map(|l| l.strip_prefix("ID: ")).unwrap();
        assert_eq!(
            cat(&mut fs, &format!("events/sched/{ev}/id")).unwrap(),
            format!("{id}\n")
        );
        for (file, mode) in [
            ("enable", 0o640),
            ("filter", 0o640),
            ("format", 0o440),
            ("id", 0o440),
            ("trigger", 0o640),
        ] {
            let st = fs.stat(&format!("events/sched/{ev}/{file}")).unwrap();
            assert_eq!(st.mode, mode, "{ev}/{file}");
        }
    }
    assert_eq!(
        names(&fs, "events/sched"),
        ["enable", "filter", "sched_switch", "sched_wakeup"]
    );
    // Boot defaults: nothing enabled, no filters, no triggers.
    assert_eq!(
        cat(&mut fs, "events/enable").unwrap(),
        golden_file("events/enable")
    );
    assert_eq!(cat(&mut fs, "set_event").unwrap(), golden_file("set_event"));
    assert_eq!(cat(&mut fs, "events/sched/enable").unwrap(), "0\n");
    assert_eq!(
        cat(&mut fs, "events/sched/sched_switch/filter").unwrap(),
        "none\n"
    );
    assert_eq!(
        cat(&mut fs, "events/sched/sched_switch/trigger").unwrap(),
        "# Available triggers:\n# traceon traceoff stacktrace enable_event disable_event enable_hist disable_hist hist\n"
    );
    // `available_events` lists them as the kernel does (`system:event`).
    let avail = cat(&mut fs, "available_events").unwrap();
    assert_eq!(avail, "sched:sched_switch\nsched:sched_wakeup\n");
    let linux_count: usize = golden_file("available_events_count")
        .trim()
        .parse()
        .unwrap();
    assert!(linux_count > 2);
}
