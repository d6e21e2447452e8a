//! A scripted session like the capture's (`04-function`, `05-function-graph`, `09-marker`): set
//! filters, switch tracers, toggle tracing_on, read `trace` and `trace_pipe`, clear, use an
//! instance. Read-backs of tree-owned files are compared with what Linux printed.

mod common;

use common::{ModelHost, cat, echo, echo_append, golden, tracefs};
use ftrace_tracefs::{Errno, OpenFlags, Tracefs, WriteMode};

const FUNCS: &str = "vfs_read vfs_write do_sys_openat2 ksys_read";

fn record(fs: &mut Tracefs<ModelHost>, inst: Option<&str>, cpu: u32, text: &str) {
    fs.host().state(inst).borrow_mut().record(cpu, text);
}

/// The event lines of a `trace` text (everything but the `#` header).
fn body(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn function_tracer_session() {
    let mut fs = tracefs();
    echo(&mut fs, FUNCS, "set_ftrace_filter").unwrap();
    echo(&mut fs, "function", "current_tracer").unwrap();
    assert_eq!(
        cat(&mut fs, "current_tracer").unwrap(),
        golden("04-function/current_tracer.txt")
    );
    assert_eq!(
        cat(&mut fs, "trace_options").unwrap(),
        golden("04-function/trace_options.txt")
    );
    // ftrace-core's filter language: functions read back in listing order, as in Linux.
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter").unwrap(),
        golden("04-function/set_ftrace_filter.txt")
    );
    // `>>` adds, `>` replaces.
    echo_append(&mut fs, "ksys_write", "set_ftrace_filter").unwrap();
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter").unwrap().lines().count(),
        5
    );
    echo(&mut fs, "vfs_read", "set_ftrace_filter").unwrap();
    assert_eq!(cat(&mut fs, "set_ftrace_filter").unwrap(), "vfs_read\n");
    // A bad token in `>>` keeps the filter.
    assert_eq!(
        echo_append(&mut fs, "nonexistent_fn_xyz", "set_ftrace_filter"),
        Err(Errno::EINVAL)
    );
    assert_eq!(cat(&mut fs, "set_ftrace_filter").unwrap(), "vfs_read\n");

    // Toggle tracing; only events recorded while on are kept.
    echo(&mut fs, "0", "tracing_on").unwrap();
    record(&mut fs, None, 0, "dropped");
    echo(&mut fs, "1", "tracing_on").unwrap();
    assert_eq!(cat(&mut fs, "tracing_on").unwrap(), "1\n");
    record(&mut fs, None, 0, "vfs_read <-ksys_read");
    record(&mut fs, None, 1, "vfs_write <-ksys_write");
    fs.host().state(None).borrow_mut().writer.cpu = 0;
    echo(&mut fs, "hello", "trace_marker").unwrap();
    echo(&mut fs, "0", "tracing_on").unwrap();
    let trace = cat(&mut fs, "trace").unwrap();
    assert!(trace.starts_with("# tracer: function\n"), "{trace}");
    let lines = body(&trace);
    assert_eq!(lines.len(), 3, "{trace}");
    assert!(lines[0].ends_with("tracing_mark_write: vfs_read <-ksys_read"));
    assert!(
        lines[1].contains("[001]")
            && lines[1].ends_with("tracing_mark_write: vfs_write <-ksys_write")
    );
    assert!(lines[2].ends_with("tracing_mark_write: hello"));
    let cpu1 = cat(&mut fs, "per_cpu/cpu1/trace").unwrap();
    assert_eq!(body(&cpu1), vec![lines[1]]);
    let body_text: String = lines.iter().map(|l| format!("{l}\n")).collect();

    // `trace` read in small pieces at increasing offsets gives the same text; offset 0 restarts.
    let fh = fs.open("trace", OpenFlags::READ).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 7];
    loop {
        let n = fs.read(fh, got.len() as u64, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    assert_eq!(String::from_utf8(got).unwrap(), trace);
    let n = fs.read(fh, 0, &mut buf).unwrap();
    assert_eq!(&buf[..n], b"# trace");
    fs.release(fh).unwrap();

    // trace_pipe consumes; with tracing off and something read, an empty pipe is EOF.
    let fh = fs.open("trace_pipe", OpenFlags::READ).unwrap();
    // The tracer cannot change while a pipe is open (the same tracer is a no-op).
    assert_eq!(echo(&mut fs, "nop", "current_tracer"), Err(Errno::EBUSY));
    echo(&mut fs, "function", "current_tracer").unwrap();
    let mut big = [0u8; 4096];
    let n = fs.read(fh, 0, &mut big).unwrap();
    assert_eq!(std::str::from_utf8(&big[..n]).unwrap(), body_text);
    assert_eq!(fs.read(fh, 0, &mut big), Ok(0));
    fs.release(fh).unwrap();
    assert!(body(&cat(&mut fs, "trace").unwrap()).is_empty());

    // Back to nop: its options again, and the filter survives the switch (as in Linux).
    echo(&mut fs, "nop", "current_tracer").unwrap();
    assert_eq!(
        cat(&mut fs, "trace_options").unwrap(),
        golden("02-files/trace_options.txt")
    );
    assert_eq!(cat(&mut fs, "set_ftrace_filter").unwrap(), "vfs_read\n");
    echo(&mut fs, FUNCS, "set_ftrace_filter").unwrap();
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter").unwrap(),
        golden("04-function/set_ftrace_filter_after_nop.txt")
    );
    // `echo > set_ftrace_filter` clears it (07-errors case 25 and the kernel's read-back).
    echo(&mut fs, "", "set_ftrace_filter").unwrap();
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter").unwrap(),
        golden("02-files/set_ftrace_filter.txt")
    );

    // `echo > trace` clears every CPU; `echo > per_cpu/cpu1/trace` only CPU 1.
    echo(&mut fs, "1", "tracing_on").unwrap();
    record(&mut fs, None, 0, "a");
    record(&mut fs, None, 1, "b");
    echo(&mut fs, "", "per_cpu/cpu1/trace").unwrap();
    assert_eq!(body(&cat(&mut fs, "trace").unwrap()).len(), 1);
    echo(&mut fs, "", "trace").unwrap();
    assert!(body(&cat(&mut fs, "trace").unwrap()).is_empty());
}

#[test]
fn function_graph_session() {
    let mut fs = tracefs();
    echo(&mut fs, "vfs_read", "set_graph_function").unwrap();
    echo(&mut fs, "5", "max_graph_depth").unwrap();
    echo(&mut fs, "function_graph", "current_tracer").unwrap();
    assert_eq!(
        cat(&mut fs, "current_tracer").unwrap(),
        golden("05-function-graph/current_tracer.txt")
    );
    assert_eq!(
        cat(&mut fs, "max_graph_depth").unwrap(),
        golden("05-function-graph/max_graph_depth.txt")
    );
    assert_eq!(
        cat(&mut fs, "set_graph_function").unwrap(),
        golden("05-function-graph/set_graph_function.txt")
    );
    assert_eq!(
        cat(&mut fs, "trace_options").unwrap(),
        golden("05-function-graph/trace_options.txt")
    );
    for l in golden("05-function-graph/funcgraph_options.txt").lines() {
        let (name, v) = l.split_once(' ').unwrap();
        assert_eq!(
            cat(&mut fs, &format!("options/{name}")).unwrap(),
            format!("{v}\n")
        );
    }
    // Tracer options through trace_options, and the tree hands the values to the backend.
    echo(&mut fs, "nofuncgraph-cpu", "trace_options").unwrap();
    assert_eq!(cat(&mut fs, "options/funcgraph-cpu").unwrap(), "0\n");
    echo(&mut fs, "1", "options/funcgraph-cpu").unwrap();
    assert!(
        cat(&mut fs, "trace_options")
            .unwrap()
            .contains("\nfuncgraph-cpu\n")
    );
    let params = fs.host().state(None).borrow().params.clone();
    assert!(
        params.contains(&"MaxGraphDepth(5)".to_owned()),
        "{params:?}"
    );
    // The buffers were expanded by the first tracer switch.
    assert_eq!(cat(&mut fs, "buffer_size_kb").unwrap(), "1410\n");
    assert_eq!(cat(&mut fs, "buffer_total_size_kb").unwrap(), "2820\n");
}

#[test]
fn global_options_round_trip() {
    let mut fs = tracefs();
    echo(&mut fs, "nooverwrite", "trace_options").unwrap();
    assert_eq!(cat(&mut fs, "options/overwrite").unwrap(), "0\n");
    echo(&mut fs, "1", "options/sym-offset").unwrap();
    let opts = cat(&mut fs, "trace_options").unwrap();
    assert!(opts.contains("\nnooverwrite\n") && opts.contains("\nsym-offset\n"));
    echo(&mut fs, "overwrite", "trace_options").unwrap();
    echo(&mut fs, "nosym-offset", "trace_options").unwrap();
    assert_eq!(
        cat(&mut fs, "trace_options").unwrap(),
        golden("02-files/trace_options.txt")
    );
    // trace_clock: brackets move; tracing_cpumask, buffer_percent, tracing_thresh read back.
    echo(&mut fs, "mono", "trace_clock").unwrap();
    assert_eq!(
        cat(&mut fs, "trace_clock").unwrap(),
        "local global counter uptime perf [mono] mono_raw boot tai x86-tsc\n"
    );
    echo(&mut fs, "2", "tracing_cpumask").unwrap();
    assert_eq!(cat(&mut fs, "tracing_cpumask").unwrap(), "2\n");
    echo(&mut fs, "0", "buffer_percent").unwrap();
    assert_eq!(cat(&mut fs, "buffer_percent").unwrap(), "0\n");
    echo(&mut fs, "100", "tracing_thresh").unwrap();
    assert_eq!(cat(&mut fs, "tracing_thresh").unwrap(), "100\n");
    echo(&mut fs, "128", "saved_cmdlines_size").unwrap();
    assert_eq!(
        cat(&mut fs, "saved_cmdlines_size").unwrap(),
        golden("02-files/saved_cmdlines_size.txt")
    );
    echo(&mut fs, "8000", "saved_cmdlines_size").unwrap();
    assert_eq!(cat(&mut fs, "saved_cmdlines_size").unwrap(), "19659\n");
    // Per-CPU sizes that differ read as X.
    echo(&mut fs, "100", "per_cpu/cpu1/buffer_size_kb").unwrap();
    assert_eq!(
        cat(&mut fs, "per_cpu/cpu1/buffer_size_kb").unwrap(),
        "103\n"
    );
    assert_eq!(cat(&mut fs, "buffer_size_kb").unwrap(), "X\n");
    echo(&mut fs, "8", "buffer_subbuf_size_kb").unwrap();
    assert_eq!(cat(&mut fs, "buffer_subbuf_size_kb").unwrap(), "8\n");
    let hp = cat(&mut fs, "events/header_page").unwrap();
    assert!(
        hp.ends_with("\tfield: char data;\toffset:16;\tsize:8176;\tsigned:0;\n"),
        "{hp}"
    );
    // Pid lists: sorted, `>>` appends, `>` replaces, empty reads `no pid`.
    echo(&mut fs, "30 10", "set_ftrace_pid").unwrap();
    echo_append(&mut fs, "0x14", "set_ftrace_pid").unwrap();
    assert_eq!(cat(&mut fs, "set_ftrace_pid").unwrap(), "10\n20\n30\n");
    echo(&mut fs, "", "set_ftrace_pid").unwrap();
    assert_eq!(
        cat(&mut fs, "set_ftrace_pid").unwrap(),
        golden("02-files/set_ftrace_pid.txt")
    );
    assert_eq!(cat(&mut fs, "set_ftrace_notrace_pid").unwrap(), "no pid\n");
}

#[test]
fn instance_session() {
    let mut fs = tracefs();
    fs.mkdir("instances/foo").unwrap();
    assert_eq!(fs.mkdir("instances/foo"), Err(Errno::EEXIST));
    assert_eq!(fs.read_dir("instances").unwrap()[0].name, "foo");
    // An instance is allocated at full size at once.
    assert_eq!(
        cat(&mut fs, "instances/foo/buffer_size_kb").unwrap(),
        "1410\n"
    );
    assert_eq!(
        cat(&mut fs, "buffer_size_kb").unwrap(),
        "7 (expanded: 1408)\n"
    );
    // Instance flags: trace_printk_dest is zeroed; top-level-only options have no file.
    let opts = cat(&mut fs, "instances/foo/trace_options").unwrap();
    assert!(opts.contains("\nnotrace_printk_dest\n"));
    for top_only in ["trace_printk", "printk-msg-only", "record-cmd"] {
        assert_eq!(
            fs.stat(&format!("instances/foo/options/{top_only}"))
                .unwrap_err(),
            Errno::ENOENT
        );
        assert!(fs.stat(&format!("options/{top_only}")).is_ok());
    }
    for top_only in [
        "README",
        "instances",
        "max_graph_depth",
        "set_graph_function",
        "available_filter_functions",
    ] {
        assert_eq!(
            fs.stat(&format!("instances/foo/{top_only}")).unwrap_err(),
            Errno::ENOENT
        );
    }
    // Independent state and buffer.
    echo(&mut fs, "function", "instances/foo/current_tracer").unwrap();
    echo(&mut fs, "0", "instances/foo/tracing_on").unwrap();
    assert_eq!(cat(&mut fs, "current_tracer").unwrap(), "nop\n");
    assert_eq!(cat(&mut fs, "tracing_on").unwrap(), "1\n");
    echo(&mut fs, "1", "instances/foo/tracing_on").unwrap();
    echo(&mut fs, "in-foo", "instances/foo/trace_marker").unwrap();
    assert!(body(&cat(&mut fs, "trace").unwrap()).is_empty());
    let foo = cat(&mut fs, "instances/foo/trace").unwrap();
    assert!(foo.starts_with("# tracer: function\n"));
    let lines = body(&foo);
    assert_eq!(lines.len(), 1);
    assert!(lines[0].ends_with("tracing_mark_write: in-foo"));
    // An instance's error_log is its own.
    assert_eq!(cat(&mut fs, "instances/foo/error_log").unwrap(), "");
    // Busy while a file is open.
    let fh = fs
        .open(
            "instances/foo/trace_pipe",
            OpenFlags {
                nonblock: true,
                ..OpenFlags::READ
            },
        )
        .unwrap();
    assert_eq!(fs.rmdir("instances/foo"), Err(Errno::EBUSY));
    fs.release(fh).unwrap();
    fs.rmdir("instances/foo").unwrap();
    assert_eq!(fs.stat("instances/foo").unwrap_err(), Errno::ENOENT);
    assert!(fs.read_dir("instances").unwrap().is_empty());
    // mkdir fails cleanly when the host cannot create the buffers.
    fs.host_mut().fail_create = true;
    assert_eq!(fs.mkdir("instances/bar"), Err(Errno::ENOMEM));
    assert!(fs.read_dir("instances").unwrap().is_empty());
}

#[test]
fn trace_pipe_blocking_and_nonblocking() {
    let mut fs = tracefs();
    let mut buf = [0u8; 256];
    let nb = fs
        .open(
            "trace_pipe",
            OpenFlags {
                nonblock: true,
                ..OpenFlags::READ
            },
        )
        .unwrap();
    let bl = fs.open("per_cpu/cpu1/trace_pipe", OpenFlags::READ).unwrap();
    assert_eq!(fs.read(nb, 0, &mut buf), Err(Errno::EAGAIN));
    assert_eq!(fs.poll(bl), Ok(false));
    assert_eq!(fs.read(bl, 0, &mut buf), Err(Errno::EAGAIN));
    record(&mut fs, None, 0, "cpu0 event");
    record(&mut fs, None, 1, "cpu1 event");
    // The per-CPU pipe sees only its CPU; the notify hook is the server's poll.
    assert_eq!(fs.poll(bl), Ok(true));
    let n = fs.read(bl, 0, &mut buf).unwrap();
    assert!(
        std::str::from_utf8(&buf[..n])
            .unwrap()
            .ends_with("cpu1 event\n")
    );
    // A small buffer gets the line in pieces, nothing is lost.
    let mut small = [0u8; 5];
    let mut got = Vec::new();
    while let Ok(n) = fs.read(nb, 0, &mut small) {
        got.extend_from_slice(&small[..n]);
    }
    assert!(String::from_utf8(got).unwrap().ends_with("cpu0 event\n"));
    // Tracing on: still "would block" after something was read.
    assert_eq!(fs.read(nb, 0, &mut buf), Err(Errno::EAGAIN));
    echo(&mut fs, "0", "tracing_on").unwrap();
    assert_eq!(fs.read(nb, 0, &mut buf), Ok(0));
    fs.release(nb).unwrap();
    fs.release(bl).unwrap();
    assert_eq!(fs.release(bl), Err(Errno::EBADF));
}

#[test]
fn wait_keys_and_free_buffer() {
    let mut fs = tracefs();
    fs.mkdir("instances/w").unwrap();
    let p = fs
        .open("instances/w/per_cpu/cpu1/trace_pipe_raw", OpenFlags::READ)
        .unwrap();
    let t = fs.open("trace", OpenFlags::READ).unwrap();
    let key = fs.wait_key(p).unwrap();
    assert_eq!(key.instance.as_deref(), Some("w"));
    assert_eq!(key.cpu, Some(1));
    assert_eq!(fs.is_nonblocking(p), Some(false));
    assert_eq!(fs.wait_key(t), None);
    fs.release(p).unwrap();
    fs.release(t).unwrap();

    // free_buffer: closing shrinks the buffer to its minimum; with disable_on_free it also
    // turns tracing off.
    echo(&mut fs, "1", "instances/w/options/disable_on_free").unwrap();
    assert_eq!(
        cat(&mut fs, "instances/w/buffer_size_kb").unwrap(),
        "1410\n"
    );
    echo(&mut fs, "", "instances/w/free_buffer").unwrap();
    assert_eq!(cat(&mut fs, "instances/w/buffer_size_kb").unwrap(), "7\n");
    assert_eq!(cat(&mut fs, "instances/w/tracing_on").unwrap(), "0\n");
    assert_eq!(
        fs.read_to_end("instances/w/free_buffer"),
        Err(Errno::EINVAL)
    );
}

#[test]
fn the_tree_moves_between_threads() {
    fn is_send<T: Send>() {}
    is_send::<Tracefs<ModelHost>>();
    let mut fs = tracefs();
    let out = std::thread::spawn(move || cat(&mut fs, "tracing_on").unwrap())
        .join()
        .unwrap();
    assert_eq!(out, "1\n");
}

/// `trace_pipe_raw` hands over the ring buffer's pages untouched, in the kernel's page format,
/// and consumes them; a short read gets the page in pieces.
#[test]
fn trace_pipe_raw_passes_real_pages() {
    let mut fs = tracefs();
    echo(&mut fs, "hello", "trace_marker").unwrap();
    fs.write_all("trace_marker", b"no-newline", WriteMode::Truncate)
        .unwrap();
    let fh = fs
        .open(
            "per_cpu/cpu0/trace_pipe_raw",
            OpenFlags {
                nonblock: true,
                ..OpenFlags::READ
            },
        )
        .unwrap();
    let mut page = vec![0u8; 4096];
    let (head, tail) = page.split_at_mut(100);
    assert_eq!(fs.read(fh, 0, head), Ok(100));
    assert_eq!(fs.read(fh, 0, tail), Ok(3996));
    assert_eq!(fs.read(fh, 0, &mut [0u8; 16]), Err(Errno::EAGAIN));
    fs.release(fh).unwrap();
    let p = ftrace_ringbuf::Page::new(&page).unwrap();
    let payloads: Vec<Vec<u8>> = p.events().map(|e| e.unwrap().payload.to_vec()).collect();
    assert_eq!(payloads.len(), 2);
    // `print` entries: trace_entry (8 bytes), ip (8), then the text, which always ends with a
    // newline (added when the write lacks one); payloads are padded to 4 bytes.
    let ip = common::MARK_WRITE_IP.to_ne_bytes();
    assert_eq!(&payloads[0][8..16], &ip);
    assert!(payloads[0][16..].starts_with(b"hello\n"));
    assert!(payloads[1][16..].starts_with(b"no-newline\n"));
    let stats = cat(&mut fs, "per_cpu/cpu0/stats").unwrap();
    assert!(stats.starts_with("entries: 0\n"), "{stats}");
    assert!(stats.contains("\nread events: 2\n"), "{stats}");
}

/// `09-marker`: the capture's marker writes, replayed from the same task, CPU and times, read
/// back through `trace`, `trace` with `raw`, `trace_pipe` and `trace` again, byte for byte.
#[test]
fn marker_session_matches_linux() {
    let mut fs = tracefs();
    let set_writer = |fs: &mut Tracefs<ModelHost>, cpu: u32, ts: u64| {
        let st = fs.host().state(None);
        let mut st = st.borrow_mut();
        st.writer.cpu = cpu;
        st.writer.ts = ts;
    };
    // busybox: `echo hello`, `printf 'no-newline'`, `printf 'two\nlines\n'` (two writes).
    let writes: [(&[u8], u64); 4] = [
        (b"hello\n", 127_974_176_880),
        (b"no-newline", 127_974_667_851),
        (b"two\n", 127_974_953_236),
        (b"lines\n", 127_974_967_282),
    ];
    for (data, ts) in writes {
        set_writer(&mut fs, 1, ts);
        fs.write_all("trace_marker", data, WriteMode::Truncate)
            .unwrap();
    }
    assert_eq!(
        cat(&mut fs, "trace").unwrap(),
        golden("09-marker/trace.txt")
    );
    echo(&mut fs, "1", "options/raw").unwrap();
    assert_eq!(
        cat(&mut fs, "trace").unwrap(),
        golden("09-marker/trace_raw.txt")
    );
    echo(&mut fs, "0", "options/raw").unwrap();
    // markers off: the write is refused (EINVAL, as tracing_mark_write) and nothing recorded.
    echo(&mut fs, "0", "options/markers").unwrap();
    assert_eq!(
        echo(&mut fs, "suppressed-marker", "trace_marker"),
        Err(Errno::EINVAL)
    );
    echo(&mut fs, "1", "options/markers").unwrap();
    assert_eq!(
        cat(&mut fs, "trace").unwrap(),
        golden("09-marker/trace_after_markers0.txt")
    );
    // `printf '\001\000\000\000ABCDEFGH' > trace_marker_raw` on CPU 0.
    set_writer(&mut fs, 0, 128_631_039_000);
    fs.write_all(
        "trace_marker_raw",
        b"\x01\x00\x00\x00ABCDEFGH",
        WriteMode::Truncate,
    )
    .unwrap();
    // `timeout 3 cat trace_pipe` with tracing off: every line, then end of file.
    echo(&mut fs, "0", "tracing_on").unwrap();
    let fh = fs.open("trace_pipe", OpenFlags::READ).unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = fs.read(fh, 0, &mut buf).unwrap();
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    fs.release(fh).unwrap();
    let linux = golden("09-marker/trace_pipe.txt");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        linux.strip_suffix("rc=0\n").unwrap()
    );
    assert_eq!(
        cat(&mut fs, "trace").unwrap(),
        golden("09-marker/trace_after_pipe.txt")
    );
}

/// The filter files are ftrace-core's language end to end: commands, `!`, `>>`, notrace, the
/// graph files' hash order, and the errors of `07-errors` cases 03, 04, 16 and 17.
#[test]
fn filter_files_speak_the_dispatchers_language() {
    let mut fs = tracefs();
    echo(&mut fs, "vfs_read:traceoff", "set_ftrace_filter").unwrap();
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter").unwrap(),
        "#### all functions enabled ####\nvfs_read:traceoff:unlimited\n"
    );
    echo_append(&mut fs, "vfs_* !vfs_write", "set_ftrace_filter").unwrap();
    let text = cat(&mut fs, "set_ftrace_filter").unwrap();
    assert!(text.starts_with("vfs_read\n"), "{text}");
    assert!(!text.contains("vfs_write\n"), "{text}");
    assert!(text.ends_with("vfs_read:traceoff:unlimited\n"), "{text}");
    echo(&mut fs, "!vfs_read:traceoff", "set_ftrace_filter").unwrap();
    assert_eq!(
        cat(&mut fs, "set_ftrace_filter").unwrap(),
        golden("02-files/set_ftrace_filter.txt")
    );
    echo(&mut fs, "ksys_read", "set_ftrace_notrace").unwrap();
    assert_eq!(cat(&mut fs, "set_ftrace_notrace").unwrap(), "ksys_read\n");
    // commands only in set_ftrace_filter; an unknown one, an unknown function: EINVAL
    assert_eq!(
        echo(&mut fs, "vfs_read:traceoff", "set_ftrace_notrace"),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        echo(&mut fs, "vfs_read:bogus_cmd", "set_ftrace_filter"),
        Err(Errno::EINVAL)
    );
    assert_eq!(
        echo(&mut fs, "nonexistent_fn_xyz", "set_graph_function"),
        Err(Errno::EINVAL)
    );
    // a rejected `>` write still truncated the file at open, as in Linux
    assert_eq!(
        cat(&mut fs, "set_ftrace_notrace").unwrap(),
        golden("02-files/set_ftrace_notrace.txt")
    );
    echo(&mut fs, "vfs_read vfs_write", "set_graph_function").unwrap();
    let graph = cat(&mut fs, "set_graph_function").unwrap();
    let mut lines: Vec<&str> = graph.lines().collect();
    lines.sort_unstable();
    assert_eq!(lines, ["vfs_read", "vfs_write"]);
    echo(&mut fs, "", "set_graph_function").unwrap();
    assert_eq!(
        cat(&mut fs, "set_graph_function").unwrap(),
        golden("02-files/set_graph_function.txt")
    );
    assert_eq!(
        cat(&mut fs, "set_graph_notrace").unwrap(),
        golden("02-files/set_graph_notrace.txt")
    );
    // a tracer switch starts the new tracer on empty buffers (Linux `tracer_init`)
    echo(&mut fs, "function", "current_tracer").unwrap();
    record(&mut fs, None, 0, "x");
    assert_eq!(body(&cat(&mut fs, "trace").unwrap()).len(), 1);
    echo(&mut fs, "nop", "current_tracer").unwrap();
    assert_eq!(
        cat(&mut fs, "trace").unwrap(),
        golden("04-function/trace_after_nop.txt")
    );
}
