//! `cargo xtask third-party [PROGRAM]...`: real programs nobody on this project wrote, traced
//! completely by `ftrace record` and by `uftrace record`, side by side.
//!
//! The programs, each built once into `target/third-party` with `-fpatchable-function-entry=5`
//! (so both tools trace the same binary: ours through its site list, uftrace through `-P .`):
//! - `lua`: Debian's Lua 5.4 interpreter (source package `lua5.4`) running a script of
//!   recursion, string formatting and a table sort;
//! - `zstd`: Debian's zstd compressor (source package `libzstd`) compressing a generated file
//!   with two worker threads (`-T2 -12`);
//! - `rg`: ripgrep from crates.io (a multi-threaded Rust search tool) searching the other two's
//!   sources with two threads, built with `-Zinstrument-mcount` (uftrace cannot patch rustc's
//!   NOP form; the agent traces `mcount` builds too).
//!
//! Sources come from Debian's source packages (`apt-get source --download-only`, through a
//! private apt configuration in `target/third-party/apt` so the machine's own sources list is
//! untouched) and crates.io. Every run is without address-space randomisation (`setarch -R`),
//! Lua with a fixed string-hash seed, so a program makes the same calls each time.
//!
//! For each program and tracer (function, function_graph) it checks, and fails otherwise:
//! the traced program's output is the untraced program's; the recording lost nothing; every
//! function's call count in `ftrace report` equals uftrace's (`uftrace report -f call`, library
//! calls off: `--no-libcall`). A function whose count differs between two uftrace runs depends
//! on thread scheduling; its count must lie within what uftrace saw. A function listed as
//! run-dependent (with the reason) is not compared. Counts are compared per address (a
//! linker that folds identical functions gives one address several names). It prints per program
//! the calls (every program recorded with the tool's default rings, what users run), both
//! tools' end-to-end record time (the best of two runs each, the untraced one the best of
//! three: these programs' own time varies by tens of percent), cost per call over the untraced
//! run, and bytes on disk per call.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Instant;

use crate::{cargo, root, status};

/// The Debian release whose source packages are fetched (the machines run Debian 12).
const DEBIAN_SOURCES: &str = "Types: deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
";

/// ripgrep's version from crates.io.
const RIPGREP: &str = "14.1.1";

/// The flags every C program is built with: a 5-byte NOP at each function entry.
const CFLAGS: &str = "-g -fpatchable-function-entry=5";

/// The Lua workload: recursion, string formatting, a sort with a Lua comparison function.
const LUA_SCRIPT: &str = r#"local function fib(n) if n < 2 then return n end return fib(n-1) + fib(n-2) end
local t = {}
for i = 1, 20000 do t[i] = string.format("%08d", (i * 7919) % 100003) end
table.sort(t, function(a, b) return a > b end)
local s = 0
for i = 1, #t, 97 do s = s + tonumber(t[i]) end
print(fib(22), #t, s, string.rep("ab", 3):upper())
"#;

/// How a program's functions are made traceable.
#[derive(Clone, Copy)]
enum Instrumentation {
    /// `-fpatchable-function-entry=5`: uftrace patches them at start (`-P .`).
    PatchableEntry,
    /// `call mcount` in each prologue: uftrace's usual build.
    Mcount,
}

/// A program ready to run: the binary and its arguments, run in `cwd`.
struct Workload {
    name: &'static str,
    exe: PathBuf,
    args: Vec<String>,
    cwd: PathBuf,
    /// How its functions were made traceable, which tells uftrace how to trace them.
    instrumentation: Instrumentation,
    /// Functions whose call count changes from run to run (thread timing, a random hash
    /// seed), as a part of their name, with why: their counts may differ from uftrace's.
    /// Every other function's count must be equal.
    run_dependent: &'static [(&'static str, &'static str)],
}

fn base() -> PathBuf {
    let d = root().join("target/third-party");
    std::fs::create_dir_all(&d).expect("target/third-party");
    d
}

/// `cargo xtask third-party [lua|zstd|rg]...` (all three without arguments).
pub fn third_party(args: &[String]) -> Result<(), String> {
    let wanted: Vec<&str> = if args.is_empty() {
        vec!["lua", "zstd", "rg"]
    } else {
        args.iter().map(String::as_str).collect()
    };
    status(cargo().args([
        "build",
        "--release",
        "-p",
        "ftrace-user",
        "-p",
        "ftrace-agent",
    ]))?;
    let tool = root().join("target/release/ftrace");
    let mut failures = Vec::new();
    let mut table = Vec::new();
    for name in wanted {
        let w = match name {
            "lua" => lua()?,
            "zstd" => zstd()?,
            "rg" => ripgrep()?,
            other => return Err(format!("unknown program {other:?} (lua, zstd, rg)")),
        };
        compare(&tool, &w, &mut table, &mut failures)?;
    }
    println!(
        "\nprogram  tracer          calls      untraced  ftrace record          uftrace record         cheaper"
    );
    for row in &table {
        println!("{row}");
    }
    if failures.is_empty() {
        println!("third-party: every count equal to uftrace's, nothing lost, outputs as untraced");
        Ok(())
    } else {
        Err(format!("third-party:\n  {}", failures.join("\n  ")))
    }
}

/// The source tree of Debian source package `pkg` (its upstream tarball, unpacked once).
fn debian_source(pkg: &str) -> Result<PathBuf, String> {
    let dir = base().join("src").join(pkg);
    let stamp = dir.join(".unpacked");
    if stamp.exists() {
        return one_subdir(&dir);
    }
    let apt = base().join("apt");
    std::fs::create_dir_all(apt.join("parts")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(apt.join("lists/partial")).map_err(|e| e.to_string())?;
    std::fs::write(apt.join("parts/debian-src.sources"), DEBIAN_SOURCES)
        .map_err(|e| e.to_string())?;
    let apt_get = |args: &[&str], cwd: &Path| {
        let mut c = Command::new("apt-get");
        c.current_dir(cwd)
            .arg("-q")
            .arg("-o")
            .arg("Dir::Etc::SourceList=/dev/null")
            .arg("-o")
            .arg(format!(
                "Dir::Etc::SourceParts={}",
                apt.join("parts").display()
            ))
            .arg("-o")
            .arg(format!("Dir::State::Lists={}", apt.join("lists").display()))
            .args(args);
        c
    };
    if !apt.join("lists/.updated").exists() {
        status(&mut apt_get(&["update"], &apt))?;
        std::fs::write(apt.join("lists/.updated"), "").map_err(|e| e.to_string())?;
    }
    let dl = base().join("src").join(format!("{pkg}.download"));
    let _ = std::fs::remove_dir_all(&dl);
    std::fs::create_dir_all(&dl).map_err(|e| e.to_string())?;
    status(&mut apt_get(&["source", "--download-only", pkg], &dl))?;
    let orig = std::fs::read_dir(&dl)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.contains(".orig.tar.") && !n.ends_with(".asc")
        })
        .ok_or(format!("no upstream tarball in {}", dl.display()))?;
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    status(
        Command::new("tar")
            .arg("-xf")
            .arg(&orig)
            .arg("-C")
            .arg(&dir),
    )?;
    std::fs::write(&stamp, "").map_err(|e| e.to_string())?;
    let _ = std::fs::remove_dir_all(&dl);
    one_subdir(&dir)
}

/// The one directory inside `dir` (an unpacked tarball's top level).
fn one_subdir(dir: &Path) -> Result<PathBuf, String> {
    let mut subs: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_dir())
        .collect();
    match subs.len() {
        1 => Ok(subs.remove(0)),
        n => Err(format!("{}: {n} directories, expected one", dir.display())),
    }
}

fn lua() -> Result<Workload, String> {
    let src = debian_source("lua5.4")?;
    let exe = src.join("src/lua");
    if !exe.exists() {
        status(
            Command::new("make")
                .current_dir(src.join("src"))
                .arg("-j2")
                .arg("linux-noreadline")
                // A fixed string-hash seed (Lua 5.4 mixes in the time and addresses).
                .arg(format!("MYCFLAGS={CFLAGS} -D'luai_makeseed(L)=0'"))
                .stdout(Stdio::null()),
        )?;
    }
    let cwd = base().join("runs/lua");
    std::fs::create_dir_all(&cwd).map_err(|e| e.to_string())?;
    std::fs::write(cwd.join("bench.lua"), LUA_SCRIPT).map_err(|e| e.to_string())?;
    Ok(Workload {
        name: "lua",
        exe,
        args: vec!["bench.lua".into()],
        cwd,
        instrumentation: Instrumentation::PatchableEntry,
        // 5.7 M calls in 0.02-0.04 s of its own time. Recorded with a 256 MiB ring until the
        // twentieth session: the default ring of 2026-12-01 (8 MiB, no growth) dropped 1-20 %
        // of its calls; the default since (2 MiB growing to 128 MiB) lost none in any
        // fresh-check of the eighteenth to twentieth sessions (it was printed beside).
        run_dependent: &[],
    })
}

fn zstd() -> Result<Workload, String> {
    let src = debian_source("libzstd")?;
    let exe = src.join("programs/zstd");
    if !exe.exists() {
        status(
            Command::new("make")
                .current_dir(src.join("programs"))
                .args(["-j2", "zstd"])
                .arg(format!("MOREFLAGS={CFLAGS}"))
                .stdout(Stdio::null()),
        )?;
    }
    let cwd = base().join("runs/zstd");
    std::fs::create_dir_all(&cwd).map_err(|e| e.to_string())?;
    // 4 MiB of text a compressor has work on: words from a fixed pseudo-random sequence.
    let input = cwd.join("input.txt");
    if std::fs::metadata(&input).map(|m| m.len()).ok() != Some(4 << 20) {
        let words = [
            "trace", "ring", "buffer", "page", "commit", "reserve", "event", "cpu",
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut text = String::with_capacity(4 << 20);
        while text.len() < 4 << 20 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            text.push_str(words[(x % 8) as usize]);
            text.push(if x % 11 == 0 { '\n' } else { ' ' });
            if x % 5 == 0 {
                text.push_str(&(x % 1000).to_string());
            }
        }
        text.truncate(4 << 20);
        std::fs::write(&input, text).map_err(|e| e.to_string())?;
    }
    Ok(Workload {
        name: "zstd",
        exe,
        // To stdout: the output is compared with the untraced run's.
        // Level 12: the row-hash match finder, about a million traced calls.
        args: ["-T2", "-12", "-q", "-c", "input.txt"]
            .map(String::from)
            .to_vec(),
        cwd,
        instrumentation: Instrumentation::PatchableEntry,
        run_dependent: &[(
            "ZSTDMT_compressStream_generic",
            "the main thread calls it in a loop until the workers have flushed their jobs",
        )],
    })
}

fn ripgrep() -> Result<Workload, String> {
    let dir = base().join("ripgrep");
    let exe = dir.join("bin/rg");
    if !exe.exists() {
        status(
            Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
                .args([
                    "install",
                    "--locked",
                    "ripgrep",
                    "--version",
                    RIPGREP,
                    "--root",
                ])
                .arg(&dir)
                .arg("--target-dir")
                .arg(dir.join("build"))
                // `call mcount` in every prologue (an unstable flag on stable rustc): uftrace
                // 0.13 patches only gcc's NOP form (`0f 1f 44 00 00`), not rustc's
                // `-Zpatchable-function-entry=5` (`0f 1f 44 00 08`), so both tools trace the
                // mcount build (the agent's plain `-pg` support).
                .env("RUSTC_BOOTSTRAP", "1")
                .env("RUSTFLAGS", "-Zinstrument-mcount -g"),
        )?;
    }
    // Searches the other programs' sources (fetched if not yet there).
    let lua = debian_source("lua5.4")?;
    let zstd = debian_source("libzstd")?;
    Ok(Workload {
        name: "rg",
        exe,
        args: vec![
            "-j2".into(),
            "--sort".into(),
            "path".into(),
            "-c".into(),
            "static [a-z]+ \\*?[a-z_]+\\(".into(),
            lua.display().to_string(),
            zstd.join("lib").display().to_string(),
        ],
        cwd: base(),
        instrumentation: Instrumentation::Mcount,
        run_dependent: &[(
            "[ignore::types::FileTypeDef]>::sort_by",
            "ignore's TypesBuilder sorts values taken from a HashMap, whose order (and so the \
             sort's work) follows the process's random hash seed",
        )],
    })
}

/// `cmd` run without address-space randomisation, its output captured, with its wall time.
fn timed(mut cmd: Command) -> Result<(f64, Output), String> {
    let shown = format!("{cmd:?}");
    let t = Instant::now();
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{shown}: {e}"))?;
    let secs = t.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(format!(
            "{shown} exited with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok((secs, out))
}

fn norandom(w: &Workload, prefix: &[&str]) -> Command {
    let mut c = Command::new("setarch");
    c.current_dir(&w.cwd)
        .arg("-R")
        .args(prefix)
        .arg(&w.exe)
        .args(&w.args);
    c
}

fn dir_bytes(p: &Path) -> u64 {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::read_dir(p)
            .map(|d| d.filter_map(|e| e.ok()).map(|e| dir_bytes(&e.path())).sum())
            .unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

/// Per-function call counts of `ftrace report` text: the function tracer's
/// `comm-pid [cpu] flags ts: func <-parent` lines, or function_graph's `func() {` / `func();`.
/// Returns the counts and the events the report says were lost.
fn ftrace_counts(text: &str) -> (BTreeMap<String, u64>, u64) {
    let mut counts = BTreeMap::new();
    let mut lost = 0;
    for l in text.lines() {
        if l.starts_with('#') {
            continue;
        }
        if let Some(i) = l.find("[LOST ") {
            lost += l[i + 6..]
                .split_whitespace()
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .unwrap_or(0);
            continue;
        }
        let name = if let Some((_, rest)) = l.split_once("|  ") {
            let rest = rest.trim_start();
            match rest.find("() {").or_else(|| rest.find("();")) {
                Some(i) => &rest[..i],
                None => continue,
            }
        } else if let Some((_, rest)) = l.split_once(": ") {
            match rest.split_once(" <-") {
                Some((f, _)) => f,
                None => continue,
            }
        } else {
            continue;
        };
        *counts.entry(name.to_string()).or_default() += 1;
    }
    (counts, lost)
}

/// Every defined function symbol of `exe` (demangled as both tools print them) and its
/// address, from `nm`.
fn symbol_addresses(exe: &Path) -> Result<BTreeMap<String, u64>, String> {
    let out = Command::new("nm")
        .arg("--defined-only")
        .arg(exe)
        .output()
        .map_err(|e| format!("nm: {e}"))?;
    let mut m = BTreeMap::new();
    for l in String::from_utf8_lossy(&out.stdout).lines() {
        let mut f = l.split_whitespace();
        let (Some(a), Some(kind), Some(name)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !matches!(kind, "t" | "T" | "W" | "w") {
            continue;
        }
        let Ok(a) = u64::from_str_radix(a, 16) else {
            continue;
        };
        m.insert(demangle(name), a);
    }
    Ok(m)
}

/// A Rust name (legacy or v0) demangled without its hash, as the tool prints it.
fn demangle(name: &str) -> String {
    match rustc_demangle::try_demangle(name) {
        Ok(d) => format!("{d:#}"),
        Err(_) => name.to_string(),
    }
}

/// Per-function call counts of `uftrace report -f call`.
fn uftrace_counts(text: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for l in text.lines() {
        let l = l.trim_start();
        let Some((n, name)) = l.split_once(' ') else {
            continue;
        };
        let name = name.trim();
        // `linux:schedule` and the like: the kernel's scheduling events uftrace adds.
        if name.starts_with("linux:") {
            continue;
        }
        // uftrace 0.13 prints Rust's v0 names mangled; the tool demangles them (`{:#}`).
        let name = demangle(name);
        if let Ok(n) = n.parse::<u64>() {
            *counts.entry(name).or_default() += n;
        }
    }
    counts
}

fn compare(
    tool: &Path,
    w: &Workload,
    table: &mut Vec<String>,
    failures: &mut Vec<String>,
) -> Result<(), String> {
    println!("\n==> {}: {} {}", w.name, w.exe.display(), w.args.join(" "));
    // Untraced: the reference output and time (best of 3).
    let mut plain_secs = f64::MAX;
    let mut plain_out = Vec::new();
    for _ in 0..3 {
        let (s, out) = timed(norandom(w, &[]))?;
        plain_secs = plain_secs.min(s);
        plain_out = out.stdout;
    }
    // uftrace twice: what differs between its runs depends on scheduling.
    let mut uf: Vec<(f64, u64, BTreeMap<String, u64>)> = Vec::new();
    for k in 0..2 {
        let data = w.cwd.join(format!("uftrace.data.{k}"));
        let _ = std::fs::remove_dir_all(&data);
        let d = data.display().to_string();
        let mut uftrace = vec!["uftrace", "record", "--no-libcall", "-d", &d];
        if let Instrumentation::PatchableEntry = w.instrumentation {
            uftrace.extend(["-P", "."]);
        }
        let (s, out) = timed(norandom(w, &uftrace))?;
        if out.stdout != plain_out {
            failures.push(format!(
                "{}: output under uftrace differs from untraced",
                w.name
            ));
        }
        let report = Command::new("uftrace")
            .args(["report", "--no-pager", "-f", "call", "-d"])
            .arg(&data)
            .output()
            .map_err(|e| format!("uftrace report: {e}"))?;
        uf.push((
            s,
            dir_bytes(&data),
            uftrace_counts(&String::from_utf8_lossy(&report.stdout)),
        ));
    }
    let uf_calls: u64 = uf[0].2.values().sum();
    let addrs = symbol_addresses(&w.exe)?;
    // One name per address for messages: the first in name order.
    let mut names_at: BTreeMap<String, String> = BTreeMap::new();
    for (name, a) in &addrs {
        names_at
            .entry(format!("{a:#x}"))
            .or_insert_with(|| name.clone());
    }
    let uf_secs = uf.iter().map(|u| u.0).fold(f64::MAX, f64::min);
    for tracer in ["function", "function_graph"] {
        let rec = w.cwd.join(format!("ftrace.{tracer}"));
        let _ = std::fs::remove_dir_all(&rec);
        let t = tool.display().to_string();
        let r = rec.display().to_string();
        let record = [t.as_str(), "record", "-t", tracer, "-o", &r, "--"];
        // As many runs as uftrace's, the best time kept (these programs' own time varies
        // by tens of percent from run to run); every run is checked, the last one counted.
        let mut secs = f64::MAX;
        for _ in 0..uf.len() {
            let _ = std::fs::remove_dir_all(&rec);
            let (s, out) = timed(norandom(w, &record))?;
            secs = secs.min(s);
            if out.stdout != plain_out {
                failures.push(format!(
                    "{} ({tracer}): output differs from untraced",
                    w.name
                ));
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            let summary = stderr
                .lines()
                .find(|l| l.contains("events recorded"))
                .unwrap_or("")
                .to_string();
            println!("    ftrace {tracer}: {summary}");
            if !summary.contains(", 0 lost") {
                failures.push(format!("{} ({tracer}): {summary}", w.name));
            }
        }
        let bytes = dir_bytes(&rec);
        let report = Command::new(tool)
            .args(["report", "-i"])
            .arg(&rec)
            .stderr(Stdio::null())
            .output()
            .map_err(|e| format!("ftrace report: {e}"))?;
        let (ours, lost) = ftrace_counts(&String::from_utf8_lossy(&report.stdout));
        if lost != 0 {
            failures.push(format!("{} ({tracer}): report shows {lost} lost", w.name));
        }
        // Keyed by address: a linker that folds identical functions (Rust's generic
        // instantiations) gives one address several names, and each tool picks one.
        let by_addr = |c: &BTreeMap<String, u64>| -> BTreeMap<String, u64> {
            let mut m = BTreeMap::new();
            for (name, n) in c {
                let key = match addrs.get(name) {
                    Some(a) => format!("{a:#x}"),
                    None => name.clone(),
                };
                *m.entry(key).or_default() += n;
            }
            m
        };
        let ours = by_addr(&ours);
        let uf_keyed: Vec<BTreeMap<String, u64>> = uf.iter().map(|u| by_addr(&u.2)).collect();
        let mut differ = Vec::new();
        let names: std::collections::BTreeSet<&String> =
            ours.keys().chain(uf_keyed[0].keys()).collect();
        for key in names {
            let got = ours.get(key).copied().unwrap_or(0);
            let seen: Vec<u64> = uf_keyed
                .iter()
                .map(|u| u.get(key).copied().unwrap_or(0))
                .collect();
            let (lo, hi) = (*seen.iter().min().unwrap(), *seen.iter().max().unwrap());
            let name = names_at.get(key).unwrap_or(key);
            let varies = w.run_dependent.iter().any(|(f, _)| name.contains(f));
            if !varies && (got < lo || got > hi) {
                differ.push(format!("{name}: ftrace {got}, uftrace {seen:?}"));
            }
        }
        if !differ.is_empty() {
            failures.push(format!(
                "{} ({tracer}): {} functions' counts differ from uftrace's: {}",
                w.name,
                differ.len(),
                differ
                    .iter()
                    .take(8)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join("; ")
            ));
        }
        let calls: u64 = ours.values().sum();
        let per = |s: f64| (s - plain_secs).max(0.0) * 1e9 / uf_calls.max(1) as f64;
        // Ours within the untraced run's own spread (zstd's varies by tens of percent): no
        // ratio to show.
        let cheaper = match per(secs) {
            ns if ns < 1.0 => "n/a (ours within the untraced run's noise)".to_string(),
            ns => format!("{:.1}x", per(uf_secs) / ns),
        };
        table.push(format!(
            "{:<8} {:<15} {:>9}  {:>7.3} s  {:>6.3} s {:>6.1} ns {:>5.1} B  {:>6.3} s {:>6.1} ns {:>5.1} B  {cheaper}",
            w.name,
            tracer,
            calls,
            plain_secs,
            secs,
            per(secs),
            bytes as f64 / calls.max(1) as f64,
            uf_secs,
            per(uf_secs),
            uf[0].1 as f64 / uf_calls.max(1) as f64,
        ));
    }
    Ok(())
}
