//! `cargo xtask`: the project's tasks.
//!
//! - `cargo xtask test`: every check CI runs, on a fresh machine. It installs the Debian packages
//!   the tests need (when run as root and they are missing), then runs formatting, clippy,
//!   no_std builds, docs, unit/property/integration tests, the loom models, real programs
//!   traced completely and compared with uftrace (`third_party.rs`), the bare-metal kernel in QEMU and the Rust-for-Linux module in QEMU (`rfl.rs`, which installs its own
//!   toolchain and caches its kernel build), and ends with a `N passed, N failed` line.
//!   `--skip STAGE` leaves a stage out (for local iteration only).
//! - `cargo xtask fresh-check`: `.ci/run` in a fresh clone with an empty `CARGO_HOME` and an
//!   empty kernel cache, as CI runs it on a new machine (see `fresh.rs`).
//! - `cargo xtask demo`, `cargo xtask bench-vs-uftrace`: the userspace backend's main job and
//!   its comparison with uftrace (see `user.rs`).
//! - `cargo xtask third-party`: real programs (Lua, zstd, ripgrep) traced completely, counts
//!   checked against uftrace's (see `third_party.rs`).

mod fresh;
mod qemu;
mod rfl;
mod third_party;
mod user;

use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

/// The `#![no_std]` library crates: each must build without its default features.
const CORE_CRATES: &[&str] = &[
    "ftrace-core",
    "ftrace-ringbuf",
    "ftrace-patch",
    "ftrace-tracers",
    "ftrace-tracefs",
];

/// Debian packages the tests need, as (what proves it is installed: a command name, or an
/// absolute path of a file it installs, package).
const APT_PACKAGES: &[(&str, &str)] = &[
    ("qemu-system-x86_64", "qemu-system-x86"),
    ("clang", "clang"),
    // C++ programs of backends/user/tests/unwind.rs (g++; clang++ comes with clang).
    ("g++", "g++"),
    ("uftrace", "uftrace"),
    ("trace-cmd", "trace-cmd"),
    ("fusermount3", "fuse3"),
    // The kernel's ftracetest (backends/user/tests/ftracetest.rs) is extracted from it.
    ("/usr/src/linux-source-6.12.tar.xz", "linux-source-6.12"),
    // `cargo xtask stream-check` measures peak RSS with `/usr/bin/time -v`.
    ("/usr/bin/time", "time"),
];

/// Whether the proof of an [`APT_PACKAGES`] entry is there: the file at an absolute path, or
/// the command on `PATH`.
fn is_installed(proof: &str) -> bool {
    if proof.starts_with('/') {
        Path::new(proof).exists()
    } else {
        have_command(proof)
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("demo") => done(user::demo()),
        Some("fresh-check") => done(fresh::fresh_check()),
        Some("bench-vs-uftrace") => done(user::bench_vs_uftrace(&args[1..])),
        Some("stream-check") => done(user::stream_check(&args[1..])),
        Some("third-party") => done(third_party::third_party(&args[1..])),
        Some("qemu-test") => match qemu::qemu_test(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("xtask qemu-test: {e}");
                ExitCode::FAILURE
            }
        },
        Some("rfl-test") => rfl::rfl_test(&args[1..]),
        _ => {
            eprintln!("usage: cargo xtask test [--skip STAGE]...");
            eprintln!("       cargo xtask qemu-test [--expect-wrong]");
            eprintln!("       cargo xtask rfl-test [NAME=value]...  (scripts/rfl-integration.sh)");
            eprintln!("       cargo xtask fresh-check  (.ci/run in a fresh clone, empty caches)");
            eprintln!("       cargo xtask demo");
            eprintln!("       cargo xtask bench-vs-uftrace [N] [ROUNDS]");
            eprintln!("       cargo xtask stream-check [MILLION_CALLS] [SCALE]");
            eprintln!(
                "       cargo xtask third-party [lua|zstd|rg]...  (real programs vs uftrace)"
            );
            eprintln!("stages: apt fmt clippy no-std package doc test loom third-party qemu rfl");
            ExitCode::from(2)
        }
    }
}

fn done(r: Result<(), String>) -> ExitCode {
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn cargo() -> Command {
    let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    cmd
}

struct Stages {
    skip: Vec<String>,
    passed: usize,
    failed: Vec<String>,
}

impl Stages {
    fn run(&mut self, name: &str, label: &str, f: impl FnOnce() -> Result<(), String>) {
        if self.skip.iter().any(|s| s == name) {
            println!("xtask: skipping {label}");
            return;
        }
        println!("\n==> xtask: {label}");
        let start = Instant::now();
        let result = f();
        let secs = start.elapsed().as_secs_f64();
        match result {
            Ok(()) => {
                println!("<== xtask: {label}: ok ({secs:.1} s)");
                self.passed += 1;
            }
            Err(e) => {
                println!("<== xtask: {label}: FAILED ({secs:.1} s): {e}");
                self.failed.push(label.to_string());
            }
        }
    }
}

fn status(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    match cmd.status() {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => Err(format!("{shown} exited with {s}")),
        Err(e) => Err(format!("{shown}: {e}")),
    }
}

fn have_command(name: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {name} >/dev/null 2>&1")])
        .status()
        .is_ok_and(|s| s.success())
}

/// `cargo package` verifies each crate against the others through a temporary local registry,
/// which cargo unpacks under `$CARGO_HOME/registry/src/-<hash>/` and reuses when the version is
/// unchanged: a stale copy of an older `ftrace-*-0.1.0` would be verified instead of the current
/// source. Remove those unpacked copies (only local registries' directories start with `-`).
fn forget_unpacked_local_packages() {
    let home = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")));
    let Some(src) = home.map(|h| h.join("registry/src")) else {
        return;
    };
    let Ok(registries) = std::fs::read_dir(src) else {
        return;
    };
    for registry in registries.flatten() {
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let Ok(crates) = std::fs::read_dir(registry.path()) else {
            continue;
        };
        for krate in crates.flatten() {
            let name = krate.file_name();
            if CORE_CRATES
                .iter()
                .any(|c| name.to_string_lossy().starts_with(&format!("{c}-")))
            {
                let _ = std::fs::remove_dir_all(krate.path());
            }
        }
    }
}

fn install_packages() -> Result<(), String> {
    let missing: Vec<&str> = APT_PACKAGES
        .iter()
        .filter(|(proof, _)| !is_installed(proof))
        .map(|(_, pkg)| *pkg)
        .collect();
    if missing.is_empty() {
        println!("all test tools present");
        return Ok(());
    }
    let is_root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| o.stdout == b"0\n");
    if !is_root {
        return Err(format!(
            "missing packages {missing:?}: install them or run as root"
        ));
    }
    status(Command::new("apt-get").arg("update").arg("-qq"))?;
    status(
        Command::new("apt-get")
            .args(["install", "-y", "-qq", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

fn test(args: &[String]) -> ExitCode {
    let mut skip = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--skip" => skip.extend(it.next().cloned()),
            other => {
                eprintln!("xtask test: unknown argument {other}");
                return ExitCode::from(2);
            }
        }
    }
    let mut st = Stages {
        skip,
        passed: 0,
        failed: Vec::new(),
    };
    let started = Instant::now();

    st.run("apt", "install test tools", install_packages);
    st.run("fmt", "cargo fmt --check", || {
        status(cargo().args(["fmt", "--all", "--", "--check"]))
    });
    st.run("clippy", "clippy -D warnings", || {
        status(cargo().args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ]))
    });
    st.run("no-std", "no_std builds of the core crates", || {
        for krate in CORE_CRATES {
            status(cargo().args(["build", "-p", krate, "--no-default-features"]))?;
        }
        Ok(())
    });
    st.run("package", "cargo package of the library crates", || {
        forget_unpacked_local_packages();
        let mut cmd = cargo();
        cmd.args(["package", "--allow-dirty", "--quiet"]);
        for krate in CORE_CRATES {
            cmd.args(["-p", krate]);
        }
        status(&mut cmd)
    });
    st.run("doc", "cargo doc without warnings", || {
        status(
            cargo()
                .args(["doc", "--no-deps", "--workspace"])
                .env("RUSTDOCFLAGS", "-D warnings"),
        )
    });
    st.run("test", "unit, property and integration tests", || {
        status(cargo().args(["test", "--workspace", "--profile", "ci"]))
    });
    st.run("loom", "loom models", || {
        let loom_crates: Vec<&str> = CORE_CRATES
            .iter()
            .copied()
            .filter(|c| root().join(c).join("tests/loom.rs").exists())
            .collect();
        if loom_crates.is_empty() {
            println!("no loom models yet");
        }
        for krate in loom_crates {
            status(
                cargo()
                    .args(["test", "-p", krate, "--test", "loom", "--release"])
                    .env("RUSTFLAGS", "--cfg loom")
                    .env("CARGO_TARGET_DIR", root().join("target/loom")),
            )?;
        }
        Ok(())
    });

    st.run(
        "third-party",
        "real programs traced completely, counts checked against uftrace (cargo xtask third-party)",
        || third_party::third_party(&[]),
    );
    st.run(
        "qemu",
        "bare-metal kernel in QEMU (cargo xtask qemu-test)",
        || qemu::qemu_test(&[]),
    );
    st.run(
        "rfl",
        "Rust-for-Linux module in QEMU (cargo xtask rfl-test, 30 min budget)",
        rfl::rfl_stage,
    );

    let mins = started.elapsed().as_secs_f64() / 60.0;
    println!("\nxtask test finished in {mins:.1} min");
    for f in &st.failed {
        println!("  failed: {f}");
    }
    println!("xtask: {} passed, {} failed", st.passed, st.failed.len());
    if st.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
