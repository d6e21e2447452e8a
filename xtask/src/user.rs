//! Userspace-backend tasks.
//!
//! - `cargo xtask demo`: builds the `ftrace` tool, the agent and the C example, and shows the
//!   example's function_graph trace (`ftrace live -t function_graph -- calls 1 1`).
//! - `cargo xtask bench-vs-uftrace [N] [ROUNDS]`: one call-heavy C benchmark (recursive fib(N),
//!   default 27) built uninstrumented, with our flags and with `-pg` for uftrace; runs it
//!   uninstrumented, with the sites off, under our function and function_graph tracers and
//!   under `uftrace record`, and prints ns per traced call and the ratios (best of ROUNDS).

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
pub fn bench_vs_uftrace(args: &[String]) -> Result<(), String> {
    let n: u32 = args.first().and_then(|a| a.parse().ok()).unwrap_or(27);
    let rounds: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(3);
    status(cargo().args(["build", "--release", "-p", "ftrace-agent"]))?;
    let agent = release_dir().join("libftrace_agent.so");
    let src = root().join("examples/c/fib_bench.c");
    let dir = scratch();
    let plain = dir.join("fib_plain");
    let ours = dir.join("fib_mcount");
    let pg = dir.join("fib_pg");
    cc(&plain, &src, &["-fno-pie", "-no-pie"])?;
    cc(&ours, &src, GCC_MCOUNT)?;
    cc(&pg, &src, &["-pg"])?;
    let reps = "5".to_string();
    let nstr = n.to_string();
    let out_dir = dir.join("bench.data");
    let agent_run = |exe: &Path, tracer: &str, on: bool| {
        let _ = std::fs::remove_dir_all(&out_dir);
        let mut c = Command::new(exe);
        c.args([&nstr, &reps])
            .env("LD_PRELOAD", &agent)
            .env("FTRACE_AGENT_OUTPUT", &out_dir)
            .env("FTRACE_AGENT_TRACER", tracer)
            .env("FTRACE_AGENT_TRACING_ON", if on { "1" } else { "0" });
        c
    };
    type Config<'a> = (&'a str, Box<dyn Fn() -> Command + 'a>);
    let configs: Vec<Config> = vec![
        (
            "uninstrumented",
            Box::new(|| {
                let mut c = Command::new(&plain);
                c.args([&nstr, &reps]);
                c
            }),
        ),
        (
            "instrumented, no agent",
            Box::new(|| {
                let mut c = Command::new(&ours);
                c.args([&nstr, &reps]);
                c
            }),
        ),
        (
            "sites off (agent loaded)",
            Box::new(|| agent_run(&ours, "function", false)),
        ),
        (
            "ftrace-rs function",
            Box::new(|| agent_run(&ours, "function", true)),
        ),
        (
            "ftrace-rs function_graph",
            Box::new(|| agent_run(&ours, "function_graph", true)),
        ),
        (
            "uftrace record (-pg)",
            Box::new(|| {
                let mut c = Command::new("uftrace");
                c.args(["record", "-d"])
                    .arg(dir.join("uftrace.data"))
                    .arg(&pg)
                    .args([&nstr, &reps]);
                c
            }),
        ),
    ];
    let mut best = vec![f64::MAX; configs.len()];
    for round in 0..rounds {
        for (i, (name, mk)) in configs.iter().enumerate() {
            // (-pg programs write gmon.out into their working directory.)
            let v = ns_per_call(mk().current_dir(&dir))?;
            println!("round {round}: {name:<28} {v:8.3} ns/call");
            best[i] = best[i].min(v);
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    let _ = std::fs::remove_dir_all(dir.join("uftrace.data"));
    let base = best[0];
    let calls = 2 * fib(n + 1) - 1;
    println!("\nfib({n}): {calls} calls per run, best of {rounds} rounds x {reps} runs");
    println!(
        "{:<28} {:>10} {:>12}",
        "configuration", "ns/call", "overhead"
    );
    for (i, (name, _)) in configs.iter().enumerate() {
        println!("{name:<28} {:>10.3} {:>12.3}", best[i], best[i] - base);
    }
    let tsc = rdtsc_ns();
    let (nop, off, func, graph, uf) = (best[1], best[2], best[3], best[4], best[5]);
    println!(
        "\nsites off vs uninstrumented: {:+.1}%; vs the same binary without the agent: {:+.1}%",
        (off / base - 1.0) * 100.0,
        (off / nop - 1.0) * 100.0
    );
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
