//! The `snapshot` file of a `TraceArray` (Linux's `CONFIG_TRACER_SNAPSHOT`): `echo 1` swaps
//! the main ring with the snapshot ring, `echo 0` frees it, any other number empties it; the
//! help an empty snapshot prints is the kernel's text (`print_snapshot_help`, Linux 6.12).

mod common;

use common::sim::{Sim, become_task, workload};
use ftrace_tracefs::array::{ArrayHost, TraceArray};
use ftrace_tracefs::{Errno, Tracefs, WriteMode};

type Fs = Tracefs<ArrayHost<Sim, 2>>;

fn cat(fs: &mut Fs, path: &str) -> String {
    String::from_utf8(fs.read_to_end(path).unwrap()).unwrap()
}

fn echo(fs: &mut Fs, data: &str, path: &str) -> Result<(), Errno> {
    fs.write_all(path, format!("{data}\n").as_bytes(), WriteMode::Truncate)
}

/// The event lines of a `trace`-like file (the header's `#` lines dropped).
fn events(fs: &mut Fs, path: &str) -> Vec<String> {
    cat(fs, path)
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(str::to_owned)
        .collect()
}

macro_rules! instance {
    () => {{
        static A: TraceArray<Sim, 2> = TraceArray::new(Sim);
        become_task(0, 2);
        (&A, A.tracefs().unwrap())
    }};
}

// The kernel's text (kernel/trace/trace.c, `print_snapshot_help` and the two help functions
// it calls, Linux 6.12 without CONFIG_RING_BUFFER_ALLOW_SWAP), copied here by hand.
const MAIN_HELP: &str = "# Snapshot commands:
# echo 0 > snapshot : Clears and frees snapshot buffer
# echo 1 > snapshot : Allocates snapshot buffer, if not already allocated.
#                      Takes a snapshot of the main buffer.
# echo 2 > snapshot : Clears snapshot buffer (but does not allocate or free)
#                      (Doesn't have to be '2' works with any number that
#                       is not a '0' or '1')
";
const PERCPU_HELP: &str = "# Snapshot commands:
# echo 0 > snapshot : Invalid for per_cpu snapshot file.
# echo 1 > snapshot : Not supported with this kernel.
#                     Must use main snapshot file to allocate.
# echo 2 > snapshot : Clears this cpu's snapshot buffer (but does not allocate)
#                      (Doesn't have to be '2' works with any number that
#                       is not a '0' or '1')
";

fn freed(tracer: &str, help: &str) -> String {
    format!("# tracer: {tracer}\n#\n#\n# * Snapshot is freed *\n#\n{help}")
}

fn allocated(tracer: &str, help: &str) -> String {
    format!("# tracer: {tracer}\n#\n#\n# * Snapshot is allocated *\n#\n{help}")
}

#[test]
fn an_empty_snapshot_prints_the_kernels_help_byte_for_byte() {
    let (_a, mut fs) = instance!();
    assert_eq!(cat(&mut fs, "snapshot"), freed("nop", MAIN_HELP));
    assert_eq!(
        cat(&mut fs, "per_cpu/cpu1/snapshot"),
        freed("nop", PERCPU_HELP)
    );
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "1", "snapshot").unwrap();
    assert_eq!(cat(&mut fs, "snapshot"), allocated("function", MAIN_HELP));
    assert_eq!(
        cat(&mut fs, "per_cpu/cpu0/snapshot"),
        allocated("function", PERCPU_HELP)
    );
}

#[test]
fn taking_a_snapshot_keeps_what_trace_held_and_tracing_goes_on() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    let before = cat(&mut fs, "trace");
    assert_eq!(events(&mut fs, "trace").len(), 5);
    echo(&mut fs, "1", "snapshot").unwrap();
    // The snapshot is the old main buffer: printed as `trace` printed it, header and all.
    assert_eq!(cat(&mut fs, "snapshot"), before);
    assert!(events(&mut fs, "trace").is_empty());
    become_task(1, 3);
    workload(a);
    let now = events(&mut fs, "trace");
    assert_eq!(now.len(), 5);
    assert!(now.iter().all(|l| l.contains("[001]")), "{now:?}");
    assert_eq!(
        cat(&mut fs, "snapshot"),
        before,
        "tracing went on elsewhere"
    );
    // Per CPU: the snapshot's CPU 0 holds the five events, its CPU 1 nothing (the help).
    assert_eq!(events(&mut fs, "per_cpu/cpu0/snapshot").len(), 5);
    assert_eq!(
        cat(&mut fs, "per_cpu/cpu1/snapshot"),
        allocated("function", PERCPU_HELP)
    );
    // A second swap puts the previous snapshot back in the main buffer, as the kernel's
    // `update_max_tr` swap does.
    let second = cat(&mut fs, "trace");
    echo(&mut fs, "1", "snapshot").unwrap();
    assert_eq!(cat(&mut fs, "snapshot"), second);
    assert_eq!(cat(&mut fs, "trace"), before);
}

#[test]
fn clearing_empties_and_zero_frees() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    echo(&mut fs, "1", "snapshot").unwrap();
    become_task(1, 3);
    workload(a);
    echo(&mut fs, "1", "snapshot").unwrap();
    // Snapshot: CPU 1's five events; main: CPU 0's five (swapped back).
    assert_eq!(events(&mut fs, "snapshot").len(), 5);
    // Clearing another CPU's part leaves CPU 1's events.
    echo(&mut fs, "2", "per_cpu/cpu0/snapshot").unwrap();
    assert_eq!(events(&mut fs, "snapshot").len(), 5);
    echo(&mut fs, "2", "per_cpu/cpu1/snapshot").unwrap();
    assert_eq!(cat(&mut fs, "snapshot"), allocated("function", MAIN_HELP));
    // Any number but 0 and 1 clears without freeing; the main buffer is untouched.
    workload(a);
    echo(&mut fs, "1", "snapshot").unwrap();
    assert_eq!(events(&mut fs, "snapshot").len(), 10);
    echo(&mut fs, "17", "snapshot").unwrap();
    assert_eq!(cat(&mut fs, "snapshot"), allocated("function", MAIN_HELP));
    echo(&mut fs, "0", "snapshot").unwrap();
    assert_eq!(cat(&mut fs, "snapshot"), freed("function", MAIN_HELP));
    // Clearing a freed snapshot allocates nothing.
    echo(&mut fs, "2", "snapshot").unwrap();
    assert_eq!(cat(&mut fs, "snapshot"), freed("function", MAIN_HELP));
}

#[test]
fn bad_writes_are_refused_and_change_nothing() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    echo(&mut fs, "1", "snapshot").unwrap();
    workload(a);
    let (snap, trace) = (cat(&mut fs, "snapshot"), cat(&mut fs, "trace"));
    for (data, path) in [
        ("abc", "snapshot"),
        ("-1", "snapshot"),
        ("1x", "snapshot"),
        ("", "snapshot"),
        // Per CPU: freeing is invalid, and this kernel has no per-CPU swap.
        ("0", "per_cpu/cpu0/snapshot"),
        ("1", "per_cpu/cpu0/snapshot"),
        ("zz", "per_cpu/cpu1/snapshot"),
    ] {
        assert_eq!(
            echo(&mut fs, data, path),
            Err(Errno::EINVAL),
            "{data} > {path}"
        );
        assert_eq!(cat(&mut fs, "snapshot"), snap, "{data} > {path}");
        assert_eq!(cat(&mut fs, "trace"), trace, "{data} > {path}");
    }
}

/// The kernel's ftracetest 00basic/snapshot.tc: a snapshot keeps `tracing_on` as it was.
#[test]
fn ftracetest_snapshot_tc() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "0", "tracing_on").unwrap();
    echo(&mut fs, "1", "snapshot").unwrap();
    assert!(cat(&mut fs, "snapshot").contains("Snapshot is allocated"));
    assert_eq!(cat(&mut fs, "tracing_on"), "0\n");
    // And the ring now recording records nothing while off.
    workload(a);
    assert!(events(&mut fs, "trace").is_empty());
    echo(&mut fs, "1", "tracing_on").unwrap();
    echo(&mut fs, "1", "snapshot").unwrap();
    assert_eq!(cat(&mut fs, "tracing_on"), "1\n");
    workload(a);
    assert_eq!(events(&mut fs, "trace").len(), 5);
}

/// The kernel's ftracetest 00basic/snapshot1.tc: a snapshot taken with every CPU masked off
/// leaves the buffers usable once the mask is restored.
#[test]
fn ftracetest_snapshot1_tc() {
    let (_a, mut fs) = instance!();
    let orig = cat(&mut fs, "tracing_cpumask");
    echo(&mut fs, "0", "tracing_cpumask").unwrap();
    echo(&mut fs, "1", "snapshot").unwrap();
    echo(&mut fs, orig.trim(), "tracing_cpumask").unwrap();
    echo(&mut fs, "1", "tracing_on").unwrap();
    echo(&mut fs, "test input 1", "trace_marker").unwrap();
    assert!(cat(&mut fs, "trace").contains("test input 1"));
}

#[test]
fn an_instance_has_its_own_snapshot() {
    let (a, mut fs) = instance!();
    fs.mkdir("instances/foo").unwrap();
    assert_eq!(
        cat(&mut fs, "instances/foo/snapshot"),
        freed("nop", MAIN_HELP)
    );
    echo(&mut fs, "function", "instances/foo/current_tracer").unwrap();
    echo(&mut fs, "function", "current_tracer").unwrap();
    workload(a);
    let foo = cat(&mut fs, "instances/foo/trace");
    echo(&mut fs, "1", "instances/foo/snapshot").unwrap();
    assert_eq!(cat(&mut fs, "instances/foo/snapshot"), foo);
    assert!(events(&mut fs, "instances/foo/trace").is_empty());
    // The top level's buffer and snapshot are its own.
    assert_eq!(events(&mut fs, "trace").len(), 5);
    assert_eq!(cat(&mut fs, "snapshot"), freed("function", MAIN_HELP));
    assert_eq!(
        echo(&mut fs, "1", "instances/foo/per_cpu/cpu0/snapshot"),
        Err(Errno::EINVAL)
    );
}

/// Snapshots taken while another CPU writes function events: every event lands in one of the
/// two rings or is counted as lost, and each ring's text stays well formed.
#[test]
fn snapshots_while_another_cpu_traces_are_sound() {
    let (a, mut fs) = instance!();
    echo(&mut fs, "function", "current_tracer").unwrap();
    echo(&mut fs, "1000", "buffer_size_kb").unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let calls = std::sync::atomic::AtomicU64::new(0);
    let mut seen = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            become_task(1, 3);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                workload(a);
                calls.fetch_add(5, std::sync::atomic::Ordering::Relaxed);
            }
        });
        for _ in 0..20 {
            echo(&mut fs, "1", "snapshot").unwrap();
            // The events the swap took out of the main ring, before the next swap puts this
            // snapshot back.
            echo(&mut fs, "2", "snapshot").unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
    });
    echo(&mut fs, "1", "snapshot").unwrap();
    for path in ["snapshot", "trace"] {
        let l = events(&mut fs, path);
        assert!(
            l.iter().all(|l| l.contains("[001]") && l.contains(" <-")),
            "{path}: {l:?}"
        );
        seen += l.len();
    }
    assert!(seen as u64 <= calls.load(std::sync::atomic::Ordering::Relaxed));
    assert_eq!(a.lost_events(), 0);
}

#[test]
fn the_tree_lists_snapshot_and_readme_describes_it() {
    let (_a, mut fs) = instance!();
    assert!(fs.stat("snapshot").is_ok());
    assert!(fs.stat("per_cpu/cpu1/snapshot").is_ok());
    let readme = cat(&mut fs, "README");
    // Linux 6.12's lines, after the function-graph files' paragraph.
    assert!(readme.contains(
        "  max_graph_depth\t- Trace a limited depth of nested calls (0 is unlimited)\n\n  \
         snapshot\t\t- Like 'trace' but shows the content of the static\n\t\t\t  snapshot \
         buffer. Read the contents for more\n\t\t\t  information\n"
    ));
}
