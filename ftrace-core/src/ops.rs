//! `struct ftrace_ops`: a callback, its flags, and the filter and notrace hashes that decide
//! which functions it sees.
//!
//! An [`FtraceOps`] is registered with a [`Dispatcher`](crate::dispatch::Dispatcher), which
//! calls [`FtraceOps::func`] for every traced function the ops admits
//! ([`FtraceOps::admits`] is the kernel's `ftrace_ops_test`: empty filter = every function,
//! empty notrace = none excluded, notrace wins).
//!
//! Invariant: the hashes are published pointers. A reader dereferences them only inside a
//! read-side critical section of the dispatcher's [`Reclaim`](crate::platform::Reclaim), and a
//! replaced owned hash is freed only after a grace period.

use crate::filter::FtraceHash;
use crate::pid::PidFilter;
use crate::reclaim::RcuCell;
use crate::sync::{AtomicPtr, AtomicU32, Ordering, loom_const_fn};
use bitflags::bitflags;
use core::fmt;
use core::ptr;

bitflags! {
    /// `FTRACE_OPS_FL_*` (`include/linux/ftrace.h`, 6.12 values).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
    pub struct OpsFlags: u32 {
        /// Registered and live (set by the dispatcher).
        const ENABLED = 1 << 0;
        /// Not static data: may be freed after unregistering, so always called through the
        /// list walk under a read-side guard (set by the dispatcher).
        const DYNAMIC = 1 << 1;
        /// Wants the full register set; skipped on calls that have none.
        const SAVE_REGS = 1 << 2;
        /// Wants registers if the architecture can provide them.
        const SAVE_REGS_IF_SUPPORTED = 1 << 3;
        /// Asks the dispatcher to add recursion protection around the callback.
        const RECURSION = 1 << 4;
        /// A placeholder the list walk skips.
        const STUB = 1 << 5;
        /// Registered at least once (set by the dispatcher).
        const INITIALIZED = 1 << 6;
        /// Must never be registered again.
        const DELETED = 1 << 7;
        /// Being added (kernel bookkeeping flag; kept for layout identity).
        const ADDING = 1 << 8;
        /// Being removed: unlinked, waiting for the grace period (set by the dispatcher).
        const REMOVING = 1 << 9;
        /// Its hashes are being modified (kernel bookkeeping flag).
        const MODIFYING = 1 << 10;
        /// Its trampoline was allocated (kernel bookkeeping flag).
        const ALLOC_TRAMP = 1 << 11;
        /// May change the return ip (live patching); at most one per function.
        const IPMODIFY = 1 << 12;
        /// Honours the pid filter attached with [`FtraceOps::with_pid_filter`].
        const PID = 1 << 13;
        /// Call only when `rcu_is_watching()`.
        const RCU = 1 << 14;
        /// Belongs to a trace instance.
        const TRACE_ARRAY = 1 << 15;
        /// Cannot be disabled through `ftrace_enabled`.
        const PERMANENT = 1 << 16;
        /// A direct trampoline (BPF) is attached.
        const DIRECT = 1 << 17;
        /// A sub-ops of a manager ops (6.10+).
        const SUBOP = 1 << 18;
        /// The function-graph ops.
        const GRAPH = 1 << 19;
    }
}

impl OpsFlags {
    /// Flags only the dispatcher sets; ignored in [`FtraceOps::new`].
    pub const STATE: OpsFlags = OpsFlags::ENABLED
        .union(OpsFlags::DYNAMIC)
        .union(OpsFlags::INITIALIZED)
        .union(OpsFlags::REMOVING);

    /// Flags that keep a single registered ops off the direct fast path (the kernel's
    /// `ftrace_ops_get_list_func` / `ftrace_ops_get_func` rules, plus the pid filter).
    pub const NEEDS_LIST: OpsFlags = OpsFlags::DYNAMIC
        .union(OpsFlags::RCU)
        .union(OpsFlags::RECURSION)
        .union(OpsFlags::PID)
        .union(OpsFlags::STUB)
        .union(OpsFlags::SAVE_REGS);
}

/// The registers a trampoline saved (`struct ftrace_regs`): argument registers, stack and frame
/// pointers, the ip to resume at, and the return-value register.
///
/// `args` are `rdi rsi rdx rcx r8 r9` on x86_64 (the last two unused) and `x0`–`x7` on aarch64.
/// A callback flagged [`OpsFlags::IPMODIFY`] may change `ip` to divert the call.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FtraceRegs {
    /// Argument registers, in calling-convention order.
    pub args: [u64; 8],
    /// Where execution resumes (the traced function, past its patched call site).
    pub ip: u64,
    /// Stack pointer at the call site.
    pub sp: u64,
    /// Frame pointer at the call site.
    pub fp: u64,
    /// The return-value register (`rax` / `x0`) for return hooks.
    pub ret: u64,
}

/// An ops callback: `(ip, parent_ip, ops, regs)` (`ftrace_func_t`).
///
/// `ip` is the traced call site, `parent_ip` the return address into its caller, `regs` the
/// trampoline's save area if it provides one. Callbacks run in any context (interrupts, NMIs,
/// signal handlers): they must not block, and should take
/// [`TraceRecursion::try_lock_ftrace`](crate::recursion::TraceRecursion::try_lock_ftrace)
/// unless they flag [`OpsFlags::RECURSION`].
pub type FtraceFunc = fn(ip: u64, parent_ip: u64, op: &FtraceOps, regs: Option<&mut FtraceRegs>);

/// `struct ftrace_ops`.
pub struct FtraceOps {
    func: FtraceFunc,
    flags: AtomicU32,
    pub(crate) next: AtomicPtr<FtraceOps>,
    pub(crate) filter: RcuCell<FtraceHash>,
    pub(crate) notrace: RcuCell<FtraceHash>,
    pid: Option<&'static PidFilter>,
    private: *const (),
}

// SAFETY: every mutable field is atomic; `private` is an opaque value the ops never
// dereferences (whoever stores a pointer there decides what sharing it allows).
unsafe impl Sync for FtraceOps {}
// SAFETY: as above.
unsafe impl Send for FtraceOps {}

impl FtraceOps {
    loom_const_fn! {
        /// An ops calling `func`, with the caller-settable part of `flags` (the dispatcher's
        /// [`OpsFlags::STATE`] bits are dropped). No filter: it admits every function.
        pub fn new(func: FtraceFunc, flags: OpsFlags) -> FtraceOps {
            FtraceOps {
                func,
                flags: AtomicU32::new(flags.difference(OpsFlags::STATE).bits()),
                next: AtomicPtr::new(ptr::null_mut()),
                filter: RcuCell::empty(),
                notrace: RcuCell::empty(),
                pid: None,
                private: ptr::null(),
            }
        }
    }

    loom_const_fn! {
        /// Like [`FtraceOps::new`], with an opaque `private` value (`ops->private`) and an
        /// optional pid filter (which also sets [`OpsFlags::PID`]).
        pub fn with_private(
            func: FtraceFunc,
            flags: OpsFlags,
            private: *const (),
            pid: Option<&'static PidFilter>,
        ) -> FtraceOps {
            let mut bits = flags.difference(OpsFlags::STATE).bits();
            if pid.is_some() {
                bits |= OpsFlags::PID.bits();
            }
            FtraceOps {
                func,
                flags: AtomicU32::new(bits),
                next: AtomicPtr::new(ptr::null_mut()),
                filter: RcuCell::empty(),
                notrace: RcuCell::empty(),
                pid,
                private,
            }
        }
    }

    /// The callback.
    #[inline]
    pub fn func(&self) -> FtraceFunc {
        self.func
    }

    /// The current flags.
    #[inline]
    pub fn flags(&self) -> OpsFlags {
        OpsFlags::from_bits_retain(self.flags.load(Ordering::Acquire))
    }

    pub(crate) fn set_flags(&self, set: OpsFlags, clear: OpsFlags) {
        // Read-modify-write: `mark_deleted` may run outside the dispatcher's writer lock.
        if !clear.is_empty() {
            self.flags.fetch_and(!clear.bits(), Ordering::AcqRel);
        }
        if !set.is_empty() {
            self.flags.fetch_or(set.bits(), Ordering::AcqRel);
        }
    }

    /// Marks the ops `DELETED`: it can never be registered again.
    pub fn mark_deleted(&self) {
        self.flags
            .fetch_or(OpsFlags::DELETED.bits(), Ordering::AcqRel);
    }

    /// The opaque `private` value.
    #[inline]
    pub fn private(&self) -> *const () {
        self.private
    }

    /// The attached pid filter, if any.
    #[inline]
    pub fn pid_filter(&self) -> Option<&'static PidFilter> {
        self.pid
    }

    /// Whether both hashes are empty (safe without a guard: no dereference).
    #[inline]
    pub fn unfiltered(&self) -> bool {
        self.filter.is_empty() && self.notrace.is_empty()
    }

    /// The filter hash.
    ///
    /// # Safety
    /// The caller is inside a read-side critical section of the `Reclaim` that replaces this
    /// ops's hashes (the dispatcher's), and drops the reference before leaving it.
    #[inline]
    pub unsafe fn filter_hash<'g>(&self) -> Option<&'g FtraceHash> {
        // SAFETY: forwarded contract.
        unsafe { self.filter.load() }
    }

    /// The notrace hash. Same contract as [`FtraceOps::filter_hash`].
    ///
    /// # Safety
    /// As for [`FtraceOps::filter_hash`].
    #[inline]
    pub unsafe fn notrace_hash<'g>(&self) -> Option<&'g FtraceHash> {
        // SAFETY: forwarded contract.
        unsafe { self.notrace.load() }
    }

    /// `ftrace_ops_test`: whether this ops wants a call at `ip` (`have_regs`: whether the call
    /// provides registers).
    ///
    /// # Safety
    /// As for [`FtraceOps::filter_hash`].
    #[inline]
    pub unsafe fn admits(&self, ip: u64, have_regs: bool) -> bool {
        if !have_regs && self.flags().contains(OpsFlags::SAVE_REGS) {
            return false;
        }
        // SAFETY: forwarded contract.
        let (filter, notrace) = unsafe { (self.filter.load(), self.notrace.load()) };
        filter.is_none_or(|h| h.is_empty() || h.contains(ip))
            && notrace.is_none_or(|h| h.is_empty() || !h.contains(ip))
    }
}

impl fmt::Debug for FtraceOps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FtraceOps")
            .field("func", &(self.func as *const ()))
            .field("flags", &self.flags())
            .field("private", &self.private)
            .finish_non_exhaustive()
    }
}

impl Drop for FtraceOps {
    fn drop(&mut self) {
        debug_assert!(
            !self
                .flags()
                .intersects(OpsFlags::ENABLED | OpsFlags::REMOVING),
            "FtraceOps dropped while registered"
        );
    }
}
