//! `cargo xtask rfl-test`: the Rust-for-Linux integration test (issue #11).
//!
//! Runs `scripts/rfl-integration.sh`, which installs the toolchain on a fresh Debian 12 machine,
//! builds (or takes from its cache) a small Linux 6.12 with Rust, builds the `backends/rfl`
//! kernel module with the core crates compiled by Kbuild, boots it in QEMU and checks the
//! module's trace output. The script's own `N passed, N failed` line is the verdict; this task
//! forwards its exit status. Arguments after `rfl-test` are passed to the script's environment
//! as `NAME=value` pairs (e.g. `cargo xtask rfl-test RFL_EXPECT_WRONG=1`).

use std::process::{Command, ExitCode};

/// Runs the integration script; `args` are `NAME=value` environment settings.
pub fn rfl_test(args: &[String]) -> ExitCode {
    let script = crate::root().join("scripts/rfl-integration.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).current_dir(crate::root());
    for a in args {
        match a.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                cmd.env(k, v);
            }
            _ => {
                eprintln!("xtask rfl-test: expected NAME=value, got {a}");
                return ExitCode::from(2);
            }
        }
    }
    match cmd.status() {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("xtask rfl-test: {} exited with {s}", script.display());
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("xtask rfl-test: cannot run {}: {e}", script.display());
            ExitCode::FAILURE
        }
    }
}
