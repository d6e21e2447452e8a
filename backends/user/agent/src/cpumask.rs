//! `tracing_cpumask` in the traced program: events are recorded only on the CPUs of the mask.
//!
//! In userspace the CPU of an event is the thread's current CPU (the agent's CPU attribution,
//! rseq's `cpu_id_start`), so an entry is recorded only when the thread runs on a CPU of the
//! mask, as the kernel records nothing into a masked-out CPU's buffer. A function_graph return
//! is recorded with its entry (the frame is on the shadow stack).
//!
//! Invariant: [`CPU_FILTERED`] is true whenever the mask is not all CPUs; it turns the assembly
//! fast paths off ([`crate::handler::update_fast_path`]), so masked tracing always goes
//! through the full-save entry path, where [`admits`] decides. A change is not atomic for the
//! threads recording meanwhile (plain relaxed words, no protocol): an event in flight during
//! `echo > tracing_cpumask` may follow the old mask or the new one, as one racing with the
//! kernel's per-CPU record disable does.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// CPUs the mask can name.
pub const MAX_CPUS: usize = 1024;

/// The mask, bit n = CPU n (meaningful while [`CPU_FILTERED`]).
static MASK: [AtomicU64; MAX_CPUS / 64] = [const { AtomicU64::new(0) }; MAX_CPUS / 64];

/// The mask is not all CPUs (kept by [`set_mask`]).
pub static CPU_FILTERED: AtomicBool = AtomicBool::new(false);

/// Sets the mask (`None`: all CPUs). A CPU past [`MAX_CPUS`] is never in a mask.
pub fn set_mask(words: Option<&[u64]>) {
    match words {
        None => CPU_FILTERED.store(false, Ordering::Relaxed),
        Some(w) => {
            for (i, m) in MASK.iter().enumerate() {
                m.store(w.get(i).copied().unwrap_or(0), Ordering::Relaxed);
            }
            CPU_FILTERED.store(true, Ordering::Relaxed);
        }
    }
}

/// Whether an event on `cpu` is recorded.
#[inline]
pub fn admits(cpu: u32) -> bool {
    if !CPU_FILTERED.load(Ordering::Relaxed) {
        return true;
    }
    let cpu = cpu as usize;
    cpu < MAX_CPUS && MASK[cpu / 64].load(Ordering::Relaxed) >> (cpu % 64) & 1 == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_selects_cpus() {
        assert!(admits(0) && admits(5000));
        set_mask(Some(&[0b10, 1]));
        assert!(!admits(0) && admits(1) && !admits(2) && admits(64) && !admits(65));
        assert!(!admits(5000));
        set_mask(None);
        assert!(admits(0) && admits(2));
    }
}
