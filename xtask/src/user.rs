//! Userspace-backend tasks.
//!
//! - `cargo xtask demo`: builds the `ftrace` tool, the agent and the C example, and shows the
//!   example's function_graph trace (`ftrace live -t function_graph -- calls 1 1`).
//! - `cargo xtask bench-vs-uftrace [N] [ROUNDS]`: one call-heavy C benchmark (recursive fib(N),
//!   default 27) built uninstrumented (also with the body shifted as the instrumented build
//!   has it, to tell code layout from the NOP), with our flags and with `-pg` for uftrace; runs
//!   it uninstrumented, with the sites off, under our function and function_graph tracers
//!   (also without their clock reads, for measurement only) and under `uftrace record`, and
//!   prints ns per traced call and the ratios (minimum over ROUNDS interleaved rounds).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::{cargo, root, status};

/// gcc's kernel-style instrumentation: fentry, a 5-byte NOP, `__mcount_loc` (non-PIE only).
pub const GCC_MCOUNT: &[&str] = &[
    "-pg",
    "-mfentry",
    "-mrecord-mcount",
    "-mnop-mcount",
    "-fno-pie",
    "-no-pie",
];

fn scratch() -> PathBuf {
    let d = root().join("target/xtask-user");
    std::fs::create_dir_all(&d).expect("target/xtask-user");
    d
}

fn cc(out: &Path, src: &Path, flags: &[&str]) -> Result<(), String> {
    status(
        Command::new("gcc")
            .args(["-O2", "-pthread"])
            .args(flags)
            .arg("-o")
            .arg(out)
            .arg(src)
            .arg("-ldl"),
    )
}

fn release_dir() -> PathBuf {
    root().join("target/release")
}

/// `cargo xtask demo`.
pub fn demo() -> Result<(), String> {
    status(cargo().args([
        "build",
        "--release",
        "-p",
        "ftrace-agent",
        "-p",
        "ftrace-user",
    ]))?;
    let exe = scratch().join("calls");
    cc(&exe, &root().join("examples/c/calls.c"), GCC_MCOUNT)?;
    let data = scratch().join("demo.data");
    status(
        Command::new(release_dir().join("ftrace"))
            .args(["live", "-t", "function_graph", "-o"])
            .arg(&data)
            .arg("--")
            .arg(&exe)
            .args(["1", "1"])
            .current_dir(scratch()),
    )
}

fn ns_per_call(cmd: &mut Command) -> Result<f64, String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| format!("{shown}: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "{shown} failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    text.split_whitespace()
        .skip_while(|w| *w != "ns_per_call")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("{shown}: no ns_per_call in {text:?}"))
}

fn rdtsc_ns() -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        let mut best = f64::MAX;
        for _ in 0..5 {
            let t = std::time::Instant::now();
            let mut s = 0u64;
            for _ in 0..2_000_000 {
                // SAFETY: rdtsc has no preconditions in user mode.
                s = s.wrapping_add(unsafe { core::arch::x86_64::_rdtsc() });
            }
            std::hint::black_box(s);
            best = best.min(t.elapsed().as_nanos() as f64 / 2e6);
        }
        best
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        0.0
    }
}

/// `cargo xtask bench-vs-uftrace [N] [ROUNDS]`.
///
/// Every configuration runs once per round (the cheap ones, whose differences are a fraction of
/// a nanosecond, three times), interleaved so that load changes hit them alike; each run
/// prints the best of 5 timed `fib(N)` calls, and the table shows the minimum over all runs
/// (and the median, to show the spread). Address-space randomisation gives each run another
/// stack placement, so the minimum is also over layouts of the stack.
pub fn bench_vs_uftrace(args: &[String]) -> Result<(), String> {
    let n: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(27);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(7);
    status(cargo().args(["build", "--release", "-p", "ftrace-agent"]))?;
    let agent = release_dir().join("libftrace_agent.so");
    let src = root().join("examples/c/fib_bench.c");
    let dir = scratch();
    let plain = dir.join("fib_plain");
    let shifted = dir.join("fib_shifted");
    let ours = dir.join("fib_mcount");
    let pg = dir.join("fib_pg");
    cc(&plain, &src, &["-fno-pie", "-no-pie"])?;
    // The instrumented build's layout without executing anything more: the five NOP bytes go
    // before the entry (`-fpatchable-function-entry=5,5`), so the body sits at the same
    // address modulo the alignment as in `fib_mcount`, whose NOP is at the entry.
    cc(
        &shifted,
        &src,
        &["-fno-pie", "-no-pie", "-fpatchable-function-entry=5,5"],
    )?;
    cc(&ours, &src, GCC_MCOUNT)?;
    cc(&pg, &src, &["-pg"])?;
    let reps = "5".to_string();
    let nstr = n.to_string();
    let out_dir = dir.join("bench.data");
    let plain_run = |exe: &Path| {
        let mut c = Command::new(exe);
        c.args([&nstr, &reps]);
        c
    };
    let agent_run = |tracer: &str, on: bool, noclock: bool| {
        let _ = std::fs::remove_dir_all(&out_dir);
        let mut c = plain_run(&ours);
        c.env("LD_PRELOAD", &agent)
            .env("FTRACE_AGENT_OUTPUT", &out_dir)
            .env("FTRACE_AGENT_TRACER", tracer)
            .env("FTRACE_AGENT_TRACING_ON", if on { "1" } else { "0" });
        if noclock {
            c.env("FTRACE_AGENT_BENCH_NOCLOCK", "1");
        }
        c
    };
    // (name, runs per round, command)
    type Config<'a> = (&'a str, usize, Box<dyn Fn() -> Command + 'a>);
    let configs: Vec<Config> = vec![
        ("uninstrumented", 3, Box::new(|| plain_run(&plain))),
        (
            "uninstrumented, body shifted",
            3,
            Box::new(|| plain_run(&shifted)),
        ),
        ("instrumented, no agent", 3, Box::new(|| plain_run(&ours))),
        (
            "sites off (agent loaded)",
            3,
            Box::new(|| agent_run("function", false, false)),
        ),
        (
            "ftrace-rs function",
            1,
            Box::new(|| agent_run("function", true, false)),
        ),
        (
            "ftrace-rs function_graph",
            1,
            Box::new(|| agent_run("function_graph", true, false)),
        ),
        (
            "uftrace record (-pg)",
            1,
            Box::new(|| {
                let mut c = Command::new("uftrace");
                c.args(["record", "-d"])
                    .arg(dir.join("uftrace.data"))
                    .arg(&pg)
                    .args([&nstr, &reps]);
                c
            }),
        ),
        (
            "function, no clock read *",
            1,
            Box::new(|| agent_run("function", true, true)),
        ),
        (
            "function_graph, no clock *",
            1,
            Box::new(|| agent_run("function_graph", true, true)),
        ),
    ];
    let mut samples = vec![Vec::new(); configs.len()];
    for round in 0..rounds {
        for (i, (name, runs, mk)) in configs.iter().enumerate() {
            for _ in 0..*runs {
                // (-pg programs write gmon.out into their working directory.)
                let v = ns_per_call(mk().current_dir(&dir))?;
                samples[i].push(v);
            }
            let last = samples[i][samples[i].len() - runs..]
                .iter()
                .fold(f64::MAX, |a, &b| a.min(b));
            println!("round {round}: {name:<30} {last:8.3} ns/call");
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    let _ = std::fs::remove_dir_all(dir.join("uftrace.data"));
    let best: Vec<f64> = samples
        .iter()
        .map(|s| s.iter().fold(f64::MAX, |a, &b| a.min(b)))
        .collect();
    let median = |s: &[f64]| {
        let mut s = s.to_vec();
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    };
    let base = best[0];
    let calls = 2 * fib(n + 1) - 1;
    println!(
        "\nfib({n}): {calls} calls per run, {rounds} rounds (x3 for the first four), best of {reps} \
         calls per run"
    );
    println!(
        "{:<30} {:>10} {:>10} {:>10} {:>5}",
        "configuration", "ns/call", "overhead", "median", "runs"
    );
    for (i, (name, _, _)) in configs.iter().enumerate() {
        println!(
            "{name:<30} {:>10.3} {:>10.3} {:>10.3} {:>5}",
            best[i],
            best[i] - base,
            median(&samples[i]),
            samples[i].len()
        );
    }
    println!("* measurement only: the TSC read replaced by zero (FTRACE_AGENT_BENCH_NOCLOCK=1)");
    let tsc = rdtsc_ns();
    let (func, graph, uf, func_nc, graph_nc) = (best[4], best[5], best[6], best[7], best[8]);
    let pct = |a: f64, b: f64| (a / b - 1.0) * 100.0;
    // The sub-nanosecond comparisons, on the minimum and on the median (which one run's luck
    // moves less).
    let med: Vec<f64> = samples.iter().map(|s| median(s)).collect();
    println!();
    for (what, a, b, note) in [
        (
            "sites off vs the same binary without the agent",
            3,
            2,
            "what the agent costs while off",
        ),
        (
            "NOP executed vs the same layout without it",
            2,
            1,
            "instrumented vs body shifted",
        ),
        ("layout alone", 1, 0, "body shifted vs uninstrumented"),
        ("sites off vs uninstrumented", 3, 0, "NOP and layout"),
    ] {
        println!(
            "{what:<48} {:+5.1}% (median {:+5.1}%): {note}",
            pct(best[a], best[b]),
            pct(med[a], med[b])
        );
    }
    println!(
        "uftrace / function:        {:.1}x per call, {:.1}x in overhead",
        uf / func,
        (uf - base) / (func - base)
    );
    println!(
        "uftrace / function_graph:  {:.1}x per call, {:.1}x in overhead",
        uf / graph,
        (uf - base) / (graph - base)
    );
    println!(
        "clock reads: function {:.1} ns per call (one TSC read), function_graph {:.1} ns (two); \
         without them function costs {:.1} ns, function_graph {:.1} ns",
        func - func_nc,
        graph - graph_nc,
        func_nc,
        graph_nc
    );
    println!(
        "one rdtsc on this machine (back to back): {tsc:.1} ns; function reads the clock once \
         per call, function_graph and uftrace twice"
    );
    Ok(())
}

fn fib(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        (a, b) = (b, a + b);
    }
    a
}
