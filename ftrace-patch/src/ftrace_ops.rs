//! [`RecordOps`] for the ftrace-core dispatcher's [`FtraceOps`]: [`FtraceOpsView`].
//!
//! The record table asks an ops four things: its call-site flags, whether its hashes admit an
//! address, its own trampoline and the address the `CALL_OPS` literal should hold. For an
//! [`FtraceOps`] they map as the table in [`ops`](crate::ops) says (Linux 6.12 values):
//! `SAVE_REGS` ← `FTRACE_OPS_FL_SAVE_REGS`, or `SAVE_REGS_IF_SUPPORTED` where the architecture
//! saves registers; `IPMODIFY` and `DIRECT` ← the same flags; `CALL_OPS_OK` ← neither
//! `RECURSION` nor `RCU` nor a pid filter (`ftrace_ops_get_func(ops) == ops->func`); `admits`
//! ← `ftrace_ops_test` on the filter and notrace hashes (registers assumed available).
//!
//! Invariant: a view reads the ops' published hashes, so it must not outlive the moment they
//! can be replaced and freed: the code holding it serialises hash updates of that ops with its
//! use of the view (the kernel's `ftrace_lock`), or is inside a read-side critical section of
//! the dispatcher's reclaimer. [`FtraceOpsView::new`] is `unsafe` for that reason.

use ftrace_core::ops::{FtraceOps, OpsFlags};

use crate::ops::{OpsRecFlags, RecordOps};

/// An [`FtraceOps`] as the record table sees it.
#[derive(Clone, Copy, Debug)]
pub struct FtraceOpsView<'a> {
    op: &'a FtraceOps,
    regs_supported: bool,
    trampoline: Option<u64>,
}

impl<'a> FtraceOpsView<'a> {
    /// Views `op` (no trampoline of its own, registers supported: x86_64 and AArch64 with
    /// `DYNAMIC_FTRACE_WITH_REGS` / `WITH_ARGS`).
    ///
    /// # Safety
    /// While the view exists, `op`'s filter and notrace hashes are not replaced
    /// ([`Dispatcher::set_filter`](ftrace_core::dispatch::Dispatcher::set_filter) and
    /// `set_notrace` on `op` are serialised with every use of the view), or the caller holds a
    /// read-side guard of the reclaimer those calls retire old hashes through.
    pub unsafe fn new(op: &'a FtraceOps) -> FtraceOpsView<'a> {
        FtraceOpsView {
            op,
            regs_supported: true,
            trampoline: None,
        }
    }

    /// Whether the platform's trampolines can save full registers (then
    /// `SAVE_REGS_IF_SUPPORTED` counts as `SAVE_REGS`).
    pub fn regs_supported(mut self, yes: bool) -> Self {
        self.regs_supported = yes;
        self
    }

    /// Gives the ops its own trampoline (`ops->trampoline`).
    pub fn with_trampoline(mut self, trampoline: Option<u64>) -> Self {
        self.trampoline = trampoline;
        self
    }

    /// The ops viewed.
    pub fn ops(&self) -> &'a FtraceOps {
        self.op
    }
}

/// The call-site flags of an ops with kernel flags `flags` (and a pid filter or not).
pub fn rec_flags(flags: OpsFlags, has_pid_filter: bool, regs_supported: bool) -> OpsRecFlags {
    let mut f = OpsRecFlags::empty();
    if flags.contains(OpsFlags::SAVE_REGS)
        || (regs_supported && flags.contains(OpsFlags::SAVE_REGS_IF_SUPPORTED))
    {
        f |= OpsRecFlags::SAVE_REGS;
    }
    if flags.contains(OpsFlags::IPMODIFY) {
        f |= OpsRecFlags::IPMODIFY;
    }
    if flags.contains(OpsFlags::DIRECT) {
        f |= OpsRecFlags::DIRECT;
    }
    if !flags.intersects(OpsFlags::RECURSION | OpsFlags::RCU | OpsFlags::PID) && !has_pid_filter {
        f |= OpsRecFlags::CALL_OPS_OK;
    }
    f
}

impl RecordOps for FtraceOpsView<'_> {
    fn flags(&self) -> OpsRecFlags {
        rec_flags(
            self.op.flags(),
            self.op.pid_filter().is_some(),
            self.regs_supported,
        )
    }

    fn admits(&self, ip: u64) -> bool {
        // SAFETY: the hashes are not replaced while the view exists (`new`'s contract).
        unsafe { self.op.admits(ip, true) }
    }

    fn trampoline(&self) -> Option<u64> {
        self.trampoline
    }

    fn ops_addr(&self) -> u64 {
        self.op as *const FtraceOps as usize as u64
    }

    fn func(&self) -> u64 {
        self.op.func() as usize as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_mapping() {
        let f = |fl: OpsFlags| rec_flags(fl, false, true);
        assert_eq!(f(OpsFlags::empty()), OpsRecFlags::CALL_OPS_OK);
        assert_eq!(
            f(OpsFlags::SAVE_REGS | OpsFlags::RECURSION),
            OpsRecFlags::SAVE_REGS
        );
        assert_eq!(
            f(OpsFlags::SAVE_REGS_IF_SUPPORTED),
            OpsRecFlags::SAVE_REGS | OpsRecFlags::CALL_OPS_OK
        );
        assert_eq!(
            rec_flags(OpsFlags::SAVE_REGS_IF_SUPPORTED, false, false),
            OpsRecFlags::CALL_OPS_OK
        );
        assert_eq!(f(OpsFlags::IPMODIFY | OpsFlags::RCU), OpsRecFlags::IPMODIFY);
        assert_eq!(
            f(OpsFlags::DIRECT),
            OpsRecFlags::DIRECT | OpsRecFlags::CALL_OPS_OK
        );
        assert_eq!(f(OpsFlags::PID), OpsRecFlags::empty());
        assert_eq!(
            rec_flags(OpsFlags::empty(), true, true),
            OpsRecFlags::empty()
        );
    }
}
