//! The filter files against Linux 6.12.117: every captured bad write that concerns the filter
//! files (`07-errors`) gives the same errno, the read-back text matches the captures, and the
//! language (globs, `!`, `:mod:`, commands, append vs replace) behaves as the kernel's.

use ftrace_core::errno::Errno;
use ftrace_core::filter::ProbeCommand;
use ftrace_core::pid::{show_pids, write_pids};
use ftrace_core::symbols::{SortedSymbols, SymbolTable};
use ftrace_tracefs::filter_edit::{CommandEnv, FilterDraft, FilterSet, NoEvents, ProbeTable};
use ftrace_tracefs::{FilterFile, WriteMode};

const REFERENCE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../shared/reference/ftrace-6.12.117"
);

fn reference(path: &str) -> String {
    std::fs::read_to_string(format!("{REFERENCE}/{path}"))
        .unwrap_or_else(|e| panic!("reading {path}: {e}"))
}

/// The kallsyms lines of every function the captures mention (address order).
fn kernel_symbols() -> SortedSymbols {
    SortedSymbols::from_kallsyms(&reference("11-kallsyms/kallsyms_subset.txt")).unwrap()
}

/// A table with module symbols for `:mod:`.
fn module_symbols() -> SortedSymbols {
    let mut t = SortedSymbols::new();
    t.push("vfs_read", 0x1000, 0x10, None);
    t.push("vfs_write", 0x1010, 0x10, None);
    t.push("ext4_read", 0x2000, 0x10, Some("ext4"));
    t.push("ext4_write", 0x2010, 0x10, Some("ext4"));
    t.push("xfs_read", 0x3000, 0x10, Some("xfs"));
    t.finish();
    t
}

struct Events<S>(S);
impl<S: SymbolTable> CommandEnv for Events<S> {
    fn symbols(&self) -> &dyn SymbolTable {
        &self.0
    }
    fn event_exists(&self, system: &str, event: &str) -> bool {
        system == "sched" && matches!(event, "sched_switch" | "sched_wakeup")
    }
}

/// One open-write-close of `file` (the shell's `echo TEXT > file` or `>> file`).
fn echo(
    file: FilterFile,
    current: &FilterSet,
    text: &str,
    mode: WriteMode,
    env: &dyn CommandEnv,
    probes: &mut ProbeTable,
) -> (FilterSet, Result<(), Errno>) {
    let mut edit = FilterDraft::open(file, current, mode);
    let res = edit.write_all(text, env, probes);
    let (set, close_res) = edit.close(env, probes);
    (set, res.and(close_res))
}

fn errno_named(text: &str) -> Errno {
    [
        Errno::EINVAL,
        Errno::ENOMEM,
        Errno::ENOENT,
        Errno::ENODEV,
        Errno::EBUSY,
        Errno::EPERM,
        Errno::ERANGE,
    ]
    .into_iter()
    .find(|e| e.description() == Some(text))
    .unwrap_or_else(|| panic!("unknown error text {text:?}"))
}

/// A captured `echo [TEXT] > FILE; echo $?` case: (file, bytes written, expected result).
fn captured_write(case: &str) -> (FilterFile, String, Result<(), Errno>) {
    let text = reference(&format!("07-errors/{case}.txt"));
    let mut lines = text.lines();
    let cmd = lines.next().unwrap().strip_prefix("$ ").unwrap();
    let (left, right) = cmd.split_once(" > ").unwrap();
    let file = match right.split(';').next().unwrap() {
        "set_ftrace_filter" => FilterFile::Filter,
        "set_ftrace_notrace" => FilterFile::Notrace,
        "set_graph_function" => FilterFile::GraphFunction,
        "set_graph_notrace" => FilterFile::GraphNotrace,
        other => panic!("not a filter file: {other}"),
    };
    let arg = left.strip_prefix("echo").unwrap().trim().trim_matches('\'');
    let written = if arg.is_empty() {
        "\n".to_string()
    } else {
        format!("{arg}\n")
    };
    let next = lines.next().unwrap();
    let expected = match next.strip_prefix("sh: write error: ") {
        Some(msg) => {
            assert_eq!(lines.next(), Some("1"));
            Err(errno_named(msg))
        }
        None => {
            assert_eq!(next, "0");
            Ok(())
        }
    };
    (file, written, expected)
}

fn check_captured(case: &str) {
    let (file, written, expected) = captured_write(case);
    let env = NoEvents(kernel_symbols());
    let mut probes = ProbeTable::new();
    let before = FilterSet::new();
    let (after, res) = echo(
        file,
        &before,
        &written,
        WriteMode::Truncate,
        &env,
        &mut probes,
    );
    assert_eq!(
        res,
        expected,
        "07-errors/{case}: {written:?} to {}",
        file.name()
    );
    // The capture's next command reads the file back: nothing was added.
    assert_eq!(after, FilterSet::new());
}

#[test]
fn errors_03_unknown_function_in_set_ftrace_filter() {
    check_captured("03");
}

#[test]
fn errors_04_filter_reads_back_all_enabled_after_failed_write() {
    let (file, written, _) = captured_write("03");
    let env = NoEvents(kernel_symbols());
    let mut probes = ProbeTable::new();
    let (after, _) = echo(
        file,
        &FilterSet::new(),
        &written,
        WriteMode::Truncate,
        &env,
        &mut probes,
    );
    let text = reference("07-errors/04.txt");
    let expected: Vec<&str> = text.lines().skip(1).take_while(|l| *l != "rc=0").collect();
    let shown = after.show(FilterFile::Filter, &env.0, Some(&probes));
    assert_eq!(shown.lines().collect::<Vec<_>>(), expected);
}

#[test]
fn errors_16_unknown_command() {
    check_captured("16");
}

#[test]
fn errors_17_unknown_function_in_set_graph_function() {
    check_captured("17");
}

#[test]
fn errors_25_empty_write_clears_the_filter() {
    check_captured("25");
    // And it clears a non-empty filter (O_TRUNC).
    let env = NoEvents(kernel_symbols());
    let mut probes = ProbeTable::new();
    let (set, _) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        "vfs_read",
        WriteMode::Truncate,
        &env,
        &mut probes,
    );
    assert_eq!(set.len(), 1);
    let (set, res) = echo(
        FilterFile::Filter,
        &set,
        "\n",
        WriteMode::Truncate,
        &env,
        &mut probes,
    );
    assert_eq!(res, Ok(()));
    assert!(set.is_empty());
}

#[test]
fn readback_matches_the_function_capture() {
    // 04-function: set_ftrace_filter='vfs_read vfs_write do_sys_openat2 ksys_read' reads
    // back in call-site order.
    let env = NoEvents(kernel_symbols());
    let mut probes = ProbeTable::new();
    let (set, res) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        "vfs_read vfs_write do_sys_openat2 ksys_read\n",
        WriteMode::Truncate,
        &env,
        &mut probes,
    );
    res.unwrap();
    assert_eq!(
        set.show(FilterFile::Filter, &env.0, Some(&probes)),
        reference("04-function/set_ftrace_filter.txt")
    );
}

#[test]
fn defaults_match_the_boot_captures() {
    let syms = kernel_symbols();
    let empty = FilterSet::new();
    for (file, capture) in [
        (FilterFile::Filter, "02-files/set_ftrace_filter.txt"),
        (FilterFile::Notrace, "02-files/set_ftrace_notrace.txt"),
        (FilterFile::GraphFunction, "02-files/set_graph_function.txt"),
        (FilterFile::GraphNotrace, "02-files/set_graph_notrace.txt"),
    ] {
        assert_eq!(
            empty.show(file, &syms, None),
            reference(capture),
            "{capture}"
        );
    }
    assert_eq!(show_pids(&[]), reference("02-files/set_ftrace_pid.txt"));
}

fn filter_names(set: &FilterSet, syms: &dyn SymbolTable) -> Vec<String> {
    set.show(FilterFile::Filter, syms, None)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn globs_negation_append_and_replace() {
    let env = NoEvents(kernel_symbols());
    let syms = &env.0;
    let mut p = ProbeTable::new();
    let (set, r) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        "vfs_*",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(filter_names(&set, syms), ["vfs_read", "vfs_write"]);
    let (set, r) = echo(
        FilterFile::Filter,
        &set,
        "*_read",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    let mut expected = Vec::new();
    syms.for_each(&mut |s| {
        if s.name.starts_with("vfs_") || s.name.ends_with("_read") {
            expected.push(s.name.to_string());
        }
    });
    assert!(expected.len() > 3, "{expected:?}");
    assert_eq!(filter_names(&set, syms), expected);
    let (set, r) = echo(
        FilterFile::Filter,
        &set,
        "!vfs_*",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    expected.retain(|n| !n.starts_with("vfs_"));
    assert_eq!(filter_names(&set, syms), expected);
    // `!` of a function that exists but is not in the set succeeds (it matched a record).
    let (set, r) = echo(
        FilterFile::Filter,
        &set,
        "!vfs_read",
        WriteMode::Append,
        &env,
        &mut p,
    );
    assert_eq!(r, Ok(()));
    let (set, r) = echo(
        FilterFile::Filter,
        &set,
        "*sys_open*",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(
        filter_names(&set, syms),
        ["do_sys_openat2", "__x64_sys_openat"]
    );
    let (set, r) = echo(
        FilterFile::Filter,
        &set,
        "v?s_re[a-z]d",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(filter_names(&set, syms), ["vfs_read"]);
    // A 1-based index into the listing.
    let (set, r) = echo(
        FilterFile::Filter,
        &set,
        "1",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(filter_names(&set, syms), ["__traceiter_initcall_level"]);
    let (_, r) = echo(
        FilterFile::Filter,
        &set,
        "0",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    assert_eq!(r, Err(Errno::EINVAL));
    let (_, r) = echo(
        FilterFile::Filter,
        &set,
        "99999",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    assert_eq!(r, Err(Errno::EINVAL));
    // A failing token in the middle keeps the earlier ones (one token per write(2)).
    let (set, r) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        "vfs_read nonexistent_fn vfs_write",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    assert_eq!(r, Err(Errno::EINVAL));
    assert_eq!(filter_names(&set, syms), ["vfs_read"]);
    // The ip set becomes the dispatch hash.
    let hash = set.to_hash();
    let vfs_read = syms.lookup(0xffffffff81457340).unwrap();
    assert!(hash.contains(vfs_read.addr) && hash.len() == 1);
}

#[test]
fn notrace_reads_back_and_rejects_commands() {
    let env = NoEvents(kernel_symbols());
    let mut p = ProbeTable::new();
    let (set, r) = echo(
        FilterFile::Notrace,
        &FilterSet::new(),
        "ksys_*",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(
        set.show(FilterFile::Notrace, &env.0, None),
        "ksys_read\nksys_write\n"
    );
    let (_, r) = echo(
        FilterFile::Notrace,
        &set,
        "vfs_read:traceon",
        WriteMode::Append,
        &env,
        &mut p,
    );
    assert_eq!(r, Err(Errno::EINVAL));
    assert!(p.is_empty());
}

#[test]
fn graph_files_take_globs_only() {
    let env = NoEvents(kernel_symbols());
    let mut p = ProbeTable::new();
    let g = FilterFile::GraphFunction;
    let (set, r) = echo(
        g,
        &FilterSet::new(),
        "vfs_read ksys_read",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    let shown = set.show(g, &env.0, None);
    let mut lines: Vec<&str> = shown.lines().collect();
    lines.sort();
    assert_eq!(lines, ["ksys_read", "vfs_read"]);
    for bad in ["vfs_read:traceon", "1", "!vfs_write", "nonexistent_fn_xyz"] {
        let (after, r) = echo(g, &set, bad, WriteMode::Append, &env, &mut p);
        assert_eq!(r, Err(Errno::EINVAL), "{bad}");
        assert_eq!(after.len(), 2);
    }
    let (set, r) = echo(g, &set, "!vfs_read", WriteMode::Append, &env, &mut p);
    r.unwrap();
    assert_eq!(set.show(g, &env.0, None), "ksys_read\n");
    assert_eq!(
        FilterSet::new().show(FilterFile::GraphNotrace, &env.0, None),
        "#### no functions disabled ####\n"
    );
}

#[test]
fn graph_readback_follows_kernel_hash_order() {
    // Two entries: `__ftrace_hash_move` gives a 2-bucket hash keyed by the top bit of
    // `ip * GOLDEN_RATIO_64`; the read walks bucket 0 then 1.
    let env = NoEvents(kernel_symbols());
    let mut p = ProbeTable::new();
    let (set, _) = echo(
        FilterFile::GraphFunction,
        &FilterSet::new(),
        "vfs_read vfs_write",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    let key = |ip: u64| ip.wrapping_mul(0x61C8_8646_80B5_83EB) >> 63;
    let mut ips: Vec<u64> = set.ips().collect();
    let keys: Vec<u64> = ips.iter().map(|&ip| key(ip)).collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{keys:?}");
    ips.sort();
    assert_eq!(ips, [0xffffffff81457340, 0xffffffff81457c10]);
}

#[test]
fn function_commands_register_read_back_and_remove() {
    let env = Events(kernel_symbols());
    let mut p = ProbeTable::new();
    let f = FilterFile::Filter;
    let empty = FilterSet::new();
    let (set, r) = echo(
        f,
        &empty,
        "vfs_read:traceon",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert!(set.is_empty(), "commands do not touch the filter hash");
    assert_eq!(
        set.show(f, &env.0, Some(&p)),
        "#### all functions enabled ####\nvfs_read:traceon:unlimited\n"
    );
    let (set, r) = echo(
        f,
        &set,
        "ksys_read:traceoff:3",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    let (set, r) = echo(
        f,
        &set,
        "vfs_write:enable_event:sched:sched_switch:2",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    let (set, r) = echo(
        f,
        &set,
        "ksys_write:snapshot",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    // Newest probe ops first.
    assert_eq!(
        set.show(f, &env.0, Some(&p)),
        "#### all functions enabled ####\n\
         ksys_write:snapshot:unlimited\n\
         vfs_write:enable_event:sched:sched_switch:count=2\n\
         ksys_read:traceoff:count=3\n\
         vfs_read:traceon:unlimited\n"
    );
    assert!(p.set_count(0xffffffff81458070, ProbeCommand::Traceoff, 2));
    assert_eq!(p.at(0xffffffff81458070).next().unwrap().count, Some(2));
    assert_eq!(p.hash_of(ProbeCommand::Traceon).len(), 1);
    // Truncating the filter does not remove commands.
    let (set, _) = echo(f, &set, "\n", WriteMode::Truncate, &env, &mut p);
    assert_eq!(p.entries().count(), 4);
    // Removal: the uncounted form removes the uncounted probe; the counted one needs `:0`.
    let (_, r) = echo(
        f,
        &set,
        "!ksys_read:traceoff",
        WriteMode::Append,
        &env,
        &mut p,
    );
    assert_eq!(r, Err(Errno::ENODEV));
    let (set, r) = echo(
        f,
        &set,
        "!ksys_read:traceoff:0",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    let (_, r) = echo(
        f,
        &set,
        "!vfs_write:traceon",
        WriteMode::Append,
        &env,
        &mut p,
    );
    assert_eq!(r, Err(Errno::EINVAL), "probe exists but matches nothing");
    let (set, r) = echo(f, &set, "!*:traceon", WriteMode::Append, &env, &mut p);
    r.unwrap();
    let (set, r) = echo(
        f,
        &set,
        "!vfs_write:enable_event:sched:sched_switch:0",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    let (_, r) = echo(
        f,
        &set,
        "!ksys_write:snapshot",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    assert!(p.is_empty());
}

#[test]
fn function_command_errors() {
    let env = Events(kernel_symbols());
    let mut p = ProbeTable::new();
    let f = FilterFile::Filter;
    let empty = FilterSet::new();
    for (text, errno) in [
        ("nonexistent_fn:traceon", Errno::EINVAL),
        ("vfs_read:traceon:abc", Errno::EINVAL),
        ("vfs_read:traceon:99999999999999999999999", Errno::ERANGE),
        ("vfs_read:enable_event", Errno::EINVAL),
        ("vfs_read:enable_event:sched", Errno::EINVAL),
        ("vfs_read:enable_event:sched:nonexistent", Errno::EINVAL),
        ("vfs_read:enable_event:sched:sched_switch:", Errno::EINVAL),
        ("vfs_read:mod", Errno::EINVAL),
        ("!vfs_read:stacktrace", Errno::ENODEV),
    ] {
        let (_, r) = echo(f, &empty, text, WriteMode::Truncate, &env, &mut p);
        assert_eq!(r, Err(errno), "{text}");
    }
    assert!(p.is_empty());
    // An empty count is a counted probe with no limit, printed as the kernel does.
    let (set, r) = echo(
        f,
        &empty,
        "vfs_read:stacktrace:",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(
        set.show(f, &env.0, Some(&p)),
        "#### all functions enabled ####\nvfs_read:stacktrace:count=-1\n"
    );
    // The same function again under the same probe: nothing was added → EINVAL.
    let cmd = "vfs_read:disable_event:sched:sched_switch";
    let (set, r) = echo(f, &set, cmd, WriteMode::Append, &env, &mut p);
    r.unwrap();
    let (_, r) = echo(f, &set, cmd, WriteMode::Append, &env, &mut p);
    assert_eq!(r, Err(Errno::EINVAL));
    let (_, r) = echo(
        f,
        &set,
        "vfs_read:stacktrace:5",
        WriteMode::Append,
        &env,
        &mut p,
    );
    assert_eq!(r, Err(Errno::EINVAL));
    // A glob that adds at least one new function succeeds; existing ones keep their count.
    let (_, r) = echo(
        f,
        &set,
        "vfs_*:stacktrace:5",
        WriteMode::Append,
        &env,
        &mut p,
    );
    assert_eq!(r, Ok(()));
    let counts: Vec<_> = p
        .entries()
        .filter(|e| e.cmd == ProbeCommand::Stacktrace)
        .map(|e| e.count)
        .collect();
    assert_eq!(counts.len(), 2);
    assert!(counts.contains(&Some(-1)) && counts.contains(&Some(5)));
    // No snapshot support: the command does not exist.
    struct NoSnap(SortedSymbols);
    impl CommandEnv for NoSnap {
        fn symbols(&self) -> &dyn SymbolTable {
            &self.0
        }
        fn has_snapshot(&self) -> bool {
            false
        }
    }
    let (_, r) = echo(
        f,
        &empty,
        "vfs_read:snapshot",
        WriteMode::Truncate,
        &NoSnap(kernel_symbols()),
        &mut p,
    );
    assert_eq!(r, Err(Errno::EINVAL));
}

#[test]
fn module_filters_and_cache() {
    let env = NoEvents(module_symbols());
    let syms = &env.0;
    let mut p = ProbeTable::new();
    let f = FilterFile::Filter;
    let (set, r) = echo(
        f,
        &FilterSet::new(),
        ":mod:ext4",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(
        filter_names(&set, syms),
        ["ext4_read [ext4]", "ext4_write [ext4]"]
    );
    let (set, r) = echo(
        f,
        &FilterSet::new(),
        "*read:mod:*",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(
        filter_names(&set, syms),
        ["ext4_read [ext4]", "xfs_read [xfs]"]
    );
    // `!` on the module: everything outside it.
    let (set, r) = echo(
        f,
        &FilterSet::new(),
        "*read:mod:!ext4",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    assert_eq!(filter_names(&set, syms), ["vfs_read", "xfs_read [xfs]"]);
    // A loaded module with no match fails; an unknown one is cached and read back.
    let (_, r) = echo(
        f,
        &FilterSet::new(),
        "nope:mod:ext4",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    assert_eq!(r, Err(Errno::EINVAL));
    let (set, r) = echo(
        f,
        &FilterSet::new(),
        "foo*:mod:btrfs",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    let (set, r) = echo(f, &set, ":mod:nfs", WriteMode::Append, &env, &mut p);
    r.unwrap();
    assert_eq!(
        set.show(f, syms, Some(&p)),
        "#### all functions enabled ####\n:mod:nfs\nfoo*:mod:btrfs\n"
    );
    let (set, r) = echo(f, &set, "!foo*:mod:btrfs", WriteMode::Append, &env, &mut p);
    r.unwrap();
    assert_eq!(set.mods().len(), 1);
    let (_, r) = echo(f, &set, "!foo*:mod:btrfs", WriteMode::Append, &env, &mut p);
    assert_eq!(r, Err(Errno::EINVAL));
    // Loading the module applies its cached requests.
    let mut set = set;
    let mut loaded = module_symbols();
    loaded.push("nfs_read", 0x4000, 0x10, Some("nfs"));
    loaded.push("nfs_write", 0x4010, 0x10, Some("nfs"));
    loaded.finish();
    let (mut with_btrfs, _) = echo(
        f,
        &set,
        "btrfs_*:mod:btrfs",
        WriteMode::Append,
        &env,
        &mut p,
    );
    assert_eq!(with_btrfs.load_module("xfs", &loaded), 0);
    assert_eq!(with_btrfs.load_module("nfs", &loaded), 1);
    assert_eq!(
        with_btrfs.show(f, &loaded, None),
        "nfs_read [nfs]\nnfs_write [nfs]\nbtrfs_*:mod:btrfs\n"
    );
    assert_eq!(set.load_module("nfs", &loaded), 1);
    // Truncation drops the cache.
    let (set, _) = echo(f, &set, "\n", WriteMode::Truncate, &env, &mut p);
    assert!(set.mods().is_empty());
}

#[test]
fn tokens_split_across_writes_and_too_long() {
    let env = NoEvents(kernel_symbols());
    let mut p = ProbeTable::new();
    let mut e = FilterDraft::open(FilterFile::Filter, &FilterSet::new(), WriteMode::Truncate);
    assert_eq!(e.write("  vfs_", &env, &mut p), Ok(6));
    assert_eq!(e.write("read\nksys", &env, &mut p), Ok(5));
    assert_eq!(e.write("ksys", &env, &mut p), Ok(4));
    assert_eq!(e.write("_write", &env, &mut p), Ok(6));
    // The last token has no separator: applied at close.
    let (set, r) = e.close(&env, &mut p);
    r.unwrap();
    assert_eq!(filter_names(&set, &env.0), ["vfs_read", "ksys_write"]);
    let mut e = FilterDraft::open(FilterFile::Filter, &FilterSet::new(), WriteMode::Truncate);
    let long = "a".repeat(670);
    assert_eq!(e.write(&long, &env, &mut p), Err(Errno::EINVAL));
    assert_eq!(e.write(&"*".repeat(669), &env, &mut p).map(|_| ()), Ok(()));
}

#[test]
fn pid_files() {
    assert_eq!(show_pids(&[]), "no pid\n");
    let pids = write_pids(&[], "300 12\n").unwrap();
    assert_eq!(show_pids(&pids), "12\n300\n");
    // `>>` appends, a bad token rejects the whole write.
    assert_eq!(write_pids(&pids, "7 x"), Err(Errno::EINVAL));
    assert_eq!(write_pids(&pids, "7").unwrap(), [7, 12, 300]);
}

#[test]
fn command_lines_follow_the_probe_hash_order() {
    let env = NoEvents(kernel_symbols());
    let mut p = ProbeTable::new();
    let (set, r) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        "*_read:traceoff",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    let ips: Vec<u64> = p.entries().map(|e| e.ip).collect();
    assert!(ips.len() >= 3, "{ips:?}");
    // `__ftrace_hash_move` sizes the probe's hash to fls(n / 2) bits; reading walks buckets in
    // index order, so the hash keys never decrease along the listing.
    let n = ips.len();
    let bits = usize::BITS - (n / 2).leading_zeros();
    let key = |ip: u64| ip.wrapping_mul(0x61C8_8646_80B5_83EB) >> (64 - bits);
    let keys: Vec<u64> = ips.iter().map(|&ip| key(ip)).collect();
    assert!(keys.windows(2).all(|w| w[0] <= w[1]), "{keys:?}");
    let shown = set.show(FilterFile::Filter, &env.0, Some(&p));
    assert_eq!(shown.lines().count(), n + 1);
    assert!(
        shown
            .lines()
            .skip(1)
            .all(|l| l.ends_with(":traceoff:unlimited"))
    );
}

/// A backend's side of the probes for the tests: one tracing switch, counters.
#[derive(Default)]
struct Backend {
    on: std::cell::Cell<bool>,
    stacks: std::cell::Cell<u32>,
    disabled: std::cell::Cell<bool>,
}

impl ftrace_core::filter::ProbeActions for Backend {
    fn tracing_is_on(&self) -> bool {
        self.on.get()
    }
    fn set_tracing_on(&self, on: bool) {
        self.on.set(on);
    }
    fn stacktrace(&self, _ip: u64, _parent_ip: u64) {
        self.stacks.set(self.stacks.get() + 1);
    }
    fn event_soft_disabled(&self, system: &str, event: &str) -> Option<bool> {
        (system == "sched" && event == "sched_switch").then(|| self.disabled.get())
    }
    fn set_event_soft_disabled(&self, _system: &str, _event: &str, disabled: bool) {
        self.disabled.set(disabled);
    }
}

#[test]
fn hits_decrement_the_counts_the_file_reads_back() {
    let env = Events(module_symbols());
    let mut p = ProbeTable::new();
    let text = "vfs_read:traceoff:2 vfs_write:traceon vfs_write:stacktrace:1 \
                vfs_read:disable_event:sched:sched_switch:1";
    let (set, r) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        text,
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    let runner = p.runner();
    let (read, write) = (0x1000, 0x1010);
    assert!(runner.hash().contains(read) && runner.hash().contains(write));
    assert!(!runner.hash().contains(0x2000));
    let b = Backend::default();
    b.on.set(true);
    // vfs_read: traceoff (2 -> 1) and disable_event (1 -> 0)
    assert_eq!(runner.run(read, 0, &b), 2);
    assert!(!b.on.get() && b.disabled.get());
    // vfs_write: the newest probe runs first (the kernel's ops list order): the stacktrace
    // is skipped while tracing is off, then traceon (unlimited) turns it on
    assert_eq!(runner.run(write, 0, &b), 1);
    assert_eq!(b.stacks.get(), 0);
    assert!(b.on.get());
    // now the stacktrace runs (1 -> 0); traceon has nothing to do
    assert_eq!(runner.run(write, 0, &b), 1);
    assert_eq!(b.stacks.get(), 1);
    assert_eq!(runner.run(read, 0, &b), 1);
    assert_eq!(runner.run(read, 0, &b), 0);
    assert_eq!(runner.run(write, 0, &b), 1);
    assert_eq!(runner.run(read, 0, &b), 0);
    assert_eq!(b.stacks.get(), 1);
    // the read-back shows what the runner used, in the kernel's words
    let shown = set.show(FilterFile::Filter, env.symbols(), Some(&p));
    let mut lines: Vec<&str> = shown.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        [
            "#### all functions enabled ####",
            "vfs_read:disable_event:sched:sched_switch:count=0",
            "vfs_read:traceoff:count=0",
            "vfs_write:stacktrace:count=0",
            "vfs_write:traceon:unlimited",
        ]
    );
    // adding a function to a probe keeps the counts already used
    let (_, r) = echo(
        FilterFile::Filter,
        &set,
        "vfs_write:traceoff:2",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    let e: Vec<_> = p
        .at(read)
        .filter(|e| e.cmd == ProbeCommand::Traceoff)
        .collect();
    assert_eq!(e[0].count, Some(0));
    let e: Vec<_> = p
        .at(write)
        .filter(|e| e.cmd == ProbeCommand::Traceoff)
        .collect();
    assert_eq!(e[0].count, Some(2));
}

#[test]
fn commands_a_backend_cannot_run_are_refused() {
    struct NoStacks(SortedSymbols);
    impl CommandEnv for NoStacks {
        fn symbols(&self) -> &dyn SymbolTable {
            &self.0
        }
        fn supports(&self, cmd: ProbeCommand) -> bool {
            cmd != ProbeCommand::Stacktrace
        }
    }
    let env = NoStacks(module_symbols());
    let mut p = ProbeTable::new();
    let (set, r) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        "vfs_read:traceoff",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    let before = p.clone();
    for bad in [
        "vfs_read:stacktrace",
        "vfs_write:stacktrace:3",
        "!vfs_read:stacktrace",
    ] {
        let (after, r) = echo(
            FilterFile::Filter,
            &set,
            bad,
            WriteMode::Append,
            &env,
            &mut p,
        );
        assert_eq!(r, Err(Errno::EINVAL), "{bad}");
        assert_eq!(p, before, "{bad}");
        assert_eq!(after, set, "{bad}");
    }
}

#[test]
fn concurrent_hits_act_at_most_count_times() {
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
    struct Shared {
        on: AtomicBool,
        stacks: AtomicU32,
    }
    impl ftrace_core::filter::ProbeActions for Shared {
        fn tracing_is_on(&self) -> bool {
            self.on.load(Ordering::SeqCst)
        }
        fn set_tracing_on(&self, on: bool) {
            self.on.store(on, Ordering::SeqCst);
        }
        fn stacktrace(&self, _ip: u64, _parent_ip: u64) {
            self.stacks.fetch_add(1, Ordering::SeqCst);
        }
    }
    let env = NoEvents(module_symbols());
    let mut p = ProbeTable::new();
    let (_, r) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        "vfs_read:stacktrace:1000",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    let runner = p.runner();
    let b = Shared {
        on: AtomicBool::new(true),
        stacks: AtomicU32::new(0),
    };
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..700 {
                    runner.run(0x1000, 0, &b);
                }
            });
        }
    });
    assert_eq!(b.stacks.load(Ordering::SeqCst), 1000);
    assert_eq!(p.at(0x1000).next().unwrap().count, Some(0));
}

/// `dump` and `cpudump` run "only once" in the kernel's words: `ftrace_dump_callback` and
/// `ftrace_cpudump_callback` register with the parameter "1" whatever was written; dump's
/// probe ops counts it (`dump:count=1`, then `count=0`), cpudump's has no count map
/// (`:unlimited`, and it runs on every hit).
#[test]
fn dump_counts_once_and_cpudump_is_unlimited() {
    #[derive(Default)]
    struct Dumps(std::cell::Cell<u32>, std::cell::Cell<u32>);
    impl ftrace_core::filter::ProbeActions for Dumps {
        fn tracing_is_on(&self) -> bool {
            true
        }
        fn set_tracing_on(&self, _on: bool) {}
        fn dump(&self, this_cpu_only: bool) {
            let c = if this_cpu_only { &self.1 } else { &self.0 };
            c.set(c.get() + 1);
        }
    }
    let env = NoEvents(module_symbols());
    let mut p = ProbeTable::new();
    let (set, r) = echo(
        FilterFile::Filter,
        &FilterSet::new(),
        "vfs_read:dump:5 vfs_write:cpudump:7",
        WriteMode::Truncate,
        &env,
        &mut p,
    );
    r.unwrap();
    let show = |p: &ProbeTable| {
        let t = set.show(FilterFile::Filter, env.symbols(), Some(p));
        let mut l: Vec<String> = t.lines().skip(1).map(str::to_string).collect();
        l.sort_unstable();
        l
    };
    assert_eq!(
        show(&p),
        ["vfs_read:dump:count=1", "vfs_write:cpudump:unlimited"]
    );
    let runner = p.runner();
    let d = Dumps::default();
    for _ in 0..3 {
        runner.run(0x1000, 0, &d);
        runner.run(0x1010, 0, &d);
    }
    assert_eq!((d.0.get(), d.1.get()), (1, 3));
    assert_eq!(
        show(&p),
        ["vfs_read:dump:count=0", "vfs_write:cpudump:unlimited"]
    );
    // removal without a count finds them (one probe ops each)
    let (_, r) = echo(
        FilterFile::Filter,
        &set,
        "!vfs_read:dump !vfs_write:cpudump",
        WriteMode::Append,
        &env,
        &mut p,
    );
    r.unwrap();
    assert!(p.is_empty());
}
