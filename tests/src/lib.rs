//! Workspace-level integration tests of ftrace-rs, and the helpers they share.
//!
//! The tests live in `tests/tests/`; golden files are read from `../shared/reference` (real
//! Linux 6.12 output), never copied into the repository.

use std::path::{Path, PathBuf};

/// The directory of the Linux 6.12.117 reference captures
/// (`$FTRACE_REFERENCE`, or `../shared/reference/ftrace-6.12.117` beside the checkout).
pub fn reference_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("FTRACE_REFERENCE") {
        return PathBuf::from(dir);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    root.join("../../shared/reference/ftrace-6.12.117")
}

/// The bytes of a reference file, with a clear panic if it is missing.
pub fn reference_file(rel: &str) -> Vec<u8> {
    let path = reference_dir().join(rel);
    std::fs::read(&path).unwrap_or_else(|e| panic!("reference file {}: {e}", path.display()))
}

/// A scratch directory under the system temp dir, unique to this process and thread, removed on
/// drop.
pub struct Scratch(pub PathBuf);

impl Scratch {
    /// A fresh empty directory named after `tag`.
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "ftrace-test-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Writes `bytes` to `dir/rel`, creating its parent directories.
pub fn put(dir: &Path, rel: &str, bytes: &[u8]) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// Lays out the capture of 06-raw-function in `dir` as `ftrace report --raw-dir` reads it: raw
/// pages, kallsyms, a saved_cmdlines made from the pids the text shows, the clock, the header
/// files and the format files.
pub fn raw_function_capture(dir: &Path) {
    for cpu in 0..2 {
        put(
            dir,
            &format!("per_cpu/cpu{cpu}/trace_pipe_raw"),
            &reference_file(&format!("06-raw-function/raw_cpu{cpu}.bin")),
        );
    }
    put(
        dir,
        "kallsyms",
        &reference_file("11-kallsyms/kallsyms_subset.txt"),
    );
    let text = String::from_utf8(reference_file("06-raw-function/trace.txt")).unwrap();
    let mut cmdlines = String::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (comm, pid) = line[..24].trim().rsplit_once('-').unwrap();
        let entry = format!("{pid} {comm}\n");
        if !cmdlines.contains(&entry) {
            cmdlines.push_str(&entry);
        }
    }
    put(dir, "saved_cmdlines", cmdlines.as_bytes());
    for (rel, file) in [
        ("trace_clock", "trace_clock.txt"),
        ("events/header_page", "events__header_page.txt"),
        ("events/header_event", "events__header_event.txt"),
        (
            "events/ftrace/function/format",
            "events__ftrace__function__format.txt",
        ),
        (
            "events/ftrace/print/format",
            "events__ftrace__print__format.txt",
        ),
    ] {
        put(
            dir,
            rel,
            &reference_file(&format!("06-raw-function/{file}")),
        );
    }
}

/// Runs the `ftrace` command line in-process; returns (status, stdout, stderr).
pub fn ftrace(args: &[&str]) -> (u8, Vec<u8>, String) {
    let mut argv = vec!["ftrace"];
    argv.extend_from_slice(args);
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = ftrace_user::cli::run(argv, &mut out, &mut err);
    (code, out, String::from_utf8(err).unwrap())
}
