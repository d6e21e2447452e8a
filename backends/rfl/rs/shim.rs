// SPDX-License-Identifier: GPL-2.0
//! The C shim's functions (ftrace_rs_shim.c / ftrace_rs_shim.h) and the few exported kernel
//! functions the module calls directly.
//!
//! Every function here is `notrace` on the C side (or an exported notrace kernel function), so
//! calling it from the ftrace callback cannot recurse into the callback.

use core::ffi::{c_char, c_int, c_uint, c_void};

/// `struct rfl_shim_ctx`: the raw context of the current CPU (see ftrace_rs_shim.h).
#[repr(C)]
#[derive(Default, Clone, Copy)]
pub(crate) struct ShimCtx {
    pub(crate) preempt_count: u32,
    pub(crate) migrate_disable: u32,
    pub(crate) irqs_disabled: u8,
    pub(crate) in_nmi: u8,
    pub(crate) in_hardirq: u8,
    pub(crate) in_serving_softirq: u8,
    pub(crate) bh_disabled: u8,
    pub(crate) need_resched: u8,
    pub(crate) preempt_need_resched: u8,
    pub(crate) pad: u8,
}

/// Opaque `struct seq_file`.
#[repr(C)]
pub struct SeqFile {
    _private: [u8; 0],
}

extern "C" {
    pub(crate) fn rfl_shim_register() -> c_int;
    pub(crate) fn rfl_shim_unregister() -> c_int;
    pub(crate) fn rfl_shim_filter() -> *const c_char;
    pub(crate) fn rfl_shim_pages_per_cpu() -> c_uint;

    pub(crate) fn rfl_shim_preempt_disable();
    pub(crate) fn rfl_shim_preempt_enable();
    pub(crate) fn rfl_shim_cpu() -> c_uint;
    pub(crate) fn rfl_shim_nr_cpu_ids() -> c_uint;
    pub(crate) fn rfl_shim_ctx(out: *mut ShimCtx);
    pub(crate) fn rfl_shim_current_pid() -> c_int;
    pub(crate) fn rfl_shim_current_comm(out: *mut u8);

    pub(crate) fn rfl_shim_alloc(size: usize, align: usize) -> *mut c_void;
    pub(crate) fn rfl_shim_free(ptr: *mut c_void, size: usize);
    pub(crate) fn rfl_shim_synchronize();
    pub(crate) fn rfl_shim_sleep_us(us: c_uint);
    pub(crate) fn rfl_shim_rcu_read_lock();
    pub(crate) fn rfl_shim_rcu_read_unlock();
    pub(crate) fn rfl_shim_rcu_is_watching() -> c_int;

    pub(crate) fn rfl_shim_sprint_symbol(buf: *mut c_char, addr: usize) -> c_int;
    pub(crate) fn rfl_shim_ksym_symbol_len() -> c_uint;

    pub(crate) fn rfl_shim_debugfs_create() -> c_int;
    pub(crate) fn rfl_shim_debugfs_remove();
    pub(crate) fn rfl_shim_seq_write(m: *mut SeqFile, data: *const c_void, len: usize);

    /// The kernel's `local` trace clock (`sched_clock()`, ns; exported, notrace).
    pub(crate) fn trace_clock_local() -> u64;
}

/// A `core::fmt::Write` sink that appends to a `seq_file`.
pub(crate) struct SeqWriter(pub(crate) *mut SeqFile);

impl ftrace_tracers::output::ByteSink for SeqWriter {
    fn put(&mut self, bytes: &[u8]) -> core::fmt::Result {
        // SAFETY: as in write_str.
        unsafe { rfl_shim_seq_write(self.0, bytes.as_ptr().cast(), bytes.len()) };
        Ok(())
    }
}

impl core::fmt::Write for SeqWriter {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        // SAFETY: self.0 is the seq_file of the show callback that created this writer; seq_write
        // copies `s` (or marks the file as overflowed, and seq_file retries with a bigger buffer).
        unsafe { rfl_shim_seq_write(self.0, s.as_ptr().cast(), s.len()) };
        Ok(())
    }
}
