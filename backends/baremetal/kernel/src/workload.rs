//! The traced workload: a small, fixed call tree the session's expectations are written
//! against. Every function here starts with a patchable NOP (this crate is built with
//! `-Zpatchable-function-entry=5`); `#[inline(never)]` and the non-tail calls keep each call a
//! real `call`, and `#[unsafe(no_mangle)]` keeps the names plain for `set_ftrace_filter`.
//!
//! `bm_workload(n)` calls, for each `i < n`: `bm_outer(i)` -> `bm_middle(i)` -> `bm_leaf(i)`,
//! then `bm_middle(i + 1)` -> `bm_leaf(i + 1)`, then `other_work(i)` (which the `bm_*` filter
//! leaves out). After each round it fires `bm_workload:workload_round` (the round and what
//! `bm_outer` returned), so an enabled event lands between the rounds' function entries.

use core::hint::black_box;

use ftrace_core::tracepoint;

tracepoint! {
    /// `bm_workload:workload_round`: round `round` of `bm_workload` computed `value`.
    pub fn trace_workload_round(round: u64 => "u64", value: u64 => "u64");
    record WorkloadRound;
    static WORKLOAD_ROUND = ("bm_workload", "workload_round", 510,
        "\"round=%llu value=%llu\", REC->round, REC->value");
}

/// The workload's entry point; returns a checksum the session also checks.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn bm_workload(rounds: u64) -> u64 {
    let mut acc = 0u64;
    for i in 0..rounds {
        let v = bm_outer(black_box(i));
        trace_workload_round(i, v);
        acc = acc.wrapping_mul(31).wrapping_add(v);
    }
    black_box(acc)
}

/// Two middles and an unfiltered helper.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn bm_outer(x: u64) -> u64 {
    let a = bm_middle(black_box(x));
    let b = bm_middle(black_box(x + 1));
    let c = other_work(black_box(x));
    black_box(a.wrapping_add(b).wrapping_add(c))
}

/// One leaf.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn bm_middle(x: u64) -> u64 {
    let l = bm_leaf(black_box(x));
    black_box(l.wrapping_mul(3))
}

/// A leaf.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn bm_leaf(x: u64) -> u64 {
    black_box(x ^ 0x5a)
}

/// Not matched by `bm_*`: must never show up in a filtered trace.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn other_work(x: u64) -> u64 {
    black_box(x.wrapping_add(7))
}

/// The checksum `bm_workload(rounds)` returns, computed without calling the traced code.
pub fn expected_checksum(rounds: u64) -> u64 {
    let leaf = |x: u64| x ^ 0x5a;
    let middle = |x: u64| leaf(x).wrapping_mul(3);
    let mut acc = 0u64;
    for i in 0..rounds {
        let outer = middle(i)
            .wrapping_add(middle(i + 1))
            .wrapping_add(i.wrapping_add(7));
        acc = acc.wrapping_mul(31).wrapping_add(outer);
    }
    acc
}

/// The boot self-test's target: a function of its own, so that the self-test never touches
/// the sites the session traces.
#[unsafe(no_mangle)]
#[inline(never)]
pub extern "C" fn selftest_target(a: u64, b: u64) -> u64 {
    black_box(a.wrapping_mul(3).wrapping_add(b))
}
