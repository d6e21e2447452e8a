//! End-to-end: real C and Rust programs, built with every supported instrumentation, traced by
//! the preloaded agent; the trace is checked against the programs' own call counters.
//!
//! Needs gcc, clang and rustc (with `RUSTC_BOOTSTRAP=1` for `-Zpatchable-function-entry`).
//! `cargo xtask test` installs clang; nothing here is skipped when a tool is missing: it fails.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;

use ftrace_agent::config::{ClockKind, Config, TracerKind};
use ftrace_core::EventId;
use ftrace_core::entry::{FtraceGraphEntEntry, FtraceGraphRetEntry, Pod};
use ftrace_user::launch;
use ftrace_user::recording::{Event, Recording};

fn examples() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples")
}

fn scratch() -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ftrace-e2e");
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The instrumentation variants (name, compiler, flags).
const C_BUILDS: &[(&str, &str, &[&str])] = &[
    (
        "gcc-mcount",
        "gcc",
        &[
            "-pg",
            "-mfentry",
            "-mrecord-mcount",
            "-mnop-mcount",
            "-fno-pie",
            "-no-pie",
        ],
    ),
    ("gcc-pfe", "gcc", &["-fpatchable-function-entry=5"]),
    ("clang-pfe", "clang", &["-fpatchable-function-entry=5"]),
    (
        "gcc-pie-mcount",
        "gcc",
        &["-pg", "-mfentry", "-mrecord-mcount"],
    ),
];

/// Builds with no sites (name, compiler, flags): no instrumentation, and gcc's plain `-pg`
/// (`call mcount`, no site list).
const UNTRACEABLE_BUILDS: &[(&str, &str, &[&str])] =
    &[("gcc-plain", "gcc", &[]), ("gcc-pg", "gcc", &["-pg"])];

/// Programs built by this test process (each is built once: other tests may be running it).
static BUILT: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn build_c(src: &str, variant: &str) -> PathBuf {
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let (_, cc, flags) = C_BUILDS
        .iter()
        .chain(UNTRACEABLE_BUILDS)
        .find(|b| b.0 == variant)
        .unwrap();
    let out = scratch().join(format!("{}-{variant}", src.trim_end_matches(".c")));
    if built.contains(&out) {
        return out;
    }
    let st = Command::new(cc)
        .args(["-O2", "-g", "-pthread"])
        .args(*flags)
        .arg("-o")
        .arg(&out)
        .arg(examples().join("c").join(src))
        .arg("-ldl")
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(
        st.status.success(),
        "{cc} failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    built.push(out.clone());
    out
}

fn build_rust(src: &str) -> PathBuf {
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let out = scratch().join(format!("{}-rust", src.trim_end_matches(".rs")));
    if built.contains(&out) {
        return out;
    }
    let st = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["-O", "-Zpatchable-function-entry=5", "-o"])
        .arg(&out)
        .arg(examples().join("rust").join(src))
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "rustc failed: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    built.push(out.clone());
    out
}

struct Run {
    out: Output,
    rec: Recording,
}

fn run_traced(exe: &Path, args: &[&str], cfg: impl FnOnce(&mut Config)) -> Run {
    let dir = scratch().join(format!(
        "rec-{}-{}",
        exe.file_name().unwrap().to_string_lossy(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let mut c = Config::new(&dir, TracerKind::Function);
    c.buffer_kb = 32 * 1024;
    c.overwrite = false;
    cfg(&mut c);
    let agent = launch::find_agent().expect("agent shared object");
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    // (-pg programs write gmon.out into their working directory.)
    let out = launch::traced_command(&agent, &c, exe.to_str().unwrap(), &args)
        .current_dir(scratch())
        .output()
        .unwrap();
    let rec = Recording::read(&dir).unwrap_or_else(|e| {
        panic!(
            "{e}\nstdout: {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    std::fs::remove_dir_all(&dir).ok();
    Run { out, rec }
}

/// The program's own `calls <name> <n>` lines.
fn own_counts(out: &Output) -> BTreeMap<String, u64> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            (it.next()? == "calls").then_some(())?;
            Some((it.next()?.to_string(), it.next()?.parse().ok()?))
        })
        .collect()
}

fn assert_result_ok(out: &Output) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("result ok"),
        "status {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Events of `kind` per function name (the short name: last path component for Rust).
fn traced_counts(rec: &Recording, kind: EventId, prefix: &str) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for e in rec.merged() {
        if e.id() != Some(kind) {
            continue;
        }
        if let Some(name) = rec.event_symbol(e) {
            if let Some(short) = name.strip_prefix(prefix) {
                *m.entry(short.to_string()).or_insert(0) += 1;
            }
        }
    }
    m
}

fn check_counts(run: &Run, kind: EventId, prefix: &str) {
    assert_result_ok(&run.out);
    assert_eq!(run.rec.lost(), 0, "events were lost");
    let own = own_counts(&run.out);
    assert!(own.len() >= 4, "{own:?}");
    let traced = traced_counts(&run.rec, kind, prefix);
    for (name, n) in &own {
        assert_eq!(
            traced.get(name).copied().unwrap_or(0),
            *n,
            "calls of {name}: traced vs counted by the program"
        );
    }
}

/// Every exit matches the innermost open entry of its thread, at the right depth.
fn check_graph_pairs(rec: &Recording) {
    let mut per_tid: BTreeMap<u32, Vec<&Event>> = BTreeMap::new();
    for evs in rec.per_cpu.values() {
        for e in evs {
            per_tid.entry(e.tid).or_default().push(e);
        }
    }
    let mut pairs = 0u64;
    for (tid, mut evs) in per_tid {
        evs.sort_by_key(|e| e.seq);
        let mut stack: Vec<(u64, u64)> = Vec::new();
        for e in evs {
            match e.id() {
                Some(EventId::FuncgraphEntry) => {
                    let g = FtraceGraphEntEntry::read_from(&e.data).unwrap();
                    let depth = g.depth;
                    assert_eq!(depth as usize, stack.len(), "tid {tid}: entry depth");
                    stack.push((g.func, e.ts));
                }
                Some(EventId::FuncgraphExit) => {
                    let r = FtraceGraphRetEntry::read_from(&e.data).unwrap();
                    let (func, ts) = stack
                        .pop()
                        .unwrap_or_else(|| panic!("tid {tid}: exit without entry"));
                    assert_eq!(r.func, func, "tid {tid}: exit of another function");
                    assert_eq!(r.depth as usize, stack.len(), "tid {tid}: exit depth");
                    assert_eq!(r.calltime, ts, "tid {tid}: calltime is the entry's time");
                    assert!(r.rettime >= r.calltime);
                    pairs += 1;
                }
                other => panic!("unexpected event {other:?} in a function_graph trace"),
            }
        }
    }
    assert!(pairs > 0);
}

fn graph(c: &mut Config) {
    c.tracer = TracerKind::FunctionGraph;
}

#[test]
fn c_function_every_site_form() {
    for (variant, _, _) in C_BUILDS {
        let exe = build_c("calls.c", variant);
        let run = run_traced(&exe, &["3", "200"], |_| {});
        check_counts(&run, EventId::Function, "");
        let threads = run.rec.processes[0].threads.len();
        assert_eq!(threads, 4, "{variant}: main + 3 workers have buffers");
    }
}

#[test]
fn c_function_graph_every_site_form() {
    for (variant, _, _) in C_BUILDS {
        let exe = build_c("calls.c", variant);
        let run = run_traced(&exe, &["3", "200"], graph);
        check_counts(&run, EventId::FuncgraphEntry, "");
        check_counts(&run, EventId::FuncgraphExit, "");
        check_graph_pairs(&run.rec);
    }
}

#[test]
fn rust_function_and_function_graph() {
    let exe = build_rust("calls.rs");
    let run = run_traced(&exe, &["3", "200"], |_| {});
    check_counts(&run, EventId::Function, "calls::");
    let run = run_traced(&exe, &["3", "200"], graph);
    check_counts(&run, EventId::FuncgraphEntry, "calls::");
    check_counts(&run, EventId::FuncgraphExit, "calls::");
    check_graph_pairs(&run.rec);
}

/// The agent keeps names mangled until a glob reads them: `-F 'calls::f*'` still selects by
/// the demangled Rust names (`_ZN5calls3fib17h…E` is `calls::fib`).
#[test]
fn rust_filter_globs_match_demangled_names() {
    let exe = build_rust("calls.rs");
    let run = run_traced(&exe, &["3", "200"], |c| c.filter = vec!["calls::f*".into()]);
    assert_result_ok(&run.out);
    let own = own_counts(&run.out);
    let traced = traced_counts(&run.rec, EventId::Function, "calls::");
    for (name, n) in &own {
        let want = if name.starts_with('f') { *n } else { 0 };
        assert_eq!(
            traced.get(name).copied().unwrap_or(0),
            want,
            "calls of {name} under -F 'calls::f*'"
        );
    }
    assert!(traced.get("fib").is_some_and(|&n| n > 0), "{traced:?}");
}

#[test]
fn clocks_and_cpus() {
    let exe = build_c("calls.c", "clang-pfe");
    for clock in [ClockKind::Local, ClockKind::Mono, ClockKind::X86Tsc] {
        let before = ftrace_agent::clock::mono_ns();
        let run = run_traced(&exe, &["2", "50"], |c| c.clock = clock);
        let after = ftrace_agent::clock::mono_ns();
        check_counts(&run, EventId::Function, "");
        let nr = run.rec.nr_cpus;
        let evs = run.rec.merged();
        assert!(evs.iter().all(|e| e.cpu < nr), "cpu ids below {nr}");
        if clock != ClockKind::X86Tsc {
            // Nanoseconds of CLOCK_MONOTONIC: within the run, however long a loaded machine
            // made it (`local` converts the TSC from pairs the tool takes during the run).
            let (first, last) = (evs.first().unwrap().ts, evs.last().unwrap().ts);
            assert!(
                before <= first && last <= after,
                "{clock:?}: events {first}..{last} outside the run {before}..{after}"
            );
        }
    }
}

#[test]
fn filters_select_sites() {
    let exe = build_c("calls.c", "gcc-mcount");
    let run = run_traced(&exe, &["2", "20"], |c| {
        c.filter = vec!["f*".into(), "sum?".into()];
        c.notrace = vec!["fadd".into()];
    });
    assert_result_ok(&run.out);
    let t = traced_counts(&run.rec, EventId::Function, "");
    let own = own_counts(&run.out);
    assert_eq!(t.get("fib"), own.get("fib"));
    assert_eq!(t.get("sum6"), own.get("sum6"));
    assert_eq!(t.get("fadd"), None);
    assert_eq!(t.get("leaf"), None);
    // -G: only fib and what it calls; --max-depth 2: fib at depth 0 and 1 only.
    let run = run_traced(&exe, &["2", "20"], |c| {
        graph(c);
        c.graph_functions = vec!["fib".into()];
        c.max_depth = 2;
    });
    assert_result_ok(&run.out);
    let t = traced_counts(&run.rec, EventId::FuncgraphEntry, "");
    let iters = 2 * 20;
    assert_eq!(
        t.get("fib"),
        Some(&(3 * iters)),
        "fib(10) and its two children"
    );
    assert_eq!(t.get("sum6"), None);
    assert_eq!(t.get("worker"), None);
    check_graph_pairs(&run.rec);
}

#[test]
fn overwrite_mode_keeps_newest_and_counts_the_rest() {
    let exe = build_c("calls.c", "clang-pfe");
    let run = run_traced(&exe, &["1", "2000"], |c| {
        c.buffer_kb = 64;
        c.overwrite = true;
    });
    assert_result_ok(&run.out);
    let own: u64 = own_counts(&run.out).values().sum();
    let worker = run.rec.processes[0]
        .threads
        .iter()
        .max_by_key(|t| t.overrun)
        .unwrap()
        .clone();
    assert_eq!(worker.entries, 64 * 1024 / 32);
    let recorded: u64 = run.rec.processes[0]
        .threads
        .iter()
        .map(|t| t.entries + t.overrun)
        .sum();
    // Every call is either in a buffer or counted as overwritten (main's own calls included).
    assert_eq!(recorded, own + 1, "main itself is traced too");
}

#[test]
fn full_save_paths_align_a_misaligned_stack() {
    // calls.c's `pair` calls `leaf` with rsp 8 off 16 (gcc -O2 knows leaf needs no alignment).
    // A filter, a graph filter and the non-TSC clocks take the trampolines' full-save paths,
    // which save vector registers with aligned stores: they must align the stack themselves.
    let exe = build_c("calls.c", "gcc-pfe");
    let run = run_traced(&exe, &["2", "50"], |c| {
        c.filter = vec!["pair".into(), "leaf".into()]
    });
    assert_result_ok(&run.out);
    let t = traced_counts(&run.rec, EventId::Function, "");
    let own = own_counts(&run.out);
    assert_eq!(
        (t.get("pair"), t.get("leaf")),
        (own.get("pair"), own.get("leaf"))
    );
    for clock in [ClockKind::Mono, ClockKind::Local] {
        let run = run_traced(&exe, &["2", "50"], |c| {
            graph(c);
            c.clock = clock;
        });
        check_counts(&run, EventId::FuncgraphEntry, "");
        check_counts(&run, EventId::FuncgraphExit, "");
        check_graph_pairs(&run.rec);
    }
    let run = run_traced(&exe, &["2", "50"], |c| {
        graph(c);
        c.graph_functions = vec!["pair".into()];
    });
    assert_result_ok(&run.out);
    let t = traced_counts(&run.rec, EventId::FuncgraphEntry, "");
    let own = own_counts(&run.out);
    assert_eq!(
        (t.get("pair"), t.get("leaf").copied()),
        (own.get("pair"), own.get("pair").map(|n| 2 * n))
    );
    check_graph_pairs(&run.rec);
}

#[test]
fn toggle_all_sites_1000_times_under_load() {
    // clang: single-instruction sites (breakpoint protocol); gcc pfe: five NOPs (stop-the-world).
    // function_graph too: its sites jump to per-site thunks, and a toggle may land while a
    // thread is inside a traced body that will return through the return trampoline.
    let runs = ["clang-pfe", "gcc-pfe", "gcc-mcount"]
        .map(|v| (v, TracerKind::Function))
        .into_iter()
        .chain(["clang-pfe", "gcc-pfe"].map(|v| (v, TracerKind::FunctionGraph)));
    for (variant, tracer) in runs {
        let exe = build_c("calls.c", variant);
        let run = run_traced(&exe, &["2", "0", "toggle", "1000"], |c| {
            c.tracer = tracer;
            c.overwrite = true;
            c.buffer_kb = 256;
        });
        assert_result_ok(&run.out);
        let stdout = String::from_utf8_lossy(&run.out.stdout);
        let line = stdout.lines().find(|l| l.starts_with("toggled")).unwrap();
        let changed: u64 = line.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(changed >= 2000 * 5, "{variant} {tracer:?}: {line}");
        assert!(
            run.rec.merged().len() > 100,
            "{variant} {tracer:?}: events were recorded while on"
        );
    }
}

#[test]
fn toggling_while_threads_block_every_signal() {
    // A thread with SIGTRAP blocked that reaches a breakpoint of a batch in flight is killed
    // by the kernel (a blocked forced signal takes its default action), as dash was around
    // its forks under ftracetest: the agent keeps SIGTRAP out of every mask the program sets.
    // clang: single-instruction sites, patched through breakpoints; gcc pfe: five NOPs,
    // patched while every other thread is parked by the stop signal, kept out of the masks too.
    let runs = [
        ("clang-pfe", TracerKind::Function),
        ("clang-pfe", TracerKind::FunctionGraph),
        ("gcc-pfe", TracerKind::Function),
    ];
    for (variant, tracer) in runs {
        let exe = build_c("calls.c", variant);
        let run = run_traced(&exe, &["2", "0", "toggle", "300", "masked"], |c| {
            c.tracer = tracer;
            c.overwrite = true;
            c.buffer_kb = 256;
        });
        assert_result_ok(&run.out);
        assert!(
            run.rec.merged().len() > 100,
            "{variant} {tracer:?}: events were recorded while on"
        );
    }
}

#[test]
fn fork_exec_exit_and_signals() {
    let exe = build_c("lifecycle.c", "clang-pfe");
    for mode in ["fork", "exec", "_exit", "signal", "kill", "handler"] {
        let run = run_traced(&exe, &[mode], graph);
        let stdout = String::from_utf8_lossy(&run.out.stdout).into_owned();
        let expect_status = match mode {
            "signal" => None, // killed by SIGSEGV's default action
            "kill" => None,   // killed by SIGKILL
            _ => Some(0),
        };
        assert_eq!(run.out.status.code(), expect_status, "{mode}: {stdout}");
        // Every `work` call the program reported before dying is in the trace.
        let reported: u64 = stdout
            .lines()
            .filter_map(|l| l.strip_prefix("work calls "))
            .map(|n| n.trim().parse::<u64>().unwrap())
            .sum();
        let t = traced_counts(&run.rec, EventId::FuncgraphEntry, "");
        assert_eq!(
            t.get("work").copied().unwrap_or(0),
            reported,
            "{mode}: {stdout}"
        );
        assert!(reported > 0, "{mode}");
        let pids: std::collections::BTreeSet<u32> =
            run.rec.processes.iter().map(|p| p.pid).collect();
        match mode {
            "fork" => assert_eq!(pids.len(), 2, "parent and child recorded apart"),
            "exec" => assert_eq!(run.rec.processes.len(), 2, "before and after exec"),
            _ => {}
        }
    }
}

#[test]
fn sigtrap_chaining_longjmp_and_dlopen() {
    let exe = build_c("lifecycle.c", "gcc-mcount");
    // The program's own SIGTRAP handler still sees its own int3s (through the agent's, which
    // stays in place), and the program reads back its own handler.
    let run = run_traced(&exe, &["sigtrap"], graph);
    let stdout = String::from_utf8_lossy(&run.out.stdout).into_owned();
    assert!(run.out.status.success(), "{stdout}");
    assert!(stdout.contains("handler read back ok"), "{stdout}");
    assert!(stdout.contains("traps 3"), "{stdout}");
    let t = traced_counts(&run.rec, EventId::FuncgraphEntry, "");
    assert_eq!(
        t.get("work"),
        Some(&103),
        "100 calls before, 3 between the traps"
    );
    // longjmp out of hooked frames: the skipped frames are dropped, tracing goes on.
    let run = run_traced(&exe, &["longjmp"], graph);
    assert!(run.out.status.success());
    let t = traced_counts(&run.rec, EventId::FuncgraphEntry, "");
    assert_eq!(t.get("work"), Some(&(100 + 60 + 10)));
    assert_eq!(t.get("jump_out"), Some(&60));
    // A library loaded later: its sites are found and patched at dlopen.
    let plugin = scratch().join("libplugin.so");
    build_plugin(&plugin);
    for tracer in [TracerKind::Function, TracerKind::FunctionGraph] {
        let run = run_traced(&exe, &["dlopen", plugin.to_str().unwrap()], |c| {
            c.tracer = tracer
        });
        let stdout = String::from_utf8_lossy(&run.out.stdout).into_owned();
        assert!(run.out.status.success(), "{stdout}");
        assert!(stdout.contains("plugin_work calls 25"), "{stdout}");
        let kind = match tracer {
            TracerKind::Function => EventId::Function,
            TracerKind::FunctionGraph => EventId::FuncgraphEntry,
        };
        let t = traced_counts(&run.rec, kind, "");
        assert_eq!(t.get("plugin_work"), Some(&25), "{tracer:?}");
    }
}

#[test]
fn record_writes_kernel_pages_for_report() {
    let exe = build_c("calls.c", "clang-pfe");
    let dir = scratch().join("record-capture");
    let opts = ftrace_user::record::RecordOptions {
        tracer: TracerKind::FunctionGraph,
        output: dir.clone(),
        buffer_kb: 8192,
        overwrite: false,
        ..Default::default()
    };
    let recorded =
        ftrace_user::record::record(&opts, exe.to_str().unwrap(), &["2".into(), "20".into()])
            .unwrap();
    assert!(recorded.status.success());
    assert!(
        recorded.summary.starts_with("ftrace: ")
            && recorded.summary.contains(" events recorded, 0 lost, ")
            && recorded
                .summary
                .contains(&format!("bytes written to {}", dir.display())),
        "{}",
        recorded.summary
    );
    // A streamed recording gets its pages when first read.
    assert!(!dir.join("per_cpu").exists());
    ftrace_user::capture::ensure_capture(&dir).unwrap();
    let rec = Recording::read(&dir).unwrap();
    let mut pages_events = 0usize;
    for cpu in 0..rec.nr_cpus {
        let raw = std::fs::read(dir.join(format!("per_cpu/cpu{cpu}/trace_pipe_raw"))).unwrap();
        let mut last = 0;
        for chunk in raw.chunks(4096) {
            let p = ftrace_ringbuf::Page::new(chunk).unwrap();
            for e in p.events() {
                let e = e.unwrap();
                assert!(e.ts >= last, "cpu {cpu}: time goes forward");
                last = e.ts;
                pages_events += 1;
            }
        }
    }
    assert_eq!(pages_events, rec.merged().len());
    let ks = std::fs::read_to_string(dir.join("kallsyms")).unwrap();
    assert!(ks.lines().any(|l| l.ends_with(" t fib")), "fib in kallsyms");
    assert_eq!(
        std::fs::read_to_string(dir.join("tracer")).unwrap(),
        "function_graph\n"
    );
    let cmdlines = std::fs::read_to_string(dir.join("saved_cmdlines")).unwrap();
    assert!(cmdlines.lines().count() >= 3);
    // Recording again over a recording replaces it.
    let recorded =
        ftrace_user::record::record(&opts, exe.to_str().unwrap(), &["1".into(), "1".into()])
            .unwrap();
    assert!(recorded.status.success());
    // A size the ring cannot hold exactly is refused before anything runs.
    let odd = ftrace_user::record::RecordOptions {
        buffer_kb: 1408,
        ..opts.clone()
    };
    let e = ftrace_user::record::record(&odd, exe.to_str().unwrap(), &[]).unwrap_err();
    assert!(
        e.contains("--buffer-size 1408") && e.contains("1024 or 2048"),
        "{e}"
    );
    assert_eq!(Recording::read(&dir).unwrap().processes.len(), 1);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn ftrace_cli_live_record_report() {
    let exe = build_c("calls.c", "gcc-mcount");
    let ftrace = env!("CARGO_BIN_EXE_ftrace");
    // live, function_graph: the kernel's call graph, and the program's own output untouched.
    let out = Command::new(ftrace)
        .args(["live", "-t", "function_graph", "--"])
        .arg(&exe)
        .args(["1", "1"])
        .current_dir(scratch())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("result ok"));
    assert!(text.contains("# tracer: function_graph"), "{text}");
    assert!(text.contains("|  worker() {"), "{text}");
    assert!(text.contains("leaf();"), "{text}");
    let leaf_lines = text.lines().filter(|l| l.ends_with("leaf();")).count();
    assert_eq!(
        leaf_lines,
        89 + 2,
        "fib(10) calls leaf 89 times and pair(0) twice, each a leaf line"
    );
    // record + report, function tracer with a filter.
    let dir = scratch().join("cli-record");
    let st = Command::new(ftrace)
        .args(["record", "-t", "function", "-F", "sum6", "-o"])
        .arg(&dir)
        .arg("--")
        .arg(&exe)
        .args(["2", "3"])
        .current_dir(scratch())
        .output()
        .unwrap();
    assert!(st.status.success());
    // The end of the recording, on stderr: what was recorded, lost, written, where.
    let said = String::from_utf8_lossy(&st.stderr);
    let line = said
        .lines()
        .find(|l| l.starts_with("ftrace: "))
        .unwrap_or("");
    assert!(
        line.starts_with("ftrace: 6 events recorded, 0 lost, ")
            && line.ends_with(&format!("written to {}", dir.display())),
        "{said}"
    );
    // A reader that went away (`| head`) ends the report quietly: stdout is a pipe whose
    // read end is closed before the report starts, so its first write fails.
    let mut fds = [0; 2];
    // SAFETY: a fresh pipe; both ends are ours.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: closing our read end; the write end goes to the child (and is closed with it).
    unsafe { libc::close(fds[0]) };
    // SAFETY: `fds[1]` is an open descriptor nothing else owns.
    let write_end =
        unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fds[1]) };
    let closed = Command::new(ftrace)
        .args(["report", "-i"])
        .arg(&dir)
        .stdout(write_end)
        .output()
        .unwrap();
    assert!(
        closed.status.success() && closed.stderr.is_empty(),
        "{:?}: {}",
        closed.status,
        String::from_utf8_lossy(&closed.stderr)
    );
    let rep = Command::new(ftrace)
        .args(["report", "-i"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&rep.stdout);
    assert!(
        rep.status.success(),
        "{}",
        String::from_utf8_lossy(&rep.stderr)
    );
    assert!(text.contains("# tracer: function"), "{text}");
    assert_eq!(
        text.lines()
            .filter(|l| l.ends_with(": sum6 <-worker"))
            .count(),
        6,
        "{text}"
    );
    assert!(
        text.contains("entries-in-buffer/entries-written: 6/6"),
        "{text}"
    );
    std::fs::remove_dir_all(&dir).ok();
    // The program's exit status comes back (128 + signal when killed).
    let life = build_c("lifecycle.c", "gcc-mcount");
    let st = Command::new(ftrace)
        .args(["live", "-t", "function", "--"])
        .arg(&life)
        .arg("signal")
        .current_dir(scratch())
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(128 + libc::SIGSEGV));
    assert!(String::from_utf8_lossy(&st.stdout).contains(": work <-main"));
}

/// `ftrace ARGS...` in the scratch directory: (exit code, stdout, stderr).
fn ftrace_cli(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .args(args)
        .current_dir(scratch())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A refusal: exit status 1, nothing from the program, one line on stderr.
fn assert_refused((code, stdout, stderr): &(Option<i32>, String, String), says: &[&str]) {
    assert_eq!(*code, Some(1), "{stdout}{stderr}");
    assert!(stdout.is_empty(), "the program must not have run: {stdout}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(stderr.starts_with("ftrace: "), "{stderr}");
    for s in says {
        assert!(stderr.contains(s), "{s:?} not in: {stderr}");
    }
}

#[test]
fn site_check_finds_every_build_s_sites_by_name() {
    // Read from the files before they run: non-PIE, PIE (relocated entries) and each form.
    use ftrace_user::sitecheck::{Libraries, scan_program};
    for (variant, _, _) in C_BUILDS {
        let exe = build_c("calls.c", variant);
        let sites = scan_program(exe.to_str().unwrap(), Libraries::All).unwrap();
        assert!(sites.libraries >= 1, "{variant}: libc at least");
        // Sites in the executable: its libraries are not read unless globs need them.
        let own = scan_program(
            exe.to_str().unwrap(),
            Libraries::UnlessTheExecutableHasSites,
        )
        .unwrap();
        assert_eq!(own.libraries, 0, "{variant}");
        assert_eq!(own.objects[0].names, sites.objects[0].names, "{variant}");
        let names = &sites.objects[0].names;
        for f in ["fib", "leaf", "worker", "sum6", "fadd"] {
            assert!(names.iter().any(|n| n == f), "{variant}: {f} in {names:?}");
        }
        assert!(
            !names.iter().any(|n| n.starts_with("0x")),
            "{variant}: {names:?}"
        );
    }
    for (variant, _, _) in UNTRACEABLE_BUILDS {
        let exe = build_c("calls.c", variant);
        // No sites in the executable: its libraries are read (they might have some).
        let sites = scan_program(
            exe.to_str().unwrap(),
            Libraries::UnlessTheExecutableHasSites,
        )
        .unwrap();
        assert!(sites.libraries >= 1, "{variant}");
        assert_eq!(sites.site_count(), 0, "{variant}");
        assert_eq!(sites.calls_mcount, *variant == "gcc-pg", "{variant}");
    }
}

#[test]
fn filters_matching_no_site_and_untraceable_programs_are_refused() {
    let exe = build_c("calls.c", "gcc-mcount");
    let exe = exe.to_str().unwrap();
    let dir = scratch().join("refused-rec");
    let _ = std::fs::remove_dir_all(&dir);
    let out = dir.to_str().unwrap();
    // A glob that matches no function: the mount's set_ftrace_filter would say EINVAL.
    let r = ftrace_cli(&["record", "-o", out, "-F", "nosuch*", "--", exe, "1", "1"]);
    assert_refused(
        &r,
        &[
            "ftrace: -F 'nosuch*': set_ftrace_filter: Invalid argument: no function of the ",
            &format!("call sites of {exe}"),
            "--force runs it anyway",
        ],
    );
    assert!(!dir.exists(), "nothing written before the refusal");
    // A malformed glob (an unclosed class), for each filter option, in `live` too.
    for (opt, file) in [
        ("-F", "set_ftrace_filter"),
        ("-N", "set_ftrace_notrace"),
        ("-G", "set_graph_function"),
    ] {
        let r = ftrace_cli(&["live", opt, "fib[", "--", exe, "1", "1"]);
        assert_refused(
            &r,
            &[
                &format!("{opt} 'fib[': {file}: Invalid argument"),
                "a '[' without its ']' matches a '['",
            ],
        );
    }
    // One good glob does not hide a bad one.
    let r = ftrace_cli(&[
        "live", "-F", "fib", "-F", "leaf", "-F", "[^x]eaf", "--", exe,
    ]);
    assert_refused(&r, &["-F '[^x]eaf'"]);
    // --force: a warning before the program starts, then the run as asked (nothing traced).
    let (code, stdout, stderr) = ftrace_cli(&[
        "live", "-t", "function", "--force", "-F", "nosuch", "--", exe, "1", "1",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("result ok"), "{stdout}");
    assert!(
        stderr.starts_with("ftrace: warning: -F 'nosuch': set_ftrace_filter: Invalid argument"),
        "{stderr}"
    );
    assert!(
        stderr.contains("ftrace: 0 events recorded, 0 lost"),
        "{stderr}"
    );
    // No call sites: how to build it; plain -pg: not supported yet.
    let plain = build_c("calls.c", "gcc-plain");
    let r = ftrace_cli(&["record", "-o", out, "--", plain.to_str().unwrap(), "1", "1"]);
    assert_refused(
        &r,
        &[
            "has no call sites",
            "-fpatchable-function-entry=5",
            "-pg -mfentry -mrecord-mcount",
        ],
    );
    // Plain -pg is traced through mcount (tests/mcount.rs); a filter has no sites to select.
    let pg = build_c("calls.c", "gcc-pg");
    let r = ftrace_cli(&[
        "record",
        "-o",
        out,
        "-F",
        "fib",
        "--",
        pg.to_str().unwrap(),
        "1",
        "1",
    ]);
    assert_refused(&r, &["-F 'fib'", "is a plain -pg build"]);
    assert!(!dir.exists());
    // A program found on PATH is checked too.
    let r = ftrace_cli(&["record", "-o", out, "--", "true"]);
    assert_refused(&r, &["/true has no call sites"]);
}

#[test]
fn sites_in_needed_libraries_count_and_dlopen_needs_force() {
    let lib_dir = scratch().join("needed-lib");
    std::fs::create_dir_all(&lib_dir).unwrap();
    build_plugin(&lib_dir.join("libplugin.so"));
    // The program itself has no sites; its library (DT_NEEDED, DT_RUNPATH $ORIGIN) has.
    let exe = lib_dir.join("uses_plugin");
    let st = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/uses_plugin.c"))
        .arg("-L")
        .arg(&lib_dir)
        .args(["-lplugin", "-Wl,--enable-new-dtags,-rpath,$ORIGIN"])
        .status()
        .unwrap();
    assert!(st.success());
    let exe = exe.to_str().unwrap();
    let (code, stdout, stderr) =
        ftrace_cli(&["live", "-t", "function", "-F", "plugin_*", "--", exe]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("plugin_work calls 3"), "{stdout}");
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains(": plugin_work [libplugin.so] <-main"))
            .count(),
        3,
        "{stdout}"
    );
    let r = ftrace_cli(&["live", "-F", "nosuch", "--", exe]);
    assert_refused(
        &r,
        &[
            "-F 'nosuch'",
            "the 0 call sites of ",
            " and 2 of libplugin.so",
            "dlopen",
        ],
    );
    // A function only a library loaded later with dlopen has: refused unless forced.
    let life = build_c("lifecycle.c", "gcc-mcount");
    let life = life.to_str().unwrap();
    let plugin = lib_dir.join("libplugin.so");
    let plugin = plugin.to_str().unwrap();
    let r = ftrace_cli(&[
        "live",
        "-t",
        "function",
        "-F",
        "plugin_work",
        "--",
        life,
        "dlopen",
        plugin,
    ]);
    assert_refused(
        &r,
        &["-F 'plugin_work'", "one loaded later by dlopen is not"],
    );
    let (code, stdout, stderr) = ftrace_cli(&[
        "live",
        "-t",
        "function",
        "--force",
        "-F",
        "plugin_work",
        "--",
        life,
        "dlopen",
        plugin,
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.starts_with("ftrace: warning: -F 'plugin_work'"),
        "{stderr}"
    );
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.contains(": plugin_work [libplugin.so] <-"))
            .count(),
        25,
        "{stdout}"
    );
}

/// Builds `examples/c/plugin.c` into the shared library `out`, with call sites (clang's
/// `-fpatchable-function-entry=5`).
fn build_plugin(out: &Path) {
    let st = Command::new("clang")
        .args([
            "-O2",
            "-shared",
            "-fPIC",
            "-fpatchable-function-entry=5",
            "-o",
        ])
        .arg(out)
        .arg(examples().join("c/plugin.c"))
        .status()
        .unwrap();
    assert!(st.success(), "clang: building {}", out.display());
}

/// The executable's function names are in its recording whatever its build (a plain `-pg`
/// one has no sites), a library without sites is listed in `objects` and named from its file
/// by the reader: the report names both.
#[test]
fn the_executable_is_named_in_the_recording_and_libraries_from_their_files() {
    let exe = build_c("calls.c", "gcc-pg");
    let dir = scratch().join("names-rec");
    let _ = std::fs::remove_dir_all(&dir);
    let (code, _, stderr) = ftrace_cli(&[
        "record",
        "-t",
        "function",
        "-o",
        dir.to_str().unwrap(),
        "--",
        exe.to_str().unwrap(),
        "1",
        "1",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let image = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.join("meta").is_file())
        .expect("an image directory");
    let symbols = std::fs::read_to_string(image.join("symbols")).unwrap();
    assert!(symbols.contains("\tleaf\n"), "{symbols}");
    let objects = std::fs::read_to_string(image.join("objects")).unwrap();
    let listed = ftrace_agent::symbol_files::parse_objects(&objects);
    let exe_name = exe.file_name().unwrap().to_str().unwrap();
    assert!(listed.iter().all(|o| o.module != exe_name), "{objects}");
    assert!(
        listed.iter().any(|o| o.module.starts_with("libc.so")),
        "{objects}"
    );
    // The reader joins them: libc's functions are named (main's caller is libc's).
    let (text, unnamed) = ftrace_agent::symbol_files::image_symbols(&image);
    assert!(unnamed.is_empty(), "{unnamed:?}");
    assert!(
        text.contains("libc.so.6\t__libc_start_main"),
        "libc unnamed"
    );
    let (code, report, stderr) = ftrace_cli(&["report", "-i", dir.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(report.contains("leaf <-"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
