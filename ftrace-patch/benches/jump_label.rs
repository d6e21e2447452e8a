//! A `static_branch_unlikely!` site off (a 5-byte NOP) beside the portable form (one relaxed
//! load of the same kind of key), each behind the same `#[inline(never)]` call.
#![allow(missing_docs)]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use ftrace_core::static_branch_unlikely;
use ftrace_core::static_key::StaticKey;

static KEY: StaticKey = StaticKey::new();

#[inline(never)]
fn nop_site(x: u64) -> u64 {
    if static_branch_unlikely!(KEY) {
        black_box(x * 3)
    } else {
        x
    }
}

#[inline(never)]
fn load_site(x: u64) -> u64 {
    if KEY.is_enabled() {
        black_box(x * 3)
    } else {
        x
    }
}

#[inline(never)]
fn empty(x: u64) -> u64 {
    x
}

fn sites(c: &mut Criterion) {
    let mut g = c.benchmark_group("static key off");
    g.bench_function("call only (baseline)", |b| b.iter(|| empty(black_box(1))));
    g.bench_function("jump label (NOP)", |b| b.iter(|| nop_site(black_box(1))));
    g.bench_function("relaxed load", |b| b.iter(|| load_site(black_box(1))));
    g.finish();
}

criterion_group!(benches, sites);
criterion_main!(benches);
