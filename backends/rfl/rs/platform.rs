// SPDX-License-Identifier: GPL-2.0
//! The ftrace-core platform traits, implemented on the running Linux kernel: the trace clock,
//! CPU ids, the current task's context, the dispatcher's recursion word and RCU.
//!
//! Each implementation is a zero-sized type whose methods call an exported notrace kernel
//! function or a notrace function of the C shim, so they may run inside the ftrace callback.
//! Invariant: nothing here allocates, sleeps or calls traceable code, except
//! [`KernelRcu`]'s grace periods, which only module init and exit reach.

use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::platform::{CpuId, ExecContext, Reclaim, RecursionState, TaskContext, TraceClock};
use ftrace_core::recursion::TraceRecursion;

use crate::shim;

/// The `local` trace clock: the kernel's own default trace clock, `trace_clock_local()`
/// (`sched_clock()`, ns), so our timestamps and the kernel's `trace` file's are comparable.
#[derive(Clone, Copy, Default)]
pub(crate) struct LocalClock;

impl TraceClock for LocalClock {
    const NAME: &'static str = "local";

    #[inline]
    fn now_ns(&self) -> u64 {
        // SAFETY: exported, notrace, callable from any context (NMI included).
        unsafe { shim::trace_clock_local() }
    }
}

/// CPU ids: `raw_smp_processor_id()` and `nr_cpu_ids`.
#[derive(Clone, Copy, Default)]
pub(crate) struct KernelCpu;

impl CpuId for KernelCpu {
    #[inline]
    fn current_cpu(&self) -> u32 {
        // SAFETY: reads this CPU's per-CPU id; stable while the caller keeps preemption off.
        unsafe { shim::rfl_shim_cpu() }
    }

    #[inline]
    fn possible_cpus(&self) -> u32 {
        // SAFETY: reads the boot-time constant nr_cpu_ids.
        unsafe { shim::rfl_shim_nr_cpu_ids() }
    }
}

/// `current`: its pid, and the context word `tracing_gen_ctx()` would compute.
#[derive(Clone, Copy, Default)]
pub(crate) struct KernelTask;

impl KernelTask {
    /// The raw preempt/irq state of the current CPU and task.
    pub(crate) fn raw(&self) -> shim::ShimCtx {
        let mut c = shim::ShimCtx::default();
        // SAFETY: fills the caller's struct with the current CPU's state; notrace.
        unsafe { shim::rfl_shim_ctx(&mut c) };
        c
    }
}

/// The execution context (recursion level) the raw state describes.
pub(crate) fn exec_context_from(c: &shim::ShimCtx) -> ExecContext {
    if c.in_nmi != 0 {
        ExecContext::Nmi
    } else if c.in_hardirq != 0 {
        ExecContext::Irq
    } else if c.in_serving_softirq != 0 {
        ExecContext::Softirq
    } else {
        ExecContext::Normal
    }
}

/// The trace context word from the shim's raw state, as `tracing_gen_ctx_irq_test()` builds it.
pub(crate) fn trace_ctx_from(c: &shim::ShimCtx) -> TraceCtx {
    let mut flags = TraceFlags::empty();
    if c.irqs_disabled != 0 {
        flags |= TraceFlags::IRQS_OFF;
    }
    if c.in_nmi != 0 {
        flags |= TraceFlags::NMI;
    }
    if c.in_hardirq != 0 {
        flags |= TraceFlags::HARDIRQ;
    }
    if c.in_serving_softirq != 0 {
        flags |= TraceFlags::SOFTIRQ;
    }
    if c.bh_disabled != 0 {
        flags |= TraceFlags::BH_OFF;
    }
    if c.need_resched != 0 {
        flags |= TraceFlags::NEED_RESCHED;
    }
    if c.preempt_need_resched != 0 {
        flags |= TraceFlags::PREEMPT_RESCHED;
    }
    TraceCtx::new(flags, c.preempt_count & 0xff, c.migrate_disable)
}

impl TaskContext for KernelTask {
    #[inline]
    fn current_pid(&self) -> i32 {
        // SAFETY: reads current->pid; notrace.
        unsafe { shim::rfl_shim_current_pid() }
    }

    /// The context of the traced function, as the module's ftrace callback captured it on
    /// entry, before it disabled preemption (what the kernel's `tracing_gen_ctx_dec()` gets by
    /// subtracting its own level; here the dispatcher's RCU section may add another, so the
    /// word is taken before any of ours).
    fn trace_ctx(&self) -> TraceCtx {
        crate::captured_ctx(KernelCpu.current_cpu() as usize, self.exec_context())
    }

    fn exec_context(&self) -> ExecContext {
        exec_context_from(&self.raw())
    }
}

/// The dispatcher's recursion word: one per CPU (the contract's bare-metal variant), not the
/// kernel's `current->trace_recursion`, whose bits the kernel's own ftrace code takes around
/// this module's callback when several ftrace_ops are registered. Valid because the callback
/// keeps preemption disabled while a bit is held, and interrupts nesting on the CPU take the
/// bit of their own context.
impl RecursionState for KernelTask {
    #[inline]
    fn trace_recursion(&self) -> &TraceRecursion {
        crate::recursion_word(KernelCpu.current_cpu() as usize)
    }

    #[inline]
    fn rcu_is_watching(&self) -> bool {
        // SAFETY: exported, notrace.
        unsafe { shim::rfl_shim_rcu_is_watching() != 0 }
    }
}

/// RCU as ftrace-core's [`Reclaim`]: `rcu_read_lock()` sections, `synchronize_rcu()` grace
/// periods.
#[derive(Clone, Copy, Default)]
pub(crate) struct KernelRcu;

/// An `rcu_read_lock()` section, left on drop.
pub(crate) struct RcuGuard;

impl Drop for RcuGuard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: pairs with the rcu_read_lock() in `KernelRcu::pin`.
        unsafe { shim::rfl_shim_rcu_read_unlock() }
    }
}

// SAFETY: `defer` frees only after `synchronize_rcu()`, which waits for every `rcu_read_lock()`
// section (and every preemption-disabled region) that began before it.
unsafe impl Reclaim for KernelRcu {
    type Guard<'a> = RcuGuard;

    #[inline]
    fn pin(&self) -> RcuGuard {
        // SAFETY: notrace; left by RcuGuard's drop.
        unsafe { shim::rfl_shim_rcu_read_lock() };
        RcuGuard
    }

    /// Waits for a grace period, then frees: this blocks, so it must only be called from
    /// process context. In this module the dispatcher reaches it only from (un)registration
    /// in module init and exit.
    unsafe fn defer(&self, ptr: *mut (), free: unsafe fn(*mut ())) {
        self.synchronize();
        // SAFETY: the grace period is over: no reader can still see `ptr` (caller's contract).
        unsafe { free(ptr) }
    }

    fn synchronize(&self) {
        // SAFETY: process context (see `defer`).
        unsafe { shim::rfl_shim_synchronize() }
    }
}
