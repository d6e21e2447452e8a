//! ns per event: reserve + fill 24 bytes + commit (an `ftrace_entry`), with the clock excluded
//! (explicit timestamps) and included (TSC, CLOCK_MONOTONIC), beside crossbeam's
//! `ArrayQueue::force_push` of the same 24 bytes (a bounded overwriting MPMC queue).
//!
//! The write is inlined into the measuring loop, as a tracer's callback inlines `reserve` and
//! `commit` (generic, `#[inline(always)]`); one more row measures it behind a function call
//! (`#[inline(never)]`), which adds the call and the saving of callee-saved registers a
//! callback pays once for all it does. The payload is 24 bytes the compiler cannot know
//! (`black_box`ed once), copied in as a tracer copies its fields.
//!
//! Two measurements of the same functions: wall time (criterion's default) and the benchmark
//! thread's own CPU time (`CLOCK_THREAD_CPUTIME_ID`), which leaves out the time the thread
//! spends descheduled on a shared, oversubscribed machine.
//!
//! `cargo bench -p ftrace-ringbuf --bench reserve_commit -- --measurement-time 2 --warm-up-time 1`

use std::hint::black_box;
use std::time::Instant;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use crossbeam_queue::ArrayQueue;
use ftrace_core::platform::TraceClock;
use ftrace_ringbuf::{CpuBuffer, HeapPages};

/// A clock that ticks by one per read: a timestamp without the cost of reading a clock.
struct Counter(std::cell::Cell<u64>);

impl TraceClock for Counter {
    const NAME: &'static str = "counter";
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        let v = self.0.get();
        self.0.set(v + 1);
        v
    }
}

/// The raw TSC (the `x86-tsc` trace clock).
struct Tsc;

impl TraceClock for Tsc {
    const NAME: &'static str = "x86-tsc";
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `rdtsc` has no preconditions on x86_64.
        unsafe {
            core::arch::x86_64::_rdtsc()
        }
        #[cfg(not(target_arch = "x86_64"))]
        0
    }
}

/// CLOCK_MONOTONIC through `Instant` (the `mono` trace clock; vDSO).
struct Mono(Instant);

impl TraceClock for Mono {
    const NAME: &'static str = "mono";
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        self.0.elapsed().as_nanos() as u64
    }
}

const PAYLOAD: [u8; 24] = [0x5a; 24];

/// One event: reserve, copy the entry in, commit.
#[inline(always)]
fn write_one<C: TraceClock>(buf: &CpuBuffer<HeapPages>, clock: &C, payload: &[u8; 24]) {
    if let Some(mut r) = buf.reserve(24, clock) {
        r.data().copy_from_slice(payload);
        r.commit();
    }
}

/// The same behind a call.
#[inline(never)]
fn write_call(buf: &CpuBuffer<HeapPages>, clock: &Counter, payload: &[u8; 24]) {
    write_one(buf, clock, payload)
}

/// The calling thread's CPU time, in ns.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; the clock id is a constant the kernel knows.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0);
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Criterion measurement: CPU time of the benchmark thread.
struct ThreadCpuTime;

impl Measurement for ThreadCpuTime {
    type Intermediate = u64;
    type Value = u64;
    fn start(&self) -> u64 {
        thread_cpu_ns()
    }
    fn end(&self, start: u64) -> u64 {
        thread_cpu_ns() - start
    }
    fn add(&self, a: &u64, b: &u64) -> u64 {
        a + b
    }
    fn zero(&self) -> u64 {
        0
    }
    fn to_f64(&self, v: &u64) -> f64 {
        *v as f64
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        WallTime.formatter()
    }
}

fn group<M: Measurement>(c: &mut Criterion<M>, name: &str) {
    let mut g = c.benchmark_group(name);
    g.throughput(Throughput::Elements(1));
    // 1 MiB per CPU (the kernel benchmark's size), overwrite mode, no reader: the writer
    // wraps and pushes the head page every 145 events, as a tracer left running does.
    let buf = CpuBuffer::new(HeapPages, 256, 4096).unwrap();
    let counter = Counter(std::cell::Cell::new(0));
    let payload = black_box(PAYLOAD);
    g.bench_function("ftrace-ringbuf, clock excluded", |b| {
        b.iter(|| write_one(&buf, &counter, &payload))
    });
    g.bench_function("ftrace-ringbuf, clock excluded, behind a call", |b| {
        b.iter(|| write_call(&buf, &counter, &payload))
    });
    g.bench_function("ftrace-ringbuf, clock included (rdtsc)", |b| {
        b.iter(|| write_one(&buf, &Tsc, &payload))
    });
    let mono = Mono(Instant::now());
    g.bench_function("ftrace-ringbuf, clock included (CLOCK_MONOTONIC)", |b| {
        b.iter(|| write_one(&buf, &mono, &payload))
    });
    // Same capacity in 24-byte slots.
    let q: ArrayQueue<[u8; 24]> = ArrayQueue::new(256 * 4096 / 24);
    g.bench_function("crossbeam ArrayQueue::force_push", |b| {
        b.iter(|| q.force_push(payload))
    });
    g.finish();
}

fn wall(c: &mut Criterion) {
    group(c, "reserve_commit_24B (wall time)");
}

fn cpu(c: &mut Criterion<ThreadCpuTime>) {
    group(c, "reserve_commit_24B (thread CPU time)");
}

// The groups are functions criterion's macros generate without docs.
#[allow(missing_docs)]
mod groups {
    use super::*;
    criterion_group!(wall_time, wall);
    criterion_group! {
        name = cpu_time;
        config = Criterion::default().with_measurement(ThreadCpuTime);
        targets = cpu
    }
}
criterion_main!(groups::wall_time, groups::cpu_time);
