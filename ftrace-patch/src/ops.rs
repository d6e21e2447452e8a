//! What the record table needs to know about an `ftrace_ops`: [`RecordOps`].
//!
//! The dispatcher's ops (in `ftrace-core`) carry callbacks, hashes and list links; the record
//! table only needs the few flags that change what a call site must call, whether the ops'
//! filter and notrace hashes admit an address, and the addresses it may be called through.
//!
//! Mapping to the kernel's `ftrace_ops` (Linux 6.12):
//!
//! | here | kernel |
//! | --- | --- |
//! | [`OpsRecFlags::SAVE_REGS`] | `FTRACE_OPS_FL_SAVE_REGS` (or `SAVE_REGS_IF_SUPPORTED` on an arch with regs) |
//! | [`OpsRecFlags::IPMODIFY`] | `FTRACE_OPS_FL_IPMODIFY` |
//! | [`OpsRecFlags::DIRECT`] | `FTRACE_OPS_FL_DIRECT` |
//! | [`OpsRecFlags::CALL_OPS_OK`] | `ftrace_ops_get_func(ops) == ops->func` (neither `RECURSION` nor `RCU`, no PID filter): the callback may be called straight from the `CALL_OPS` literal |
//! | [`RecordOps::admits`] | `hash_contains_ip(ip, ops->func_hash)`: (filter empty or contains ip) and (notrace empty or lacks ip) |
//! | [`RecordOps::trampoline`] | `ops->trampoline` (`FTRACE_OPS_FL_ALLOC_TRAMP` or a static one) |
//! | [`RecordOps::direct_call`] | the `direct_functions` hash entry for `ip` |
//! | [`RecordOps::ops_addr`] | the `struct ftrace_ops *` the arch trampoline loads |
//!
//! The bits use the kernel's values, so `OpsRecFlags::from_bits_truncate(kernel_flags)` maps a
//! kernel flag word directly.
//!
//! Invariant: everything here is a pure function of the ops' current state; the table calls it
//! while the caller holds the update lock (the kernel's `ftrace_lock`).

bitflags::bitflags! {
    /// The `ftrace_ops` flags that affect call sites (kernel bit values).
    #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
    pub struct OpsRecFlags: u32 {
        /// `FTRACE_OPS_FL_SAVE_REGS`: needs full `pt_regs` (the regs trampoline).
        const SAVE_REGS = 1 << 2;
        /// `FTRACE_OPS_FL_IPMODIFY`: may change the return IP; at most one per function.
        const IPMODIFY = 1 << 12;
        /// `FTRACE_OPS_FL_DIRECT`: attaches direct trampolines.
        const DIRECT = 1 << 17;
        /// Not a kernel flag: `ftrace_ops_get_func(ops) == ops->func` (bit 31 is unused there).
        const CALL_OPS_OK = 1 << 31;
    }
}

/// An ops as the record table sees it.
pub trait RecordOps {
    /// Its call-site-relevant flags.
    fn flags(&self) -> OpsRecFlags;

    /// Whether its filter and notrace hashes admit `ip` (filter: empty = all; notrace: empty =
    /// none).
    fn admits(&self, ip: u64) -> bool;

    /// Its own trampoline, if it has one.
    fn trampoline(&self) -> Option<u64> {
        None
    }

    /// For a `DIRECT` ops, the direct trampoline attached at `ip`.
    fn direct_call(&self, ip: u64) -> Option<u64> {
        let _ = ip;
        None
    }

    /// The address of the ops itself (stored in an AArch64 `CALL_OPS` literal).
    fn ops_addr(&self) -> u64;

    /// Its callback's address (only printed in reports).
    fn func(&self) -> u64 {
        0
    }
}

impl<T: RecordOps + ?Sized> RecordOps for &T {
    fn flags(&self) -> OpsRecFlags {
        (**self).flags()
    }
    fn admits(&self, ip: u64) -> bool {
        (**self).admits(ip)
    }
    fn trampoline(&self) -> Option<u64> {
        (**self).trampoline()
    }
    fn direct_call(&self, ip: u64) -> Option<u64> {
        (**self).direct_call(ip)
    }
    fn ops_addr(&self) -> u64 {
        (**self).ops_addr()
    }
    fn func(&self) -> u64 {
        (**self).func()
    }
}

/// The addresses shared by all ops: the common trampolines and, for `CALL_OPS`, the ops the
/// literal points at when no single ops owns the site. They may depend on the call site (a
/// userspace backend maps one trampoline page near each loaded object, within `rel32` reach).
pub trait CallTargets {
    /// `FTRACE_ADDR` (`ftrace_caller`) reachable from `ip`.
    fn caller(&self, ip: u64) -> u64;
    /// `FTRACE_REGS_ADDR` (`ftrace_regs_caller`) reachable from `ip`; the same as
    /// [`CallTargets::caller`] where one trampoline saves everything.
    fn regs_caller(&self, ip: u64) -> u64 {
        self.caller(ip)
    }
    /// `&ftrace_list_ops`: the literal of an enabled site with several ops.
    fn list_ops(&self) -> u64 {
        0
    }
    /// `&ftrace_nop_ops`: the literal of a disabled site.
    fn nop_ops(&self) -> u64 {
        0
    }
}

/// The simplest [`CallTargets`]: fixed addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct FixedTargets {
    /// `ftrace_caller`.
    pub caller: u64,
    /// `ftrace_regs_caller`.
    pub regs_caller: u64,
    /// `ftrace_list_ops`.
    pub list_ops: u64,
    /// `ftrace_nop_ops`.
    pub nop_ops: u64,
}

impl CallTargets for FixedTargets {
    fn caller(&self, _ip: u64) -> u64 {
        self.caller
    }
    fn regs_caller(&self, _ip: u64) -> u64 {
        self.regs_caller
    }
    fn list_ops(&self) -> u64 {
        self.list_ops
    }
    fn nop_ops(&self) -> u64 {
        self.nop_ops
    }
}
