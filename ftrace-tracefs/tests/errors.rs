//! The 25 bad writes of `07-errors`, replayed in order on one tree by a tiny busybox-`sh`
//! interpreter; the printed output must equal the capture byte for byte, and every rejected
//! write must leave every readable file as it was. The tree has the `sched` events registered,
//! as on the captured Linux host, so case 22's hist trigger meets the kernel's field check.

mod common;

use std::collections::BTreeMap;

use common::{ModelHost, golden, tracefs, tracefs_with_sched};
use ftrace_tracefs::tree::Node;
use ftrace_tracefs::{Errno, OpenFlags, Tracefs, WriteMode};

type Fs = Tracefs<ModelHost>;

/// Every readable file of the tree (top level and instances), except consuming or write-only
/// ones and `error_log` (which a rejected write may legitimately extend).
fn snapshot(fs: &mut Fs) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
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
                Node::File(_) => {
                    let skip = [
                        "trace_pipe",
                        "trace_pipe_raw",
                        "trace_marker",
                        "trace_marker_raw",
                        "free_buffer",
                        "error_log",
                    ];
                    if skip.contains(&e.name.as_ref()) {
                        continue;
                    }
                    out.insert(
                        path.clone(),
                        fs.read_to_end(&path)
                            .unwrap_or_else(|err| panic!("{path}: {err:?}")),
                    );
                }
            }
        }
    }
    out
}

struct Shell {
    status: i32,
    out: String,
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .unwrap_or(s)
}

impl Shell {
    /// Runs one `;`-separated command line; returns the exit status of each command.
    fn run(&mut self, fs: &mut Fs, line: &str) -> Vec<i32> {
        let mut statuses = Vec::new();
        for cmd in line.split("; ") {
            self.status = self.one(fs, cmd.trim());
            statuses.push(self.status);
        }
        statuses
    }

    fn one(&mut self, fs: &mut Fs, cmd: &str) -> i32 {
        if cmd == "echo $?" {
            self.out += &format!("{}\n", self.status);
            return 0;
        }
        if let Some((lhs, file)) = cmd.split_once(" > ") {
            let text = lhs.strip_prefix("echo").unwrap().trim();
            let data = format!("{}\n", unquote(text));
            let fh = match fs.open(file, OpenFlags::TRUNCATE) {
                Ok(fh) => fh,
                Err(e) => {
                    self.out += &format!("sh: can't create {file}: {e}\n");
                    return 1;
                }
            };
            // busybox writes with full_write(): again until every byte is taken.
            let mut done = 0;
            let r = loop {
                match fs.write(fh, done as u64, &data.as_bytes()[done..]) {
                    Ok(n) if n > 0 && done + n < data.len() => done += n,
                    Ok(_) => break Ok(()),
                    Err(e) => break Err(e),
                }
            };
            let rel = fs.release(fh);
            return match r.and(rel) {
                Ok(()) => 0,
                Err(e) => {
                    self.out += &format!("sh: write error: {e}\n");
                    1
                }
            };
        }
        if let Some(file) = cmd.strip_prefix("cat ") {
            return match fs.read_to_end(file) {
                Ok(b) => {
                    self.out += &String::from_utf8(b).unwrap();
                    0
                }
                Err(Errno::ENOENT) => {
                    self.out += &format!("cat: can't open '{file}': No such file or directory\n");
                    1
                }
                Err(e) => {
                    self.out += &format!("cat: read error: {e}\n");
                    1
                }
            };
        }
        if let Some(dir) = cmd.strip_prefix("mkdir ") {
            return match fs.mkdir(dir) {
                Ok(()) => 0,
                Err(e) => {
                    self.out += &format!("mkdir: can't create directory '{dir}': {e}\n");
                    1
                }
            };
        }
        if let Some(dir) = cmd.strip_prefix("rmdir ") {
            return match fs.rmdir(dir) {
                Ok(()) => 0,
                Err(e) => {
                    self.out += &format!("rmdir: '{dir}': {e}\n");
                    1
                }
            };
        }
        panic!("unsupported command {cmd:?}");
    }
}

/// Files that a failing command may change, and why (the kernel does the same).
fn allowed_changes(case: usize) -> &'static [&'static str] {
    match case {
        // `tracing_set_tracer()` expands the boot-minimum buffers before it looks the name up.
        1 => &[
            "buffer_size_kb",
            "buffer_total_size_kb",
            "per_cpu/cpu0/buffer_size_kb",
            "per_cpu/cpu1/buffer_size_kb",
        ],
        _ => &[],
    }
}

#[test]
fn the_25_bad_writes_of_linux_6_12() {
    let mut fs = tracefs_with_sched();
    let mut sh = Shell {
        status: 0,
        out: String::new(),
    };
    for case in 1..=25 {
        let text = golden(&format!("07-errors/{case:02}.txt"));
        let mut lines = text.lines();
        let cmdline = lines.next().unwrap().strip_prefix("$ ").unwrap();
        let expected: String = lines
            .filter(|l| *l != "rc=0")
            .map(|l| format!("{l}\n"))
            .collect();

        // The host clock at each case, as the kernel's error_log time stamps show it (the
        // kprobe case and the hist case).
        fs.host_mut().now_ns = if case == 22 {
            125_794_414_000
        } else {
            125_746_853_000
        };
        let before = snapshot(&mut fs);
        sh.out.clear();
        let statuses = sh.run(&mut fs, cmdline);
        let after = snapshot(&mut fs);

        assert_eq!(sh.out, expected, "case {case:02}: {cmdline}");

        // A failing command changes nothing (beyond the kernel's own exceptions).
        if statuses.iter().any(|&s| s != 0) {
            for (path, old) in &before {
                if allowed_changes(case).contains(&path.as_str()) {
                    continue;
                }
                assert_eq!(Some(old), after.get(path), "case {case:02} changed {path}");
            }
            assert_eq!(before.len(), after.len(), "case {case:02} changed the tree");
        }
    }

    // error_log: both entries as Linux wrote them (the kprobe one and the hist one, with the
    // caret under `bogus_field`).
    let log = String::from_utf8(fs.read_to_end("error_log").unwrap()).unwrap();
    assert_eq!(log, golden("07-errors/error_log.txt"));
    // `echo > error_log` clears it.
    fs.write_all("error_log", b"\n", WriteMode::Truncate)
        .unwrap();
    assert_eq!(
        fs.read_to_end("error_log").unwrap(),
        golden("07-errors/error_log_after_clear.txt").as_bytes()
    );
}

#[test]
fn errors_beyond_the_capture() {
    let mut fs = tracefs();
    let e = |fs: &mut Fs, path: &str, data: &str| {
        fs.write_all(path, data.as_bytes(), WriteMode::Truncate)
            .unwrap_err()
    };
    // kstrtoul_from_user cuts the write at 22 bytes: 23 zeros and a 1 parse as 0.
    fs.write_all(
        "tracing_on",
        b"000000000000000000000001\n",
        WriteMode::Truncate,
    )
    .unwrap();
    assert_eq!(common::cat(&mut fs, "tracing_on").unwrap(), "0\n");
    fs.write_all("tracing_on", b"1\n", WriteMode::Truncate)
        .unwrap();
    assert_eq!(
        e(&mut fs, "tracing_on", "99999999999999999999\n"),
        Errno::ERANGE
    );
    assert_eq!(e(&mut fs, "tracing_on", " 1\n"), Errno::EINVAL);
    assert_eq!(e(&mut fs, "buffer_percent", "101\n"), Errno::EINVAL);
    assert_eq!(e(&mut fs, "buffer_subbuf_size_kb", "0\n"), Errno::EINVAL);
    assert_eq!(e(&mut fs, "buffer_subbuf_size_kb", "513\n"), Errno::EINVAL);
    assert_eq!(
        e(&mut fs, "buffer_subbuf_size_kb", "4398046511104\n"),
        Errno::EINVAL
    );
    fs.write_all("buffer_subbuf_size_kb", b"512\n", WriteMode::Truncate)
        .unwrap();
    assert_eq!(
        common::cat(&mut fs, "buffer_subbuf_size_kb").unwrap(),
        "512\n"
    );
    fs.write_all("buffer_subbuf_size_kb", b"3\n", WriteMode::Truncate)
        .unwrap();
    assert_eq!(
        common::cat(&mut fs, "buffer_subbuf_size_kb").unwrap(),
        "4\n"
    );
    assert_eq!(e(&mut fs, "saved_cmdlines_size", "0\n"), Errno::EINVAL);
    assert_eq!(e(&mut fs, "saved_cmdlines_size", "32769\n"), Errno::EINVAL);
    assert_eq!(e(&mut fs, "tracing_cpumask", "4\n"), Errno::EOVERFLOW);
    assert_eq!(e(&mut fs, "set_ftrace_pid", "12 abc\n"), Errno::EINVAL);
    assert_eq!(e(&mut fs, "set_ftrace_pid", "1073741824\n"), Errno::EPERM);
    assert_eq!(
        e(&mut fs, "set_ftrace_pid", "99999999999999999999999\n"),
        Errno::EINVAL
    );
    assert_eq!(
        e(&mut fs, "set_ftrace_pid", &format!("{}\n", "1".repeat(128))),
        Errno::EINVAL
    );
    // `(pid_t)val` keeps the low 32 bits, as Linux does.
    fs.write_all("set_ftrace_pid", b"4294967301\n", WriteMode::Truncate)
        .unwrap();
    assert_eq!(common::cat(&mut fs, "set_ftrace_pid").unwrap(), "5\n");
    fs.write_all("set_ftrace_pid", b"\n", WriteMode::Truncate)
        .unwrap();
    assert_eq!(e(&mut fs, "trace_clock", &"x".repeat(64)), Errno::EINVAL);
    assert_eq!(e(&mut fs, "options/test_nop_refuse", "1\n"), Errno::EINVAL);
    assert_eq!(
        e(&mut fs, "trace_options", "test_nop_refuse\n"),
        Errno::EINVAL
    );
    assert_eq!(
        e(&mut fs, "trace_options", "funcgraph-cpu\n"),
        Errno::EINVAL
    ); // not the current tracer's
    assert_eq!(e(&mut fs, "trace_marker_raw", "ab"), Errno::EINVAL);
    assert_eq!(
        e(&mut fs, "trace_marker_raw", &"a".repeat(3073)),
        Errno::EINVAL
    );
    fs.write_all(
        "trace_marker_raw",
        "a".repeat(3072).as_bytes(),
        WriteMode::Truncate,
    )
    .unwrap();
    assert_eq!(e(&mut fs, "available_tracers", "nop\n"), Errno::EINVAL);
    assert_eq!(e(&mut fs, "kprobe_events", "-:nosuch\n"), Errno::ENOENT);
    assert_eq!(
        e(&mut fs, "kprobe_events", "p:ok vfs_read\n"),
        Errno::EOPNOTSUPP
    );
    assert_eq!(
        fs.open("options/bogus", OpenFlags::READ).unwrap_err(),
        Errno::ENOENT
    );
    assert_eq!(
        fs.open("options", OpenFlags::READ).unwrap_err(),
        Errno::EISDIR
    );
    assert_eq!(fs.mkdir("options/x").unwrap_err(), Errno::EPERM);
    assert_eq!(fs.mkdir("options").unwrap_err(), Errno::EEXIST);
    assert_eq!(fs.rmdir("instances/nope").unwrap_err(), Errno::ENOENT);
    assert_eq!(fs.rmdir("options").unwrap_err(), Errno::EPERM);
    // markers off: trace_marker refuses; tracing off: the ring buffer refuses (EBADF).
    fs.write_all("options/markers", b"0\n", WriteMode::Truncate)
        .unwrap();
    assert_eq!(e(&mut fs, "trace_marker", "x\n"), Errno::EINVAL);
    fs.write_all("options/markers", b"1\n", WriteMode::Truncate)
        .unwrap();
    fs.write_all("tracing_on", b"0\n", WriteMode::Truncate)
        .unwrap();
    assert_eq!(e(&mut fs, "trace_marker", "x\n"), Errno::EBADF);
}

/// A `trace_marker` write longer than one event of the ring buffer holds is cut to what fits
/// and answers the short count, as Linux's `tracing_mark_write` does (4054 bytes in 4096-byte
/// sub-buffers); the writer's next write records the rest as a second event.
#[test]
fn a_long_marker_write_is_cut_to_one_event() {
    let mut fs = tracefs();
    assert_eq!(ftrace_tracefs::marker_text_max(4096), 4054);
    fs.write_all("trace", b"", WriteMode::Truncate).unwrap();
    let text = vec![b'X'; 5000];
    let fh = fs.open("trace_marker", OpenFlags::TRUNCATE).unwrap();
    assert_eq!(fs.write(fh, 0, &text).unwrap(), 4054);
    assert_eq!(fs.write(fh, 0, &text[4054..]).unwrap(), 5000 - 4054);
    fs.release(fh).unwrap();
    let trace = String::from_utf8(fs.read_to_end("trace").unwrap()).unwrap();
    let marks: Vec<usize> = trace
        .lines()
        .filter_map(|l| l.split("tracing_mark_write: ").nth(1))
        .map(str::len)
        .collect();
    assert_eq!(marks, [4054, 5000 - 4054], "{trace}");
}
