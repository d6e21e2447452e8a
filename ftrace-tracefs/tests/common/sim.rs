//! A host platform for [`TraceArray`] tests: one thread is one CPU (and one task), the clock
//! ticks 1 µs per reading, the traced "kernel" is a handful of functions.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

use ftrace_tracefs::array::{
    HeapPages, NoCallSites, Platform, Symbol, SymbolSlice, SymbolTable, TraceArray,
};

pub static SYMS: SymbolSlice = SymbolSlice(&[
    Symbol::new("schedule", 0x1000, 0x100),
    Symbol::new("do_work", 0x2000, 0x100),
    Symbol::new("helper", 0x3000, 0x100),
    Symbol::new("leaf", 0x4000, 0x100),
]);
pub const SCHEDULE: usize = 0x1000;
pub const DO_WORK: usize = 0x2000;
pub const HELPER: usize = 0x3000;
pub const LEAF: usize = 0x4000;
pub const RETURN_HANDLER: usize = 0xffff_0000;

thread_local! {
    static CPU: Cell<u32> = const { Cell::new(0) };
    static PID: Cell<i32> = const { Cell::new(1) };
}
static CLOCK: AtomicU64 = AtomicU64::new(1_000_000_000);

/// Runs the rest of this thread as `pid` on `cpu`.
pub fn become_task(cpu: u32, pid: i32) {
    CPU.set(cpu);
    PID.set(pid);
}

pub struct Sim;

// SAFETY: each thread is its own CPU id (`become_task` sets a thread-local); the tests never
// give two threads the same id at once.
unsafe impl Platform for Sim {
    type Pages = HeapPages;
    type Text = NoCallSites;
    fn now_ns(&self) -> u64 {
        CLOCK.fetch_add(1000, Ordering::Relaxed)
    }
    fn current_cpu(&self) -> u32 {
        CPU.get()
    }
    fn current_pid(&self) -> i32 {
        PID.get()
    }
    fn comm(&self, pid: i32) -> Option<&str> {
        ["init", "worker", "other"].get(pid as usize - 1).copied()
    }
    fn symbols(&self) -> &'static (dyn SymbolTable + Sync) {
        &SYMS
    }
    fn return_handler(&self) -> usize {
        RETURN_HANDLER
    }
}

/// A simulated call of `ip` from `parent_ip` through the trampolines, running `body` inside.
pub fn call(array: &TraceArray<Sim, 2>, ip: usize, parent_ip: usize, body: impl FnOnce()) {
    let mut slot = parent_ip;
    array.on_entry(ip, parent_ip, &mut slot);
    body();
    if slot == RETURN_HANDLER {
        assert_eq!(array.on_return(), parent_ip);
    }
}

/// `schedule` → `do_work` → (`helper` → `leaf`, `helper`).
pub fn workload(array: &TraceArray<Sim, 2>) {
    call(array, SCHEDULE, 0x9000, || {
        call(array, DO_WORK, SCHEDULE + 0x10, || {
            call(array, HELPER, DO_WORK + 0x10, || {
                call(array, LEAF, HELPER + 0x10, || {})
            });
            call(array, HELPER, DO_WORK + 0x20, || {});
        })
    });
}
