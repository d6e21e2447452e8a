//! Per-CPU data reached through the GS base, and the platform traits built on it
//! ([`CpuId`], [`TaskContext`]).
//!
//! Each CPU points its `IA32_GS_BASE` at its own [`PerCpu`] slot ([`init_this_cpu`]), whose first
//! word is the slot's own address: `this_cpu()` is one `mov rax, gs:[0]`. Invariant: a CPU
//! calls [`init_this_cpu`] before anything traced or traceable runs on it; the slot is never
//! touched by another CPU except through its atomics.

use ftrace_core::TraceFlags;
use ftrace_core::event::TraceCtx;
use ftrace_core::platform::{CpuId, ExecContext, RecursionState, TaskContext};
use ftrace_core::recursion::TraceRecursion;

use crate::port::{RFLAGS_IF, rdmsr, read_rflags, wrmsr};
use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// The most CPUs the backend serves.
pub const MAX_CPUS: usize = 4;

const IA32_GS_BASE: u32 = 0xC000_0101;

/// One CPU's private state.
#[repr(C, align(64))]
pub struct PerCpu {
    /// This slot's own address (read through `gs:[0]`).
    self_ptr: AtomicU64,
    /// Dense CPU index.
    index: AtomicU32,
    /// How many exception handlers are running on this CPU (nested).
    exception_depth: AtomicU32,
    /// Recursion guard bits of the tracing code running on this CPU.
    trace_recursion: AtomicU32,
    /// The dispatcher's recursion word for what runs on this CPU (there are no tasks).
    ftrace_recursion: TraceRecursion,
}

impl PerCpu {
    const fn new() -> Self {
        Self {
            self_ptr: AtomicU64::new(0),
            index: AtomicU32::new(0),
            exception_depth: AtomicU32::new(0),
            trace_recursion: AtomicU32::new(0),
            ftrace_recursion: TraceRecursion::new(),
        }
    }

    /// This CPU's dense index.
    #[inline]
    pub fn index(&self) -> u32 {
        self.index.load(Ordering::Relaxed)
    }

    /// Whether an exception handler is running on this CPU.
    #[inline]
    pub fn in_exception(&self) -> bool {
        self.exception_depth.load(Ordering::Relaxed) != 0
    }

    /// Whether tracing code (a trace hook: the entry hook and the ops it calls, or the
    /// function_graph return hook) is running on this CPU.
    #[inline]
    pub fn in_trace_hook(&self) -> bool {
        self.trace_recursion.load(Ordering::Relaxed) != 0
    }

    /// Counts an exception handler in; returns the new nesting depth.
    pub(crate) fn enter_exception(&self) -> u32 {
        self.exception_depth.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn leave_exception(&self) {
        self.exception_depth.fetch_sub(1, Ordering::Relaxed);
    }

    /// Sets recursion bit `bit`; false if it was already set (the caller is recursing).
    #[inline]
    pub fn try_enter(&self, bit: u32) -> bool {
        let mask = 1 << bit;
        // Only this CPU touches its own bits, with interrupts off: a relaxed RMW is enough.
        self.trace_recursion.fetch_or(mask, Ordering::Relaxed) & mask == 0
    }

    /// Clears recursion bit `bit`.
    #[inline]
    pub fn leave(&self, bit: u32) {
        self.trace_recursion
            .fetch_and(!(1 << bit), Ordering::Relaxed);
    }
}

static PER_CPU: [PerCpu; MAX_CPUS] = [const { PerCpu::new() }; MAX_CPUS];
static ONLINE: AtomicU32 = AtomicU32::new(0);

/// Points this CPU's GS base at slot `index`.
///
/// # Safety
/// Ring 0, once per CPU, with a distinct `index < MAX_CPUS`, before [`this_cpu`] is used.
pub unsafe fn init_this_cpu(index: u32) {
    let slot = &PER_CPU[index as usize];
    let addr = slot as *const PerCpu as u64;
    slot.self_ptr.store(addr, Ordering::Relaxed);
    slot.index.store(index, Ordering::Relaxed);
    // SAFETY: IA32_GS_BASE takes any canonical address; the slot is static.
    unsafe { wrmsr(IA32_GS_BASE, addr) };
}

/// Counts the calling CPU online: from now on it is part of [`CpuId::possible_cpus`] and of
/// every cross-CPU sync.
///
/// # Safety
/// The CPU must have run [`init_this_cpu`] and loaded its IDT, and (for an AP) be able to take
/// the sync IPI ([`crate::smp`]). CPUs come online in index order.
pub unsafe fn mark_online() {
    ONLINE.fetch_add(1, Ordering::Release);
}

/// The calling CPU's slot.
#[inline(always)]
pub fn this_cpu() -> &'static PerCpu {
    let p: u64;
    // SAFETY: gs:[0] is the slot's self pointer once init_this_cpu has run (the module
    // invariant); the load has no other effect.
    unsafe {
        core::arch::asm!("mov {}, qword ptr gs:[0]", out(reg) p, options(nostack, readonly, preserves_flags))
    };
    // SAFETY: p is the address of a static PerCpu (module invariant).
    unsafe { &*(p as *const PerCpu) }
}

/// The calling CPU's slot, or `None` before [`init_this_cpu`] has run on it (for code that
/// may run that early, such as the allocator). Reads the GS base MSR: not for hot paths.
pub fn this_cpu_if_ready() -> Option<&'static PerCpu> {
    // SAFETY: reading IA32_GS_BASE has no side effect; ring 0.
    let base = unsafe { rdmsr(IA32_GS_BASE) };
    PER_CPU
        .iter()
        .find(|slot| core::ptr::eq(*slot, base as *const PerCpu))
}

/// Slot `index` (for readers that visit every CPU).
pub fn cpu_slot(index: usize) -> Option<&'static PerCpu> {
    PER_CPU.get(index)
}

/// CPUs counted online by [`mark_online`] (they hold indices `0..online_cpus()`).
pub fn online_cpus() -> u32 {
    ONLINE.load(Ordering::Acquire)
}

/// The bare-metal platform: a zero-sized handle implementing ftrace-core's platform traits.
///
/// There are no tasks: everything runs as pid 0, which Linux prints as `<idle>-0` (the boot
/// CPU's idle task is what runs a kernel before init). Interrupt state comes from RFLAGS.IF; an
/// exception handler counts as hard-interrupt context.
#[derive(Clone, Copy, Debug, Default)]
pub struct BareMetal;

impl CpuId for BareMetal {
    #[inline]
    fn current_cpu(&self) -> u32 {
        this_cpu().index()
    }

    fn possible_cpus(&self) -> u32 {
        online_cpus().max(1)
    }
}

impl TaskContext for BareMetal {
    #[inline]
    fn current_pid(&self) -> i32 {
        0
    }

    #[inline]
    fn trace_ctx(&self) -> TraceCtx {
        let mut flags = TraceFlags::empty();
        if read_rflags() & RFLAGS_IF == 0 {
            flags |= TraceFlags::IRQS_OFF;
        }
        if this_cpu().in_exception() {
            flags |= TraceFlags::HARDIRQ;
        }
        TraceCtx::new(flags, 0, 0)
    }

    #[inline]
    fn exec_context(&self) -> ExecContext {
        if this_cpu().in_exception() {
            ExecContext::Irq
        } else {
            ExecContext::Normal
        }
    }
}

impl RecursionState for BareMetal {
    /// A per-CPU word: interrupts are off while the dispatcher holds a bit (the hooks disable
    /// them), so the CPU cannot change under it.
    #[inline]
    fn trace_recursion(&self) -> &TraceRecursion {
        &this_cpu().ftrace_recursion
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_trace_hook_follows_the_recursion_bits() {
        let c = PerCpu::new();
        assert!(!c.in_trace_hook());
        assert!(c.try_enter(0));
        assert!(c.in_trace_hook());
        assert!(c.try_enter(1));
        c.leave(0);
        assert!(c.in_trace_hook(), "the return hook's bit still held");
        c.leave(1);
        assert!(!c.in_trace_hook());
    }
}
