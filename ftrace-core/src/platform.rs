//! The platform traits a backend implements.
//!
//! The core crates never ask the operating system anything directly: every clock read, CPU id,
//! task identity and deferred free goes through one of these traits. A backend (userspace,
//! bare metal, a Linux kernel module) implements them once, usually on a zero-sized type, and
//! hands that type to the tracing instance it creates.
//!
//! All methods here may be called from a traced function's entry, so implementations must be
//! reentrant, must not allocate, must not block, and must not call instrumented code.

use crate::event::TraceCtx;

/// The trace clock: what stamps every event.
///
/// # Contract
/// - `now_ns` is monotonic non-decreasing on one CPU (per buffer), counts nanoseconds (or the
///   unit [`TraceClock::NAME`] implies, e.g. `counter`), and is callable from any context,
///   including NMIs and signal handlers.
/// - It costs a few nanoseconds at most: it is on the hot path of every event.
pub trait TraceClock {
    /// The clock's name as `trace_clock` lists it (`"local"`, `"mono"`, `"x86-tsc"`...).
    const NAME: &'static str;

    /// The current time.
    fn now_ns(&self) -> u64;
}

/// Which CPU the caller runs on.
///
/// # Contract
/// The answer is a dense index below [`CpuId::possible_cpus`]. It may be stale as soon as it is
/// returned unless the caller has disabled preemption (kernel, bare metal) or writes to a
/// per-thread buffer (userspace), which is how the ring buffer's nesting contract is kept.
pub trait CpuId {
    /// The current CPU's index.
    fn current_cpu(&self) -> u32;

    /// The number of CPU slots (the `#P:` of the trace header).
    fn possible_cpus(&self) -> u32;
}

/// Who is running and in what context: the fields of [`TraceEntry`](crate::entry::TraceEntry)
/// besides the type.
pub trait TaskContext {
    /// The thread id written to `common_pid`.
    fn current_pid(&self) -> i32;

    /// The flags and preempt depths of the current context (`tracing_gen_ctx()`).
    fn trace_ctx(&self) -> TraceCtx;

    /// The execution context, for recursion protection: which of the four nesting levels the
    /// caller is in.
    fn exec_context(&self) -> ExecContext;
}

/// The nesting levels the kernel's recursion protection distinguishes (`trace_recursion` bits).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExecContext {
    /// Ordinary task (or thread) context.
    Normal = 0,
    /// Softirq (or, in userspace, nothing: unused).
    Softirq = 1,
    /// Hard interrupt (or a signal handler, in userspace).
    Irq = 2,
    /// Non-maskable interrupt.
    Nmi = 3,
}

/// Deferred reclamation: free memory only after every reader that might still see it is gone.
///
/// The dispatcher publishes a new ops list by pointer swap; the old list may still be walked
/// by a CPU that loaded it just before. `Reclaim` is how it waits: crossbeam-epoch in userspace,
/// RCU in the Linux kernel, a quiescent-state counter or stop-machine on bare metal.
///
/// # Safety
/// An implementation must guarantee that a pointer passed to [`Reclaim::defer`] is not freed
/// until every guard returned by [`Reclaim::pin`] that was live when `defer` was called has been
/// dropped, and that [`Reclaim::synchronize`] returns only once every such guard live when it
/// was called has been dropped.
pub unsafe trait Reclaim {
    /// A read-side critical section (an epoch guard, `rcu_read_lock`...).
    type Guard<'a>
    where
        Self: 'a;

    /// Enters a read-side critical section.
    fn pin(&self) -> Self::Guard<'_>;

    /// Schedules `free(ptr)` to run after a grace period.
    ///
    /// # Safety
    /// `ptr` must no longer be reachable by new readers, and `free` must be sound to call on it
    /// once, from any thread.
    unsafe fn defer(&self, ptr: *mut (), free: unsafe fn(*mut ()));

    /// Waits until every reader that started before this call has finished
    /// (`synchronize_rcu`). Must not be called from a read-side critical section.
    fn synchronize(&self);
}

/// What the ops dispatcher asks the platform on every traced call: the current task's
/// [`TraceRecursion`](crate::recursion::TraceRecursion) word (plus, through [`TaskContext`],
/// its execution context and pid).
///
/// # Contract
/// - [`RecursionState::trace_recursion`] returns the word of the current task: a thread-local
///   in userspace, `current->trace_recursion` in Linux, a per-CPU word on bare metal (then
///   preemption must be off while a bit is held, as it is in the kernel's trampolines).
/// - Like every method here it must not call instrumented code.
pub trait RecursionState: TaskContext {
    /// The current task's recursion word.
    fn trace_recursion(&self) -> &crate::recursion::TraceRecursion;

    /// `rcu_is_watching()`: whether ops flagged
    /// [`OpsFlags::RCU`](crate::ops::OpsFlags::RCU) may be called now. Platforms without the
    /// notion keep the default (`true`).
    #[inline]
    fn rcu_is_watching(&self) -> bool {
        true
    }
}
