// SPDX-License-Identifier: GPL-2.0
//! The ftrace-core platform traits, implemented on the running Linux kernel.
//!
//! Each implementation is a zero-sized type whose methods call an exported notrace kernel
//! function or a notrace function of the C shim, so they may run inside the ftrace callback.
//! Invariant: nothing here allocates, sleeps or calls traceable code.

use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::platform::{CpuId, ExecContext, TaskContext, TraceClock};

use crate::shim;

/// The `local` trace clock: the kernel's `local_clock()` (per-CPU `sched_clock`, ns), the
/// kernel's own default trace clock.
#[derive(Clone, Copy, Default)]
pub(crate) struct LocalClock;

impl TraceClock for LocalClock {
    const NAME: &'static str = "local";

    #[inline]
    fn now_ns(&self) -> u64 {
        // SAFETY: exported, notrace, callable from any context (NMI included).
        unsafe { shim::local_clock() }
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
    fn raw(&self) -> shim::ShimCtx {
        let mut c = shim::ShimCtx::default();
        // SAFETY: fills the caller's struct with the current CPU's state; notrace.
        unsafe { shim::rfl_shim_ctx(&mut c) };
        c
    }
}

/// The trace context word from the shim's raw state, as `tracing_gen_ctx_irq_test()` builds it.
/// `preempt_bias` is how many preempt_disable levels the tracer itself added (the kernel's
/// `tracing_gen_ctx_dec()` subtracts the one its function tracer holds).
pub(crate) fn trace_ctx_from(c: &shim::ShimCtx, preempt_bias: u32) -> TraceCtx {
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
    let depth = (c.preempt_count & 0xff).saturating_sub(preempt_bias);
    TraceCtx::new(flags, depth, c.migrate_disable)
}

impl TaskContext for KernelTask {
    #[inline]
    fn current_pid(&self) -> i32 {
        // SAFETY: reads current->pid; notrace.
        unsafe { shim::rfl_shim_current_pid() }
    }

    /// The context of the traced function: the callback holds one preempt_disable level of
    /// its own, which is not the traced code's (as `tracing_gen_ctx_dec()`).
    fn trace_ctx(&self) -> TraceCtx {
        trace_ctx_from(&self.raw(), 1)
    }

    fn exec_context(&self) -> ExecContext {
        let c = self.raw();
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
}
