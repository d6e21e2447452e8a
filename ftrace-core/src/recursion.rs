//! Recursion protection: the kernel's `trace_recursion` bits (`include/linux/trace_recursion.h`).
//!
//! Every task (thread, or CPU on bare metal) owns one [`TraceRecursion`] word. A tracing path
//! takes the bit of its range (`start`, e.g. [`TRACE_LIST_START`] for the ops-list walk,
//! [`TRACE_FTRACE_START`] for a callback) for the execution context it runs in (normal, softirq,
//! irq, nmi). Finding that bit already set means the path re-entered itself in the same context:
//! the kernel then allows exactly one more level through the context's *transition* bit (for
//! the window where an interrupt has begun but the context level is not yet updated), and
//! refuses anything deeper. So a traced function called from inside a callback can never
//! recurse without bound.
//!
//! Invariant: only the owning task and code nested inside it on the same CPU (interrupts,
//! signal handlers) touch a word, and nested code always clears what it set before returning.
//! Loads and stores are therefore plain (`Relaxed`) accesses with compiler fences; no
//! read-modify-write instruction is needed.

use crate::platform::ExecContext;
use crate::sync::{AtomicUsize, Ordering, loom_const_fn};
use core::sync::atomic::compiler_fence;

/// `TRACE_FTRACE_BIT`: first bit of the range callbacks take (`ftrace_test_recursion_trylock`).
pub const TRACE_FTRACE_START: u32 = 0;
/// `TRACE_INTERNAL_BIT` = `TRACE_LIST_START`: first bit of the range the ops-list walk and the
/// recursion-assist path take.
pub const TRACE_LIST_START: u32 = 5;
/// `TRACE_CTX_TRANSITION`: offset of the transition bit inside a range.
pub const TRACE_CTX_TRANSITION: u32 = 4;
/// `TRACE_BRANCH_BIT`.
pub const TRACE_BRANCH_BIT: u32 = 10;
/// `TRACE_IRQ_BIT`.
pub const TRACE_IRQ_BIT: u32 = 11;
/// `TRACE_GRAPH_BIT`: set while inside a `set_graph_function` function.
pub const TRACE_GRAPH_BIT: u32 = 12;
/// `TRACE_GRAPH_DEPTH_START_BIT` (two bits of saved depth follow).
pub const TRACE_GRAPH_DEPTH_START_BIT: u32 = 13;
/// `TRACE_GRAPH_NOTRACE_BIT`: set while inside a `set_graph_notrace` function.
pub const TRACE_GRAPH_NOTRACE_BIT: u32 = 15;
/// `TRACE_RECORD_RECURSION_BIT`.
pub const TRACE_RECORD_RECURSION_BIT: u32 = 16;

/// The bit offset of `ctx` inside a range: `TRACE_CTX_NORMAL - interrupt_context_level()`
/// (NMI 0, IRQ 1, softirq 2, normal 3).
#[inline]
pub const fn context_bit(ctx: ExecContext) -> u32 {
    3 - ctx as u32
}

/// One task's `trace_recursion` word.
///
/// `#[repr(transparent)]` over a machine word, so a Linux backend may view the kernel's own
/// `current->trace_recursion` (an `unsigned long`) as one (not under `cfg(loom)`).
#[repr(transparent)]
#[derive(Debug)]
pub struct TraceRecursion(AtomicUsize);

impl Default for TraceRecursion {
    fn default() -> Self {
        Self::new()
    }
}

impl TraceRecursion {
    loom_const_fn! {
        /// A word with no bit set.
        pub fn new() -> TraceRecursion {
            TraceRecursion(AtomicUsize::new(0))
        }
    }

    /// The raw bits (for tests and diagnostics).
    #[inline]
    pub fn bits(&self) -> usize {
        self.0.load(Ordering::Relaxed)
    }

    /// Whether `bit` is set (`trace_recursion_test`).
    #[inline]
    pub fn test(&self, bit: u32) -> bool {
        self.bits() & (1 << bit) != 0
    }

    /// Sets `bit` (`trace_recursion_set`).
    #[inline]
    pub fn set(&self, bit: u32) {
        self.0.store(self.bits() | (1 << bit), Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
    }

    /// Clears `bit` (`trace_recursion_clear`).
    #[inline]
    pub fn clear(&self, bit: u32) {
        compiler_fence(Ordering::SeqCst);
        self.0.store(self.bits() & !(1 << bit), Ordering::Relaxed);
    }

    /// `trace_test_and_set_recursion(ip, parent_ip, start)`: takes the bit of range `start`
    /// for context `ctx`, or its transition bit if that is taken; `None` if both are.
    #[inline]
    pub fn try_lock(&self, ctx: ExecContext, start: u32) -> Option<RecursionGuard<'_>> {
        let val = self.bits();
        let mut bit = context_bit(ctx) + start;
        if val & (1 << bit) != 0 {
            bit = TRACE_CTX_TRANSITION + start;
            if val & (1 << bit) != 0 {
                return recursion_refused();
            }
        }
        self.0.store(val | (1 << bit), Ordering::Relaxed);
        compiler_fence(Ordering::SeqCst);
        Some(RecursionGuard { word: self, bit })
    }

    /// `ftrace_test_recursion_trylock()`: what a callback wraps its body in.
    #[inline]
    pub fn try_lock_ftrace(&self, ctx: ExecContext) -> Option<RecursionGuard<'_>> {
        self.try_lock(ctx, TRACE_FTRACE_START)
    }
}

#[cold]
#[inline(never)]
fn recursion_refused<'a>() -> Option<RecursionGuard<'a>> {
    None
}

/// A held recursion bit; dropping it clears the bit (`trace_clear_recursion`).
#[derive(Debug)]
#[must_use = "the bit is released when the guard is dropped"]
pub struct RecursionGuard<'a> {
    word: &'a TraceRecursion,
    bit: u32,
}

impl RecursionGuard<'_> {
    /// The bit this guard holds.
    #[inline]
    pub fn bit(&self) -> u32 {
        self.bit
    }
}

impl Drop for RecursionGuard<'_> {
    #[inline]
    fn drop(&mut self) {
        self.word.clear(self.bit);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn bits_per_context() {
        let w = TraceRecursion::new();
        let g = w.try_lock(ExecContext::Normal, TRACE_LIST_START).unwrap();
        assert_eq!(g.bit(), 8); // TRACE_INTERNAL_SIRQ_BIT + 0 = 5 + 3
        let irq = w.try_lock(ExecContext::Irq, TRACE_LIST_START).unwrap();
        assert_eq!(irq.bit(), 6);
        let nmi = w.try_lock(ExecContext::Nmi, TRACE_LIST_START).unwrap();
        assert_eq!(nmi.bit(), 5);
        drop((nmi, irq));
        // Same context again: one transition level, then refusal.
        let t = w.try_lock(ExecContext::Normal, TRACE_LIST_START).unwrap();
        assert_eq!(t.bit(), TRACE_LIST_START + TRACE_CTX_TRANSITION);
        assert!(w.try_lock(ExecContext::Normal, TRACE_LIST_START).is_none());
        // Other ranges are independent.
        assert_eq!(w.try_lock_ftrace(ExecContext::Normal).unwrap().bit(), 3);
        drop(t);
        drop(g);
        assert_eq!(w.bits(), 0);
    }

    #[test]
    fn softirq_bits() {
        let w = TraceRecursion::new();
        let g = w.try_lock_ftrace(ExecContext::Softirq).unwrap();
        assert_eq!(g.bit(), 2);
        assert!(w.test(2));
        drop(g);
        assert!(!w.test(2));
    }
}
