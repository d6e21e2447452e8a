//! Trace events in the `TraceArray` instance, over the host platform: tracepoints the test
//! declares (`tracepoint!`) are registered with the instance, served under `events/`, and
//! while enabled recorded into its ring buffer, interleaved with the function tracer's
//! entries, filtered and triggered as Linux does.
//!
//! Each test declares tracepoints of its own: a tracepoint belongs to one instance.

mod common;

use common::sim::{DO_WORK, HELPER, SCHEDULE, Sim, become_task, call};
use ftrace_core::tracepoint;
use ftrace_tracefs::array::{ArrayHost, TraceArray};
use ftrace_tracefs::{Errno, Tracefs, WriteMode};

type Fs = Tracefs<ArrayHost<Sim, 2>>;

fn cat(fs: &mut Fs, path: &str) -> String {
    String::from_utf8(fs.read_to_end(path).unwrap()).unwrap()
}

fn echo(fs: &mut Fs, data: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{data}\n").as_bytes(), WriteMode::Truncate)
}

/// What follows the context of each line of `trace` (the header's `#` lines dropped).
fn bodies(fs: &mut Fs) -> Vec<String> {
    cat(fs, "trace")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once(": ").unwrap().1.to_owned())
        .collect()
}

tracepoint! {
    /// `demo:demo_value`.
    pub fn trace_demo_value(value: u64 => "u64", cpu: u32 => "unsigned int");
    record DemoValue;
    static DEMO_VALUE = ("demo", "demo_value", 500,
        "\"value=%llu cpu=%u\", REC->value, REC->cpu");
}

tracepoint! {
    /// `demo:demo_pair`.
    pub fn trace_demo_pair(a: i32 => "int", b: i32 => "int");
    record DemoPair;
    static DEMO_PAIR = ("demo", "demo_pair", 501, "\"a=%d b=%d\", REC->a, REC->b");
}

#[test]
fn declared_events_record_filter_and_trigger_among_function_entries() {
    static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
    become_task(0, 2);
    A.register_tracepoint(&DEMO_VALUE).unwrap();
    A.register_tracepoint(&DEMO_PAIR).unwrap();
    assert_eq!(A.register_tracepoint(&DEMO_PAIR), Err(Errno::EEXIST));
    let mut fs = A.tracefs().unwrap();

    // The files of a declared event.
    let avail = cat(&mut fs, "available_events");
    assert!(avail.contains("demo:demo_value\n") && avail.contains("demo:demo_pair\n"));
    assert_eq!(cat(&mut fs, "events/demo/demo_value/id"), "500\n");
    let format = cat(&mut fs, "events/demo/demo_value/format");
    assert!(
        format.starts_with("name: demo_value\nID: 500\nformat:\n"),
        "{format}"
    );
    assert!(format.contains("\tfield:unsigned int cpu;\toffset:16;\tsize:4;\tsigned:0;\n"));
    assert_eq!(cat(&mut fs, "events/demo/demo_value/enable"), "0\n");

    echo(&mut fs, "function", "current_tracer").unwrap();
    // Off: the call site does nothing.
    call(&A, SCHEDULE, 0x9000, || trace_demo_value(1, 0));
    assert!(!DEMO_VALUE.is_enabled());

    echo(&mut fs, "1", "events/demo/demo_value/enable").unwrap();
    assert!(DEMO_VALUE.is_enabled() && !DEMO_PAIR.is_enabled());
    assert_eq!(cat(&mut fs, "set_event"), "demo:demo_value\n");
    call(&A, DO_WORK, SCHEDULE + 0x10, || {
        trace_demo_value(5, 0);
        trace_demo_pair(5, -1);
        call(&A, HELPER, DO_WORK + 0x10, || trace_demo_value(50, 0));
    });

    // A filter that does not parse is refused and changes nothing.
    assert_eq!(
        echo(&mut fs, "nosuch > 1", "events/demo/demo_value/filter"),
        Err(Errno::EINVAL)
    );
    trace_demo_value(51, 0);
    echo(&mut fs, "value > 10", "events/demo/demo_value/filter").unwrap();
    for v in [6, 60] {
        trace_demo_value(v, 1);
    }

    echo(
        &mut fs,
        "traceoff if value > 100",
        "events/demo/demo_value/trigger",
    )
    .unwrap();
    for v in [70, 700, 7000] {
        trace_demo_value(v, 2);
    }
    call(&A, HELPER, DO_WORK + 0x20, || {});
    assert_eq!(cat(&mut fs, "tracing_on"), "0\n");
    assert_eq!(
        cat(&mut fs, "events/demo/demo_value/trigger"),
        "traceoff:unlimited if value > 100\n"
    );

    // The pair event was never enabled; the filter dropped 6; traceoff fired on 700, which
    // is itself recorded (a post trigger), and nothing after it is, function entries neither.
    assert_eq!(
        bodies(&mut fs),
        [
            "schedule <-0x00009000",
            "do_work <-schedule",
            "demo_value: value=5 cpu=0",
            "helper <-do_work",
            "demo_value: value=50 cpu=0",
            "demo_value: value=51 cpu=0",
            "demo_value: value=60 cpu=1",
            "demo_value: value=70 cpu=2",
            "demo_value: value=700 cpu=2",
        ]
    );
    // The event's line carries the writer's context, as a function entry's does.
    let trace = cat(&mut fs, "trace");
    let line = trace.lines().find(|l| l.contains("value=5 ")).unwrap();
    assert!(
        line.starts_with("          worker-2       [000] ....."),
        "{line}"
    );

    // set_event and the subsystem's and the top `enable` files reach the tracepoints.
    echo(&mut fs, "demo:demo_pair", "set_event").unwrap();
    assert!(DEMO_PAIR.is_enabled());
    // The traceoff trigger keeps demo_value soft-enabled (`0*`), so its call sites stay on.
    assert_eq!(cat(&mut fs, "events/demo/demo_value/enable"), "0*\n");
    assert!(DEMO_VALUE.is_enabled());
    echo(
        &mut fs,
        "!traceoff if value > 100",
        "events/demo/demo_value/trigger",
    )
    .unwrap();
    assert!(!DEMO_VALUE.is_enabled());
    echo(&mut fs, "1", "events/demo/enable").unwrap();
    assert!(DEMO_VALUE.is_enabled() && DEMO_PAIR.is_enabled());
    assert_eq!(cat(&mut fs, "events/demo/enable"), "1\n");
    echo(&mut fs, "0", "events/enable").unwrap();
    assert!(!DEMO_VALUE.is_enabled() && !DEMO_PAIR.is_enabled());

    // An instance has the events too (`instances_record_events_of_their_own`).
    fs.mkdir("instances/x").unwrap();
    echo(&mut fs, "1", "instances/x/events/demo/demo_pair/enable").unwrap();
    assert!(DEMO_PAIR.is_enabled());
    echo(&mut fs, "0", "instances/x/events/demo/demo_pair/enable").unwrap();
    assert!(!DEMO_PAIR.is_enabled());
    assert_eq!(
        cat(&mut fs, "instances/x/events/demo/demo_pair/enable"),
        "0\n"
    );
    assert!(!DEMO_PAIR.is_enabled());
}

tracepoint! {
    /// `demo2:tick`.
    pub fn trace_tick(n: u32 => "unsigned int");
    record Tick;
    static TICK = ("demo2", "tick", 510, "\"n=%u\", REC->n");
}

tracepoint! {
    /// `demo2:work`.
    pub fn trace_work(n: u32 => "unsigned int");
    record Work;
    static WORK = ("demo2", "work", 511, "\"n=%u\", REC->n");
}

#[test]
fn enable_event_trigger_soft_enables_another_event() {
    static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
    become_task(1, 3);
    A.register_tracepoint(&TICK).unwrap();
    A.register_tracepoint(&WORK).unwrap();
    let mut fs = A.tracefs().unwrap();

    echo(&mut fs, "1", "events/demo2/tick/enable").unwrap();
    echo(
        &mut fs,
        "enable_event:demo2:work:1 if n == 2",
        "events/demo2/tick/trigger",
    )
    .unwrap();
    // The trigger holds `work` armed but soft-disabled: its records are discarded.
    assert_eq!(cat(&mut fs, "events/demo2/work/enable"), "0*\n");
    assert!(WORK.is_enabled());
    for n in 1..=3 {
        trace_work(n);
        trace_tick(n);
    }
    trace_work(4);
    assert_eq!(cat(&mut fs, "events/demo2/work/enable"), "1*\n");
    assert_eq!(
        cat(&mut fs, "events/demo2/tick/trigger"),
        "enable_event:demo2:work:count=0 if n == 2\n"
    );
    assert_eq!(
        bodies(&mut fs),
        [
            "tick: n=1",
            "tick: n=2",
            "work: n=3",
            "tick: n=3",
            "work: n=4"
        ]
    );
    // Another owner cannot take a tracepoint this instance registered.
    static B: TraceArray<Sim, 2> = TraceArray::new(Sim);
    assert_eq!(B.register_tracepoint(&TICK), Err(Errno::EBUSY));
}

tracepoint! {
    /// `demo3:sample`.
    pub fn trace_sample(bucket: u32 => "unsigned int", len: u64 => "u64");
    record Sample;
    static SAMPLE = ("demo3", "sample", 520,
        "\"bucket=%u len=%llu\", REC->bucket, REC->len");
}

#[test]
fn hist_trigger_aggregates_recorded_events_into_the_hist_file() {
    static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
    become_task(0, 2);
    A.register_tracepoint(&SAMPLE).unwrap();
    let mut fs = A.tracefs().unwrap();
    assert_eq!(cat(&mut fs, "events/demo3/sample/hist"), "");

    echo(&mut fs, "1", "events/demo3/sample/enable").unwrap();
    echo(
        &mut fs,
        "hist:keys=bucket:vals=len if len > 1",
        "events/demo3/sample/trigger",
    )
    .unwrap();
    for (bucket, len) in [(1, 10), (2, 5), (1, 30), (2, 1), (3, 7)] {
        trace_sample(bucket, len);
    }
    // Another trigger added later keeps the table.
    fs.write_all(
        "events/demo3/sample/trigger",
        b"traceoff if len > 1000\n",
        WriteMode::Append,
    )
    .unwrap();
    trace_sample(3, 100);

    let hist = cat(&mut fs, "events/demo3/sample/hist");
    let trigger = cat(&mut fs, "events/demo3/sample/trigger");
    let info = trigger
        .lines()
        .find(|l| l.starts_with("hist:"))
        .expect("the hist trigger is listed");
    assert!(
        hist.starts_with(&format!(
            "# event histogram\n#\n# trigger info: {info}\n#\n\n"
        )),
        "{hist}"
    );
    // Sorted by hitcount (the default), ties by the kernel's order; `len > 1` left out 1.
    let rows: Vec<&str> = hist.lines().filter(|l| l.starts_with('{')).collect();
    assert_eq!(rows.len(), 3, "{hist}");
    assert!(rows.contains(&"{ bucket:          1 } hitcount:          2  len:         40"));
    assert!(rows.contains(&"{ bucket:          2 } hitcount:          1  len:          5"));
    assert!(rows.contains(&"{ bucket:          3 } hitcount:          2  len:        107"));
    assert!(
        hist.ends_with("Totals:\n    Hits: 5\n    Entries: 3\n    Dropped: 0\n"),
        "{hist}"
    );
    // Every sample was also recorded in the buffer.
    assert_eq!(bodies(&mut fs).len(), 6);

    // `:pause` stops the aggregation, `:cont` resumes it, `:clear` empties the table.
    let edit = |fs: &mut Fs, cmd: &str| {
        let text = format!("hist:keys=bucket:vals=len:{cmd} if len > 1\n");
        fs.write_all(
            "events/demo3/sample/trigger",
            text.as_bytes(),
            WriteMode::Append,
        )
    };
    let hits = |fs: &mut Fs| {
        let h = cat(fs, "events/demo3/sample/hist");
        h.lines()
            .find_map(|l| l.strip_prefix("    Hits: "))
            .unwrap()
            .to_owned()
    };
    edit(&mut fs, "pause").unwrap();
    trace_sample(1, 10);
    assert_eq!(hits(&mut fs), "5");
    edit(&mut fs, "cont").unwrap();
    trace_sample(1, 10);
    assert_eq!(hits(&mut fs), "6");
    edit(&mut fs, "clear").unwrap();
    assert_eq!(hits(&mut fs), "0");
    trace_sample(4, 10);
    let hist = cat(&mut fs, "events/demo3/sample/hist");
    assert!(
        hist.contains("{ bucket:          4 } hitcount:          1  len:         10\n"),
        "{hist}"
    );
    assert!(hist.ends_with("Entries: 1\n    Dropped: 0\n"), "{hist}");
}

tracepoint! {
    /// `inst:inst_value`.
    pub fn trace_inst_value(value: u64 => "u64");
    record InstValue;
    static INST_VALUE = ("inst", "inst_value", 520, "\"value=%llu\", REC->value");
}

/// What follows the context of each line of an instance's `trace`.
fn bodies_at(fs: &mut Fs, trace: &str) -> Vec<String> {
    cat(fs, trace)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_once(": ").unwrap().1.to_owned())
        .collect()
}

#[test]
fn instances_record_events_of_their_own() {
    static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
    become_task(0, 2);
    A.register_tracepoint(&INST_VALUE).unwrap();
    let mut fs = A.tracefs().unwrap();
    fs.mkdir("instances/foo").unwrap();
    fs.mkdir("instances/bar").unwrap();
    let foo = "instances/foo/events/inst/inst_value";
    assert_eq!(cat(&mut fs, &format!("{foo}/enable")), "0\n");

    // Enabled in foo only: foo records, the top level and bar do not.
    echo(&mut fs, "1", &format!("{foo}/enable")).unwrap();
    assert!(INST_VALUE.is_enabled());
    assert_eq!(cat(&mut fs, "events/inst/inst_value/enable"), "0\n");
    assert_eq!(cat(&mut fs, "instances/foo/set_event"), "inst:inst_value\n");
    trace_inst_value(1);
    assert_eq!(
        bodies_at(&mut fs, "instances/foo/trace"),
        ["inst_value: value=1"]
    );
    assert!(bodies(&mut fs).is_empty());
    assert!(bodies_at(&mut fs, "instances/bar/trace").is_empty());

    // Each instance filters on its own; the top level records everything it is given.
    echo(&mut fs, "value > 10", &format!("{foo}/filter")).unwrap();
    echo(&mut fs, "1", "events/inst/inst_value/enable").unwrap();
    echo(&mut fs, "1", "instances/bar/events/inst/enable").unwrap();
    trace_inst_value(5);
    trace_inst_value(50);
    assert_eq!(
        bodies_at(&mut fs, "instances/foo/trace"),
        ["inst_value: value=1", "inst_value: value=50"]
    );
    assert_eq!(
        bodies(&mut fs),
        ["inst_value: value=5", "inst_value: value=50"]
    );
    assert_eq!(
        bodies_at(&mut fs, "instances/bar/trace"),
        ["inst_value: value=5", "inst_value: value=50"]
    );

    // A trigger in bar acts on bar: traceoff stops bar's buffer only.
    echo(
        &mut fs,
        "traceoff if value == 7",
        "instances/bar/events/inst/inst_value/trigger",
    )
    .unwrap();
    trace_inst_value(7);
    trace_inst_value(8);
    assert_eq!(cat(&mut fs, "instances/bar/tracing_on"), "0\n");
    assert_eq!(cat(&mut fs, "tracing_on"), "1\n");
    assert_eq!(bodies_at(&mut fs, "instances/bar/trace").len(), 3);
    assert_eq!(bodies(&mut fs).len(), 4);

    // The tracepoint stays connected while anyone has the event on.
    echo(&mut fs, "0", "events/inst/inst_value/enable").unwrap();
    echo(&mut fs, "0", &format!("{foo}/enable")).unwrap();
    assert!(INST_VALUE.is_enabled(), "bar still has it");
    // rmdir takes bar's slot away: nobody wants the event, the sites go off.
    fs.rmdir("instances/bar").unwrap();
    assert!(!INST_VALUE.is_enabled());
    trace_inst_value(9);
    assert_eq!(bodies(&mut fs).len(), 4);
    // foo still works after bar is gone.
    echo(&mut fs, "1", &format!("{foo}/enable")).unwrap();
    trace_inst_value(99);
    assert_eq!(
        bodies_at(&mut fs, "instances/foo/trace")
            .last()
            .map(String::as_str),
        Some("inst_value: value=99")
    );
    echo(&mut fs, "0", &format!("{foo}/enable")).unwrap();
    fs.rmdir("instances/foo").unwrap();
    assert!(!INST_VALUE.is_enabled());
}

tracepoint! {
    /// `demo5:by_task`.
    pub fn trace_by_task(n: u32 => "unsigned int");
    record ByTask;
    static BY_TASK = ("demo5", "by_task", 530, "\"n=%u\", REC->n");
}

#[test]
fn set_event_pid_records_only_the_listed_tasks_events() {
    static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
    A.register_tracepoint(&BY_TASK).unwrap();
    let mut fs = A.tracefs().unwrap();
    echo(&mut fs, "1", "events/demo5/by_task/enable").unwrap();
    assert_eq!(cat(&mut fs, "set_event_pid"), "");
    assert_eq!(cat(&mut fs, "set_event_notrace_pid"), "");
    let fire = |pid: i32, n: u32| {
        become_task(0, pid);
        trace_by_task(n);
    };
    // set_event_pid: the listed tasks only (an appended pid joins the list).
    echo(&mut fs, "7", "set_event_pid").unwrap();
    fs.write_all("set_event_pid", b"9\n", WriteMode::Append)
        .unwrap();
    assert_eq!(cat(&mut fs, "set_event_pid"), "7\n9\n");
    fire(7, 1);
    fire(8, 2);
    fire(9, 3);
    // set_event_notrace_pid: every task but those listed; a task in both lists is left out.
    echo(&mut fs, "", "set_event_pid").unwrap();
    echo(&mut fs, "8", "set_event_notrace_pid").unwrap();
    fire(7, 4);
    fire(8, 5);
    echo(&mut fs, "7", "set_event_pid").unwrap();
    fire(7, 6);
    fire(8, 7);
    fire(9, 8);
    // A refused write changes nothing (appended: a truncating open clears the list first,
    // as on Linux).
    assert_eq!(
        fs.write_all("set_event_pid", b"9 x\n", WriteMode::Append),
        Err(Errno::EINVAL)
    );
    assert_eq!(cat(&mut fs, "set_event_pid"), "7\n");
    // Cleared: every task again. set_ftrace_pid does not filter events.
    echo(&mut fs, "", "set_event_pid").unwrap();
    echo(&mut fs, "", "set_event_notrace_pid").unwrap();
    echo(&mut fs, "7", "set_ftrace_pid").unwrap();
    fire(8, 9);
    let pids: Vec<String> = cat(&mut fs, "trace")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| {
            let (task, rest) = l.split_once(" [").unwrap();
            let body = rest.split_once(": ").unwrap().1;
            format!("{} {body}", task.trim())
        })
        .collect();
    assert_eq!(
        pids,
        [
            "<...>-7 by_task: n=1",
            "<...>-9 by_task: n=3",
            "<...>-7 by_task: n=4",
            "<...>-7 by_task: n=6",
            "<...>-8 by_task: n=9"
        ]
    );
}

tracepoint! {
    /// `demo4:shot`.
    pub fn trace_shot(n: u32 => "unsigned int");
    record Shot;
    static SHOT = ("demo4", "shot", 530, "\"n=%u\", REC->n");
}

/// An event's `snapshot` trigger swaps the main and the snapshot buffer from the tracepoint,
/// as the kernel's `update_max_tr` does; adding it allocates the snapshot, and a trigger
/// whose snapshot was freed says so in the trace and stops tracing, as the kernel's does.
/// The writes ftracetest's `trigger-snapshot.tc` makes are answered as the kernel answers.
#[test]
fn snapshot_trigger_swaps_the_buffers_from_the_tracepoint() {
    static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
    become_task(0, 2);
    A.register_tracepoint(&SHOT).unwrap();
    let mut fs = A.tracefs().unwrap();
    let trig = "events/demo4/shot/trigger";
    assert_eq!(
        cat(&mut fs, trig),
        "# Available triggers:\n# traceon traceoff snapshot stacktrace enable_event disable_event enable_hist disable_hist hist\n"
    );
    echo(&mut fs, "1", "events/demo4/shot/enable").unwrap();
    assert!(cat(&mut fs, "snapshot").contains("* Snapshot is freed *"));
    echo(&mut fs, "snapshot:1 if n == 3", trig).unwrap();
    assert!(cat(&mut fs, "snapshot").contains("* Snapshot is allocated *"));
    for n in 1..=5 {
        trace_shot(n);
    }
    // A filtered trigger runs after its record: 3 went into the buffer that became the
    // snapshot, 4 and 5 into the one that took its place.
    assert_eq!(
        bodies_at(&mut fs, "snapshot"),
        ["shot: n=1", "shot: n=2", "shot: n=3"]
    );
    assert_eq!(bodies_at(&mut fs, "trace"), ["shot: n=4", "shot: n=5"]);
    assert_eq!(cat(&mut fs, trig), "snapshot:count=0 if n == 3\n");
    trace_shot(3);
    assert_eq!(
        bodies_at(&mut fs, "trace"),
        ["shot: n=4", "shot: n=5", "shot: n=3"],
        "a spent trigger swaps nothing"
    );

    // trigger-snapshot.tc's semantic errors.
    echo(&mut fs, "!snapshot", trig).unwrap();
    assert_eq!(echo(&mut fs, "snapshot+1", trig), Err(Errno::EINVAL));
    echo(&mut fs, "snapshot", trig).unwrap();
    assert_eq!(echo(&mut fs, "snapshot", trig), Err(Errno::EEXIST));

    // Freed under an armed trigger: `tracing_snapshot_instance_cond`'s two lines, and
    // tracing stops (the trigger runs before the record, which is then not written).
    echo(&mut fs, "0", "snapshot").unwrap();
    trace_shot(7);
    assert_eq!(cat(&mut fs, "tracing_on"), "0\n");
    let lines = bodies_at(&mut fs, "trace");
    let tail: Vec<&str> = lines[lines.len() - 2..]
        .iter()
        .map(|l| l.rsplit_once(": ").unwrap().1)
        .collect();
    assert_eq!(
        tail,
        [
            "*** SNAPSHOT NOT ALLOCATED ***",
            "*** stopping trace here!   ***"
        ]
    );
    assert!(!lines.iter().any(|l| l == "shot: n=7"));
}

tracepoint! {
    /// `demo5:shot`.
    pub fn trace_shot5(n: u32 => "unsigned int");
    record Shot5;
    static SHOT5 = ("demo5", "shot", 531, "\"n=%u\", REC->n");
}

/// An unlimited `snapshot` trigger firing on one CPU while another CPU traces functions and
/// the tree reads the snapshot: every record ends in one of the two buffers (swapping back
/// and forth moves them, never drops them), nothing is lost, and a trigger that found the
/// snapshot being read says so in the trace instead of waiting.
#[test]
fn snapshot_triggers_while_another_cpu_traces_and_the_tree_reads_are_sound() {
    use std::sync::atomic::{AtomicBool, Ordering};
    static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
    become_task(0, 2);
    A.register_tracepoint(&SHOT5).unwrap();
    let mut fs = A.tracefs().unwrap();
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "2000", "buffer_size_kb").unwrap();
    echo(&mut fs, "1", "events/demo5/shot/enable").unwrap();
    echo(&mut fs, "snapshot", "events/demo5/shot/trigger").unwrap();
    const SHOTS: u32 = 300;
    const CALLS: usize = 2000;
    // `shot` fired SHOTS times on CPU 0 (and, with `calls`, CALLS traced calls on CPU 1),
    // each on a thread of its own, while `tree` runs again and again; then the lines of both
    // buffers.
    let run = |fs: &mut Fs, calls: bool, tree: &dyn Fn(&mut Fs)| {
        let done = AtomicBool::new(false);
        std::thread::scope(|s| {
            if calls {
                s.spawn(|| {
                    become_task(1, 3);
                    for _ in 0..CALLS {
                        call(&A, HELPER, DO_WORK, || {});
                    }
                });
            }
            s.spawn(|| {
                become_task(0, 4);
                for n in 0..SHOTS {
                    trace_shot5(n);
                }
                done.store(true, Ordering::Relaxed);
            });
            while !done.load(Ordering::Relaxed) {
                tree(fs);
            }
        });
        let mut all = bodies_at(fs, "trace");
        all.extend(bodies_at(fs, "snapshot"));
        all
    };
    let all = run(&mut fs, true, &|fs| drop(cat(fs, "snapshot")));
    let count = |f: &dyn Fn(&str) -> bool| all.iter().filter(|l| f(l)).count();
    let busy = count(&|l| l.contains("*** SNAPSHOT BUSY"));
    let ignored = count(&|l| l.contains("*** snapshot is being ignored"));
    assert_eq!(busy, ignored, "{all:?}");
    assert_eq!(count(&|l| l.starts_with("shot: n=")), SHOTS as usize);
    assert_eq!(count(&|l| l == "helper <-do_work"), CALLS);
    assert_eq!(all.len(), SHOTS as usize + CALLS + 2 * busy, "{all:?}");
    assert_eq!(A.lost_events(), 0);

    // Again with the tree emptying the snapshot (a grace period after each swap) and
    // rewriting `tracing_cpumask` (both take the snapshot's lock): records go, none is torn.
    let all = run(&mut fs, false, &|fs| {
        echo(fs, "2", "snapshot").unwrap();
        echo(fs, "3", "tracing_cpumask").unwrap();
    });
    assert!(
        all.iter().all(|l| l.starts_with("shot: n=")
            || l == "helper <-do_work"
            || l.contains("*** SNAPSHOT BUSY")
            || l.contains("*** snapshot is being ignored")),
        "{all:?}"
    );
    assert_eq!(A.lost_events(), 0);
}
