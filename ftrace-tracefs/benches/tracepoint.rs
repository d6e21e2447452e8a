//! What a `tracepoint!` call site costs: off (one relaxed load of its key, or with the
//! feature `tracepoint-jump-label` a 5-byte NOP), and on with one `u64` field, the probe
//! writing the record into a ring buffer with the same clock the simulated platform gives the
//! function tracer; beside it, in the same run, the function tracer's traced call through
//! `TraceArray` (as `benches/array.rs` measures it), and an empty call for the floor.
//!
//! ```text
//! cargo bench -p ftrace-tracefs --bench tracepoint                                  # load
//! cargo bench -p ftrace-tracefs --bench tracepoint --features tracepoint-jump-label # NOP
//! ```
//! Under the feature the bench installs a patcher that rewrites this process's own text
//! (`mprotect`, ftrace-patch's `jump_label::update_sites`), and checks the site's bytes.
#![allow(missing_docs)]

#[path = "../tests/common/mod.rs"]
mod common;

use std::hint::black_box;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use common::sim::{DO_WORK, RETURN_HANDLER, SCHEDULE, Sim, become_task};
use criterion::{Criterion, criterion_group, criterion_main};
use ftrace_core::platform::TraceClock;
use ftrace_core::tracepoint;
use ftrace_core::tracepoint::Tracepoint;
use ftrace_ringbuf::{CpuBuffer, HeapPages};
use ftrace_tracefs::WriteMode;
use ftrace_tracefs::array::TraceArray;

tracepoint! {
    /// `bench:bench_value`.
    pub fn trace_bench_value(value: u64 => "u64");
    record BenchValue;
    static BENCH_VALUE = ("bench", "bench_value", 500, "\"value=%llu\", REC->value");
}

static TRACE: TraceArray<Sim, 2> = TraceArray::new(Sim);
static BUF: OnceLock<CpuBuffer<HeapPages>> = OnceLock::new();
static CLOCK: AtomicU64 = AtomicU64::new(1_000_000_000);

struct Clock;

impl TraceClock for Clock {
    const NAME: &'static str = "counter";
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        CLOCK.fetch_add(1000, Ordering::Relaxed)
    }
}

/// The instance's side: the common fields, then reserve, copy, commit.
fn probe(_tp: &Tracepoint, rec: &mut [u8]) {
    rec[4..8].copy_from_slice(&2i32.to_le_bytes());
    let buf = BUF.get().unwrap();
    if let Some(mut r) = buf.reserve(rec.len(), &Clock) {
        r.data()[..rec.len()].copy_from_slice(rec);
        r.commit();
    }
}

fn traced_call() {
    let mut slot = SCHEDULE + 0x10;
    TRACE.on_entry(black_box(DO_WORK), SCHEDULE + 0x10, &mut slot);
    if slot == RETURN_HANDLER {
        black_box(TRACE.on_return());
    }
}

/// The call site as a program has it: not inlined into the loop, so each iteration pays the
/// call and the site's test.
#[inline(never)]
fn site(v: u64) {
    trace_bench_value(v)
}

/// The floor: the same call without a site.
#[inline(never)]
fn empty(v: u64) {
    black_box(v);
}

#[cfg(feature = "tracepoint-jump-label")]
mod own_text {
    //! This process's text as ftrace-patch's `TextPoke` (one thread runs the sites while
    //! they change: syncing is a no-op, stopping the others is running the patch).
    use ftrace_core::jump_label::entries_of;
    use ftrace_core::static_key::{Branch, StaticKey};
    use ftrace_patch::jump_label::update_key;
    use ftrace_patch::protocol::StopFixup;
    use ftrace_patch::{TextFault, TextPoke};

    struct OwnText;

    impl TextPoke for OwnText {
        fn read_text(&mut self, addr: u64, buf: &mut [u8]) -> Result<(), TextFault> {
            // SAFETY: `addr` is a jump-label site of this image's text, mapped readable.
            unsafe {
                std::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len())
            };
            Ok(())
        }
        fn write_text(&mut self, addr: u64, bytes: &[u8]) -> Result<(), TextFault> {
            let page = addr & !4095;
            let len = (addr + bytes.len() as u64 - page).next_multiple_of(4096) as usize;
            // SAFETY: the pages hold this image's text; they stay executable, and only the
            // site's bytes are written, while no other thread runs them.
            unsafe {
                let rwx = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
                if libc::mprotect(page as *mut libc::c_void, len, rwx) != 0 {
                    return Err(TextFault { addr });
                }
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len());
                libc::mprotect(
                    page as *mut libc::c_void,
                    len,
                    libc::PROT_READ | libc::PROT_EXEC,
                );
            }
            Ok(())
        }
        fn sync_cores(&mut self) {}
        fn stop_others(&mut self, _fixup: &StopFixup<'_>, patch: &mut dyn FnMut(&mut Self)) {
            patch(self)
        }
    }

    fn patch(key: &StaticKey, b: Branch) {
        let st = update_key(&mut OwnText, key, b);
        assert_eq!((st.failed, st.out_of_range), (0, 0), "{st:?}");
        assert_eq!(st.done, entries_of(key).count());
    }

    /// Installs the patcher; returns the first byte of each of `key`'s sites.
    pub fn install(key: &StaticKey) -> Vec<u8> {
        ftrace_core::jump_label::set_patcher(patch);
        first_bytes(key)
    }

    pub fn first_bytes(key: &StaticKey) -> Vec<u8> {
        // SAFETY: each entry's code is a site in this image's text.
        entries_of(key)
            .map(|e| unsafe { *(e.code as *const u8) })
            .collect()
    }
}

fn tracepoints(c: &mut Criterion) {
    BUF.set(CpuBuffer::new(HeapPages, 256, 4096).unwrap())
        .unwrap();
    #[cfg(feature = "tracepoint-jump-label")]
    {
        let off = own_text::install(BENCH_VALUE.key());
        assert!(
            !off.is_empty() && off.iter().all(|&b| b == 0x0f),
            "NOP sites: {off:x?}"
        );
    }
    let form = match cfg!(feature = "tracepoint-jump-label") {
        true => "NOP",
        false => "relaxed load",
    };
    let mut g = c.benchmark_group("tracepoint");
    g.bench_function("empty call", |b| b.iter(|| empty(black_box(7))));
    g.bench_function(format!("off, 1 u64 field ({form})"), |b| {
        b.iter(|| site(black_box(7)))
    });
    BENCH_VALUE.connect(probe).unwrap();
    #[cfg(feature = "tracepoint-jump-label")]
    {
        let on = own_text::first_bytes(BENCH_VALUE.key());
        assert!(on.iter().all(|&b| b == 0xe9), "jmp sites: {on:x?}");
    }
    g.bench_function(
        format!("on, 1 u64 field, into a ring buffer ({form})"),
        |b| b.iter(|| site(black_box(7))),
    );
    BENCH_VALUE.disconnect();
    become_task(0, 2);
    let mut fs = TRACE.tracefs().unwrap();
    fs.write_all("current_tracer", b"function", WriteMode::Truncate)
        .unwrap();
    g.bench_function("function tracer, traced call (TraceArray)", |b| {
        b.iter(traced_call)
    });
    g.finish();
}

criterion_group!(benches, tracepoints);
criterion_main!(benches);
