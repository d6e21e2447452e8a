//! The timer tick: the local APIC timer, periodic, counting ticks per boot.
//!
//! The kernel has no scheduler, so the tick runs only while something waits for it
//! ([`wait_ticks`]); each tick is one interrupt on [`VECTOR_TIMER`], traced as Linux traces
//! its local timer interrupt (`irq_vectors:local_timer_entry` / `local_timer_exit`).
//! Invariant: the tick is stopped again before [`wait_ticks`] returns, so the rest of the
//! session sees only the interrupts it asks for.

use crate::sync::{AtomicU64, Ordering};
use crate::{apic, events, port};

/// The tick's vector (Linux's `LOCAL_TIMER_VECTOR`).
pub const VECTOR_TIMER: u8 = 0xEC;

/// Bus clocks between ticks: 1 ms at QEMU's 1 GHz APIC clock.
const TICK_COUNT: u32 = 1_000_000;

static TICKS: AtomicU64 = AtomicU64::new(0);

/// Ticks since boot (every CPU's).
pub fn ticks() -> u64 {
    TICKS.load(Ordering::Relaxed)
}

/// The tick's interrupt handler, between the two trace events.
pub(crate) fn handle_tick() {
    events::trace_local_timer_entry(i32::from(VECTOR_TIMER));
    TICKS.fetch_add(1, Ordering::Relaxed);
    apic::eoi();
    events::trace_local_timer_exit(i32::from(VECTOR_TIMER));
}

/// Runs the tick on this CPU with interrupts on until `n` ticks have passed, then stops it
/// and turns interrupts off again; returns the ticks counted. Call with interrupts off.
pub fn wait_ticks(n: u64) -> u64 {
    let start = ticks();
    apic::timer_start_periodic(VECTOR_TIMER, TICK_COUNT);
    // SAFETY: the IDT is loaded and routes VECTOR_TIMER to `handle_tick` (idt::isr_dispatch).
    unsafe { port::irq_enable() };
    while ticks() - start < n {
        core::hint::spin_loop();
    }
    port::irq_disable();
    apic::timer_stop();
    ticks() - start
}
