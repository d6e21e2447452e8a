//! A complete host-simulated backend: a platform, a `static` instance, a simulated trampoline
//! on two threads (one per CPU), `cat trace` for function and function_graph, and a bad
//! write with its errno.
//!
//! Run it with `cargo run -p ftrace-tracefs --example host`; `tests/host_example.rs` checks
//! its output against the kernel's formats and its size.

// Everything a platform and a session name: `Platform`, `TraceArray`, `HeapPages`, `Symbol`,
// `SymbolSlice`, `SymbolTable`, `WriteMode`.
use ftrace_tracefs::array::*;

// The simulated kernel: its functions (sorted by address) and its CPUs (one per thread).
static SYMS: SymbolSlice = SymbolSlice(&[
    Symbol::new("schedule", 0x1000, 0x100),
    Symbol::new("do_work", 0x2000, 0x100),
]);
thread_local!(static CPU: std::cell::Cell<u32> = const { std::cell::Cell::new(0) });

/// The platform: the wall clock, one thread per CPU, whose pid is 100 + the CPU (no task
/// names: lines print the kernel's `<...>`), no call sites to patch (every call is traced).
struct Host;
// SAFETY: each thread is its own CPU id (`CPU` is thread-local), so writers of one id nest.
unsafe impl Platform for Host {
    type Pages = HeapPages;
    type Text = NoCallSites;
    fn now_ns(&self) -> u64 {
        std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos() as u64
    }
    fn current_cpu(&self) -> u32 {
        CPU.get()
    }
    fn current_pid(&self) -> i32 {
        100 + CPU.get() as i32
    }
    fn symbols(&self) -> &'static (dyn SymbolTable + Sync) {
        &SYMS
    }
    fn return_handler(&self) -> usize {
        0xffff_0000
    }
}
static TRACE: TraceArray<Host, 2> = TraceArray::new(Host);

/// What a patched call site and the return trampoline do around a traced function.
fn traced(ip: usize, parent_ip: usize, body: impl FnOnce()) {
    let mut ret_slot = parent_ip;
    TRACE.on_entry(ip, parent_ip, &mut ret_slot);
    body();
    if ret_slot == TRACE.platform().return_handler() {
        assert_eq!(TRACE.on_return(), parent_ip, "the original return address");
    }
}

/// The simulated workload, one thread per CPU: `schedule` calls `do_work` twice.
fn workload() {
    let threads: Vec<_> = (0..2)
        .map(|cpu| {
            std::thread::spawn(move || {
                CPU.set(cpu);
                traced(0x1000, 0x9000, || {
                    traced(0x2000, 0x1010, || {});
                    traced(0x2000, 0x1020, || {});
                });
            })
        })
        .collect();
    threads
        .into_iter()
        .for_each(|t| t.join().expect("workload thread"));
}

/// The session: `cat trace` after each tracer ran the workload, then a bad write.
pub fn main() -> Result<(), ftrace_tracefs::Errno> {
    let mut fs = TRACE.tracefs()?;
    for tracer in ["function", "function_graph"] {
        fs.write_all("current_tracer", tracer.as_bytes(), WriteMode::Truncate)?;
        workload();
        print!("{}", String::from_utf8_lossy(&fs.read_to_end("trace")?));
    }
    let bad = fs.write_all("current_tracer", b"bogus", WriteMode::Truncate);
    println!("echo bogus > current_tracer: {0:?} ({0})", bad.unwrap_err());
    Ok(())
}
