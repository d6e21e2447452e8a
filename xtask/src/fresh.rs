//! `cargo xtask fresh-check`: the README's test command as CI runs it on a fresh machine.
//!
//! CI runs `bash .ci/run` on the submitting machine, where caches and hand installs can hide a
//! missing install step (issue #15: a `cargo metadata --offline` that only worked because an
//! earlier build had filled `~/.cargo/registry`). This task takes those caches away and runs the
//! command as CI does:
//!
//! - a fresh `git clone` of the committed `HEAD` (uncommitted changes are not part of it: the
//!   task says so when the work tree is dirty) in a new directory, with a read-only copy of
//!   `../shared` beside it, as CI lays it out;
//! - an empty `CARGO_HOME` (registry, git checkouts and installed tools such as `bindgen`
//!   start empty; rustup's toolchains are kept through `RUSTUP_HOME`), no `CARGO_TARGET_DIR`, so
//!   the clone's own empty `target/`;
//! - a `PATH` whose cargo bin directory holds only rustup's proxies (`cargo`, `rustc`, ...): a
//!   tool an earlier `cargo install` left there (`bindgen`) must be installed again by the run;
//! - an empty kernel cache (`RFL_CACHE` in the new directory stands for a machine without
//!   `/var/cache/ftrace-rs`), so the Rust-for-Linux stage builds its kernel from scratch;
//! - `CI=true`, standard input from `/dev/null`.
//!
//! Debian packages, and tools installed outside cargo's bin directory, stay installed (removing them would uninstall the machine's tools); the
//! `apt` stage and `scripts/rfl/install.sh` are what install them on a new machine. The output
//! goes to the terminal and to `ci.log` in the directory, which is kept (`FRESH_DIR` chooses
//! it; default `/tmp/ftrace-rs-fresh`, emptied first).

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// `cargo xtask fresh-check`.
pub fn fresh_check() -> Result<(), String> {
    let root = crate::root();
    let dir = env::var_os("FRESH_DIR")
        .map_or_else(|| PathBuf::from("/tmp/ftrace-rs-fresh"), PathBuf::from);
    if dir.exists() {
        make_writable(&dir);
        fs::remove_dir_all(&dir).map_err(|e| format!("cannot empty {}: {e}", dir.display()))?;
    }
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;

    let dirty = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=no"])
        .current_dir(&root)
        .output()
        .map_err(|e| format!("git status: {e}"))?;
    if !dirty.stdout.is_empty() {
        println!("fresh-check: the work tree has uncommitted changes; only HEAD is checked");
    }

    let clone = dir.join("main");
    crate::status(
        Command::new("git")
            .args(["clone", "--quiet", "--no-hardlinks"])
            .arg(&root)
            .arg(&clone),
    )?;
    let shared = root.join("../shared");
    if shared.is_dir() {
        crate::status(
            Command::new("cp")
                .arg("-a")
                .arg(&shared)
                .arg(dir.join("shared")),
        )?;
        crate::status(
            Command::new("chmod")
                .args(["-R", "a-w"])
                .arg(dir.join("shared")),
        )?;
    } else {
        println!("fresh-check: no ../shared beside the repository; the golden tests will fail");
    }

    let cargo_home = dir.join("cargo-home");
    let rfl_cache = dir.join("rfl-cache");
    fs::create_dir_all(&cargo_home).map_err(|e| e.to_string())?;
    let rustup_home = env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".rustup")))
        .ok_or("neither RUSTUP_HOME nor HOME is set")?;

    let path = toolchain_only_path(&dir.join("toolchain-bin"))?;

    let log = dir.join("ci.log");
    println!(
        "fresh-check: {} (CARGO_HOME {}, RFL_CACHE {}), log {}",
        clone.display(),
        cargo_home.display(),
        rfl_cache.display(),
        log.display()
    );
    let start = Instant::now();
    let mut cmd = Command::new("bash");
    cmd.args([
        "-o",
        "pipefail",
        "-c",
        "bash .ci/run 2>&1 | tee \"$FRESH_LOG\"",
    ])
    .current_dir(&clone)
    .stdin(Stdio::null())
    .env("CI", "true")
    .env("CARGO_HOME", &cargo_home)
    .env("RUSTUP_HOME", &rustup_home)
    .env("RFL_CACHE", &rfl_cache)
    .env("PATH", &path)
    .env("FRESH_LOG", &log);
    // What the calling cargo and this task set must not leak into the run.
    for var in [
        "CARGO_TARGET_DIR",
        "CARGO",
        "CARGO_MANIFEST_DIR",
        "CARGO_PKG_NAME",
        "RUSTC",
        "RUSTC_WRAPPER",
        "RUSTFLAGS",
        "RUSTUP_TOOLCHAIN",
        "RUSTDOCFLAGS",
    ] {
        cmd.env_remove(var);
    }
    let result = crate::status(&mut cmd);
    let secs = start.elapsed().as_secs();
    println!(
        "fresh-check: {} after {} min {} s",
        if result.is_ok() { "passed" } else { "FAILED" },
        secs / 60,
        secs % 60
    );
    result
}

/// `PATH` with the caller's cargo bin directory replaced by `proxies`, a directory of links to
/// the rustup proxies found there (entries that resolve to its `rustup`); the fresh
/// `CARGO_HOME`'s own bin directory comes first, so what the run installs is found.
fn toolchain_only_path(proxies: &Path) -> Result<std::ffi::OsString, String> {
    let cargo_bin = env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .ok_or("neither CARGO_HOME nor HOME is set")?
        .join("bin");
    let rustup = fs::canonicalize(cargo_bin.join("rustup")).ok();
    fs::create_dir_all(proxies).map_err(|e| format!("{}: {e}", proxies.display()))?;
    if let Ok(entries) = fs::read_dir(&cargo_bin) {
        for entry in entries.flatten() {
            let target = fs::canonicalize(entry.path()).ok();
            if target.is_some() && target == rustup {
                std::os::unix::fs::symlink(entry.path(), proxies.join(entry.file_name()))
                    .map_err(|e| format!("{}: {e}", proxies.display()))?;
            }
        }
    }
    let fresh_bin = proxies.with_file_name("cargo-home").join("bin");
    let mut dirs = vec![fresh_bin];
    for d in env::split_paths(&env::var_os("PATH").unwrap_or_default()) {
        dirs.push(if d == cargo_bin {
            proxies.to_path_buf()
        } else {
            d
        });
    }
    env::join_paths(dirs).map_err(|e| format!("PATH: {e}"))
}

/// `remove_dir_all` cannot enter the read-only copy of `shared/` of an earlier run.
fn make_writable(dir: &Path) {
    let _ = Command::new("chmod").args(["-R", "u+w"]).arg(dir).status();
}
