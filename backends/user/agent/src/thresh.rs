//! `tracing_thresh` for function_graph: only calls that last at least the threshold are
//! recorded, each as its exit alone (no entry event), as the kernel's graph tracer does when
//! `tracing_thresh` is set (`trace_graph_thresh_entry` / `trace_graph_thresh_return`).
//!
//! The threshold is given in nanoseconds (the file takes microseconds) and kept in the units
//! the graph events are stamped in ([`THRESH`]): TSC ticks for the `local` and `x86-tsc`
//! clocks, nanoseconds for `mono`. Invariant: the comparison costs the exit path one relaxed
//! load and a subtraction; the TSC rate is measured once per process, off the hot paths.

use core::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

use crate::clock::{TscConversion, TscPair};
use crate::config::ClockKind;

/// The threshold in trace-clock units (0: off).
pub static THRESH: AtomicU64 = AtomicU64::new(0);

/// Sets the threshold to `ns` nanoseconds for events stamped with `clock` (0: off). The first
/// call with a TSC clock and a non-zero threshold measures the TSC rate (about 2 ms).
pub fn set(ns: u64, clock: ClockKind) {
    THRESH.store(units(ns, clock), Ordering::Relaxed);
}

/// `ns` nanoseconds in the units of `clock`'s events.
fn units(ns: u64, clock: ClockKind) -> u64 {
    match (ns, clock.is_tsc()) {
        (0, _) => 0,
        (ns, false) => ns,
        (ns, true) => tsc_ticks(ns),
    }
}

/// Whether a call from `calltime` to `rettime` (trace-clock units) is recorded.
#[inline(always)]
pub fn lasted(calltime: u64, rettime: u64) -> bool {
    rettime.wrapping_sub(calltime) >= THRESH.load(Ordering::Relaxed)
}

/// `ns` in TSC ticks (at least 1).
fn tsc_ticks(ns: u64) -> u64 {
    let mult = rate().mult.max(1);
    let ticks = ((ns as u128) << 32) / mult as u128;
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

/// The TSC rate, measured once between two `(tsc, CLOCK_MONOTONIC)` pairs 2 ms apart.
pub(crate) fn rate() -> TscConversion {
    static RATE: OnceLock<TscConversion> = OnceLock::new();
    *RATE.get_or_init(|| {
        let a = TscPair::now();
        loop {
            std::thread::sleep(std::time::Duration::from_millis(2));
            if let Some(c) = TscConversion::calibrate(a, TscPair::now()) {
                return c;
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_in_clock_units() {
        assert_eq!(units(20_000, ClockKind::Mono), 20_000);
        assert_eq!(units(0, ClockKind::Mono), 0);
        assert_eq!(units(0, ClockKind::Local), 0);
        assert!(
            units(1, ClockKind::Local) >= 1,
            "never 0 (off) for a threshold"
        );
        // 1 ms in TSC ticks, against the rate measured independently here.
        let ticks = units(1_000_000, ClockKind::X86Tsc);
        assert_eq!(units(1_000_000, ClockKind::Local), ticks);
        let a = TscPair::now();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let want = TscConversion::calibrate(a, TscPair::now()).unwrap().khz();
        assert!(
            ticks.abs_diff(want) * 100 < want,
            "{ticks} ticks for 1 ms, {want} expected"
        );
    }
}
