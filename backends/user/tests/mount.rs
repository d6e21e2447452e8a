//! `ftrace record --mount DIR`: a running multi-threaded program's tracefs, served through FUSE,
//! driven with plain file reads and writes as a shell would (`std::fs`, `sh -c 'echo ... >
//! file'`), and unmounted without a trace when the program exits or the tool is stopped.
//!
//! Needs gcc, `/dev/fuse` and `fusermount3` (`cargo xtask test` installs the `fuse3` package);
//! nothing here is skipped when they are missing: it fails. The traced program runs until its
//! stdin closes, so the test decides when it ends; every wait for the program to produce
//! events is bounded (a failure names what never came), never a timing assertion.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ftrace_core::EventId;
use ftrace_core::entry::{FtraceEntry, Pod, TraceEntry};
use ftrace_ringbuf::Page;

fn scratch(name: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ftrace-mount-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Polls `f` until it answers, for at most a minute (a loaded CI machine is slow, never this
/// slow); the panic names what never happened.
fn wait_for<T>(what: &str, f: impl FnMut() -> Option<T>) -> T {
    wait_up_to(Duration::from_secs(60), what, f)
}

/// [`wait_for`] with its own bound.
fn wait_up_to<T>(bound: Duration, what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < bound, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The mount entries (`/proc/self/mountinfo`) at `dir`: (fs type, source, super options).
fn mounts_at(dir: &Path) -> Vec<(String, String, String)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    info.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            let sep = f.iter().position(|x| *x == "-")?;
            (Path::new(f[4]) == dir).then(|| {
                (
                    f[sep + 1].to_string(),
                    f[sep + 2].to_string(),
                    f.get(sep + 3).unwrap_or(&"").to_string(),
                )
            })
        })
        .collect()
}

/// `sh -c CMD` (the shell's own `>` and `>>`), returning its output. The error checks use
/// coreutils' `/bin/echo`, which prints the errno's text (dash's builtin says "I/O error"
/// whatever the errno).
fn sh(cmd: &str) -> Output {
    Command::new("sh").arg("-c").arg(cmd).output().unwrap()
}

/// `sh -c CMD` that must succeed.
fn sh_ok(cmd: &str) {
    let o = sh(cmd);
    assert!(
        o.status.success(),
        "`{cmd}` failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// A running `ftrace record --mount`.
struct Mounted {
    tool: Child,
    stdin: Option<ChildStdin>,
    /// The tool's stdout and stderr, read as it writes them: `ftrace live` prints the whole
    /// trace when the program ends, more than a pipe holds once a slow machine has let the
    /// program run a while, and a pipe nobody reads would stop the tool from exiting.
    output: Option<[JoinHandle<Vec<u8>>; 2]>,
    mnt: PathBuf,
    rec: PathBuf,
}

/// Reads `pipe` to its end on a thread of its own.
fn drain(mut pipe: impl Read + Send + 'static) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        pipe.read_to_end(&mut bytes).unwrap();
        bytes
    })
}

impl Mounted {
    fn start(name: &str, tracer: &str) -> Mounted {
        Mounted::start_with(name, &["record", "-t", tracer])
    }

    /// `ftrace ARGS --mount DIR -o DIR -- program`.
    fn start_with(name: &str, args: &[&str]) -> Mounted {
        Mounted::start_program(name, args, "mount_target")
    }

    /// `ftrace ARGS --mount DIR -o DIR -- tests/programs/PROGRAM.c`.
    fn start_program(name: &str, args: &[&str], program: &str) -> Mounted {
        let dir = scratch(name);
        let prog = common::build_kernel_style(&dir, program);
        Mounted::start_command(&dir, args, &[prog.as_os_str()])
    }

    /// `ftrace ARGS --mount DIR/tracing -o DIR/rec -- COMMAND...`, run in `dir`.
    fn start_command(dir: &Path, args: &[&str], command: &[&std::ffi::OsStr]) -> Mounted {
        let mnt = dir.join("tracing");
        std::fs::create_dir(&mnt).unwrap();
        let rec = dir.join("rec");
        let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
            // The program's working directory (gcc's -pg runtime writes gmon.out there).
            .current_dir(dir)
            .args(args)
            .arg("--mount")
            .arg(&mnt)
            .arg("-o")
            .arg(&rec)
            .arg("--")
            .args(command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = tool.stdin.take();
        let output = Some([
            drain(tool.stdout.take().unwrap()),
            drain(tool.stderr.take().unwrap()),
        ]);
        let m = Mounted {
            tool,
            stdin,
            output,
            mnt,
            rec,
        };
        wait_for("the tracefs mount", || {
            m.path("available_tracers").exists().then_some(())
        });
        m
    }

    fn path(&self, f: &str) -> PathBuf {
        self.mnt.join(f)
    }

    fn read(&self, f: &str) -> String {
        std::fs::read_to_string(self.path(f)).unwrap_or_else(|e| panic!("reading {f}: {e}"))
    }

    /// `echo TEXT > FILE` through the shell.
    fn echo(&self, text: &str, f: &str) {
        sh_ok(&format!("echo '{text}' > {}", self.path(f).display()));
    }

    /// Ends the program (closes its stdin) and waits for the tool.
    fn finish(mut self) -> (Output, PathBuf, PathBuf) {
        drop(self.stdin.take());
        self.wait_exit()
    }

    /// [`Mounted::finish`], checking that the tool exited successfully (its stderr shown if
    /// not).
    fn finish_ok(self) -> (Output, PathBuf, PathBuf) {
        let (out, mnt, rec) = self.finish();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        (out, mnt, rec)
    }

    /// Waits for the tool to exit (the program still has its stdin).
    fn wait_exit(mut self) -> (Output, PathBuf, PathBuf) {
        let mnt = self.mnt.clone();
        let rec = self.rec.clone();
        // Exiting, the tool unmounts, waits for the program and writes the whole capture (the
        // rings, every object's symbols), in a debug build: on a loaded machine (load 14 on two
        // cores) stop_signal_unmounts_and_stops_the_program once waited here over a minute.
        // A tool that never exits still fails.
        let status = wait_up_to(Duration::from_secs(300), "the tool to exit", || {
            self.tool.try_wait().unwrap()
        });
        // The pipes end once the tool and the program (which shares stdout) have exited.
        let [stdout, stderr] = self.output.take().unwrap().map(|h| h.join().unwrap());
        (
            Output {
                status,
                stdout,
                stderr,
            },
            mnt,
            rec,
        )
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        // A failed assertion: stop the tool (it unmounts) rather than leave it running.
        if let Ok(None) = self.tool.try_wait() {
            // SAFETY: signalling our own child.
            unsafe { libc::kill(self.tool.id() as libc::pid_t, libc::SIGTERM) };
            let _ = self.tool.wait();
        }
    }
}

/// Reads every CPU's `trace_pipe_raw` (without blocking) in reads of `page` bytes: each read
/// is one whole page of that size holding only function events; returns how many.
fn raw_functions(m: &Mounted, nr_cpus: usize, page_size: usize) -> usize {
    let mut n = 0;
    for cpu in 0..nr_cpus {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(m.path(&format!("per_cpu/cpu{cpu}/trace_pipe_raw")))
            .unwrap();
        let mut page = vec![0u8; page_size];
        loop {
            match f.read(&mut page) {
                Ok(0) => break,
                Ok(k) => {
                    assert_eq!(k, page_size);
                    let p = Page::new(&page).unwrap();
                    for e in p.events() {
                        let e = e.unwrap();
                        let h = TraceEntry::read_from(e.payload).unwrap();
                        assert_eq!(h.type_, EventId::Function.as_u16());
                        assert!(FtraceEntry::read_from(e.payload).is_some());
                        n += 1;
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("trace_pipe_raw: {e}"),
            }
        }
    }
    n
}

/// The event lines of a `trace` text (not the `#` header).
fn events(text: &str) -> Vec<&str> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect()
}

/// The thread id of a function-tracer line (`comm-tid [cpu] ...`).
fn tid_of(line: &str) -> &str {
    let task = line.split_whitespace().next().unwrap_or("");
    task.rsplit('-').next().unwrap_or("")
}

#[test]
fn mounted_tracefs_drives_a_live_program() {
    let m = Mounted::start("drive", "function");

    // The mount: fuse.tracefs, the owner's only.
    let mounts = mounts_at(&m.mnt);
    assert_eq!(mounts.len(), 1, "{mounts:?}");
    assert_eq!(mounts[0].0, "fuse.tracefs");
    assert_eq!(mounts[0].1, "tracefs");
    assert!(!mounts[0].2.contains("allow_other"), "{mounts:?}");
    let mode = |p: PathBuf| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(m.mnt.clone()), 0o700);
    assert_eq!(mode(m.path("available_tracers")), 0o400);
    assert_eq!(mode(m.path("current_tracer")), 0o600);
    assert_eq!(mode(m.path("trace_marker")), 0o200);

    assert_eq!(m.read("available_tracers"), "function_graph function nop\n");
    assert_eq!(m.read("current_tracer"), "function\n");
    let funcs: BTreeSet<String> = m
        .read("available_filter_functions")
        .lines()
        .map(String::from)
        .collect();
    for f in ["main", "worker", "tick_alpha", "tick_beta"] {
        assert!(funcs.contains(f), "{f} not in {funcs:?}");
    }

    // set_ftrace_filter, as a shell writes it, read back; only those sites are enabled.
    m.echo("tick_*", "set_ftrace_filter");
    let lines = |s: String| s.lines().map(String::from).collect::<BTreeSet<_>>();
    let want: BTreeSet<String> = ["tick_alpha", "tick_beta"].map(String::from).into();
    assert_eq!(lines(m.read("set_ftrace_filter")), want);
    let enabled: BTreeSet<String> = m
        .read("enabled_functions")
        .lines()
        .map(|l| l.split(" (").next().unwrap().to_string())
        .collect();
    assert_eq!(enabled, want);
    // `>>` appends (O_APPEND reaches the tree), `>` starts afresh (O_TRUNC).
    sh_ok(&format!(
        "echo worker >> {}",
        m.path("set_ftrace_filter").display()
    ));
    assert_eq!(
        lines(m.read("set_ftrace_filter")),
        ["tick_alpha", "tick_beta", "worker"]
            .map(String::from)
            .into()
    );
    m.echo("tick_*", "set_ftrace_filter");
    assert_eq!(lines(m.read("set_ftrace_filter")), want);
    // A name no site has is refused and changes nothing.
    let o = sh(&format!(
        "/bin/echo no_such_function >> {}",
        m.path("set_ftrace_filter").display()
    ));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Invalid argument"));
    assert_eq!(lines(m.read("set_ftrace_filter")), want);

    // The function trace names the program's functions, from both worker threads.
    m.echo("", "trace");
    let text = wait_for("function events of both workers", || {
        let t = m.read("trace");
        let tids: BTreeSet<String> = events(&t)
            .iter()
            .filter(|l| l.ends_with("tick_alpha <-worker"))
            .map(|l| tid_of(l).to_string())
            .collect();
        (tids.len() >= 2 && t.contains("tick_beta <-tick_alpha")).then_some(t)
    });
    assert!(text.starts_with("# tracer: function\n"), "{text}");
    for l in events(&text) {
        assert!(l.trim_start().starts_with("mount_target-"), "{l}");
        assert!(
            l.ends_with("tick_alpha <-worker") || l.ends_with("tick_beta <-tick_alpha"),
            "an event the filter excludes: {l}"
        );
    }

    // per_cpu/cpuN/trace: that CPU's events only.
    for cpu in 0..std::fs::read_dir(m.path("per_cpu")).unwrap().count() {
        let t = m.read(&format!("per_cpu/cpu{cpu}/trace"));
        assert!(t.starts_with("# tracer: function\n"));
        for l in events(&t) {
            assert!(l.contains(&format!("[{cpu:03}]")), "cpu{cpu}: {l}");
        }
    }

    // trace_clock: the agent stamps with the new clock, the buffers start empty.
    m.echo("mono", "trace_clock");
    assert_eq!(m.read("trace_clock"), "local [mono] x86-tsc\n");
    let t = wait_for("events stamped with mono", || {
        let t = m.read("trace");
        t.contains("tick_alpha <-worker").then_some(t)
    });
    // The program stamps CLOCK_MONOTONIC now: its stamps read as our own clock does.
    let now = {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: a valid out-pointer.
        unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
        ts.tv_sec as f64
    };
    for l in events(&t) {
        let stamp: f64 = l
            .split_whitespace()
            .find_map(|f| f.strip_suffix(':')?.parse().ok())
            .unwrap_or_else(|| panic!("no time stamp in {l}"));
        assert!((stamp - now).abs() < 600.0, "{stamp} vs {now}: {l}");
    }
    m.echo("local", "trace_clock");
    assert_eq!(m.read("trace_clock"), "[local] mono x86-tsc\n");

    // trace_pipe_raw: the kernel's sub-buffer pages, one CPU at a time, without blocking.
    let nr_cpus = std::fs::read_dir(m.path("per_cpu")).unwrap().count();
    assert!(nr_cpus >= 1);
    let funcs_in_pages = wait_for("pages in trace_pipe_raw", || {
        let n = raw_functions(&m, nr_cpus, 4096);
        (n > 0).then_some(n)
    });
    assert!(funcs_in_pages > 0);
    // buffer_subbuf_size_kb: the pages (and header_page) follow it.
    m.echo("8", "buffer_subbuf_size_kb");
    assert_eq!(m.read("buffer_subbuf_size_kb"), "8\n");
    let header = m.read("events/header_page");
    assert!(header.contains("size:8176;"), "{header}");
    wait_for("8 KiB pages in trace_pipe_raw", || {
        (raw_functions(&m, nr_cpus, 8192) > 0).then_some(())
    });
    m.echo("4", "buffer_subbuf_size_kb");

    // function -> function_graph: the new tracer starts on empty buffers and shows durations.
    sh_ok(&format!(
        "echo function_graph > {}",
        m.path("current_tracer").display()
    ));
    assert_eq!(m.read("current_tracer"), "function_graph\n");
    let text = wait_for("a call graph", || {
        let t = m.read("trace");
        let leaf = events(&t)
            .iter()
            .any(|l| l.contains(" us ") && l.ends_with("tick_beta();"));
        (t.contains("tick_alpha() {") && leaf).then_some(t)
    });
    assert!(text.starts_with("# tracer: function_graph\n"), "{text}");
    // The switch emptied the buffers: at most the events in flight then (one per thread: the
    // two workers and main) follow; without the reset there would be thousands.
    assert!(
        text.matches(" <-").count() <= 3,
        "function-tracer lines survived the switch: {text}"
    );

    // The output options apply live: funcgraph-proc adds the task to every line.
    m.echo("1", "options/funcgraph-proc");
    let t = wait_for("lines with the task", || {
        let t = m.read("trace");
        events(&t)
            .iter()
            .any(|l| l.ends_with("tick_beta();"))
            .then_some(t)
    });
    for l in events(&t).iter().filter(|l| l.ends_with("tick_beta();")) {
        assert!(l.contains("mount_t"), "{l}");
    }
    m.echo("0", "options/funcgraph-proc");
    assert_eq!(m.read("options/funcgraph-proc"), "0\n");

    // trace_pipe blocks until events come, then returns them.
    let pipe = m.path("trace_pipe");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut f = std::fs::File::open(pipe).unwrap();
        let mut buf = vec![0u8; 65536];
        let n = f.read(&mut buf).unwrap();
        let _ = tx.send(String::from_utf8_lossy(&buf[..n]).into_owned());
    });
    let got = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("a blocking trace_pipe read returns when events come");
    assert!(got.contains("tick_"), "{got}");

    // set_graph_function: only tick_beta and what it calls.
    m.echo("tick_beta", "set_graph_function");
    assert_eq!(m.read("set_graph_function"), "tick_beta\n");
    m.echo("", "trace");
    let text = wait_for("tick_beta as the graph's root", || {
        let t = m.read("trace");
        events(&t)
            .iter()
            .any(|l| l.ends_with("tick_beta();"))
            .then_some(t)
    });
    // No call of tick_alpha is recorded (an exit of one in flight at the clear may be).
    assert!(!text.contains("tick_alpha()"), "{text}");
    sh_ok(&format!(
        "echo > {}",
        m.path("set_graph_function").display()
    ));
    assert_eq!(
        m.read("set_graph_function"),
        "#### all functions enabled ####\n"
    );

    // tracing_on reads back; function_graph's notrace file is refused, not pretended.
    m.echo("0", "tracing_on");
    assert_eq!(m.read("tracing_on"), "0\n");
    // A buffer that is not recording refuses markers as the kernel does.
    let o = sh(&format!(
        "/bin/echo nothing > {}",
        m.path("trace_marker").display()
    ));
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("Bad file descriptor"),
        "{o:?}"
    );
    m.echo("1", "tracing_on");
    assert_eq!(m.read("tracing_on"), "1\n");
    let o = sh(&format!(
        "/bin/echo tick_beta > {}",
        m.path("set_graph_notrace").display()
    ));
    assert!(String::from_utf8_lossy(&o.stderr).contains("No such device"));

    // function_graph -> nop: every site back to its NOP, the buffers empty.
    m.echo("nop", "current_tracer");
    assert_eq!(m.read("current_tracer"), "nop\n");
    assert_eq!(m.read("enabled_functions"), "");
    m.echo("", "trace");
    m.echo("hello from the test", "trace_marker");
    let text = m.read("trace");
    assert!(text.starts_with("# tracer: nop\n"), "{text}");
    let evs = events(&text);
    let marks: Vec<&&str> = evs
        .iter()
        .filter(|l| l.contains("tracing_mark_write"))
        .collect();
    assert_eq!(marks.len(), 1, "{text}");
    assert!(marks[0].ends_with("tracing_mark_write: hello from the test"));
    // No call is recorded any more (only the exit of a call in flight at the clear may be).
    assert!(
        !evs.iter()
            .any(|l| l.contains(" <-") || l.contains("funcgraph_entry")),
        "{text}"
    );

    // A consuming read takes the marker; the next one, O_NONBLOCK, finds nothing: EAGAIN.
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(m.path("trace_pipe"))
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = f.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("hello from the test"));
    let e = f.read(&mut buf).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
    drop(f);
    // ...and a tracer that does not exist is refused with the kernel's errno.
    let o = sh(&format!(
        "/bin/echo bogus > {}",
        m.path("current_tracer").display()
    ));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Invalid argument"));
    assert_eq!(m.read("current_tracer"), "nop\n");

    // error_log: a refused probe definition is explained there (no kprobes in a process).
    let o = sh(&format!(
        "/bin/echo 'p:myprobe tick_alpha' > {}",
        m.path("kprobe_events").display()
    ));
    assert!(!o.status.success());
    let log = m.read("error_log");
    assert!(log.contains("trace_kprobe: error:"), "{log}");
    assert!(log.contains("Command: p:myprobe tick_alpha"), "{log}");
    m.echo("", "error_log");
    assert_eq!(m.read("error_log"), "");

    // Instances: mkdir / rmdir, their own buffers.
    std::fs::create_dir(m.path("instances/foo")).unwrap();
    let names: Vec<String> = std::fs::read_dir(m.path("instances"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["foo"]);
    assert_eq!(m.read("instances/foo/available_tracers"), "nop\n");
    m.echo("in the instance", "instances/foo/trace_marker");
    assert!(
        m.read("instances/foo/trace")
            .contains("tracing_mark_write: in the instance")
    );
    assert!(!m.read("trace").contains("in the instance"));
    m.echo("", "instances/foo/trace");
    assert!(events(&m.read("instances/foo/trace")).is_empty());
    std::fs::remove_dir(m.path("instances/foo")).unwrap();
    assert!(!m.path("instances/foo").exists());

    // The program ends: the tool exits with its status and the mount is gone; the recording
    // holds what `trace` showed at the end.
    m.echo("last words", "trace_marker");
    let (out, mnt, rec) = m.finish_ok();
    let calls = String::from_utf8_lossy(&out.stdout);
    assert!(
        calls.starts_with("calls ") && calls.ends_with(" wrong 0\n"),
        "{calls}"
    );
    assert_eq!(mounts_at(&mnt), vec![], "stale mount at {}", mnt.display());
    let report = ftrace_user::report::report(&ftrace_user::report::ReportArgs::new(&rec)).unwrap();
    let report = String::from_utf8(report).unwrap();
    assert!(report.starts_with("# tracer: nop\n"), "{report}");
    let evs = events(&report);
    assert_eq!(evs.len(), 1, "{report}");
    assert!(
        evs[0].ends_with("tracing_mark_write: last words"),
        "{report}"
    );
}

/// A marker bigger than a 4 KiB page, written under 8 KiB sub-buffers, is in the recording
/// the end capture makes (its pages are the tree's sub-buffers, said in `events/header_page`)
/// as `trace` showed it: each write capped at the kernel's 4096 bytes.
#[test]
fn the_end_capture_keeps_markers_of_big_sub_buffers() {
    let m = Mounted::start("big-marker", "function");
    m.echo("nop", "current_tracer");
    m.echo("8", "buffer_subbuf_size_kb");
    let big = "y".repeat(6000);
    std::fs::write(m.path("trace_marker"), &big).unwrap();
    let trace = m.read("trace");
    let live: Vec<&str> = events(&trace)
        .into_iter()
        .filter(|l| l.contains("tracing_mark_write: "))
        .collect();
    // (`fs::write` writes again what the first write did not take.)
    let texts: Vec<usize> = live
        .iter()
        .map(|l| l.split_once("tracing_mark_write: ").unwrap().1.len())
        .collect();
    assert_eq!(texts, [4096, 6000 - 4096]);
    let (_, _, rec) = m.finish_ok();
    let report = ftrace_user::report::report(&ftrace_user::report::ReportArgs::new(&rec)).unwrap();
    let report = String::from_utf8(report).unwrap();
    assert!(
        events(&report) == live,
        "the recording's markers differ from trace's"
    );
}

#[test]
fn stop_signal_unmounts_and_stops_the_program() {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let m = Mounted::start(&format!("sig{sig}"), "function_graph");
        wait_for("graph events", || {
            m.read("trace").contains("tick_").then_some(())
        });
        // SAFETY: signalling our own child.
        unsafe { libc::kill(m.tool.id() as libc::pid_t, sig) };
        let (out, mnt, rec) = m.wait_exit();
        // The program died of the signal the tool passed on; the shell's code says which.
        assert_eq!(out.status.code(), Some(128 + sig), "{out:?}");
        assert_eq!(mounts_at(&mnt), vec![], "stale mount at {}", mnt.display());
        // What it recorded is kept.
        assert!(rec.join("kallsyms").is_file());
    }
}

#[test]
fn killed_tool_leaves_no_mount() {
    let mut m = Mounted::start("kill", "function");
    // SIGKILL: the tool runs no code; fusermount3's auto_unmount helper unmounts.
    m.tool.kill().unwrap();
    m.tool.wait().unwrap();
    let mnt = m.mnt.clone();
    wait_for("the auto-unmount", || {
        mounts_at(&mnt).is_empty().then_some(())
    });
    // The program, orphaned with its stdin open, ends when the test closes it.
    drop(m.stdin.take());
}

#[test]
fn fuse_unavailable_is_a_clear_error() {
    let dir = scratch("nofuse");
    let mnt = dir.join("tracing");
    std::fs::create_dir(&mnt).unwrap();
    // No fusermount3 on PATH.
    let out = Command::new(env!("CARGO_BIN_EXE_ftrace"))
        .env("PATH", dir.join("empty"))
        .args(["record", "--mount"])
        .arg(&mnt)
        .arg("-o")
        .arg(dir.join("rec"))
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("FUSE is not available: fusermount3 not found"),
        "{err}"
    );
    assert!(!dir.join("rec").exists(), "the program must not have run");
}

#[test]
fn exit_ends_a_blocked_reader() {
    let m = Mounted::start("blocked", "function");
    m.echo("nop", "current_tracer");
    // Opened here, read in a thread: it blocks (nop records nothing) until the program ends.
    let mut f = std::fs::File::open(m.path("trace_pipe")).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 4096];
        let mut got = 0;
        let r = loop {
            match f.read(&mut buf) {
                Ok(0) => break Ok(got),
                Ok(n) => got += n,
                Err(e) => break Err(e.kind()),
            }
        };
        let _ = tx.send(r);
    });
    let (_, mnt, _) = m.finish_ok();
    assert_eq!(mounts_at(&mnt), vec![], "stale mount at {}", mnt.display());
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the blocked reader was answered");
    assert!(r.is_ok(), "{r:?}");
}

#[test]
fn live_mount_keeps_the_command_line_filters() {
    let m = Mounted::start_with(
        "live",
        &["live", "-t", "function", "-F", "tick_*", "-N", "tick_beta"],
    );
    assert_eq!(
        m.read("set_ftrace_filter").lines().collect::<BTreeSet<_>>(),
        ["tick_alpha", "tick_beta"].into()
    );
    assert_eq!(m.read("set_ftrace_notrace"), "tick_beta\n");
    m.echo("function_graph", "current_tracer");
    wait_for("graph events", || {
        m.read("trace").contains("tick_alpha();").then_some(())
    });
    let (out, mnt, _) = m.finish_ok();
    assert_eq!(mounts_at(&mnt), vec![]);
    // `live` prints the trace as it was at the end: the graph of tick_alpha alone.
    let text = String::from_utf8(out.stdout).unwrap();
    let report = &text[text.find("# tracer:").expect("a report")..];
    assert!(report.starts_with("# tracer: function_graph\n"), "{report}");
    let evs = events(report);
    assert!(evs.iter().any(|l| l.ends_with("tick_alpha();")), "{report}");
    assert!(!report.contains("tick_beta"), "{report}");
}

#[test]
fn tracer_switches_under_load() {
    let m = Mounted::start("switch", "function");
    // Both workers call traced functions all along; each switch re-patches every site live.
    for round in 0..30 {
        for t in ["function_graph", "function", "nop"] {
            std::fs::write(m.path("current_tracer"), format!("{t}\n")).unwrap();
            assert_eq!(m.read("current_tracer"), format!("{t}\n"), "round {round}");
        }
    }
    m.echo("function_graph", "current_tracer");
    let text = wait_for("graph events after the switches", || {
        let t = m.read("trace");
        t.contains("tick_beta();").then_some(t)
    });
    assert!(text.starts_with("# tracer: function_graph\n"));
    let (out, mnt, _) = m.finish_ok();
    // The program computed what it does untraced and ended normally.
    let calls = String::from_utf8_lossy(&out.stdout);
    assert!(calls.starts_with("calls "), "{calls}");
    assert!(calls.ends_with(" wrong 0\n"), "{calls}");
    assert_eq!(mounts_at(&mnt), vec![]);
}

#[test]
fn traceoff_command_runs_in_the_program() {
    let m = Mounted::start("probes", "function");
    let count = |m: &Mounted| events(&m.read("trace")).len();
    wait_for("tick_beta events", || {
        m.read("trace")
            .contains(" tick_beta <-tick_alpha")
            .then_some(())
    });
    assert_eq!(m.read("tracing_on"), "1\n");

    // A command the agent cannot run is refused and changes nothing.
    let before = m.read("set_ftrace_filter");
    let o = sh(&format!(
        "/bin/echo 'tick_beta:dump' >> {}",
        m.path("set_ftrace_filter").display()
    ));
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("Invalid argument"));
    assert_eq!(m.read("set_ftrace_filter"), before);
    assert_eq!(m.read("tracing_on"), "1\n");

    // traceoff:1 fires in the program at the next tick_beta call: tracing_on reads 0 and
    // the count is spent.
    sh_ok(&format!(
        "echo 'tick_beta:traceoff:1' >> {}",
        m.path("set_ftrace_filter").display()
    ));
    wait_for("the traceoff probe to turn tracing off", || {
        (m.read("tracing_on") == "0\n").then_some(())
    });
    let filter = m.read("set_ftrace_filter");
    assert!(
        filter.lines().any(|l| l == "tick_beta:traceoff:count=0"),
        "{filter}"
    );
    // Nothing is recorded after the hit beyond the calls in flight then (one per worker at
    // most): the event count settles (two workers call ~4000 traced functions a second, so
    // a trace still recording never holds still for 20 polls).
    let at_off = count(&m);
    let mut last = (at_off, 0);
    let settled = wait_for("the trace to stop growing", || {
        let n = count(&m);
        last = if n == last.0 { (n, last.1 + 1) } else { (n, 0) };
        (last.1 >= 20).then_some(n)
    });
    assert!(
        settled <= at_off + 4,
        "{at_off} events at the traceoff, then {settled}"
    );
    // Tracing resumes from the file; the spent command stays spent.
    m.echo("1", "tracing_on");
    assert_eq!(m.read("tracing_on"), "1\n");
    wait_for("events after tracing_on resumed", || {
        (count(&m) > settled + 10).then_some(())
    });
    assert_eq!(m.read("tracing_on"), "1\n");
    let filter = m.read("set_ftrace_filter");
    assert!(
        filter.lines().any(|l| l == "tick_beta:traceoff:count=0"),
        "{filter}"
    );
    let (out, _, _) = m.finish_ok();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("wrong 0"), "{text}");
}

#[test]
fn function_commands_run_under_nop() {
    let m = Mounted::start("probes_nop", "function");
    m.echo("nop", "current_tracer");
    assert_eq!(m.read("enabled_functions"), "");
    // An unlimited traceoff: its site is enabled for the probe alone and records nothing.
    m.echo("tick_beta:traceoff", "set_ftrace_filter");
    let enabled = m.read("enabled_functions");
    assert!(enabled.starts_with("tick_beta"), "{enabled}");
    assert_eq!(enabled.lines().count(), 1, "{enabled}");
    wait_for("the traceoff probe", || {
        (m.read("tracing_on") == "0\n").then_some(())
    });
    assert!(
        m.read("set_ftrace_filter")
            .lines()
            .any(|l| l == "tick_beta:traceoff:unlimited")
    );
    // Unlimited: turned back on, the next tick_beta call turns it off again.
    m.echo("1", "tracing_on");
    wait_for("the traceoff probe to fire again", || {
        (m.read("tracing_on") == "0\n").then_some(())
    });
    assert_eq!(events(&m.read("trace")), Vec::<&str>::new());
    // Removed: the site goes with it.
    m.echo("!tick_beta:traceoff", "set_ftrace_filter");
    assert_eq!(m.read("enabled_functions"), "");
    assert!(!m.read("set_ftrace_filter").contains("traceoff"));
    let (out, _, _) = m.finish_ok();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("wrong 0"), "{text}");
}

/// What a kernel's tracefs takes from a reset script (ftracetest's `initialize_ftrace`) and
/// what this one refuses instead of pretending: trace events are listed but cannot be armed,
/// `set_graph_notrace` can be cleared but not set, an instance has its own filter files, and
/// a marker longer than one event is cut where Linux cuts it.
#[test]
fn kernel_reset_writes_are_taken() {
    let m = Mounted::start("reset", "function");
    let err = |cmd: String| String::from_utf8_lossy(&sh(&cmd).stderr).into_owned();

    // Events: the sched formats are listed; turning everything off is taken, arming one is
    // refused (nothing records it) and it stays off.
    let avail = m.read("available_events");
    assert!(avail.lines().any(|l| l == "sched:sched_switch"), "{avail}");
    m.echo("0", "events/enable");
    assert_eq!(m.read("events/enable"), "0\n");
    let e = err(format!(
        "/bin/echo 1 > {}",
        m.path("events/sched/sched_switch/enable").display()
    ));
    assert!(e.contains("No such device"), "{e}");
    assert_eq!(m.read("events/sched/sched_switch/enable"), "0\n");
    assert_eq!(m.read("set_event"), "");

    // set_graph_notrace: an empty write (how a script clears it) is taken; a name is refused.
    m.echo("", "set_graph_notrace");
    let e = err(format!(
        "/bin/echo tick_beta >> {}",
        m.path("set_graph_notrace").display()
    ));
    assert!(e.contains("No such device"), "{e}");
    assert_eq!(
        m.read("set_graph_notrace"),
        "#### no functions disabled ####\n"
    );

    // An instance has no function tracer: it serves none of its files (as a kernel built
    // without it), while the top level keeps its own.
    m.echo("tick_beta", "set_ftrace_filter");
    std::fs::create_dir(m.path("instances/flt")).unwrap();
    for f in [
        "set_ftrace_filter",
        "set_ftrace_notrace",
        "set_ftrace_pid",
        "set_ftrace_notrace_pid",
    ] {
        assert!(!m.path(&format!("instances/flt/{f}")).exists(), "{f}");
        assert!(m.path(f).exists(), "{f} at the top level");
    }
    let listed: Vec<String> = std::fs::read_dir(m.path("instances/flt"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !listed.iter().any(|n| n.starts_with("set_ftrace")),
        "{listed:?}"
    );
    assert!(listed.iter().any(|n| n == "trace_marker"), "{listed:?}");
    let open = std::fs::OpenOptions::new()
        .write(true)
        .open(m.path("instances/flt/set_ftrace_filter"));
    assert_eq!(
        open.map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::NotFound)
    );
    assert_eq!(m.read("set_ftrace_filter"), "tick_beta\n");
    // Nor does it record the program's or the sched events: its events/ holds the marker
    // events and the headers only; switching everything off has nothing to do.
    assert!(m.path("instances/flt/events/ftrace/print/format").exists());
    assert!(m.path("instances/flt/events/header_page").exists());
    assert!(!m.path("instances/flt/events/sched").exists());
    assert!(m.path("events/sched/sched_switch/enable").exists());
    m.echo("0", "instances/flt/events/enable");
    let e = err(format!(
        "/bin/echo sched:sched_switch > {}",
        m.path("instances/flt/set_event").display()
    ));
    assert!(e.contains("Invalid argument"), "{e}");
    assert_eq!(m.read("instances/flt/set_event"), "");
    std::fs::remove_dir(m.path("instances/flt")).unwrap();

    // A 5000-byte marker: Linux takes what one event holds (4054 bytes in 4 KiB
    // sub-buffers) and the writer's next write is the next event.
    m.echo("nop", "current_tracer");
    m.echo("", "trace");
    let text = "X".repeat(5000);
    sh_ok(&format!(
        "printf %s {text} > {}",
        m.path("trace_marker").display()
    ));
    let trace = m.read("trace");
    let lens: Vec<usize> = trace
        .lines()
        .filter_map(|l| l.split("tracing_mark_write: ").nth(1))
        .map(str::len)
        .collect();
    assert_eq!(lens, [4054, 946], "{trace}");
    m.finish();
}

/// The options whose records the agent does not make (a user stack trace, repeated calls
/// folded) are refused when set, `EINVAL` through `options/` and `trace_options` alike, and
/// stay off; clearing them is taken. An option the mount honours is taken both ways (and
/// `stacktrace` cleared, as ftracetest's `trigger-stacktrace.tc` clears it).
#[test]
fn options_the_agent_does_not_record_are_refused_when_set() {
    let m = Mounted::start("unrecorded-options", "function");
    let err = |cmd: String| String::from_utf8_lossy(&sh(&cmd).stderr).into_owned();
    for o in ["userstacktrace", "func-no-repeats"] {
        let f = format!("options/{o}");
        let e = err(format!("/bin/echo 1 > {}", m.path(&f).display()));
        assert!(e.contains("Invalid argument"), "{o}: {e}");
        assert_eq!(m.read(&f), "0\n", "{o}");
        m.echo("0", &f);
        assert_eq!(m.read(&f), "0\n", "{o}");
    }
    let e = err(format!(
        "/bin/echo userstacktrace > {}",
        m.path("trace_options").display()
    ));
    assert!(e.contains("Invalid argument"), "{e}");
    m.echo("nouserstacktrace", "trace_options");
    assert!(
        m.read("trace_options")
            .lines()
            .any(|l| l == "nouserstacktrace")
    );
    for (o, first) in [
        ("print-parent", "0"),
        ("func_stack_trace", "1"),
        ("stacktrace", "1"),
    ] {
        let f = format!("options/{o}");
        for v in [first, if first == "0" { "1" } else { "0" }] {
            m.echo(v, &f);
            assert_eq!(m.read(&f), format!("{v}\n"), "{o}");
        }
    }
    m.finish_ok();
}

/// Every file under `dir` (recursively) with its mode.
fn files_under(dir: &Path) -> Vec<(PathBuf, u32)> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = e.metadata().unwrap();
            if md.is_dir() {
                dirs.push(e.path());
            } else {
                out.push((e.path(), md.permissions().mode()));
            }
        }
    }
    out.sort();
    out
}

/// The readable files whose text only a write through the mount changes: not the buffers'
/// contents and statistics, not what the running program changes by itself (its `traceon` /
/// `traceoff` commands flip `tracing_on` and spend the counts `set_ftrace_filter` shows, its
/// threads fill `saved_cmdlines`), not the consuming files.
fn stable_snapshot(mnt: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    const MOVING: &[&str] = &[
        "trace",
        "trace_pipe",
        "trace_pipe_raw",
        "stats",
        "error_log",
        "saved_cmdlines",
        "saved_tgids",
        "enabled_functions",
        "touched_functions",
        "tracing_on",
        "set_ftrace_filter",
    ];
    files_under(mnt)
        .into_iter()
        .filter(|(p, mode)| {
            let name = p.file_name().unwrap().to_string_lossy();
            mode & 0o400 != 0 && !MOVING.contains(&name.as_ref())
        })
        .map(|(p, _)| {
            let v = std::fs::read(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()));
            (p, v)
        })
        .collect()
}

/// The fuzz test of the tree, through FUSE against a running program: random writes to random
/// writable files (the top level's and an instance's) never bring the tool down, every answer
/// is data or an errno, and a rejected write leaves every stable file as it was. The seed is
/// fixed (`FTRACE_FUZZ_SEED` picks another) so a failure replays.
#[test]
fn random_writes_on_the_live_mount_never_panic_and_errors_change_nothing() {
    const WORDS: &[&str] = &[
        "0",
        "1",
        "2",
        "-1",
        "4096",
        "0x10",
        "overwrite",
        "nooverwrite",
        "markers",
        "nomarkers",
        "funcgraph-cpu",
        "tick_alpha",
        "tick_*",
        "!tick_beta",
        "*",
        "nosuch_function",
        "tick_beta:traceoff",
        "tick_alpha:traceon:3",
        "!tick_beta:traceoff",
        "tick_alpha:stacktrace",
        "tick_beta:mod:mount_target",
        "sched:sched_switch",
        "!sched:*",
        "prev_pid == 1",
        "(prev_pid > 1",
        "hist:keys=next_pid",
        "p:x tick_alpha",
        "ff",
        "1,0",
    ];
    let seed = std::env::var("FTRACE_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_f00d_u64);
    let mut rng = common::fuzz::Rng(seed);
    let m = Mounted::start("fuzz", "function");
    std::fs::create_dir(m.path("instances/fz")).unwrap();
    let writable: Vec<PathBuf> = files_under(&m.mnt)
        .into_iter()
        .filter(|(_, mode)| mode & 0o200 != 0)
        .map(|(p, _)| p)
        .collect();
    assert!(writable.len() > 40, "{writable:?}");
    // The tracers and clocks the tree itself offers are words too.
    let offered = |f: &str| -> Vec<String> {
        std::fs::read_to_string(m.path(f))
            .unwrap()
            .split_whitespace()
            .map(|w| w.trim_matches(['[', ']']).to_string())
            .collect()
    };
    let mut words: Vec<String> = WORDS.iter().map(|w| w.to_string()).collect();
    words.extend(offered("available_tracers"));
    words.extend(offered("trace_clock"));
    assert!(words.iter().any(|w| w == "function_graph"), "{words:?}");
    let mut rejected = 0;
    // Each step's "after" is the next step's "before".
    let mut before = stable_snapshot(&m.mnt);
    for step in 0..60 {
        let path = &writable[rng.below(writable.len())];
        let data: Vec<u8> = match rng.below(3) {
            0 => (0..rng.below(80)).map(|_| rng.next() as u8).collect(),
            _ => {
                let mut s = String::new();
                if rng.below(4) == 0 {
                    s.push_str("no");
                }
                s.push_str(&words[rng.below(words.len())]);
                if rng.below(2) == 0 {
                    s.push('\n');
                }
                s.into_bytes()
            }
        };
        let append = rng.below(2) == 0;
        let what = format!(
            "step {step} (seed {seed}): {} {:?} to {}",
            if append { "append" } else { "write" },
            String::from_utf8_lossy(&data),
            path.display()
        );
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true);
        if append {
            opts.append(true);
        } else {
            // An open with O_TRUNC empties a filter file (and `trace`) whatever is written
            // next, as in Linux: that is the open's doing, so it is done first, on its own.
            opts.truncate(true);
            if opts.open(path).is_ok() {
                before = stable_snapshot(&m.mnt);
            }
        }
        let r = opts.open(path).and_then(|mut f| {
            use std::io::Write;
            f.write(&data)
        });
        let after = stable_snapshot(&m.mnt);
        match r {
            Ok(n) => assert!(n <= data.len(), "{what}: wrote {n}"),
            Err(e) => {
                rejected += 1;
                assert!(e.raw_os_error().is_some(), "{what}: {e}");
                for (p, old) in &before {
                    // Linux keeps a rejected event filter (with its error) in its file.
                    let kept_filter = p == path && p.ends_with("filter");
                    // The kernel's own exception: a tracer or event write expands the
                    // boot-minimum buffers before it checks its text (`(expanded: ...)`).
                    let expands = ["current_tracer", "set_event", "enable", "buffer_size_kb"]
                        .iter()
                        .any(|f| path.ends_with(f));
                    let expansion = expands && p.to_string_lossy().contains("size_kb");
                    if !kept_filter && !expansion {
                        assert_eq!(
                            Some(old),
                            after.get(p),
                            "{what}: rejected ({e}), yet {} changed",
                            p.display()
                        );
                    }
                }
            }
        }
        assert!(
            m.path("available_tracers").exists(),
            "{what}: the mount is gone"
        );
        before = after;
    }
    assert!(rejected > 10, "only {rejected} writes were rejected");
    let (out, _, _) = m.finish();
    assert!(out.status.success(), "{out:?}");
}

/// Clears the trace, then waits for `n` events and returns the tids of the events seen
/// (cleared twice: an event from before the last state change cannot be in the second window).
fn fresh_tids(m: &Mounted, n: usize, what: &str) -> BTreeSet<String> {
    for _ in 0..2 {
        std::fs::write(m.path("trace"), "").unwrap();
        wait_for(what, || (events(&m.read("trace")).len() >= n).then_some(()));
    }
    events(&m.read("trace"))
        .iter()
        .map(|l| tid_of(l).to_string())
        .collect()
}

#[test]
fn pid_filters_select_the_programs_threads() {
    let m = Mounted::start("pids", "function");
    // The two workers' thread ids.
    let tids: Vec<String> = wait_for("events of both workers", || {
        let t = m.read("trace");
        let tids: BTreeSet<String> = events(&t)
            .iter()
            .filter(|l| l.contains("tick_"))
            .map(|l| tid_of(l).to_string())
            .collect();
        (tids.len() >= 2).then(|| tids.into_iter().collect())
    });
    let (a, b) = (&tids[0], &tids[1]);

    // set_ftrace_pid: only that thread.
    m.echo(a, "set_ftrace_pid");
    assert_eq!(m.read("set_ftrace_pid"), format!("{a}\n"));
    assert_eq!(
        fresh_tids(&m, 20, "events of the listed thread"),
        [a.clone()].into()
    );

    // set_ftrace_notrace_pid: every thread but that one.
    std::fs::write(m.path("set_ftrace_pid"), "").unwrap();
    assert_eq!(m.read("set_ftrace_pid"), "no pid\n");
    m.echo(a, "set_ftrace_notrace_pid");
    let seen = fresh_tids(&m, 20, "events of the other threads");
    assert!(seen.contains(b) && !seen.contains(a), "{seen:?}");

    // Both lists: listed and not in the notrace list.
    m.echo(&format!("{a} {b}"), "set_ftrace_pid");
    assert_eq!(
        fresh_tids(&m, 20, "events of the thread listed once"),
        [b.clone()].into()
    );

    // A bad pid changes nothing.
    let o = sh(&format!("echo x > {}", m.path("set_ftrace_pid").display()));
    assert!(!o.status.success());
    assert_eq!(
        fresh_tids(&m, 20, "events after a refused write"),
        [b.clone()].into()
    );

    // Cleared: every thread again (and the fast path back).
    std::fs::write(m.path("set_ftrace_pid"), "").unwrap();
    std::fs::write(m.path("set_ftrace_notrace_pid"), "").unwrap();
    let seen = wait_for("events of both workers again", || {
        let s = fresh_tids(&m, 40, "events after clearing");
        (s.contains(a) && s.contains(b)).then_some(s)
    });
    assert!(seen.len() >= 2);
    let (out, _, _) = m.finish_ok();
    let calls = String::from_utf8_lossy(&out.stdout);
    assert!(calls.ends_with(" wrong 0\n"), "{calls}");
}

/// The CPU field of a function-tracer line (`comm-tid [cpu] ...`).
fn cpu_of(line: &str) -> &str {
    line.split_whitespace().nth(1).unwrap_or("")
}

#[test]
fn tracing_cpumask_records_only_its_cpus() {
    let nr = std::thread::available_parallelism().unwrap().get();
    assert!(nr >= 2, "a cpumask test needs two CPUs");
    let m = Mounted::start("cpumask", "function");
    wait_for("events", || {
        (!events(&m.read("trace")).is_empty()).then_some(())
    });
    // Only CPU 0, then only CPU 1: the workers migrate between them, so each shows up.
    for (mask, cpu) in [("1", "[000]"), ("2", "[001]")] {
        m.echo(mask, "tracing_cpumask");
        let text = wait_for("events on the masked CPU", || {
            std::fs::write(m.path("trace"), "").unwrap();
            let t = wait_for("events", || {
                let t = m.read("trace");
                (events(&t).len() >= 20).then_some(t)
            });
            let cpus: BTreeSet<&str> = events(&t).iter().map(|l| cpu_of(l)).collect();
            (cpus == [cpu].into()).then(|| t.clone())
        });
        assert!(events(&text).iter().all(|l| cpu_of(l) == cpu), "{text}");
    }
    // A refused mask (a CPU the machine lacks) changes nothing.
    let o = sh(&format!(
        "echo 1,00000000,00000000,00000000,00000000 > {}",
        m.path("tracing_cpumask").display()
    ));
    assert!(!o.status.success());
    let before = m.read("tracing_cpumask");
    assert_eq!(
        u64::from_str_radix(before.trim().replace(',', "").as_str(), 16),
        Ok(2)
    );
    // All CPUs again.
    let all = format!("{:x}", u64::MAX >> (64 - nr.min(64)));
    m.echo(&all, "tracing_cpumask");
    m.finish_ok();
}

/// The sizes of the program's ring files named `buf-<tid>.<n>` (the rings a thread moved to).
fn moved_ring_sizes(m: &Mounted) -> Vec<u64> {
    ring_files(m)
        .into_iter()
        .filter(|(p, _)| p.file_name().unwrap().to_string_lossy().contains('.'))
        .map(|(_, len)| len)
        .collect()
}

/// `buffer_size_kb` at the top level moves the running program's threads to rings of the new
/// size (new `buf-<tid>.<n>` files of that size), events keep coming, and a `per_cpu/cpu0`
/// write reads back there while the top level reads `X`.
#[test]
fn buffer_size_kb_resizes_the_programs_rings_while_it_runs() {
    let m = Mounted::start("resize", "function");
    let orig: u64 = m
        .read("buffer_size_kb")
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    m.echo(&(orig * 2).to_string(), "buffer_size_kb");
    let kb: u64 = m.read("buffer_size_kb").trim().parse().unwrap();
    // Whole 4080-byte sub-buffers, as the kernel rounds.
    assert!(kb >= orig * 2 && kb < orig * 2 + 4, "{kb}");
    // A ring file: its 4 KiB header, then the size read back (in bytes, whole sub-buffers).
    wait_for("rings of the new size", || {
        moved_ring_sizes(&m)
            .iter()
            .any(|&len| len > 4096 && (len - 4096) >> 10 == kb)
            .then_some(())
    });
    m.echo("", "trace");
    wait_for("events after the resize", || {
        m.read("trace").contains("tick_beta").then_some(())
    });
    m.echo(&orig.to_string(), "per_cpu/cpu0/buffer_size_kb");
    let cpu0: u64 = m
        .read("per_cpu/cpu0/buffer_size_kb")
        .trim()
        .parse()
        .unwrap();
    assert!(cpu0 >= orig && cpu0 < orig + 4, "{cpu0}");
    if std::path::Path::new(&m.path("per_cpu/cpu1")).exists() {
        assert_eq!(m.read("buffer_size_kb"), "X\n");
    }
    let (out, _, _) = m.finish_ok();
    let calls = String::from_utf8_lossy(&out.stdout);
    assert!(calls.ends_with(" wrong 0\n"), "{calls}");
}

/// `buffer_size_kb` resizes every process of the traced tree, as the kernel's one buffer is
/// resized whole: here `kernel_names` and the second image it forks and execs (`kernel_names`
/// again: the tree traces the first process's functions, by name, in every process), each
/// of whose threads move to rings of the new size.
#[test]
fn buffer_size_kb_resizes_every_process_of_the_tree() {
    let dir = scratch("resize-tree");
    let prog = common::build_kernel_names(&dir);
    let m = Mounted::start_command(
        &dir,
        &["record", "-t", "function"],
        &[prog.as_os_str(), prog.as_os_str()],
    );
    // Both images recording: a ring directory each (`<pid>.<n>`) with a ring in it.
    let images = || {
        let mut out = BTreeMap::new();
        for (path, _) in ring_files(&m) {
            let image = path.parent().unwrap().to_path_buf();
            *out.entry(image).or_insert(0u32) += 1;
        }
        out
    };
    wait_for("both processes' rings", || {
        (images().len() >= 2).then_some(())
    });
    let orig = m.read("buffer_size_kb");
    // (`N (expanded: M)` before the first expansion.)
    let orig: u64 = orig.split_whitespace().next().unwrap().parse().unwrap();
    m.echo(&(orig * 2).to_string(), "buffer_size_kb");
    let kb: u64 = m.read("buffer_size_kb").trim().parse().unwrap();
    wait_for("rings of the new size in both processes", || {
        let moved: BTreeSet<_> = ring_files(&m)
            .into_iter()
            .filter(|(p, len)| {
                let name = p.file_name().unwrap().to_string_lossy();
                name.contains('.') && *len > 4096 && (len - 4096) >> 10 == kb
            })
            .map(|(p, _)| p.parent().unwrap().to_path_buf())
            .collect();
        (moved.len() >= 2).then_some(())
    });
    m.finish_ok();
}

/// An image the tree starts traces its own functions, those the first process lacks too, when
/// `set_ftrace_filter` is empty (every function, as in the kernel); with a filter, only the
/// functions it names. (`kernel_names` forks and execs `mount_target`, whose `tick_alpha` and
/// `tick_beta` it lacks; before, every other process got the first one's functions by name.)
#[test]
fn an_image_of_the_tree_traces_its_own_functions() {
    let dir = scratch("own-functions");
    let first = common::build_kernel_names(&dir);
    let second = common::build_kernel_style(&dir, "mount_target");
    let m = Mounted::start_command(
        &dir,
        &["record", "-t", "function"],
        &[first.as_os_str(), second.as_os_str()],
    );
    let own = |t: &str| t.lines().any(|l| l.contains(": tick_beta <-"));
    wait_for("the second image's own functions in trace", || {
        own(&m.read("trace")).then_some(())
    });
    m.echo("schedule", "set_ftrace_filter");
    m.echo("", "trace");
    std::thread::sleep(Duration::from_millis(300));
    let t = m.read("trace");
    assert!(!own(&t), "{t}");
    m.finish_ok();
}

/// A hist trigger's `.syscall` key names the program's system calls as Linux 6.12 names them:
/// `raw_syscalls:sys_exit`, fired by `kernel_names`' library around the calls it makes for a
/// shell it is preloaded into (`write` for `echo`, `wait4` for `sleep`), under `kernel_names`.
#[test]
fn hist_syscall_keys_name_the_programs_system_calls() {
    let dir = scratch("hist-syscall");
    let prog = common::build_kernel_names(&dir);
    let lib = dir.join("libkernel_names.so");
    let shell = format!(
        "export LD_PRELOAD=\"$LD_PRELOAD {}\"; exec sh -c 'i=0; while [ $i -lt 60 ]; do \
         echo tick > /dev/null; sleep 0.02; i=$((i + 1)); done'",
        lib.display()
    );
    let m = Mounted::start_command(
        &dir,
        &["record", "-t", "function"],
        &[
            prog.as_os_str(),
            "sh".as_ref(),
            "-c".as_ref(),
            shell.as_ref(),
        ],
    );
    m.echo(
        "hist:keys=id.syscall",
        "events/raw_syscalls/sys_exit/trigger",
    );
    // `{ id: sys_kill                      [ 62] } hitcount:        123`
    let keys = || -> Vec<(String, u64)> {
        m.read("events/raw_syscalls/sys_exit/hist")
            .lines()
            .filter_map(|l| {
                let rest = l.strip_prefix("{ id: ")?;
                let (name, rest) = rest.split_once('[')?;
                let nr = rest.split_once(']')?.0.trim().parse().ok()?;
                Some((name.trim().to_string(), nr))
            })
            .collect()
    };
    wait_for("system calls in the hist", || {
        (!keys().is_empty()).then_some(())
    });
    for (name, nr) in keys() {
        assert_ne!(name, "unknown_syscall", "{nr}");
        assert_eq!(Some(name.as_str()), ftrace_user::syscall_names::name(nr));
    }
    m.finish_ok();
}

/// The program's ring files (`buf-<tid>`, `buf-<tid>.<n>` after a resize) and their sizes,
/// under the tool's ring directory (`/dev/shm/ftrace-rings.<tool pid>.*`, else the recording).
fn ring_files(m: &Mounted) -> Vec<(PathBuf, u64)> {
    fn walk(d: &Path, out: &mut Vec<(PathBuf, u64)>) {
        for e in std::fs::read_dir(d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if e.file_name().to_string_lossy().starts_with("buf-") {
                out.push((p, e.metadata().map_or(0, |m| m.len())));
            }
        }
    }
    let mut out = Vec::new();
    let prefix = format!("ftrace-rings.{}.", m.tool.id());
    for e in std::fs::read_dir("/dev/shm")
        .into_iter()
        .flatten()
        .flatten()
    {
        if e.file_name().to_string_lossy().starts_with(&prefix) {
            walk(&e.path(), &mut out);
        }
    }
    walk(&m.rec, &mut out);
    out
}

/// `trace_stat/function<cpu>` of every CPU: (header lines, each function's rows summed over
/// the CPUs: hits, and whether a row had time columns).
fn profile_of(m: &Mounted) -> (Vec<String>, BTreeMap<String, u64>) {
    let mut headers = Vec::new();
    let mut hits = BTreeMap::new();
    let cpus = std::fs::read_dir(m.path("trace_stat")).unwrap().count();
    assert!(cpus > 0);
    for cpu in 0..cpus {
        let text = m.read(&format!("trace_stat/function{cpu}"));
        let mut lines = text.lines();
        headers.extend(lines.by_ref().take(2).map(str::to_string));
        for l in lines {
            let mut f = l.split_ascii_whitespace();
            let (Some(name), Some(n)) = (f.next(), f.next()) else {
                panic!("bad trace_stat row {l:?} in\n{text}");
            };
            *hits.entry(name.to_string()).or_insert(0) += n.parse::<u64>().unwrap();
        }
    }
    (headers, hits)
}

/// One burst of the profile target's calls: two threads, 5000 each.
const BURST_CALLS: u64 = 2 * 5000;

/// `function_profile_enabled` on the live mount: the program counts every call of the
/// filtered functions, whatever the tracer (here `nop`, then `function_graph` with its time
/// columns), per CPU; the sum over the CPUs is exactly what the program counted itself.
#[test]
fn function_profiler_counts_what_the_program_counts() {
    let mut m = Mounted::start_program("profile", &["record", "-t", "function"], "profile_target");
    let profile_files = m.read("function_profile_enabled");
    assert_eq!(profile_files, "0\n");
    m.echo("nop", "current_tracer");
    m.echo("tick_*", "set_ftrace_filter");
    m.echo("1", "function_profile_enabled");
    assert_eq!(m.read("function_profile_enabled"), "1\n");
    let enabled = m.read("enabled_functions");
    assert_eq!(enabled.lines().count(), 2, "{enabled}");
    use std::io::Write as _;
    let go = |m: &mut Mounted| {
        let stdin = m.stdin.as_mut().unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    };
    go(&mut m);
    let (headers, first) = wait_for("the first burst's hits", || {
        let (h, p) = profile_of(&m);
        (p.get("tick_alpha") == Some(&BURST_CALLS) && p.get("tick_beta") == Some(&BURST_CALLS))
            .then_some((h, p))
    });
    assert_eq!(first.len(), 2, "only the filtered functions: {first:?}");
    assert_eq!(
        headers[..2],
        [
            "  Function                               Hit".to_string(),
            "  --------                               ---".to_string()
        ]
    );
    // Nothing recorded under nop: the counts are the program's, not the ring's.
    assert_eq!(events(&m.read("trace")), Vec::<&str>::new());
    // Off: the counts stay, and no longer change.
    m.echo("0", "function_profile_enabled");
    assert_eq!(m.read("enabled_functions"), "");
    assert_eq!(profile_of(&m).1, first);
    // Under function_graph, on again: a fresh profile, with the time columns.
    m.echo("function_graph", "current_tracer");
    m.echo("1", "function_profile_enabled");
    go(&mut m);
    wait_for("the second burst's hits", || {
        let (h, p) = profile_of(&m);
        (p.get("tick_alpha") == Some(&BURST_CALLS) && p.get("tick_beta") == Some(&BURST_CALLS))
            .then_some((h, p))
    });
    let stat0 = (0..)
        .map(|c| m.read(&format!("trace_stat/function{c}")))
        .find(|t| t.contains("tick_alpha"))
        .unwrap();
    assert!(
        stat0.starts_with(
            "  Function                               Hit    Time            Avg             s^2\n"
        ),
        "{stat0}"
    );
    let row = stat0.lines().find(|l| l.contains("tick_alpha")).unwrap();
    assert_eq!(row.matches(" us ").count(), 3, "{row}");
    let (out, _, _) = m.finish_ok();
    let text = String::from_utf8(out.stdout).unwrap();
    let own: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("calls "))
        .unwrap_or_else(|| panic!("{text}"))
        .split(' ')
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(own, 2 * BURST_CALLS, "{text}");
}
