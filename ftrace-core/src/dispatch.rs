//! The ops dispatcher: what a trampoline calls on every traced function
//! (`ftrace_trace_function`, `ftrace_ops_list_func`).
//!
//! Registered ops form a singly linked list through [`FtraceOps`]'s `next` pointer, like the
//! kernel's `ftrace_ops_list`. Registering publishes a new head by pointer swap; unregistering
//! swings one `next` pointer past the ops, then waits a grace period
//! ([`Reclaim::synchronize`]) before the ops may be reused or freed. Readers never lock.
//!
//! [`Dispatcher::call`] has two paths, chosen like the kernel's `update_ftrace_function`:
//! - **direct**: exactly one ops is registered, it is static (`&'static`, never freed) and has
//!   none of [`OpsFlags::NEEDS_LIST`]: one load of the published ops, two loads to see that
//!   its hashes are empty, and the call. No guard is taken: nothing reachable from here can be
//!   freed. (An ops with a filter falls through to the list walk, which reads hashes under a
//!   guard.)
//! - **list walk** (`ftrace_ops_list_func`): takes the [`TRACE_LIST_START`] recursion bit for
//!   the current context, pins the reclaimer, and calls every ops that is not a stub, whose
//!   RCU condition holds, that [admits](FtraceOps::admits) the ip and whose pid filter admits
//!   the current task.
//!
//! Invariants: an ops reachable from the list or the direct slot is never freed before every
//! reader that could see it has finished (dynamic ops are only reachable from the list, read
//! under a guard); an ops registered before a call begins is seen by that call.

use crate::errno::Errno;
use crate::filter::FtraceHash;
use crate::ops::{FtraceOps, FtraceRegs, OpsFlags};
use crate::platform::{Reclaim, RecursionState};
use crate::reclaim::Published;
use crate::recursion::TRACE_LIST_START;
use crate::sync::{AtomicBool, AtomicPtr, AtomicUsize, Ordering, loom_const_fn, spin_loop};
use core::ptr;

/// The ops list and its dispatch entry point.
///
/// A backend creates one (usually a `static`: [`Dispatcher::new`] is `const`) and hands it to
/// its trampolines, which call [`Dispatcher::call`].
pub struct Dispatcher<R: Reclaim, P: RecursionState> {
    /// The single static ops the direct path calls, or null.
    direct: AtomicPtr<FtraceOps>,
    /// Head of the ops list (`ftrace_ops_list`), null when empty.
    head: AtomicPtr<FtraceOps>,
    /// Serialises writers (`ftrace_lock`).
    lock: AtomicBool,
    /// Registered ops (written under `lock`).
    count: AtomicUsize,
    reclaim: R,
    platform: P,
}

impl<R: Reclaim, P: RecursionState> core::fmt::Debug for Dispatcher<R, P> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Dispatcher")
            .field("ops", &self.count.load(Ordering::Relaxed))
            .field("direct", &!self.direct.load(Ordering::Relaxed).is_null())
            .finish_non_exhaustive()
    }
}

struct WriterLock<'a>(&'a AtomicBool);

impl Drop for WriterLock<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl<R: Reclaim, P: RecursionState> Dispatcher<R, P> {
    loom_const_fn! {
        /// A dispatcher with no ops, reclaiming through `reclaim` and asking `platform` for the
        /// recursion word, execution context and pid.
        pub fn new(reclaim: R, platform: P) -> Dispatcher<R, P> {
            Dispatcher {
                direct: AtomicPtr::new(ptr::null_mut()),
                head: AtomicPtr::new(ptr::null_mut()),
                lock: AtomicBool::new(false),
                count: AtomicUsize::new(0),
                reclaim,
                platform,
            }
        }
    }

    /// The reclaimer.
    #[inline]
    pub fn reclaim(&self) -> &R {
        &self.reclaim
    }

    /// The platform.
    #[inline]
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// Number of registered ops.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether no ops is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether calls currently take the direct single-ops path.
    pub fn is_direct(&self) -> bool {
        !self.direct.load(Ordering::Acquire).is_null()
    }

    /// Dispatches one traced call: `ip` is the call site, `parent_ip` the return address into
    /// the caller, `regs` the trampoline's save area if it has one.
    #[inline]
    pub fn call(&self, ip: u64, parent_ip: u64, regs: Option<&mut FtraceRegs>) {
        let direct = self.direct.load(Ordering::Acquire);
        if direct.is_null() {
            return self.list_func(ip, parent_ip, regs);
        }
        // SAFETY: only `&'static` ops are ever stored in `direct` (see `update_direct`).
        let op = unsafe { &*direct };
        (op.func())(ip, parent_ip, op, regs);
    }

    /// `ftrace_ops_list_func`: the list walk, under the recursion guard and a read-side guard.
    #[inline(never)]
    pub fn list_func(&self, ip: u64, parent_ip: u64, mut regs: Option<&mut FtraceRegs>) {
        if self.head.load(Ordering::Relaxed).is_null() {
            return;
        }
        let p = &self.platform;
        let Some(_bit) = p
            .trace_recursion()
            .try_lock(p.exec_context(), TRACE_LIST_START)
        else {
            return;
        };
        let _guard = self.reclaim.pin();
        let mut cur = self.head.load(Ordering::Acquire);
        // SAFETY: `_guard` is held: every ops reachable from the list stays allocated until
        // it is dropped (unregister waits a grace period after unlinking).
        while let Some(op) = unsafe { cur.as_ref() } {
            // SAFETY: `_guard` is held.
            if unsafe { self.wants_call(op, ip, regs.is_some()) } {
                (op.func())(ip, parent_ip, op, regs.as_deref_mut());
            }
            cur = op.next.load(Ordering::Acquire);
        }
    }

    /// Whether the list walk calls `op` for `ip`: not a stub, RCU condition, hashes
    /// (`ftrace_ops_test`), pid filter.
    ///
    /// # Safety
    /// A read-side guard of `self.reclaim` is held.
    #[inline]
    unsafe fn wants_call(&self, op: &FtraceOps, ip: u64, have_regs: bool) -> bool {
        let p = &self.platform;
        let flags = op.flags();
        if flags.contains(OpsFlags::STUB) || (flags.contains(OpsFlags::RCU) && !p.rcu_is_watching())
        {
            return false;
        }
        // SAFETY: the caller holds a read-side guard.
        if !unsafe { op.admits(ip, have_regs) } {
            return false;
        }
        match op.pid_filter() {
            Some(f) if flags.contains(OpsFlags::PID) => {
                // SAFETY: the caller holds a read-side guard.
                unsafe { f.admits_pinned(p.current_pid() as u32) }
            }
            _ => true,
        }
    }

    fn lock(&self) -> WriterLock<'_> {
        while self
            .lock
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spin_loop();
        }
        WriterLock(&self.lock)
    }

    /// Registers a static ops (`register_ftrace_function`). Static ops may take the direct
    /// path.
    ///
    /// Errors as the kernel's: `EINVAL` if it is [`OpsFlags::DELETED`], `EBUSY` if it is
    /// registered or still being removed.
    pub fn register(&self, op: &'static FtraceOps) -> Result<(), Errno> {
        self.add(op, false)
    }

    /// Registers an ops that is not static data (the kernel sets `FTRACE_OPS_FL_DYNAMIC`):
    /// it is always called through the list walk under a read-side guard.
    ///
    /// # Safety
    /// `op` must stay alive (not moved, not freed) until [`Dispatcher::unregister`] has
    /// returned for it.
    pub unsafe fn register_dynamic(&self, op: &FtraceOps) -> Result<(), Errno> {
        self.add(op, true)
    }

    fn add(&self, op: &FtraceOps, dynamic: bool) -> Result<(), Errno> {
        let _w = self.lock();
        let flags = op.flags();
        if flags.contains(OpsFlags::DELETED) {
            return Err(Errno::EINVAL);
        }
        if flags.intersects(OpsFlags::ENABLED | OpsFlags::REMOVING) {
            return Err(Errno::EBUSY);
        }
        let mut set = OpsFlags::ENABLED | OpsFlags::INITIALIZED;
        let mut clear = OpsFlags::empty();
        if dynamic {
            set |= OpsFlags::DYNAMIC;
        } else {
            clear |= OpsFlags::DYNAMIC;
        }
        op.set_flags(set, clear);
        op.next
            .store(self.head.load(Ordering::Relaxed), Ordering::Relaxed);
        self.head
            .store(ptr::from_ref(op).cast_mut(), Ordering::Release);
        self.count.fetch_add(1, Ordering::Relaxed);
        self.update_direct();
        Ok(())
    }

    /// Unregisters `op` (`unregister_ftrace_function`): unlinks it, then waits a grace period,
    /// so a dynamic ops can be freed as soon as this returns. A static ops on the direct path
    /// may still be entered by a call that loaded it just before (as in the kernel).
    ///
    /// `EBUSY` if `op` is not registered.
    pub fn unregister(&self, op: &FtraceOps) -> Result<(), Errno> {
        {
            let _w = self.lock();
            if !op.flags().contains(OpsFlags::ENABLED) {
                return Err(Errno::EBUSY);
            }
            let target = ptr::from_ref(op).cast_mut();
            let mut link = &self.head;
            loop {
                let cur = link.load(Ordering::Relaxed);
                if cur.is_null() {
                    return Err(Errno::EBUSY);
                }
                if cur == target {
                    break;
                }
                // SAFETY: list members are alive while linked, and we hold the writer lock.
                link = unsafe { &(*cur).next };
            }
            link.store(op.next.load(Ordering::Relaxed), Ordering::Release);
            self.count.fetch_sub(1, Ordering::Relaxed);
            self.update_direct();
            op.set_flags(OpsFlags::REMOVING, OpsFlags::ENABLED);
        }
        self.reclaim.synchronize();
        op.set_flags(OpsFlags::empty(), OpsFlags::REMOVING);
        Ok(())
    }

    /// Republishes the direct slot (writer lock held): the head if it is the only ops, static,
    /// without list-only flags and without hashes; null otherwise.
    fn update_direct(&self) {
        let head = self.head.load(Ordering::Relaxed);
        let mut direct = ptr::null_mut();
        if self.count.load(Ordering::Relaxed) == 1 {
            // SAFETY: the head is alive while linked; we hold the writer lock.
            let op = unsafe { &*head };
            if !op.flags().intersects(OpsFlags::NEEDS_LIST) && op.unfiltered() {
                direct = head;
            }
        }
        self.direct.store(direct, Ordering::Release);
    }

    /// Replaces `op`'s filter hash (`ftrace_set_filter` with reset): the old one, if owned, is
    /// freed after a grace period. An empty hash (or `Published::None`) admits every function.
    pub fn set_filter(&self, op: &FtraceOps, hash: Published<FtraceHash>) {
        let hash = drop_if_empty(hash);
        let w = self.lock();
        let old = op.filter.swap(hash);
        self.update_direct();
        drop(w);
        // Retired outside the writer lock: a grace period may be long.
        old.retire(&self.reclaim);
    }

    /// Replaces `op`'s notrace hash (`ftrace_set_notrace`).
    pub fn set_notrace(&self, op: &FtraceOps, hash: Published<FtraceHash>) {
        let hash = drop_if_empty(hash);
        let w = self.lock();
        let old = op.notrace.swap(hash);
        self.update_direct();
        drop(w);
        old.retire(&self.reclaim);
    }

    /// Calls `f` for every registered ops, newest first, under a read-side guard: the view
    /// the patch engine uses to ask which ops admit a call site and with which flags.
    pub fn for_each_ops(&self, mut f: impl FnMut(OpsRef<'_>)) {
        let _guard = self.reclaim.pin();
        let mut cur = self.head.load(Ordering::Acquire);
        // SAFETY: `_guard` is held (see `list_func`).
        while let Some(op) = unsafe { cur.as_ref() } {
            f(OpsRef { op });
            cur = op.next.load(Ordering::Acquire);
        }
    }
}

/// An empty hash is published as no hash (same meaning), so the ops can stay on the direct
/// path.
fn drop_if_empty(hash: Published<FtraceHash>) -> Published<FtraceHash> {
    match hash {
        Published::Static(h) if h.is_empty() => Published::None,
        #[cfg(feature = "alloc")]
        Published::Owned(h) if h.is_empty() => Published::None,
        h => h,
    }
}

/// A registered ops seen inside [`Dispatcher::for_each_ops`], whose hashes may be read.
#[derive(Clone, Copy, Debug)]
pub struct OpsRef<'g> {
    op: &'g FtraceOps,
}

impl<'g> OpsRef<'g> {
    /// The ops.
    pub fn ops(&self) -> &'g FtraceOps {
        self.op
    }

    /// Its flags.
    pub fn flags(&self) -> OpsFlags {
        self.op.flags()
    }

    /// Whether it admits `ip` (`ftrace_ops_test`, with registers available).
    pub fn admits(&self, ip: u64) -> bool {
        // SAFETY: an `OpsRef` only exists inside `for_each_ops`, under a read-side guard.
        unsafe { self.op.admits(ip, true) }
    }

    /// Its filter hash (`None`: every function).
    pub fn filter(&self) -> Option<&'g FtraceHash> {
        // SAFETY: as in `admits`.
        unsafe { self.op.filter_hash() }
    }

    /// Its notrace hash (`None`: no function excluded).
    pub fn notrace(&self) -> Option<&'g FtraceHash> {
        // SAFETY: as in `admits`.
        unsafe { self.op.notrace_hash() }
    }
}
