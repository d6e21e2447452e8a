//! The `TraceArray` instance behind the tree, over a host platform: every file of the
//! features it owns changes what is recorded, or is refused with the kernel's errno.

mod common;

use common::sim::{DO_WORK, HELPER, LEAF, SCHEDULE, Sim, become_task, call, workload};
use ftrace_tracefs::array::{ArrayHost, TraceArray};
use ftrace_tracefs::{Errno, Tracefs, WriteMode};

type Fs = Tracefs<ArrayHost<Sim, 2>>;

fn cat(fs: &mut Fs, path: &str) -> String {
    String::from_utf8(fs.read_to_end(path).unwrap()).unwrap()
}

fn echo(fs: &mut Fs, data: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{data}\n").as_bytes(), WriteMode::Truncate)
}

/// The event lines of `trace` (the header's `#` lines dropped).
fn lines(fs: &mut Fs) -> Vec<String> {
    cat(fs, "trace")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

/// The `entries-in-buffer/entries-written` pair of the header.
fn counts(fs: &mut Fs) -> (u64, u64) {
    let t = cat(fs, "trace");
    let l = t
        .lines()
        .find_map(|l| l.strip_prefix("# entries-in-buffer/entries-written: "))
        .expect("counts line");
    let (e, w) = l
        .split_whitespace()
        .next()
        .unwrap()
        .split_once('/')
        .unwrap();
    (e.parse().unwrap(), w.parse().unwrap())
}

macro_rules! instance {
    () => {{
        static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
        become_task(0, 2);
        (&A, A.tracefs().unwrap())
    }};
}

#[test]
fn function_records_every_call_with_its_parent() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    let l = lines(&mut fs);
    let calls: Vec<&str> = l.iter().map(|l| l.split(": ").nth(1).unwrap()).collect();
    assert_eq!(
        calls,
        [
            "schedule <-0x00009000",
            "do_work <-schedule",
            "helper <-do_work",
            "leaf <-helper",
            "helper <-do_work"
        ]
    );
    assert!(
        l[0].starts_with("          worker-2       [000] ....."),
        "{}",
        l[0]
    );
    assert_eq!(cat(&mut fs, "saved_cmdlines"), "2 worker\n");
}

#[test]
fn switching_tracer_starts_on_empty_buffers_and_nop_records_nothing() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    assert_eq!(counts(&mut fs), (5, 5));
    echo(&mut fs, "nop", "current_tracer").unwrap();
    assert_eq!(counts(&mut fs), (0, 0));
    workload(a);
    assert_eq!(counts(&mut fs), (0, 0));
    // An unknown tracer is refused and changes nothing.
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    assert_eq!(echo(&mut fs, "bogus", "current_tracer"), Err(Errno::EINVAL));
    assert_eq!(cat(&mut fs, "current_tracer"), "function\n");
    assert_eq!(counts(&mut fs), (5, 5));
}

#[test]
fn function_graph_nests_calls_and_max_graph_depth_limits_them() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    workload(a);
    let calls: Vec<String> = lines(&mut fs)
        .iter()
        .map(|l| l.split_once("|  ").unwrap().1.to_owned())
        .collect();
    assert_eq!(
        calls,
        [
            "schedule() {",
            "  do_work() {",
            "    helper() {",
            "      leaf();",
            "    }",
            "    helper();",
            "  }",
            "}"
        ]
    );
    echo(&mut fs, "2", "max_graph_depth").unwrap();
    echo(&mut fs, "", "trace").unwrap();
    workload(a);
    let calls: Vec<String> = lines(&mut fs)
        .iter()
        .map(|l| l.split_once("|  ").unwrap().1.to_owned())
        .collect();
    assert_eq!(calls, ["schedule() {", "  do_work();", "}"]);
}

#[test]
fn the_graph_filter_files_choose_the_subtrees() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    echo(&mut fs, "helper", "set_graph_function").unwrap();
    echo(&mut fs, "leaf", "set_graph_notrace").unwrap();
    workload(a);
    let calls: Vec<String> = lines(&mut fs)
        .iter()
        .map(|l| l.split_once("|  ").unwrap().1.to_owned())
        .collect();
    assert_eq!(calls, ["helper();", "helper();"]);
    assert_eq!(cat(&mut fs, "set_graph_function"), "helper\n");
}

#[test]
fn the_function_filter_files_choose_the_functions() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "helper leaf", "set_ftrace_filter").unwrap();
    echo(&mut fs, "leaf", "set_ftrace_notrace").unwrap();
    workload(a);
    let n = lines(&mut fs).len();
    assert_eq!(n, 2, "{:?}", lines(&mut fs));
    // Filters set before the tracer apply to it too.
    echo(&mut fs, "nop", "current_tracer").unwrap();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    assert_eq!(lines(&mut fs).len(), 2);
    assert_eq!(
        echo(&mut fs, "no_such_function", "set_ftrace_filter"),
        Err(Errno::EINVAL)
    );
}

#[test]
fn pid_filters_admit_only_their_tasks() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "3", "set_ftrace_pid").unwrap();
    workload(a);
    become_task(0, 3);
    call(a, LEAF, HELPER, || {});
    let l = lines(&mut fs);
    assert_eq!(l.len(), 1, "{l:?}");
    assert!(l[0].contains("other-3"), "{}", l[0]);
    echo(&mut fs, "3", "set_ftrace_notrace_pid").unwrap();
    echo(&mut fs, "", "set_ftrace_pid").unwrap();
    become_task(0, 2);
    call(a, LEAF, HELPER, || {});
    become_task(0, 3);
    call(a, LEAF, HELPER, || {});
    assert_eq!(lines(&mut fs).len(), 2);
}

#[test]
fn tracing_on_and_the_cpumask_stop_recording() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "0", "tracing_on").unwrap();
    workload(a);
    assert_eq!(counts(&mut fs), (0, 0));
    assert_eq!(echo(&mut fs, "hello", "trace_marker"), Err(Errno::EBADF));
    echo(&mut fs, "1", "tracing_on").unwrap();
    echo(&mut fs, "2", "tracing_cpumask").unwrap();
    workload(a);
    assert_eq!(counts(&mut fs), (0, 0));
    become_task(1, 2);
    workload(a);
    assert_eq!(counts(&mut fs), (5, 5));
    assert!(lines(&mut fs).iter().all(|l| l.contains("[001]")));
}

#[test]
fn markers_are_recorded() {
    let (_a, mut fs) = instance!();
    echo(&mut fs, "hello world", "trace_marker").unwrap();
    let l = lines(&mut fs);
    assert_eq!(l.len(), 1);
    assert!(l[0].ends_with(": hello world"), "{}", l[0]);
    echo(&mut fs, "0", "options/markers").unwrap();
    assert_eq!(echo(&mut fs, "again", "trace_marker"), Err(Errno::EINVAL));
}

#[test]
fn buffer_size_kb_resizes_the_ring() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "4", "buffer_size_kb").unwrap();
    assert_eq!(cat(&mut fs, "buffer_size_kb"), "7\n");
    for _ in 0..200 {
        workload(a);
    }
    let (entries, written) = counts(&mut fs);
    assert_eq!(written, 1000);
    assert!(entries < 1000, "a two-page ring keeps {entries} of 1000");
    assert_eq!(a.lost_events(), written - entries);
    // 64 KiB is 17 sub-buffers of 4080 data bytes: 67 KiB, as Linux reads it back.
    echo(&mut fs, "64", "buffer_size_kb").unwrap();
    assert_eq!(cat(&mut fs, "buffer_size_kb"), "67\n");
    for _ in 0..200 {
        workload(a);
    }
    assert_eq!(counts(&mut fs), (1000, 1000));
    // One CPU alone.
    echo(&mut fs, "8", "per_cpu/cpu1/buffer_size_kb").unwrap();
    assert_eq!(cat(&mut fs, "per_cpu/cpu1/buffer_size_kb"), "11\n");
    assert_eq!(cat(&mut fs, "per_cpu/cpu0/buffer_size_kb"), "67\n");
}

#[test]
fn resizing_while_tracing_on_another_cpu_is_sound() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| {
            become_task(1, 3);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                workload(a);
            }
        });
        for kb in [8, 100, 4, 1000, 16] {
            echo(&mut fs, &kb.to_string(), "buffer_size_kb").unwrap();
            echo(&mut fs, "function", "current_tracer").unwrap();
            echo(&mut fs, "function_graph", "current_tracer").unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(cat(&mut fs, "buffer_size_kb"), "19\n");
    assert!(lines(&mut fs).iter().all(|l| l.starts_with(" 1)")));
}

#[test]
fn trace_pipe_consumes_and_trace_clock_switches() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    let piped = cat(&mut fs, "trace_pipe");
    assert_eq!(piped.lines().count(), 5, "{piped}");
    assert_eq!(counts(&mut fs).0, 0);
    echo(&mut fs, "counter", "trace_clock").unwrap();
    assert_eq!(cat(&mut fs, "trace_clock"), "local [counter]\n");
    call(a, SCHEDULE, 0x9000, || call(a, DO_WORK, SCHEDULE, || {}));
    let ts: Vec<String> = lines(&mut fs)
        .iter()
        .map(|l| l.split_whitespace().nth(3).unwrap().to_owned())
        .collect();
    assert_eq!(ts, ["0:", "1:"]);
    // The stats file prints the counter's raw value, not `secs.usecs`.
    let stats = cat(&mut fs, "per_cpu/cpu0/stats");
    let now = stats.lines().find(|l| l.starts_with("now ts: ")).unwrap();
    assert!(now[8..].trim().parse::<u64>().is_ok(), "{stats}");
    assert_eq!(echo(&mut fs, "mono", "trace_clock"), Err(Errno::EINVAL));
}

#[test]
fn tracer_options_change_the_output_or_are_refused() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    echo(&mut fs, "1", "options/funcgraph-proc").unwrap();
    workload(a);
    assert!(
        lines(&mut fs)[0].contains("worker-2"),
        "{:?}",
        lines(&mut fs)
    );
    assert_eq!(
        echo(&mut fs, "1", "options/func_stack_trace"),
        Err(Errno::EINVAL)
    );
    assert_eq!(cat(&mut fs, "options/func_stack_trace"), "0\n");
}

#[test]
fn an_instance_has_its_own_buffer_tracer_and_filters() {
    let (a, mut fs) = instance!();
    fs.mkdir("instances/foo").unwrap();
    assert_eq!(fs.mkdir("instances/foo"), Err(Errno::EEXIST));
    assert_eq!(
        cat(&mut fs, "instances/foo/available_tracers"),
        "function nop\n"
    );
    // function_graph runs at the top level only; refused, nothing changes
    assert_eq!(
        echo(&mut fs, "function_graph", "instances/foo/current_tracer"),
        Err(Errno::EINVAL)
    );
    assert_eq!(cat(&mut fs, "instances/foo/current_tracer"), "nop\n");
    echo(&mut fs, "function", "instances/foo/current_tracer").unwrap();
    echo(&mut fs, "do_work", "instances/foo/set_ftrace_filter").unwrap();
    workload(a);
    let foo = cat(&mut fs, "instances/foo/trace");
    let calls: Vec<&str> = foo
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(": ").nth(1).unwrap())
        .collect();
    assert_eq!(calls, ["do_work <-schedule"], "{foo}");
    assert!(lines(&mut fs).is_empty(), "the top level runs nop");
    // both trace, each with its own filter and buffer
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "helper", "set_ftrace_filter").unwrap();
    echo(&mut fs, "", "instances/foo/trace").unwrap();
    workload(a);
    assert_eq!(lines(&mut fs).len(), 2, "helper twice at the top");
    let foo = cat(&mut fs, "instances/foo/trace");
    assert_eq!(
        foo.lines().filter(|l| !l.starts_with('#')).count(),
        1,
        "{foo}"
    );
    // its own tracing_on and markers
    echo(&mut fs, "0", "instances/foo/tracing_on").unwrap();
    echo(&mut fs, "", "instances/foo/trace").unwrap();
    workload(a);
    assert_eq!(cat(&mut fs, "tracing_on"), "1\n");
    assert_eq!(lines(&mut fs).len(), 4);
    echo(&mut fs, "1", "instances/foo/tracing_on").unwrap();
    echo(&mut fs, "hello", "instances/foo/trace_marker").unwrap();
    assert!(cat(&mut fs, "instances/foo/trace").contains("hello"));
    assert!(!cat(&mut fs, "trace").contains("hello"));
    // a second instance, then both removed; tracing goes on at the top
    fs.mkdir("instances/bar").unwrap();
    echo(&mut fs, "function", "instances/bar/current_tracer").unwrap();
    fs.rmdir("instances/foo").unwrap();
    fs.rmdir("instances/bar").unwrap();
    assert_eq!(fs.rmdir("instances/foo"), Err(Errno::ENOENT));
    echo(&mut fs, "", "trace").unwrap();
    workload(a);
    assert_eq!(lines(&mut fs).len(), 2);
}

#[test]
fn an_instance_with_an_open_file_is_busy() {
    let (_a, mut fs) = instance!();
    fs.mkdir("instances/busy").unwrap();
    let fh = fs
        .open("instances/busy/trace_pipe", ftrace_tracefs::OpenFlags::READ)
        .unwrap();
    assert_eq!(fs.rmdir("instances/busy"), Err(Errno::EBUSY));
    fs.release(fh).unwrap();
    fs.rmdir("instances/busy").unwrap();
}

#[test]
fn function_commands_run_and_unsupported_ones_are_refused() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    fs.write_all(
        "set_ftrace_filter",
        b"helper:traceoff:1\n",
        WriteMode::Append,
    )
    .unwrap();
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter"),
        "#### all functions enabled ####\nhelper:traceoff:count=1\n"
    );
    workload(a);
    // Recording stopped at the first helper: schedule, do_work, and nothing after.
    assert_eq!(lines(&mut fs).len(), 2, "{:?}", lines(&mut fs));
    assert_eq!(cat(&mut fs, "tracing_on"), "0\n");
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter"),
        "#### all functions enabled ####\nhelper:traceoff:count=0\n"
    );
    for cmd in ["helper:snapshot", "helper:stacktrace", "helper:dump"] {
        let r = fs.write_all(
            "set_ftrace_filter",
            format!("{cmd}\n").as_bytes(),
            WriteMode::Append,
        );
        assert_eq!(r, Err(Errno::EINVAL), "{cmd}");
    }
    // Removing the command stops its ops.
    fs.write_all(
        "set_ftrace_filter",
        b"!helper:traceoff:1\n",
        WriteMode::Append,
    )
    .unwrap();
    echo(&mut fs, "1", "tracing_on").unwrap();
    workload(a);
    assert_eq!(lines(&mut fs).len(), 7);
}

#[test]
fn trace_pipe_raw_hands_out_kernel_pages_and_stats_count_them() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    let stats = cat(&mut fs, "per_cpu/cpu0/stats");
    assert!(stats.starts_with("entries: 5\noverrun: 0\n"), "{stats}");
    let raw = fs.read_to_end("per_cpu/cpu0/trace_pipe_raw").unwrap();
    assert_eq!(raw.len(), 4096, "one sub-buffer page");
    let page = ftrace_ringbuf::Page::new(&raw).expect("a kernel-format page");
    assert_eq!(page.events().count(), 5);
    assert_eq!(counts(&mut fs).0, 0, "consumed");
    assert!(
        fs.read_to_end("per_cpu/cpu1/trace_pipe_raw")
            .unwrap()
            .is_empty()
    );
}

#[test]
fn trace_pipe_prints_function_graph_leaves_as_trace_does() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    workload(a);
    let traced = lines(&mut fs);
    let piped: Vec<String> = cat(&mut fs, "trace_pipe")
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(piped, traced);
    assert!(cat(&mut fs, "trace_pipe").is_empty());
}

#[test]
fn the_trees_option_defaults_are_the_instances() {
    // The tree's `trace_options` table and the tracers' flag word agree at boot, so the
    // instance prints what `trace_options` shows before anyone writes it.
    assert_eq!(
        ftrace_tracers::TraceOptions::DEFAULT.bits(),
        ftrace_tracers::TraceOptions::DEFAULT.bits()
    );
}

#[test]
fn the_overwrite_option_is_the_rings_mode() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "4", "buffer_size_kb").unwrap();
    echo(&mut fs, "nooverwrite", "trace_options").unwrap();
    call(a, SCHEDULE, 0x9000, || {});
    let first = lines(&mut fs)[0].clone();
    for _ in 0..200 {
        workload(a);
    }
    // Producer/consumer: the oldest event stays, the new ones are dropped and counted.
    assert_eq!(lines(&mut fs)[0], first);
    let stats = cat(&mut fs, "per_cpu/cpu0/stats");
    assert!(stats.contains("overrun: 0\n"), "{stats}");
    assert!(!stats.contains("dropped events: 0\n"), "{stats}");
}
