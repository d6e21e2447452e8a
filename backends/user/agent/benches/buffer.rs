//! The agent's per-thread buffer write (reserve with one `xadd`, fill, commit) and the clocks it
//! stamps events with.

use criterion::{Criterion, criterion_main};
use ftrace_agent::buffer::{self, KIND_FUNC};
use ftrace_agent::clock;

fn write(c: &mut Criterion) {
    let len = buffer::HEADER_SIZE + (1 << 15) * buffer::SLOT_SIZE;
    let mut mem = vec![0u64; len / 8];
    // SAFETY: zeroed, 8-aligned, `len` bytes, alive for the whole benchmark.
    let w = unsafe {
        buffer::init(
            mem.as_mut_ptr().cast(),
            len,
            buffer::SlotMode::Overwrite,
            1,
            1,
            b"bench",
        )
    };
    let mut ip = 0u64;
    c.bench_function("buffer write (overwrite mode)", |b| {
        b.iter(|| {
            ip += 1;
            // SAFETY: `w` describes `mem`.
            unsafe { w.write(ip, ip, 7, KIND_FUNC, 0, 0) }
        })
    });
    c.bench_function("rdtsc", |b| b.iter(clock::rdtsc));
    c.bench_function("clock_gettime(MONOTONIC)", |b| b.iter(clock::mono_ns));
    drop(mem);
}

// The macro-generated group function has no doc comment.
#[allow(missing_docs)]
mod group {
    criterion::criterion_group!(benches, super::write);
}
use group::benches;
criterion_main!(benches);
