//! `ftrace report --raw-dir` on the kernel's own raw pages prints the kernel's `trace` and
//! `per_cpu/cpuN/trace` files byte for byte (06-raw-function), and bad input fails with an
//! error naming the file and offset.

use ftrace_integration_tests::{
    Scratch, ftrace, put, raw_function_capture, reference_dir, reference_file,
};

/// The 06-raw-function capture in a fresh scratch directory.
fn capture(tag: &str) -> Scratch {
    let s = Scratch::new(&format!("report-{tag}"));
    raw_function_capture(&s.0);
    s
}

fn assert_bytes(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let (g, w) = (String::from_utf8_lossy(got), String::from_utf8_lossy(want));
        for (i, (a, b)) in g.lines().zip(w.lines()).enumerate() {
            assert_eq!(a, b, "{what}: line {}", i + 1);
        }
        panic!(
            "{what}: {} lines, want {}",
            g.lines().count(),
            w.lines().count()
        );
    }
}

#[test]
fn report_prints_the_kernels_trace_file() {
    let cap = capture("all");
    let dir = cap.0.to_str().unwrap();
    let (code, out, err) = ftrace(&["report", "--raw-dir", dir]);
    assert_eq!(code, 0, "{err}");
    assert_bytes(&out, &reference_file("06-raw-function/trace.txt"), "trace");
}

#[test]
fn report_per_cpu_files_repeat_the_global_totals() {
    let cap = capture("cpu");
    let dir = cap.0.to_str().unwrap();
    for cpu in ["0", "1"] {
        let (code, out, err) = ftrace(&["report", "--raw-dir", dir, "--cpu", cpu]);
        assert_eq!(code, 0, "{err}");
        let want = reference_file(&format!("06-raw-function/per_cpu_cpu{cpu}_trace.txt"));
        assert_bytes(&out, &want, "per-cpu trace");
    }
}

#[test]
fn report_with_raw_option() {
    let cap = capture("raw");
    let dir = cap.0.to_str().unwrap();
    let (code, out, err) = ftrace(&["report", "--raw-dir", dir, "-O", "raw"]);
    assert_eq!(code, 0, "{err}");
    assert_bytes(
        &out,
        &reference_file("06-raw-function/trace_rawopt.txt"),
        "raw",
    );
}

#[test]
fn report_options_toggle_output() {
    let cap = capture("opts");
    let dir = cap.0.to_str().unwrap();
    let (code, out, _) = ftrace(&["report", "--raw-dir", dir, "-O", "nocontext-info"]);
    assert_eq!(code, 0);
    let text = String::from_utf8(out).unwrap();
    assert!(text.starts_with("# tracer: function\n#\ndo_sys_openat2 <-__x64_sys_openat\n"));
    let (code, _, err) = ftrace(&["report", "--raw-dir", dir, "-O", "nosuch-option"]);
    assert_eq!(code, 1);
    assert!(err.contains("nosuch-option"), "{err}");
}

#[test]
fn report_clock_and_latency_format() {
    let cap = capture("clock");
    let dir = cap.0.to_str().unwrap();
    put(
        &cap.0,
        "trace_clock",
        b"local global [counter] uptime perf mono mono_raw boot tai x86-tsc\n",
    );
    let (code, out, err) = ftrace(&["report", "--raw-dir", dir]);
    assert_eq!(code, 0, "{err}");
    let text = String::from_utf8(out).unwrap();
    assert_eq!(
        text.lines().nth(12).unwrap(),
        "              sh-144     [001] .....  80496351514: do_sys_openat2 <-__x64_sys_openat"
    );
    put(&cap.0, "trace_clock", b"local\n");
    let (code, out, err) = ftrace(&[
        "report",
        "--raw-dir",
        dir,
        "-O",
        "latency-format",
        "--uts-release",
        "6.12.117+deb12-amd64",
    ]);
    assert_eq!(code, 0, "{err}");
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[2],
        "# function latency trace v1.1.5 on 6.12.117+deb12-amd64"
    );
    assert_eq!(
        lines[4],
        "# latency: 0 us, #56/56, CPU#0 | (M:desktop VP:0, KP:0, SP:0 HP:0 #P:2)"
    );
    // Relative to the earliest event; the next event is 29.2 ms later.
    assert_eq!(
        lines[18],
        "      sh-144       1.....    0us*: do_sys_openat2 <-__x64_sys_openat"
    );
}

#[test]
fn report_errors_name_file_and_offset() {
    // Missing kallsyms.
    let cap = capture("missing");
    std::fs::remove_file(cap.0.join("kallsyms")).unwrap();
    let (code, _, err) = ftrace(&["report", "--raw-dir", cap.0.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("kallsyms"), "{err}");

    // A truncated page.
    let cap = capture("trunc");
    let raw = cap.0.join("per_cpu/cpu1/trace_pipe_raw");
    let bytes = std::fs::read(&raw).unwrap();
    std::fs::write(&raw, &bytes[..100]).unwrap();
    let (code, _, err) = ftrace(&["report", "--raw-dir", cap.0.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("cpu1/trace_pipe_raw") && err.contains("offset 0"),
        "{err}"
    );

    // An unknown event id in the first event of CPU 0 (header word at 16, type at 20).
    let cap = capture("badid");
    let raw = cap.0.join("per_cpu/cpu0/trace_pipe_raw");
    let mut bytes = std::fs::read(&raw).unwrap();
    bytes[20] = 0x77;
    std::fs::write(&raw, &bytes).unwrap();
    let (code, _, err) = ftrace(&["report", "--raw-dir", cap.0.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        err.contains("cpu0/trace_pipe_raw") && err.contains("offset 16") && err.contains("119"),
        "{err}"
    );

    // A commit word larger than the page.
    let cap = capture("commit");
    let raw = cap.0.join("per_cpu/cpu0/trace_pipe_raw");
    let mut bytes = std::fs::read(&raw).unwrap();
    bytes[8..12].copy_from_slice(&5000u32.to_le_bytes());
    std::fs::write(&raw, &bytes).unwrap();
    let (code, _, err) = ftrace(&["report", "--raw-dir", cap.0.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(err.contains("offset 8"), "{err}");
}

#[test]
fn reference_is_present() {
    assert!(
        reference_dir()
            .join("06-raw-function/raw_cpu0.bin")
            .exists()
    );
}

/// Encodes `(delta_ns, payload)` events into one 4096-byte `buffer_data_page`.
fn page(start_ts: u64, events: &[(u32, Vec<u8>)]) -> Vec<u8> {
    use ftrace_ringbuf::page::header_word;
    let mut data = Vec::new();
    for (delta, payload) in events {
        assert!(payload.len() % 4 == 0 && payload.len() <= 112);
        data.extend_from_slice(&header_word((payload.len() / 4) as u32, *delta).to_le_bytes());
        data.extend_from_slice(payload);
    }
    let mut p = Vec::with_capacity(4096);
    p.extend_from_slice(&start_ts.to_le_bytes());
    p.extend_from_slice(&(data.len() as u64).to_le_bytes());
    p.extend_from_slice(&data);
    p.resize(4096, 0);
    p
}

#[test]
fn report_function_graph_capture_with_graph_options() {
    use ftrace_core::entry::{FtraceGraphEntEntry, FtraceGraphRetEntry, Pod, TraceEntry};
    let ent = |type_| TraceEntry {
        type_,
        flags: 0,
        preempt_count: 0,
        pid: 1439,
    };
    let (vfs_read, rw_verify) = (0xffffffff81457344u64, 0xffffffff81456f04u64);
    let e = |func, depth| {
        FtraceGraphEntEntry {
            ent: ent(11),
            func,
            depth,
        }
        .as_bytes()
        .to_vec()
    };
    let r = |func, depth, calltime, rettime| {
        FtraceGraphRetEntry {
            ent: ent(10),
            func,
            depth,
            overrun: 0,
            calltime,
            rettime,
            backport_calltime: 0,
            backport_rettime: 0,
        }
        .as_bytes()
        .to_vec()
    };
    // A 20-byte entry is padded to 20 (5 words); returns are 56 bytes (14 words).
    let t0 = 43_418_351_000u64;
    let pg = page(
        t0,
        &[
            (0, e(vfs_read, 0)),
            (30_000, e(rw_verify, 1)),
            (60_053, r(rw_verify, 1, t0 + 30_000, t0 + 90_053)),
            (594_941, r(vfs_read, 0, t0, t0 + 684_994)),
        ],
    );
    let cap = Scratch::new("graph");
    let d = &cap.0;
    put(d, "per_cpu/cpu0/trace_pipe_raw", &pg);
    put(d, "per_cpu/cpu1/trace_pipe_raw", b"");
    put(
        d,
        "kallsyms",
        b"ffffffff81456f00 T rw_verify_area\nffffffff81457340 T vfs_read\nffffffff81457c10 T vfs_write\n",
    );
    put(d, "saved_cmdlines", b"1439 dd\n");
    put(d, "tracer", b"function_graph\n");
    let dir = d.to_str().unwrap();
    let (code, out, err) = ftrace(&["report", "--raw-dir", dir]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "# tracer: function_graph\n#\n\
         # CPU  DURATION                  FUNCTION CALLS\n\
         # |     |   |                     |   |   |   |\n\
         \x200)               |  vfs_read() {\n\
         \x200) + 60.053 us   |    rw_verify_area();\n\
         \x200) ! 684.994 us  |  }\n"
    );
    let (code, out, err) = ftrace(&[
        "report",
        "--raw-dir",
        dir,
        "-O",
        "funcgraph-proc",
        "-O",
        "funcgraph-tail",
        "-O",
        "nofuncgraph-cpu",
    ]);
    assert_eq!(code, 0, "{err}");
    let out = String::from_utf8(out).unwrap();
    assert!(
        out.ends_with("\n   dd-1439     | ! 684.994 us  |  } /* vfs_read */\n"),
        "{out}"
    );
}
