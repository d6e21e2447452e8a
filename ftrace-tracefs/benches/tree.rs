//! What one tracefs operation costs in the tree itself (a FUSE or serial server adds its own
//! transport): `cat` and `echo` of control files, a directory listing, a path lookup.
#![allow(missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use criterion::{Criterion, criterion_group, criterion_main};
use ftrace_tracefs::WriteMode;
use std::hint::black_box;

fn tree(c: &mut Criterion) {
    let mut fs = common::tracefs();
    c.bench_function("cat tracing_on", |b| {
        b.iter(|| black_box(fs.read_to_end("tracing_on").unwrap()))
    });
    c.bench_function("cat trace_options", |b| {
        b.iter(|| black_box(fs.read_to_end("trace_options").unwrap()))
    });
    c.bench_function("echo 1 > tracing_on", |b| {
        b.iter(|| {
            fs.write_all("tracing_on", black_box(b"1\n"), WriteMode::Truncate)
                .unwrap()
        })
    });
    c.bench_function("echo 50 > buffer_percent", |b| {
        b.iter(|| {
            fs.write_all("buffer_percent", black_box(b"50\n"), WriteMode::Truncate)
                .unwrap()
        })
    });
    c.bench_function("stat per_cpu/cpu1/stats", |b| {
        b.iter(|| black_box(fs.stat(black_box("per_cpu/cpu1/stats")).unwrap()))
    });
    c.bench_function("ls /", |b| b.iter(|| black_box(fs.read_dir("").unwrap())));
}

criterion_group!(benches, tree);
criterion_main!(benches);
