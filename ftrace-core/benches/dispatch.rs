//! Dispatch cost per traced call: the direct single-ops path, the list walk with 4 ops, and a
//! single ops with a 1 000-entry filter hash (hit and miss), with crossbeam-epoch (the default)
//! and with the reader-count grace period.
//!
//! `cargo bench -p ftrace-core --bench dispatch -- --measurement-time 2 --warm-up-time 1`
// `criterion_group!` generates an undocumented function.
#![allow(missing_docs)]

use criterion::{Criterion, criterion_group, criterion_main};
use ftrace_core::dispatch::Dispatcher;
use ftrace_core::event::TraceCtx;
use ftrace_core::filter::FtraceHash;
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_core::platform::{ExecContext, Reclaim, RecursionState, TaskContext};
use ftrace_core::reclaim::{EpochReclaim, Published, ReaderCount};
use ftrace_core::recursion::TraceRecursion;
use std::hint::black_box;

thread_local! {
    static RECURSION: TraceRecursion = const { TraceRecursion::new() };
}

/// A userspace-style platform: thread-local recursion word.
struct Platform;

impl TaskContext for Platform {
    fn current_pid(&self) -> i32 {
        1
    }
    fn trace_ctx(&self) -> TraceCtx {
        TraceCtx(0)
    }
    #[inline]
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
}

impl RecursionState for Platform {
    #[inline]
    fn trace_recursion(&self) -> &TraceRecursion {
        // SAFETY: the word lives as long as the calling thread and the reference is only used
        // during the dispatch on that thread.
        RECURSION.with(|r| unsafe { &*(r as *const TraceRecursion) })
    }
}

#[inline(never)]
fn nop_cb(ip: u64, parent_ip: u64, _op: &FtraceOps, _regs: Option<&mut FtraceRegs>) {
    black_box((ip, parent_ip));
}

static SINGLE: FtraceOps = FtraceOps::new(nop_cb, OpsFlags::empty());
static FILTERED: FtraceOps = FtraceOps::new(nop_cb, OpsFlags::empty());
static RC_OPS: [FtraceOps; 4] = [
    FtraceOps::new(nop_cb, OpsFlags::empty()),
    FtraceOps::new(nop_cb, OpsFlags::empty()),
    FtraceOps::new(nop_cb, OpsFlags::empty()),
    FtraceOps::new(nop_cb, OpsFlags::empty()),
];
static RC_FILTERED: FtraceOps = FtraceOps::new(nop_cb, OpsFlags::empty());

static ONE: Dispatcher<EpochReclaim, Platform> = Dispatcher::new(EpochReclaim, Platform);
static FOUR: Dispatcher<EpochReclaim, Platform> = Dispatcher::new(EpochReclaim, Platform);
static HASHED: Dispatcher<EpochReclaim, Platform> = Dispatcher::new(EpochReclaim, Platform);
static RC_FOUR: Dispatcher<ReaderCount, Platform> = Dispatcher::new(ReaderCount::new(), Platform);
static RC_HASHED: Dispatcher<ReaderCount, Platform> = Dispatcher::new(ReaderCount::new(), Platform);

/// 1 000 function-like addresses, 16-byte aligned and spread over 1 MiB.
fn thousand_ips() -> Vec<u64> {
    (0..1000u64)
        .map(|i| 0xffff_ffff_8100_0000 + i * 0x410)
        .collect()
}

fn bench_dispatch(c: &mut Criterion) {
    ONE.register(&SINGLE).unwrap();
    assert!(ONE.is_direct());
    let ips = thousand_ips();
    let hit = ips[517];
    let miss = hit + 8;

    let mut g = c.benchmark_group("dispatch");
    // The floor: the callback called through a function pointer, no dispatcher.
    let f: fn(u64, u64, &FtraceOps, Option<&mut FtraceRegs>) = nop_cb;
    g.bench_function("baseline_indirect_call", |b| {
        b.iter(|| black_box(f)(black_box(hit), black_box(0x1234), &SINGLE, None))
    });
    g.bench_function("direct_1_op", |b| {
        b.iter(|| ONE.call(black_box(hit), black_box(0x1234), None))
    });

    static FOUR_OPS: [FtraceOps; 4] = [
        FtraceOps::new(nop_cb, OpsFlags::empty()),
        FtraceOps::new(nop_cb, OpsFlags::empty()),
        FtraceOps::new(nop_cb, OpsFlags::empty()),
        FtraceOps::new(nop_cb, OpsFlags::empty()),
    ];
    for o in &FOUR_OPS {
        FOUR.register(o).unwrap();
    }
    g.bench_function("list_4_ops_epoch", |b| {
        b.iter(|| FOUR.call(black_box(hit), black_box(0x1234), None))
    });

    HASHED.register(&FILTERED).unwrap();
    HASHED.set_filter(
        &FILTERED,
        Published::Owned(Box::new(FtraceHash::from_ips(ips.iter().copied()))),
    );
    g.bench_function("1_op_1000_filter_hit_epoch", |b| {
        b.iter(|| HASHED.call(black_box(hit), black_box(0x1234), None))
    });
    g.bench_function("1_op_1000_filter_miss_epoch", |b| {
        b.iter(|| HASHED.call(black_box(miss), black_box(0x1234), None))
    });

    for o in &RC_OPS {
        RC_FOUR.register(o).unwrap();
    }
    g.bench_function("list_4_ops_readercount", |b| {
        b.iter(|| RC_FOUR.call(black_box(hit), black_box(0x1234), None))
    });
    RC_HASHED.register(&RC_FILTERED).unwrap();
    RC_HASHED.set_filter(
        &RC_FILTERED,
        Published::Owned(Box::new(FtraceHash::from_ips(ips.iter().copied()))),
    );
    g.bench_function("1_op_1000_filter_hit_readercount", |b| {
        b.iter(|| RC_HASHED.call(black_box(hit), black_box(0x1234), None))
    });

    // The pieces: a hash lookup alone, and an epoch pin alone.
    let hash = FtraceHash::from_ips(ips.iter().copied());
    g.bench_function("hash_contains_1000", |b| {
        b.iter(|| hash.contains(black_box(hit)))
    });
    g.bench_function("epoch_pin", |b| {
        b.iter(|| drop(black_box(EpochReclaim.pin())))
    });
    g.finish();
}

criterion_group!(benches, bench_dispatch);
criterion_main!(benches);
