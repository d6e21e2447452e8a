//! What the user backend's integration tests share.

use std::path::{Path, PathBuf};
use std::process::Command;

pub mod fuzz;

/// Builds `tests/programs/<name>.c` into `dir/<name>` with the kernel-style gcc flags
/// (`-pg -mfentry -mrecord-mcount -mnop-mcount`, non-PIE): the build whose NOP sites the agent
/// patches, and whose function names the tests write into the mount's filter files.
#[allow(dead_code)] // not every test binary uses it
pub fn build_kernel_style(dir: &Path, name: &str) -> PathBuf {
    build_kernel_style_with(dir, name, &[])
}

/// [`build_kernel_style`] with more gcc arguments (`-I` the header directory...).
#[allow(dead_code)] // not every test binary uses it
pub fn build_kernel_style_with(dir: &Path, name: &str, extra: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("tests/programs/{name}.c"));
    let st = Command::new("gcc")
        .args([
            "-O2",
            "-g",
            "-pthread",
            "-pg",
            "-mfentry",
            "-mrecord-mcount",
        ])
        .args(extra)
        .args(["-mnop-mcount", "-fno-pie", "-no-pie", "-o"])
        .arg(&out)
        .arg(src)
        .output()
        .expect("gcc");
    assert!(
        st.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    out
}

/// Builds `tests/programs/kernel_names.c` (kernel-style, with the `ftrace/tracepoint.h` header
/// for the kernel's events it fires) into `dir/kernel_names`, linked with
/// [`build_kernel_names_lib`]'s library (by its path), which defines those events.
// Not every test crate that includes this module builds it.
#[allow(dead_code)]
pub fn build_kernel_names(dir: &Path) -> PathBuf {
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let lib = build_kernel_names_lib(dir);
    build_kernel_style_with(
        dir,
        "kernel_names",
        &[
            &format!("-I{}", include.display()),
            "-Wl,--no-as-needed",
            &lib.display().to_string(),
        ],
    )
}

/// Builds `tests/programs/kernel_names_lib.c` into `dir/libkernel_names.so`: the library a
/// traced tree's shells preload after the agent, whose libc interposers route `fork`, `execve`
/// and `write` through functions named like the kernel's. clang: its patchable entry is one
/// 5-byte NOP, patched with the breakpoint protocol (gcc's five 1-byte NOPs need every thread
/// parked, and a shell blocked in a write to the mount cannot park until the write that asks
/// for the patching returns).
// Not every test crate that includes this module builds the library.
#[allow(dead_code)]
pub fn build_kernel_names_lib(dir: &Path) -> PathBuf {
    let lib = dir.join("libkernel_names.so");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/kernel_names_lib.c");
    let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
    let st = Command::new("clang")
        .args([
            "-O2",
            "-g",
            "-fPIC",
            "-shared",
            "-fpatchable-function-entry=5",
        ])
        .arg(format!("-I{}", include.display()))
        .arg("-o")
        .arg(&lib)
        .arg(src)
        .arg("-ldl")
        .output()
        .expect("clang");
    assert!(
        st.status.success(),
        "clang: {}",
        String::from_utf8_lossy(&st.stderr)
    );
    lib
}

/// Builds `tests/programs/stream_calls.c` into `dir/stream_calls` (gcc, non-PIE, one 5-byte
/// patchable NOP per function), once per test binary: the program the streamed-recording
/// tests record (`stream_calls THREADS CALLS ROUNDS [PAUSE_US]`).
#[allow(dead_code)] // not every test binary uses it
pub fn build_stream_calls(dir: &Path) -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT
        .get_or_init(|| {
            let out = dir.join("stream_calls");
            let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/programs/stream_calls.c");
            let st = Command::new("gcc")
                .args(["-O2", "-pthread", "-fno-pie", "-no-pie"])
                .args(["-fpatchable-function-entry=5", "-o"])
                .arg(&out)
                .arg(src)
                .output()
                .expect("gcc");
            assert!(
                st.status.success(),
                "gcc: {}",
                String::from_utf8_lossy(&st.stderr)
            );
            out
        })
        .clone()
}

/// A streamed recording a test made.
#[allow(dead_code)] // not every test binary uses it
pub struct Streamed {
    /// The recording directory.
    pub dir: PathBuf,
    /// The end-of-recording lines the tool prints.
    pub summary: String,
}

/// Records `stream_calls ARGS` (built into `scratch`) streamed, the default of `record`
/// (the tool drains the rings while the program runs), with `opts` into `scratch/tag`; checks
/// that the program succeeded and that the recording holds events files, not pages.
#[allow(dead_code)] // not every test binary uses it
pub fn record_stream_calls(
    scratch: &Path,
    tag: &str,
    opts: ftrace_user::record::RecordOptions,
    args: &[&str],
) -> Streamed {
    let dir = scratch.join(tag);
    let opts = ftrace_user::record::RecordOptions {
        output: dir.clone(),
        ..opts
    };
    assert!(!opts.overwrite, "streaming is the default");
    let exe = build_stream_calls(scratch);
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let r = ftrace_user::record::record(&opts, exe.to_str().unwrap(), &args).unwrap();
    assert!(r.status.success(), "{}", r.summary);
    assert!(
        !dir.join("per_cpu").exists(),
        "a streamed recording has no pages"
    );
    Streamed {
        dir,
        summary: r.summary,
    }
}
