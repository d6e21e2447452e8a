//! A multi-threaded Rust program for ftrace-rs's end-to-end tests: every traced function
//! counts its own calls, so a test can compare the trace with the program's own numbers.
//!
//! Build (stable rustc): `RUSTC_BOOTSTRAP=1 rustc -O -Zpatchable-function-entry=5 calls.rs`.
//! Run: `calls THREADS ITERATIONS`; prints `calls <function> <count>` lines and `result ok`.

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

static N_FIB: AtomicU64 = AtomicU64::new(0);
static N_LEAF: AtomicU64 = AtomicU64::new(0);
static N_SUM6: AtomicU64 = AtomicU64::new(0);
static N_FADD: AtomicU64 = AtomicU64::new(0);
static N_WORKER: AtomicU64 = AtomicU64::new(0);
static BAD: AtomicU64 = AtomicU64::new(0);

#[inline(never)]
fn leaf(x: u64) -> u64 {
    N_LEAF.fetch_add(1, Relaxed);
    black_box(x * 3 + 1)
}

#[inline(never)]
fn fib(n: u64) -> u64 {
    N_FIB.fetch_add(1, Relaxed);
    if n < 2 {
        return leaf(n) - 2 * n - 1;
    }
    fib(black_box(n - 1)) + fib(black_box(n - 2))
}

#[inline(never)]
fn sum6(a: u64, b: u64, c: u64, d: u64, e: u64, f: u64) -> u64 {
    N_SUM6.fetch_add(1, Relaxed);
    black_box(a + 2 * b + 3 * c + 4 * d + 5 * e + 6 * f)
}

#[inline(never)]
fn fadd(a: f64, b: f64, c: f64) -> f64 {
    N_FADD.fetch_add(1, Relaxed);
    black_box(a * 2.0 + b - c / 4.0)
}

#[inline(never)]
fn worker(iters: u64) {
    N_WORKER.fetch_add(1, Relaxed);
    for i in 0..iters {
        if fib(black_box(10)) != 55 {
            BAD.fetch_add(1, Relaxed);
        }
        if sum6(1, 2, 3, 4, 5, black_box(i)) != 55 + 6 * i {
            BAD.fetch_add(1, Relaxed);
        }
        if fadd(1.5, 2.25, black_box(i as f64)) != 5.25 - i as f64 / 4.0 {
            BAD.fetch_add(1, Relaxed);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let threads: usize = args.get(1).and_then(|a| a.parse().ok()).unwrap_or(2);
    let iters: u64 = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(1000);
    let handles: Vec<_> = (0..threads)
        .map(|_| std::thread::spawn(move || worker(iters)))
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    for (name, n) in [
        ("fib", &N_FIB),
        ("sum6", &N_SUM6),
        ("fadd", &N_FADD),
        ("leaf", &N_LEAF),
        ("worker", &N_WORKER),
    ] {
        println!("calls {name} {}", n.load(Relaxed));
    }
    match BAD.load(Relaxed) {
        0 => println!("result ok"),
        n => println!("result BAD {n}"),
    }
    std::process::exit(i32::from(BAD.load(Relaxed) != 0));
}
