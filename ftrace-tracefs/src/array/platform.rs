//! [`Platform`]: the one trait a backend implements to run a [`TraceArray`](super::TraceArray).

use ftrace_core::event::{TraceCtx, TraceFlags};
use ftrace_core::platform::ExecContext;
use ftrace_core::symbols::SymbolTable;
use ftrace_patch::FtraceBug;
use ftrace_ringbuf::PageProvider;

use super::CallSiteText;

/// What only the platform knows: the binding of a [`TraceArray`](super::TraceArray).
///
/// Required (a missing one is a compile error): the page provider, the call-site text (or
/// [`NoCallSites`](super::NoCallSites)), the clock, the current CPU, the current task's pid,
/// the symbol table and the address of the return trampoline.
/// Defaulted where the kernel has an obvious answer: the possible CPUs (the instance's
/// `CPUS`), the execution context (task context), the context word (derived from the
/// execution context), the `trace_marker` address and task names (none saved: lines print
/// `<...>`).
///
/// Deferred reclamation needs nothing from the platform: the instance waits for its readers
/// with ftrace-core's [`ReaderCount`](ftrace_core::reclaim::ReaderCount), which works on any
/// platform with atomics.
///
/// # Safety
///
/// The instance writes each CPU's ring buffer and shadow stack without locks, trusting
/// [`Platform::current_cpu`]: between the start of an entry point (`on_entry`, `on_return`,
/// a `trace_marker` write of the tree) and its end, the caller's answer does not change, and
/// two callers that give the same answer at the same time are nested (an interrupt, or a
/// nested call on the same thread, runs inside what it interrupted and finishes first): in
/// the kernel's words, the CPU id is read with preemption off. One thread per CPU id (the
/// host example), or a real CPU with preemption disabled around the trampolines (bare metal),
/// meets this.
pub unsafe trait Platform: Sync + 'static {
    /// Where the ring buffer's pages come from: a handle on the platform's page allocator
    /// (its `Default` is the handle the instance allocates through).
    type Pages: PageProvider + Clone + Default + Send + Sync + 'static;
    /// The text holding the call sites and how it is rewritten (dynamic ftrace), or
    /// [`NoCallSites`](super::NoCallSites) where every traced function always calls the
    /// trampoline. Taken once (its `Default`) when the tree is first built.
    type Text: CallSiteText;

    /// The trace clock (`local`), in nanoseconds; monotonic per CPU.
    fn now_ns(&self) -> u64;
    /// The CPU the caller runs on (`smp_processor_id()`), below [`Platform::possible_cpus`].
    fn current_cpu(&self) -> u32;
    /// The current task's pid (0 = idle).
    fn current_pid(&self) -> i32;
    /// The traced functions' symbols (`%ps`, the filter files).
    fn symbols(&self) -> &'static (dyn SymbolTable + Sync);
    /// The address `on_entry` writes into a hooked function's return slot: the platform's
    /// return trampoline, which calls [`TraceArray::on_return`](super::TraceArray::on_return).
    fn return_handler(&self) -> usize;

    /// The number of possible CPUs (`nr_cpu_ids`): by default all the instance's `CPUS`
    /// (an answer above `CPUS` is taken as `CPUS`).
    fn possible_cpus(&self) -> u32 {
        u32::MAX
    }
    /// The per-CPU buffer size tracing starts with, in bytes (the kernel's `trace_buf_size=`
    /// boot parameter; by default its 1441792).
    fn trace_buf_size(&self) -> u64 {
        crate::backend::TRACE_BUF_SIZE_DEFAULT
    }
    /// The execution context of the caller (irq, softirq, nmi or a task).
    fn exec_context(&self) -> ExecContext {
        ExecContext::Normal
    }
    /// The context word of an entry (`tracing_gen_ctx()`): by default the execution context's
    /// flag and no preemption depth.
    fn trace_ctx(&self) -> TraceCtx {
        let flags = match self.exec_context() {
            ExecContext::Normal => TraceFlags::empty(),
            ExecContext::Softirq => TraceFlags::SOFTIRQ,
            ExecContext::Irq => TraceFlags::HARDIRQ,
            ExecContext::Nmi => TraceFlags::NMI,
        };
        TraceCtx::new(flags, 0, 0)
    }
    /// The address `trace_marker` entries carry (the kernel's `tracing_mark_write`).
    fn marker_ip(&self) -> u64 {
        0
    }
    /// An `ftrace_bug()` report: a call site held bytes the patcher did not expect (or could
    /// not be written) and was disabled; the write that hit it fails with `EIO`. By default
    /// nothing is printed.
    fn ftrace_bug(&self, bug: &FtraceBug) {
        let _ = bug;
    }
    /// The command name of `pid`, if the platform knows it (`saved_cmdlines`).
    fn comm(&self, pid: i32) -> Option<&str> {
        let _ = pid;
        None
    }
}
