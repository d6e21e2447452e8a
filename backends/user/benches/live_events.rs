//! What an enabled program trace event costs on the live mount, beside what the function
//! tracer costs per traced call, measured in the traced program itself
//! (`tests/programs/event_cost.c` under `ftrace record -t function --mount`): the program
//! times a loop of calls to an empty traced function and a loop firing an event with one
//! `u64` field, and the bench flips the mount between rounds:
//!
//! - function tracer per call = the call loop with `current_tracer` `function` minus with `nop`;
//! - enabled event per event = the event loop with the event enabled minus disabled.
//!
//! Each figure is the best of [`ROUNDS`] rounds (the machine is shared); `uptime` is printed
//! with them. #18's target: the event at most twice the traced call. Run with
//! `cargo bench -p ftrace-user --bench live_events`.

#[path = "../tests/common/mod.rs"]
mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// Rounds per setting.
const ROUNDS: usize = 25;

struct Mounted {
    tool: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    mnt: PathBuf,
}

impl Mounted {
    fn start(dir: &Path) -> Mounted {
        let include = Path::new(env!("CARGO_MANIFEST_DIR")).join("include");
        let inc = format!("-I{}", include.display());
        let prog = common::build_kernel_style_with(dir, "event_cost", &[&inc]);
        let mnt = dir.join("tracing");
        std::fs::create_dir(&mnt).unwrap();
        let mut tool = Command::new(env!("CARGO_BIN_EXE_ftrace"))
            .current_dir(dir)
            .args(["record", "-t", "function", "--mount"])
            .arg(&mnt)
            .arg("-o")
            .arg(dir.join("rec"))
            .arg("--")
            .arg(&prog)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = tool.stdin.take();
        let stdout = BufReader::new(tool.stdout.take().unwrap());
        let m = Mounted {
            tool,
            stdin,
            stdout,
            mnt,
        };
        let start = Instant::now();
        while !std::fs::read_to_string(m.mnt.join("available_events"))
            .is_ok_and(|a| a.lines().any(|l| l == "bench:bench_u64"))
        {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the mount never listed bench:bench_u64"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        m
    }

    fn write(&self, f: &str, text: &str) {
        std::fs::write(self.mnt.join(f), text).unwrap_or_else(|e| panic!("writing {f}: {e}"));
    }

    /// One round in the program: (ns per call loop iteration, ns per event loop iteration).
    fn round(&mut self) -> (f64, f64) {
        let s = self.stdin.as_mut().unwrap();
        s.write_all(b"go\n").unwrap();
        s.flush().unwrap();
        let mut line = String::new();
        self.stdout.read_line(&mut line).unwrap();
        let w: Vec<&str> = line.split_whitespace().collect();
        match w[..] {
            ["leaf", leaf, "event", event] => (leaf.parse().unwrap(), event.parse().unwrap()),
            _ => panic!("unexpected line from the program: {line:?}"),
        }
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.tool.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.tool.kill();
        let _ = self.tool.wait();
    }
}

/// The best (lowest) of each column.
#[derive(Clone, Copy)]
struct Best {
    leaf: f64,
    event: f64,
}

impl Best {
    fn new() -> Best {
        Best {
            leaf: f64::INFINITY,
            event: f64::INFINITY,
        }
    }
    fn take(&mut self, (leaf, event): (f64, f64)) {
        self.leaf = self.leaf.min(leaf);
        self.event = self.event.min(event);
    }
}

fn main() {
    // `cargo bench` passes `--bench`; a filter naming another bench skips this one.
    let filter = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    if filter.is_some_and(|f| !"live_events".contains(f.as_str())) {
        return;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("ftrace-bench-live-events-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mut m = Mounted::start(&dir);
    // Settings, interleaved so a burst of load hits all of them alike.
    let (mut traced_off, mut traced_on, mut nop_off) = (Best::new(), Best::new(), Best::new());
    m.round(); // warm-up: the first round maps the ring and patches the sites
    for _ in 0..ROUNDS {
        m.write("current_tracer", "function\n");
        m.write("events/bench/bench_u64/enable", "0\n");
        traced_off.take(m.round());
        m.write("events/bench/bench_u64/enable", "1\n");
        traced_on.take(m.round());
        m.write("events/bench/bench_u64/enable", "0\n");
        m.write("current_tracer", "nop\n");
        nop_off.take(m.round());
    }
    drop(m);
    let _ = std::fs::remove_dir_all(&dir);
    let call = traced_off.leaf - nop_off.leaf;
    let event = traced_on.event - traced_off.event;
    println!(
        "live mount, best of {ROUNDS}: empty call {:.2} ns untraced, {:.2} ns traced (function)",
        nop_off.leaf, traced_off.leaf
    );
    println!(
        "live mount, best of {ROUNDS}: event loop {:.2} ns with the event off, {:.2} ns on",
        traced_off.event, traced_on.event
    );
    println!(
        "function tracer {call:.2} ns per call; enabled event (one u64 field) {event:.2} ns per \
         event; event / call = {:.2} (target <= 2)",
        event / call
    );
    if let Ok(o) = Command::new("uptime").output() {
        print!("uptime: {}", String::from_utf8_lossy(&o.stdout));
    }
}
