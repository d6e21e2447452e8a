//! Workspace-level integration tests of ftrace-rs, and the helpers they share.
//!
//! The tests live in `tests/tests/`; golden files are read from `../shared/reference` (real
//! Linux 6.12 output), never copied into the repository.

use std::path::PathBuf;

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
