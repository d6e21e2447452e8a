//! What the user backend's integration tests share.

use std::path::{Path, PathBuf};
use std::process::Command;

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
