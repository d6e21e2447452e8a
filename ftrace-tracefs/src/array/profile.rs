//! The function profiler: `function_profile_enabled` registers an ops of its own (whatever
//! the current tracer, as the kernel's `ftrace_profile_ops`) that counts every call per CPU
//! in ftrace-tracers' [`ProfileTable`]; `trace_stat/function<cpu>` prints the CPU's table.
//!
//! It counts hits ([`ProfileMode::Hits`], the kernel's columns without function_graph): the
//! per-call times need the return hook, which `function_graph`'s shadow stacks own here.
//!
//! Invariant: a CPU's table is touched only by whoever holds its `busy` flag: the profile ops
//! on that CPU (a call that finds it held, e.g. in an interrupt over a reader, is not counted
//! but added to [`TraceArray::profile_missed`]), or a reader copying it out. Tables are sized
//! for every call site when profiling starts, so counting never allocates.

use alloc::boxed::Box;
use core::cell::UnsafeCell;
use core::fmt;
use core::sync::atomic::{AtomicBool, Ordering};

use ftrace_core::Errno;
use ftrace_core::ops::{FtraceOps, FtraceRegs, OpsFlags};
use ftrace_tracers::profiler::{ProfileMode, ProfileTable};

use super::{Control, Platform, TraceArray};
use crate::backend::FunctionRecords;
use crate::records::PatchRecords;

/// One CPU's profile and who holds it.
pub(super) struct CpuProfile {
    busy: AtomicBool,
    table: UnsafeCell<Option<ProfileTable>>,
}

impl CpuProfile {
    pub(super) const fn new() -> Self {
        CpuProfile {
            busy: AtomicBool::new(false),
            table: UnsafeCell::new(None),
        }
    }

    /// Runs `f` on the table, waiting for the CPU's counter to let go (control paths only).
    fn with_table<T>(&self, f: impl FnOnce(&mut Option<ProfileTable>) -> T) -> T {
        while self.busy.swap(true, Ordering::Acquire) {
            core::hint::spin_loop();
        }
        // SAFETY: `busy` is ours: nobody else touches the table.
        let r = f(unsafe { &mut *self.table.get() });
        self.busy.store(false, Ordering::Release);
        r
    }
}

/// The profile ops' callback: one hit for `ip` on this CPU.
fn profile_op<P: Platform, const CPUS: usize>(
    ip: u64,
    _parent_ip: u64,
    op: &FtraceOps,
    _regs: Option<&mut FtraceRegs>,
) {
    // SAFETY: the instance registered this ops with `private` = itself (`&'static`).
    let a = unsafe { &*op.private().cast::<TraceArray<P, CPUS>>() };
    let p = &a.profile[a.cpu()];
    if p.busy.swap(true, Ordering::Acquire) {
        a.profile_missed.fetch_add(1, Ordering::Relaxed);
        return;
    }
    // SAFETY: `busy` was clear and is now ours.
    if let Some(t) = unsafe { &mut *p.table.get() } {
        t.hit(ip);
    }
    p.busy.store(false, Ordering::Release);
}

impl<P: Platform, const CPUS: usize> TraceArray<P, CPUS> {
    /// Calls the profiler could not count (its CPU's table was being read).
    pub fn profile_missed(&self) -> u64 {
        self.profile_missed.load(Ordering::Relaxed)
    }

    /// `function_profile_enabled`: on, the counters start from zero and the profile ops is
    /// registered (its sites patched); off, it is unregistered and the counts stay readable.
    pub(super) fn set_profiling(&'static self, c: &mut Control, on: bool) -> Result<(), Errno> {
        if on == c.profile_ops.is_some() {
            return Ok(());
        }
        if on {
            let n = c.sites.as_deref().map_or(0, |s| s.records().0.len());
            for p in &self.profile[..self.nr_cpus()] {
                p.with_table(|t| *t = Some(ProfileTable::with_capacity(n + 1)));
            }
            self.profile_missed.store(0, Ordering::Relaxed);
        }
        self.update_sites(c, |c| {
            match c.profile_ops.take() {
                Some(op) => self.dispatcher.unregister(&op)?,
                None => {
                    let op = Box::new(FtraceOps::with_private(
                        profile_op::<P, CPUS>,
                        OpsFlags::empty(),
                        core::ptr::from_ref(self).cast(),
                        None,
                    ));
                    // SAFETY: the ops lives in `c.profile_ops` until `unregister` returned.
                    unsafe { self.dispatcher.register_dynamic(&op)? };
                    c.profile_ops = Some(op);
                }
            }
            Ok(())
        })
    }

    /// `trace_stat/function<cpu>`: a copy of the CPU's table, printed.
    fn write_profile(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        let Some(p) = self.profile.get(cpu as usize) else {
            return Ok(());
        };
        let table = p.with_table(|t| t.clone()).unwrap_or_default();
        table.write_stat(w, self.platform().symbols(), ProfileMode::Hits, 0)
    }
}

/// The top level's call-site files and its profiler.
pub(super) struct ArrayRecords<P: Platform, const CPUS: usize> {
    pub(super) array: &'static TraceArray<P, CPUS>,
    pub(super) records: PatchRecords<super::sites::ArraySites<P, CPUS>>,
}

impl<P: Platform, const CPUS: usize> FunctionRecords for ArrayRecords<P, CPUS> {
    fn write_available(&self, w: &mut dyn fmt::Write, addrs: bool) -> fmt::Result {
        self.records.write_available(w, addrs)
    }
    fn write_enabled(&self, w: &mut dyn fmt::Write, touched: bool) -> fmt::Result {
        self.records.write_enabled(w, touched)
    }
    fn write_total_info(&self, w: &mut dyn fmt::Write) -> fmt::Result {
        self.records.write_total_info(w)
    }
    fn has_profiler(&self) -> bool {
        true
    }
    fn write_profile(&self, cpu: u32, w: &mut dyn fmt::Write) -> fmt::Result {
        self.array.write_profile(cpu, w)
    }
}
