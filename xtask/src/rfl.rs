//! `cargo xtask rfl-test`: the Rust-for-Linux integration test (issue #11), also the `rfl`
//! stage of `cargo xtask test`.
//!
//! Runs `scripts/rfl-integration.sh`, which installs the toolchain on a fresh Debian 12 machine,
//! builds (or takes from its cache) a small Linux 6.12 with Rust, builds the `backends/rfl`
//! kernel module with the core crates compiled by Kbuild, boots it in QEMU and checks the
//! module's trace output. The script's own `N passed, N failed` line is the verdict; this task
//! forwards its exit status. Arguments after `rfl-test` are passed to the script's environment
//! as `NAME=value` pairs (e.g. `cargo xtask rfl-test RFL_EXPECT_WRONG=1`).
//!
//! The stage runs under a time budget ([`STAGE_BUDGET`]): a fresh machine installs packages
//! (~2 min) and builds the kernel (4-15 min); a warm cache needs well under a minute. Past the
//! budget the script's whole process group (make, QEMU) is killed and the stage fails.

use std::os::unix::process::CommandExt;
use std::process::{Command, ExitCode};
use std::thread::sleep;
use std::time::{Duration, Instant};

/// The `rfl` stage's time budget, fresh kernel build included.
pub const STAGE_BUDGET: Duration = Duration::from_secs(30 * 60);

/// `cargo xtask rfl-test [NAME=value]...`.
pub fn rfl_test(args: &[String]) -> ExitCode {
    match run(args, None) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask rfl-test: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The `rfl` stage of `cargo xtask test`: the integration script within [`STAGE_BUDGET`]
/// (`RFL_BUDGET_SECS` overrides it).
pub fn rfl_stage() -> Result<(), String> {
    let budget = std::env::var("RFL_BUDGET_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(STAGE_BUDGET, Duration::from_secs);
    run(&[], Some(budget))
}

/// Runs the integration script with `args` (`NAME=value` environment settings), killing it
/// and everything it started if it runs longer than `budget`.
fn run(args: &[String], budget: Option<Duration>) -> Result<(), String> {
    let script = crate::root().join("scripts/rfl-integration.sh");
    let mut cmd = Command::new("bash");
    cmd.arg(&script).current_dir(crate::root());
    for a in args {
        match a.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                cmd.env(k, v);
            }
            _ => return Err(format!("expected NAME=value, got {a}")),
        }
    }
    // Its own process group, so that a timeout can stop make and QEMU too.
    cmd.process_group(0);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", script.display()))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(s)) if s.success() => return Ok(()),
            Ok(Some(s)) => return Err(format!("{} exited with {s}", script.display())),
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for {}: {e}", script.display())),
        }
        if budget.is_some_and(|b| start.elapsed() > b) {
            let group = format!("-{}", child.id());
            let _ = Command::new("kill").args(["-TERM", "--", &group]).status();
            sleep(Duration::from_secs(5));
            let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
            let _ = child.wait();
            return Err(format!(
                "{} ran past its budget of {} s and was stopped",
                script.display(),
                budget.unwrap_or_default().as_secs()
            ));
        }
        sleep(Duration::from_millis(500));
    }
}
