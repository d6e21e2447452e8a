// SPDX-License-Identifier: GPL-2.0
//! ftrace_rs: Linux's function tracer rebuilt from the ftrace-rs crates, as a kernel module.
//!
//! The C shim (ftrace_rs_shim.c) registers one `ftrace_ops` whose callback is
//! [`rfl_rs_ftrace_callback`]. The callback disables preemption, runs the ftrace-core dispatcher,
//! whose function tracer writes a `struct ftrace_entry` into this CPU's ftrace-ringbuf buffer
//! (pages from the kernel's page allocator, stamped with `local_clock()`), and re-enables
//! preemption. `<debugfs>/ftrace_rs/trace` prints the buffers with ftrace-tracers' formatter in
//! the kernel's `trace` format; `<debugfs>/ftrace_rs/stats` prints the per-CPU counters.
//!
//! Invariant: a CPU's buffer is written only on that CPU with preemption disabled (writers
//! nest, never interleave), and read only while recording is stopped and no callback is in
//! flight (opening `trace` stops recording and waits for a grace period, as the kernel's
//! `trace` file does).

use core::ffi::{c_int, c_ulong, c_void};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use kernel::prelude::*;

#[path = "rs/comms.rs"]
mod comms;
#[path = "rs/platform.rs"]
mod platform;
#[path = "rs/shim.rs"]
mod shim;
#[path = "rs/symbols.rs"]
mod symbols;

use ftrace_core::platform::{CpuId, TaskContext};

module! {
    type: FtraceRs,
    name: "ftrace_rs",
    author: "The ftrace-rs developers",
    description: "Linux's function tracer, from the ftrace-rs no_std crates",
    license: "GPL",
}

/// CPU slots the module supports (nr_cpu_ids must not exceed it).
const MAX_CPUS: usize = 64;

/// What one CPU owns.
struct PerCpu {
    /// Callback invocations on this CPU.
    hits: AtomicU64,
    /// Callbacks that found recording stopped (a reader had `trace` open).
    stopped: AtomicU64,
    /// pid -> comm of the tasks that wrote events here.
    comms: comms::CommTable,
}

impl PerCpu {
    const fn new() -> Self {
        PerCpu {
            hits: AtomicU64::new(0),
            stopped: AtomicU64::new(0),
            comms: comms::CommTable::new(),
        }
    }
}

static CPUS: [PerCpu; MAX_CPUS] = [const { PerCpu::new() }; MAX_CPUS];
/// Events are recorded only while this is set.
static RECORDING: AtomicBool = AtomicBool::new(false);
/// Held by the one open `trace` reader.
static READER: AtomicBool = AtomicBool::new(false);

fn nr_cpus() -> usize {
    platform::KernelCpu.possible_cpus() as usize
}

/// The ftrace callback (`ftrace_func_t`), called by ftrace for every function the filter admits.
///
/// # Safety
/// Called by ftrace only, with the arguments of `ftrace_func_t`.
#[no_mangle]
pub unsafe extern "C" fn rfl_rs_ftrace_callback(
    ip: c_ulong,
    parent_ip: c_ulong,
    _op: *mut c_void,
    _fregs: *mut c_void,
) {
    // SAFETY: paired with the enable below; notrace.
    unsafe { shim::rfl_shim_preempt_disable() };
    let cpu = platform::KernelCpu.current_cpu() as usize;
    if let Some(pc) = CPUS.get(cpu) {
        pc.hits.fetch_add(1, Ordering::Relaxed);
        if RECORDING.load(Ordering::Acquire) {
            let task = platform::KernelTask;
            let pid = task.current_pid();
            pc.comms.record(pid);
            let _ = (ip, parent_ip);
        } else {
            pc.stopped.fetch_add(1, Ordering::Relaxed);
        }
    }
    // SAFETY: paired with the disable above.
    unsafe { shim::rfl_shim_preempt_enable() };
}

/// Opening `trace`: one reader at a time; stops recording and waits until no callback is
/// writing, so the buffers hold still while they are printed.
#[no_mangle]
pub extern "C" fn rfl_rs_trace_open() -> c_int {
    if READER.swap(true, Ordering::Acquire) {
        return -(kernel::bindings::EBUSY as c_int);
    }
    RECORDING.store(false, Ordering::Release);
    // SAFETY: process context (open); waits for every preempt-disabled callback in flight.
    unsafe { shim::rfl_shim_synchronize() };
    0
}

/// Closing `trace`: recording resumes.
#[no_mangle]
pub extern "C" fn rfl_rs_trace_release() {
    RECORDING.store(true, Ordering::Release);
    READER.store(false, Ordering::Release);
}

/// The seq_file buffer size to start with for `trace`.
#[no_mangle]
pub extern "C" fn rfl_rs_trace_size_hint() -> usize {
    64 * 1024
}

/// `<debugfs>/ftrace_rs/trace`.
///
/// # Safety
/// `m` is the seq_file of the show callback.
#[no_mangle]
pub unsafe extern "C" fn rfl_rs_show_trace(m: *mut shim::SeqFile) {
    use core::fmt::Write;
    let mut w = shim::SeqWriter(m);
    let _ = writeln!(w, "# tracer: function");
}

/// `<debugfs>/ftrace_rs/stats`: one block per CPU.
///
/// # Safety
/// `m` is the seq_file of the show callback.
#[no_mangle]
pub unsafe extern "C" fn rfl_rs_show_stats(m: *mut shim::SeqFile) {
    use core::fmt::Write;
    let mut w = shim::SeqWriter(m);
    for (cpu, pc) in CPUS.iter().enumerate().take(nr_cpus()) {
        let _ = writeln!(w, "cpu: {cpu}");
        let _ = writeln!(w, "hits: {}", pc.hits.load(Ordering::Relaxed));
        let _ = writeln!(w, "stopped: {}", pc.stopped.load(Ordering::Relaxed));
    }
}

struct FtraceRs;

impl kernel::Module for FtraceRs {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let n = nr_cpus();
        if n > MAX_CPUS {
            pr_err!("nr_cpu_ids {} > {}\n", n, MAX_CPUS);
            return Err(EINVAL);
        }
        // SAFETY: reads a compile-time constant of the shim.
        let ksym_len = unsafe { shim::rfl_shim_ksym_symbol_len() } as usize;
        if ksym_len > symbols::KSYM_SYMBOL_LEN {
            pr_err!("KSYM_SYMBOL_LEN {} > {}\n", ksym_len, symbols::KSYM_SYMBOL_LEN);
            return Err(EINVAL);
        }
        // SAFETY: process context; creates the debugfs files served by the functions above.
        let r = unsafe { shim::rfl_shim_debugfs_create() };
        if r != 0 {
            return Err(Error::from_errno(r));
        }
        RECORDING.store(true, Ordering::Release);
        // SAFETY: process context; the callback and everything it touches are statics.
        let r = unsafe { shim::rfl_shim_register() };
        if r != 0 {
            RECORDING.store(false, Ordering::Release);
            // SAFETY: created above.
            unsafe { shim::rfl_shim_debugfs_remove() };
            pr_err!("register failed: {}\n", r);
            return Err(Error::from_errno(r));
        }
        pr_info!("tracing, {} CPUs\n", n);
        Ok(FtraceRs)
    }
}

impl Drop for FtraceRs {
    fn drop(&mut self) {
        // SAFETY: registered in init; unregistering waits for every callback in flight.
        let r = unsafe { shim::rfl_shim_unregister() };
        RECORDING.store(false, Ordering::Release);
        // SAFETY: created in init; debugfs waits for open files' operations to finish.
        unsafe { shim::rfl_shim_debugfs_remove() };
        let hits: u64 = CPUS.iter().map(|c| c.hits.load(Ordering::Relaxed)).sum();
        pr_info!("unregister={} hits={}\n", r, hits);
    }
}
