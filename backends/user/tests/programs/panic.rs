//! A Rust panic unwinding through three traced frames and caught (tests/unwind.rs): `thrower`
//! panics, `level3`..`level1` are unwound (`level2` drops a value with a `Drop` impl on the
//! way), `catcher` catches with `catch_unwind`, sleeps and calls `after_catch`.

use std::hint::black_box;

struct Noisy;

impl Drop for Noisy {
    #[inline(never)]
    fn drop(&mut self) {
        dtor_work();
    }
}

static mut WORK: u64 = 0;

#[inline(never)]
fn dtor_work() {
    // SAFETY: one thread.
    unsafe { WORK = black_box(WORK + 1) };
}

#[inline(never)]
fn thrower(x: u64) -> u64 {
    if black_box(x) < 1_000 {
        panic!("boom {x}");
    }
    x
}

#[inline(never)]
fn level3(x: u64) -> u64 {
    black_box(thrower(x)) + 1
}

#[inline(never)]
fn level2(x: u64) -> u64 {
    let _n = Noisy;
    black_box(level3(x)) * 2
}

#[inline(never)]
fn level1(x: u64) -> u64 {
    black_box(level2(x)) + 3
}

#[inline(never)]
fn after_catch(x: u64) -> u64 {
    black_box(x) + 5
}

#[inline(never)]
fn catcher(x: u64) -> u64 {
    match std::panic::catch_unwind(|| level1(x)) {
        Ok(v) => v,
        Err(_) => {
            // 100 ms in the catch before any traced call: the skipped frames' exits are
            // stamped at the catch, so their durations do not hold it.
            std::thread::sleep(std::time::Duration::from_millis(100));
            100 + after_catch(x)
        }
    }
}

fn main() {
    let n: u64 = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(1);
    let mut sum = 0;
    for i in 0..n {
        sum += catcher(i);
    }
    // SAFETY: one thread.
    println!("sum {sum} dtors {}", unsafe { WORK });
}
