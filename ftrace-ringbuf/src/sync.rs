//! The one place this crate's atomics come from: ftrace-core's [`sync`](ftrace_core::sync)
//! shim (`core::sync::atomic` normally, `loom`'s model-checked atomics under `cfg(loom)`).
//!
//! Besides them it provides [`Local`], the counterpart of the kernel's `local_t`: a
//! word that only the (strictly nested) writers of one buffer modify and that anyone may read.
//! Its read-modify-write operations need to be atomic only against interrupts (or signal
//! handlers) on the same CPU, never against other CPUs, so on x86_64 they are single
//! instructions without the `lock` prefix (an interrupt lands between instructions, never in
//! one). That is what keeps the writer's fast path in the nanoseconds. Elsewhere, and under
//! loom, they are ordinary relaxed atomic read-modify-writes.
//!
//! Other CPUs only load a `Local` (an aligned 8-byte load is atomic). The ordering a reader
//! needs never comes from a `Local`: it comes from the publication protocol's release stores
//! and acquire loads (the commit index, the page links) and fences, as in the kernel. On
//! x86_64 each `Local` operation is also a compiler barrier (its `asm!` may touch any memory),
//! so the writer's stores stay in program order around it; the hardware keeps stores in order
//! (TSO).

pub(crate) use ftrace_core::sync::{
    AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence, spin_loop,
};
/// A word modified only by the nested writers of one buffer (the kernel's `local_t`).
///
/// Loads are atomic and may come from any CPU; stores and read-modify-writes must only come
/// from the buffer's writers (or from a reader that has excluded the writers from this word).
#[derive(Debug)]
pub(crate) struct Local(AtomicUsize);

#[cfg(all(target_arch = "x86_64", not(loom)))]
impl Local {
    /// Adds `v`, returning the old value.
    #[inline(always)]
    pub(crate) fn fetch_add(&self, v: usize) -> usize {
        let mut old = v;
        // SAFETY: `xadd` on a valid, aligned, live word we only ever access atomically.
        // Without `lock` it is atomic against interrupts/signals on this CPU, which is the
        // only concurrent modification the type's contract allows; other CPUs only load.
        unsafe {
            core::arch::asm!(
                "xadd qword ptr [{p}], {v}",
                p = in(reg) self.0.as_ptr(),
                v = inout(reg) old,
                options(nostack),
            );
        }
        old
    }

    /// Adds `v` (`local_add`).
    #[inline(always)]
    pub(crate) fn add(&self, v: usize) {
        // SAFETY: as in `fetch_add`: one non-locked instruction on our own aligned word.
        unsafe {
            core::arch::asm!(
                "add qword ptr [{p}], {v}",
                p = in(reg) self.0.as_ptr(),
                v = in(reg) v,
                options(nostack),
            );
        }
    }

    /// Adds one (`local_inc`).
    #[inline(always)]
    pub(crate) fn inc(&self) {
        // SAFETY: as in `fetch_add`: one non-locked instruction on our own aligned word.
        unsafe {
            core::arch::asm!(
                "add qword ptr [{p}], 1",
                p = in(reg) self.0.as_ptr(),
                options(nostack),
            );
        }
    }

    /// Compares with `old` and, if equal, replaces with `new` (`local_cmpxchg`). Returns the
    /// value found.
    #[inline(always)]
    pub(crate) fn cmpxchg(&self, old: usize, new: usize) -> usize {
        let mut found = old;
        // SAFETY: as in `fetch_add`: one non-locked `cmpxchg` on our own aligned word.
        unsafe {
            core::arch::asm!(
                "cmpxchg qword ptr [{p}], {new}",
                p = in(reg) self.0.as_ptr(),
                new = in(reg) new,
                inout("rax") found,
                options(nostack),
            );
        }
        found
    }
}

#[cfg(not(all(target_arch = "x86_64", not(loom))))]
impl Local {
    /// Adds `v`, returning the old value.
    #[inline(always)]
    pub(crate) fn fetch_add(&self, v: usize) -> usize {
        self.0.fetch_add(v, Ordering::Relaxed)
    }

    /// Adds `v` (`local_add`).
    #[inline(always)]
    pub(crate) fn add(&self, v: usize) {
        self.0.fetch_add(v, Ordering::Relaxed);
    }

    /// Adds one (`local_inc`).
    #[inline(always)]
    pub(crate) fn inc(&self) {
        self.add(1)
    }

    /// Compares with `old` and, if equal, replaces with `new` (`local_cmpxchg`). Returns the
    /// value found.
    #[inline(always)]
    pub(crate) fn cmpxchg(&self, old: usize, new: usize) -> usize {
        match self
            .0
            .compare_exchange(old, new, Ordering::Relaxed, Ordering::Relaxed)
        {
            Ok(v) | Err(v) => v,
        }
    }
}

impl Local {
    /// A new word holding `v`.
    pub(crate) fn new(v: usize) -> Self {
        Local(AtomicUsize::new(v))
    }

    /// The current value.
    #[inline(always)]
    pub(crate) fn get(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Stores `v`.
    #[inline(always)]
    pub(crate) fn set(&self, v: usize) {
        self.0.store(v, Ordering::Relaxed)
    }

    /// Adds `v`, returning the new value (`local_add_return`).
    #[inline(always)]
    pub(crate) fn add_return(&self, v: usize) -> usize {
        self.fetch_add(v).wrapping_add(v)
    }

    /// Subtracts `v`.
    #[inline(always)]
    pub(crate) fn sub(&self, v: usize) {
        self.add(v.wrapping_neg())
    }
}

/// Fault injection for the nested-writer test: between the writer's atomic steps it calls a
/// thread-local hook through which a test runs a whole nested write (like an interrupt).
#[cfg(test)]
pub(crate) mod inject {
    use std::boxed::Box;
    use std::cell::RefCell;

    type Hook = Box<dyn FnMut(&'static str)>;

    std::thread_local! {
        static HOOK: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    /// Installs `hook` for this thread (replacing any), or removes it with `None`.
    pub(crate) fn set(hook: Option<Hook>) {
        HOOK.with(|h| *h.borrow_mut() = hook);
    }

    /// Calls the hook, if any. The hook is taken out while it runs, so the writes it performs
    /// do not recurse into it.
    pub(crate) fn point(step: &'static str) {
        let taken = HOOK.with(|h| h.borrow_mut().take());
        if let Some(mut f) = taken {
            f(step);
            HOOK.with(|h| {
                let mut slot = h.borrow_mut();
                if slot.is_none() {
                    *slot = Some(f);
                }
            });
        }
    }
}

/// Fault injection point (a no-op outside unit tests).
#[cfg(not(test))]
pub(crate) mod inject {
    /// Does nothing.
    #[inline(always)]
    pub(crate) fn point(_step: &'static str) {}
}
